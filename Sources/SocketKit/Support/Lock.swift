import Glibc
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

/// Held while a socket's callback runs, so that changing the delegate (or, in C, releasing
/// the socket) can wait for a running callback and guarantee that none starts afterwards.
/// The thread running a callback may change its own socket's delegate: it already holds it.
final class CallbackGate: @unchecked Sendable {
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

    var isHeldByCurrentThread: Bool {
        holder.load(ordering: .relaxed) == currentThreadIdentity()
    }

    func enter() {
        pthread_mutex_lock(mutex)
        holder.store(currentThreadIdentity(), ordering: .relaxed)
    }

    func leave() {
        holder.store(0, ordering: .relaxed)
        pthread_mutex_unlock(mutex)
    }

    /// Runs `body` with the gate held, or directly when this thread already holds it.
    func withGate<Result>(_ body: () throws -> Result) rethrows -> Result {
        if isHeldByCurrentThread { return try body() }
        enter()
        defer { leave() }
        return try body()
    }
}
