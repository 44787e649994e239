// SPDX-License-Identifier: MIT
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

    /// "ok", or what `condition` says went wrong.
    static func check(_ condition: Bool, _ otherwise: @autoclosure () -> String) -> String {
        condition ? "ok" : otherwise()
    }

    /// Runs `body`, a waiting call and the check of its effect: "ok", what the check found,
    /// or what the call threw.
    static func attempt(_ body: () throws -> String) -> String {
        do { return try body() } catch { return "threw \(error)" }
    }

    /// One call that waits (for its socket's loop, or for a callback of its socket), made
    /// from inside a callback on a socket prepared beforehand: `prepare` makes the target on
    /// a loop (on the test's thread), `call` makes the call and checks its effect.
    struct WaitingCall: Sendable {
        let name: String
        let prepare: @Sendable (EventLoop, Peers) throws -> any Sendable
        let call: @Sendable (any Sendable) -> String
    }

    /// What the targets connect, send or listen to, and what must outlive the calls.
    final class Peers: @unchecked Sendable {
        let listener: RawSocket
        let udpPeer: RawUdpPeer
        let lock = ConditionLock()
        var kept: [AnyObject] = []

        init() throws {
            listener = try RawSocket.listen()
            udpPeer = try RawUdpPeer()
        }

        func keep(_ object: AnyObject) { lock.withLock { kept.append(object) } }

        func close() {
            listener.close()
            lock.withLock { kept.removeAll() }
        }
    }

    /// A TCP socket with a delegate (recorded nowhere) on `loop`.
    static func tcp(_ loop: EventLoop, _ peers: Peers) -> Socket {
        let recorder = Recorder("target")
        peers.keep(recorder)
        return Socket(delegate: recorder, eventLoop: loop)
    }

    /// A TCP socket on `loop` connected to the peers' listener.
    static func connected(_ loop: EventLoop, _ peers: Peers) throws -> Socket {
        let sock = tcp(loop, peers)
        try sock.connect(toHost: "127.0.0.1", port: peers.listener.localPort)
        return sock
    }

    /// Every call that waits, TCP and UDP alike (EventLoop: the rule they share).
    static let waitingCalls: [WaitingCall] = [
        WaitingCall(name: "accept", prepare: { loop, peers in tcp(loop, peers) }, call: { target in
            let sock = target as! Socket
            return attempt {
                try sock.accept(onInterface: "127.0.0.1", port: 0)
                return check(sock.isAccepting && !portIsFree(sock.localPort), "not listening")
            }
        }),
        WaitingCall(name: "disconnect a listener", prepare: { loop, peers in
            let sock = tcp(loop, peers)
            try sock.accept(onInterface: "127.0.0.1", port: 0)
            return sock
        }, call: { target in
            let sock = target as! Socket
            let port = sock.localPort
            sock.disconnect()
            return check(sock.isDisconnected && portIsFree(port), "the port is still taken")
        }),
        WaitingCall(name: "connect", prepare: { loop, peers in (tcp(loop, peers), peers.listener.localPort) }, call: { target in
            let (sock, port) = target as! (Socket, UInt16)
            return attempt {
                try sock.connect(toHost: "127.0.0.1", port: port)
                try sock.read(tag: 1) // taken: the session is published on return
                return check(!sock.isDisconnected, "disconnected")
            }
        }),
        WaitingCall(name: "connect to an address", prepare: { loop, peers in
            (tcp(loop, peers), SocketAddress.ipv4Loopback(port: peers.listener.localPort))
        }, call: { target in
            let (sock, address) = target as! (Socket, SocketAddress)
            return attempt {
                try sock.connect(to: address)
                try sock.write([1])
                return check(!sock.isDisconnected, "disconnected")
            }
        }),
        WaitingCall(name: "connect to a Unix path", prepare: { loop, peers in
            let listener = tcp(loop, peers)
            let path = temporaryUnixPath("matrix")
            try listener.accept(onUnixPath: path)
            peers.keep(listener)
            return (tcp(loop, peers), path)
        }, call: { target in
            let (sock, path) = target as! (Socket, String)
            return attempt {
                try sock.connect(toUnixPath: path)
                try sock.read(tag: 1)
                return check(!sock.isDisconnected, "disconnected")
            }
        }),
        WaitingCall(name: "adopt a descriptor", prepare: { loop, peers in
            var descriptors: [Int32] = [-1, -1]
            guard socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0, &descriptors) == 0 else { throw TestFailure("socketpair") }
            peers.keep(RawSocket(fd: descriptors[1]))
            return (loop, descriptors[0], peers)
        }, call: { target in
            let (loop, descriptor, peers) = target as! (EventLoop, Int32, Peers)
            return attempt {
                let recorder = Recorder("adopted")
                let sock = try Socket(connectedSocketDescriptor: descriptor, delegate: recorder, eventLoop: loop)
                peers.keep(sock)
                peers.keep(recorder)
                return check(sock.isConnected && sock.isUnixDomain, "not connected")
            }
        }),
        WaitingCall(name: "disconnect a connection", prepare: connected, call: { target in
            let sock = target as! Socket
            sock.disconnect()
            let refused = (try? sock.read(tag: 1)) == nil
            return check(sock.isDisconnected && refused, "still connected")
        }),
        WaitingCall(name: "disconnect after writing", prepare: connected, call: { target in
            let sock = target as! Socket
            sock.disconnectAfterWriting()
            return check((try? sock.write([1])) == nil, "a write was still taken")
        }),
        WaitingCall(name: "setters", prepare: { loop, peers in tcp(loop, peers) }, call: { target in
            let sock = target as! Socket
            return attempt {
                sock.noDelay = false
                try sock.setMaximumReadLength(100)
                return check(!sock.noDelay && sock.maximumReadLength == 100, "the getters did not see the setters")
            }
        }),
        WaitingCall(name: "set the delegate", prepare: { loop, peers in tcp(loop, peers) }, call: { target in
            let sock = target as! Socket
            let replacement = Recorder("replacement")
            sock.delegate = replacement
            return check(sock.delegate === replacement, "the delegate did not change")
        }),
        WaitingCall(name: "UDP bind", prepare: { loop, _ in UdpSocket(eventLoop: loop) }, call: { target in
            let sock = target as! UdpSocket
            return attempt {
                try sock.bind(toPort: 0, interface: "127.0.0.1")
                return check(sock.localPort != 0, "not bound")
            }
        }),
        WaitingCall(name: "UDP connect", prepare: { loop, peers in (UdpSocket(eventLoop: loop), peers.udpPeer.port) }, call: { target in
            let (sock, port) = target as! (UdpSocket, UInt16)
            return attempt {
                try sock.connect(toAddress: .ipv4Loopback(port: port))
                return "ok" // queued behind earlier sends: didConnect follows
            }
        }),
        WaitingCall(name: "UDP receiving", prepare: { loop, _ in
            let sock = UdpSocket(eventLoop: loop)
            try sock.bind(toPort: 0, interface: "127.0.0.1")
            return sock
        }, call: { target in
            let sock = target as! UdpSocket
            return attempt {
                try sock.beginReceiving()
                sock.pauseReceiving()
                try sock.receiveOnce()
                return "ok"
            }
        }),
        WaitingCall(name: "UDP options", prepare: { loop, _ in
            let sock = UdpSocket(eventLoop: loop)
            try sock.bind(toPort: 0, interface: "127.0.0.1")
            return sock
        }, call: { target in
            let sock = target as! UdpSocket
            return attempt {
                try sock.setMulticastTTL(7)
                sock.maxReceiveIPv4BufferSize = 1000
                var ttl: Int32 = 0
                var length = socklen_t(4)
                getsockopt(sock.descriptors.ipv4, Int32(IPPROTO_IP), IP_MULTICAST_TTL, &ttl, &length)
                return check(ttl == 7 && sock.maxReceiveIPv4BufferSize == 1000, "ttl \(ttl), limit \(sock.maxReceiveIPv4BufferSize)")
            }
        }),
        WaitingCall(name: "UDP close", prepare: { loop, _ in
            let sock = UdpSocket(eventLoop: loop)
            try sock.bind(toPort: 0, interface: "127.0.0.1")
            return sock
        }, call: { target in
            let sock = target as! UdpSocket
            sock.close()
            return check(sock.isClosed, "not closed")
        }),
        WaitingCall(name: "set the UDP delegate", prepare: { loop, _ in UdpSocket(eventLoop: loop) }, call: { target in
            let sock = target as! UdpSocket
            let replacement = UdpRecorder()
            sock.delegate = replacement
            return check(sock.delegate === replacement, "the delegate did not change")
        }),
    ]

    /// The targets of every waiting call, on the callback's own loop and on another one.
    struct Targets: @unchecked Sendable {
        let made: [(name: String, target: any Sendable, call: @Sendable (any Sendable) -> String)]

        init(_ loops: [EventLoop], _ peers: Peers) throws {
            var made: [(String, any Sendable, @Sendable (any Sendable) -> String)] = []
            for (place, loop) in zip(["same loop", "other loop"], loops) {
                for waiting in CallbackWaitTests.waitingCalls {
                    made.append(("\(waiting.name), \(place)", try waiting.prepare(loop, peers), waiting.call))
                }
            }
            self.made = made
        }

        /// Makes every call; what each returned with, when not with its effect.
        func callAll() -> [String] {
            made.compactMap { name, target, call in
                let outcome = call(target)
                return outcome == "ok" ? nil : "\(name): \(outcome)"
            }
        }
    }

    /// The waiting calls a socket makes on itself from inside its own callback: every one
    /// that applies to it, one after the other (the state each leaves is the next one's).
    static func ownCalls(_ sock: Socket, peers: Peers) -> [String] {
        var seen: [String] = []
        func note(_ name: String, _ outcome: String) {
            if outcome != "ok" { seen.append("same socket, \(name): \(outcome)") }
        }
        if sock.isAccepting {
            let port = sock.localPort
            sock.disconnect()
            note("disconnect a listener", check(portIsFree(port), "the port is still taken"))
        } else {
            note("setters", attempt {
                sock.noDelay = false
                try sock.setMaximumReadLength(100)
                return check(!sock.noDelay && sock.maximumReadLength == 100, "the getters did not see the setters")
            })
            sock.disconnectAfterWriting()
            note("disconnect after writing", check((try? sock.write([1])) == nil, "a write was still taken"))
            sock.disconnect()
            note("disconnect a connection", check(sock.isDisconnected, "still connected"))
        }
        note("connect", attempt {
            try sock.connect(toHost: "127.0.0.1", port: peers.listener.localPort)
            try sock.read(tag: 1)
            sock.disconnect()
            return check(sock.isDisconnected, "still connected")
        })
        note("accept", attempt {
            try sock.accept(onInterface: "127.0.0.1", port: 0)
            let port = sock.localPort
            let listening = !portIsFree(port)
            sock.disconnect()
            return check(listening && portIsFree(port), "listening \(listening)")
        })
        let delegate = sock.delegate
        sock.delegate = Recorder("replacement")
        sock.delegate = delegate
        note("set the delegate", check(sock.delegate === delegate, "the delegate did not change"))
        return seen
    }

    /// The same for a UDP socket.
    static func ownCalls(_ sock: UdpSocket, peers: Peers) -> [String] {
        var seen: [String] = []
        func note(_ name: String, _ outcome: String) {
            if outcome != "ok" { seen.append("same socket, \(name): \(outcome)") }
        }
        note("UDP options", attempt {
            try sock.setMulticastTTL(7)
            sock.maxReceiveIPv4BufferSize = 1000
            return check(sock.maxReceiveIPv4BufferSize == 1000, "the getter did not see the setter")
        })
        sock.pauseReceiving()
        note("UDP receiving", attempt {
            try sock.receiveOnce()
            return "ok"
        })
        sock.close()
        note("UDP close", check(sock.isClosed, "not closed"))
        note("UDP bind", attempt {
            try sock.bind(toPort: 0, interface: "127.0.0.1")
            return check(sock.localPort != 0, "not bound")
        })
        note("UDP connect", attempt {
            try sock.connect(toAddress: .ipv4Loopback(port: peers.udpPeer.port))
            return "ok"
        })
        let delegate = sock.delegate
        sock.delegate = UdpRecorder()
        sock.delegate = delegate
        note("set the UDP delegate", check(sock.delegate === delegate, "the delegate did not change"))
        sock.close()
        return seen
    }

    /// The callbacks the matrix calls from: a UDP socket's didReceive, a TCP connection's
    /// didRead, a listener's didAccept.
    enum Source: String, CaseIterable, Sendable {
        case udp, connection, listener
    }

    /// Every waiting call (TCP and UDP), made from a callback of each kind of socket on each
    /// kind of callback queue, against the calling socket itself, sockets on its loop and
    /// sockets on another loop: each returns, with its effect done.
    @Test(.timeLimit(.minutes(2)), arguments: QueueKind.allCases, Source.allCases)
    func waitingCallsFromCallbacksReturnWithTheirEffect(kind: QueueKind, source: Source) throws {
        let group = EventLoopGroup(loopCount: 2)
        let loops = group.loops // the callback's socket's loop first
        let (queue, waitFor) = try CallbackWaitTests.queue(kind)
        let peers = try Peers()
        defer { peers.close() }
        let targets = try Targets(loops, peers)
        let results = LockedValue<[String]>([])
        let done = Latch()
        let once = Atomic<Bool>(false)
        func finish(_ own: [String]) {
            results.withLock { $0 = own + targets.callAll() }
            done.open()
        }
        var keep: [AnyObject] = []
        var peer: RawSocket? = nil
        switch source {
        case .udp:
            let recorder = UdpRecorder()
            let sock = UdpSocket(delegate: recorder, callbackQueue: queue, eventLoop: loops[0])
            try sock.bind(toPort: 0, interface: "127.0.0.1")
            try sock.beginReceiving()
            recorder.onReceive = { sock, _, _ in
                guard !once.exchange(true, ordering: .relaxed) else { return }
                finish(CallbackWaitTests.ownCalls(sock, peers: peers))
            }
            try peers.udpPeer.send([1], toPort: sock.localPort)
            keep = [sock, recorder]
        case .connection:
            let recorder = Recorder("source")
            let sock = Socket(delegate: recorder, callbackQueue: queue, eventLoop: loops[0])
            let listener = try RawSocket.listen() // the targets' connections wait in the peers' backlog
            defer { listener.close() }
            try sock.connect(toHost: "127.0.0.1", port: listener.localPort)
            peer = try listener.accept()
            recorder.onRead = { sock, _, _ in
                guard !once.exchange(true, ordering: .relaxed) else { return }
                finish(CallbackWaitTests.ownCalls(sock, peers: peers))
            }
            try sock.read(tag: 1)
            try peer?.send("x")
            keep = [sock, recorder]
        case .listener:
            let recorder = Recorder("source")
            let sock = Socket(delegate: recorder, callbackQueue: queue, eventLoop: loops[0])
            try sock.accept(onInterface: "127.0.0.1", port: 0)
            recorder.onAccept = { sock, _ in
                guard !once.exchange(true, ordering: .relaxed) else { return }
                finish(CallbackWaitTests.ownCalls(sock, peers: peers))
            }
            peer = try RawSocket.connect(port: sock.localPort)
            keep = [sock, recorder]
        }
        defer { peer?.close() }
        #expect(waitFor(done), "the callback's calls did not return")
        #expect(results.withLock { $0 } == [])
        withExtendedLifetime(keep) {}
        try group.shutdown()
    }

    /// Two loops' callbacks that wait for each other's loops at the same moment: a cycle of
    /// loop waits, with no gate wait that could give way. The calls that would close it do
    /// not wait: they fail with `EDEADLK` and have no effect (a UDP bind, a TCP connect), or
    /// are queued and done when the other loop goes on (the disconnects of a listener and of
    /// a connection); the other call returns with its effect.
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
        let peer = try RawSocket.listen()
        defer { peer.close() }
        let unconnectedOnFirst = recordedSocket("unused", eventLoop: first).0
        let connectionOnFirst = recordedSocket("unused", eventLoop: first).0
        try connectionOnFirst.connect(toHost: "127.0.0.1", port: peer.localPort)
        let firstThread = Atomic<UInt>(0)
        let firstInside = Latch()
        let secondInside = Latch()
        let firstOutcome = LockedValue<String>("")
        let secondOutcome = LockedValue<String>("")
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
            var outcomes: [String] = []
            do throws(SocketError) {
                try onFirst.bind(toPort: 0, interface: "127.0.0.1") // would wait for the first loop
                outcomes.append("bound")
            } catch {
                outcomes.append("\(error.code) \(error.osError)")
            }
            do throws(SocketError) {
                try unconnectedOnFirst.connect(toHost: "127.0.0.1", port: peer.localPort)
                outcomes.append("connecting")
            } catch {
                outcomes.append("\(error.code) \(error.osError)")
            }
            secondOutcome.withLock { $0 = outcomes.joined(separator: ", ") }
            listenerOnFirst.disconnect() // the first loop is still waiting: queued
            connectionOnFirst.disconnect() // queued too
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
        #expect(secondOutcome.withLock { $0 } == "badConfig \(EDEADLK), badConfig \(EDEADLK)")
        #expect(onFirst.isClosed, "the refused bind had an effect")
        #expect(unconnectedOnFirst.isDisconnected, "the refused connect had an effect")
        #expect(CallbackWaitTests.spin { CallbackWaitTests.portIsFree(listenerPort) })
        #expect(listenerOnFirst.isDisconnected)
        #expect(CallbackWaitTests.spin { connectionOnFirst.isDisconnected })
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
