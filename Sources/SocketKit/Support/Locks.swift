// SPDX-License-Identifier: MIT
import Synchronization

// SocketKit's locks: one family.
//
// Every lock of the engine is an atomic word inside the object it guards, taken with an
// acquiring read-modify-write and given back with a releasing one; a thread that must wait
// for it sleeps in the `ParkingLot` (and runs the thread's wait hook first). The members:
//
// - `InlineLock`: the word alone, inside its owner; the owner passes its own address as the
//   parking key. For the state every connection has (a socket core's published state and
//   routing) and the C API's handle table: one word per connection, no allocation.
// - `Lock`: the word in an object of its own, for a lock that is not part of another object.
// - `LockedValue<Value>`: a lock and the value it guards, reached only inside `withLock`.
// - `ConditionLock`: a lock with a condition (wait, signal, deadlines on the monotonic
//   clock), for a thread that sleeps until another hands it work (serial callback queues,
//   the resolver pool, a caller waiting for its loop).
// - `InlineCallbackGate` (CallbackGate.swift): held while a socket's callback runs, so that
//   a delegate change or a release can wait for it; two words inside the socket.
//
// Next to the family, `Synchronization.Atomic` serves single words that need no lock
// (flags, counters, the progress seqlock).
//
// Only the callback gate is held around user code.
//
// Why not pthread mutexes: a `pthread_mutex_t` must not move, and Swift does not promise a
// stored property's address, so each one would be an allocation of its own, every
// connection's locks among them.
//
// Why not `Synchronization.Mutex`: ThreadSanitizer does not see its contended hand-over.
// When a `Mutex` is contended, its slow path (compiled into the Swift runtime, which is not
// instrumented) waits with a priority-inheriting futex: the kernel writes the new owner into
// the word, and the unlock goes through the kernel too, so neither thread makes an atomic
// operation ThreadSanitizer sees, and it reports the data the mutex guards as raced on
// (checked with Swift 6.3.1: bench/README.md, "Locks"). Here every hand-over is an atomic
// operation in SocketKit's own (instrumented) code. A `Mutex` also cannot run the wait hook
// before it sleeps, and has no condition.

/// A mutex that is one 32-bit word inside its owner object, for small critical sections
/// that never run user code. The owner passes its own address (`key`) so that a waiting
/// thread sleeps in the right `ParkingLot` bucket.
///
/// The word is 0 (free), 1 (held) or 2 (held, and a thread may be sleeping): Drepper's
/// "mutex 2" with the futex replaced by the parking lot. A sleeper sets 2 with the bucket's
/// mutex held, and the unlocker that sees 2 wakes the bucket under that same mutex, so no
/// wake-up is lost.
struct InlineLock: ~Copyable {
    private let word = Atomic<UInt32>(0)

    init() {}

    func lock(key: UInt) {
        if !word.compareExchange(expected: 0, desired: 1, ordering: .acquiring).exchanged {
            lockContended(key: key)
        }
    }

    func unlock(key: UInt) {
        if word.exchange(0, ordering: .releasing) == 2 {
            ParkingLot.wakeAll(key: key)
        }
    }

    @inline(never)
    private func lockContended(key: UInt) {
        for _ in 0..<64 {
            if word.load(ordering: .relaxed) == 0,
               word.compareExchange(expected: 0, desired: 1, ordering: .acquiring).exchanged {
                return
            }
        }
        // Taking it while sleepers may exist: leave 2, so that our unlock wakes them.
        ParkingLot.wait(key: key) { word.exchange(2, ordering: .acquiring) == 0 }
    }

    /// Runs `body` with the lock held.
    func withLock<Result, Failure: Error>(key: UInt, _ body: () throws(Failure) -> Result) throws(Failure) -> Result {
        lock(key: key)
        defer { unlock(key: key) }
        return try body()
    }
}

/// A plain mutex of its own: an `InlineLock` in an object, keyed by that object.
final class Lock: @unchecked Sendable {
    private let word = InlineLock()

    init() {}

    func withLock<Result, Failure: Error>(_ body: () throws(Failure) -> Result) throws(Failure) -> Result {
        try word.withLock(key: parkingKey(of: self), body)
    }
}

/// A value guarded by a lock of its own, reached only inside `withLock`.
final class LockedValue<Value>: @unchecked Sendable {
    private let word = InlineLock()
    private var value: Value

    init(_ initialValue: Value) {
        value = initialValue
    }

    func withLock<Result, Failure: Error>(
        _ body: (inout Value) throws(Failure) -> Result
    ) throws(Failure) -> Result {
        let key = parkingKey(of: self)
        word.lock(key: key)
        defer { word.unlock(key: key) }
        return try body(&value)
    }
}

/// A mutex with a condition, for the few places where a thread must sleep until another
/// thread hands it work: serial callback queues, the resolver pool and the blocking calls
/// (loop group shutdown, a caller waiting for its loop). Deadlines are monotonic
/// nanoseconds (`monotonicNanoseconds`).
final class ConditionLock: @unchecked Sendable {
    private let word = InlineLock()
    /// Bumped by every signal: a waiter sleeps until it changes.
    private let wakeups = Atomic<UInt32>(0)
    /// Threads inside `wait`, from before they let go of the lock until they wake: a signal
    /// with none goes no further than `wakeups`.
    private let waiters = Atomic<UInt32>(0)

    init() {}

    func lock() { word.lock(key: parkingKey(of: self)) }

    func unlock() { word.unlock(key: parkingKey(of: self)) }

    func withLock<Result, Failure: Error>(_ body: () throws(Failure) -> Result) throws(Failure) -> Result {
        try word.withLock(key: parkingKey(of: self), body)
    }

    /// Sleeps until signalled (spurious wake-ups possible: callers loop on their predicate).
    /// Must be called with the lock held; returns with it held.
    func wait() {
        _ = sleep(until: nil)
    }

    /// Sleeps until signalled or until `deadline` (monotonic nanoseconds) passes. Returns
    /// false when the deadline passed. Must be called with the lock held; returns with it held.
    @discardableResult
    func wait(untilDeadline deadline: UInt64) -> Bool {
        sleep(until: deadline)
    }

    /// Wakes the threads waiting (all of them: each checks its predicate again).
    func signal() {
        // Sequentially consistent with the waiter's count: either this sees the waiter (and
        // wakes it under the bucket's mutex), or the waiter sees the new `wakeups`.
        wakeups.wrappingAdd(1, ordering: .sequentiallyConsistent)
        if waiters.load(ordering: .sequentiallyConsistent) != 0 {
            ParkingLot.wakeAll(key: parkingKey(of: self))
        }
    }

    /// The same as `signal`.
    func broadcast() { signal() }

    private func sleep(until deadline: UInt64?) -> Bool {
        let key = parkingKey(of: self)
        let ticket = wakeups.load(ordering: .relaxed)
        _ = waiters.wrappingAdd(1, ordering: .sequentiallyConsistent)
        word.unlock(key: key)
        let signalled = ParkingLot.wait(key: key, deadline: deadline) {
            wakeups.load(ordering: .sequentiallyConsistent) != ticket
        }
        _ = waiters.wrappingSubtract(1, ordering: .sequentiallyConsistent)
        word.lock(key: key)
        return signalled
    }
}
