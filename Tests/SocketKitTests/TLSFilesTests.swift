// SPDX-License-Identifier: MIT
import Glibc
import Testing
@testable import SocketKit

/// A certificate and key in a directory of their own, replaced as deployment tools do.
final class ServedIdentity {
    let directory: String
    var chain: String { "\(directory)/chain.pem" }
    var key: String { "\(directory)/key.pem" }
    var settings: TLSSettings { .server(certificateChain: .file(chain), privateKey: .file(key)) }

    init(_ variant: String) throws {
        var template = Array("/tmp/socketkit-served-XXXXXX".utf8CString)
        guard let made = mkdtemp(&template) else { throw TestFailure("mkdtemp: \(errno)") }
        directory = String(cString: made)
        try write(TestCertificates.text("\(variant)-chain.pem"), to: chain)
        try write(TestCertificates.text("\(variant).key"), to: key)
    }

    /// certbot's way: each new file written beside the old one, then renamed over it.
    func renameOver(with variant: String) throws {
        for (name, path) in [("\(variant)-chain.pem", chain), ("\(variant).key", key)] {
            try write(TestCertificates.text(name), to: path + ".new")
            guard rename(path + ".new", path) == 0 else { throw TestFailure("rename: \(errno)") }
        }
    }

    /// `cp` over the old files: the same inodes, new contents.
    func rewriteInPlace(with variant: String) throws {
        try write(TestCertificates.text("\(variant)-chain.pem"), to: chain)
        try write(TestCertificates.text("\(variant).key"), to: key)
    }

    private func write(_ text: String, to path: String) throws {
        guard !text.isEmpty, let file = fopen(path, "wb") else { throw TestFailure("cannot write \(path)") }
        defer { fclose(file) }
        guard fputs(text, file) >= 0 else { throw TestFailure("cannot write \(path)") }
    }

    deinit {
        for path in [chain, key, chain + ".new", key + ".new"] { unlink(path) }
        rmdir(directory)
    }
}

/// One file in a directory of its own, replaced by a new file renamed over it (as
/// certbot and most deployment tools do).
final class RenamedOverFile {
    let directory: String
    var path: String { "\(directory)/file" }

    init() throws {
        var template = Array("/tmp/socketkit-renamed-XXXXXX".utf8CString)
        guard let made = mkdtemp(&template) else { throw TestFailure("mkdtemp: \(errno)") }
        directory = String(cString: made)
    }

    /// The test file `name`'s bytes, written beside the file and renamed over it.
    func install(_ name: String) throws {
        let bytes = TestCertificates.bytes(name)
        guard !bytes.isEmpty, let file = fopen(path + ".new", "wb") else { throw TestFailure("cannot write \(name)") }
        let written = fwrite(bytes, 1, bytes.count, file)
        fclose(file)
        guard written == bytes.count, rename(path + ".new", path) == 0 else { throw TestFailure("install \(name)") }
    }

    deinit {
        unlink(path)
        unlink(path + ".new")
        rmdir(directory)
    }
}

@Suite struct TLSFilesTests {
    /// Each pair's server side starts TLS with the same settings value, as a server does for
    /// each accepted connection: the context cache decides what it serves.
    @Test func aCertificateRenamedOverIsServedToTheNextClientAndEarlierConnectionsGoOn() throws {
        let identity = try ServedIdentity("server")
        let before = try securePair(server: identity.settings, client: TestCertificates.client(peerName: "localhost"))
        defer { before.close() }
        #expect(before.clientRecorder.waitForSecure())
        #expect(before.client.tlsInfo?.peerCertificates.first?.subject.contains("CN=localhost") == true)

        try identity.renameOver(with: "wrong-host")
        // Verified against the new name: without a new context the old certificate fails it.
        let after = try securePair(server: identity.settings, client: TestCertificates.client(peerName: "wrong.example"))
        defer { after.close() }
        #expect(after.clientRecorder.waitForSecure(), "\(after.clientRecorder.events)")
        #expect(after.client.tlsInfo?.peerCertificates.first?.subject.contains("CN=wrong.example") == true)

        // The connection made before keeps its context and its certificate, both ways.
        try before.client.write(bytes("still here\n"))
        try before.server.read(toData: bytes("\n"))
        #expect(before.serverRecorder.waitForBytes(11) == bytes("still here\n"))
        try before.server.write(bytes("yes\n"))
        try before.client.read(toData: bytes("\n"))
        #expect(before.clientRecorder.waitForBytes(4) == bytes("yes\n"))
        #expect(before.client.tlsInfo?.peerCertificates.first?.subject.contains("CN=localhost") == true)

        // Rewritten in place (same inode): a new modification time and size count too.
        try identity.rewriteInPlace(with: "server")
        let again = try securePair(server: identity.settings, client: TestCertificates.client(peerName: "localhost"))
        defer { again.close() }
        #expect(again.clientRecorder.waitForSecure(), "\(again.clientRecorder.events)")
        #expect(again.client.tlsInfo?.peerCertificates.first?.subject.contains("CN=localhost") == true)
    }

    /// A key gone meanwhile: that connection's settings fail with a clear error, and the
    /// next one, with the key back, succeeds; nothing unusable is kept.
    @Test func aKeyGoneFailsThatConnectionAndTheNextOneTriesAgain() throws {
        let identity = try ServedIdentity("server")
        #expect(throws: Never.self) { try TLSContext.forSettings(identity.settings) }
        guard rename(identity.key, identity.key + ".new") == 0 else { throw TestFailure("rename: \(errno)") }
        let missing = #expect(throws: SocketError.self) { try TLSContext.forSettings(identity.settings) }
        #expect(missing?.code == .tlsSettings)
        guard rename(identity.key + ".new", identity.key) == 0 else { throw TestFailure("rename: \(errno)") }
        let pair = try securePair(server: identity.settings, client: TestCertificates.client(peerName: "localhost"))
        defer { pair.close() }
        #expect(pair.clientRecorder.waitForSecure(), "\(pair.clientRecorder.events)")
    }
}
