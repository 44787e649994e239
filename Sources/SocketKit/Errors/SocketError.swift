import Glibc

/// The one error type of SocketKit. Its codes map one-to-one onto the C `SK_ERR_*` values
/// and the Python exception classes.
///
/// `osError` carries the OS `errno` for `.system` errors, the resolver's `EAI_*` value for
/// `.resolution` errors, and 0 otherwise.
public struct SocketError: Error, Hashable, Sendable, CustomStringConvertible {
    /// What went wrong. Raw values are the C error codes (negative; 0 is success).
    public struct Code: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
        public let rawValue: Int32
        public init(rawValue: Int32) { self.rawValue = rawValue }

        /// The call is not valid in the socket's current state or configuration: already
        /// connected, not connected, no delegate, both address families disabled, reads or
        /// writes after `disconnectAfter…`, a stopped event loop.
        public static let badConfig = Code(rawValue: -1)
        /// An argument is not acceptable: empty host, zero length, empty separator, a maximum
        /// shorter than the separator, an offset outside the buffer, an unknown interface.
        public static let badParam = Code(rawValue: -2)
        /// The connect timeout passed before the connection was established.
        public static let connectTimeout = Code(rawValue: -3)
        /// A read's timeout passed and the delegate did not extend it.
        public static let readTimeout = Code(rawValue: -4)
        /// A write's timeout passed and the delegate did not extend it.
        public static let writeTimeout = Code(rawValue: -5)
        /// A read to a separator reached its maximum length without finding the separator.
        public static let readMaxedOut = Code(rawValue: -6)
        /// The peer closed the connection while the socket was meant to stay open.
        public static let closed = Code(rawValue: -7)
        /// Anything else; the message says what.
        public static let other = Code(rawValue: -8)
        /// An operating-system call failed; `osError` holds `errno`.
        public static let system = Code(rawValue: -9)
        /// A host name did not resolve; `osError` holds the resolver's `EAI_*` code.
        public static let resolution = Code(rawValue: -10)
        /// A handle was NULL, released, stale or of the wrong kind (C and Python only).
        public static let invalidHandle = Code(rawValue: -11)
        /// A UDP datagram was not sent in time (delivered through `didNotSendDataWithTag`).
        public static let sendTimeout = Code(rawValue: -12)
        /// A UDP datagram was larger than the receive limit and was dropped.
        public static let truncated = Code(rawValue: -13)
        /// TLS failed for a reason without its own code (a handshake_failure alert, no
        /// shared cipher, a bad record, the peer rejecting our certificate, a non-TLS peer);
        /// the message carries OpenSSL's reason.
        public static let tlsFailed = Code(rawValue: -14)
        /// The peer's certificate has expired.
        public static let tlsCertificateExpired = Code(rawValue: -15)
        /// The peer's certificate is not valid yet.
        public static let tlsCertificateNotYetValid = Code(rawValue: -16)
        /// The peer's certificate (or its chain's root) is self-signed and not trusted.
        public static let tlsSelfSigned = Code(rawValue: -17)
        /// The peer's chain leads to no trusted root (unknown issuer, missing intermediate).
        public static let tlsUnknownIssuer = Code(rawValue: -18)
        /// The peer's certificate does not name the host (or IP address) we connected to.
        public static let tlsHostnameMismatch = Code(rawValue: -19)
        /// The peer's certificate failed verification for another reason (an issuer that is
        /// not a CA, a bad signature, a weak key, the wrong purpose, ...); see the message.
        public static let tlsCertificateInvalid = Code(rawValue: -20)
        /// The server requires a client certificate and none was given.
        public static let tlsClientCertificateRequired = Code(rawValue: -21)
        /// No protocol version both sides accept.
        public static let tlsProtocolVersion = Code(rawValue: -22)
        /// The peer closed the connection during the handshake.
        public static let tlsPeerClosed = Code(rawValue: -23)
        /// The handshake did not finish within the settings' handshake timeout.
        public static let tlsHandshakeTimeout = Code(rawValue: -24)
        /// The peer closed the TCP connection without a TLS close_notify: the data may have
        /// been cut short by an attacker or a crash (never reported as a clean close).
        public static let tlsTruncated = Code(rawValue: -25)
        /// Manual trust evaluation answered no.
        public static let tlsPeerRejected = Code(rawValue: -26)
        /// The TLS settings cannot be used: an unreadable or invalid certificate, key or
        /// trust file, a key that does not match its certificate, a wrong key password, an
        /// unknown cipher, a server without a certificate, an empty peer name, text with a
        /// NUL character, a key-log file that cannot be opened.
        public static let tlsSettings = Code(rawValue: -27)
        /// A write would take the socket's queued, unsent bytes above its
        /// `maximumQueuedWriteBytes`: it was refused and nothing of it queued. The peer is
        /// not keeping up; stop writing until the queue drains (watermarks tell when).
        public static let writeQueueFull = Code(rawValue: -28)

        /// Every code, in raw-value order; the C and Python tables are checked against it.
        public static let all: [Code] = [
            .badConfig, .badParam, .connectTimeout, .readTimeout, .writeTimeout, .readMaxedOut,
            .closed, .other, .system, .resolution, .invalidHandle, .sendTimeout, .truncated,
            .tlsFailed, .tlsCertificateExpired, .tlsCertificateNotYetValid, .tlsSelfSigned, .tlsUnknownIssuer,
            .tlsHostnameMismatch, .tlsCertificateInvalid, .tlsClientCertificateRequired, .tlsProtocolVersion,
            .tlsPeerClosed, .tlsHandshakeTimeout, .tlsTruncated, .tlsPeerRejected, .tlsSettings,
            .writeQueueFull,
        ]

        /// The name of the code, e.g. `"readTimeout"`.
        public var name: String {
            switch self {
            case .badConfig: return "badConfig"
            case .badParam: return "badParam"
            case .connectTimeout: return "connectTimeout"
            case .readTimeout: return "readTimeout"
            case .writeTimeout: return "writeTimeout"
            case .readMaxedOut: return "readMaxedOut"
            case .closed: return "closed"
            case .other: return "other"
            case .system: return "system"
            case .resolution: return "resolution"
            case .invalidHandle: return "invalidHandle"
            case .sendTimeout: return "sendTimeout"
            case .truncated: return "truncated"
            case .tlsFailed: return "tlsFailed"
            case .tlsCertificateExpired: return "tlsCertificateExpired"
            case .tlsCertificateNotYetValid: return "tlsCertificateNotYetValid"
            case .tlsSelfSigned: return "tlsSelfSigned"
            case .tlsUnknownIssuer: return "tlsUnknownIssuer"
            case .tlsHostnameMismatch: return "tlsHostnameMismatch"
            case .tlsCertificateInvalid: return "tlsCertificateInvalid"
            case .tlsClientCertificateRequired: return "tlsClientCertificateRequired"
            case .tlsProtocolVersion: return "tlsProtocolVersion"
            case .tlsPeerClosed: return "tlsPeerClosed"
            case .tlsHandshakeTimeout: return "tlsHandshakeTimeout"
            case .tlsTruncated: return "tlsTruncated"
            case .tlsPeerRejected: return "tlsPeerRejected"
            case .tlsSettings: return "tlsSettings"
            case .writeQueueFull: return "writeQueueFull"
            default: return "code(\(rawValue))"
            }
        }

        /// A short sentence describing the code.
        public var summary: String {
            switch self {
            case .badConfig: return "invalid in the socket's current state or configuration"
            case .badParam: return "invalid argument"
            case .connectTimeout: return "connect timed out"
            case .readTimeout: return "read timed out"
            case .writeTimeout: return "write timed out"
            case .readMaxedOut: return "read reached its maximum length without the separator"
            case .closed: return "socket closed by remote peer"
            case .other: return "other error"
            case .system: return "operating system error"
            case .resolution: return "host name did not resolve"
            case .invalidHandle: return "invalid, released or wrong-kind handle"
            case .sendTimeout: return "send timed out"
            case .truncated: return "datagram larger than the receive limit"
            case .tlsFailed: return "TLS failed"
            case .tlsCertificateExpired: return "the peer's certificate has expired"
            case .tlsCertificateNotYetValid: return "the peer's certificate is not yet valid"
            case .tlsSelfSigned: return "the peer's certificate is self-signed and not trusted"
            case .tlsUnknownIssuer: return "the peer's certificate chain leads to no trusted root"
            case .tlsHostnameMismatch: return "the peer's certificate does not match the host name"
            case .tlsCertificateInvalid: return "the peer's certificate is not valid"
            case .tlsClientCertificateRequired: return "the server requires a client certificate"
            case .tlsProtocolVersion: return "no TLS protocol version both sides accept"
            case .tlsPeerClosed: return "the peer closed the connection during the TLS handshake"
            case .tlsHandshakeTimeout: return "the TLS handshake timed out"
            case .tlsTruncated: return "the peer closed the connection without a TLS close_notify"
            case .tlsPeerRejected: return "manual trust evaluation rejected the peer"
            case .tlsSettings: return "the TLS settings cannot be used"
            case .writeQueueFull: return "the write would pass the socket's maximum of queued bytes"
            default: return "unknown error"
            }
        }

        public var description: String { name }
    }

    public let code: Code
    public let osError: Int32
    public let message: String

    public init(_ code: Code, osError: Int32 = 0, _ message: String? = nil) {
        self.code = code
        self.osError = osError
        self.message = message ?? code.summary
    }

    /// An error for the current `errno` (read at call time), naming the failed call.
    static func lastSystemError(_ call: String) -> SocketError {
        systemError(errno, call)
    }

    static func systemError(_ number: Int32, _ call: String) -> SocketError {
        SocketError(.system, osError: number, "\(call): \(String(cString: strerror(number)))")
    }

    public var description: String {
        osError != 0 ? "\(code.name) (\(osError)): \(message)" : "\(code.name): \(message)"
    }
}
