// SPDX-License-Identifier: MIT
import Glibc
import Testing
@testable import SocketKit

@Suite struct TLSServerNameTests {
    /// The default "localhost" certificate, "wrong.example" for that name and the dns-ip
    /// certificate for any one label in front of "example.test".
    static var server: TLSSettings {
        var settings = TestCertificates.server()
        settings.serverNames = ["Wrong.Example": TestCertificates.server("wrong-host"),
                                "*.example.test": TestCertificates.server("dns-ip")]
        return settings
    }

    /// The subject of the certificate a client sending `name` (verifying it, or not) got.
    func subject(forName name: String, verify: Bool = true) throws -> String? {
        var client = TestCertificates.client(peerName: name)
        if !verify { client.peerVerification = TLSSettings.PeerVerification.none }
        let pair = try securePair(server: Self.server, client: client)
        defer { pair.close() }
        guard pair.clientRecorder.waitForSecure() else { throw TestFailure("\(name): \(pair.clientRecorder.events)") }
        #expect(pair.serverRecorder.waitForSecure())
        #expect(pair.server.tlsInfo?.serverName == name)
        return pair.client.tlsInfo?.peerCertificates.first?.subject
    }

    @Test func eachNameGetsItsCertificateAndAnUnknownOneTheDefault() throws {
        #expect(try subject(forName: "wrong.example")?.contains("CN=wrong.example") == true)
        #expect(try subject(forName: "WRONG.EXAMPLE")?.contains("CN=wrong.example") == true) // case
        #expect(try subject(forName: "localhost")?.contains("CN=localhost") == true)
        #expect(try subject(forName: "a.example.test", verify: false)?.contains("CN=dns-ip.invalid") == true)
        #expect(try subject(forName: "a.b.example.test", verify: false)?.contains("CN=localhost") == true) // one label
        #expect(try subject(forName: "unknown.example", verify: false)?.contains("CN=localhost") == true)
    }

    /// No SNI at all (an IP literal is never sent): the default certificate.
    @Test func aClientWithoutSNIGetsTheDefault() throws {
        var client = TestCertificates.client()
        client.peerVerification = TLSSettings.PeerVerification.none
        let pair = try securePair(server: Self.server, client: client)
        defer { pair.close() }
        #expect(pair.clientRecorder.waitForSecure())
        #expect(pair.client.tlsInfo?.peerCertificates.first?.subject.contains("CN=localhost") == true)
    }

    /// A name's settings give its certificate; client certificates are still verified by
    /// the default settings' mode and roots (the name's trust the system store here).
    @Test func clientCertificatesAreVerifiedAgainstTheDefaultsRoots() throws {
        var server = TestCertificates.server()
        server.peerVerification = .requireCertificate
        server.trustRoots = .file(TestCertificates.path("ca.pem"))
        server.serverNames = ["wrong.example": TestCertificates.server("wrong-host")]
        var client = TestCertificates.client(peerName: "wrong.example")
        client.certificateChain = .file(TestCertificates.path("client-chain.pem"))
        client.privateKey = .file(TestCertificates.path("client.key"))
        let pair = try securePair(server: server, client: client)
        defer { pair.close() }
        #expect(pair.serverRecorder.waitForSecure(), "\(pair.serverRecorder.events)")
        #expect(pair.server.tlsInfo?.peerCertificates.first?.subject.contains("SocketKit Test Client") == true)
        #expect(pair.client.tlsInfo?.peerCertificates.first?.subject.contains("CN=wrong.example") == true)

        let bare = try securePair(server: server, client: TestCertificates.client(peerName: "wrong.example"))
        defer { bare.close() }
        let error = bare.serverRecorder.waitForDisconnect()
        #expect(error??.code == .tlsClientCertificateRequired, "\(String(describing: error))")
    }

    @Test func badServerNamesAreRefused() throws {
        func refused(_ settings: TLSSettings) -> Bool {
            do { _ = try TLSContext.forSettings(settings); return false } catch { return error.code == .tlsSettings }
        }
        var settings = TestCertificates.server()
        for name in ["", "a..b", "bad name", "*.com", "a.*.example", "x\0.example"] {
            settings.serverNames = [name: TestCertificates.server("wrong-host")]
            #expect(refused(settings), "\(name)")
        }
        settings.serverNames = ["a.example": TestCertificates.client()]
        #expect(refused(settings))
        settings.serverNames = ["a.example": Self.server]
        #expect(refused(settings))
        var client = TestCertificates.client()
        client.serverNames = ["a.example": TestCertificates.server("wrong-host")]
        #expect(refused(client))
        settings.serverNames = ["a.example": TestCertificates.server("no-such-variant")]
        #expect(refused(settings))
    }
}

