import Glibc
import Synchronization
import Testing
@testable import SocketKit

/// Calls that wait for their effect, made from inside callbacks (issue 27.4): none may wait
/// for a thread that is waiting for the caller. Tests that can deadlock never shut their
/// loops down on failure: joining a deadlocked loop would hang the whole run.
@Suite("Waiting calls from callbacks")
struct CallbackWaitTests {
    /// Spins until `condition` holds (false after `seconds`): for a thread that must be
    /// blocked in a wait before the test goes on, which no event announces.
    static func spin(seconds: Double = 10, until condition: () -> Bool) -> Bool {
        let limit = deadline(afterSeconds: seconds)
        while !condition() {
            if monotonicNanoseconds() > limit { return false }
            sched_yield()
        }
        return true
    }

    /// The deadlock of issue 27.4: a UDP socket's callback on a serial queue calls
    /// `pauseReceiving()` (which waits for the loop) while a TCP callback on that loop sets
    /// the UDP socket's delegate (which waits for the running UDP callback). In both orders:
    /// the loop's thread waiting first, or the serial queue's.
    @Test(.timeLimit(.minutes(1)), arguments: [true, false])
    func aSerialCallbackWaitingForItsLoopAndALoopCallbackSettingItsDelegate(loopWaitsFirst: Bool) throws {
        let group = EventLoopGroup(loopCount: 1)
        let loop = group.loops[0]
        let serial = try SerialCallbackQueue(name: "udp-callbacks")
        let udpRecorder = UdpRecorder()
        let udp = UdpSocket(delegate: udpRecorder, callbackQueue: serial, eventLoop: loop)
        try udp.bind(toPort: 0, interface: "127.0.0.1")
        try udp.beginReceiving()
        let listener = try RawSocket.listen()
        defer { listener.close() }
        let (tcp, tcpRecorder) = recordedSocket(eventLoop: loop)
        try tcp.connect(toHost: "127.0.0.1", port: listener.localPort)
        let peer = try listener.accept()
        defer { peer.close() }
        #expect(tcpRecorder.waitForConnect())

        let loopThread = Atomic<UInt>(0)
        let serialThread = Atomic<UInt>(0)
        let loopInside = Latch()
        let serialInside = Latch()
        let loopReturned = Latch()
        let serialReturned = Latch()
        let replacement = UdpRecorder()
        let tcpOnce = Atomic<Bool>(false)
        let udpOnce = Atomic<Bool>(false)
        // The datagram first: its callback must be running on the serial queue before the
        // loop thread enters the TCP callback (the loop receives the datagram).
        udpRecorder.onReceive = { sock, _, _ in
            guard !udpOnce.exchange(true, ordering: .relaxed) else { return }
            serialThread.store(currentThreadIdentity(), ordering: .releasing)
            serialInside.open()
            loopInside.wait()
            if loopWaitsFirst {
                _ = CallbackWaitTests.spin { WaitGraph.isWaiting(loopThread.load(ordering: .acquiring)) }
            }
            sock.pauseReceiving() // waits for the loop
            serialReturned.open()
        }
        tcpRecorder.onRead = { _, _, _ in
            guard !tcpOnce.exchange(true, ordering: .relaxed) else { return }
            loopThread.store(currentThreadIdentity(), ordering: .releasing)
            loopInside.open()
            if !loopWaitsFirst {
                _ = CallbackWaitTests.spin { WaitGraph.isWaiting(serialThread.load(ordering: .acquiring)) }
            }
            udp.delegate = replacement // waits for the UDP callback running on the serial queue
            loopReturned.open()
        }
        try tcp.read(tag: 1)
        let sender = try RawUdpPeer()
        try sender.send([1], toPort: udp.localPort)
        #expect(serialInside.wait())
        try peer.send("x")
        let returned = loopReturned.wait(timeout: 10) && serialReturned.wait(timeout: 10)
        #expect(returned, "the two callbacks deadlocked")
        guard returned else { return }
        // Both calls had their effect: the delegate is the new one, and receiving is off.
        #expect(udp.delegate === replacement)
        try sender.send([2], toPort: udp.localPort)
        #expect(CallbackWaitTests.spin { sender.queuedAt(port: udp.localPort, in: udp) })
        #expect(replacement.received.isEmpty)
        tcp.disconnect()
        udp.close()
        try group.shutdown()
    }
    /// The kinds of callback queue, by name (arguments of the matrix).
    enum QueueKind: String, CaseIterable, Sendable {
        case loop, serial, host
    }

    /// A callback queue of `kind`, and how the test thread waits for `latch` meanwhile (a
    /// host-driven queue's callbacks run only while the test drains it).
    static func queue(_ kind: QueueKind) throws -> (CallbackQueue, (Latch) -> Bool) {
        switch kind {
        case .loop:
            return (.eventLoop, { $0.wait(timeout: 10) })
        case .serial:
            return (try SerialCallbackQueue(name: "matrix"), { $0.wait(timeout: 10) })
        case .host:
            let host = try HostCallbackQueue()
            return (host, { latch in
                let limit = deadline(afterSeconds: 10)
                while !latch.wait(timeout: 0) {
                    if monotonicNanoseconds() > limit { return false }
                    var descriptor = pollfd(fd: host.fileDescriptor, events: Int16(POLLIN), revents: 0)
                    _ = poll(&descriptor, 1, 10)
                    host.drain()
                }
                return true
            })
        }
    }

    /// Whether a plain listener can take `port` on 127.0.0.1 now.
    static func portIsFree(_ port: UInt16) -> Bool {
        guard let probe = try? RawSocket.listen(port: port) else { return false }
        probe.close()
        return true
    }

    /// The sockets a callback of the matrix calls: on its own loop and on another one.
    struct Targets {
        let udp: [UdpSocket]
        let listeners: [Socket]
        let ports: [UInt16]

        init(_ loops: [EventLoop]) throws {
            udp = loops.map { UdpSocket(eventLoop: $0) }
            listeners = try loops.map { loop in
                let listener = recordedSocket("unused", eventLoop: loop).0
                try listener.accept(onInterface: "127.0.0.1", port: 0)
                return listener
            }
            ports = listeners.map(\.localPort)
        }

        /// Binds each UDP socket and closes each listener, and says what each returned with.
        func callAll() -> [String] {
            var seen: [String] = []
            for (index, udp) in udp.enumerated() {
                do throws(SocketError) {
                    try udp.bind(toPort: 0, interface: "127.0.0.1")
                    seen.append("udp \(index): bound \(udp.localPort != 0)")
                } catch {
                    seen.append("udp \(index): \(error)")
                }
            }
            for (index, listener) in listeners.enumerated() {
                listener.disconnect()
                seen.append("listener \(index): closed \(CallbackWaitTests.portIsFree(ports[index]))")
            }
            return seen
        }

        static let allDone = ["udp 0: bound true", "udp 1: bound true", "listener 0: closed true", "listener 1: closed true"]
    }

    /// Waiting calls from a UDP callback and from a listener's callback, on each kind of
    /// callback queue, against the calling socket itself, sockets on its loop, and sockets
    /// on another loop: each returns, with its effect done.
    @Test(.timeLimit(.minutes(1)), arguments: QueueKind.allCases)
    func waitingCallsFromCallbacksReturnWithTheirEffect(kind: QueueKind) throws {
        let group = EventLoopGroup(loopCount: 2)
        let loops = group.loops // the callback's socket's loop first
        let (queue, waitFor) = try CallbackWaitTests.queue(kind)

        // From a UDP socket's didReceive.
        let udpRecorder = UdpRecorder()
        let source = UdpSocket(delegate: udpRecorder, callbackQueue: queue, eventLoop: loops[0])
        try source.bind(toPort: 0, interface: "127.0.0.1")
        try source.beginReceiving()
        let fromUdp = try Targets(loops)
        let results = Mutex<[String]>([])
        let udpDone = Latch()
        udpRecorder.onReceive = { sock, _, _ in
            var seen: [String] = []
            do throws(SocketError) {
                try sock.setMulticastTTL(7)
                var ttl: Int32 = 0
                var length = socklen_t(4)
                getsockopt(sock.descriptors.ipv4, Int32(IPPROTO_IP), IP_MULTICAST_TTL, &ttl, &length)
                seen.append("same socket: ttl \(ttl)")
            } catch {
                seen.append("same socket: \(error)")
            }
            results.withLock { $0 = seen + fromUdp.callAll() }
            udpDone.open()
        }
        let sender = try RawUdpPeer()
        try sender.send([1], toPort: source.localPort)
        #expect(waitFor(udpDone), "the UDP callback's calls did not return")
        #expect(results.withLock { $0 } == ["same socket: ttl 7"] + Targets.allDone)

        // From a listener's didAccept.
        let listenerRecorder = Recorder("listener")
        let listener = Socket(delegate: listenerRecorder, callbackQueue: queue, eventLoop: loops[0])
        try listener.accept(onInterface: "127.0.0.1", port: 0)
        let port = listener.localPort
        let fromListener = try Targets(loops)
        let tcpDone = Latch()
        listenerRecorder.onAccept = { sock, _ in
            sock.disconnect()
            let seen = ["same socket: closed \(CallbackWaitTests.portIsFree(port))"]
            results.withLock { $0 = seen + fromListener.callAll() }
            tcpDone.open()
        }
        let client = try RawSocket.connect(port: port)
        defer { client.close() }
        #expect(waitFor(tcpDone), "the listener callback's calls did not return")
        #expect(results.withLock { $0 } == ["same socket: closed true"] + Targets.allDone)
        try group.shutdown()
    }

    /// Two loops' callbacks that wait for each other's loops at the same moment: a cycle of
    /// loop waits, with no gate wait that could give way. The call that would close it does
    /// not wait: it fails with `EDEADLK` and has no effect (a UDP bind), or is queued and
    /// done when the other loop goes on (a listener's disconnect); the other call returns
    /// with its effect.
    @Test(.timeLimit(.minutes(1)))
    func twoLoopsCallingEachOthersSocketsAtOnce() throws {
        let group = EventLoopGroup(loopCount: 2)
        let (first, second) = (group.loops[0], group.loops[1])
        let firstRecorder = UdpRecorder()
        let secondRecorder = UdpRecorder()
        let firstSource = UdpSocket(delegate: firstRecorder, eventLoop: first)
        let secondSource = UdpSocket(delegate: secondRecorder, eventLoop: second)
        for source in [firstSource, secondSource] {
            try source.bind(toPort: 0, interface: "127.0.0.1")
            try source.beginReceiving()
        }
        let onFirst = UdpSocket(eventLoop: first)
        let listenerOnFirst = recordedSocket("unused", eventLoop: first).0
        try listenerOnFirst.accept(onInterface: "127.0.0.1", port: 0)
        let listenerPort = listenerOnFirst.localPort
        let onSecond = UdpSocket(eventLoop: second)
        let firstThread = Atomic<UInt>(0)
        let firstInside = Latch()
        let secondInside = Latch()
        let firstOutcome = Mutex<String>("")
        let secondOutcome = Mutex<String>("")
        let done = (first: Latch(), second: Latch())
        firstRecorder.onReceive = { _, _, _ in
            firstThread.store(currentThreadIdentity(), ordering: .releasing)
            firstInside.open()
            secondInside.wait()
            do throws(SocketError) {
                try onSecond.bind(toPort: 0, interface: "127.0.0.1") // waits for the second loop
                firstOutcome.withLock { $0 = "bound" }
            } catch {
                firstOutcome.withLock { $0 = "\(error.code) \(error.osError)" }
            }
            done.first.open()
        }
        secondRecorder.onReceive = { _, _, _ in
            secondInside.open()
            firstInside.wait()
            _ = CallbackWaitTests.spin { WaitGraph.isWaiting(firstThread.load(ordering: .acquiring)) }
            do throws(SocketError) {
                try onFirst.bind(toPort: 0, interface: "127.0.0.1") // would wait for the first loop
                secondOutcome.withLock { $0 = "bound" }
            } catch {
                secondOutcome.withLock { $0 = "\(error.code) \(error.osError)" }
            }
            listenerOnFirst.disconnect() // the first loop is still waiting: queued
            done.second.open()
        }
        let sender = try RawUdpPeer()
        try sender.send([1], toPort: firstSource.localPort)
        try sender.send([2], toPort: secondSource.localPort)
        let returned = done.first.wait(timeout: 10) && done.second.wait(timeout: 10)
        #expect(returned, "the two loops deadlocked")
        guard returned else { return }
        #expect(firstOutcome.withLock { $0 } == "bound")
        #expect(onSecond.localPort != 0)
        #expect(secondOutcome.withLock { $0 } == "badConfig \(EDEADLK)")
        #expect(onFirst.isClosed, "the refused bind had an effect")
        #expect(CallbackWaitTests.spin { CallbackWaitTests.portIsFree(listenerPort) })
        #expect(listenerOnFirst.isDisconnected)
        try group.shutdown()
    }
}

extension RawUdpPeer {
    /// Sends `bytes` to 127.0.0.1:`port`.
    func send(_ bytes: [UInt8], toPort port: UInt16) throws {
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = port.bigEndian
        address.sin_addr.s_addr = UInt32(0x7f00_0001).bigEndian
        let sent = bytes.withUnsafeBytes { buffer in
            withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    sendto(fd, buffer.baseAddress, buffer.count, 0, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
                }
            }
        }
        guard sent == bytes.count else { throw TestFailure("sendto") }
    }

    /// Whether a datagram waits in the kernel for `socket` (nobody is reading it).
    func queuedAt(port: UInt16, in socket: UdpSocket) -> Bool {
        var pending: Int32 = 0
        return ioctl(socket.descriptors.ipv4, UInt(FIONREAD), &pending) == 0 && pending > 0
    }
}
