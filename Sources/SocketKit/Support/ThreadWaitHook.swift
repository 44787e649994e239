// SPDX-License-Identifier: MIT
import SocketKitC

/// The calling thread's one-shot wait hook (`sk_thread_set_wait_hook`,
/// `EventLoopGroup.setWaitHookForCurrentThread`): set by a host, run by SocketKit just before
/// that thread blocks inside SocketKit, then forgotten.
///
/// What it is for: Python's C extension keeps the interpreter lock (GIL) from the first
/// callback of a driven loop's iteration to its end, instead of taking and dropping it
/// around every callback, and drops it here before the thread could wait for another
/// thread that needs it (a callback gate held by a serial queue whose callback waits for
/// the GIL would otherwise deadlock). What that saves per event is measured in
/// bench/README.md ("Speed tricks").
///
/// Where it runs: every place a SocketKit thread blocks goes through one of these, so the
/// hook cannot be missed: `ParkingLot.wait` (every contended lock, condition wait and
/// callback-gate wait), `PosixThread.join`, and `EventLoop` before an `epoll_wait` that may
/// sleep. It may run although the wait then turns out not to block.
///
/// Switching it off: a host that sets no hook pays one thread-local load per wait; Python's
/// binding sets none without its C extension (`SOCKETKIT_NO_SPEEDUPS=1`). The hook lives in
/// initial-exec thread-locals of the C shim (see `skc_thread_will_wait`).
enum ThreadWaitHook {
    /// Sets (or, with nil, clears) the calling thread's hook.
    static func setForCurrentThread(_ hook: (@convention(c) (UnsafeMutableRawPointer?) -> Void)?,
                                    context: UnsafeMutableRawPointer?) {
        skc_set_thread_wait_hook(hook, context)
    }

    /// Runs the calling thread's hook, if one is set, and forgets it: just before blocking.
    static func threadWillWait() {
        skc_thread_will_wait()
    }
}
