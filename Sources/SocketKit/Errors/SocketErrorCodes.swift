// SPDX-License-Identifier: MIT
// Generated from docs/EVENTS_AND_ERRORS.md ("Errors") by Tests/check_tables.py: edit the
// table and run `python3 Tests/check_tables.py --write`, not this file.

extension SocketError.Code {
    /// The call is not valid in the socket's current state or configuration: already connected,
    /// not connected, no delegate, both address families disabled, reads or writes after
    /// `disconnectAfter…`, a stopped event loop.
    public static let badConfig = SocketError.Code(rawValue: -1)
    /// An argument is not acceptable: empty host, zero length, empty separator, a maximum shorter
    /// than the separator, an offset outside the buffer, an unknown interface.
    public static let badParam = SocketError.Code(rawValue: -2)
    /// The connect timeout passed before the connection was established.
    public static let connectTimeout = SocketError.Code(rawValue: -3)
    /// A read's timeout passed and the delegate did not extend it.
    public static let readTimeout = SocketError.Code(rawValue: -4)
    /// A write's timeout passed and the delegate did not extend it.
    public static let writeTimeout = SocketError.Code(rawValue: -5)
    /// A read to a separator reached its maximum length without finding the separator.
    public static let readMaxedOut = SocketError.Code(rawValue: -6)
    /// The peer closed the connection while the socket was meant to stay open.
    public static let closed = SocketError.Code(rawValue: -7)
    /// Anything else; the message says what.
    public static let other = SocketError.Code(rawValue: -8)
    /// An operating-system call failed; `osError` holds `errno`.
    public static let system = SocketError.Code(rawValue: -9)
    /// A host name did not resolve; `osError` holds the resolver's `EAI_*` code.
    public static let resolution = SocketError.Code(rawValue: -10)
    /// A handle was NULL, released, stale or of the wrong kind (C and Python only).
    public static let invalidHandle = SocketError.Code(rawValue: -11)
    /// A UDP datagram was not sent in time (delivered through `didNotSendDataWithTag`).
    public static let sendTimeout = SocketError.Code(rawValue: -12)
    /// A UDP datagram was larger than the receive limit and was dropped.
    public static let truncated = SocketError.Code(rawValue: -13)
    /// TLS failed for a reason without its own code (a handshake_failure alert, no shared cipher,
    /// a bad record, the peer rejecting our certificate, a non-TLS peer); the message carries
    /// OpenSSL's reason.
    public static let tlsFailed = SocketError.Code(rawValue: -14)
    /// The peer's certificate has expired.
    public static let tlsCertificateExpired = SocketError.Code(rawValue: -15)
    /// The peer's certificate is not valid yet.
    public static let tlsCertificateNotYetValid = SocketError.Code(rawValue: -16)
    /// The peer's certificate (or its chain's root) is self-signed and not trusted.
    public static let tlsSelfSigned = SocketError.Code(rawValue: -17)
    /// The peer's chain leads to no trusted root (unknown issuer, missing intermediate).
    public static let tlsUnknownIssuer = SocketError.Code(rawValue: -18)
    /// The peer's certificate does not name the host (or IP address) we connected to.
    public static let tlsHostnameMismatch = SocketError.Code(rawValue: -19)
    /// The peer's certificate failed verification for another reason (an issuer that is not a CA,
    /// a bad signature, a weak key, the wrong purpose, ...); see the message.
    public static let tlsCertificateInvalid = SocketError.Code(rawValue: -20)
    /// The server requires a client certificate and none was given.
    public static let tlsClientCertificateRequired = SocketError.Code(rawValue: -21)
    /// No protocol version both sides accept.
    public static let tlsProtocolVersion = SocketError.Code(rawValue: -22)
    /// The peer closed the connection during the handshake.
    public static let tlsPeerClosed = SocketError.Code(rawValue: -23)
    /// The handshake did not finish within the settings' handshake timeout.
    public static let tlsHandshakeTimeout = SocketError.Code(rawValue: -24)
    /// The peer closed the TCP connection without a TLS close_notify: the data may have been cut
    /// short by an attacker or a crash (never reported as a clean close).
    public static let tlsTruncated = SocketError.Code(rawValue: -25)
    /// Manual trust evaluation answered no.
    public static let tlsPeerRejected = SocketError.Code(rawValue: -26)
    /// The TLS settings cannot be used: an unreadable or invalid certificate, key or trust file,
    /// a key that does not match its certificate, a wrong key password, an unknown cipher, a
    /// server without a certificate, an empty peer name, text with a NUL character, a key-log
    /// file that cannot be opened.
    public static let tlsSettings = SocketError.Code(rawValue: -27)
    /// A write would take the socket's queued, unsent bytes above its `maximumQueuedWriteBytes`:
    /// it was refused and nothing of it queued. The peer is not keeping up; stop writing until
    /// the queue drains (watermarks tell when).
    public static let writeQueueFull = SocketError.Code(rawValue: -28)
    /// A proxy (SOCKS5 or HTTP CONNECT) refused or failed the connection to the target, broke its
    /// protocol or closed the connection during its handshake; `osError` holds the SOCKS5 reply
    /// code (1-8) or the HTTP status (e.g. 403, 502) when the proxy gave one, and the message
    /// says which. A proxy that cannot be reached at all is `system` (e.g. ECONNREFUSED), its
    /// silence past the connect timeout `connectTimeout`.
    public static let proxy = SocketError.Code(rawValue: -29)
    /// The proxy requires authentication and we gave none, or it rejected the username and
    /// password (SOCKS5: no acceptable method, or an RFC 1929 status other than 0; HTTP: status
    /// 407, or 401 as some proxies answer, in `osError`).
    public static let proxyAuthentication = SocketError.Code(rawValue: -30)

    /// One row of the table: the code, its Swift name (none for success), its C name and
    /// its summary (`sk_strerror`).
    typealias TableEntry = (code: SocketError.Code, name: StaticString?, cName: StaticString, summary: StaticString)

    /// Every code, success first, in the table's order.
    static let table: [TableEntry] = [
        (SocketError.Code(rawValue: 0), nil, "SK_OK", "success"),
        (.badConfig, "badConfig", "SK_ERR_BAD_CONFIG", "invalid in the socket's current state or configuration"),
        (.badParam, "badParam", "SK_ERR_BAD_PARAM", "invalid argument"),
        (.connectTimeout, "connectTimeout", "SK_ERR_CONNECT_TIMEOUT", "connect timed out"),
        (.readTimeout, "readTimeout", "SK_ERR_READ_TIMEOUT", "read timed out"),
        (.writeTimeout, "writeTimeout", "SK_ERR_WRITE_TIMEOUT", "write timed out"),
        (.readMaxedOut, "readMaxedOut", "SK_ERR_READ_MAXED_OUT", "read reached its maximum length without the separator"),
        (.closed, "closed", "SK_ERR_CLOSED", "socket closed by remote peer"),
        (.other, "other", "SK_ERR_OTHER", "other error"),
        (.system, "system", "SK_ERR_SYSTEM", "operating system error"),
        (.resolution, "resolution", "SK_ERR_RESOLUTION", "host name did not resolve"),
        (.invalidHandle, "invalidHandle", "SK_ERR_INVALID_HANDLE", "invalid, released or wrong-kind handle"),
        (.sendTimeout, "sendTimeout", "SK_ERR_SEND_TIMEOUT", "send timed out"),
        (.truncated, "truncated", "SK_ERR_TRUNCATED", "datagram larger than the receive limit"),
        (.tlsFailed, "tlsFailed", "SK_ERR_TLS_FAILED", "TLS failed"),
        (.tlsCertificateExpired, "tlsCertificateExpired", "SK_ERR_TLS_CERT_EXPIRED", "the peer's certificate has expired"),
        (.tlsCertificateNotYetValid, "tlsCertificateNotYetValid", "SK_ERR_TLS_CERT_NOT_YET_VALID", "the peer's certificate is not yet valid"),
        (.tlsSelfSigned, "tlsSelfSigned", "SK_ERR_TLS_SELF_SIGNED", "the peer's certificate is self-signed and not trusted"),
        (.tlsUnknownIssuer, "tlsUnknownIssuer", "SK_ERR_TLS_UNKNOWN_ISSUER", "the peer's certificate chain leads to no trusted root"),
        (.tlsHostnameMismatch, "tlsHostnameMismatch", "SK_ERR_TLS_HOSTNAME_MISMATCH", "the peer's certificate does not match the host name"),
        (.tlsCertificateInvalid, "tlsCertificateInvalid", "SK_ERR_TLS_CERT_INVALID", "the peer's certificate is not valid"),
        (.tlsClientCertificateRequired, "tlsClientCertificateRequired", "SK_ERR_TLS_CLIENT_CERT_REQUIRED", "the server requires a client certificate"),
        (.tlsProtocolVersion, "tlsProtocolVersion", "SK_ERR_TLS_PROTOCOL_VERSION", "no TLS protocol version both sides accept"),
        (.tlsPeerClosed, "tlsPeerClosed", "SK_ERR_TLS_PEER_CLOSED", "the peer closed the connection during the TLS handshake"),
        (.tlsHandshakeTimeout, "tlsHandshakeTimeout", "SK_ERR_TLS_HANDSHAKE_TIMEOUT", "the TLS handshake timed out"),
        (.tlsTruncated, "tlsTruncated", "SK_ERR_TLS_TRUNCATED", "the peer closed the connection without a TLS close_notify"),
        (.tlsPeerRejected, "tlsPeerRejected", "SK_ERR_TLS_PEER_REJECTED", "manual trust evaluation rejected the peer"),
        (.tlsSettings, "tlsSettings", "SK_ERR_TLS_SETTINGS", "the TLS settings cannot be used"),
        (.writeQueueFull, "writeQueueFull", "SK_ERR_WRITE_QUEUE_FULL", "the write would pass the socket's maximum of queued bytes"),
        (.proxy, "proxy", "SK_ERR_PROXY", "the proxy did not connect us to the target"),
        (.proxyAuthentication, "proxyAuthentication", "SK_ERR_PROXY_AUTH", "the proxy refused our credentials"),
    ]
}
