// SPDX-License-Identifier: MIT
import Glibc
import SocketKitC

/// One connection's OpenSSL state: an `SSL` between two memory BIOs. The engine moves
/// ciphertext between the BIOs and the socket itself (with `MSG_NOSIGNAL`, never through
/// OpenSSL's socket BIO, whose `write()` would raise SIGPIPE). Loop thread only.
final class TLSSession {
    let context: TLSContext
    /// Servers: the context whose certificate is served, `context` or the one for the
    /// client's SNI (`TLSSettings.serverNames`). Held here: OpenSSL's callbacks from the
    /// switched `SSL_CTX` (ALPN, key log) find it through this session.
    private(set) var servingContext: TLSContext
    let ssl: OpaquePointer
    /// Ciphertext from the network, read by OpenSSL.
    private var networkIn: OpaquePointer
    /// Ciphertext from OpenSSL, to send.
    private var networkOut: OpaquePointer
    private var inputEnded = false
    /// Clients: the resumption key (peer name and port).
    let sessionKey: String
    let peerName: String?
    /// Clients: why the stapled OCSP response was refused; the handshake fails with it.
    private var stapleFailure: SocketError?

    /// From OpenSSL's servername callback: serves the certificate of the client's name.
    /// false: the switch failed (the handshake ends).
    func chooseContext() -> Bool {
        guard let name = SSL_get_servername(ssl, TLSEXT_NAMETYPE_host_name),
              let chosen = context.context(forServerName: String(cString: name)) else { return true }
        // The SSL takes the context's certificate and key (and its callbacks); what it
        // settled at SSL_new (versions, ciphers, verify mode and callback) stays. Client
        // certificates, though, would be verified against the new context's store: pinned
        // to the default's, so a name's settings cannot widen whom the server trusts.
        guard SSL_set_SSL_CTX(ssl, chosen.context) != nil,
              skc_tls_set_verify_store(ssl, SSL_CTX_get_cert_store(context.context)) == 1 else { return false }
        servingContext = chosen
        return true
    }

    enum Step {
        case done
        case wantRead
        case failed(SocketError)
    }

    enum ReadStep {
        case bytes(Int)
        case wantRead
        /// The peer sent close_notify.
        case closed
        case failed(SocketError)
    }

    init(context: TLSContext, peerName: String?, port: UInt16) throws(SocketError) {
        self.context = context
        servingContext = context
        self.peerName = peerName
        sessionKey = "\(peerName ?? ""):\(port)"
        ERR_clear_error()
        guard let ssl = SSL_new(context.context) else { throw SocketError(.tlsFailed, "SSL_new: \(openSSLErrorText())") }
        self.ssl = ssl
        networkIn = BIO_new(BIO_s_mem())
        networkOut = BIO_new(BIO_s_mem())
        skc_bio_set_mem_eof_return(networkIn, -1) // empty means "wait", until the peer's FIN
        SSL_set_bio(ssl, networkIn, networkOut)   // the SSL owns both BIOs now
        SSL_set_ex_data(ssl, 0, Unmanaged.passUnretained(self).toOpaque())

        // Fully initialised from here: a throw releases self, and deinit frees the SSL.
        if context.settings.role == .server {
            SSL_set_accept_state(ssl)
            return
        }
        SSL_set_connect_state(ssl)
        let settings = context.settings
        if peerName == nil && settings.effectiveVerification != .none && !settings.manualTrustEvaluation {
            // Nothing to check the certificate's names against (a Unix-domain connection
            // has no host): the chain alone would admit any name the roots vouch for.
            throw SocketError(.tlsSettings, "no peer name to verify the server against (a Unix-domain connection has "
                              + "no host name): set the peer name, or turn verification off")
        }
        if let peerName, !peerName.isEmpty {
            let literal = TLSSession.ipLiteral(peerName)
            let isAddress = literal != nil
            if !isAddress {
                // SNI for names only (RFC 6066 forbids IP literals).
                guard skc_tls_set_server_name(ssl, peerName) == 1 else {
                    throw SocketError(.tlsSettings, "peer name \"\(peerName)\" cannot be sent as SNI: \(openSSLErrorText())")
                }
            }
            if context.settings.effectiveVerification != .none || context.settings.manualTrustEvaluation {
                let param = SSL_get0_param(ssl)
                let accepted = isAddress
                    ? X509_VERIFY_PARAM_set1_ip_asc(param, literal!)
                    : X509_VERIFY_PARAM_set1_host(param, peerName, 0)
                // As browsers and Go: no partial wildcards ("f*.example.com"), and the subject's
                // CN is never taken for a name, even in a certificate without SANs.
                X509_VERIFY_PARAM_set_hostflags(param, UInt32(X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS | X509_CHECK_FLAG_NEVER_CHECK_SUBJECT))
                guard accepted == 1 else {
                    throw SocketError(.tlsSettings, "peer name \"\(peerName)\" cannot be verified: \(openSSLErrorText())")
                }
            }
        }
        if settings.asksForOCSPStaple && skc_tls_request_status(ssl) != 1 {
            throw SocketError(.tlsSettings, "cannot ask for a stapled OCSP response: \(openSSLErrorText())")
        }
        if context.settings.sessionResumption, let session = context.session(for: sessionKey) {
            SSL_set_session(ssl, session)
            SSL_SESSION_free(session)
        }
    }

    deinit {
        SSL_free(ssl) // frees the BIOs too
    }

    /// The address in `name` if it is an IP literal ("127.0.0.1", "::1", "[::1]"; an IPv6
    /// zone is dropped), else nil.
    static func ipLiteral(_ name: String) -> String? {
        var text = name
        if text.hasPrefix("[") && text.hasSuffix("]") { text = String(text.dropFirst().dropLast()) }
        if let percent = text.firstIndex(of: "%") { text = String(text[..<percent]) }
        var ipv4 = in_addr()
        var ipv6 = in6_addr()
        if inet_pton(AF_INET, text, &ipv4) == 1 || inet_pton(AF_INET6, text, &ipv6) == 1 { return text }
        return nil
    }

    static func from(_ ssl: OpaquePointer) -> TLSSession? {
        guard let pointer = SSL_get_ex_data(ssl, 0) else { return nil }
        return Unmanaged<TLSSession>.fromOpaque(pointer).takeUnretainedValue()
    }

    // MARK: Ciphertext

    /// Ciphertext that arrived from the peer.
    func feed(_ bytes: UnsafeRawBufferPointer) {
        guard bytes.count > 0 else { return }
        _ = BIO_write(networkIn, bytes.baseAddress, Int32(bytes.count))
    }

    /// The peer's FIN: OpenSSL sees the end of its input.
    func feedEndOfStream() {
        inputEnded = true
        skc_bio_set_mem_eof_return(networkIn, 0)
    }

    /// A memory BIO keeps the largest buffer it ever needed (the handshake's flights, a
    /// 256 KiB read): an idle connection would carry them for good. Empty BIOs holding more
    /// than `threshold` bytes are replaced by fresh ones, which own no buffer.
    func releaseIdleBuffers(threshold: Int = 4096) {
        // OpenSSL's own record buffers (fails, harmlessly, while they hold a partial record).
        _ = SSL_free_buffers(ssl)
        if !inputEnded && TLSSession.held(networkIn) == 0 && TLSSession.capacity(of: networkIn) > threshold {
            let fresh = BIO_new(BIO_s_mem())!
            skc_bio_set_mem_eof_return(fresh, -1)
            SSL_set0_rbio(ssl, fresh) // frees the old one
            networkIn = fresh
        }
        if pendingOutput == 0 && TLSSession.capacity(of: networkOut) > threshold {
            let fresh = BIO_new(BIO_s_mem())!
            SSL_set0_wbio(ssl, fresh)
            networkOut = fresh
        }
    }

    private static func capacity(of bio: OpaquePointer) -> Int {
        var memory: UnsafeMutablePointer<BUF_MEM>? = nil
        _ = BIO_ctrl(bio, BIO_C_GET_BUF_MEM_PTR, 0, &memory)
        return memory.map { Int($0.pointee.max) } ?? 0
    }

    /// Decrypted bytes or unprocessed ciphertext inside OpenSSL.
    var hasBufferedInput: Bool { SSL_pending(ssl) > 0 || TLSSession.held(networkIn) > 0 }

    /// Ciphertext waiting to be sent.
    var pendingOutput: Int { TLSSession.held(networkOut) }

    /// The bytes a memory BIO holds: what went in less what came out. BIO_write and
    /// BIO_read count both for every BIO, so this is two field reads, where
    /// BIO_ctrl_pending dispatches through BIO_ctrl, several times per message (what that
    /// cost: bench/README.md, "Where the numbers in the code went"). Debug builds check it
    /// against BIO_ctrl_pending, which is also what to return here to switch it off.
    private static func held(_ bio: OpaquePointer) -> Int {
        let held = Int(truncatingIfNeeded: BIO_number_written(bio) &- BIO_number_read(bio))
        assert(held == Int(BIO_ctrl_pending(bio)), "memory BIO byte counts disagree with BIO_ctrl_pending")
        return held
    }

    /// Moves the waiting ciphertext into `queue` (a memory BIO gives it all in one read).
    func takeOutput(into queue: inout ByteQueue) {
        let pending = pendingOutput
        if pending == 0 { return }
        queue.append(count: pending) { space in
            Int(max(0, BIO_read(networkOut, space.baseAddress, Int32(space.count))))
        }
    }

    /// Moves up to `buffer.count` bytes of waiting ciphertext into `buffer`; returns how many.
    func readOutput(into buffer: UnsafeMutableRawBufferPointer) -> Int {
        Int(max(0, BIO_read(networkOut, buffer.baseAddress, Int32(min(buffer.count, Int(Int32.max))))))
    }

    /// SSL_get_error reads the thread's error queue, so it must be empty before each call
    /// (another library on this thread may have left errors in it). Peeking first is cheap,
    /// and clearing all 16 entries before every read and write was not (bench/README.md,
    /// "Where the numbers in the code went").
    private func clearErrorQueue() {
        if ERR_peek_error() != 0 { ERR_clear_error() }
    }

    // MARK: Handshake, data, shutdown

    func handshake() -> Step {
        clearErrorQueue()
        let result = SSL_do_handshake(ssl)
        if result == 1 { return .done }
        let error = SSL_get_error(ssl, result)
        if error == SSL_ERROR_WANT_READ || error == SSL_ERROR_WANT_WRITE { return .wantRead }
        return .failed(failure(error, duringHandshake: true))
    }

    /// Decrypted bytes into `buffer`.
    func read(into buffer: UnsafeMutableRawBufferPointer) -> ReadStep {
        clearErrorQueue()
        var count = 0
        let result = SSL_read_ex(ssl, buffer.baseAddress, buffer.count, &count)
        return readStep(result, count)
    }

    /// As `read`, for one byte that stays unread: processes the records that arrived (a
    /// ticket, a key update, a close_notify, an alert) without taking plaintext.
    func peek() -> ReadStep {
        clearErrorQueue()
        var byte: UInt8 = 0
        var count = 0
        let result = SSL_peek_ex(ssl, &byte, 1, &count)
        return readStep(result, count)
    }

    private func readStep(_ result: Int32, _ count: Int) -> ReadStep {
        if result == 1 { return .bytes(count) }
        let error = SSL_get_error(ssl, 0)
        switch error {
        case SSL_ERROR_WANT_READ, SSL_ERROR_WANT_WRITE: return .wantRead
        case SSL_ERROR_ZERO_RETURN: return .closed
        default: return .failed(failure(error, duringHandshake: false))
        }
    }

    /// Encrypts up to `bytes.count` bytes; returns how many were taken, or an error.
    func write(_ bytes: UnsafeRawBufferPointer) -> Result<Int, SocketError> {
        clearErrorQueue()
        var count = 0
        let result = SSL_write_ex(ssl, bytes.baseAddress, bytes.count, &count)
        if result == 1 { return .success(count) }
        let error = SSL_get_error(ssl, 0)
        if error == SSL_ERROR_WANT_READ || error == SSL_ERROR_WANT_WRITE { return .success(0) }
        return .failure(failure(error, duringHandshake: false))
    }

    /// Queues our close_notify (then `takeOutput`).
    func shutdown() {
        ERR_clear_error()
        _ = SSL_shutdown(ssl)
        ERR_clear_error()
    }

    // MARK: OCSP stapling (clients)

    /// Clocks of server, responder and client disagree a little: a response made "now" by
    /// a responder a minute ahead is not in the future.
    static let ocspLeewaySeconds = 300

    /// OpenSSL's status callback, once the server's chain is verified: false fails the
    /// handshake (with `stapleFailure`).
    func checkStaple() -> Bool {
        guard let bytes = stapledResponseBytes else {
            guard context.settings.requireOCSPStaple else { return true }
            stapleFailure = SocketError(.tlsCertificateInvalid, osError: X509_V_ERR_OCSP_VERIFY_NEEDED,
                                        "OCSP: the server stapled no OCSP response, and one is required (requireOCSPStaple)")
            return false
        }
        var reason: Int32 = -1
        let result = bytes.withUnsafeBufferPointer {
            skc_ocsp_check(ssl, $0.baseAddress, $0.count, TLSSession.ocspLeewaySeconds, &reason)
        }
        ERR_clear_error() // what OCSP_basic_verify and the parsers left: the verdict is ours
        let failure: (Int32, String)
        switch result {
        case Int32(SKC_OCSP_GOOD): return true
        case Int32(SKC_OCSP_REVOKED):
            let why = reason >= 0 ? " (\(String(cString: OCSP_crl_reason_str(Int(reason)))))" : ""
            failure = (X509_V_ERR_CERT_REVOKED, "OCSP: certificate revoked\(why), says the stapled response")
        case Int32(SKC_OCSP_UNKNOWN):
            failure = (X509_V_ERR_OCSP_CERT_UNKNOWN, "OCSP: the stapled response says the certificate is unknown")
        case Int32(SKC_OCSP_MALFORMED):
            failure = (X509_V_ERR_OCSP_VERIFY_FAILED, "OCSP: the stapled response does not parse")
        case Int32(SKC_OCSP_UNSUCCESSFUL):
            failure = (X509_V_ERR_OCSP_VERIFY_FAILED, "OCSP: the stapled response's status is not successful")
        case Int32(SKC_OCSP_UNVERIFIED):
            failure = (X509_V_ERR_OCSP_VERIFY_FAILED,
                       "OCSP: the stapled response does not verify (signature or responder not trusted)")
        case Int32(SKC_OCSP_NO_STATUS):
            failure = (X509_V_ERR_OCSP_VERIFY_FAILED, "OCSP: the stapled response has no status for the server's certificate")
        case Int32(SKC_OCSP_NOT_CURRENT):
            failure = (X509_V_ERR_OCSP_VERIFY_FAILED, "OCSP: the stapled response is not current (expired or from the future)")
        default:
            failure = (X509_V_ERR_OCSP_VERIFY_FAILED,
                       "OCSP: no verified chain with the certificate's issuer to check the stapled response against")
        }
        stapleFailure = SocketError(.tlsCertificateInvalid, osError: failure.0, failure.1)
        return false
    }

    /// The OCSP response the server stapled (clients that asked), as received.
    private var stapledResponseBytes: [UInt8]? {
        var bytes: UnsafePointer<UInt8>? = nil
        let length = skc_tls_status_response(ssl, &bytes)
        guard let bytes, length >= 0 else { return nil }
        return Array(UnsafeBufferPointer(start: bytes, count: length))
    }

    // MARK: What the handshake settled

    var info: TLSConnectionInfo {
        let version = String(cString: SSL_get_version(ssl))
        let cipher = SSL_get_current_cipher(ssl).map { String(cString: SSL_CIPHER_get_name($0)) } ?? ""
        var alpnBytes: UnsafePointer<UInt8>? = nil
        var alpnLength: UInt32 = 0
        SSL_get0_alpn_selected(ssl, &alpnBytes, &alpnLength)
        let alpn = alpnBytes.map { String(decoding: UnsafeBufferPointer(start: $0, count: Int(alpnLength)), as: UTF8.self) }
        let serverName = SSL_get_servername(ssl, TLSEXT_NAMETYPE_host_name).map { String(cString: $0) }
        return TLSConnectionInfo(protocolVersion: version, cipher: cipher, alpnProtocol: alpn,
                                 peerCertificates: peerChain, sessionReused: SSL_session_reused(ssl) == 1,
                                 serverName: serverName,
                                 ocspResponse: context.settings.asksForOCSPStaple ? stapledResponseBytes : nil)
    }

    /// The peer's certificates, leaf first. (A server's SSL_get_peer_cert_chain omits the
    /// client's leaf; a client's includes the server's.)
    var peerChain: [Certificate] {
        var result: [Certificate] = []
        let chain = SSL_get_peer_cert_chain(ssl)
        let count = skc_x509_stack_count(chain)
        if context.settings.role == .server, let leaf = SSL_get1_peer_certificate(ssl) {
            result.append(Certificate(x509: leaf))
            X509_free(leaf)
        }
        for index in 0..<count {
            if let certificate = skc_x509_stack_value(chain, index) { result.append(Certificate(x509: certificate)) }
        }
        return result
    }

    var trust: TLSTrust {
        TLSTrust(chain: peerChain, verificationError: verificationError, peerName: peerName)
    }

    /// What OpenSSL's verification of the peer concluded (nil: it passed, or nothing was
    /// presented and nothing was required).
    var verificationError: SocketError? {
        let result = SSL_get_verify_result(ssl)
        if result == X509_V_OK {
            if context.settings.role == .client, SSL_get0_peer_certificate(ssl) == nil {
                return SocketError(.tlsCertificateInvalid, "the server sent no certificate")
            }
            return nil
        }
        return TLSSession.verifyError(Int32(result))
    }

    static func verifyError(_ code: Int32) -> SocketError {
        let text = String(cString: X509_verify_cert_error_string(Int(code)))
        let kind: SocketError.Code
        switch code {
        case X509_V_ERR_CERT_HAS_EXPIRED: kind = .tlsCertificateExpired
        case X509_V_ERR_CERT_NOT_YET_VALID: kind = .tlsCertificateNotYetValid
        case X509_V_ERR_DEPTH_ZERO_SELF_SIGNED_CERT, X509_V_ERR_SELF_SIGNED_CERT_IN_CHAIN: kind = .tlsSelfSigned
        case X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT, X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT_LOCALLY,
             X509_V_ERR_UNABLE_TO_VERIFY_LEAF_SIGNATURE:
            kind = .tlsUnknownIssuer
        case X509_V_ERR_HOSTNAME_MISMATCH, X509_V_ERR_IP_ADDRESS_MISMATCH: kind = .tlsHostnameMismatch
        default: kind = .tlsCertificateInvalid
        }
        return SocketError(kind, osError: code, "certificate verify failed: \(text)")
    }

    /// The error behind a failed OpenSSL call (`error` from SSL_get_error).
    private func failure(_ error: Int32, duringHandshake: Bool) -> SocketError {
        if let stapleFailure { return stapleFailure }
        let first = ERR_peek_error()
        let reason = first == 0 ? 0 : skc_err_reason(first)
        let detail = openSSLErrorText()
        if error == SSL_ERROR_SYSCALL || reason == SSL_R_UNEXPECTED_EOF_WHILE_READING {
            return duringHandshake
                ? SocketError(.tlsPeerClosed, "the peer closed the connection during the TLS handshake")
                : SocketError(.tlsTruncated, "the peer closed the connection without a TLS close_notify")
        }
        switch reason {
        case SSL_R_CERTIFICATE_VERIFY_FAILED:
            let result = Int32(SSL_get_verify_result(ssl))
            if result != X509_V_OK { return TLSSession.verifyError(result) }
            return SocketError(.tlsCertificateInvalid, osError: reason, detail)
        case SSL_R_PEER_DID_NOT_RETURN_A_CERTIFICATE, SSL_R_TLSV13_ALERT_CERTIFICATE_REQUIRED:
            return SocketError(.tlsClientCertificateRequired, osError: reason, detail)
        case SSL_R_UNSUPPORTED_PROTOCOL, SSL_R_NO_PROTOCOLS_AVAILABLE, SSL_R_TLSV1_ALERT_PROTOCOL_VERSION,
             SSL_R_VERSION_TOO_LOW, SSL_R_VERSION_TOO_HIGH, SSL_R_WRONG_SSL_VERSION:
            return SocketError(.tlsProtocolVersion, osError: reason, detail)
        default:
            return SocketError(.tlsFailed, osError: reason, detail)
        }
    }
}
