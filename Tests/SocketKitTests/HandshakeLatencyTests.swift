// SPDX-License-Identifier: MIT
import Glibc
import Testing
@testable import SocketKit

/// A TLS handshake and the first message after it must not wait for a delayed ACK (40 ms on
/// Linux) under Nagle's algorithm: the last flight of the handshake leaves in one send with
/// what follows it at once. Checked by what the kernel counted rather than by the clock (a
/// loaded machine or a sanitizer build moves times, not segments): with no-delay off, the
/// side under test sends the segments with data that coalescing gives, and one more when
/// the last flight and what follows leave apart.
@Suite("Handshake latency", .serialized)
struct HandshakeLatencyTests {
    /// The segments with data `socket` has sent, as the kernel counted them: TCP_INFO's
    /// `tcpi_data_segs_out` (Linux 4.6). Glibc's `struct tcp_info` ends before it, so it is
    /// read at its offset in linux/tcp.h's layout, which the kernel only ever appends to.
    static func dataSegmentsSent(_ socket: Socket) -> UInt32? {
        let result = LockedValue<UInt32?>(nil)
        let done = Latch()
        socket.perform { descriptors in
            var info = [UInt8](repeating: 0, count: 232)
            var size = socklen_t(info.count)
            let offset = 156 // offsetof(struct tcp_info, tcpi_data_segs_out)
            if getsockopt(descriptors.primary, Int32(IPPROTO_TCP), TCP_INFO, &info, &size) == 0,
               Int(size) >= offset + 4 {
                result.withLock { $0 = info.withUnsafeBytes { $0.loadUnaligned(fromByteOffset: offset, as: UInt32.self) } }
            }
            done.open()
        }
        done.wait()
        return result.withLock { $0 }
    }

    /// Handshake plus a first echo, with the client's no-delay off; returns the client.
    static func handshakeAndEcho(port: UInt16, expecting echo: String, settings: TLSSettings) throws -> Socket {
        let (client, recorder) = recordedSocket("client")
        client.noDelay = false
        try client.connect(toHost: "127.0.0.1", port: port, timeout: 10)
        // Queued in one turn of the client's loop: the write is in the queue before the
        // handshake can finish (the premise), however the scheduler treats this thread.
        client.perform { _ in
            try? client.startTLS(settings)
            try? client.write(bytes("ping\n"))
            try? client.read(toData: bytes("\n"))
        }
        guard recorder.waitForBytes(5) == bytes(echo) else {
            client.disconnect()
            throw TestFailure("no echo: \(recorder.events)")
        }
        return client
    }

    @Test(.timeLimit(.minutes(1)))
    func aClientsFinishedAndFirstWriteLeaveTogetherAgainstOpenSSL() throws {
        // openssl s_server sends no session ticket here: nothing answers our Finished, so a
        // write sent after it waited for the server's delayed ACK.
        let certificates = TestCertificates.directory
        let server = try ResourceExhaustionTests.ChildProcess(shellCommand:
            "exec openssl s_server -accept 127.0.0.1:0 -naccept 3 -rev -num_tickets 0 -tls1_3 "
            + "-cert '\(certificates)/server.pem' -cert_chain '\(certificates)/intermediate.pem' "
            + "-key '\(certificates)/server.key' 2>&1")
        defer { server.stop() }
        var port: UInt16 = 0
        while port == 0, let line = server.readLine(timeout: 20) {
            if line.hasPrefix("ACCEPT 127.0.0.1:") { port = UInt16(line.split(separator: ":").last ?? "") ?? 0 }
        }
        #expect(port != 0)
        var settings = TestCertificates.client(peerName: "localhost")
        settings.sessionResumption = false
        for _ in 0..<3 {
            let client = try Self.handshakeAndEcho(port: port, expecting: "gnip\n", settings: settings) // -rev reverses
            defer { client.disconnect() }
            // The ClientHello, then the Finished with the write; apart, three.
            #expect(Self.dataSegmentsSent(client) == 2)
        }
    }

    @Test(.timeLimit(.minutes(1)))
    func aServersTicketsAndFirstAnswerLeaveTogether() throws {
        // Our client sends its Finished and request together; the server's session tickets
        // and the echo its loop-thread callback writes must then leave together too: sent
        // apart, the echo waited for the client's delayed ACK of the tickets.
        let listenerRecorder = Recorder("listener")
        let listener = Socket(delegate: listenerRecorder) // accepted sockets take its noDelay
        listener.noDelay = false // the server side under test
        let accepted = LockedValue<[Socket]>([])
        let servers = Recorder("servers")
        servers.onRead = { sock, data, _ in
            try? sock.write(data)
            try? sock.read(toData: bytes("\n"))
        }
        listenerRecorder.onAccept = { _, connection in
            accepted.withLock { $0.append(connection) }
            connection.setDelegate(servers, callbackQueue: .eventLoop)
            try? connection.startTLS(TestCertificates.server())
            try? connection.read(toData: bytes("\n"))
        }
        try listener.accept(onInterface: "127.0.0.1", port: 0)
        defer {
            listener.disconnect()
            for connection in accepted.withLock({ $0 }) { connection.disconnect() }
        }
        var settings = TestCertificates.client()
        settings.sessionResumption = false
        for index in 0..<3 {
            let client = try Self.handshakeAndEcho(port: listener.localPort, expecting: "ping\n", settings: settings)
            defer { client.disconnect() }
            let server = try #require(accepted.withLock { $0.count > index ? $0[index] : nil })
            // The server's flight, then its tickets with the echo; apart, three.
            #expect(Self.dataSegmentsSent(server) == 2)
        }
    }
}
