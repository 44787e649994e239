// SPDX-License-Identifier: MIT
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
                        // Yielding leaves the loop the processor (two cores, four threads).
                        while accepted.load(ordering: .relaxed) - ran.load(ordering: .relaxed) > backlog
                                && !stop.load(ordering: .relaxed) { sched_yield() }
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

    /// Issue 26.4: the loop stopped only once its task queue was empty, and went on accepting
    /// tasks after the stop was requested, so callers that kept queueing held `shutdown` off
    /// for as long as they went on. Each call here takes the loop a little longer than
    /// queueing it takes a caller (at most 20,000 wait), so the queue never runs empty.
    @Test(.timeLimit(.minutes(1)))
    func callersThatKeepQueueingCannotHoldAStopOff() throws {
        let group = EventLoopGroup(loopCount: 1)
        let socket = Socket(eventLoop: group.next())
        let hammer = try Hammer(socket, budget: Int.max, backlog: 20_000) {
            let until = monotonicNanoseconds() + 2_000
            while monotonicNanoseconds() < until {}
        }
        while hammer.accepted.load(ordering: .relaxed) < 1000 { sched_yield() }
        // The oracle is a count, not a duration (under sanitizers on a loaded machine draining
        // what was queued before the request takes from seconds to a minute): a shutdown that
        // refuses new calls returns after the 20,000 queued and a few in flight; one that goes
        // on accepting sees the callers have 100,000 more accepted, when a watchdog ends them
        // and the check below fails. Its 50 s only keep a hang inside the time limit.
        let shutDown = Latch()
        let from = hammer.accepted.load(ordering: .relaxed)
        try PosixThread.spawnDetached(name: "watchdog") {
            let until = monotonicNanoseconds() + 50_000_000_000
            var shutDownReturned = false
            while !shutDownReturned, monotonicNanoseconds() < until,
                  hammer.accepted.load(ordering: .relaxed) - from < 100_000 {
                shutDownReturned = shutDown.wait(timeout: 0.01)
            }
            if !shutDownReturned { hammer.stop.store(true, ordering: .relaxed) }
        }
        try group.shutdown()
        let callersWereStopped = hammer.stop.load(ordering: .relaxed)
        shutDown.open()
        #expect(hammer.finish())
        #expect(!callersWereStopped, "the shutdown returned only once the watchdog stopped the callers")
        #expect(!socket.eventLoop.isAcceptingTasks)
        #expect(throws: SocketError.self) { try socket.connect(toHost: "127.0.0.1", port: 9) }
    }

    /// Refused tasks lose nothing: a socket whose callbacks moved from a serial queue to its
    /// loop while one ran there still gets the events that arrived meanwhile (its last,
    /// `socketDidDisconnect`, among them) when its loop stopped in between: the serial
    /// queue's drain hands them to the loop, which refuses the job, so they run on the
    /// serial queue's thread once the loop is done.
    @Test func eventsHandedToAStoppedLoopStillArrive() throws {
        let group = EventLoopGroup(loopCount: 1)
        let queue = try SerialCallbackQueue(name: "moving-away")
        let listener = try RawSocket.listen()
        defer { listener.close() }
        let (socket, recorder) = recordedSocket(callbackQueue: queue, eventLoop: group.next())
        let inside = Latch()
        let proceed = Latch()
        recorder.onRead = { _, _, _ in
            inside.open()
            proceed.wait()
        }
        try socket.connect(toHost: "127.0.0.1", port: listener.localPort)
        let peer = try listener.accept()
        defer { peer.close() }
        try socket.read(tag: 1)
        try peer.send("x")
        #expect(inside.wait())
        socket.callbackQueue = .eventLoop
        try group.shutdown() // the disconnect waits in the mailbox behind the running read
        proceed.open()
        #expect(recorder.waitForDisconnect()??.code == .badConfig)
    }

    /// Issue 26.5: a UDP socket that had a send timer, released after its group, cancelled
    /// the timer in the stopped loop's timer heap from the releasing thread (a trap in debug
    /// builds: "loop-confined state touched off its event loop thread").
    @Test func aUdpSocketWithASendTimerReleasedAfterItsGroupTouchesNoLoopState() throws {
        let group = EventLoopGroup(loopCount: 1)
        let receiver = try RawUdpPeer()
        let recorder = UdpRecorder()
        var socket: UdpSocket? = UdpSocket(delegate: recorder, eventLoop: group.next())
        // Sent from this thread: queued, so the head's timeout arms the socket's timer.
        try socket!.send([1, 2, 3], toAddress: .ipv4Loopback(port: receiver.port), timeout: 5, tag: 7)
        #expect(recorder.waitFor(.sent(tag: 7)))
        try group.shutdown()
        #expect(recorder.waitFor(.closed(.closed)))
        socket = nil // the core is told on this thread, after the loop has finished
        #expect(socket == nil)
    }

    /// The TCP twin: a connection with a read timer (and a socket that never connected),
    /// released after the group.
    @Test func tcpSocketsReleasedAfterTheirGroupTouchNoLoopState() throws {
        let group = EventLoopGroup(loopCount: 1)
        let listener = try RawSocket.listen()
        defer { listener.close() }
        let recorder = Recorder()
        var connected: Socket? = Socket(delegate: recorder, eventLoop: group.next())
        var idle: Socket? = Socket(eventLoop: group.next())
        try connected!.connect(toHost: "127.0.0.1", port: listener.localPort, timeout: 5)
        let peer = try listener.accept()
        defer { peer.close() }
        try connected!.read(timeout: 30, tag: 1)
        #expect(recorder.waitForConnect())
        try group.shutdown()
        #expect(recorder.waitForDisconnect()??.code == .badConfig)
        connected = nil // each core is told on this thread, after the loop has finished
        idle = nil
        #expect(connected == nil && idle == nil)
    }
}

/// A plain UDP socket bound to 127.0.0.1 that nobody reads from.
final class RawUdpPeer {
    let fd: Int32
    let port: UInt16

    /// `receiveBufferSize` (SO_RCVBUF; 0: the kernel's default): large enough, loopback
    /// drops nothing.
    init(receiveBufferSize: Int32 = 0) throws {
        let made = socket(AF_INET, Int32(SOCK_DGRAM.rawValue), 0)
        guard made >= 0 else { throw TestFailure("socket") }
        if receiveBufferSize > 0 {
            var size = receiveBufferSize
            setsockopt(made, SOL_SOCKET, SO_RCVBUF, &size, socklen_t(MemoryLayout<Int32>.size))
        }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = UInt32(0x7f00_0001).bigEndian
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.bind(made, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(made, $0, &length) }
        }
        guard bound == 0 else {
            close(made)
            throw TestFailure("bind")
        }
        fd = made
        port = UInt16(bigEndian: address.sin_port)
    }

    /// Receives 4-byte datagrams numbered 0..<count until each has come or `within`
    /// seconds pass; returns how many distinct ones came.
    func receiveNumbered(_ count: Int, within seconds: Double = 20) -> Int {
        var seen = Set<UInt32>()
        let limit = deadline(afterSeconds: seconds)
        while seen.count < count && monotonicNanoseconds() < limit {
            var ready = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            guard poll(&ready, 1, 50) > 0 else { continue }
            var number: UInt32 = 0
            guard recv(fd, &number, 4, 0) == 4 else { continue }
            let value = UInt32(littleEndian: number)
            if value < count { seen.insert(value) }
        }
        return seen.count
    }

    deinit { close(fd) }
}

/// A socket still waiting for a name's answer has no descriptor for its loop to close: the
/// loop must still end its session when it stops, and a released one lingering for its
/// writes must let go of itself.
@Suite("Loop stop while resolving")
struct LoopStopWhileResolvingTests {
    /// A name whose answer waits for `release` (the resolver stub of `AddressResolver`).
    final class HeldName: @unchecked Sendable {
        let host: String
        let answer = Latch()
        let asked = Latch()

        init(_ name: String) {
            host = "\(name)-\(getpid()).held.socketkit.test"
            let answer = self.answer, asked = self.asked
            AddressResolver.testStubs.withLock {
                $0[host] = { port in
                    asked.open()
                    _ = answer.wait(timeout: 30)
                    return .success([.ipv4Loopback(port: port)])
                }
            }
        }

        func release() {
            answer.open()
            AddressResolver.testStubs.withLock { $0[host] = nil }
        }
    }

    @Test func aResolvingSocketIsToldItsLoopStopped() throws {
        let name = HeldName("told")
        defer { name.release() }
        let group = EventLoopGroup(loopCount: 1)
        let recorder = Recorder()
        let socket = Socket(delegate: recorder, eventLoop: group.next())
        try socket.connect(toHost: name.host, port: 9)
        #expect(name.asked.wait())
        try group.shutdown()
        #expect(recorder.wait { $0.contains { $0.isDisconnect } }, "no end: \(recorder.events)")
        guard case .disconnected(let error) = recorder.events.last else {
            Issue.record("the last event is not the end: \(recorder.events)")
            return
        }
        #expect(error?.code == .badConfig)
        #expect(socket.isDisconnected)
    }

    @Test func aReleasedResolvingSocketLingeringForItsWritesEndsWithItsLoop() throws {
        let name = HeldName("lingering")
        let group = EventLoopGroup(loopCount: 1)
        let recorder = Recorder()
        var socket: Socket? = Socket(delegate: recorder, eventLoop: group.next())
        try socket?.connect(toHost: name.host, port: 9)
        try socket?.write(bytes("queued before the name's answer"))
        socket?.disconnectAfterWriting()
        #expect(name.asked.wait())
        weak let lingering = socket?.core
        socket = nil
        try group.shutdown()
        // The answer comes to a stopped loop.
        name.release()
        let limit = deadline(afterSeconds: 10)
        while lingering != nil && monotonicNanoseconds() < limit { usleep(10_000) }
        #expect(lingering == nil, "a lingering core outlived its loop")
    }
}

extension LoopStopWhileResolvingTests {
    /// UDP's twin: a socket whose only datagram waits for a name (no descriptor yet).
    @Test func aUdpSocketWaitingForANameIsToldItsLoopStopped() throws {
        let name = HeldName("udp")
        defer { name.release() }
        let group = EventLoopGroup(loopCount: 1)
        let log = UdpRecorder()
        let socket = UdpSocket(delegate: log, eventLoop: group.next())
        try socket.send([1], toHost: name.host, port: 9, tag: 1)
        #expect(name.asked.wait())
        try group.shutdown()
        #expect(log.wait { $0.contains { if case .closed = $0 { return true }; return false } }, "no end: \(log.events)")
    }
}
