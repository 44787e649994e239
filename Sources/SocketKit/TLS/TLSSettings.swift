// SPDX-License-Identifier: MIT
/// What `Socket.startTLS` needs to know: the side of the handshake, whom to trust, who we
/// are, and the protocol limits. Secure by default: a client verifies the server's chain
/// against the system trust store and the host name it connected to; TLS 1.2 is the
/// minimum; OpenSSL security level 2 applies; the handshake times out after 30 seconds.
///
/// GCDAsyncSocket's settings dictionary, as a value: `kCFStreamSSLIsServer` → `role`,
/// `kCFStreamSSLPeerName` → `peerName`, `kCFStreamSSLCertificates` → `certificateChain` and
/// `privateKey`, or `pkcs12` (the identity as a PKCS#12 file or bytes, as Security's
/// `SecPKCS12Import` reads it), `GCDAsyncSocketManuallyEvaluateTrust` → `manualTrustEvaluation`,
/// `GCDAsyncSocketSSLProtocolVersionMin/Max` → `minimumVersion`/`maximumVersion`,
/// `GCDAsyncSocketSSLCipherSuites` → `cipherList`/`cipherSuites`, `GCDAsyncSocketSSLALPN`
/// → `alpnProtocols`, `GCDAsyncSocketSSLPeerID` → `sessionResumption` (sessions are kept per
/// peer name and port). The banned upstream keys (allow any root, allow expired, ...) have
/// no equivalent: use manual trust evaluation.
///
/// Text that contains a NUL character (a peer name, a path, a cipher string, a password,
/// an ALPN name, PEM text) is refused with `.tlsSettings`: OpenSSL and the file system would
/// see only the part before it.
///
/// Each handshake flight leaves in one send, and the last one (a client's Finished, a
/// server's session tickets) together with what follows it at once (writes queued behind
/// `startTLS` or made in `socketDidSecure`, a loop-thread callback's answer to data that
/// came with the peer's Finished): a first request and its answer do not wait for a
/// delayed ACK even with `Socket.noDelay` off.
///
/// Files are read again when they change: each new connection (each `startTLS`) stats the
/// certificate chain, private key and trust file or directory it names (device, inode,
/// modification time to the nanosecond, size) and, when one differs from what its shared
/// context was made from, makes a new context from the current files. A renewed
/// certificate is therefore served to the next client without a restart; connections
/// already made keep theirs. Replace files by renaming over them (as certbot does), the
/// chain and its key both before the next connection: a connection that starts while the
/// two do not match fails with `.tlsSettings`, and the one after it tries again. The
/// system trust store (`.system`) is read once.
///
/// What TLS does not do: renegotiation (TLS 1.2 and older) is refused (a peer's request is
/// answered with a no_renegotiation alert; a peer that insists ends the connection with
/// `.tlsFailed`); revocation is checked against the CRL files given (`crlFiles`) and a stapled
/// OCSP response when asked for (`requestOCSPStaple`), never by fetching from an OCSP
/// responder or a CRL distribution point; the security level cannot be lowered (see
/// `cipherList`).
public struct TLSSettings: Hashable, Sendable {
    public enum Role: Hashable, Sendable {
        case client, server
    }

    /// PEM text in memory or a PEM file.
    public enum Source: Hashable, Sendable {
        case file(String)
        case pem(String)
    }

    /// An identity (private key, its certificate and any intermediates) in one PKCS#12
    /// (`.p12`, `.pfx`) file or in its bytes, with the password it was exported with.
    ///
    /// Read as the other files are: when a context is made, and again when the file
    /// changed on disk. A wrong password, bytes that are not PKCS#12, a file that cannot be
    /// read, or one without a key and its certificate is `.tlsSettings` with OpenSSL's
    /// reason (from `startTLS`, or at once from `check`), never a handshake without an
    /// identity. Files from OpenSSL 3 (`openssl pkcs12 -export`: AES-256 and PBKDF2) and
    /// the older 3DES and SHA-1 form are read; RC2-40 (`-legacy`, OpenSSL 1.x's default
    /// and old Windows exports) needs OpenSSL's legacy provider, which SocketKit does not
    /// load (it would change the process's OpenSSL for everyone): such a file is
    /// `.tlsSettings` saying so; convert it with `openssl pkcs12 -legacy -in old.p12
    /// -nodes | openssl pkcs12 -export -out new.p12`.
    public struct PKCS12: Hashable, Sendable {
        public enum Source: Hashable, Sendable {
            case file(String)
            case data([UInt8])
        }

        public var source: Source
        /// nil: no password (OpenSSL tries none and the empty one, as `openssl pkcs12` does).
        public var password: String?

        public init(_ source: Source, password: String? = nil) {
            self.source = source
            self.password = password
        }

        public static func file(_ path: String, password: String? = nil) -> PKCS12 { PKCS12(.file(path), password: password) }
        public static func data(_ bytes: [UInt8], password: String? = nil) -> PKCS12 { PKCS12(.data(bytes), password: password) }
    }

    /// The roots a peer's chain must lead to.
    public enum TrustRoots: Hashable, Sendable {
        /// The system store (Debian: /etc/ssl/certs).
        case system
        /// A PEM file of one or more certificates.
        case file(String)
        /// A directory in OpenSSL's hashed format (`openssl rehash`).
        case directory(String)
        /// PEM text of one or more certificates.
        case pem(String)
    }

    public enum PeerVerification: Hashable, Sendable {
        /// Accept any peer (a client then has no protection against impostors).
        case none
        /// Verify the peer's certificate if it sends one. A client always gets one; a
        /// server asks clients for one and lets those without it in.
        case verify
        /// Servers: clients must present a certificate that verifies.
        case requireCertificate
    }

    public enum ProtocolVersion: Int32, Hashable, Sendable, Comparable {
        case tls1_0 = 0x0301
        case tls1_1 = 0x0302
        case tls1_2 = 0x0303
        case tls1_3 = 0x0304

        public static func < (lhs: ProtocolVersion, rhs: ProtocolVersion) -> Bool { lhs.rawValue < rhs.rawValue }

        /// OpenSSL's name ("TLSv1.3").
        public var name: String {
            switch self {
            case .tls1_0: return "TLSv1"
            case .tls1_1: return "TLSv1.1"
            case .tls1_2: return "TLSv1.2"
            case .tls1_3: return "TLSv1.3"
            }
        }
    }

    /// Client (the default) or server.
    public var role: Role
    /// The name to send as SNI and to verify the server's certificate against (clients).
    /// nil: the host given to `connect(toHost:)` (the IP for `connect(to:)`). An IP literal
    /// is matched against the certificate's IP addresses and never sent as SNI. An empty
    /// name is refused (`.tlsSettings`): it would turn host-name verification off. A
    /// Unix-domain connection has no host: a client that verifies must be given a name, or
    /// its handshake ends at once with `.tlsSettings`.
    public var peerName: String?
    /// Whom to trust (default: the system store).
    public var trustRoots: TrustRoots
    /// Our certificate, then any intermediates (PEM). Servers need one; a client sends it
    /// when the server asks.
    public var certificateChain: Source?
    /// The private key of the first certificate (PEM, optionally encrypted).
    public var privateKey: Source?
    /// The password of an encrypted private key.
    public var privateKeyPassword: String?
    /// Our identity as PKCS#12 instead of `certificateChain` and `privateKey` (give one or
    /// the other: both is `.tlsSettings`). Servers need an identity; a client sends it when
    /// the server asks.
    public var pkcs12: PKCS12?
    /// Certificate revocation lists the peer's chain is checked against (files: PEM, one or
    /// more CRLs each, or DER), as `openssl verify -crl_check_all` checks it. Empty (the
    /// default): no revocation check. Given, a revoked certificate fails verification
    /// (`.tlsCertificateInvalid`, `osError` `X509_V_ERR_CERT_REVOKED`, "certificate
    /// revoked"), on a client verifying its server as on a server verifying client
    /// certificates; so does a certificate whose issuer has no CRL here ("unable to get
    /// certificate CRL": fail closed), or an expired CRL. A file that cannot be read or
    /// holds no CRL is `.tlsSettings`, never "no check". The files are stamped and read
    /// again when they change, as certificates are (publish a new CRL by renaming it over
    /// the old one). With manual trust evaluation the verdict is shown to the delegate. A
    /// server's CRLs are its own settings', not those of its `serverNames` (refused there).
    public var crlFiles: [String]
    /// true (the default): every certificate of the chain must be covered by a CRL of its
    /// issuer (`X509_V_FLAG_CRL_CHECK_ALL`); false: the leaf only (`X509_V_FLAG_CRL_CHECK`).
    public var crlCheckWholeChain: Bool
    /// Servers: a DER OCSP response for our certificate (`openssl ocsp -respout`), stapled
    /// for each client that asks (status_request). It must be a successful OCSP response
    /// with a basic response: a file that cannot be read or is not one is `.tlsSettings`,
    /// never a handshake without the staple. Stamped and read again when it changes, as
    /// certificates are: a renewed response renamed over the old one is stapled from the
    /// next connection on. SocketKit does not fetch responses or check their dates: keep the
    /// file current (a client refuses a stale one). A server name's settings may have their
    /// own (for their certificate).
    public var ocspResponseFile: String?
    /// Clients: ask the server to staple an OCSP response (status_request). A stapled
    /// response is checked against the chain the handshake verified: signed by the leaf's
    /// issuer (or a responder it delegated to) chaining to the trust roots, for the leaf and
    /// that issuer, current (five minutes' leeway for clocks). "revoked" fails the handshake
    /// with `.tlsCertificateInvalid`, `osError` 23 (`X509_V_ERR_CERT_REVOKED`, "OCSP:
    /// certificate revoked"); so does a staple that does not verify, does not parse, is
    /// stale, or says "unknown" (`osError` 74 or 75, fail closed). No staple: the handshake
    /// goes on (see `requireOCSPStaple`). A resumed session has none (its first handshake
    /// checked it). With manual trust evaluation the staple is still checked, during the
    /// handshake, before the delegate is asked (against the trust roots: a chain they do not
    /// vouch for has no staple that verifies). The staple is `TLSConnectionInfo.ocspResponse`.
    public var requestOCSPStaple: Bool
    /// Clients: a server that staples no OCSP response fails the handshake
    /// (`.tlsCertificateInvalid`, `osError` 73, `X509_V_ERR_OCSP_VERIFY_NEEDED`), as for a
    /// must-staple certificate. Implies `requestOCSPStaple`. Default off.
    public var requireOCSPStaple: Bool
    /// nil: the role's default (clients `.verify`, servers `.none`: no client certificates).
    public var peerVerification: PeerVerification?
    /// Default TLS 1.2.
    public var minimumVersion: ProtocolVersion
    /// nil: the newest OpenSSL knows.
    public var maximumVersion: ProtocolVersion?
    /// OpenSSL cipher list for TLS 1.2 and older (`SSL_CTX_set_cipher_list`); nil = default.
    /// A list that lowers the security level below 2 (`"@SECLEVEL=0"` or `"=1"`) is refused
    /// (`.tlsSettings`) instead of silently accepting weak keys and SHA-1 again.
    public var cipherList: String?
    /// TLS 1.3 cipher suites (`SSL_CTX_set_ciphersuites`); nil = default.
    public var cipherSuites: String?
    /// ALPN protocols: offered by a client in order, or accepted by a server in its order of
    /// preference (no overlap: the handshake goes on without ALPN). Empty = no ALPN.
    public var alpnProtocols: [String]
    /// Clients: resume earlier sessions with the same peer name and port (default on).
    public var sessionResumption: Bool
    /// Seconds from the start of the handshake until the connection is secure (negative: no
    /// limit). Default 30. With manual trust evaluation the delegate's answer counts too:
    /// the timeout bounds how long an unauthenticated peer holds a connection.
    public var handshakeTimeout: Double
    /// Appends the session keys in NSS key-log format (Wireshark's `SSLKEYLOGFILE`), for
    /// debugging only: anyone with the file can decrypt the traffic. A new file is created
    /// readable by its owner only (0600); one that cannot be opened is `.tlsSettings`.
    public var keyLogFile: String?
    /// Skip the automatic verdict: the delegate's `didReceiveTrust` sees the peer's chain
    /// (and what built-in verification concluded) and answers yes or no.
    public var manualTrustEvaluation: Bool
    /// Servers: the certificate to present for each name a client asks for (SNI, chosen
    /// while OpenSSL reads the client's hello), as NIOSSL's and asyncio's `sni_callback`.
    /// A key is a host name, matched without regard to case, or `*.` and a domain for any
    /// one label in front of it (`*.example.com`: `a.example.com`, not `example.com` or
    /// `a.b.example.com`); an exact name wins over a wildcard. A name not listed, or no SNI
    /// (an IP address, an older client): these settings' own certificate. Each value is a
    /// server's settings whose certificate chain and key (and ALPN list and key-log file)
    /// serve that name; versions, ciphers and client verification (mode and trust roots)
    /// are these settings' (OpenSSL has settled them by then; the roots are kept on purpose:
    /// a name's settings cannot widen whom the server trusts). Their files are stamped and read again as these
    /// settings' own are. A value with names of its own, an empty or malformed name, or
    /// names on a client is `.tlsSettings`.
    public var serverNames: [String: TLSSettings]

    public init(role: Role = .client, peerName: String? = nil, trustRoots: TrustRoots = .system,
                certificateChain: Source? = nil, privateKey: Source? = nil, privateKeyPassword: String? = nil,
                peerVerification: PeerVerification? = nil, minimumVersion: ProtocolVersion = .tls1_2,
                maximumVersion: ProtocolVersion? = nil, cipherList: String? = nil, cipherSuites: String? = nil,
                alpnProtocols: [String] = [], sessionResumption: Bool = true, handshakeTimeout: Double = 30,
                keyLogFile: String? = nil, manualTrustEvaluation: Bool = false,
                serverNames: [String: TLSSettings] = [:], pkcs12: PKCS12? = nil, crlFiles: [String] = [],
                crlCheckWholeChain: Bool = true, ocspResponseFile: String? = nil,
                requestOCSPStaple: Bool = false, requireOCSPStaple: Bool = false) {
        self.role = role
        self.peerName = peerName
        self.trustRoots = trustRoots
        self.certificateChain = certificateChain
        self.privateKey = privateKey
        self.privateKeyPassword = privateKeyPassword
        self.peerVerification = peerVerification
        self.minimumVersion = minimumVersion
        self.maximumVersion = maximumVersion
        self.cipherList = cipherList
        self.cipherSuites = cipherSuites
        self.alpnProtocols = alpnProtocols
        self.sessionResumption = sessionResumption
        self.handshakeTimeout = handshakeTimeout
        self.keyLogFile = keyLogFile
        self.manualTrustEvaluation = manualTrustEvaluation
        self.serverNames = serverNames
        self.pkcs12 = pkcs12
        self.crlFiles = crlFiles
        self.crlCheckWholeChain = crlCheckWholeChain
        self.ocspResponseFile = ocspResponseFile
        self.requestOCSPStaple = requestOCSPStaple
        self.requireOCSPStaple = requireOCSPStaple
    }

    /// Clients: whether the server is asked for a stapled OCSP response.
    var asksForOCSPStaple: Bool { role == .client && (requestOCSPStaple || requireOCSPStaple) }

    /// A server with its certificate chain and key.
    public static func server(certificateChain: Source, privateKey: Source, password: String? = nil) -> TLSSettings {
        TLSSettings(role: .server, certificateChain: certificateChain, privateKey: privateKey, privateKeyPassword: password)
    }

    /// A server with its identity in PKCS#12.
    public static func server(pkcs12: PKCS12) -> TLSSettings {
        TLSSettings(role: .server, pkcs12: pkcs12)
    }

    /// The verification in force: the explicit choice or the role's default.
    var effectiveVerification: PeerVerification {
        peerVerification ?? (role == .client ? .verify : .none)
    }

    /// Checks what can be checked without OpenSSL.
    func validate() throws(SocketError) {
        // An empty name would mean "no name": no SNI and no host-name check, which fails open.
        if peerName?.isEmpty == true {
            throw SocketError(.tlsSettings, "the peer name is empty (leave it unset to verify the host given to connect)")
        }
        for (text, what) in textsForC { try text.checkedForC(what, code: .tlsSettings) }
        if let maximumVersion, maximumVersion < minimumVersion {
            throw SocketError(.tlsSettings, "the maximum TLS version is below the minimum")
        }
        if handshakeTimeout.isNaN {
            throw SocketError(.badParam, "the handshake timeout is not a number")
        }
        for name in alpnProtocols where name.utf8.isEmpty || name.utf8.count > 255 {
            throw SocketError(.tlsSettings, "an ALPN protocol name must have 1 to 255 bytes")
        }
        if pkcs12 != nil && (certificateChain != nil || privateKey != nil) {
            throw SocketError(.tlsSettings, "give a PKCS#12 identity or a certificate chain and private key, not both")
        }
        if case .data(let bytes)? = pkcs12?.source, bytes.isEmpty {
            throw SocketError(.tlsSettings, "the PKCS#12 data is empty")
        }
        if role == .server && pkcs12 == nil && (certificateChain == nil || privateKey == nil) {
            throw SocketError(.tlsSettings, "a TLS server needs a certificate chain and a private key (or a PKCS#12 identity)")
        }
        if (certificateChain == nil) != (privateKey == nil) {
            throw SocketError(.tlsSettings, "a certificate chain needs its private key, and a key its chain")
        }
        if crlFiles.contains(where: \.isEmpty) {
            throw SocketError(.tlsSettings, "a CRL file path is empty")
        }
        if ocspResponseFile?.isEmpty == true {
            throw SocketError(.tlsSettings, "the OCSP response file path is empty")
        }
        if role == .client && ocspResponseFile != nil {
            throw SocketError(.tlsSettings, "an OCSP response file is a server setting (clients ask with requestOCSPStaple)")
        }
        if role == .server && (requestOCSPStaple || requireOCSPStaple) {
            throw SocketError(.tlsSettings, "requestOCSPStaple and requireOCSPStaple are client settings")
        }
        if role == .client && peerVerification == .requireCertificate {
            throw SocketError(.tlsSettings, "requireCertificate is a server setting")
        }
        if role == .client && !serverNames.isEmpty {
            throw SocketError(.tlsSettings, "server names (SNI) are a server setting")
        }
        for (name, settings) in serverNames {
            try name.checkedForC("a server name", code: .tlsSettings)
            guard TLSSettings.serverNameKey(name) != nil else {
                throw SocketError(.tlsSettings, "server name \"\(name)\" is not a host name or *. and a domain")
            }
            guard settings.role == .server, settings.serverNames.isEmpty else {
                throw SocketError(.tlsSettings, "the settings for server name \"\(name)\" must be a server's, "
                                  + "without server names of their own")
            }
            // Client certificates are verified with the default settings' store: CRLs here
            // would be ignored, a check the caller believes in that never runs.
            guard settings.crlFiles.isEmpty else {
                throw SocketError(.tlsSettings, "server name \"\(name)\": CRL files are used from the default "
                                  + "settings only (client certificates are verified there)")
            }
            do { try settings.validate() } catch {
                throw SocketError(.tlsSettings, osError: error.osError, "server name \"\(name)\": \(error.message)")
            }
        }
    }

    /// The form names are matched in (lower case, no final dot), or nil for a key that
    /// is no host name or wildcard.
    static func serverNameKey(_ name: String) -> String? {
        var key = name.lowercased()
        if key.hasSuffix(".") { key.removeLast() }
        let labels = key.split(separator: ".", omittingEmptySubsequences: false)
        guard !key.isEmpty, key.utf8.count <= 253 else { return nil }
        for (index, label) in labels.enumerated() {
            if label == "*" && index == 0 && labels.count > 2 { continue }
            guard !label.isEmpty, label.utf8.count <= 63,
                  label.utf8.allSatisfy({ $0 == 0x2D || $0 == 0x5F || (0x30...0x39).contains($0) || (0x61...0x7A).contains($0) })
            else { return nil }
        }
        return key
    }

    /// Every text of the settings that OpenSSL or the file system reads, with its name.
    private var textsForC: [(String, String)] {
        var texts: [(String, String)] = []
        func add(_ text: String?, _ what: String) {
            if let text { texts.append((text, what)) }
        }
        func add(_ source: Source?, _ what: String) {
            switch source {
            case .file(let path): add(path, "the \(what) path")
            case .pem(let text): add(text, "the \(what) PEM text")
            case nil: break
            }
        }
        add(peerName, "the peer name")
        switch trustRoots {
        case .system: break
        case .file(let path): add(path, "the trust file path")
        case .directory(let path): add(path, "the trust directory path")
        case .pem(let text): add(text, "the trust PEM text")
        }
        add(certificateChain, "certificate chain")
        add(privateKey, "private key")
        add(privateKeyPassword, "the private key password")
        if case .file(let path)? = pkcs12?.source { add(path, "the PKCS#12 file path") }
        add(pkcs12?.password, "the PKCS#12 password")
        for path in crlFiles { add(path, "a CRL file path") }
        add(ocspResponseFile, "the OCSP response file path")
        add(cipherList, "the cipher list")
        add(cipherSuites, "the cipher suites")
        for name in alpnProtocols { add(name, "an ALPN protocol name") }
        add(keyLogFile, "the key-log file path")
        return texts
    }
}
