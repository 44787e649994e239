// SPDX-License-Identifier: MIT
import Glibc
import Synchronization
import Testing
@testable import SocketKit

@Suite("Event loops")
struct EventLoopTests {
    @Test func tasksRunOnTheLoopInSubmissionOrder() throws {
        let group = EventLoopGroup(loopCount: 1)
        defer { try? group.shutdown() }
        let loop = group.next()
        #expect(!loop.inEventLoop)
        let order = LockedValue<[Int]>([])
        let onLoop = Atomic<Int>(0)
        let done = Latch()
        for index in 0..<1000 {
            loop.execute {
                if loop.inEventLoop { onLoop.add(1, ordering: .relaxed) }
                order.withLock { $0.append(index) }
                if index == 999 { done.open() }
            }
        }
        #expect(done.wait())
        #expect(order.withLock { $0 } == Array(0..<1000))
        #expect(onLoop.load(ordering: .relaxed) == 1000)
    }

    /// The thread-wait hook (sk_thread_set_wait_hook): runs once, on the thread about to
    /// block (here: joining a loop's thread), before it blocks; nil clears it.
    @Test func theWaitHookRunsOnceOnTheThreadAboutToBlockAndNilClearsIt() throws {
        final class Calls: @unchecked Sendable {
            var threads: [UInt] = []
        }
        let calls = Calls()
        let context = Unmanaged.passRetained(calls)
        defer { context.release() }
        let hook: @convention(c) (UnsafeMutableRawPointer?) -> Void = { context in
            Unmanaged<Calls>.fromOpaque(context!).takeUnretainedValue().threads.append(currentThreadIdentity())
        }
        EventLoopGroup.setWaitHookForCurrentThread(hook, context: context.toOpaque())
        try EventLoopGroup(loopCount: 2).shutdown() // joins two threads: one call
        #expect(calls.threads == [currentThreadIdentity()])

        EventLoopGroup.setWaitHookForCurrentThread(hook, context: context.toOpaque())
        EventLoopGroup.setWaitHookForCurrentThread(nil, context: nil)
        try EventLoopGroup(loopCount: 1).shutdown()
        #expect(calls.threads.count == 1)
    }

    @Test func tasksFromManyThreadsAllRun() throws {
        let group = EventLoopGroup(loopCount: 1)
        defer { try? group.shutdown() }
        let loop = group.next()
        let count = Atomic<Int>(0)
        let done = Latch()
        for thread in 0..<8 {
            _ = try PosixThread.spawnDetached(name: "submitter-\(thread)") {
                for _ in 0..<500 {
                    loop.execute {
                        if count.add(1, ordering: .relaxed).newValue == 4000 { done.open() }
                    }
                }
            }
        }
        #expect(done.wait())
        #expect(count.load(ordering: .relaxed) == 4000)
    }

    @Test func timersFireInDeadlineOrderAndCancelledOnesNever() throws {
        let group = EventLoopGroup(loopCount: 1)
        defer { try? group.shutdown() }
        let loop = group.next()
        let fired = LockedValue<[Int]>([])
        let done = Latch()
        loop.execute {
            let now = monotonicNanoseconds()
            var timers: [LoopTimer] = []
            for (index, delay) in [30, 10, 20, 5, 40].enumerated() {
                let timer = LoopTimer {
                    fired.withLock { $0.append(index) }
                    if index == 4 { done.open() }
                }
                timers.append(timer)
                loop.schedule(timer, deadline: now + UInt64(delay) * 1_000_000)
            }
            loop.cancel(timers[2])
            // Re-arming moves a timer.
            loop.schedule(timers[1], deadline: now + 35_000_000)
        }
        #expect(done.wait())
        #expect(fired.withLock { $0 } == [3, 0, 1, 4])
    }

    @Test func groupsHandOutTheirLoopsRoundRobin() throws {
        let group = EventLoopGroup(loopCount: 3)
        defer { try? group.shutdown() }
        let picked = (0..<6).map { _ in group.next().index }
        #expect(Set(picked) == [0, 1, 2])
        #expect(group.loops.count == 3)
        #expect(EventLoopGroup.default.loops.count == EventLoopGroup.availableProcessorCount)
    }

    @Test func shutdownRefusesToRunOnItsOwnLoopAndIsIdempotent() throws {
        let group = EventLoopGroup(loopCount: 1)
        let loop = group.next()
        let result = LockedValue<SocketError?>(nil)
        let done = Latch()
        loop.execute {
            do throws(SocketError) { try group.shutdown() } catch { result.withLock { $0 = error } }
            done.open()
        }
        #expect(done.wait())
        #expect(result.withLock { $0?.code } == .badConfig)
        try group.shutdown()
        try group.shutdown()
        #expect(!loop.execute {})
    }
}
