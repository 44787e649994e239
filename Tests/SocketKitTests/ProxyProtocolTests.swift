// SPDX-License-Identifier: MIT
import Glibc
import Testing
@testable import SocketKit

/// Headers as a proxy writes them (the specification's layouts), made by hand so each part
/// can be wrong on purpose.
enum ProxyHeaders {
    static func v1(_ line: String) -> [UInt8] { Array("PROXY \(line)\r\n".utf8) }

    /// command 0x21 = version 2, PROXY; 0x20 = LOCAL. family 0x11 TCP4, 0x21 TCP6, 0x31 UNIX.
    static func v2(command: UInt8 = 0x21, family: UInt8, block: [UInt8]) -> [UInt8] {
        ProxyHeader.v2Signature + [command, family, UInt8(block.count >> 8), UInt8(block.count & 0xFF)] + block
    }

    static func port(_ value: UInt16) -> [UInt8] { [UInt8(value >> 8), UInt8(value & 0xFF)] }

    static func v2IPv4(_ source: [UInt8], _ sourcePort: UInt16, _ destination: [UInt8], _ destinationPort: UInt16,
                       tlvs: [UInt8] = []) -> [UInt8] {
        v2(family: 0x11, block: source + destination + port(sourcePort) + port(destinationPort) + tlvs)
    }

    static func v2IPv6(_ source: String, _ sourcePort: UInt16, _ destination: String, _ destinationPort: UInt16) -> [UInt8] {
        func raw(_ text: String) -> [UInt8] {
            var address = in6_addr()
            precondition(inet_pton(AF_INET6, text, &address) == 1)
            return withUnsafeBytes(of: address) { Array($0) }
        }
        return v2(family: 0x21, block: raw(source) + raw(destination) + port(sourcePort) + port(destinationPort))
    }

    /// A TCP4 header carrying a CRC32C TLV (after `before`), with the right checksum plus
    /// `damage`.
    static func v2IPv4WithCRC32C(before: [UInt8] = [], damage: UInt32 = 0) -> [UInt8] {
        var header = v2IPv4([198, 51, 100, 7], 4321, [127, 0, 0, 1], 80, tlvs: before + [ProxyHeader.crc32cType, 0, 4, 0, 0, 0, 0])
        let crc = header.withUnsafeBytes { ProxyHeader.crc32c($0) } &+ damage
        for index in 0..<4 { header[header.count - 4 + index] = UInt8(truncatingIfNeeded: crc >> (24 - 8 * index)) }
        return header
    }

    static func v2Unix(_ source: String, _ destination: String) -> [UInt8] {
        func path(_ text: String) -> [UInt8] { Array(text.utf8) + [UInt8](repeating: 0, count: 108 - text.utf8.count) }
        return v2(family: 0x31, block: path(source) + path(destination))
    }
}

@Suite("PROXY protocol on listeners")
struct ProxyProtocolTests {
    /// A listener on 127.0.0.1 expecting `mode`, whose accepted sockets report to its recorder.
    static func listener(_ mode: ProxyProtocolMode, timeout: Double? = nil) throws -> (Socket, Recorder) {
        let (listener, recorder) = recordedSocket("listener")
        recorder.onAccept = { [weak recorder] _, child in child.delegate = recorder }  // weak: no cycle
        listener.proxyProtocol = mode
        if let timeout { try listener.setProxyHeaderTimeout(timeout) }
        try listener.accept(onInterface: "127.0.0.1", port: 0)
        return (listener, recorder)
    }

    /// The listener closed the connection: an end of stream, or a reset when the bytes it
    /// refused were still unread (the kernel's answer to closing over unread input).
    static func closedByTheListener(_ raw: RawSocket) -> Bool {
        do {
            _ = try raw.receiveUntilEndOfStream(timeout: 30)
            return true
        } catch {
            return "\(error)".contains("reset")
        }
    }

    @Test func aV1HeaderGivesTheClientsAddressesAndTheBytesAfterItAreTheFirstRead() throws {
        let (listener, recorder) = try Self.listener(.v1)
        defer { listener.disconnect() }
        let client = try RawSocket.connect(port: listener.localPort)
        defer { client.close() }
        // One send: the header and the first request in the same segment.
        try client.send(ProxyHeaders.v1("TCP4 192.0.2.7 198.51.100.9 51234 443") + bytes("hello\n"))
        let server = try #require(recorder.waitForAccepted(1).first)
        #expect(server.connectedHost == "192.0.2.7" && server.connectedPort == 51234)
        #expect(server.localHost == "198.51.100.9" && server.localPort == 443)
        #expect(server.proxyAddress?.host == "127.0.0.1" && server.proxyAddress?.port != 0)
        #expect(server.proxyProtocolVersion == 1)
        try server.read(toData: Socket.lf, tag: 7)
        #expect(recorder.wait { $0.contains(.read(bytes("hello\n"), tag: 7)) })
        server.disconnect()
    }

    @Test func aV2HeaderOverIPv6SplitAcrossWritesWaitsForItsLastPart() throws {
        let (listener, recorder) = try Self.listener(.either)
        defer { listener.disconnect() }
        let header = ProxyHeaders.v2IPv6("2001:db8::1", 40000, "2001:db8::2", 8443)
        let first = try RawSocket.connect(port: listener.localPort)
        defer { first.close() }
        try first.send(Array(header.prefix(10)))
        // A second connection, complete, is accepted while the first still lacks bytes.
        let second = try RawSocket.connect(port: listener.localPort)
        defer { second.close() }
        try second.send(ProxyHeaders.v1("TCP4 10.0.0.1 10.0.0.2 1 2"))
        let accepted = recorder.waitForAccepted(1)
        #expect(accepted.count == 1 && accepted.first?.connectedHost == "10.0.0.1")
        try first.send(Array(header[10..<20]))
        try first.send(Array(header[20...]) + bytes("after"))
        let both = recorder.waitForAccepted(2)
        let server = try #require(both.count == 2 ? both[1] : nil)
        #expect(server.connectedHost == "2001:db8::1" && server.connectedPort == 40000 && server.isIPv6)
        #expect(server.localHost == "2001:db8::2" && server.localPort == 8443)
        #expect(server.proxyProtocolVersion == 2 && server.proxyAddress?.host == "127.0.0.1")
        try server.read(toLength: 5, tag: 1)
        #expect(recorder.wait { $0.contains(.read(bytes("after"), tag: 1)) })
        for socket in both { socket.disconnect() }
    }

    @Test func aLocalCommandKeepsTheRealPeerAndTLVsAreSkipped() throws {
        let (listener, recorder) = try Self.listener(.v2)
        defer { listener.disconnect() }
        let client = try RawSocket.connect(port: listener.localPort)
        defer { client.close() }
        // LOCAL with an address block anyway (allowed: skipped), then a PROXY one with a TLV.
        try client.send(ProxyHeaders.v2(command: 0x20, family: 0x11, block: [UInt8](repeating: 9, count: 12)) + bytes("x"))
        let server = try #require(recorder.waitForAccepted(1).first)
        #expect(server.connectedHost == "127.0.0.1" && server.proxyAddress == nil && server.proxyProtocolVersion == nil)
        let second = try RawSocket.connect(port: listener.localPort)
        defer { second.close() }
        let tlv: [UInt8] = [0x02, 0x00, 0x0B] + bytes("example.com")  // PP2_TYPE_AUTHORITY
        try second.send(ProxyHeaders.v2IPv4([203, 0, 113, 5], 1234, [127, 0, 0, 1], 80, tlvs: tlv) + bytes("y"))
        let proxied = try #require(recorder.waitForAccepted(2).last)
        #expect(proxied.connectedHost == "203.0.113.5" && proxied.connectedPort == 1234)
        try proxied.read(toLength: 1, tag: 2)
        #expect(recorder.wait { $0.contains(.read(bytes("y"), tag: 2)) })
        server.disconnect()
        proxied.disconnect()
    }

    @Test func aUnixFamilyHeaderGivesUnixAddresses() throws {
        let (listener, recorder) = try Self.listener(.v2)
        defer { listener.disconnect() }
        let client = try RawSocket.connect(port: listener.localPort)
        defer { client.close() }
        try client.send(ProxyHeaders.v2Unix("/run/client.sock", "/run/haproxy.sock"))
        let server = try #require(recorder.waitForAccepted(1).first)
        #expect(server.connectedUnixPath == "/run/client.sock" && server.connectedHost == nil)
        #expect(server.localAddress?.unixDisplayName == "/run/haproxy.sock")
        server.disconnect()
    }

    /// Each bad start closes its connection (the client sees the end of the stream) and
    /// nothing is accepted; a good connection afterwards still is.
    @Test(arguments: [
        ("garbage", ProxyProtocolMode.either, bytes("GET / HTTP/1.1\r\n\r\n")),
        ("v2 where v1 is expected", .v1, ProxyHeaders.v2IPv4([1, 2, 3, 4], 1, [5, 6, 7, 8], 2)),
        ("v1 longer than 107 bytes", .v1, bytes("PROXY TCP4 " + String(repeating: "1", count: 120) + "\r\n")),
        ("v1 with a bad address", .v1, ProxyHeaders.v1("TCP4 300.1.1.1 1.1.1.1 1 2")),
        ("v1 with a leading-zero port", .v1, ProxyHeaders.v1("TCP4 1.1.1.1 1.1.1.1 01 2")),
        ("v1 family mismatch", .v1, ProxyHeaders.v1("TCP6 1.1.1.1 1.1.1.1 1 2")),
        ("v2 version 3", .v2, ProxyHeader.v2Signature + [0x31, 0x11, 0, 12] + [UInt8](repeating: 0, count: 12)),
        ("v2 short IPv4 block", .v2, ProxyHeaders.v2(family: 0x11, block: [1, 2, 3])),
        ("v2 oversized", .v2, ProxyHeader.v2Signature + [0x21, 0x11, 0xFF, 0xFF]),
        ("v2 datagram", .v2, ProxyHeaders.v2(family: 0x12, block: [UInt8](repeating: 1, count: 12))),
        ("v2 CRC32C that does not match", .v2, ProxyHeaders.v2IPv4WithCRC32C(damage: 1)),
        ("v2 CRC32C of 3 bytes", .v2, ProxyHeaders.v2IPv4([1, 2, 3, 4], 1, [5, 6, 7, 8], 2, tlvs: [0x03, 0, 3, 1, 2, 3])),
        ("v2 TLV past the end", .v2, ProxyHeaders.v2IPv4([1, 2, 3, 4], 1, [5, 6, 7, 8], 2, tlvs: [0x02, 0, 9] + bytes("short"))),
    ])
    func aBadHeaderClosesThatConnectionOnly(_ name: String, _ mode: ProxyProtocolMode, _ start: [UInt8]) throws {
        let (listener, recorder) = try Self.listener(mode)
        defer { listener.disconnect() }
        let bad = try RawSocket.connect(port: listener.localPort)
        defer { bad.close() }
        try bad.send(start)
        #expect(Self.closedByTheListener(bad), "\(name)")
        let good = try RawSocket.connect(port: listener.localPort)
        defer { good.close() }
        try good.send(mode == .v2 ? ProxyHeaders.v2IPv4([9, 9, 9, 9], 9, [1, 1, 1, 1], 1)
                                  : ProxyHeaders.v1("TCP4 9.9.9.9 1.1.1.1 9 1"))
        let accepted = recorder.waitForAccepted(1)
        #expect(accepted.count == 1 && accepted.first?.connectedHost == "9.9.9.9", "\(name)")
        #expect(listener.isAccepting)
        accepted.forEach { $0.disconnect() }
    }

    @Test func aHeaderCutShortOrNeverSentClosesTheConnection() throws {
        let (listener, recorder) = try Self.listener(.either, timeout: 0.2)
        defer { listener.disconnect() }
        let truncated = try RawSocket.connect(port: listener.localPort)
        defer { truncated.close() }
        try truncated.send(Array(ProxyHeaders.v1("TCP4 1.1.1.1 2.2.2.2 1 2").prefix(12)))
        truncated.shutdownWrite()
        #expect(Self.closedByTheListener(truncated))
        let silent = try RawSocket.connect(port: listener.localPort)
        defer { silent.close() }
        // Closed by the listener's header timeout (0.2 s), well inside the 30 s bound.
        #expect(Self.closedByTheListener(silent))
        #expect(recorder.waitForAccepted(1, timeout: 0.5).isEmpty)
    }

    @Test func theHeaderComesBeforeTheTLSClientHello() throws {
        let (listener, recorder) = try Self.listener(.v1)
        recorder.onAccept = { [weak recorder] _, child in
            child.delegate = recorder
            try? child.startTLS(TestCertificates.server())
        }
        defer { listener.disconnect() }
        let (client, clientRecorder) = recordedSocket("client")
        try client.connect(toHost: "127.0.0.1", port: listener.localPort, timeout: 10)
        #expect(clientRecorder.waitForConnect())
        // Written before startTLS: plaintext, ahead of the ClientHello (HAProxy send-proxy).
        try client.write(ProxyHeaders.v1("TCP4 192.0.2.1 192.0.2.2 5000 443"), tag: 0)
        try client.startTLS(TestCertificates.client(peerName: "localhost"))
        #expect(clientRecorder.waitForSecure())
        let server = try #require(recorder.waitForAccepted(1).first)
        #expect(server.connectedHost == "192.0.2.1" && server.connectedPort == 5000)
        try client.write(bytes("secret\n"), tag: 1)
        try server.read(toData: Socket.lf, tag: 3)
        #expect(recorder.wait { $0.contains(.read(bytes("secret\n"), tag: 3)) })
        client.disconnect()
        server.disconnect()
    }

    @Test func withoutTheOptionTheHeaderIsData() throws {
        let (listener, recorder) = try Self.listener(.none)
        defer { listener.disconnect() }
        let client = try RawSocket.connect(port: listener.localPort)
        defer { client.close() }
        let header = ProxyHeaders.v1("TCP4 192.0.2.7 198.51.100.9 1 2")
        try client.send(header)
        let server = try #require(recorder.waitForAccepted(1).first)
        #expect(server.connectedHost == "127.0.0.1" && server.proxyAddress == nil)
        try server.read(toLength: header.count, tag: 1)
        #expect(recorder.wait { $0.contains(.read(header, tag: 1)) })
        #expect(throws: SocketError.self) { try listener.setProxyHeaderTimeout(0) }
        server.disconnect()
    }

    /// The parser alone: every strict prefix of a correct header asks for more.
    @Test func everyPrefixOfAHeaderNeedsMoreAndTheWholeIsComplete() {
        let headers: [[UInt8]] = [ProxyHeaders.v1("TCP6 ::1 2001:db8::7 65535 0"),
                                  ProxyHeaders.v1("UNKNOWN whatever"),
                                  ProxyHeaders.v2IPv6("::1", 1, "::2", 2),
                                  ProxyHeaders.v2Unix("/a", "/b")]
        for header in headers {
            for count in 0..<header.count {
                let outcome = header.prefix(count).withUnsafeBytes { ProxyHeader.parse($0, mode: .either) }
                #expect(outcome == .needMore, "\(count) of \(header.count)")
            }
            let whole = (header + [1, 2, 3]).withUnsafeBytes { ProxyHeader.parse($0, mode: .either) }
            guard case .complete(let parsed) = whole else {
                Issue.record("not complete: \(whole)")
                continue
            }
            #expect(parsed.length == header.count)
        }
    }
}

extension ProxyProtocolTests {
    /// The async face's idiom: `AsyncListener`'s `configure` sets the mode; a connection
    /// reaches the sequence only with its header read, reporting the client the header
    /// names; a bad header never reaches it.
    @Test(.timeLimit(.minutes(1)))
    func anAsyncListenerHandsOutConnectionsWithTheHeadersAddresses() async throws {
        let listener = try AsyncListener(host: "127.0.0.1", port: 0) { $0.proxyProtocol = .v2 }
        defer { listener.close() }
        let bad = try RawSocket.connect(port: listener.localPort)
        defer { bad.close() }
        try bad.send(bytes("GET / HTTP/1.1\r\n\r\n"))
        #expect(Self.closedByTheListener(bad))
        let client = try RawSocket.connect(port: listener.localPort)
        defer { client.close() }
        try client.send(ProxyHeaders.v2IPv6("2001:db8::10", 50000, "2001:db8::20", 8443) + bytes("hello"))
        var connections = listener.connections.makeAsyncIterator()
        let server = try #require(try await connections.next())
        #expect(server.socket.connectedHost == "2001:db8::10" && server.socket.connectedPort == 50000)
        #expect(server.socket.localAddress?.host == "2001:db8::20" && server.socket.proxyProtocolVersion == 2)
        #expect(server.socket.proxyAddress?.host == "127.0.0.1")
        #expect(try await server.read(exactly: 5) == bytes("hello"))
        await server.close()
    }

    /// A CRC32C TLV is verified (the specification's MUST): the right checksum, behind
    /// another TLV, passes; one bit off is refused (aBadHeaderClosesThatConnectionOnly
    /// shows it over a socket). The checksum itself is the standard CRC32C.
    @Test func aCRC32CTLVIsVerified() throws {
        #expect(Array("123456789".utf8).withUnsafeBytes { ProxyHeader.crc32c($0) } == 0xE306_9283)
        let authority: [UInt8] = [0x02, 0x00, 0x0B] + bytes("example.com")
        let good = ProxyHeaders.v2IPv4WithCRC32C(before: authority)
        let outcome = good.withUnsafeBytes { ProxyHeader.parse($0, mode: .v2) }
        guard case .complete(let parsed) = outcome else {
            Issue.record("a correct CRC32C was refused: \(outcome)")
            return
        }
        #expect(parsed.length == good.count && parsed.source?.host == "198.51.100.7")
        for bit in [1, 1 << 31] as [UInt32] {
            let damaged = ProxyHeaders.v2IPv4WithCRC32C(before: authority, damage: bit)
            guard case .invalid(let why) = damaged.withUnsafeBytes({ ProxyHeader.parse($0, mode: .v2) }) else {
                Issue.record("a CRC32C off by \(bit) was taken")
                continue
            }
            #expect(why.contains("CRC32C does not match"))
        }
    }

    /// Fields are split on the space byte: a space followed by a combining mark (one Swift
    /// Character) still separates them (found while writing the fuzzer's model).
    @Test func fieldsAreSplitOnSpaceBytesNotCharacters() {
        let unknown = bytes("PROXY UNKNOWN \u{301}x\r\n")
        let outcome = unknown.withUnsafeBytes { ProxyHeader.parse($0, mode: .v1) }
        #expect(outcome == .complete(ProxyHeader(version: 1, length: unknown.count, keepsRealAddresses: true)))
        let tcp = bytes("PROXY TCP4 1.2.3.4 \u{301}5.6.7.8 1 2\r\n")
        guard case .invalid = tcp.withUnsafeBytes({ ProxyHeader.parse($0, mode: .v1) }) else {
            Issue.record("a combining mark in an address was taken")
            return
        }
    }
}
