// SPDX-License-Identifier: MIT
import Glibc
import SocketKitC

/// An X.509 certificate (DER) with the fields people look at: subject, issuer, validity.
public struct Certificate: Hashable, Sendable, CustomStringConvertible {
    /// The certificate in DER.
    public let der: [UInt8]
    /// The subject in RFC 2253 form, e.g. `"CN=localhost,O=SocketKit Test"`.
    public let subject: String
    /// The issuer, in the same form.
    public let issuer: String
    /// Validity bounds, in seconds since 1970 (UTC).
    public let notBefore: Int64
    public let notAfter: Int64

    /// Parses DER. Throws `.badParam` when the bytes are not a certificate.
    public init(der: [UInt8]) throws(SocketError) {
        openSSLInitialized()
        let parsed: OpaquePointer? = der.withUnsafeBufferPointer { buffer in
            var cursor: UnsafePointer<UInt8>? = buffer.baseAddress
            return d2i_X509(nil, &cursor, buffer.count)
        }
        guard let parsed else { throw SocketError(.badParam, "not a DER certificate: \(openSSLErrorText())") }
        defer { X509_free(parsed) }
        self.init(x509: parsed, der: der)
    }

    /// Reads an `X509 *` (not consumed).
    init(x509: OpaquePointer) {
        var bytes: UnsafeMutablePointer<UInt8>? = nil
        let length = i2d_X509(x509, &bytes)
        var der: [UInt8] = []
        if length > 0, let bytes {
            der = Array(UnsafeBufferPointer(start: bytes, count: Int(length)))
            CRYPTO_free(bytes, #fileID, #line)
        }
        self.init(x509: x509, der: der)
    }

    private init(x509: OpaquePointer, der: [UInt8]) {
        self.der = der
        subject = Certificate.name(X509_get_subject_name(x509))
        issuer = Certificate.name(X509_get_issuer_name(x509))
        notBefore = Certificate.seconds(X509_get0_notBefore(x509))
        notAfter = Certificate.seconds(X509_get0_notAfter(x509))
    }

    /// Every certificate in PEM text, in order. Throws `.badParam` when there is none.
    public static func fromPEM(_ pem: String) throws(SocketError) -> [Certificate] {
        openSSLInitialized()
        let x509s = try readCertificates(pem: pem)
        defer { x509s.forEach { X509_free($0) } }
        return x509s.map { Certificate(x509: $0) }
    }

    /// The certificate as PEM text.
    public var pem: String {
        let body = base64(der)
        var text = "-----BEGIN CERTIFICATE-----\n"
        var index = body.startIndex
        while index < body.endIndex {
            let end = body.index(index, offsetBy: 64, limitedBy: body.endIndex) ?? body.endIndex
            text += body[index..<end] + "\n"
            index = end
        }
        return text + "-----END CERTIFICATE-----\n"
    }

    public var description: String { "Certificate(subject: \(subject), issuer: \(issuer))" }

    private static func name(_ name: OpaquePointer?) -> String {
        guard let name, let bio = BIO_new(BIO_s_mem()) else { return "" }
        defer { BIO_free(bio) }
        guard X509_NAME_print_ex(bio, name, 0, skc_xn_flag_rfc2253()) >= 0 else { return "" }
        return drainText(bio)
    }

    private static func seconds(_ time: UnsafePointer<ASN1_TIME>?) -> Int64 {
        guard let time else { return 0 }
        var parts = tm()
        guard ASN1_TIME_to_tm(time, &parts) == 1 else { return 0 }
        return Int64(timegm(&parts))
    }
}

/// What `didReceiveTrust` shows the delegate: the peer's chain as it sent it (leaf first)
/// and what OpenSSL's own verification concluded.
public struct TLSTrust: Sendable {
    /// The peer's certificates, leaf first (empty if it sent none: a client without one).
    public let chain: [Certificate]
    /// nil when built-in verification (trust roots, validity, the peer name) passes;
    /// otherwise the error a socket without manual trust would have disconnected with.
    public let verificationError: SocketError?
    /// The name the chain was checked against, if any.
    public let peerName: String?
}

/// What the handshake settled, readable once `socketDidSecure` was called.
public struct TLSConnectionInfo: Sendable {
    /// "TLSv1.2" or "TLSv1.3".
    public let protocolVersion: String
    /// OpenSSL's cipher name, e.g. "TLS_AES_256_GCM_SHA384".
    public let cipher: String
    /// The protocol ALPN chose, or nil.
    public let alpnProtocol: String?
    /// The peer's certificates, leaf first (empty for a client that sent none).
    public let peerCertificates: [Certificate]
    /// True when an earlier session was resumed (no full handshake).
    public let sessionReused: Bool
    /// The server name: what a client sent as SNI, or what a server received.
    public let serverName: String?
    /// Clients that asked (`TLSSettings.requestOCSPStaple`): the DER OCSP response the
    /// server stapled, checked before the handshake succeeded; nil when none was stapled (or
    /// the session was resumed).
    public let ocspResponse: [UInt8]?
}

// MARK: OpenSSL helpers

/// Initialises OpenSSL once, before SocketKit's first use of it, without its atexit
/// cleanup: loop threads may still be in a handshake while the process exits.
private let openSSLInitialization: Bool = skc_openssl_init() == 1

func openSSLInitialized() {
    _ = openSSLInitialization
}

/// Reads every PEM certificate in `pem` (at least one). The caller frees them.
func readCertificates(pem: String) throws(SocketError) -> [OpaquePointer] {
    var result: [OpaquePointer] = []
    let bio = memoryBIO(pem)
    defer { BIO_free(bio) }
    while let certificate = PEM_read_bio_X509(bio, nil, nil, nil) {
        result.append(certificate)
    }
    ERR_clear_error() // the end of the text reads as "no start line"
    guard !result.isEmpty else { throw SocketError(.badParam, "no PEM certificate found") }
    return result
}

/// A read-only memory BIO over a copy of `text`.
func memoryBIO(_ text: String) -> OpaquePointer {
    let bio = BIO_new(BIO_s_mem())!
    var copy = text
    copy.withUTF8 { bytes in _ = BIO_write(bio, bytes.baseAddress, Int32(bytes.count)) }
    return bio
}

/// Everything in a memory BIO as text.
func drainText(_ bio: OpaquePointer) -> String {
    var bytes: [UInt8] = []
    var chunk = [UInt8](repeating: 0, count: 512)
    while true {
        let count = chunk.withUnsafeMutableBytes { BIO_read(bio, $0.baseAddress, Int32($0.count)) }
        if count <= 0 { break }
        bytes.append(contentsOf: chunk[0..<Int(count)])
    }
    return String(decoding: bytes, as: UTF8.self)
}

/// OpenSSL's queued errors of this thread as one line (and the queue cleared).
func openSSLErrorText() -> String {
    var parts: [String] = []
    while true {
        let code = ERR_get_error()
        if code == 0 { break }
        var buffer = [CChar](repeating: 0, count: 256)
        ERR_error_string_n(code, &buffer, buffer.count)
        parts.append(String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self))
    }
    return parts.isEmpty ? "no OpenSSL detail" : parts.joined(separator: "; ")
}

private func base64(_ bytes: [UInt8]) -> String {
    let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/".utf8)
    var out: [UInt8] = []
    out.reserveCapacity((bytes.count + 2) / 3 * 4)
    var index = 0
    while index + 2 < bytes.count {
        let value = UInt32(bytes[index]) << 16 | UInt32(bytes[index + 1]) << 8 | UInt32(bytes[index + 2])
        out += [alphabet[Int(value >> 18 & 63)], alphabet[Int(value >> 12 & 63)],
                alphabet[Int(value >> 6 & 63)], alphabet[Int(value & 63)]]
        index += 3
    }
    let rest = bytes.count - index
    if rest == 1 {
        let value = UInt32(bytes[index]) << 16
        out += [alphabet[Int(value >> 18 & 63)], alphabet[Int(value >> 12 & 63)], UInt8(ascii: "="), UInt8(ascii: "=")]
    } else if rest == 2 {
        let value = UInt32(bytes[index]) << 16 | UInt32(bytes[index + 1]) << 8
        out += [alphabet[Int(value >> 18 & 63)], alphabet[Int(value >> 12 & 63)], alphabet[Int(value >> 6 & 63)],
                UInt8(ascii: "=")]
    }
    return String(decoding: out, as: UTF8.self)
}
