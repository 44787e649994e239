// SPDX-License-Identifier: MIT
import Synchronization

/// Which thread each thread blocked in a public call waits for, so that no call waits for
/// a thread that is, directly or through others, waiting for it (DESIGN: a call made from a
/// callback never waits on a thread that may be waiting for the caller).
///
/// Two kinds of waits block a caller:
/// - for a socket's callback gate (setting a delegate, a C release): for the thread running
///   one of its callbacks, which changes from one callback to the next;
/// - for an event loop (UDP calls and a listener's disconnect, which return their effect):
///   for the loop's thread, until it has run the call.
///
/// A wait that would close a cycle is not started. Who gives way: a gate wait can go on
/// without the gate (the callback running on the other thread may still be finishing, none
/// starts afterwards), so a gate wait that would close a cycle does so; and a loop wait that
/// would close one tells a gate wait in the cycle to give way, and then waits, so that calls
/// that return an answer get it. A cycle of loop waits alone (two loops' callbacks calling
/// each other's sockets at the same moment) has no wait that can give way: the loop wait
/// that would close it is not started (see `EventLoop.runWaiting`).
enum WaitGraph {
    /// Something a thread can wait for: reports the thread it waits on (0: none).
    protocol Target: AnyObject {
        var waitedThread: UInt { get }
    }

    /// One blocked thread's wait.
    final class Wait: @unchecked Sendable {
        let target: any Target
        /// Where the waiting thread sleeps (ParkingLot), for a gate wait; 0 for a loop wait,
        /// which never gives way.
        let wakeKey: UInt
        private let toldToGiveWay = Atomic<Bool>(false)

        init(target: any Target, wakeKey: UInt) {
            self.target = target
            self.wakeKey = wakeKey
        }

        var mayGiveWay: Bool { wakeKey != 0 }
        var mustGiveWay: Bool { toldToGiveWay.load(ordering: .acquiring) }
        fileprivate func giveWay() { toldToGiveWay.store(true, ordering: .releasing) }
    }

    private static let waits = LockedValue<[UInt: Wait]>([:])

    /// Registers `me` as waiting for `target`: a gate wait when `wakeKey` is its parking key
    /// (it may be told to give way), a loop wait when 0. Returns nil when the wait would close
    /// a cycle that it cannot break: then the caller must not wait.
    static func register(_ me: UInt, waitingFor target: any Target, wakeKey: UInt) -> Wait? {
        let wait = Wait(target: target, wakeKey: wakeKey)
        let toWake = waits.withLock { waits -> Wait?? in
            guard let cycle = cycle(from: target, to: me, in: waits) else {
                waits[me] = wait
                return .some(nil)
            }
            // A gate wait closing the cycle gives way itself; a loop wait asks a gate wait in
            // the cycle to (the first one after it).
            guard !wait.mayGiveWay, let yielding = cycle.first(where: \.mayGiveWay) else { return nil }
            yielding.giveWay()
            waits[me] = wait
            return .some(yielding)
        }
        guard let toWake else { return nil }
        if let toWake { ParkingLot.wakeAll(key: toWake.wakeKey) }
        return wait
    }

    static func unregister(_ me: UInt) {
        _ = waits.withLock { $0.removeValue(forKey: me) }
    }

    /// Whether `thread` is blocked in a wait (for tests that need a thread to wait first).
    static func isWaiting(_ thread: UInt) -> Bool {
        waits.withLock { $0[thread] != nil }
    }

    /// The waits on the way from `target` back to `me`, or nil if it does not lead back. A
    /// wait already told to give way ends the way: its thread is about to go on.
    private static func cycle(from target: any Target, to me: UInt, in waits: [UInt: Wait]) -> [Wait]? {
        var way: [Wait] = []
        var current = target
        for _ in 0..<64 {
            let thread = current.waitedThread
            if thread == me { return way }
            guard thread != 0, let next = waits[thread], !next.mustGiveWay else { return nil }
            way.append(next)
            current = next.target
        }
        return nil
    }
}
