// SPDX-License-Identifier: MIT
import Glibc
import Synchronization
import Testing
@testable import SocketKit

/// A peer SocketKit did not write: Tests/peers/async_peer.py in a process of its own.
final class PythonPeer: Sendable {
    let port: UInt16
    private let child: UncheckedSendable<ResourceExhaustionTests.ChildProcess>

    init(_ mode: String, tls: Bool = false) throws {
        let top = String(#filePath).split(separator: "/").dropLast(2).joined(separator: "/")
        var command = "exec python3 -u '/\(top)/peers/async_peer.py' \(mode)"
        if tls {
            command += " --cert '\(TestCertificates.path("server-chain.pem"))' --key '\(TestCertificates.path("server.key"))'"
        }
        let child = try ResourceExhaustionTests.ChildProcess(shellCommand: command)
        guard let banner = child.readLine(timeout: 20), let port = UInt16(banner.split(separator: " ").last ?? "") else {
            child.stop()
            throw TestFailure("async_peer.py \(mode) did not start")
        }
        self.port = port
        self.child = UncheckedSendable(child)
    }

    /// The next line the peer printed.
    func readLine(timeout: Double = 10) -> String? { child.value.readLine(timeout: timeout) }

    func stop() { child.value.stop() }
}

/// Waits (bounded) until `condition` holds, looking again every millisecond.
func eventually(seconds: Double = 10, _ condition: () -> Bool) async -> Bool {
    let limit = deadline(afterSeconds: seconds)
    while !condition() {
        guard monotonicNanoseconds() < limit else { return false }
        try? await Task.sleep(for: .milliseconds(1))
    }
    return true
}

/// The async TCP API: connecting, every read, writes, the end of the stream, TLS,
/// cancellation, scoped lifetime, listeners. Peers: Python's socket and ssl (async_peer.py)
/// and SocketKit's own listener.
@Suite("Async sockets", .timeLimit(.minutes(2)))
struct AsyncSocketTests {
    @Test func everyReadAgainstAPythonEchoPeer() async throws {
        let peer = try PythonPeer("echo")
        defer { peer.stop() }
        try await AsyncSocket.withConnection(toHost: "127.0.0.1", port: peer.port, timeout: .seconds(5)) { connection in
            try await connection.write(bytes("first line\nsecond"))
            #expect(try await connection.read(upTo: Socket.lf, maxLength: 100) == bytes("first line\n"))
            #expect(try await connection.read(exactly: 3) == bytes("sec"))
            var rest: [UInt8] = []
            while rest.count < 3 { rest += try await connection.read(maxLength: 2) }
            #expect(rest == bytes("ond"))
            try await connection.write(pattern(100_000))
            #expect(try await connection.read(exactly: 100_000) == pattern(100_000))
        }
    }

    @Test func connectsToAnAddressAndToAUnixPath() async throws {
        let path = temporaryUnixPath("async")
        let unixListener = try AsyncListener(unixPath: path)
        defer { unixListener.close() }
        let tcpListener = try AsyncListener(host: "127.0.0.1", port: 0)
        defer { tcpListener.close() }
        let viaPath = try await AsyncSocket.connect(toUnixPath: path, timeout: .seconds(5))
        let address = try SocketAddress(ipAddress: "127.0.0.1", port: tcpListener.localPort)
        let viaAddress = try await AsyncSocket.connect(to: address, timeout: .seconds(5))
        for (listener, client) in [(unixListener, viaPath), (tcpListener, viaAddress)] {
            var connections = listener.connections.makeAsyncIterator()
            let server = try #require(try await connections.next())
            try await client.write(bytes("ping"))
            #expect(try await server.read(exactly: 4) == bytes("ping"))
            try await server.write(bytes("pong"))
            #expect(try await client.read(exactly: 4) == bytes("pong"))
            #expect(client === viaPath ? client.socket.isUnixDomain : client.socket.connectedPort == tcpListener.localPort)
            await client.close()
            #expect(try await server.read() == [], "the end of the stream")
            await server.close()
        }
    }

    @Test func errorsAreSocketErrors() async throws {
        let refusing = try RawSocket.boundNotListening()
        defer { refusing.close() }
        do {
            _ = try await AsyncSocket.connect(toHost: "127.0.0.1", port: refusing.localPort, timeout: .seconds(5))
            Issue.record("connected to a port nobody listens on")
        } catch let error as SocketError {
            #expect(error.code == .system && error.osError == ECONNREFUSED)
        }
        await #expect(throws: SocketError.self) {
            _ = try await AsyncSocket.connect(toHost: "", port: 1)
        }
    }

    /// A listener whose backlog is full: connects to it hang (the kernel drops the SYNs).
    static func saturatedListener() throws -> (RawSocket, [RawSocket]) {
        let listener = try RawSocket.listen(backlog: 0)
        var fillers: [RawSocket] = []
        for _ in 0..<4 {
            // Each succeeds at the kernel level until the backlog is full.
            let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue), 0)
            var address = sockaddr_in()
            address.sin_family = sa_family_t(AF_INET)
            address.sin_port = listener.localPort.bigEndian
            address.sin_addr.s_addr = inet_addr("127.0.0.1")
            _ = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(descriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
            }
            fillers.append(RawSocket(fd: descriptor))
        }
        return (listener, fillers)
    }

    @Test func aConnectTimesOutWithItsDuration() async throws {
        let (listener, fillers) = try Self.saturatedListener()
        defer { listener.close(); fillers.forEach { $0.close() } }
        // Without a timeout the attempt would wait for the kernel to give up (minutes): the
        // error says the Duration was the engine's timeout.
        do {
            _ = try await AsyncSocket.connect(toHost: "127.0.0.1", port: listener.localPort, timeout: .milliseconds(300))
            Issue.record("connected through a full backlog")
        } catch let error as SocketError {
            #expect(error.code == .connectTimeout)
        }
    }

    @Test func cancellingAConnectClosesTheAttempt() async throws {
        let (listener, fillers) = try Self.saturatedListener()
        defer { listener.close(); fillers.forEach { $0.close() } }
        let port = listener.localPort
        // The attempt is told apart by its local port: the fillers' own connects may still be
        // finishing (a count of those under way moved under load, and the test failed).
        let fillerPorts = connectionsUnderWay(toPort: port)
        let attempt = Task { try await AsyncSocket.connect(toHost: "127.0.0.1", port: port) }
        var attemptPorts: Set<UInt16> = []
        #expect(await eventually {
            attemptPorts = connectionsUnderWay(toPort: port).subtracting(fillerPorts)
            return attemptPorts.count == 1
        }, "the attempt's SYN is out")
        attempt.cancel()
        await #expect(throws: CancellationError.self) { _ = try await attempt.value }
        #expect(await eventually { connectionsUnderWay(toPort: port).isDisjoint(with: attemptPorts) },
                "the attempt's socket is closed")
        // Cancelled before it started: never connects either.
        let early = Task {
            withUnsafeCurrentTask { $0?.cancel() }
            return try await AsyncSocket.connect(toHost: "127.0.0.1", port: listener.localPort)
        }
        await #expect(throws: CancellationError.self) { _ = try await early.value }
    }

    @Test func cancellingAReadLosesNoBytes() async throws {
        let listener = try AsyncListener(host: "127.0.0.1", port: 0)
        defer { listener.close() }
        let client = try await AsyncSocket.connect(toHost: "127.0.0.1", port: listener.localPort)
        var connections = listener.connections.makeAsyncIterator()
        let server = try #require(try await connections.next())

        let reader = Task { try await client.read(exactly: 10) }
        try await server.write(bytes("12345"))
        #expect(await eventually { client.socket.readProgress?.bytesDone == 5 }, "the read has gathered 5 bytes")
        reader.cancel()
        await #expect(throws: CancellationError.self) { _ = try await reader.value }
        try await server.write(bytes("67\n"))
        #expect(try await client.read(upTo: Socket.lf, maxLength: 100) == bytes("1234567\n"))

        // Cancelled before its read could even be queued, with bytes waiting: they stay.
        try await server.write(bytes("abc"))
        #expect(try await client.read(exactly: 1) == bytes("a"))
        let early = Task {
            withUnsafeCurrentTask { $0?.cancel() }
            return try await client.read(exactly: 2)
        }
        _ = try? await early.value
        var rest: [UInt8] = []
        let taken = (try? await early.value) ?? []
        if taken.isEmpty { rest = try await client.read(exactly: 2) }
        #expect(taken + rest == bytes("bc"))
        await client.close()
        await server.close()
    }

    /// Cancellations racing completions, many times: the byte stream the reads get is the
    /// one sent, whoever wins each race.
    @Test func cancellationsRacingReadsNeverLoseOrRepeatABye() async throws {
        let listener = try AsyncListener(host: "127.0.0.1", port: 0)
        defer { listener.close() }
        let client = try await AsyncSocket.connect(toHost: "127.0.0.1", port: listener.localPort)
        var connections = listener.connections.makeAsyncIterator()
        let server = try #require(try await connections.next())
        let sent = pattern(4 * 300)
        var received: [UInt8] = []
        for round in 0..<300 {
            let reader = Task { try await client.read(exactly: 4) }
            try await server.write(Array(sent[round * 4..<(round + 1) * 4]))
            if round % 3 != 0 { await Task.yield() }
            reader.cancel()
            if let bytes = try? await reader.value { received += bytes }
            while received.count < (round + 1) * 4 {
                received += try await client.read(exactly: (round + 1) * 4 - received.count)
            }
        }
        #expect(received == sent)
        await client.close()
        await server.close()
    }

    @Test func theEndOfTheStreamKeepsWhatWasLeftAndTheWriteSideOpen() async throws {
        let peer = try PythonPeer("sendclose")
        defer { peer.stop() }
        let connection = try await AsyncSocket.connect(toHost: "127.0.0.1", port: peer.port)
        // "last words" (10 bytes), then the peer's end of stream: a read of 20 cannot complete.
        await #expect {
            _ = try await connection.read(exactly: 20)
        } throws: { error in
            (error as? SocketError)?.code == .closed
        }
        #expect(try await connection.read(exactly: 4) == bytes("last"))
        #expect(try await connection.read(upTo: bytes(" "), maxLength: 10) == bytes(" "))
        #expect(try await connection.read() == bytes("words"))
        #expect(try await connection.read() == [])
        var chunks = 0
        for try await _ in connection.chunks() { chunks += 1 }
        #expect(chunks == 0)
        #expect(connection.socket.isConnected, "open for writing")
        try await connection.write(bytes("bye"))
        await connection.close()
        #expect(peer.readLine() == "got bye")
    }

    @Test func messagesEndWithTheStreamAndAnUnfinishedOneIsAnError() async throws {
        let listener = try AsyncListener(host: "127.0.0.1", port: 0)
        defer { listener.close() }
        let client = try await AsyncSocket.connect(toHost: "127.0.0.1", port: listener.localPort)
        var connections = listener.connections.makeAsyncIterator()
        let server = try #require(try await connections.next())
        try await server.write(bytes("one\r\ntwo\r\n"))
        try await server.shutdownOutput()
        var messages: [String] = []
        for try await message in client.messages(separatedBy: Socket.crlf, maxLength: 100) {
            messages.append(String(decoding: message, as: UTF8.self))
        }
        #expect(messages == ["one", "two"])

        let second = try await AsyncSocket.connect(toHost: "127.0.0.1", port: listener.localPort)
        let other = try #require(try await connections.next())
        try await other.write(bytes("three\nfo"))
        try await other.shutdownOutput()
        var iterator = second.messages(separatedBy: Socket.lf, maxLength: 100).makeAsyncIterator()
        #expect(try await iterator.next() == bytes("three"))
        await #expect(throws: SocketError.self) { _ = try await iterator.next() }
        #expect(try await second.read() == bytes("fo"), "the unfinished message's bytes stay")
        for connection in [client, server, second, other] { await connection.close() }
    }

    @Test func halfCloseLetsThePeerAnswerAfterTheEndOfStream() async throws {
        for tls in [false, true] {
            let peer = try PythonPeer("halfclose", tls: tls)
            defer { peer.stop() }
            let connection = try await AsyncSocket.connect(toHost: "127.0.0.1", port: peer.port, timeout: .seconds(5),
                                                           tls: tls ? TestCertificates.client() : nil)
            try await connection.write(pattern(50_000))
            try await connection.write(bytes("tail"))
            try await connection.shutdownOutput()
            await #expect(throws: SocketError.self) { try await connection.write(bytes("late")) }
            #expect(try await connection.read(upTo: Socket.lf, maxLength: 100) == bytes("got 50004 bytes\n"), "TLS: \(tls)")
            #expect(try await connection.read() == [])
            await connection.close()
        }
    }

    @Test func startTLSAfterAPlaintextExchangeAndTLSFromTheStart() async throws {
        let starttls = try PythonPeer("starttls", tls: true)
        defer { starttls.stop() }
        try await AsyncSocket.withConnection(toHost: "127.0.0.1", port: starttls.port) { connection in
            try await connection.write(bytes("hello\n"))
            #expect(try await connection.read(upTo: Socket.lf, maxLength: 100) == bytes("hello\n"))
            try await connection.write(bytes("STARTTLS\n"))
            #expect(try await connection.read(upTo: Socket.lf, maxLength: 100) == bytes("OK\n"))
            try await connection.startTLS(TestCertificates.client())
            #expect(connection.isSecure)
            try await connection.write(bytes("secret\n"))
            #expect(try await connection.read(upTo: Socket.lf, maxLength: 100) == bytes("secret\n"))
        }

        let tlsPeer = try PythonPeer("echo", tls: true)
        defer { tlsPeer.stop() }
        let secure = try await AsyncSocket.connect(toHost: "127.0.0.1", port: tlsPeer.port, tls: TestCertificates.client())
        #expect(secure.isSecure && secure.socket.tlsInfo != nil)
        try await secure.write(bytes("over TLS"))
        #expect(try await secure.read(exactly: 8) == bytes("over TLS"))
        await secure.close()

        // The handshake's errors are the connect's.
        do {
            _ = try await AsyncSocket.connect(toHost: "127.0.0.1", port: tlsPeer.port,
                                              tls: TestCertificates.client(peerName: "wrong.example"))
            Issue.record("a wrong host name was accepted")
        } catch let error as SocketError {
            #expect(error.code == .tlsHostnameMismatch)
        }
    }

    @Test func writesWaitWhileTheQueueIsAboveItsHighWatermark() async throws {
        let listener = try AsyncListener(host: "127.0.0.1", port: 0)
        defer { listener.close() }
        let client = try await AsyncSocket.connect(toHost: "127.0.0.1", port: listener.localPort) { socket in
            try socket.setWriteWatermarks(low: 16 * 1024, high: 64 * 1024)
            try socket.setBufferSizes(send: 16 * 1024, receive: 0)
        }
        var connections = listener.connections.makeAsyncIterator()
        let server = try #require(try await connections.next())
        // Nobody reads: the first write stays queued above the high watermark.
        let big = pattern(4 * 1024 * 1024)
        let first = Task { try await client.write(big) }
        #expect(await eventually { client.bridge.isAboveHighWatermark })
        let queuedBefore = client.socket.queuedWriteBytes
        let second = Task { try await client.write(bytes("after")) }
        // The second write waits for room instead of queueing.
        #expect(await eventually { client.bridge.state.withLock { $0.roomWaiters.count == 1 } })
        #expect(client.socket.queuedWriteBytes <= queuedBefore)
        let everything = try await server.read(exactly: big.count + 5)
        #expect(Array(everything.prefix(big.count)) == big && Array(everything.suffix(5)) == bytes("after"))
        try await first.value
        try await second.value
        await client.close()
        await server.close()
    }

    @Test func scopedConnectionsCloseOnReturnAndOnThrow() async throws {
        let listener = try AsyncListener(host: "127.0.0.1", port: 0)
        defer { listener.close() }
        var connections = listener.connections.makeAsyncIterator()
        var kept: AsyncSocket? = nil
        try await AsyncSocket.withConnection(toHost: "127.0.0.1", port: listener.localPort) { connection in
            kept = connection
            try await connection.write(bytes("x"))
        }
        #expect(kept?.isClosed == true)
        let first = try #require(try await connections.next())
        #expect(try await first.read() == bytes("x"))
        #expect(try await first.read() == [], "the client closed")

        struct Failure: Error {}
        let second = try await AsyncSocket.connect(toHost: "127.0.0.1", port: listener.localPort)
        await #expect(throws: Failure.self) {
            try await second.executeThenClose { _ in throw Failure() }
        }
        #expect(second.isClosed)
        await #expect(throws: SocketError.self) { try await second.write(bytes("no")) }
    }

    @Test func aServerOfTaskGroupsOnTheConnectionsLoops() async throws {
        let listener = try AsyncListener(host: "127.0.0.1", port: 0)
        let server = Task {
            try await listener.executeThenClose { connections in
                try await withThrowingDiscardingTaskGroup { group in
                    for try await connection in connections {
                        group.addTask(executorPreference: connection.eventLoop) {
                            try await connection.executeThenClose { connection in
                                #expect(connection.eventLoop.inEventLoop, "the handler runs on its connection's loop")
                                for try await chunk in connection.chunks() { try await connection.write(chunk) }
                            }
                        }
                    }
                }
            }
        }
        try await withThrowingTaskGroup(of: Void.self) { clients in
            for index in 0..<16 {
                clients.addTask {
                    try await AsyncSocket.withConnection(toHost: "127.0.0.1", port: listener.localPort) { connection in
                        let message = pattern(10_000, seed: UInt8(index))
                        try await connection.write(message)
                        #expect(try await connection.read(exactly: message.count) == message)
                    }
                }
            }
            try await clients.waitForAll()
        }
        listener.close()
        try await server.value
    }
}

/// How many TCP sockets of this network namespace are in SYN_SENT towards `port` on
/// 127.0.0.1 (/proc/net/tcp: addresses in hexadecimal, state 02).
/// The local ports of this host's connections to 127.0.0.1:`port` that are still connecting
/// (SYN_SENT in /proc/net/tcp).
func connectionsUnderWay(toPort port: UInt16) -> Set<UInt16> {
    guard let file = fopen("/proc/net/tcp", "r") else { return [] }
    defer { fclose(file) }
    let remote = "0100007F:" + String(port, radix: 16, uppercase: true).leftPadded(to: 4)
    var line = [CChar](repeating: 0, count: 512)
    var ports: Set<UInt16> = []
    while fgets(&line, Int32(line.count), file) != nil {
        let fields = String(decoding: line.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
            .split(separator: " ")
        if fields.count > 3 && fields[2] == remote && fields[3] == "02",
           let local = fields[1].split(separator: ":").last, let localPort = UInt16(local, radix: 16) {
            ports.insert(localPort)
        }
    }
    return ports
}

extension String {
    func leftPadded(to width: Int) -> String { String(repeating: "0", count: max(0, width - count)) + self }
}
