// SPDX-License-Identifier: MIT
import Glibc
import SocketKitC

/// The identity of the calling thread, comparable with what `PosixThread.current` returned
/// on another thread. Used for loop affinity checks and for re-entrancy detection.
func currentThreadIdentity() -> UInt {
    UInt(pthread_self())
}

private final class ThreadStart {
    let name: String
    let body: () -> Void
    init(name: String, body: @escaping () -> Void) {
        self.name = name
        self.body = body
    }
}

/// Plain pthreads: the engine owns a few long-lived threads (one per event loop, one per
/// serial callback queue, a small resolver pool) and never one per connection.
enum PosixThread {
    /// Starts a joinable thread running `body`. Throws the OS error if the thread cannot start.
    static func spawn(name: String, _ body: @escaping @Sendable () -> Void) throws(SocketError) -> pthread_t {
        let start = Unmanaged.passRetained(ThreadStart(name: name, body: body))
        var thread = pthread_t()
        // SocketKit's threads take no asynchronous signals: a host's SIGINT or SIGTERM
        // handler runs on the host's own threads. The mask is inherited at creation.
        var everything = sigset_t()
        var previous = sigset_t()
        sigfillset(&everything)
        for synchronous in [SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGABRT] { sigdelset(&everything, synchronous) }
        pthread_sigmask(SIG_BLOCK, &everything, &previous)
        defer { pthread_sigmask(SIG_SETMASK, &previous, nil) }
        let result = pthread_create(&thread, nil, { argument in
            let start = Unmanaged<ThreadStart>.fromOpaque(argument!).takeRetainedValue()
            start.name.withCString { skc_set_current_thread_name($0) }
            start.body()
            return nil
        }, start.toOpaque())
        guard result == 0 else {
            start.release()
            throw SocketError(.system, osError: result, "cannot start thread '\(name)'")
        }
        return thread
    }

    static func join(_ thread: pthread_t) {
        ThreadWaitHook.threadWillWait()
        pthread_join(thread, nil)
    }
}

extension PosixThread {
    /// Starts a detached thread (nobody joins it; it ends by itself).
    static func spawnDetached(name: String, _ body: @escaping @Sendable () -> Void) throws(SocketError) {
        let thread = try spawn(name: name, body)
        pthread_detach(thread)
    }
}
