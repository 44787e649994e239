// SPDX-License-Identifier: MIT
import Glibc

/// A proxy a socket connects through (`Socket.setProxy`): SOCKS5 (RFC 1928, with RFC 1929
/// username and password) or HTTP CONNECT (RFC 9110 §9.3.6, with Basic
/// `Proxy-Authorization`). `connect(toHost:port:)` then connects to the proxy (resolver,
/// Happy Eyeballs and connect timeout as for any host), asks it for the target, and reports
/// `didConnect` only once the proxy has answered yes. The target's name goes to the proxy
/// unresolved (the proxy resolves it); IP literals go as addresses.
public struct ProxySettings: Hashable, Sendable, CustomStringConvertible {
    public enum Kind: Int32, Hashable, Sendable {
        case socks5 = 1
        case httpConnect = 2
    }

    public var kind: Kind
    public var host: String
    public var port: UInt16
    public var username: String?
    public var password: String?

    /// Throws `.badParam` for an empty host, port 0, text with a NUL character, a username
    /// without a password (or the other way round), SOCKS5 credentials longer than 255
    /// bytes or empty (RFC 1929), an HTTP username with a colon or either with a line break.
    public init(kind: Kind, host: String, port: UInt16, username: String? = nil,
                password: String? = nil) throws(SocketError) {
        try AddressResolver.checkHost(host)
        guard port != 0 else { throw SocketError(.badParam, "the proxy's port is 0") }
        guard (username == nil) == (password == nil) else {
            throw SocketError(.badParam, "a proxy username needs a password, and a password a username")
        }
        if let username, let password {
            try username.checkedForC("the proxy username")
            try password.checkedForC("the proxy password")
            switch kind {
            case .socks5:
                guard (1...255).contains(username.utf8.count), (1...255).contains(password.utf8.count) else {
                    throw SocketError(.badParam, "a SOCKS5 username and password take 1...255 bytes each (RFC 1929)")
                }
            case .httpConnect:
                guard !username.contains(":") else {
                    throw SocketError(.badParam, "an HTTP proxy username cannot contain ':' (RFC 7617)")
                }
                guard !(username + password).contains(where: { $0 == "\r" || $0 == "\n" || $0 == "\r\n" }) else {
                    throw SocketError(.badParam, "an HTTP proxy username or password cannot contain a line break")
                }
            }
        }
        self.kind = kind
        self.host = host
        self.port = port
        self.username = username
        self.password = password
    }

    /// The proxy as text, without its credentials.
    public var description: String {
        let name = kind == .socks5 ? "SOCKS5 proxy" : "HTTP proxy"
        let shown = host.contains(":") ? "[\(host)]" : host
        return "the \(name) \(shown):\(port)"
    }
}

/// What `didConnect` reports of a connection made through a proxy: the target as it was
/// given to `connect` (a name stays a name: the proxy resolved it). A class: one word in
/// the published state and in `SocketEvent` (memory per connection,
/// `ConnectionFootprintTests`), where a String and a port would take three.
final class ProxiedTarget: Sendable {
    let host: String
    let port: UInt16

    init(host: String, port: UInt16) {
        self.host = host
        self.port = port
    }
}

/// One proxy handshake, as a pure protocol machine: it says what to send and reads what the
/// proxy answers; the core (`TCPSocketCore+Proxy.swift`) owns the descriptor, the phase and
/// the connect timer, and does the I/O. Made per session, dropped when the session ends.
final class ProxyHandshake {
    enum Step {
        /// Send these bytes (possibly none) and wait for more of the answer.
        case send([UInt8])
        /// The proxy connected us: `leftover` arrived after its answer and is the target's.
        case done(leftover: [UInt8])
        case failed(SocketError)
    }

    private enum Stage {
        case socksMethod, socksAuthentication, socksReply, httpReply
    }

    let settings: ProxySettings
    let target: ProxiedTarget
    private var stage: Stage
    private var received: [UInt8] = []
    /// An HTTP answer's head larger than this is not a proxy's answer.
    static let maximumHTTPHeadLength = 16 * 1024

    /// Throws `.badParam` when the target cannot be named to this proxy (a SOCKS5 domain
    /// name longer than 255 bytes, a line break in an HTTP target).
    init(settings: ProxySettings, target: ProxiedTarget) throws(SocketError) {
        self.settings = settings
        self.target = target
        switch settings.kind {
        case .socks5:
            stage = .socksMethod
            if ProxyHandshake.literalBytes(target.host) == nil && target.host.utf8.count > 255 {
                throw SocketError(.badParam, "a SOCKS5 proxy takes host names of at most 255 bytes")
            }
        case .httpConnect:
            stage = .httpReply
            if target.host.contains(where: { $0 == "\r" || $0 == "\n" || $0 == " " || $0 == "\r\n" }) {
                throw SocketError(.badParam, "the host name cannot be sent to an HTTP proxy")
            }
        }
    }

    /// The first bytes to send, once connected to the proxy.
    func greeting() -> [UInt8] {
        switch settings.kind {
        case .socks5:
            // No authentication, and username/password when we have them (RFC 1928 §3).
            return settings.username == nil ? [5, 1, 0x00] : [5, 2, 0x00, 0x02]
        case .httpConnect:
            let authority = target.host.contains(":") ? "[\(target.host)]:\(target.port)" : "\(target.host):\(target.port)"
            var request = "CONNECT \(authority) HTTP/1.1\r\nHost: \(authority)\r\n"
            if let username = settings.username, let password = settings.password {
                request += "Proxy-Authorization: Basic \(ProxyHandshake.base64(Array("\(username):\(password)".utf8)))\r\n"
            }
            request += "\r\n"
            return Array(request.utf8)
        }
    }

    /// Takes what the proxy sent; the proxy closing its end mid-answer is `receivedEnd()`.
    func receive(_ bytes: UnsafeRawBufferPointer) -> Step {
        received.append(contentsOf: bytes)
        var output: [UInt8] = []
        while true {
            let step: Step?
            switch stage {
            case .socksMethod: step = socksMethod(&output)
            case .socksAuthentication: step = socksAuthentication(&output)
            case .socksReply: step = socksReply()
            case .httpReply: step = httpReply()
            }
            if let step {
                if case .send(let more) = step {
                    output += more
                    continue
                }
                return step
            }
            return .send(output)
        }
    }

    func receivedEnd() -> SocketError {
        SocketError(.proxy, "\(settings) closed the connection during its handshake")
    }

    private func fail(_ message: String) -> Step {
        .failed(SocketError(.proxy, "\(settings): \(message)"))
    }

    // Each stage returns nil while its answer is incomplete, `.send` when it moved on.

    private func socksMethod(_ output: inout [UInt8]) -> Step? {
        guard received.count >= 2 else { return nil }
        let (version, method) = (received[0], received[1])
        received.removeFirst(2)
        guard version == 5 else { return fail("not a SOCKS5 answer (version \(version))") }
        switch method {
        case 0x00:
            stage = .socksReply
            return .send(socksRequest())
        case 0x02 where settings.username != nil:
            stage = .socksAuthentication
            let username = Array(settings.username!.utf8), password = Array(settings.password!.utf8)
            return .send([1, UInt8(username.count)] + username + [UInt8(password.count)] + password)
        case 0xFF:
            return .failed(SocketError(.proxyAuthentication, settings.username == nil
                ? "\(settings) requires authentication (it accepts no method we offered)"
                : "\(settings) accepts none of the authentication methods we offered"))
        default:
            return fail("chose authentication method \(method), which we did not offer")
        }
    }

    private func socksAuthentication(_ output: inout [UInt8]) -> Step? {
        guard received.count >= 2 else { return nil }
        let status = received[1]
        received.removeFirst(2)
        guard status == 0 else {
            return .failed(SocketError(.proxyAuthentication, "\(settings) rejected the username and password (RFC 1929 status \(status))"))
        }
        stage = .socksReply
        return .send(socksRequest())
    }

    /// CONNECT to the target: an IPv4 or IPv6 literal as an address, a name as a name.
    private func socksRequest() -> [UInt8] {
        var request: [UInt8] = [5, 1, 0]
        if let literal = ProxyHandshake.literalBytes(target.host) {
            request.append(literal.count == 4 ? 1 : 4)
            request += literal
        } else {
            let name = Array(target.host.utf8)
            request.append(3)
            request.append(UInt8(name.count))
            request += name
        }
        request += [UInt8(target.port >> 8), UInt8(target.port & 0xFF)]
        return request
    }

    private func socksReply() -> Step? {
        guard received.count >= 5 else { return nil }
        guard received[0] == 5 else { return fail("not a SOCKS5 reply (version \(received[0]))") }
        let reply = received[1]
        if reply != 0 {
            // Some servers send a short failure reply and close: the code is all that counts.
            return .failed(SocketError(.proxy, osError: Int32(reply),
                                       "\(settings) could not connect to \(target.host):\(target.port): \(ProxyHandshake.socksReplyText(reply))"))
        }
        let length: Int
        switch received[3] {
        case 1: length = 4 + 4 + 2
        case 4: length = 4 + 16 + 2
        case 3: length = 4 + 1 + Int(received[4]) + 2
        default: return fail("a reply with the unknown address type \(received[3])")
        }
        guard received.count >= length else { return nil }
        return .done(leftover: Array(received[length...]))
    }

    /// RFC 1928 §6's reply codes.
    static func socksReplyText(_ reply: UInt8) -> String {
        switch reply {
        case 1: return "general SOCKS server failure (reply 1)"
        case 2: return "connection not allowed by ruleset (reply 2)"
        case 3: return "network unreachable (reply 3)"
        case 4: return "host unreachable (reply 4)"
        case 5: return "connection refused (reply 5)"
        case 6: return "TTL expired (reply 6)"
        case 7: return "command not supported (reply 7)"
        case 8: return "address type not supported (reply 8)"
        default: return "unassigned reply \(reply)"
        }
    }

    private func httpReply() -> Step? {
        guard let end = ProxyHandshake.endOfHead(received) else {
            if received.count > ProxyHandshake.maximumHTTPHeadLength { return fail("an answer head over 16 KiB") }
            return nil
        }
        let statusLine = received.prefix { $0 != 13 && $0 != 10 }
        let text = String(decoding: statusLine, as: UTF8.self)
        let fields = text.split(separator: " ", maxSplits: 2, omittingEmptySubsequences: true)
        guard fields.count >= 2, fields[0].hasPrefix("HTTP/1."), fields[1].count == 3,
              let status = Int32(fields[1]) else {
            return fail("not an HTTP answer: \"\(text.prefix(80))\"")
        }
        let shown = fields.count > 2 ? "\(status) \(fields[2].prefix(80))" : "\(status)"
        switch status {
        case 200...299:
            return .done(leftover: Array(received[end...]))
        case 407, 401:
            // 407 is RFC 9110's answer; some proxies (tinyproxy) answer CONNECT with 401.
            return .failed(SocketError(.proxyAuthentication, osError: status, settings.username == nil
                ? "\(settings) requires authentication (\(shown))"
                : "\(settings) rejected the username and password (\(shown))"))
        default:
            return .failed(SocketError(.proxy, osError: status,
                                       "\(settings) refused to connect to \(target.host):\(target.port): \(shown)"))
        }
    }

    /// The offset after the blank line that ends an HTTP head (CRLF CRLF, or bare LF LF).
    static func endOfHead(_ bytes: [UInt8]) -> Int? {
        var index = 0
        while index < bytes.count {
            if bytes[index] == 10 {
                if index + 1 < bytes.count && bytes[index + 1] == 10 { return index + 2 }
                if index + 2 < bytes.count && bytes[index + 1] == 13 && bytes[index + 2] == 10 { return index + 3 }
            }
            index += 1
        }
        return nil
    }

    /// The 4 or 16 bytes of an IPv4 or IPv6 literal, or nil for a name.
    static func literalBytes(_ host: String) -> [UInt8]? {
        guard host.isCString else { return nil }
        var ipv4 = in_addr()
        if inet_pton(AF_INET, host, &ipv4) == 1 { return withUnsafeBytes(of: &ipv4) { Array($0) } }
        var ipv6 = in6_addr()
        if inet_pton(AF_INET6, host, &ipv6) == 1 { return withUnsafeBytes(of: &ipv6) { Array($0) } }
        return nil
    }

    static func base64(_ bytes: [UInt8]) -> String {
        let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/".utf8)
        var output: [UInt8] = []
        var index = 0
        while index < bytes.count {
            let chunk = Array(bytes[index..<min(index + 3, bytes.count)])
            let value = (UInt32(chunk[0]) << 16) | (UInt32(chunk.count > 1 ? chunk[1] : 0) << 8) | UInt32(chunk.count > 2 ? chunk[2] : 0)
            for position in 0..<4 {
                if position <= chunk.count {
                    output.append(alphabet[Int((value >> UInt32(18 - 6 * position)) & 0x3F)])
                } else {
                    output.append(UInt8(ascii: "="))
                }
            }
            index += 3
        }
        return String(decoding: output, as: UTF8.self)
    }
}
