// SPDX-License-Identifier: MIT
import Glibc

/// Resolution of the interface descriptions GCDAsyncSocket accepts for listening and for the
/// local end of a connection: `nil` (any), `"localhost"`/`"loopback"`, an interface name
/// (`"eth0"`), an IP literal, each optionally with a port (`"eth0:8082"`, `"[::1]:8082"`,
/// `":8082"`: port only). Unlike upstream, entries with no address (tunnels) are skipped and
/// IPv6 literals are not split at their colons.
enum Interfaces {
    struct Endpoints {
        var ipv4: SocketAddress?
        var ipv6: SocketAddress?
    }

    /// Splits `"name:port"`, `"[v6]:port"`, `":port"` into a name (nil when only a port was
    /// given) and a port (nil when none was given).
    static func split(_ description: String) throws(SocketError) -> (name: String?, port: UInt16?) {
        try description.checkedForC("the interface")
        if description.hasPrefix("[") {
            guard let close = description.firstIndex(of: "]") else {
                throw SocketError(.badParam, "interface '\(description)': missing ']'")
            }
            let name = String(description[description.index(after: description.startIndex)..<close])
            let rest = description[description.index(after: close)...]
            if rest.isEmpty { return (name, nil) }
            guard rest.hasPrefix(":"), let port = UInt16(rest.dropFirst()) else {
                throw SocketError(.badParam, "interface '\(description)': bad port")
            }
            return (name, port)
        }
        if SocketAddress.parseIPLiteral(description, port: 0) != nil {
            return (description, nil)
        }
        guard let colon = description.lastIndex(of: ":") else {
            return (description, nil)
        }
        let name = String(description[..<colon])
        guard let port = UInt16(description[description.index(after: colon)...]) else {
            throw SocketError(.badParam, "interface '\(description)': bad port")
        }
        return (name.isEmpty ? nil : name, port)
    }

    /// The addresses to bind for `name` (nil = any address) with `port`.
    /// Throws `.badParam` for an interface that does not exist or has no IP address.
    static func endpoints(for name: String?, port: UInt16) throws(SocketError) -> Endpoints {
        try name?.checkedForC("the interface")
        guard let name, !name.isEmpty else {
            return Endpoints(ipv4: .ipv4Any(port: port), ipv6: .ipv6Any(port: port))
        }
        if name == "localhost" || name == "loopback" {
            return Endpoints(ipv4: .ipv4Loopback(port: port), ipv6: .ipv6Loopback(port: port))
        }
        if let literal = SocketAddress.parseIPLiteral(name, port: port) {
            return literal.family == .ipv4 ? Endpoints(ipv4: literal, ipv6: nil) : Endpoints(ipv4: nil, ipv6: literal)
        }
        var found = Endpoints()
        var list: UnsafeMutablePointer<ifaddrs>? = nil
        guard getifaddrs(&list) == 0 else { throw SocketError.lastSystemError("getifaddrs") }
        defer { freeifaddrs(list) }
        var known = false
        var cursor = list
        while let entry = cursor {
            defer { cursor = entry.pointee.ifa_next }
            guard String(cString: entry.pointee.ifa_name) == name else { continue }
            known = true
            guard let address = entry.pointee.ifa_addr else { continue }
            switch Int32(address.pointee.sa_family) {
            case AF_INET where found.ipv4 == nil:
                var ipv4 = UnsafeRawPointer(address).loadUnaligned(as: sockaddr_in.self)
                ipv4.sin_port = port.bigEndian
                found.ipv4 = SocketAddress(ipv4: ipv4)
            case AF_INET6 where found.ipv6 == nil:
                var ipv6 = UnsafeRawPointer(address).loadUnaligned(as: sockaddr_in6.self)
                ipv6.sin6_port = port.bigEndian
                found.ipv6 = SocketAddress(ipv6: ipv6)
            default:
                break
            }
        }
        guard known else { throw SocketError(.badParam, "unknown interface '\(name)'") }
        guard found.ipv4 != nil || found.ipv6 != nil else {
            throw SocketError(.badParam, "interface '\(name)' has no IP address")
        }
        return found
    }
}
