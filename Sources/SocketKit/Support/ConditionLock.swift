import Glibc
import SocketKitC

/// A mutex with a condition variable on the monotonic clock, for the few places where a
/// thread must sleep until another thread hands it work: serial callback queues, the
/// resolver pool and the handful of blocking calls (loop group shutdown, synchronous waits).
///
/// The pthread objects live on the heap because they must never move.
final class ConditionLock: @unchecked Sendable {
    private let mutex: UnsafeMutablePointer<pthread_mutex_t>
    private let condition: UnsafeMutablePointer<pthread_cond_t>

    init() {
        mutex = .allocate(capacity: 1)
        condition = .allocate(capacity: 1)
        pthread_mutex_init(mutex, nil)
        var attributes = pthread_condattr_t()
        pthread_condattr_init(&attributes)
        pthread_condattr_setclock(&attributes, CLOCK_MONOTONIC)
        pthread_cond_init(condition, &attributes)
        pthread_condattr_destroy(&attributes)
    }

    deinit {
        pthread_cond_destroy(condition)
        pthread_mutex_destroy(mutex)
        condition.deallocate()
        mutex.deallocate()
    }

    func lock() { pthread_mutex_lock(mutex) }
    func unlock() { pthread_mutex_unlock(mutex) }

    /// Sleeps until signalled (spurious wake-ups possible: callers loop on their predicate).
    /// Must be called with the lock held.
    func wait() {
        skc_thread_will_wait() // sk_thread_set_wait_hook
        pthread_cond_wait(condition, mutex)
    }

    /// Sleeps until signalled or until `deadline` (monotonic nanoseconds) passes.
    /// Returns false when the deadline passed. Must be called with the lock held.
    @discardableResult
    func wait(untilDeadline deadline: UInt64) -> Bool {
        skc_thread_will_wait()
        var limit = timespec(tv_sec: Int(deadline / 1_000_000_000), tv_nsec: Int(deadline % 1_000_000_000))
        return pthread_cond_timedwait(condition, mutex, &limit) != ETIMEDOUT
    }

    func signal() { pthread_cond_signal(condition) }
    func broadcast() { pthread_cond_broadcast(condition) }

    @inline(__always)
    func withLock<Result>(_ body: () throws -> Result) rethrows -> Result {
        lock()
        defer { unlock() }
        return try body()
    }
}
