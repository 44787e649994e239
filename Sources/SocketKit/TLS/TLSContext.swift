// SPDX-License-Identifier: MIT
import Glibc
import SocketKitC

/// An `SSL_CTX` made from one `TLSSettings` value, shared by every connection that starts
/// TLS with equal settings (building a context parses certificates and loads the trust
/// store: far too slow per connection). Contexts are cached by settings and by the version
/// of each file the settings name (`FileStamp`): every new connection stats those files,
/// and one replaced or rewritten since the context was made gets a new context, so a
/// renewed certificate is served without a restart. Connections keep the context they
/// started with.
///
/// Client contexts keep one resumable session per peer (name and port) when the settings
/// allow resumption.
final class TLSContext: @unchecked Sendable {
    let settings: TLSSettings
    let context: OpaquePointer
    /// The ALPN list in wire format (length-prefixed names).
    let alpnWire: [UInt8]
    private let sessions = LockedValue<[String: OpaquePointer]>([:])
    private let keyLog: UnsafeMutablePointer<FILE>?

    /// The versions of the settings' files this context was made from (and of the server
    /// names' files: a renewed one makes this context again, with the name's new context).
    let stamps: [FileStamp?]
    /// Servers: the context for each name of `settings.serverNames`, by its matching key.
    private(set) var named: [String: TLSContext] = [:]
    /// Servers: the OCSP response stapled for this context's certificate (checked to parse).
    private(set) var ocspResponse: [UInt8]?

    /// OpenSSL's security level, the floor for every context: 112-bit security (RSA and DH
    /// of 2048 bits, no SHA-1 signatures, no RC4 or export ciphers).
    static let securityLevel: Int32 = 2

    /// The shared context for `settings`, made on first use and again whenever a file the
    /// settings name changed on disk since (one entry per settings value: the newest).
    static func forSettings(_ settings: TLSSettings, in cache: TLSContextCache = .shared) throws(SocketError) -> TLSContext {
        // Stamped before the files are read: a file replaced while the context is being made
        // leaves a stamp older than what the next connection sees, which then makes it again.
        let stamps = settings.filePaths.map(FileStamp.init(path:))
        if let cached = cache.touch(settings, stamps) { return cached }
        return cache.insert(settings, stamps, try TLSContext(settings, stamps: stamps))
    }

    /// Ownership: the C resources (the key-log `FILE` and the `SSL_CTX`) are acquired into
    /// locals first, and a failure while acquiring them frees what is held and throws before
    /// any stored property is set, so `deinit` (which Swift runs once every stored property
    /// is set, even when the initializer then throws) never sees them. From the assignments
    /// on, `deinit` is their only owner: nothing below frees them.
    private init(_ settings: TLSSettings, stamps: [FileStamp?]) throws(SocketError) {
        try settings.validate()
        openSSLInitialized()
        let keyLog = try settings.keyLogFile.map { (path: String) throws(SocketError) in try TLSContext.openKeyLog(path) }
        ERR_clear_error()
        guard let context = SSL_CTX_new(TLS_method()) else {
            if let keyLog { fclose(keyLog) }
            throw SocketError(.tlsSettings, "SSL_CTX_new: \(openSSLErrorText())")
        }
        var wire: [UInt8] = []
        for name in settings.alpnProtocols {
            wire.append(UInt8(name.utf8.count))
            wire.append(contentsOf: name.utf8)
        }
        self.settings = settings
        self.stamps = stamps
        self.context = context
        self.keyLog = keyLog
        alpnWire = wire
        // Fully initialised from here: a throw releases self, and deinit frees the context
        // and closes the key log.
        try configure()
    }

    /// The key log, opened for appending. Created readable by its owner only (it holds
    /// every session's secrets) and closed on exec.
    private static func openKeyLog(_ path: String) throws(SocketError) -> UnsafeMutablePointer<FILE> {
        let descriptor = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0o600)
        guard descriptor >= 0 else { throw SocketError.systemError(errno, "key-log file \(path)").asSettings }
        guard let file = fdopen(descriptor, "a") else {
            let error = errno
            close(descriptor)
            throw SocketError.systemError(error, "key-log file \(path)").asSettings
        }
        return file
    }

    deinit {
        SSL_CTX_free(context)
        for (_, session) in sessions.withLock({ $0 }) { SSL_SESSION_free(session) }
        if let keyLog { fclose(keyLog) }
    }

    private func configure() throws(SocketError) {
        let settings = self.settings
        skc_tls_ctx_set_engine_options(context)
        SSL_CTX_set_security_level(context, TLSContext.securityLevel)
        guard skc_tls_ctx_set_versions(context, settings.minimumVersion.rawValue,
                                       settings.maximumVersion?.rawValue ?? 0) == 1 else {
            throw SocketError(.tlsSettings, "protocol versions: \(openSSLErrorText())")
        }
        if let list = settings.cipherList {
            guard SSL_CTX_set_cipher_list(context, list) == 1 else {
                throw SocketError(.tlsSettings, "cipher list \"\(list)\": \(openSSLErrorText())")
            }
            // "@SECLEVEL=n" in a cipher list sets the context's security level: a lower one
            // would silently undo the floor (weak keys, SHA-1 signatures, small DH groups
            // accepted again). Raising it is the caller's business.
            let level = SSL_CTX_get_security_level(context)
            guard level >= TLSContext.securityLevel else {
                throw SocketError(.tlsSettings, "cipher list \"\(list)\" lowers OpenSSL's security level to \(level) "
                                  + "(@SECLEVEL); SocketKit keeps at least \(TLSContext.securityLevel)")
            }
        }
        if let suites = settings.cipherSuites, SSL_CTX_set_ciphersuites(context, suites) != 1 {
            throw SocketError(.tlsSettings, "TLS 1.3 cipher suites \"\(suites)\": \(openSSLErrorText())")
        }
        try loadTrustRoots()
        try loadRevocationLists()
        try loadIdentity()
        try loadOCSPResponse()
        if settings.role == .server && !settings.serverNames.isEmpty {
            for (name, namedSettings) in settings.serverNames {
                guard let key = TLSSettings.serverNameKey(name) else { continue } // validate refused it
                named[key] = try TLSContext.forSettings(namedSettings)
            }
            skc_tls_ctx_set_servername_callback(context) { ssl, alert, _ in
                guard let ssl, let tls = TLSSession.from(ssl) else { return SSL_TLSEXT_ERR_OK }
                if tls.chooseContext() { return SSL_TLSEXT_ERR_OK }
                alert?.pointee = SSL_AD_INTERNAL_ERROR
                return SSL_TLSEXT_ERR_ALERT_FATAL
            }
        }

        SSL_CTX_set_ex_data(context, 0, Unmanaged.passUnretained(self).toOpaque())
        let verification = settings.effectiveVerification
        var mode: Int32 = SSL_VERIFY_NONE
        switch verification {
        case .none: mode = SSL_VERIFY_NONE
        case .verify: mode = SSL_VERIFY_PEER
        case .requireCertificate: mode = SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT
        }
        if settings.manualTrustEvaluation {
            // Verify (so the verdict can be shown to the delegate) but never fail on it: the
            // delegate decides once the handshake is done. A server still asks for a
            // certificate (and, when required, fails without one).
            if mode == SSL_VERIFY_NONE { mode = SSL_VERIFY_PEER }
            SSL_CTX_set_verify(context, mode) { _, _ in 1 }
        } else {
            SSL_CTX_set_verify(context, mode, nil)
        }

        if settings.role == .server {
            // Resumption with client verification needs a session id context.
            let name = Array("socketkit".utf8)
            _ = SSL_CTX_set_session_id_context(context, name, UInt32(name.count))
        }
        if settings.role == .client {
            if !alpnWire.isEmpty {
                let failed = alpnWire.withUnsafeBufferPointer { SSL_CTX_set_alpn_protos(context, $0.baseAddress, UInt32($0.count)) }
                if failed != 0 { throw SocketError(.tlsSettings, "ALPN: \(openSSLErrorText())") }
            }
            if settings.sessionResumption {
                skc_tls_ctx_set_client_session_cache(context)
                SSL_CTX_sess_set_new_cb(context) { ssl, session in
                    guard let ssl, let session, let tls = TLSSession.from(ssl) else { return 0 }
                    return tls.context.store(session, for: tls.sessionKey) ? 1 : 0
                }
            } else {
                skc_tls_ctx_disable_sessions(context)
            }
        } else if !alpnWire.isEmpty {
            SSL_CTX_set_alpn_select_cb(context, { ssl, out, outLength, offered, offeredLength, _ in
                guard let ssl, let tls = TLSSession.from(ssl) else { return SSL_TLSEXT_ERR_NOACK }
                return tls.servingContext.selectALPN(out: out, outLength: outLength, offered: offered, offeredLength: offeredLength)
            }, nil)
        }
        if settings.asksForOCSPStaple {
            skc_tls_ctx_set_status_callback(context) { ssl, _ in
                guard let ssl, let tls = TLSSession.from(ssl) else { return 0 }
                return tls.checkStaple() ? 1 : 0
            }
        } else if settings.role == .server && (ocspResponse != nil || named.values.contains { $0.ocspResponse != nil }) {
            // It staples the response of the context serving the client's name. OpenSSL 3.0
            // calls the callback of the SSL's context at that point (a name's, after the SNI
            // switch, which installs its own); installed on the default context too when
            // only a name has a response, so the staple does not hang on that choice.
            skc_tls_ctx_set_status_callback(context) { ssl, _ in
                guard let ssl, let tls = TLSSession.from(ssl) else { return SSL_TLSEXT_ERR_NOACK }
                guard let response = tls.servingContext.ocspResponse else { return SSL_TLSEXT_ERR_NOACK }
                let stapled = response.withUnsafeBufferPointer { skc_tls_set_status_response(ssl, $0.baseAddress, $0.count) }
                return stapled == 1 ? SSL_TLSEXT_ERR_OK : SSL_TLSEXT_ERR_ALERT_FATAL
            }
        }
        if keyLog != nil {
            SSL_CTX_set_keylog_callback(context) { ssl, line in
                guard let ssl, let line, let tls = TLSSession.from(ssl) else { return }
                tls.servingContext.logKey(line)
            }
        }
    }

    private func loadTrustRoots() throws(SocketError) {
        switch settings.trustRoots {
        case .system:
            guard SSL_CTX_set_default_verify_paths(context) == 1 else {
                throw SocketError(.tlsSettings, "system trust store: \(openSSLErrorText())")
            }
        case .file(let path):
            guard access(path, R_OK) == 0 else { throw SocketError.systemError(errno, "trust file \(path)").asSettings }
            guard SSL_CTX_load_verify_locations(context, path, nil) == 1 else {
                throw SocketError(.tlsSettings, "trust file \(path): \(openSSLErrorText())")
            }
        case .directory(let path):
            guard access(path, R_OK | X_OK) == 0 else { throw SocketError.systemError(errno, "trust directory \(path)").asSettings }
            guard SSL_CTX_load_verify_locations(context, nil, path) == 1 else {
                throw SocketError(.tlsSettings, "trust directory \(path): \(openSSLErrorText())")
            }
        case .pem(let text):
            let certificates: [OpaquePointer]
            do { certificates = try readCertificates(pem: text) } catch {
                throw SocketError(.tlsSettings, "trust roots: \(error.message)")
            }
            let store = SSL_CTX_get_cert_store(context)
            for certificate in certificates {
                X509_STORE_add_cert(store, certificate)
                X509_free(certificate)
            }
        }
    }

    /// The CRLs go into the verify store with the flags that make OpenSSL consult them: a
    /// CRL in the store without `X509_V_FLAG_CRL_CHECK` is silently ignored.
    private func loadRevocationLists() throws(SocketError) {
        guard !settings.crlFiles.isEmpty else { return }
        let store = SSL_CTX_get_cert_store(context)
        for path in settings.crlFiles {
            let bytes = try TLSContext.bytes(ofFile: path, what: "CRL file")
            ERR_clear_error()
            var crls: [OpaquePointer] = []
            if bytes.first != 0x30 { // a DER SEQUENCE starts with 0x30; PEM with text
                let bio = memoryBIO(String(decoding: bytes, as: UTF8.self))
                defer { BIO_free(bio) }
                while let crl = PEM_read_bio_X509_CRL(bio, nil, nil, nil) { crls.append(crl) }
                ERR_clear_error() // the end of the text
            } else {
                let crl = bytes.withUnsafeBufferPointer { buffer -> OpaquePointer? in
                    var cursor = buffer.baseAddress
                    return d2i_X509_CRL(nil, &cursor, buffer.count)
                }
                if let crl { crls.append(crl) }
            }
            guard !crls.isEmpty else {
                throw SocketError(.tlsSettings, "CRL file \(path) holds no CRL (PEM or DER): \(openSSLErrorText())")
            }
            for crl in crls {
                defer { X509_CRL_free(crl) }
                guard X509_STORE_add_crl(store, crl) == 1 else {
                    throw SocketError(.tlsSettings, "CRL file \(path): \(openSSLErrorText())")
                }
            }
        }
        let flags = UInt(X509_V_FLAG_CRL_CHECK) | (settings.crlCheckWholeChain ? UInt(X509_V_FLAG_CRL_CHECK_ALL) : 0)
        X509_STORE_set_flags(store, flags)
    }

    /// A file that is no usable response is refused here: a server that silently staples
    /// nothing would fail its must-staple clients with no hint why.
    private func loadOCSPResponse() throws(SocketError) {
        guard let path = settings.ocspResponseFile else { return }
        let bytes = try TLSContext.bytes(ofFile: path, what: "OCSP response file")
        let parsed = bytes.isEmpty ? Int32(SKC_OCSP_MALFORMED)
            : bytes.withUnsafeBufferPointer { skc_ocsp_parse($0.baseAddress, $0.count) }
        ERR_clear_error()
        switch parsed {
        case Int32(SKC_OCSP_GOOD): ocspResponse = bytes
        case Int32(SKC_OCSP_UNSUCCESSFUL):
            throw SocketError(.tlsSettings, "OCSP response file \(path): the response status is not successful")
        default:
            throw SocketError(.tlsSettings, "OCSP response file \(path) is not a DER OCSP response (openssl ocsp -respout)")
        }
    }

    private func loadIdentity() throws(SocketError) {
        if let pkcs12 = settings.pkcs12 { return try loadPKCS12(pkcs12) }
        guard let chainSource = settings.certificateChain, let keySource = settings.privateKey else { return }
        let chainText = try TLSContext.text(of: chainSource, what: "certificate chain")
        let keyText = try TLSContext.text(of: keySource, what: "private key")
        let certificates: [OpaquePointer]
        do { certificates = try readCertificates(pem: chainText) } catch {
            throw SocketError(.tlsSettings, "certificate chain: \(error.message)")
        }
        let bio = memoryBIO(keyText)
        defer { BIO_free(bio) }
        // With no callback, OpenSSL takes the last argument as the password.
        let key: OpaquePointer? = {
            guard let password = settings.privateKeyPassword else {
                // An empty password: an encrypted key fails instead of prompting on a terminal.
                return "".withCString { PEM_read_bio_PrivateKey(bio, nil, nil, UnsafeMutableRawPointer(mutating: $0)) }
            }
            return password.withCString { PEM_read_bio_PrivateKey(bio, nil, nil, UnsafeMutableRawPointer(mutating: $0)) }
        }()
        guard let key else {
            certificates.forEach { X509_free($0) }
            throw SocketError(.tlsSettings, "private key (wrong password, or not a PEM key): \(openSSLErrorText())")
        }
        defer { EVP_PKEY_free(key) }
        let chain = skc_x509_stack_new()
        for extra in certificates.dropFirst() { _ = skc_x509_stack_push(chain, extra) }
        defer {
            skc_x509_stack_free(chain)
            X509_free(certificates[0])
        }
        guard SSL_CTX_use_cert_and_key(context, certificates[0], key, chain, 1) == 1 else {
            throw SocketError(.tlsSettings, "certificate and key: \(openSSLErrorText())")
        }
        guard SSL_CTX_check_private_key(context) == 1 else {
            throw SocketError(.tlsSettings, "the private key does not match the certificate: \(openSSLErrorText())")
        }
    }

    /// The key, certificate and chain of a PKCS#12 identity, installed as a PEM pair would be.
    private func loadPKCS12(_ pkcs12: TLSSettings.PKCS12) throws(SocketError) {
        let bytes: [UInt8]
        let what: String
        switch pkcs12.source {
        case .data(let data):
            bytes = data
            what = "PKCS#12 data"
        case .file(let path):
            bytes = try TLSContext.bytes(ofFile: path, what: "PKCS#12 file")
            what = "PKCS#12 file \(path)"
        }
        var key: OpaquePointer?
        var certificate: OpaquePointer?
        var chain: OpaquePointer?
        var why: Int32 = 0
        ERR_clear_error()
        let parsed = bytes.withUnsafeBufferPointer { buffer in
            func parse(_ password: UnsafePointer<CChar>?) -> Int32 {
                skc_pkcs12_parse(buffer.baseAddress, buffer.count, password, &key, &certificate, &chain, &why)
            }
            // nil: PKCS12_parse tries no password, then the empty one (as `openssl pkcs12`).
            guard let password = pkcs12.password else { return parse(nil) }
            return password.withCString(parse)
        }
        guard parsed == 1, let key, let certificate else {
            let detail = openSSLErrorText()
            switch Int(why) {
            case Int(SKC_PKCS12_NOT_PKCS12):
                throw SocketError(.tlsSettings, "\(what) is not PKCS#12 (DER): \(detail)")
            case Int(SKC_PKCS12_WRONG_PASSWORD):
                throw SocketError(.tlsSettings, "\(what): wrong password (the MAC does not verify): \(detail)")
            case Int(SKC_PKCS12_UNSUPPORTED):
                throw SocketError(.tlsSettings, "\(what) uses an algorithm OpenSSL 3 has only in its legacy provider "
                                  + "(RC2-40, as OpenSSL 1.x and old Windows exports), which SocketKit does not load: "
                                  + "convert it (openssl pkcs12 -legacy -in old.p12 -nodes | openssl pkcs12 -export "
                                  + "-out new.p12): \(detail)")
            case Int(SKC_PKCS12_NO_IDENTITY):
                throw SocketError(.tlsSettings, "\(what) has no private key with its certificate")
            default:
                throw SocketError(.tlsSettings, "\(what): \(detail)")
            }
        }
        defer {
            EVP_PKEY_free(key)
            X509_free(certificate)
            skc_x509_stack_free(chain)
        }
        guard SSL_CTX_use_cert_and_key(context, certificate, key, chain, 1) == 1 else {
            throw SocketError(.tlsSettings, "\(what): certificate and key: \(openSSLErrorText())")
        }
        guard SSL_CTX_check_private_key(context) == 1 else {
            throw SocketError(.tlsSettings, "\(what): the private key does not match the certificate: \(openSSLErrorText())")
        }
    }

    private static func text(of source: TLSSettings.Source, what: String) throws(SocketError) -> String {
        switch source {
        case .pem(let text): return text
        case .file(let path): return String(decoding: try bytes(ofFile: path, what: what), as: UTF8.self)
        }
    }

    private static func bytes(ofFile path: String, what: String) throws(SocketError) -> [UInt8] {
        guard let file = fopen(path, "rb") else { throw SocketError.systemError(errno, "\(what) \(path)").asSettings }
        defer { fclose(file) }
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 4096)
        while true {
            let count = chunk.withUnsafeMutableBytes { fread($0.baseAddress, 1, $0.count, file) }
            if count == 0 { break }
            bytes.append(contentsOf: chunk[0..<count])
            if bytes.count > 16 << 20 { throw SocketError(.tlsSettings, "\(what) \(path) is larger than 16 MiB") }
        }
        return bytes
    }

    // MARK: Server names

    /// The context for the client's SNI: an exact name, else `*.` and its parent domain.
    func context(forServerName name: String) -> TLSContext? {
        guard !named.isEmpty, let key = TLSSettings.serverNameKey(name) else { return nil }
        if let exact = named[key] { return exact }
        guard let dot = key.firstIndex(of: ".") else { return nil }
        return named["*" + key[dot...]]
    }

    // MARK: Sessions (clients)

    func session(for key: String) -> OpaquePointer? {
        sessions.withLock { sessions in
            guard let session = sessions[key] else { return nil }
            SSL_SESSION_up_ref(session)
            return session
        }
    }

    /// Takes ownership of `session` (true) if it can be resumed.
    fileprivate func store(_ session: OpaquePointer, for key: String) -> Bool {
        guard SSL_SESSION_is_resumable(session) == 1 else { return false }
        let replaced = sessions.withLock { sessions -> OpaquePointer? in
            if sessions.count >= 4096, sessions[key] == nil, let any = sessions.first {
                sessions[any.key] = nil
                SSL_SESSION_free(any.value)
            }
            let old = sessions[key]
            sessions[key] = session
            return old
        }
        if let replaced { SSL_SESSION_free(replaced) }
        return true
    }

    // MARK: ALPN (servers)

    fileprivate func selectALPN(out: UnsafeMutablePointer<UnsafePointer<UInt8>?>?, outLength: UnsafeMutablePointer<UInt8>?,
                                offered: UnsafePointer<UInt8>?, offeredLength: UInt32) -> Int32 {
        guard let offered else { return SSL_TLSEXT_ERR_NOACK }
        // Our preference first: the first of our names the client offers.
        return alpnWire.withUnsafeBufferPointer { ours -> Int32 in
            var position = 0
            while position < ours.count {
                let length = Int(ours[position])
                var cursor = 0
                while cursor < Int(offeredLength) {
                    let offeredNameLength = Int(offered[cursor])
                    if offeredNameLength == length && cursor + 1 + length <= Int(offeredLength)
                        && memcmp(offered + cursor + 1, ours.baseAddress! + position + 1, length) == 0 {
                        out?.pointee = UnsafePointer(offered + cursor + 1)
                        outLength?.pointee = UInt8(length)
                        return SSL_TLSEXT_ERR_OK
                    }
                    cursor += 1 + offeredNameLength
                }
                position += 1 + length
            }
            return SSL_TLSEXT_ERR_NOACK
        }
    }

    // MARK: Key log

    fileprivate func logKey(_ line: UnsafePointer<CChar>) {
        guard let keyLog else { return }
        flockfile(keyLog)
        fputs(line, keyLog)
        fputc(0x0A, keyLog)
        fflush(keyLog)
        funlockfile(keyLog)
    }
}

/// One version of a file: a file renamed over (as certbot and most deployment tools
/// replace certificates) has another inode, one rewritten in place another modification
/// time (nanoseconds) or size. nil in place of a stamp: the file could not be stat'ed (the
/// context cannot be made either, and says why).
struct FileStamp: Hashable {
    let device: UInt64
    let inode: UInt64
    let seconds: Int
    let nanoseconds: Int
    let size: Int64

    init?(path: String) {
        var status = stat()
        guard stat(path, &status) == 0 else { return nil }
        device = UInt64(status.st_dev)
        inode = UInt64(status.st_ino)
        seconds = Int(status.st_mtim.tv_sec)
        nanoseconds = Int(status.st_mtim.tv_nsec)
        size = Int64(status.st_size)
    }
}

extension TLSSettings {
    /// The files and directories the context reads, whose changes make a new context. A
    /// trust directory's own stamp changes when a certificate is added to it or removed.
    var filePaths: [String] {
        var paths: [String] = []
        for (_, named) in serverNames.sorted(by: { $0.key < $1.key }) { paths += named.filePaths }
        if case .file(let path) = certificateChain { paths.append(path) }
        if case .file(let path) = privateKey { paths.append(path) }
        if case .file(let path)? = pkcs12?.source { paths.append(path) }
        paths += crlFiles
        if let ocspResponseFile { paths.append(ocspResponseFile) }
        switch trustRoots {
        case .file(let path), .directory(let path): paths.append(path)
        case .system, .pem: break
        }
        return paths
    }
}

extension SocketError {
    /// The same failure, reported as unusable TLS settings.
    var asSettings: SocketError { SocketError(.tlsSettings, osError: osError, message) }
}

/// The contexts by settings, with a use counter: when full, the least recently used goes.
/// (Emptying it all, as it once did, also dropped the contexts connections were using, and
/// with them a client's cached sessions and a server's ticket keys: the next connection of
/// a busy peer did not resume.)
final class TLSContextCache: Sendable {
    static let shared = TLSContextCache(limit: 64)

    private struct Entry {
        var context: TLSContext
        var lastUse: UInt64
    }
    private struct State {
        var entries: [TLSSettings: Entry] = [:]
        var uses: UInt64 = 0
    }
    let limit: Int
    private let state = LockedValue(State())

    init(limit: Int) { self.limit = limit }

    /// The cached context for `settings` if its files are unchanged, marked as just used.
    func touch(_ settings: TLSSettings, _ stamps: [FileStamp?]) -> TLSContext? {
        state.withLock { state in Self.touch(&state, settings, stamps) }
    }

    /// Caches `made` (unless another thread cached one for the same files meanwhile: that
    /// one is returned), making room by dropping the least recently used context.
    func insert(_ settings: TLSSettings, _ stamps: [FileStamp?], _ made: TLSContext) -> TLSContext {
        state.withLock { state in
            if let raced = Self.touch(&state, settings, stamps) { return raced }
            if state.entries.count >= limit && state.entries[settings] == nil,
               let oldest = state.entries.min(by: { $0.value.lastUse < $1.value.lastUse })?.key {
                state.entries[oldest] = nil // connections using it keep it alive
            }
            state.uses &+= 1
            // A replaced context lives on in the connections using it.
            state.entries[settings] = Entry(context: made, lastUse: state.uses)
            return made
        }
    }

    private static func touch(_ state: inout State, _ settings: TLSSettings, _ stamps: [FileStamp?]) -> TLSContext? {
        guard var entry = state.entries[settings], entry.context.stamps == stamps else { return nil }
        state.uses &+= 1
        entry.lastUse = state.uses
        state.entries[settings] = entry
        return entry.context
    }
}
