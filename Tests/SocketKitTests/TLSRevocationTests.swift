// SPDX-License-Identifier: MIT
import Glibc
import Testing
@testable import SocketKit

/// Revocation by CRL files (issue 33, item 4): the CRLs of Tests/certs/make-test-certs.sh.
@Suite struct TLSRevocationTests {
    static let revoked: Int32 = 23 // X509_V_ERR_CERT_REVOKED
    static let unableToGetCRL: Int32 = 3 // X509_V_ERR_UNABLE_TO_GET_CRL

    static func client(crls: [String], wholeChain: Bool = true) -> TLSSettings {
        var settings = TestCertificates.client(peerName: "localhost")
        settings.crlFiles = crls.map { $0.hasPrefix("/") ? $0 : TestCertificates.path($0) }
        settings.crlCheckWholeChain = wholeChain
        return settings
    }

    func secures(server: TLSSettings, client: TLSSettings) throws -> Bool {
        let pair = try securePair(server: server, client: client)
        defer { pair.close() }
        return pair.clientRecorder.waitForSecure()
    }

    @Test func aClientWithCRLsRefusesARevokedServerAndAcceptsAGoodOne() throws {
        // Without CRLs the revoked certificate verifies: the check below is the CRLs'.
        #expect(try secures(server: TestCertificates.server("revoked"), client: TestCertificates.client(peerName: "localhost")))
        let error = try clientFailure(server: TestCertificates.server("revoked"), client: Self.client(crls: ["crls.pem"]))
        #expect(error?.code == .tlsCertificateInvalid, "\(String(describing: error))")
        #expect(error?.osError == Self.revoked)
        #expect(error?.message.contains("certificate revoked") == true, "\(String(describing: error))")
        #expect(try secures(server: TestCertificates.server(), client: Self.client(crls: ["crls.pem"])))
        // DER and PEM files side by side.
        #expect(try secures(server: TestCertificates.server(), client: Self.client(crls: ["ca.crl.der", "intermediate.crl.pem"])))
    }

    /// The whole chain by default: an issuer without a CRL fails closed; the leaf-only check
    /// needs only the leaf issuer's.
    @Test func theWholeChainNeedsACRLFromEveryIssuer() throws {
        let error = try clientFailure(server: TestCertificates.server(), client: Self.client(crls: ["intermediate.crl.pem"]))
        #expect(error?.code == .tlsCertificateInvalid, "\(String(describing: error))")
        #expect(error?.osError == Self.unableToGetCRL, "\(String(describing: error))")
        #expect(try secures(server: TestCertificates.server(),
                            client: Self.client(crls: ["intermediate.crl.pem"], wholeChain: false)))
        let leaf = try clientFailure(server: TestCertificates.server("revoked"),
                                     client: Self.client(crls: ["intermediate.crl.pem"], wholeChain: false))
        #expect(leaf?.osError == Self.revoked, "\(String(describing: leaf))")
    }

    @Test func aServerWithCRLsRefusesARevokedClientCertificate() throws {
        var server = TestCertificates.server()
        server.peerVerification = .requireCertificate
        server.trustRoots = .file(TestCertificates.path("ca.pem"))
        server.crlFiles = [TestCertificates.path("ca.crl.pem")]
        var revoked = TestCertificates.client()
        revoked.certificateChain = .file(TestCertificates.path("client-revoked-chain.pem"))
        revoked.privateKey = .file(TestCertificates.path("client-revoked.key"))
        let pair = try securePair(server: server, client: revoked)
        defer { pair.close() }
        let error = pair.serverRecorder.waitForDisconnect()
        #expect(error??.code == .tlsCertificateInvalid, "\(String(describing: error))")
        #expect(error??.osError == Self.revoked, "\(String(describing: error))")

        var good = TestCertificates.client()
        good.certificateChain = .file(TestCertificates.path("client-chain.pem"))
        good.privateKey = .file(TestCertificates.path("client.key"))
        let accepted = try securePair(server: server, client: good)
        defer { accepted.close() }
        #expect(accepted.serverRecorder.waitForSecure(), "\(accepted.serverRecorder.events)")
    }

    @Test func unusableCRLFilesAreSettingsErrorsNotNoCheck() throws {
        func failure(_ path: String) -> SocketError? {
            do { _ = try TLSContext.forSettings(Self.client(crls: [path])); return nil } catch { return error }
        }
        let missing = failure("no-such.crl")
        #expect(missing?.code == .tlsSettings)
        #expect(missing?.osError == ENOENT, "\(String(describing: missing))")
        let notACRL = failure("ca.pem") // a certificate, not a CRL
        #expect(notACRL?.code == .tlsSettings)
        #expect(notACRL?.message.contains("holds no CRL") == true, "\(String(describing: notACRL))")
        #expect(failure("server.p12")?.code == .tlsSettings) // DER, but no CRL
        #expect(failure("/")?.code == .tlsSettings) // a directory
        var empty = TestCertificates.client()
        empty.crlFiles = [""]
        #expect(throws: SocketError.self) { try TLSContext.forSettings(empty) }
        // A server name's settings do not verify clients: their CRLs would never be used.
        var named = TestCertificates.server("wrong-host")
        named.crlFiles = [TestCertificates.path("crls.pem")]
        var server = TestCertificates.server()
        server.serverNames = ["wrong.example": named]
        let ignored = #expect(throws: SocketError.self) { try TLSContext.forSettings(server) }
        #expect(ignored?.message.contains("CRL files are used from the default settings only") == true)
    }

    /// A new CRL renamed over the old one is used by the next connection.
    @Test func aCRLRenamedOverIsUsedByTheNextConnection() throws {
        let file = try RenamedOverFile()
        try file.install("crls-before.pem")
        let client = Self.client(crls: [file.path])
        #expect(try secures(server: TestCertificates.server("revoked"), client: client))
        try file.install("crls.pem")
        let error = try clientFailure(server: TestCertificates.server("revoked"), client: client)
        #expect(error?.osError == Self.revoked, "\(String(describing: error))")
    }
}
