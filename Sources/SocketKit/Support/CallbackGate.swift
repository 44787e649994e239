// SPDX-License-Identifier: MIT
import Synchronization

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

    private func tryEnter(_ me: UInt) -> Bool {
        holder.compareExchange(expected: 0, desired: me, ordering: .acquiringAndReleasing).exchanged
    }

    /// Enters for a callback (the delivering thread never holds a gate another thread could
    /// be waiting on while it waits here).
    func enter(key: UInt) {
        let me = currentThreadIdentity()
        if !tryEnter(me) { _ = enterContended(me, key: key) }
    }

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
