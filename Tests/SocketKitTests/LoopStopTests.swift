import Glibc
import Synchronization
import Testing
@testable import SocketKit

/// Loops stopping while other threads still use them: the wake-up descriptor, a stop that
/// callers cannot hold off, and what sockets released afterwards may touch.
@Suite("Loops stopping")
struct LoopStopTests {
    /// Threads that queue `Socket.perform` calls on one socket as fast as they can, each at
    /// most `budget` times, and with at most `backlog` calls queued and not yet run.
    final class Hammer: @unchecked Sendable {
        let socket: Socket
        let stop = Atomic<Bool>(false)
        let accepted = Atomic<Int>(0)
        let ran = Atomic<Int>(0)
        private let finished = Atomic<Int>(0)
        private let allFinished = Latch()
        static let threads = 3

        init(_ socket: Socket, budget: Int, backlog: Int, work: @escaping @Sendable () -> Void = {}) throws {
            self.socket = socket
            for index in 0..<Hammer.threads {
                try PosixThread.spawnDetached(name: "hammer-\(index)") { [self] in
                    var calls = 0
                    while calls < budget && !stop.load(ordering: .relaxed) {
                        calls += 1
                        while accepted.load(ordering: .relaxed) - ran.load(ordering: .relaxed) > backlog
                                && !stop.load(ordering: .relaxed) {}
                        guard socket.eventLoop.isAcceptingTasks else { break }
                        socket.perform { [self] _ in
                            work()
                            ran.add(1, ordering: .relaxed)
                        }
                        accepted.add(1, ordering: .relaxed)
                    }
                    if finished.add(1, ordering: .acquiringAndReleasing).newValue == Hammer.threads { allFinished.open() }
                }
            }
        }

        func finish() -> Bool {
            stop.store(true, ordering: .relaxed)
            return allFinished.wait(timeout: 20)
        }
    }

    /// Issue 26.3: a thread that decided to wake a loop wrote to its eventfd after letting go
    /// of the lock, when the loop may have closed it and the number gone to someone else.
    /// Groups are shut down while three threads queue work on one of their sockets and a
    /// fourth keeps taking fresh descriptor numbers (socket pairs): nothing may arrive there.
    @Test(.timeLimit(.minutes(1)))
    func aWakeUpNeverWritesToADescriptorTheLoopClosed() throws {
        let stop = Atomic<Bool>(false)
        let strayBytes = Atomic<Int>(0)
        let reuserDone = Latch()
        try PosixThread.spawnDetached(name: "reuser") {
            while !stop.load(ordering: .relaxed) {
                var pairs: [[Int32]] = []
                for _ in 0..<8 {
                    var pair: [Int32] = [-1, -1]
                    guard socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0, &pair) == 0 else { break }
                    pairs.append(pair)
                }
                var scratch = [UInt8](repeating: 0, count: 64)
                for pair in pairs {
                    for side in pair {
                        let count = recv(side, &scratch, scratch.count, Int32(MSG_DONTWAIT))
                        if count > 0 { strayBytes.add(count, ordering: .relaxed) }
                        close(side)
                    }
                }
            }
            reuserDone.open()
        }
        let until = deadline(afterSeconds: 4)
        var rounds = 0
        while monotonicNanoseconds() < until && strayBytes.load(ordering: .relaxed) == 0 {
            let group = EventLoopGroup(loopCount: 1)
            let socket = Socket(eventLoop: group.next())
            let hammer = try Hammer(socket, budget: 2000, backlog: Int.max)
            try group.shutdown()
            #expect(hammer.finish())
            rounds += 1
        }
        stop.store(true, ordering: .relaxed)
        #expect(reuserDone.wait())
        #expect(strayBytes.load(ordering: .relaxed) == 0, "wake-ups landed in other descriptors (\(rounds) rounds)")
    }
}
