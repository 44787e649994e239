// SPDX-License-Identifier: MIT
import Glibc
import Synchronization
import Testing
@testable import SocketKit

/// Text that reaches C as a NUL-terminated string is cut at a NUL inside it: C sees
/// "localhost" in "localhost\0.evil.test". Every entry that takes such text refuses it, and
/// an empty TLS peer name (which would mean "no host-name check") is refused too.
@Suite struct EmbeddedNULTests {
    static let evil = "localhost\0.evil.test"

    /// Expects `body` to throw `code`, with a message that names the NUL.
    static func expectRefused(_ code: SocketError.Code, _ what: String, _ body: () throws -> Void,
                              sourceLocation: SourceLocation = #_sourceLocation) {
        do {
            try body()
            Issue.record("\(what): accepted", sourceLocation: sourceLocation)
        } catch {
            let refusal = error as? SocketError
            #expect(refusal?.code == code, "\(what): \(error)", sourceLocation: sourceLocation)
            if what != "empty peer name" {
                #expect(refusal?.message.contains("NUL") == true, "\(what): \(error)", sourceLocation: sourceLocation)
            }
        }
    }

    @Test func aPeerNameWithANULIsRefusedNotTruncated() throws {
        // Before: verified and sent as SNI as "localhost", so this pair became secure.
        let pair = try Pair(host: "localhost")
        defer { pair.close() }
        try pair.server.startTLS(TestCertificates.server())
        Self.expectRefused(.tlsSettings, "peer name") { try pair.client.startTLS(TestCertificates.client(peerName: Self.evil)) }
        #expect(!pair.client.isSecure)
    }

    @Test func anEmptyPeerNameIsRefusedNotAnAbsentCheck() throws {
        // Before: no SNI and no host-name check, so a certificate for another name passed.
        let pair = try Pair()
        defer { pair.close() }
        try pair.server.startTLS(TestCertificates.server("wrong-host"))
        Self.expectRefused(.tlsSettings, "empty peer name") { try pair.client.startTLS(TestCertificates.client(peerName: "")) }
        // Unset, the name is the host given to connect: the wrong host is caught.
        try pair.client.startTLS(TestCertificates.client())
        #expect(pair.clientRecorder.waitForDisconnect()??.code == .tlsHostnameMismatch)
    }

    @Test func aClientOverAUnixSocketNeedsAPeerNameToVerify() throws {
        // No host to check the certificate's names against: before, the chain alone was
        // checked, so any certificate the roots vouch for passed, whatever its name.
        let path = temporaryUnixPath("tls-name")
        let listenerRecorder = Recorder("listener")
        let listener = Socket(delegate: listenerRecorder)
        let servers = Recorder("servers")
        let variant = LockedValue("wrong-host")
        listenerRecorder.onAccept = { _, connection in
            connection.setDelegate(servers, callbackQueue: .eventLoop)
            try? connection.startTLS(TestCertificates.server(variant.withLock { $0 }))
        }
        try listener.accept(onUnixPath: path)
        defer { listener.disconnect() }
        for (name, expected) in [(nil, SocketError.Code.tlsSettings), ("localhost", .tlsHostnameMismatch)] {
            let (client, recorder) = recordedSocket("client")
            try client.connect(toUnixPath: path, timeout: 5)
            try client.startTLS(TestCertificates.client(peerName: name))
            let error = recorder.waitForDisconnect()
            #expect(error??.code == expected, "\(String(describing: name)): \(String(describing: error))")
            #expect(!recorder.events.contains(.secured))
        }
        // Named, against a certificate for that name: secure.
        variant.withLock { $0 = "server" }
        let (client, recorder) = recordedSocket("client")
        try client.connect(toUnixPath: path, timeout: 5)
        try client.startTLS(TestCertificates.client(peerName: "localhost"))
        #expect(recorder.waitForSecure())
        client.disconnect()
    }

    @Test func everyTLSTextWithANULIsASettingsError() throws {
        let good = TestCertificates.client()
        let server = TestCertificates.server()
        let chain = TestCertificates.path("server-chain.pem")
        let key = TestCertificates.path("server.key")
        var cases: [(String, TLSSettings)] = []
        func with(_ name: String, _ base: TLSSettings, _ change: (inout TLSSettings) -> Void) {
            var settings = base
            change(&settings)
            cases.append((name, settings))
        }
        with("trust file", good) { $0.trustRoots = .file(TestCertificates.path("ca.pem") + "\0.txt") }
        with("trust directory", good) { $0.trustRoots = .directory(TestCertificates.directory + "\0x") }
        with("trust PEM", good) { $0.trustRoots = .pem(TestCertificates.text("ca.pem") + "\0" + TestCertificates.text("other-ca.pem")) }
        with("chain file", server) { $0.certificateChain = .file(chain + "\0x") }
        with("chain PEM", server) { $0.certificateChain = .pem(TestCertificates.text("server-chain.pem") + "\0") }
        with("key file", server) { $0.privateKey = .file(key + "\0x") }
        with("key PEM", server) { $0.privateKey = .pem("\0" + TestCertificates.text("server.key")) }
        with("password", server) {
            $0.privateKey = .file(TestCertificates.path("server-encrypted.key"))
            $0.privateKeyPassword = "secret\0tail"
        }
        with("cipher list", good) { $0.cipherList = "HIGH\0:@SECLEVEL=0" }
        with("cipher suites", good) { $0.cipherSuites = "TLS_AES_128_GCM_SHA256\0" }
        with("ALPN", good) { $0.alpnProtocols = ["h2\0x"] }
        with("key log", good) { $0.keyLogFile = "/tmp/socketkit-keys\0.log" }
        with("peer name", good) { $0.peerName = Self.evil }
        let pair = try Pair()
        defer { pair.close() }
        for (name, settings) in cases {
            Self.expectRefused(.tlsSettings, name) { try pair.client.startTLS(settings) }
        }
    }

    @Test func hostsInterfacesAndPathsWithANULAreBadParameters() throws {
        let listener = try RawSocket.listen()
        defer { listener.close() }
        let port = listener.localPort
        // Before, each of these used "127.0.0.1" (or resolved "localhost").
        let clientRecorder = Recorder("client") // delegates are held weakly
        let client = Socket(delegate: clientRecorder)
        Self.expectRefused(.badParam, "host") { try client.connect(toHost: "127.0.0.1\0.evil.test", port: port) }
        Self.expectRefused(.badParam, "local interface") {
            try client.connect(toHost: "127.0.0.1", port: port, viaInterface: "127.0.0.1\0x")
        }
        Self.expectRefused(.badParam, "local interface of an address") {
            try client.connect(to: .ipv4Loopback(port: port), viaInterface: "127.0.0.1\0:5000")
        }
        Self.expectRefused(.badParam, "Unix path") { try client.connect(toUnixPath: "/tmp/socketkit\0.sock") }
        Self.expectRefused(.badParam, "lookupHost") { _ = try Socket.lookupHost(Self.evil, port: 80) }
        Self.expectRefused(.badParam, "IP address") { _ = try SocketAddress(ipAddress: "127.0.0.1\0x", port: 80) }
        Self.expectRefused(.badParam, "queue name") { _ = try SerialCallbackQueue(name: "queue\0name") }
        let serverRecorder = Recorder("server")
        let server = Socket(delegate: serverRecorder)
        Self.expectRefused(.badParam, "listening interface") { try server.accept(onInterface: "127.0.0.1\0x", port: 0) }
        Self.expectRefused(.badParam, "listening Unix path") { try server.accept(onUnixPath: "/tmp/socketkit\0.sock") }
        // Nothing was started: both sockets still work.
        try client.connect(toHost: "127.0.0.1", port: port, timeout: 5)
        client.disconnect()
        try server.accept(onInterface: "127.0.0.1", port: 0)
        server.disconnect()
    }

    @Test func aRawUnixAddressWithANULInsideItsPathIsRefused() throws {
        // The kernel ends a pathname at its first NUL: "/tmp/x\0y" would reach "/tmp/x".
        let good = try SocketAddress(unixPath: "/tmp/x")
        let embedded = try #require(SocketAddress(bytes: good.bytes + Array("y".utf8) + [0]))
        let recorder = Recorder("client")
        let client = Socket(delegate: recorder)
        Self.expectRefused(.badParam, "raw Unix address") { try client.connect(to: embedded) }
        // Trailing NULs (padding) are fine; an abstract name (leading NUL) is taken as given.
        let padded = try #require(SocketAddress(bytes: good.bytes + [0, 0, 0]))
        #expect((try? padded.checkedPathname()) != nil)
        let abstract = try #require(SocketAddress(bytes: [UInt8(AF_UNIX), 0, 0, 0x61, 0, 0x62]))
        #expect((try? abstract.checkedPathname()) != nil)
    }

    @Test func udpHostsInterfacesAndGroupsWithANULAreBadParameters() throws {
        let unboundRecorder = UdpRecorder()
        let unbound = UdpSocket(delegate: unboundRecorder)
        defer { unbound.close() }
        Self.expectRefused(.badParam, "bind interface") { try unbound.bind(toPort: 0, interface: "127.0.0.1\0x") }
        Self.expectRefused(.badParam, "connect host") { try unbound.connect(toHost: "127.0.0.1\0.evil.test", port: 9) }
        Self.expectRefused(.badParam, "send host") { try unbound.send([1], toHost: "127.0.0.1\0.evil.test", port: 9) }
        let boundRecorder = UdpRecorder()
        let bound = UdpSocket(delegate: boundRecorder)
        defer { bound.close() }
        try bound.bind(toPort: 0, interface: nil)
        Self.expectRefused(.badParam, "group") { try bound.joinMulticastGroup("239.255.0.1\0x") }
        Self.expectRefused(.badParam, "group interface") { try bound.joinMulticastGroup("239.255.0.1", onInterface: "lo\0x") }
        Self.expectRefused(.badParam, "leave group") { try bound.leaveMulticastGroup("239.255.0.1\0x") }
        Self.expectRefused(.badParam, "source group") { try bound.joinMulticastGroup("232.1.2.3\0x", source: "127.0.0.1") }
        Self.expectRefused(.badParam, "source") { try bound.joinMulticastGroup("232.1.2.3", source: "127.0.0.1\0x") }
        Self.expectRefused(.badParam, "leave source") { try bound.leaveMulticastGroup("232.1.2.3", source: "127.0.0.1\0x") }
        Self.expectRefused(.badParam, "IPv4 multicast interface") { try bound.sendIPv4Multicast(onInterface: "127.0.0.1\0x") }
        Self.expectRefused(.badParam, "IPv6 multicast interface") { try bound.sendIPv6Multicast(onInterface: "lo\0x") }
    }
}
