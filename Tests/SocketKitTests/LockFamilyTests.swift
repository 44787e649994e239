// SPDX-License-Identifier: MIT
import Glibc
import Synchronization
import Testing
@testable import SocketKit

/// Counts the wait hook's runs on every thread that sets it, and sets itself again each
/// time (the hook is one-shot).
private func countingWaitHook(_ context: UnsafeMutableRawPointer?) {
    Unmanaged<WaitHookCount>.fromOpaque(context!).takeUnretainedValue().runs.add(1, ordering: .relaxed)
    ThreadWaitHook.setForCurrentThread(countingWaitHook, context: context)
}

private final class WaitHookCount: @unchecked Sendable {
    let runs = Atomic<Int>(0)
    var context: UnsafeMutableRawPointer { Unmanaged.passUnretained(self).toOpaque() }
}

/// An object that guards its state with an inline lock, as a socket core does.
private final class InlineLockOwner: @unchecked Sendable {
    let lock = InlineLock()
    func withLock(_ body: () -> Void) { lock.withLock(key: parkingKey(of: self), body) }
}

/// An object that lets one thread in at a time through a callback gate, as a socket does.
private final class GateOwner: @unchecked Sendable {
    let gate = InlineCallbackGate()
    func withEntry(_ body: () -> Void) {
        gate.enter(key: parkingKey(of: self))
        body()
        gate.leave(key: parkingKey(of: self))
    }
}

/// A plain integer, changed only inside the lock under test: the count comes out exact only
/// if the lock excludes, and ThreadSanitizer (make sanitize) reports it as raced on if a
/// hand-over between threads is one it cannot see.
private final class Counter: @unchecked Sendable {
    var value = 0
}

@Suite("Locks")
struct LockFamilyTests {
    /// Every member of the lock family excludes, including when a waiting thread goes to
    /// sleep in the parking lot (the holder yields its core inside the critical section,
    /// so the others run out of spins): the hook that runs before such a sleep shows it did.
    @Test(arguments: ["InlineLock", "Lock", "LockedValue", "ConditionLock", "InlineCallbackGate"])
    func everyMemberExcludesAlsoWhenWaitersSleep(member: String) throws {
        let threads = 4
        let rounds = 4_000
        let counter = Counter()
        let inline = InlineLockOwner()
        let lock = Lock()
        let lockedValue = LockedValue(0)
        let conditionLock = ConditionLock()
        let gate = GateOwner()
        let critical: @Sendable (_ round: Int) -> Void = { round in
            let seen = counter.value
            if round % 16 == 0 { sched_yield() } // while holding it
            counter.value = seen + 1
        }
        let run: @Sendable (_ round: Int) -> Void = { round in
            switch member {
            case "InlineLock": inline.withLock { critical(round) }
            case "Lock": lock.withLock { critical(round) }
            case "LockedValue": lockedValue.withLock { value in value += 1; critical(round) }
            case "ConditionLock": conditionLock.withLock { critical(round) }
            default: gate.withEntry { critical(round) }
            }
        }
        let hook = WaitHookCount()
        let finished = Latch()
        let done = Atomic<Int>(0)
        let hookContext = CValue(hook.context)
        for index in 0..<threads {
            try PosixThread.spawnDetached(name: "lock-test-\(index)") {
                ThreadWaitHook.setForCurrentThread(countingWaitHook, context: hookContext.value)
                for round in 0..<rounds { run(round) }
                ThreadWaitHook.setForCurrentThread(nil, context: nil)
                if done.add(1, ordering: .acquiringAndReleasing).newValue == threads { finished.open() }
            }
        }
        #expect(finished.wait(timeout: 60))
        let total = threads * rounds
        #expect(counter.value == total) // ordered by `done` and the latch
        if member == "LockedValue" { #expect(lockedValue.withLock { $0 } == total) }
        #expect(hook.runs.load(ordering: .relaxed) > 0, "no thread slept in the parking lot")
    }

    /// A thread that finds a lock taken runs its wait hook before it sleeps (the promise of
    /// `sk_thread_set_wait_hook` for a contended lock): here the holder lets go only once
    /// the waiter's hook has run.
    @Test func aThreadWaitingForALockRunsItsWaitHookFirst() throws {
        let guarded = LockedValue(0)
        let hook = WaitHookCount()
        let hookContext = CValue(hook.context)
        let tookIt = Latch()
        var hookRan = false
        guarded.withLock { _ in
            _ = try? PosixThread.spawnDetached(name: "lock-waiter") {
                ThreadWaitHook.setForCurrentThread(countingWaitHook, context: hookContext.value)
                guarded.withLock { $0 += 1 }
                ThreadWaitHook.setForCurrentThread(nil, context: nil)
                tookIt.open()
            }
            let limit = deadline(afterSeconds: 10)
            while hook.runs.load(ordering: .relaxed) == 0 && monotonicNanoseconds() < limit { sched_yield() }
            hookRan = hook.runs.load(ordering: .relaxed) > 0
        }
        #expect(hookRan)
        #expect(tookIt.wait())
        #expect(guarded.withLock { $0 } == 1)
    }

    /// A condition wait ends when another thread signals, or at its deadline (false), and a
    /// signal nobody waits for is not kept for a later wait.
    @Test func aConditionWaitEndsWhenSignalledOrAtItsDeadline() throws {
        let condition = ConditionLock()
        condition.signal() // nobody waits: nothing to wake
        let start = monotonicNanoseconds()
        let timedOut = condition.withLock { !condition.wait(untilDeadline: start + 50_000_000) }
        #expect(timedOut)
        #expect(monotonicNanoseconds() - start >= 50_000_000)

        final class Flag: @unchecked Sendable { var set = false }
        let flag = Flag()
        try PosixThread.spawnDetached(name: "signaller") {
            condition.withLock {
                flag.set = true
                condition.signal()
            }
        }
        let limit = deadline(afterSeconds: 10)
        let seen = condition.withLock { () -> Bool in
            while !flag.set {
                if !condition.wait(untilDeadline: limit) { return flag.set }
            }
            return true
        }
        #expect(seen)
    }
}
