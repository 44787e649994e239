// SPDX-License-Identifier: MIT
import Glibc
import Testing
@testable import SocketKit

/// PKCS#12 identities (issue 33, item 3): the files of Tests/certs/make-test-certs.sh.
@Suite struct TLSPKCS12Tests {
    static func p12(_ name: String, password: String? = "secret") -> TLSSettings.PKCS12 {
        .file(TestCertificates.path(name), password: password)
    }

    static func bytes(of name: String) throws -> [UInt8] {
        let bytes = TestCertificates.bytes(name)
        guard !bytes.isEmpty else { throw TestFailure("cannot read \(name)") }
        return bytes
    }

    /// The certificates a verifying client got from a server with `identity`.
    func servedChain(_ identity: TLSSettings.PKCS12) throws -> [String] {
        let pair = try securePair(server: .server(pkcs12: identity), client: TestCertificates.client(peerName: "localhost"))
        defer { pair.close() }
        guard pair.clientRecorder.waitForSecure() else { throw TestFailure("\(pair.clientRecorder.events)") }
        return pair.client.tlsInfo?.peerCertificates.map(\.subject) ?? []
    }

    /// The file (OpenSSL 3's AES form, the older 3DES one, none with no password) and the
    /// same bytes in memory: the leaf and its intermediate are served and verify.
    @Test func aServerWithAPKCS12IdentityIsVerified() throws {
        for identity in [Self.p12("server.p12"), Self.p12("server-3des.p12"), Self.p12("server-nopass.p12", password: nil),
                         .data(try Self.bytes(of: "server.p12"), password: "secret")] {
            let chain = try servedChain(identity)
            #expect(chain.count == 2, "\(identity.source): \(chain)")
            #expect(chain.first?.contains("CN=localhost") == true)
            #expect(chain.last?.contains("SocketKit Test Intermediate CA") == true)
        }
    }

    @Test func aClientCertificateFromPKCS12IsAcceptedByAServerRequiringOne() throws {
        var server = TestCertificates.server()
        server.peerVerification = .requireCertificate
        server.trustRoots = .file(TestCertificates.path("ca.pem"))
        var client = TestCertificates.client()
        client.pkcs12 = .data(try Self.bytes(of: "client.p12"), password: "secret")
        let pair = try securePair(server: server, client: client)
        defer { pair.close() }
        #expect(pair.serverRecorder.waitForSecure(), "\(pair.serverRecorder.events)")
        #expect(pair.clientRecorder.waitForSecure(), "\(pair.clientRecorder.events)")
        #expect(pair.server.tlsInfo?.peerCertificates.first?.subject.contains("SocketKit Test Client") == true)
        // What the PEM form sends: the certificate alone, not a chain OpenSSL built from the
        // client's trust roots.
        #expect(pair.server.tlsInfo?.peerCertificates.count == 1, "\(pair.server.tlsInfo?.peerCertificates ?? [])")
    }

    /// Every unusable identity is `.tlsSettings` naming the cause, before any handshake: a
    /// server never goes on without its identity, a client never sends none instead.
    @Test func unusableIdentitiesAreClearErrors() throws {
        func failure(_ identity: TLSSettings.PKCS12, role: TLSSettings.Role = .server) -> SocketError? {
            var settings = role == .server ? TLSSettings.server(pkcs12: identity) : TestCertificates.client()
            settings.pkcs12 = identity
            do { _ = try TLSContext.forSettings(settings); return nil } catch { return error }
        }
        let wrong = failure(Self.p12("server.p12", password: "not the password"))
        #expect(wrong?.code == .tlsSettings)
        #expect(wrong?.message.contains("wrong password") == true, "\(String(describing: wrong))")
        let none = failure(Self.p12("server.p12", password: nil))
        #expect(none?.message.contains("wrong password") == true, "\(String(describing: none))")
        let clientWrong = failure(Self.p12("client.p12", password: "nope"), role: .client)
        #expect(clientWrong?.message.contains("wrong password") == true, "\(String(describing: clientWrong))")

        var bytes = try Self.bytes(of: "server.p12")
        let garbage = failure(.data(Array("not a PKCS#12 file".utf8), password: "secret"))
        #expect(garbage?.code == .tlsSettings)
        #expect(garbage?.message.contains("is not PKCS#12") == true, "\(String(describing: garbage))")
        let truncated = failure(.data(Array(bytes.prefix(bytes.count / 2)), password: "secret"))
        #expect(truncated?.code == .tlsSettings, "\(String(describing: truncated))")
        bytes[bytes.count - 40] ^= 0x55 // inside the MAC or the last bag
        let flipped = failure(.data(bytes, password: "secret"))
        #expect(flipped?.code == .tlsSettings, "\(String(describing: flipped))")
        #expect(failure(.data([], password: "secret"))?.code == .tlsSettings)

        let missing = failure(Self.p12("no-such.p12"))
        #expect(missing?.code == .tlsSettings)
        #expect(missing?.osError == ENOENT, "\(String(describing: missing))")

        let legacy = failure(Self.p12("server-legacy.p12"))
        #expect(legacy?.code == .tlsSettings)
        #expect(legacy?.message.contains("legacy provider") == true, "\(String(describing: legacy))")

        let keyless = failure(Self.p12("certs-only.p12"))
        #expect(keyless?.message.contains("no private key") == true, "\(String(describing: keyless))")

        var both = TestCertificates.server()
        both.pkcs12 = Self.p12("server.p12")
        #expect(throws: SocketError.self) { try TLSContext.forSettings(both) }
        let password = failure(Self.p12("server.p12", password: "sec\0ret"))
        #expect(password?.code == .tlsSettings, "\(String(describing: password))")
    }

    /// A server whose identity cannot be read refuses startTLS: it never serves a handshake
    /// without a certificate.
    @Test func startTLSWithAWrongPasswordThrows() throws {
        let pair = try Pair(host: "127.0.0.1")
        defer { pair.close() }
        let error = #expect(throws: SocketError.self) {
            try pair.server.startTLS(.server(pkcs12: Self.p12("server.p12", password: "wrong")))
        }
        #expect(error?.code == .tlsSettings)
    }

    /// The file is stamped as PEM files are: renamed over, the next connection gets the new
    /// identity; connections made before keep theirs.
    @Test func aPKCS12FileRenamedOverIsServedToTheNextClient() throws {
        let file = try RenamedOverFile()
        try file.install("server.p12")
        let server = TLSSettings.server(pkcs12: .file(file.path, password: "secret"))
        let before = try securePair(server: server, client: TestCertificates.client(peerName: "localhost"))
        defer { before.close() }
        #expect(before.clientRecorder.waitForSecure(), "\(before.clientRecorder.events)")

        try file.install("wrong-host.p12")
        let after = try securePair(server: server, client: TestCertificates.client(peerName: "wrong.example"))
        defer { after.close() }
        #expect(after.clientRecorder.waitForSecure(), "\(after.clientRecorder.events)")
        #expect(after.client.tlsInfo?.peerCertificates.first?.subject.contains("CN=wrong.example") == true)
        #expect(before.client.tlsInfo?.peerCertificates.first?.subject.contains("CN=localhost") == true)
    }
}
