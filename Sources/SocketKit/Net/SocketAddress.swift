// SPDX-License-Identifier: MIT
import Glibc
import SocketKitC

/// A socket address: IPv4 or IPv6 with a port, or a Unix-domain path. `bytes` is the raw
/// `sockaddr` (`sockaddr_in`, `sockaddr_in6` or `sockaddr_un`) as the kernel uses it.
///
/// IPv4 and IPv6 addresses are stored inline, so making one allocates nothing: the engine
/// makes one per datagram received and per connection accepted. Unix paths, which can be
/// long, live in an array.
public struct SocketAddress: Hashable, Sendable, CustomStringConvertible {
    public enum Family: Sendable, Hashable {
        case ipv4, ipv6, unix
    }

    /// Room for a `sockaddr_in6` (28 bytes), zero beyond `length` so that equal addresses
    /// compare and hash equal.
    private struct InlineStorage: Hashable, Sendable {
        var word0: UInt64 = 0
        var word1: UInt64 = 0
        var word2: UInt64 = 0
        var word3: UInt32 = 0
    }

    public let family: Family
    private let inline: InlineStorage
    private let inlineLength: UInt8
    /// The whole `sockaddr_un` of a Unix-domain address; nil for IP addresses.
    private let unixBytes: [UInt8]?

    /// The raw `sockaddr` bytes.
    public var bytes: [UInt8] {
        if let unixBytes { return unixBytes }
        return withSockAddr { address, length in
            Array(UnsafeRawBufferPointer(start: address, count: Int(length)))
        }
    }

    /// Wraps raw `sockaddr` bytes; nil unless they hold a complete IPv4 (`sockaddr_in`),
    /// IPv6 (`sockaddr_in6`) or Unix-domain address. An IP address may come with more bytes
    /// than its family's struct, up to `sockaddr_storage` (128 bytes), as `getnameinfo` and
    /// the kernel accept it: the address is its family's struct, the rest is ignored. A
    /// Unix-domain address has at most `sockaddr_un`'s 110 bytes, the kernel's own limit.
    public init?(bytes: [UInt8]) {
        guard let parsed = bytes.withUnsafeBytes({ SocketAddress(raw: $0) }) else { return nil }
        self = parsed
    }

    /// Parses raw `sockaddr` bytes without an intermediate array (see `init?(bytes:)`).
    init?(raw: UnsafeRawBufferPointer) {
        guard raw.count >= MemoryLayout<sa_family_t>.size,
              raw.count <= MemoryLayout<sockaddr_storage>.size else { return nil }
        let rawFamily = Int32(raw.loadUnaligned(as: sa_family_t.self))
        let length: Int
        switch rawFamily {
        case AF_INET where raw.count >= MemoryLayout<sockaddr_in>.size:
            family = .ipv4
            length = MemoryLayout<sockaddr_in>.size
        case AF_INET6 where raw.count >= MemoryLayout<sockaddr_in6>.size:
            family = .ipv6
            length = MemoryLayout<sockaddr_in6>.size
        case AF_UNIX where raw.count <= MemoryLayout<sockaddr_un>.size:
            family = .unix
            inline = InlineStorage()
            inlineLength = 0
            unixBytes = Array(raw)
            return
        default:
            return nil
        }
        var storage = InlineStorage()
        withUnsafeMutableBytes(of: &storage) { $0.copyMemory(from: UnsafeRawBufferPointer(start: raw.baseAddress, count: length)) }
        inline = storage
        inlineLength = UInt8(length)
        unixBytes = nil
    }

    /// An address from an IP literal (`"127.0.0.1"`, `"::1"`, `"fe80::1%eth0"`) and a port.
    /// Throws `.badParam` if `ipAddress` is not an IP literal.
    public init(ipAddress: String, port: UInt16) throws(SocketError) {
        guard let address = SocketAddress.parseIPLiteral(try ipAddress.checkedForC("the IP address"), port: port) else {
            throw SocketError(.badParam, "'\(ipAddress)' is not an IPv4 or IPv6 address")
        }
        self = address
    }

    /// A Unix-domain address. Throws `.badParam` for an empty path or one longer than the
    /// kernel's limit (108 bytes with the terminating NUL), instead of truncating it.
    public init(unixPath path: String) throws(SocketError) {
        let utf8 = Array(path.utf8)
        guard !utf8.isEmpty else { throw SocketError(.badParam, "empty Unix socket path") }
        try path.checkedForC("the Unix socket path")
        guard utf8.count < skc_unix_path_capacity() else {
            throw SocketError(.badParam, "Unix socket path longer than \(skc_unix_path_capacity() - 1) bytes")
        }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { path in
            path.copyBytes(from: utf8)
        }
        let length = MemoryLayout<sa_family_t>.size + utf8.count + 1
        unixBytes = withUnsafeBytes(of: &address) { Array($0.prefix(length)) }
        family = .unix
        inline = InlineStorage()
        inlineLength = 0
    }

    /// A Linux abstract Unix-domain address: a name in the kernel's own namespace, not a
    /// file (nothing to remove, nothing left behind; gone with the last socket bound to it).
    /// Any bytes (a NUL included), 1...107 of them; the address is `sun_path[0] == 0`
    /// followed by the name, its length the name's. Throws `.badParam` for an empty or
    /// longer name.
    public init(abstractUnixName name: [UInt8]) throws(SocketError) {
        guard !name.isEmpty, name.count < skc_unix_path_capacity() else {
            throw SocketError(.badParam, "an abstract Unix socket name takes 1...\(skc_unix_path_capacity() - 1) bytes")
        }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { path in
            path[0] = 0
            UnsafeMutableRawBufferPointer(rebasing: path[1...]).copyBytes(from: name)
        }
        let length = MemoryLayout<sa_family_t>.size + 1 + name.count
        unixBytes = withUnsafeBytes(of: &address) { Array($0.prefix(length)) }
        family = .unix
        inline = InlineStorage()
        inlineLength = 0
    }

    /// An abstract Unix-domain address named by the UTF-8 bytes of `name`.
    public init(abstractUnixName name: String) throws(SocketError) {
        try self.init(abstractUnixName: Array(name.utf8))
    }

    init(ipv4 address: sockaddr_in) {
        var copy = address
        self = withUnsafeBytes(of: &copy) { SocketAddress(raw: $0)! }
    }

    init(ipv6 address: sockaddr_in6) {
        var copy = address
        self = withUnsafeBytes(of: &copy) { SocketAddress(raw: $0)! }
    }

    /// From what the kernel filled in (`accept`, `getsockname`, `getpeername`, `recvmmsg`).
    init?(storage: UnsafeRawPointer, length: socklen_t) {
        self.init(raw: UnsafeRawBufferPointer(start: storage, count: Int(length)))
    }

    static func parseIPLiteral(_ literal: String, port: UInt16) -> SocketAddress? {
        // inet_pton and if_nametoindex would read only up to a NUL (public entries refuse
        // such text first; this keeps the parser itself from ever reading a truncation).
        guard literal.isCString else { return nil }
        var ipv4 = in_addr()
        if inet_pton(AF_INET, literal, &ipv4) == 1 {
            var address = sockaddr_in()
            address.sin_family = sa_family_t(AF_INET)
            address.sin_port = port.bigEndian
            address.sin_addr = ipv4
            return SocketAddress(ipv4: address)
        }
        var text = literal
        var scope: UInt32 = 0
        if let percent = literal.firstIndex(of: "%") {
            text = String(literal[..<percent])
            let scopeName = String(literal[literal.index(after: percent)...])
            if let numeric = UInt32(scopeName) {
                scope = numeric
            } else {
                scope = if_nametoindex(scopeName)
                if scope == 0 { return nil }
            }
        }
        var ipv6 = in6_addr()
        guard inet_pton(AF_INET6, text, &ipv6) == 1 else { return nil }
        var address = sockaddr_in6()
        address.sin6_family = sa_family_t(AF_INET6)
        address.sin6_port = port.bigEndian
        address.sin6_addr = ipv6
        address.sin6_scope_id = scope
        return SocketAddress(ipv6: address)
    }

    /// The numeric host (`"127.0.0.1"`, `"::1"`, `"fe80::1%eth0"`); nil for Unix addresses.
    public var host: String? {
        withRawBytes { raw -> String? in
            var text = [CChar](repeating: 0, count: Int(INET6_ADDRSTRLEN) + 1)
            switch family {
            case .ipv4:
                var address = raw.loadUnaligned(as: sockaddr_in.self)
                guard inet_ntop(AF_INET, &address.sin_addr, &text, socklen_t(text.count)) != nil else { return nil }
                return string(fromCString: text)
            case .ipv6:
                var address = raw.loadUnaligned(as: sockaddr_in6.self)
                guard inet_ntop(AF_INET6, &address.sin6_addr, &text, socklen_t(text.count)) != nil else { return nil }
                var host = string(fromCString: text)
                if address.sin6_scope_id != 0 {
                    var name = [CChar](repeating: 0, count: Int(IF_NAMESIZE) + 1)
                    if if_indextoname(address.sin6_scope_id, &name) != nil {
                        host += "%" + string(fromCString: name)
                    } else {
                        host += "%\(address.sin6_scope_id)"
                    }
                }
                return host
            case .unix:
                return nil
            }
        }
    }

    /// The port; 0 for Unix addresses.
    public var port: UInt16 {
        withRawBytes { raw -> UInt16 in
            switch family {
            case .ipv4: return UInt16(bigEndian: raw.loadUnaligned(as: sockaddr_in.self).sin_port)
            case .ipv6: return UInt16(bigEndian: raw.loadUnaligned(as: sockaddr_in6.self).sin6_port)
            case .unix: return 0
            }
        }
    }

    /// The path of a Unix-domain address (nil for IP addresses and unnamed Unix sockets).
    public var unixPath: String? {
        guard family == .unix, let unixBytes else { return nil }
        let offset = MemoryLayout<sa_family_t>.size
        guard unixBytes.count > offset else { return nil }
        var path = Array(unixBytes[offset...])
        if let nul = path.firstIndex(of: 0) { path.removeSubrange(nul...) }
        guard !path.isEmpty else { return nil }
        return String(decoding: path, as: UTF8.self)
    }

    /// The name of an abstract Unix-domain address (see `init(abstractUnixName:)`), nil for
    /// any other.
    public var abstractUnixName: [UInt8]? {
        guard family == .unix, let unixBytes else { return nil }
        let offset = MemoryLayout<sa_family_t>.size
        guard unixBytes.count > offset + 1, unixBytes[offset] == 0 else { return nil }
        return Array(unixBytes[(offset + 1)...])
    }

    /// Whether a socket with this local address is bound: to a port (IP), or to a path or
    /// an abstract name (Unix domain).
    var isBound: Bool {
        switch family {
        case .ipv4, .ipv6: return port != 0
        case .unix: return unixPath != nil || abstractUnixName != nil
        }
    }

    /// How a Unix-domain address is shown: its path, or an abstract name after an `@` (as
    /// ss(8) and systemd show them; bytes that are not UTF-8 appear as U+FFFD). Nil for IP
    /// addresses and unnamed sockets.
    var unixDisplayName: String? {
        if let name = abstractUnixName { return "@" + String(decoding: name, as: UTF8.self) }
        return unixPath
    }

    /// A Unix address made from raw bytes, checked as `init(unixPath:)` checks a path: the
    /// kernel ends a pathname at its first NUL, so one with more bytes after a NUL is
    /// refused (`.badParam`) rather than connected somewhere else. Abstract addresses
    /// (first byte NUL) are names of the given length and pass, as do IP addresses.
    func checkedPathname() throws(SocketError) -> SocketAddress {
        guard family == .unix, let unixBytes else { return self }
        let path = unixBytes.dropFirst(MemoryLayout<sa_family_t>.size)
        guard path.first != 0, let nul = path.firstIndex(of: 0) else { return self }
        guard path[nul...].allSatisfy({ $0 == 0 }) else {
            throw SocketError(.badParam, "the Unix socket path contains an embedded NUL character (the kernel would see only the text before it)")
        }
        return self
    }

    /// The same address with another port (IP families only).
    func withPort(_ port: UInt16) -> SocketAddress {
        var raw = bytes
        raw.withUnsafeMutableBytes { buffer in
            switch family {
            case .ipv4:
                var address = buffer.loadUnaligned(as: sockaddr_in.self)
                address.sin_port = port.bigEndian
                buffer.storeBytes(of: address, as: sockaddr_in.self)
            case .ipv6:
                var address = buffer.loadUnaligned(as: sockaddr_in6.self)
                address.sin6_port = port.bigEndian
                buffer.storeBytes(of: address, as: sockaddr_in6.self)
            case .unix:
                break
            }
        }
        return SocketAddress(bytes: raw) ?? self
    }

    /// True for 0.0.0.0 and :: (any port): a listener's wildcard address.
    var isUnspecifiedIP: Bool {
        withRawBytes { raw -> Bool in
            switch family {
            case .ipv4: return raw.loadUnaligned(as: sockaddr_in.self).sin_addr.s_addr == 0
            case .ipv6:
                let address = raw.loadUnaligned(as: sockaddr_in6.self).sin6_addr
                return withUnsafeBytes(of: address) { $0.allSatisfy { $0 == 0 } }
            case .unix: return false
            }
        }
    }

    var posixFamily: Int32 {
        switch family {
        case .ipv4: return AF_INET
        case .ipv6: return AF_INET6
        case .unix: return AF_UNIX
        }
    }

    /// Calls `body` with the address as a `sockaddr` pointer and its length.
    func withSockAddr<Result>(_ body: (UnsafePointer<sockaddr>, socklen_t) throws -> Result) rethrows -> Result {
        try withRawBytes { raw in
            try body(raw.baseAddress!.assumingMemoryBound(to: sockaddr.self), socklen_t(raw.count))
        }
    }

    /// Calls `body` with the raw `sockaddr` bytes (no copy to the heap).
    func withRawBytes<Result>(_ body: (UnsafeRawBufferPointer) throws -> Result) rethrows -> Result {
        if let unixBytes { return try unixBytes.withUnsafeBytes(body) }
        var copy = inline
        // Not `$0.prefix(_:)`: that generic slice is not inlined, and every datagram sent
        // or received passes through here.
        return try withUnsafeBytes(of: &copy) { try body(UnsafeRawBufferPointer(start: $0.baseAddress, count: Int(inlineLength))) }
    }

    static func ipv4Any(port: UInt16) -> SocketAddress {
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = port.bigEndian
        return SocketAddress(ipv4: address)
    }

    static func ipv6Any(port: UInt16) -> SocketAddress {
        var address = sockaddr_in6()
        address.sin6_family = sa_family_t(AF_INET6)
        address.sin6_port = port.bigEndian
        return SocketAddress(ipv6: address)
    }

    static func ipv4Loopback(port: UInt16) -> SocketAddress {
        SocketAddress.parseIPLiteral("127.0.0.1", port: port)!
    }

    static func ipv6Loopback(port: UInt16) -> SocketAddress {
        SocketAddress.parseIPLiteral("::1", port: port)!
    }

    public var description: String {
        switch family {
        case .ipv4: return "\(host ?? "?"):\(port)"
        case .ipv6: return "[\(host ?? "?")]:\(port)"
        case .unix: return "unix:\(unixDisplayName ?? "(unnamed)")"
        }
    }
}

/// The text of a NUL-terminated C string held in an array.
func string(fromCString characters: [CChar]) -> String {
    let bytes = characters.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }
    return String(decoding: bytes, as: UTF8.self)
}
