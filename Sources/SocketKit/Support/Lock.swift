import Glibc
import SocketKitC
import Synchronization

/// A plain mutex for small critical sections that never run user code.
final class Lock: @unchecked Sendable {
    private let mutex: UnsafeMutablePointer<pthread_mutex_t>

    init() {
        mutex = .allocate(capacity: 1)
        pthread_mutex_init(mutex, nil)
    }

    deinit {
        pthread_mutex_destroy(mutex)
        mutex.deallocate()
    }

    @inline(__always)
    func withLock<Result>(_ body: () throws -> Result) rethrows -> Result {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return try body()
    }
}

/// A value guarded by a pthread mutex. Used instead of `Synchronization.Mutex` because
/// ThreadSanitizer intercepts pthread_mutex_* but not Mutex's futex-based slow path, so
/// with `Mutex` a contended hand-over looked like a data race (swift test --sanitize=thread).
final class LockedValue<Value>: @unchecked Sendable {
    private let mutex: UnsafeMutablePointer<pthread_mutex_t>
    private var value: Value

    init(_ initialValue: Value) {
        value = initialValue
        mutex = .allocate(capacity: 1)
        pthread_mutex_init(mutex, nil)
    }

    deinit {
        pthread_mutex_destroy(mutex)
        mutex.deallocate()
    }

    @inline(__always)
    func withLock<Result, Failure: Error>(
        _ body: (inout Value) throws(Failure) -> Result
    ) throws(Failure) -> Result {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return try body(&value)
    }
}

/// Held while a socket's callback runs, so that changing the delegate (or, in C, releasing
/// the socket) can wait for a running callback and guarantee that none starts afterwards.
/// The thread running a callback may change its own socket's delegate: it already holds it.
///
/// Waiting is refused when it would deadlock: two callbacks on two threads that release
/// each other's sockets would each wait for the other forever. A global wait-for graph
/// (which gate each blocked thread waits for) catches the cycle; the thread that would close
/// it goes on without waiting (no callback of that socket starts afterwards, but the one
/// running on the other thread may still be finishing).
final class CallbackGate: CallbackGateWaits.Holder, @unchecked Sendable {
    private let mutex: UnsafeMutablePointer<pthread_mutex_t>
    private let holder = Atomic<UInt>(0)

    init() {
        mutex = .allocate(capacity: 1)
        pthread_mutex_init(mutex, nil)
    }

    deinit {
        pthread_mutex_destroy(mutex)
        mutex.deallocate()
    }

    var callbackGateHolder: UInt { holder.load(ordering: .acquiring) }

    var isHeldByCurrentThread: Bool {
        holder.load(ordering: .acquiring) == currentThreadIdentity()
    }

    /// Enters for a callback (the delivering thread never holds a gate another thread could
    /// be waiting on while it waits here).
    func enter() {
        pthread_mutex_lock(mutex)
        holder.store(currentThreadIdentity(), ordering: .releasing)
    }

    func leave() {
        holder.store(0, ordering: .releasing)
        pthread_mutex_unlock(mutex)
    }

    /// Enters, unless waiting would close a cycle of threads waiting for each other's gates:
    /// then returns false without entering.
    private func enterUnlessDeadlocked() -> Bool {
        let me = currentThreadIdentity()
        if pthread_mutex_trylock(mutex) == 0 {
            holder.store(me, ordering: .releasing)
            return true
        }
        guard CallbackGateWaits.registerUnlessDeadlocked(me, waitingFor: self) else { return false }
        skc_thread_will_wait() // the holder runs a callback (sk_thread_set_wait_hook)
        pthread_mutex_lock(mutex)
        CallbackGateWaits.unregister(me)
        holder.store(me, ordering: .releasing)
        return true
    }

    /// Runs `body` with the gate held: directly when this thread already holds it, without
    /// it when waiting would deadlock (see above).
    func withGate<Result>(_ body: () throws -> Result) rethrows -> Result {
        if isHeldByCurrentThread { return try body() }
        guard enterUnlessDeadlocked() else { return try body() }
        defer { leave() }
        return try body()
    }
}
