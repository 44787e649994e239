import Glibc
import SocketKitC
import Synchronization

/// Where threads sleep while an `InlineLock` or an `InlineCallbackGate` is taken: a fixed
/// table of pthread mutex and condition pairs shared by every lock of the process, picked
/// by the address of the object that holds the lock.
///
/// Why not one pthread mutex per lock: a `pthread_mutex_t` cannot live inside a Swift
/// object (its address must not move, and Swift does not promise that for stored
/// properties), so each one was a separate 40-byte malloc, three per connection. Contention
/// on these locks is rare (another thread calling into a socket while its loop publishes),
/// so sleeping threads may share a condition; a wake-up wakes every sleeper of its bucket and
/// each one checks its own lock again.
///
/// Why not `Synchronization.Mutex`: its slow path hands the lock over inside the kernel
/// (futex PI), which ThreadSanitizer does not see. Here every acquisition is an atomic
/// read-modify-write with acquiring order and every release a releasing one, so
/// ThreadSanitizer sees each hand-over; the pthread calls only put threads to sleep.
enum ParkingLot {
    private static let bucketCount = 64
    nonisolated(unsafe) private static let mutexes: UnsafeMutablePointer<pthread_mutex_t> = {
        let table = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: bucketCount)
        for index in 0..<bucketCount { pthread_mutex_init(table + index, nil) }
        return table
    }()
    nonisolated(unsafe) private static let conditions: UnsafeMutablePointer<pthread_cond_t> = {
        let table = UnsafeMutablePointer<pthread_cond_t>.allocate(capacity: bucketCount)
        for index in 0..<bucketCount { pthread_cond_init(table + index, nil) }
        return table
    }()

    @inline(__always)
    private static func bucket(_ key: UInt) -> Int {
        // Objects are 16-byte aligned; mix the higher bits in.
        Int(truncatingIfNeeded: (key >> 4) ^ (key >> 12)) & (bucketCount - 1)
    }

    /// Sleeps until `isDone` (called with the bucket's mutex held) returns true.
    static func wait(key: UInt, until isDone: () -> Bool) {
        skc_thread_will_wait() // before any lock of ours is taken (sk_thread_set_wait_hook)
        let index = bucket(key)
        pthread_mutex_lock(mutexes + index)
        while !isDone() {
            pthread_cond_wait(conditions + index, mutexes + index)
        }
        pthread_mutex_unlock(mutexes + index)
    }

    /// Wakes the sleepers of `key`'s bucket (they check their condition again).
    static func wakeAll(key: UInt) {
        let index = bucket(key)
        pthread_mutex_lock(mutexes + index)
        pthread_cond_broadcast(conditions + index)
        pthread_mutex_unlock(mutexes + index)
    }
}

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

    @inline(__always)
    func lock(key: UInt) {
        if !word.compareExchange(expected: 0, desired: 1, ordering: .acquiring).exchanged {
            lockContended(key: key)
        }
    }

    @inline(__always)
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
}

/// The parking-lot key of an object's inline lock or gate: the object's address.
@inline(__always)
func parkingKey(of object: AnyObject) -> UInt {
    UInt(bitPattern: Int(bitPattern: Unmanaged.passUnretained(object).toOpaque()))
}

/// Held while a socket's callback runs, so that changing the delegate (or, in C, releasing
/// the socket) can wait for a running callback and guarantee that none starts afterwards.
/// The thread running a callback may change its own socket's delegate: it already holds it.
///
/// Waiting is given up when it would deadlock: two callbacks on two threads that release
/// each other's sockets would each wait for the other forever, and so would a callback on a
/// serial queue that waits for its loop while a callback on that loop changes the first
/// socket's delegate. The wait-for graph (`WaitGraph`: which gate or loop each blocked
/// thread waits for) catches the cycle; the gate wait in it goes on without the gate (no
/// callback of that socket starts afterwards, but the one running on the other thread may
/// still be finishing).
///
/// Two words inside the socket that owns it: the holding thread, and how many threads wait
/// to enter. The owner passes its own address as `key` (for the parking lot) and itself as
/// `holder` (for the deadlock check).
struct InlineCallbackGate: ~Copyable {
    private let holder = Atomic<UInt>(0)
    private let waiters = Atomic<UInt32>(0)

    init() {}

    var holderThread: UInt { holder.load(ordering: .acquiring) }

    var isHeldByCurrentThread: Bool {
        holder.load(ordering: .acquiring) == currentThreadIdentity()
    }

    @inline(__always)
    private func tryEnter(_ me: UInt) -> Bool {
        holder.compareExchange(expected: 0, desired: me, ordering: .acquiringAndReleasing).exchanged
    }

    /// Enters for a callback (the delivering thread never holds a gate another thread could
    /// be waiting on while it waits here).
    @inline(__always)
    func enter(key: UInt) {
        let me = currentThreadIdentity()
        if !tryEnter(me) { _ = enterContended(me, key: key) }
    }

    @inline(__always)
    func leave(key: UInt) {
        // Sequentially consistent with the waiter's increment: either the waiter sees the
        // gate free, or this sees the waiter (and wakes it under the bucket's mutex).
        holder.store(0, ordering: .sequentiallyConsistent)
        if waiters.load(ordering: .sequentiallyConsistent) != 0 {
            ParkingLot.wakeAll(key: key)
        }
    }

    /// Waits until entered (true), or until `givesWay` says to stop waiting (false).
    @inline(never)
    private func enterContended(_ me: UInt, key: UInt, givesWay: () -> Bool = { false }) -> Bool {
        // Counted as a waiter from before the first try until entered, so that a leave
        // after that try sees us (see `leave`).
        _ = waiters.wrappingAdd(1, ordering: .sequentiallyConsistent)
        var entered = false
        ParkingLot.wait(key: key) {
            entered = holder.compareExchange(expected: 0, desired: me, ordering: .sequentiallyConsistent).exchanged
            return entered || givesWay()
        }
        _ = waiters.wrappingSubtract(1, ordering: .sequentiallyConsistent)
        return entered
    }

    /// Enters, unless waiting would close a cycle of threads waiting for each other (see
    /// `WaitGraph`), or a thread that waits for a loop needs this wait to give way: then
    /// returns false without entering.
    func enterUnlessDeadlocked(key: UInt, holder owner: any WaitGraph.Target) -> Bool {
        let me = currentThreadIdentity()
        if tryEnter(me) { return true }
        guard let wait = WaitGraph.register(me, waitingFor: owner, wakeKey: key) else { return false }
        defer { WaitGraph.unregister(me) }
        return enterContended(me, key: key) { wait.mustGiveWay }
    }

    /// Runs `body` with the gate held: directly when this thread already holds it, without
    /// it when waiting would deadlock (see `enterUnlessDeadlocked`).
    func withEntry<Result>(key: UInt, holder owner: any WaitGraph.Target,
                           _ body: () throws -> Result) rethrows -> Result {
        if isHeldByCurrentThread { return try body() }
        guard enterUnlessDeadlocked(key: key, holder: owner) else { return try body() }
        defer { leave(key: key) }
        return try body()
    }
}
