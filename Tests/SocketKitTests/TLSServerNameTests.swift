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

