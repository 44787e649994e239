// SPDX-License-Identifier: MIT
import Glibc
import Testing
@testable import SocketKit

/// A TLS handshake and the first message after it must not wait for a delayed ACK (40 ms on
/// Linux) under Nagle's algorithm: the last flight of the handshake leaves in one send with
/// what follows it at once. Measured side by side: connections with no-delay off (on is the
/// default) against the same connections with it on, which never wait for an ACK, so that
/// a slow machine (a sanitizer build, a loaded CI core) slows both alike. A wait for a
/// delayed ACK adds 40 ms or more to the median.
@Suite("Handshake latency", .serialized)
struct HandshakeLatencyTests {
    static let connections = 5
    /// What no-delay off may add to the median: well under a delayed ACK.
    static let allowedExtraMilliseconds = 20.0

    static func median(_ samples: [Double]) -> Double { samples.sorted()[samples.count / 2] }

    /// Handshake plus a first echo, from connect to the echo's arrival, in milliseconds.
    static func handshakeAndEcho(port: UInt16, expecting echo: String, settings: TLSSettings,
                                 noDelay: Bool) throws -> Double {
        let (client, recorder) = recordedSocket("client")
        defer { client.disconnect() }
        client.noDelay = noDelay
        let start = monotonicNanoseconds()
        try client.connect(toHost: "127.0.0.1", port: port, timeout: 10)
        // Queued in one turn of the client's loop: the write is in the queue before the
        // handshake can finish (the premise), however the scheduler treats this thread.
        client.perform { _ in
            try? client.startTLS(settings)
            try? client.write(bytes("ping\n"))
            try? client.read(toData: bytes("\n"))
        }
        guard recorder.waitForBytes(5) == bytes(echo) else { throw TestFailure("no echo: \(recorder.events)") }
        return Double(monotonicNanoseconds() - start) / 1e6
    }

    /// Connections alternately with no-delay off and on (`connect` sets it on the side under
    /// test); expects the medians to differ by less than a delayed ACK.
    static func expectNoDelayedAck(_ connect: (_ noDelay: Bool) throws -> Double) throws {
        var withNagle: [Double] = []
        var withoutNagle: [Double] = []
        for _ in 0..<connections {
            withNagle.append(try connect(false))
            withoutNagle.append(try connect(true))
        }
        #expect(median(withNagle) - median(withoutNagle) < allowedExtraMilliseconds,
                "handshake + first echo (ms), no-delay off: \(withNagle); on: \(withoutNagle)")
    }

    @Test(.timeLimit(.minutes(1)))
    func aClientsFinishedAndFirstWriteLeaveTogetherAgainstOpenSSL() throws {
        // openssl s_server sends no session ticket here: nothing answers our Finished, so a
        // write sent after it waited for the server's delayed ACK.
        let certificates = TestCertificates.directory
        let server = try ResourceExhaustionTests.ChildProcess(shellCommand:
            "exec openssl s_server -accept 127.0.0.1:0 -naccept \(2 * Self.connections) -rev -num_tickets 0 -tls1_3 "
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
        try Self.expectNoDelayedAck { noDelay in
            try Self.handshakeAndEcho(port: port, expecting: "gnip\n", settings: settings, noDelay: noDelay) // -rev reverses
        }
    }

    @Test(.timeLimit(.minutes(1)))
    func aServersTicketsAndFirstAnswerLeaveTogether() throws {
        // Our client sends its Finished and request together; the server's session tickets
        // and the echo its loop-thread callback writes must then leave together too: sent
        // apart, the echo waited for the client's delayed ACK of the tickets.
        let listenerRecorder = Recorder("listener")
        let listener = Socket(delegate: listenerRecorder) // accepted sockets take its noDelay
        let servers = Recorder("servers")
        servers.onRead = { sock, data, _ in
            try? sock.write(data)
            try? sock.read(toData: bytes("\n"))
        }
        listenerRecorder.onAccept = { _, connection in
            connection.setDelegate(servers, callbackQueue: .eventLoop)
            try? connection.startTLS(TestCertificates.server())
            try? connection.read(toData: bytes("\n"))
        }
        try listener.accept(onInterface: "127.0.0.1", port: 0)
        defer { listener.disconnect() }
        var settings = TestCertificates.client()
        settings.sessionResumption = false
        try Self.expectNoDelayedAck { noDelay in
            listener.noDelay = noDelay // the server side under test
            return try Self.handshakeAndEcho(port: listener.localPort, expecting: "ping\n", settings: settings,
                                             noDelay: false)
        }
    }
}
