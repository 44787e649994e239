// SPDX-License-Identifier: MIT
import Glibc
import SocketKitC
import Synchronization

/// A fixed set of event loops. Sockets pick a loop from their group round-robin, and
/// accepted connections are spread over the group's loops.
///
/// Simple programs never create one: `EventLoopGroup.default` exists for the whole process,
/// with one loop per CPU the process may run on (its affinity mask, as libuv's
/// `uv_available_parallelism`: under `taskset -c 0` that is one loop, not one per online CPU).
public final class EventLoopGroup: @unchecked Sendable {
    /// The loops, in index order.
    public private(set) var loops: [EventLoop] = []
    private let nextIndex = Atomic<Int>(0)
    private let isDefault: Bool
    private let shutDown = Atomic<Bool>(false)

    /// The process-wide group, created on first use, never shut down.
    public static let `default` = EventLoopGroup(loopCount: EventLoopGroup.availableProcessorCount, isDefault: true)

    /// The CPUs this process may run on; the online count if the affinity mask is unknown.
    static var availableProcessorCount: Int {
        let allowed = Int(skc_available_cpus())
        if allowed > 0 { return allowed }
        let online = sysconf(Int32(_SC_NPROCESSORS_ONLN))
        return online > 0 ? online : 1
    }

    /// Creates `loopCount` loops (at least one), each with its own thread.
    /// If a loop cannot be created (no descriptors or threads left), every socket placed on it
    /// fails with that error.
    public convenience init(loopCount: Int = 1) {
        self.init(loopCount: loopCount, isDefault: false)
    }

    private init(loopCount: Int, isDefault: Bool, driven: Bool = false) {
        self.isDefault = isDefault
        loops = (0..<max(1, loopCount)).map { EventLoop(index: $0, group: self, driven: driven) }
    }

    /// A group of one loop with no thread of its own, run by the calling thread: it calls
    /// `runOnce()` whenever `backendDescriptor` is readable (from its own poll loop: asyncio,
    /// GLib, select), as libuv is embedded with `uv_backend_fd` and `UV_RUN_NOWAIT`. Socket
    /// I/O and callbacks on the `.eventLoop` queue then run on that thread, and calls it
    /// makes on those sockets run inline (no hand-over to another thread, no wake-up). Only
    /// that thread may run the loop; other threads may use its sockets as usual (their calls
    /// wait in the loop's task queue and make the descriptor readable).
    public static func driven() -> EventLoopGroup {
        EventLoopGroup(loopCount: 1, isDefault: false, driven: true)
    }

    /// True for a group made by `driven()`.
    public var isDriven: Bool { loops[0].isDriven }

    /// The C API released this driven group before its stop could finish (see
    /// sk_loop_group_release): its handle goes once the host's next iteration stopped it.
    let releasePending = Atomic<Bool>(false)

    /// A driven group's descriptor: readable when the loop has work (ready sockets, a due
    /// timer, queued calls). -1 for a group with threads.
    public var backendDescriptor: Int32 { isDriven ? loops[0].backendDescriptor : -1 }

    /// Runs one iteration of a driven group's loop without waiting (see `driven()`). Returns
    /// true when more work is ready at once: call again before going back to the poll.
    /// Throws `.badConfig` on another thread, from inside an iteration, or for a group with
    /// threads.
    public func runOnce() throws(SocketError) -> Bool {
        try loops[0].runOnce()
    }

    /// Sets a one-shot hook for the calling thread: SocketKit calls `hook(context)` on this
    /// thread before the thread next waits inside SocketKit for something another thread may
    /// be doing (a callback running on another thread, a contended lock, a thread to end,
    /// events with a timeout), then forgets it; nil clears it. It may run although the wait
    /// then turns out not to block; one hook per thread (setting one replaces the last). For
    /// hosts with an interpreter lock that a driven group's host thread keeps from one
    /// callback of `runOnce()` to the next: the hook releases it before the thread would wait
    /// for another thread that needs it. The hook must not call SocketKit (it may run while
    /// SocketKit holds a lock of its own).
    public static func setWaitHookForCurrentThread(_ hook: (@convention(c) (UnsafeMutableRawPointer?) -> Void)?,
                                                   context: UnsafeMutableRawPointer?) {
        ThreadWaitHook.setForCurrentThread(hook, context: context)
    }

    /// The next loop, round-robin.
    public func next() -> EventLoop {
        let position = nextIndex.wrappingAdd(1, ordering: .relaxed).oldValue
        return loops[Int(UInt(bitPattern: position) % UInt(loops.count))]
    }

    /// Stops every loop: sockets still open on them are closed and told so through
    /// `socketDidDisconnect` with a `.badConfig` error; then the loop threads are joined.
    /// The stop takes bounded time: work queued before it still runs, and from the moment a
    /// loop starts stopping, calls other threads make on its sockets are refused (they throw
    /// `.badConfig`, as on a stopped loop), so callers that keep calling cannot hold it off.
    /// Throws `.badConfig` for the default group, or when called on one of the group's own
    /// loop threads (it would wait for itself).
    public func shutdown() throws(SocketError) {
        guard !isDefault else { throw SocketError(.badConfig, "the default event loop group cannot be shut down") }
        if isDriven {
            // No thread to join: on its own thread the stop happens now; from another thread
            // the next iteration the host runs finishes it.
            guard !shutDown.exchange(true, ordering: .acquiringAndReleasing) else { return }
            if loops[0].inEventLoop { loops[0].stopDriven() } else { loops[0].requestStop() }
            return
        }
        guard !loops.contains(where: { $0.inEventLoop }) else {
            throw SocketError(.badConfig, "shutdown called on one of the group's own loop threads")
        }
        guard !shutDown.exchange(true, ordering: .acquiringAndReleasing) else { return }
        for loop in loops { loop.requestStop() }
        for loop in loops { loop.joinThread() }
    }
}
