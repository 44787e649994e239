// SPDX-License-Identifier: MIT
import Glibc

/// Where every thread that must wait on one of SocketKit's locks, conditions or callback
/// gates sleeps (see `Locks.swift` for the family): a fixed table of pthread mutex and
/// condition pairs shared by the whole process, picked by a key, the address of the object
/// that holds the lock word.
///
/// The locks themselves are atomic words inside their owners; only a thread that has to
/// sleep comes here. So a lock costs its owner one word instead of a `pthread_mutex_t`,
/// which cannot live inside a Swift object (its address must not move, and Swift does not
/// promise that for stored properties) and would be a separate allocation each. Sleeping is
/// rare (another thread calling into a socket while its loop publishes, an idle serial queue
/// or resolver thread), so sleepers may share a condition: a wake-up wakes every sleeper of
/// its bucket, and each one checks its own predicate again.
///
/// This is also the one place a SocketKit lock runs the thread's wait hook
/// (`ThreadWaitHook`) before it sleeps.
enum ParkingLot {
    private static let bucketCount = 64
    nonisolated(unsafe) private static let mutexes: UnsafeMutablePointer<pthread_mutex_t> = {
        let table = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: bucketCount)
        for index in 0..<bucketCount { pthread_mutex_init(table + index, nil) }
        return table
    }()
    /// On the monotonic clock, the clock of every deadline in the engine.
    nonisolated(unsafe) private static let conditions: UnsafeMutablePointer<pthread_cond_t> = {
        let table = UnsafeMutablePointer<pthread_cond_t>.allocate(capacity: bucketCount)
        var attributes = pthread_condattr_t()
        pthread_condattr_init(&attributes)
        pthread_condattr_setclock(&attributes, CLOCK_MONOTONIC)
        for index in 0..<bucketCount { pthread_cond_init(table + index, &attributes) }
        pthread_condattr_destroy(&attributes)
        return table
    }()

    private static func bucket(_ key: UInt) -> Int {
        // Objects are 16-byte aligned; mix the higher bits in.
        Int(truncatingIfNeeded: (key >> 4) ^ (key >> 12)) & (bucketCount - 1)
    }

    /// Sleeps until `isDone` (called with the bucket's mutex held) returns true, or until
    /// `deadline` (monotonic nanoseconds; nil: none) passes. Returns `isDone`'s last answer.
    ///
    /// No wake-up is lost: a waker changes what `isDone` reads before it calls `wakeAll`,
    /// which takes the bucket's mutex, and a sleeper checks `isDone` and starts waiting
    /// under that same mutex.
    @discardableResult
    static func wait(key: UInt, deadline: UInt64? = nil, until isDone: () -> Bool) -> Bool {
        ThreadWaitHook.threadWillWait() // before any lock of ours is taken
        let index = bucket(key)
        pthread_mutex_lock(mutexes + index)
        defer { pthread_mutex_unlock(mutexes + index) }
        guard let deadline else {
            while !isDone() { pthread_cond_wait(conditions + index, mutexes + index) }
            return true
        }
        var limit = timespec(tv_sec: Int(deadline / 1_000_000_000), tv_nsec: Int(deadline % 1_000_000_000))
        while !isDone() {
            if pthread_cond_timedwait(conditions + index, mutexes + index, &limit) == ETIMEDOUT {
                return isDone()
            }
        }
        return true
    }

    /// Wakes the sleepers of `key`'s bucket (they check their predicates again).
    static func wakeAll(key: UInt) {
        let index = bucket(key)
        pthread_mutex_lock(mutexes + index)
        pthread_cond_broadcast(conditions + index)
        pthread_mutex_unlock(mutexes + index)
    }
}

/// The parking-lot key of an object's lock word or gate: the object's address.
func parkingKey(of object: AnyObject) -> UInt {
    UInt(bitPattern: Int(bitPattern: Unmanaged.passUnretained(object).toOpaque()))
}
