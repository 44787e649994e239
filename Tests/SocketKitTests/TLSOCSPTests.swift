// SPDX-License-Identifier: MIT
import Glibc
import Testing
@testable import SocketKit

/// OCSP stapling (issue 33, item 4): the responses of Tests/certs/make-test-certs.sh, made by
/// `openssl ocsp` from the test CA's database; `openssl s_server -status_file` staples them to
/// our client, `openssl s_client -status` asks our server for its staple.
@Suite struct TLSOCSPTests {
    static let revoked: Int32 = 23 // X509_V_ERR_CERT_REVOKED
    static let verifyNeeded: Int32 = 73 // X509_V_ERR_OCSP_VERIFY_NEEDED
    static let verifyFailed: Int32 = 74 // X509_V_ERR_OCSP_VERIFY_FAILED
    static let certUnknown: Int32 = 75 // X509_V_ERR_OCSP_CERT_UNKNOWN

    static func client(require: Bool = false) -> TLSSettings {
        var settings = TestCertificates.client(peerName: "localhost")
        settings.requestOCSPStaple = true
        settings.requireOCSPStaple = require
        settings.sessionResumption = false
        return settings
    }

    static func server(_ variant: String = "server", staple: String?) -> TLSSettings {
        var settings = TestCertificates.server(variant)
        settings.ocspResponseFile = staple.map { $0.hasPrefix("/") ? $0 : TestCertificates.path($0) }
        return settings
    }

    /// `openssl s_server` for one connection, presenting `variant` and stapling `staple`.
    /// (`-rev`: it does not read its standard input, whose end would close the connection.)
    static func openSSLServer(_ variant: String = "server", staple: String?, options: String = "") throws -> (ResourceExhaustionTests.ChildProcess, UInt16) {
        let directory = TestCertificates.directory
        let status = staple.map { "-status_file '\(directory)/\($0)' " } ?? ""
        let server = try ResourceExhaustionTests.ChildProcess(shellCommand:
            "exec openssl s_server -rev -accept 127.0.0.1:0 -naccept 1 \(options) \(status)"
            + "-cert_chain '\(directory)/intermediate.pem' -cert '\(directory)/\(variant)-chain.pem' "
            + "-key '\(directory)/\(variant).key' < /dev/null 2>&1")
        var port: UInt16 = 0
        while port == 0, let line = server.readLine(timeout: 20) {
            if line.hasPrefix("ACCEPT 127.0.0.1:") { port = UInt16(line.split(separator: ":").last ?? "") ?? 0 }
        }
        guard port != 0 else {
            server.stop()
            throw TestFailure("openssl s_server did not start")
        }
        return (server, port)
    }

    /// Our client against `openssl s_server`: the staple it saw, or the error it failed with.
    static func connect(_ variant: String = "server", staple: String?, client settings: TLSSettings = client(),
                        options: String = "") throws -> Result<[UInt8]?, SocketError> {
        let (server, port) = try openSSLServer(variant, staple: staple, options: options)
        defer { server.stop() }
        let (client, recorder) = recordedSocket("client")
        defer { client.disconnect() }
        try client.connect(toHost: "127.0.0.1", port: port, timeout: 10)
        try client.startTLS(settings)
        if recorder.waitForSecure() { return .success(client.tlsInfo?.ocspResponse) }
        let error = recorder.waitForDisconnect()
        return .failure((error ?? nil) ?? SocketError(.other, "no error: \(recorder.events)"))
    }

    static func failure(_ result: Result<[UInt8]?, SocketError>) -> SocketError? {
        if case .failure(let error) = result { return error }
        return nil
    }

    @Test func aGoodStapleFromOpenSSLPassesAndIsShown() throws {
        let result = try Self.connect(staple: "server-ocsp-good.der")
        let staple = try result.get()
        #expect(staple == TestCertificates.bytes("server-ocsp-good.der"))
        // Not asked: none shown (and s_server staples nothing).
        var plain = Self.client()
        plain.requestOCSPStaple = false
        #expect(try Self.connect(staple: "server-ocsp-good.der", client: plain).get() == nil)
    }

    @Test func aRevokedStapleFailsTheHandshake() throws {
        // Without asking for a staple the revoked certificate verifies: the check is OCSP's.
        var plain = Self.client()
        plain.requestOCSPStaple = false
        #expect(try Self.connect("revoked", staple: "revoked-ocsp.der", client: plain).get() == nil)
        // TLS 1.3 staples in the Certificate message, TLS 1.2 in a CertificateStatus message.
        for version in ["-tls1_3", "-tls1_2"] {
            let error = Self.failure(try Self.connect("revoked", staple: "revoked-ocsp.der", options: version))
            #expect(error?.code == .tlsCertificateInvalid, "\(version): \(String(describing: error))")
            #expect(error?.osError == Self.revoked, "\(version): \(String(describing: error))")
            #expect(error?.message.contains("OCSP: certificate revoked") == true, "\(version): \(String(describing: error))")
            #expect(try Self.connect(staple: "server-ocsp-good.der", options: version).get() != nil, "\(version)")
        }
    }

    @Test func stapleThatDoNotVerifyOrParseFailClosed() throws {
        for (variant, staple) in [("server", "server-ocsp-untrusted.der"), ("server", "ocsp-garbage.der"),
                                  ("server", "revoked-ocsp.der") /* another certificate's */,
                                  ("server", "ocsp-trylater.der")] {
            let error = Self.failure(try Self.connect(variant, staple: staple))
            #expect(error?.code == .tlsCertificateInvalid, "\(staple): \(String(describing: error))")
            #expect(error?.osError == Self.verifyFailed, "\(staple): \(String(describing: error))")
            #expect(error?.message.hasPrefix("OCSP:") == true, "\(staple): \(String(describing: error))")
        }
        let unknown = Self.failure(try Self.connect(staple: "server-ocsp-unknown.der"))
        #expect(unknown?.code == .tlsCertificateInvalid, "\(String(describing: unknown))")
        #expect(unknown?.osError == Self.certUnknown, "\(String(describing: unknown))")
    }

    @Test func noStapleFailsOnlyWhenRequired() throws {
        #expect(try Self.connect(staple: nil).get() == nil)
        let error = Self.failure(try Self.connect(staple: nil, client: Self.client(require: true)))
        #expect(error?.code == .tlsCertificateInvalid, "\(String(describing: error))")
        #expect(error?.osError == Self.verifyNeeded, "\(String(describing: error))")
        #expect(try Self.connect(staple: "server-ocsp-good.der", client: Self.client(require: true)).get() != nil)
    }

    /// Our server staples for our client (both sides of SocketKit), renewed files included.
    @Test func ourServerStaplesItsFileAndARenewedOneFromTheNextConnection() throws {
        let file = try RenamedOverFile()
        try file.install("server-ocsp-good.der")
        let server = Self.server("revoked", staple: file.path)
        let good = try securePair(server: Self.server(staple: "server-ocsp-good.der"), client: Self.client(require: true))
        defer { good.close() }
        #expect(good.clientRecorder.waitForSecure(), "\(good.clientRecorder.events)")
        #expect(good.client.tlsInfo?.ocspResponse == TestCertificates.bytes("server-ocsp-good.der"))
        #expect(good.server.tlsInfo?.ocspResponse == nil)
        // The revoked certificate with a (wrong) good staple: no status for it; then its own.
        let wrong = try clientFailure(server: server, client: Self.client())
        #expect(wrong?.osError == Self.verifyFailed, "\(String(describing: wrong))")
        try file.install("revoked-ocsp.der")
        let revoked = try clientFailure(server: server, client: Self.client())
        #expect(revoked?.osError == Self.revoked, "\(String(describing: revoked))")
    }

    @Test func ourServerStaplesForOpenSSLsClient() throws {
        let (listener, recorder) = recordedSocket("listener")
        recorder.onAccept = { _, connection in
            try? connection.startTLS(Self.server(staple: "server-ocsp-good.der"))
        }
        try listener.accept(onInterface: "127.0.0.1", port: 0)
        defer { listener.disconnect() }
        let directory = TestCertificates.directory
        let client = try ResourceExhaustionTests.ChildProcess(shellCommand:
            "exec openssl s_client -connect 127.0.0.1:\(listener.localPort) -servername localhost -status "
            + "-CAfile '\(directory)/ca.pem' < /dev/null 2>&1")
        defer { client.stop() }
        var lines: [String] = []
        while let line = client.readLine(timeout: 20) { lines.append(line) }
        #expect(lines.contains { $0.contains("OCSP Response Status: successful") }, "\(lines)")
        #expect(lines.contains { $0.contains("Cert Status: good") }, "\(lines)")
    }

    /// Each name's settings staple their own response (the serving context's, after the SNI
    /// switch), with or without one in the default settings.
    @Test func eachServerNameStaplesItsOwnResponse() throws {
        func staple(forName name: String, server: TLSSettings) throws -> [UInt8]? {
            var client = Self.client()
            client.peerName = name
            let pair = try securePair(server: server, client: client)
            defer { pair.close() }
            guard pair.clientRecorder.waitForSecure() else { throw TestFailure("\(name): \(pair.clientRecorder.events)") }
            return pair.client.tlsInfo?.ocspResponse
        }
        let named = Self.server("wrong-host", staple: "wrong-host-ocsp-good.der")
        var both = Self.server(staple: "server-ocsp-good.der")
        both.serverNames = ["wrong.example": named]
        #expect(try staple(forName: "wrong.example", server: both) == TestCertificates.bytes("wrong-host-ocsp-good.der"))
        #expect(try staple(forName: "localhost", server: both) == TestCertificates.bytes("server-ocsp-good.der"))
        // Only the name has a response: it is stapled for that name alone.
        var nameOnly = TestCertificates.server()
        nameOnly.serverNames = ["wrong.example": named]
        #expect(try staple(forName: "wrong.example", server: nameOnly) == TestCertificates.bytes("wrong-host-ocsp-good.der"))
        #expect(try staple(forName: "localhost", server: nameOnly) == nil)
    }

    /// Manual trust evaluation leaves the chain to the delegate, not the staple: a revoked
    /// one fails the handshake before the delegate is asked.
    @Test func withManualTrustTheStapleIsStillChecked() throws {
        var client = Self.client()
        client.manualTrustEvaluation = true
        let good = try securePair(server: Self.server(staple: "server-ocsp-good.der"), client: client)
        defer { good.close() }
        #expect(good.clientRecorder.waitForSecure(), "\(good.clientRecorder.events)")
        #expect(good.client.tlsInfo?.ocspResponse == TestCertificates.bytes("server-ocsp-good.der"))
        let revoked = try clientFailure(server: Self.server("revoked", staple: "revoked-ocsp.der"), client: client)
        #expect(revoked?.osError == Self.revoked, "\(String(describing: revoked))")
    }

    @Test func unusableResponseFilesAreSettingsErrors() throws {
        func failure(_ path: String) -> SocketError? {
            do { _ = try TLSContext.forSettings(Self.server(staple: path)); return nil } catch { return error }
        }
        let missing = failure("no-such.der")
        #expect(missing?.code == .tlsSettings)
        #expect(missing?.osError == ENOENT, "\(String(describing: missing))")
        for path in ["ca.pem", "server.p12", "ocsp-garbage.der", "/"] {
            let error = failure(path)
            #expect(error?.code == .tlsSettings, "\(path): \(String(describing: error))")
        }
        #expect(failure("ca.pem")?.message.contains("is not a DER OCSP response") == true)
        #expect(failure("ocsp-trylater.der")?.message.contains("status is not successful") == true)
        var client = Self.client()
        client.ocspResponseFile = TestCertificates.path("server-ocsp-good.der")
        #expect(throws: SocketError.self) { try TLSContext.forSettings(client) }
        var server = TestCertificates.server()
        server.requireOCSPStaple = true
        #expect(throws: SocketError.self) { try TLSContext.forSettings(server) }
    }
}
