// SPDX-License-Identifier: MIT
import Glibc
import Testing
@testable import SocketKit

/// Upstream §4.1 and §4.3 (GCDAsyncSocketConnectionTests / SwiftTests), asserting hard,
/// with ports picked by the kernel; plus the failures a connect must report.
@Suite("Connecting and accepting")
struct ConnectionTests {
    /// RFC 6761: names under `.invalid` never resolve, and the nameserver is not asked
    /// (with none reachable it would answer EAI_AGAIN, after its retries).
    @Test(arguments: ["no-such-host.invalid", "INVALID", "a.b.Invalid."])
    func namesUnderInvalidFailAtOnce(name: String) throws {
        do {
            _ = try Socket.lookupHost(name, port: 80)
            Issue.record("\(name) resolved")
        } catch {
            #expect(error.code == .resolution)
            #expect(error.osError == EAI_NONAME)
            #expect(error.message.contains("RFC 6761"), "\(error)")
        }
    }

    @Test func fullConnectionReportsTheServerAddress() throws {
        let pair = try Pair()
        defer { pair.close() }
        #expect(pair.clientRecorder.events.first == .connected(host: "127.0.0.1", port: pair.listener.localPort))
        #expect(pair.client.isConnected)
        #expect(pair.client.connectedHost == "127.0.0.1")
        #expect(pair.client.connectedPort == pair.listener.localPort)
        #expect(pair.server.isConnected)
        #expect(pair.server.connectedPort == pair.client.localPort)
        #expect(pair.server.localPort == pair.listener.localPort)
        #expect(pair.client.connectedAddress == (try SocketAddress(ipAddress: "127.0.0.1", port: pair.listener.localPort)))
        #expect(pair.client.localAddress?.port == pair.client.localPort)
        #expect(pair.server.connectedAddress == pair.client.localAddress)
        final class Note {}
        let note = Note()
        pair.client.userData = note
        #expect(pair.client.userData === note)
    }

    @Test func ipv4OnlyServerAcceptsAnIPv4Client() throws {
        let listenerRecorder = Recorder()
        let listener = Socket(delegate: listenerRecorder)
        listener.isIPv6Enabled = false
        try listener.accept(onPort: 0)
        defer { listener.disconnect() }
        #expect(listener.isIPv4 && !listener.isIPv6)
        let clientRecorder = Recorder()
        let client = Socket(delegate: clientRecorder)
        try client.connect(toHost: "127.0.0.1", port: listener.localPort)
        #expect(clientRecorder.waitForConnect())
        let accepted = try #require(listenerRecorder.waitForAccepted(1).first)
        #expect(accepted.isIPv4 && !accepted.isIPv6)
        client.disconnect()
    }

    @Test func ipv6OnlyServerAcceptsAnIPv6Client() throws {
        let listenerRecorder = Recorder()
        let listener = Socket(delegate: listenerRecorder)
        listener.isIPv4Enabled = false
        try listener.accept(onPort: 0)
        defer { listener.disconnect() }
        #expect(listener.isIPv6 && !listener.isIPv4)
        let clientRecorder = Recorder()
        let client = Socket(delegate: clientRecorder)
        try client.connect(toHost: "::1", port: listener.localPort)
        #expect(clientRecorder.waitForConnect())
        #expect(clientRecorder.events.first == .connected(host: "::1", port: listener.localPort))
        let accepted = try #require(listenerRecorder.waitForAccepted(1).first)
        #expect(accepted.isIPv6 && !accepted.isIPv4)
        #expect(accepted.connectedHost == "::1")
        client.disconnect()
    }

    @Test(arguments: [true, false])
    func localhostConnectsWhicheverFamilyIsPreferred(preferIPv4: Bool) throws {
        let listenerRecorder = Recorder()
        let listener = Socket(delegate: listenerRecorder)
        try listener.accept(onPort: 0)
        defer { listener.disconnect() }
        #expect(listener.isIPv4 && listener.isIPv6)
        let clientRecorder = Recorder()
        let client = Socket(delegate: clientRecorder)
        client.isIPv4PreferredOverIPv6 = preferIPv4
        try client.connect(toHost: "localhost", port: listener.localPort)
        #expect(clientRecorder.waitForConnect())
        #expect(client.connectedHost == (preferIPv4 ? "127.0.0.1" : "::1"))
        client.disconnect()
    }

    @Test(arguments: ["127.0.0.1", "::1"])
    func adoptingAConnectedDescriptorReportsItsPeer(host: String) throws {
        let listenerRecorder = Recorder()
        let listener = Socket(delegate: listenerRecorder)
        try listener.accept(onInterface: host, port: 0)
        defer { listener.disconnect() }
        let raw = try RawSocket.connect(to: host, port: listener.localPort)
        let recorder = Recorder()
        let adopted = try Socket(connectedSocketDescriptor: raw.detach(), delegate: recorder)
        #expect(adopted.isConnected)
        #expect(adopted.connectedHost == host)
        #expect(adopted.connectedPort == listener.localPort)
        #expect(recorder.waitForConnect())
        #expect(recorder.events.first == .connected(host: host, port: listener.localPort))
        // The adopted socket works: it talks to the accepted one.
        let server = try #require(listenerRecorder.waitForAccepted(1).first)
        let serverRecorder = Recorder()
        server.delegate = serverRecorder
        try server.read(toLength: 5)
        try adopted.write(bytes("hello"))
        #expect(serverRecorder.waitForBytes(5) == bytes("hello"))
        adopted.disconnect()
    }

    @Test func adoptingAConnectedUnixDescriptorWorks() throws {
        var pair: [Int32] = [-1, -1]
        #expect(socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0, &pair) == 0)
        let peer = RawSocket(fd: pair[1])
        defer { peer.close() }
        let recorder = Recorder()
        let adopted = try Socket(connectedSocketDescriptor: pair[0], delegate: recorder)
        #expect(adopted.isUnixDomain)
        #expect(recorder.waitForConnect())
        try adopted.read(toLength: 3)
        try peer.send("abc")
        #expect(recorder.waitForBytes(3) == bytes("abc"))
        try adopted.write(bytes("xyz"))
        #expect(try peer.receive(exactly: 3) == bytes("xyz"))
        adopted.disconnect()
    }

    @Test func adoptingAnUnconnectedOrBogusDescriptorThrows() throws {
        let negative = #expect(throws: SocketError.self) { try Socket(connectedSocketDescriptor: -1) }
        #expect(negative?.code == .badParam)
        let unconnected = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(unconnected) }
        let error = #expect(throws: SocketError.self) { try Socket(connectedSocketDescriptor: unconnected) }
        #expect(error?.code == .system)
        #expect(error?.osError == ENOTCONN)
        // Each failure leaves the descriptor open and with the caller (checked before
        // another descriptor could take its number).
        #expect(fcntl(unconnected, F_GETFD) >= 0)
        let datagram = socket(AF_INET, Int32(SOCK_DGRAM.rawValue), 0)
        defer { close(datagram) }
        let notStream = #expect(throws: SocketError.self) { try Socket(connectedSocketDescriptor: datagram) }
        #expect(notStream?.code == .badParam)
        #expect(fcntl(datagram, F_GETFD) >= 0)
        let pipeEnds = UnsafeMutablePointer<Int32>.allocate(capacity: 2)
        defer { pipeEnds.deallocate() }
        #expect(pipe(pipeEnds) == 0)
        defer { close(pipeEnds[0]); close(pipeEnds[1]) }
        let notSocket = #expect(throws: SocketError.self) { try Socket(connectedSocketDescriptor: pipeEnds[0]) }
        #expect(notSocket?.code == .system && notSocket?.osError == ENOTSOCK)
        #expect(fcntl(pipeEnds[0], F_GETFD) >= 0)
    }

    /// Upstream §4.6 (GCDAsyncSocketUNTests), with the two disabled transfer tests revived.
    @Test func unixDomainConnectionTransfersBothWays() throws {
        let path = temporaryUnixPath("full")
        let listenerRecorder = Recorder()
        let listener = Socket(delegate: listenerRecorder)
        try listener.accept(onUnixPath: path)
        #expect(listener.isUnixDomain)
        let clientRecorder = Recorder()
        let client = Socket(delegate: clientRecorder)
        try client.connect(toUnixPath: path, timeout: -1)
        #expect(clientRecorder.waitForConnect())
        #expect(clientRecorder.events.first == .connectedUnix(path: path))
        #expect(client.connectedUnixPath == path)
        #expect(client.connectedHost == nil && client.connectedPort == 0)
        let server = try #require(listenerRecorder.waitForAccepted(1).first)
        let serverRecorder = Recorder()
        server.delegate = serverRecorder

        try server.read(timeout: 5)
        try client.write(bytes("ThisTestRocks!!!"))
        #expect(serverRecorder.waitForBytes(16) == bytes("ThisTestRocks!!!"))

        try client.read(timeout: 5)
        try server.write(bytes("ThisTestRocks!!!"))
        #expect(clientRecorder.waitForBytes(16) == bytes("ThisTestRocks!!!"))

        client.disconnect()
        listener.disconnect()
        #expect(listenerRecorder.waitForDisconnect() == .some(nil))
        #expect(access(path, F_OK) != 0, "the listener removes its socket file when it closes")
    }

    @Test func unixListenerReplacesAStaleSocketButNeverARegularFile() throws {
        let path = temporaryUnixPath("stale")
        // Leave a socket file behind the way a crashed process would.
        let stale = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        let address = try SocketAddress(unixPath: path)
        #expect(address.withSockAddr { bind(stale, $0, $1) } == 0)
        close(stale)
        #expect(access(path, F_OK) == 0)
        let (second, _) = recordedSocket()
        try second.accept(onUnixPath: path)
        second.disconnect()

        let regular = temporaryUnixPath("regular")
        let file = open(regular, O_CREAT | O_WRONLY, 0o600)
        close(file)
        defer { unlink(regular) }
        let (third, _) = recordedSocket()
        let error = #expect(throws: SocketError.self) { try third.accept(onUnixPath: regular) }
        #expect(error?.osError == EADDRINUSE)
        #expect(access(regular, F_OK) == 0, "a regular file is never deleted")
    }

    @Test func unixPathTooLongIsRefusedNotTruncated() throws {
        let (socket, _) = recordedSocket()
        let path = "/tmp/" + String(repeating: "x", count: 200)
        let error = #expect(throws: SocketError.self) { try socket.accept(onUnixPath: path) }
        #expect(error?.code == .badParam)
        #expect(throws: SocketError.self) { try socket.connect(toUnixPath: path) }
        #expect(throws: SocketError.self) { try socket.connect(toUnixPath: "") }
        #expect(socket.isDisconnected)
    }

    @Test func connectionRefusedIsReportedWithItsErrno() throws {
        let refusing = try RawSocket.boundNotListening()
        defer { refusing.close() }
        let recorder = Recorder()
        let client = Socket(delegate: recorder)
        try client.connect(toHost: "127.0.0.1", port: refusing.localPort, timeout: 5)
        let error = try #require(recorder.waitForDisconnect())
        #expect(error?.code == .system)
        #expect(error?.osError == ECONNREFUSED)
        #expect(recorder.events.count == 1, "a failed connect reports only didDisconnect: \(recorder.events)")
        #expect(client.isDisconnected)
    }

    @Test func unixConnectToNothingIsReported() throws {
        let recorder = Recorder()
        let client = Socket(delegate: recorder)
        try client.connect(toUnixPath: temporaryUnixPath("nothing"))
        let error = try #require(recorder.waitForDisconnect())
        #expect(error?.code == .system)
        #expect(error?.osError == ENOENT)
    }

    @Test func aNameThatDoesNotResolveIsReportedAsResolutionFailure() throws {
        let recorder = Recorder()
        let client = Socket(delegate: recorder)
        try client.connect(toHost: "no-such-host.invalid", port: 80, timeout: 30)
        let error = try #require(recorder.waitForDisconnect(timeout: 35))
        #expect(error?.code == .resolution)
        #expect(error?.osError != 0)
        #expect(recorder.events.count == 1)
    }

    @Test func connectTimeoutFiresWhenThePeerNeverAnswers() throws {
        // A listener whose accept queue is full drops further SYNs: connects hang.
        let blackhole = try RawSocket.listen(backlog: 0)
        defer { blackhole.close() }
        var fillers: [Socket] = []
        let fillerRecorder = Recorder()
        for _ in 0..<4 {
            let filler = Socket(delegate: fillerRecorder)
            try filler.connect(toHost: "127.0.0.1", port: blackhole.localPort)
            fillers.append(filler)
        }
        let recorder = Recorder()
        let client = Socket(delegate: recorder)
        let started = monotonicNanoseconds()
        try client.connect(toHost: "127.0.0.1", port: blackhole.localPort, timeout: 0.3)
        let error = try #require(recorder.waitForDisconnect())
        let elapsed = Double(monotonicNanoseconds() - started) / 1e9
        #expect(error?.code == .connectTimeout)
        #expect(elapsed >= 0.29)
        for filler in fillers { filler.disconnect() }
    }

    @Test func happyEyeballsFallsBackWhenThePreferredFamilyRefuses() throws {
        let listenerRecorder = Recorder()
        let listener = Socket(delegate: listenerRecorder)
        listener.isIPv6Enabled = false
        try listener.accept(onPort: 0)
        defer { listener.disconnect() }
        let recorder = Recorder()
        let client = Socket(delegate: recorder)
        client.isIPv4PreferredOverIPv6 = false
        client.alternateAddressDelay = 5 // a refusal moves on at once, not after the delay
        let started = monotonicNanoseconds()
        try client.connect(toHost: "localhost", port: listener.localPort, timeout: 10)
        #expect(recorder.waitForConnect())
        #expect(Double(monotonicNanoseconds() - started) / 1e9 < 4)
        #expect(client.connectedHost == "127.0.0.1")
        client.disconnect()
    }

    @Test func happyEyeballsStartsTheOtherFamilyAfterTheDelayWhenThePreferredHangs() throws {
        // IPv6 listener with a full queue (SYNs dropped) and a working IPv4 one, same port.
        let working = try RawSocket.listen(host: "127.0.0.1")
        defer { working.close() }
        let hanging = try RawSocket.listen(host: "::1", port: working.localPort, backlog: 0)
        defer { hanging.close() }
        let fillerRecorder = Recorder()
        var fillers: [Socket] = []
        for _ in 0..<4 {
            let filler = Socket(delegate: fillerRecorder)
            try filler.connect(toHost: "::1", port: working.localPort)
            fillers.append(filler)
        }
        defer { for filler in fillers { filler.disconnect() } }
        let recorder = Recorder()
        let client = Socket(delegate: recorder)
        client.isIPv4PreferredOverIPv6 = false
        client.alternateAddressDelay = 0.2
        let started = monotonicNanoseconds()
        try client.connect(toHost: "localhost", port: working.localPort, timeout: 10)
        #expect(recorder.waitForConnect())
        let elapsed = Double(monotonicNanoseconds() - started) / 1e9
        #expect(client.connectedHost == "127.0.0.1")
        #expect(elapsed >= 0.19, "the IPv4 attempt waits for the alternate address delay")
        #expect(elapsed < 5)
        client.disconnect()
    }

    @Test func disabledFamiliesAreNotTried() throws {
        let (listener, _) = recordedSocket()
        listener.isIPv4Enabled = false
        // The listener's port on ::1 only; on 127.0.0.1 the same port is held by a socket that
        // refuses connections (taken by a test running in parallel, it would be accepted and
        // reset there instead). A port taken on 127.0.0.1 already: another one.
        var refusing: RawSocket? = nil
        for _ in 0..<20 where refusing == nil {
            try listener.accept(onPort: 0)
            refusing = try? RawSocket.boundNotListening(port: listener.localPort)
            if refusing == nil { listener.disconnect() }
        }
        let held = try #require(refusing, "no port free on both ::1 and 127.0.0.1")
        defer {
            held.close()
            listener.disconnect()
        }
        let recorder = Recorder()
        let client = Socket(delegate: recorder)
        client.isIPv6Enabled = false
        try client.connect(toHost: "localhost", port: listener.localPort, timeout: 5)
        // Only 127.0.0.1 is tried, and it refuses.
        let error = try #require(recorder.waitForDisconnect())
        #expect(error?.osError == ECONNREFUSED)

        client.isIPv4Enabled = false
        let both = #expect(throws: SocketError.self) { try client.connect(toHost: "localhost", port: 1) }
        #expect(both?.code == .badConfig)
    }

    @Test func aHostWithNoAddressOfAnEnabledFamilyIsOtherError() throws {
        // As upstream ("IPv4 has been disabled and DNS lookup found no IPv6 address"):
        // reported through didDisconnect, after the connect call returned.
        let (listener, _) = recordedSocket()
        try listener.accept(onInterface: "127.0.0.1", port: 0)
        defer { listener.disconnect() }
        let (client, recorder) = recordedSocket()
        client.isIPv4Enabled = false
        try client.connect(toHost: "127.0.0.1", port: listener.localPort, timeout: 5)
        let error = try #require(recorder.waitForDisconnect())
        #expect(error?.code == .other)
        #expect(error?.osError == 0)
        #expect(recorder.events.count == 1, "\(recorder.events)")
        #expect(client.isDisconnected)
        // The same socket, with IPv4 back on, connects.
        client.isIPv4Enabled = true
        try client.connect(toHost: "127.0.0.1", port: listener.localPort, timeout: 5)
        #expect(recorder.waitForConnect())
        client.disconnect()
    }

    @Test func connectToAnAddressViaAnInterfaceBindsTheLocalEnd() throws {
        // 127.0.0.2 is on lo but is not the address the kernel would pick for 127.0.0.1.
        let listener = try RawSocket.listen()
        defer { listener.close() }
        let (client, recorder) = recordedSocket()
        try client.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: listener.localPort),
                           viaInterface: "127.0.0.2", timeout: 5)
        let server = try listener.accept(timeout: 10)
        defer { server.close() }
        #expect(recorder.waitForConnect())
        #expect(client.localHost == "127.0.0.2")
        #expect(SystemCalls.peerAddress(server.fd)?.host == "127.0.0.2")
        #expect(SystemCalls.peerAddress(server.fd)?.port == client.localPort)
        client.disconnect()

        // An interface without an address of the target's family: didDisconnect says so.
        let (mismatched, mismatchedRecorder) = recordedSocket()
        try mismatched.connect(to: SocketAddress(ipAddress: "::1", port: listener.localPort), viaInterface: "127.0.0.2",
                               timeout: 5)
        let error = try #require(mismatchedRecorder.waitForDisconnect())
        #expect(error?.code == .badParam)
        #expect(mismatchedRecorder.events.count == 1)
        #expect(throws: SocketError.self) {
            try mismatched.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 1), viaInterface: "no-such-if0")
        }
    }

    @Test func connectViaInterfaceAndLocalPortBindsTheLocalEnd() throws {
        let pair = try Pair(configureClient: { _ in })
        pair.close()
        let listenerRecorder = Recorder()
        let listener = Socket(delegate: listenerRecorder)
        try listener.accept(onInterface: "127.0.0.1", port: 0)
        defer { listener.disconnect() }
        let free = try RawSocket.listen()
        let localPort = free.localPort
        free.close()
        let recorder = Recorder()
        let client = Socket(delegate: recorder)
        try client.connect(toHost: "127.0.0.1", port: listener.localPort, viaInterface: "lo:\(localPort)")
        #expect(recorder.waitForConnect())
        #expect(client.localPort == localPort)
        #expect(client.localHost == "127.0.0.1")
        let server = try #require(listenerRecorder.waitForAccepted(1).first)
        #expect(server.connectedPort == localPort)
        client.disconnect()

        let (portOnly, _) = recordedSocket()
        #expect(throws: SocketError.self) { try portOnly.connect(toHost: "127.0.0.1", port: 1, viaInterface: "no-such-if0") }
        #expect(throws: SocketError.self) { try portOnly.connect(toHost: "127.0.0.1", port: 1, viaInterface: "lo:notaport") }
    }

    @Test func connectToARawAddress() throws {
        let (listener, _) = recordedSocket()
        try listener.accept(onInterface: "::1", port: 0)
        defer { listener.disconnect() }
        let recorder = Recorder()
        let client = Socket(delegate: recorder)
        try client.connect(to: SocketAddress(ipAddress: "::1", port: listener.localPort), timeout: 5)
        #expect(recorder.waitForConnect())
        #expect(client.isIPv6)
        client.disconnect()
    }

    @Test func listenerOnPortZeroUsesOnePortForBothFamilies() throws {
        let (listener, _) = recordedSocket()
        try listener.accept(onPort: 0)
        defer { listener.disconnect() }
        let ports = Set(listener.listeningAddresses.map(\.port))
        #expect(listener.listeningAddresses.count == 2)
        #expect(ports.count == 1)
        for host in ["127.0.0.1", "::1"] {
            let raw = try RawSocket.connect(to: host, port: listener.localPort)
            raw.close()
        }
    }

    @Test func aPortInUseIsReportedSynchronously() throws {
        let (first, _) = recordedSocket()
        try first.accept(onInterface: "127.0.0.1", port: 0)
        defer { first.disconnect() }
        let (second, _) = recordedSocket()
        let error = #expect(throws: SocketError.self) { try second.accept(onInterface: "127.0.0.1", port: first.localPort) }
        #expect(error?.code == .system)
        #expect(error?.osError == EADDRINUSE)
        #expect(second.isDisconnected)
        #expect(throws: SocketError.self) { try second.accept(onInterface: "no-such-if0", port: 0) }
    }

    @Test func acceptedSocketsAreSpreadOverTheGroupsLoops() throws {
        let group = EventLoopGroup(loopCount: 3)
        defer { try? group.shutdown() }
        let listenerRecorder = Recorder()
        let listener = Socket(delegate: listenerRecorder, eventLoop: group.next())
        try listener.accept(onInterface: "127.0.0.1", port: 0)
        var raws: [RawSocket] = []
        for _ in 0..<6 { raws.append(try RawSocket.connect(port: listener.localPort)) }
        let accepted = listenerRecorder.waitForAccepted(6)
        #expect(accepted.count == 6)
        #expect(Set(accepted.map { $0.eventLoop.index }).count == 3)
        for raw in raws { raw.close() }
        listener.disconnect()
    }

    @Test func theNewLoopHookPlacesAcceptedSockets() throws {
        let group = EventLoopGroup(loopCount: 2)
        defer { try? group.shutdown() }
        let chosen = group.loops[1]
        let listenerRecorder = Recorder()
        listenerRecorder.loopForConnections = chosen
        let listener = Socket(delegate: listenerRecorder, eventLoop: group.loops[0])
        try listener.accept(onInterface: "127.0.0.1", port: 0)
        var raws: [RawSocket] = []
        for _ in 0..<3 { raws.append(try RawSocket.connect(port: listener.localPort)) }
        let accepted = listenerRecorder.waitForAccepted(3)
        #expect(accepted.allSatisfy { $0.eventLoop === chosen })
        for raw in raws { raw.close() }
        listener.disconnect()
    }

    @Test func connectingTwiceOrWithoutADelegateIsAnError() throws {
        let lonely = Socket()
        let noDelegate = #expect(throws: SocketError.self) { try lonely.connect(toHost: "127.0.0.1", port: 1) }
        #expect(noDelegate?.code == .badConfig)
        #expect(throws: SocketError.self) { try lonely.accept(onPort: 0) }

        let pair = try Pair()
        defer { pair.close() }
        let again = #expect(throws: SocketError.self) { try pair.client.connect(toHost: "127.0.0.1", port: 1) }
        #expect(again?.code == .badConfig)
        #expect(throws: SocketError.self) { try pair.listener.accept(onPort: 0) }
        #expect(throws: SocketError.self) { try pair.client.connect(toHost: "", port: 1) }
        #expect(throws: SocketError.self) { try pair.client.connect(toHost: "x", port: 1, timeout: .nan) }
    }

    @Test func aDisconnectedSocketCanConnectAgain() throws {
        let listenerRecorder = Recorder()
        let listener = Socket(delegate: listenerRecorder)
        try listener.accept(onInterface: "127.0.0.1", port: 0)
        defer { listener.disconnect() }
        let recorder = Recorder()
        let client = Socket(delegate: recorder)
        for round in 1...3 {
            try client.connect(toHost: "127.0.0.1", port: listener.localPort, timeout: 5)
            #expect(recorder.wait { $0.filter { if case .connected = $0 { return true }; return false }.count == round })
            client.disconnect()
            #expect(recorder.wait { $0.filter(\.isDisconnect).count == round })
        }
        #expect(recorder.callbacksAfterDisconnect == 0)
    }
}
