// SPDX-License-Identifier: MIT
import Glibc

/// Which PROXY protocol header (HAProxy's, versions 1 and 2) a listener expects at the start
/// of every connection it accepts (`Socket.proxyProtocol`). A load balancer in front of the
/// listener (HAProxy `send-proxy` / `send-proxy-v2`, AWS NLB, nginx `proxy_protocol on`)
/// sends it first, naming the client it accepted from and the address the client connected to.
public enum ProxyProtocolMode: Int32, Sendable, Hashable, CaseIterable {
    /// No header is read: the first bytes are the client's (the default).
    case none = 0
    /// Only the text header of version 1 (`PROXY TCP4 ...\r\n`, at most 107 bytes).
    case v1 = 1
    /// Only the binary header of version 2 (a 12-byte signature, 16 bytes and the addresses).
    case v2 = 2
    /// Either version, told apart by the first byte (as HAProxy's `accept-proxy`).
    case either = 3
}

/// What a PROXY protocol header said, once parsed (`ProxyHeader.parse`).
struct ProxyHeader: Equatable, Sendable {
    /// 1 or 2.
    var version: UInt8
    /// The header's bytes: the connection's own data starts after them.
    var length: Int
    /// True for a v2 LOCAL command (a health check of the proxy itself), and for a v1
    /// `UNKNOWN` or a v2 header of an unspecified family or transport: the connection keeps
    /// its real addresses.
    var keepsRealAddresses: Bool
    /// The client the proxy accepted from (nil when `keepsRealAddresses`).
    var source: SocketAddress?
    /// The address the client connected to on the proxy.
    var destination: SocketAddress?

    /// The longest v1 header, `\r\n` included (the specification's bound).
    static let maximumV1Length = 107
    /// The longest v2 header taken: 16 bytes and 2,048 of addresses and TLVs (HAProxy's own
    /// TLVs take a few hundred at most). A longer announced length is refused as oversized
    /// rather than buffered, so a pending connection holds a bounded amount of memory.
    static let maximumV2Length = 16 + 2048
    /// What a header may take at most, whatever the mode: how much to look at.
    static let maximumLength = maximumV2Length

    static let v2Signature: [UInt8] = [0x0D, 0x0A, 0x0D, 0x0A, 0x00, 0x0D, 0x0A, 0x51, 0x55, 0x49, 0x54, 0x0A]
    static let v1Prefix: [UInt8] = Array("PROXY ".utf8)

    enum Outcome: Equatable {
        /// What arrived so far is a correct beginning: wait for more bytes.
        case needMore
        case complete(ProxyHeader)
        /// Not a header of an accepted version, or a wrong one: the reason, for the log.
        case invalid(String)
    }

    /// Parses the start of a connection's bytes. Never reads past `bytes`; a prefix of a
    /// correct header is `.needMore` (so a header split across segments waits), anything that
    /// can no longer become one is `.invalid` at once.
    static func parse(_ bytes: UnsafeRawBufferPointer, mode: ProxyProtocolMode) -> Outcome {
        guard let first = bytes.first else { return .needMore }
        switch mode {
        case .none:
            return .invalid("no PROXY protocol header is expected")
        case .v1:
            return parseV1(bytes)
        case .v2:
            return parseV2(bytes)
        case .either:
            if first == v1Prefix[0] { return parseV1(bytes) }
            if first == v2Signature[0] { return parseV2(bytes) }
            return .invalid("not a PROXY protocol header (neither v1 nor v2)")
        }
    }

    // MARK: Version 1

    private static func parseV1(_ bytes: UnsafeRawBufferPointer) -> Outcome {
        let prefixCount = min(bytes.count, v1Prefix.count)
        guard bytes.prefix(prefixCount).elementsEqual(v1Prefix.prefix(prefixCount)) else {
            return .invalid("not a PROXY protocol v1 header (it must begin with \"PROXY \")")
        }
        let window = bytes.prefix(maximumV1Length)
        guard let cr = window.firstIndex(of: 0x0D) else {
            return bytes.count >= maximumV1Length
                ? .invalid("a PROXY protocol v1 header longer than \(maximumV1Length) bytes") : .needMore
        }
        guard cr + 1 < bytes.count else {
            return cr + 1 >= maximumV1Length
                ? .invalid("a PROXY protocol v1 header longer than \(maximumV1Length) bytes") : .needMore
        }
        guard cr + 2 <= maximumV1Length else {
            return .invalid("a PROXY protocol v1 header longer than \(maximumV1Length) bytes")
        }
        guard bytes[cr + 1] == 0x0A else { return .invalid("a PROXY protocol v1 header whose CR is not followed by LF") }
        if let nul = window[..<cr].firstIndex(of: 0), nul < cr {
            return .invalid("a PROXY protocol v1 header with a NUL byte")
        }
        let length = cr + 2
        // Split as bytes, not as Swift text: a space followed by a combining mark is one
        // Character, and would not separate fields.
        let fields = UnsafeRawBufferPointer(rebasing: bytes[v1Prefix.count..<cr])
            .split(separator: 0x20, omittingEmptySubsequences: false)
            .map { String(decoding: $0, as: UTF8.self) }
        guard let protocolName = fields.first else { return .invalid("an empty PROXY protocol v1 header") }
        if protocolName == "UNKNOWN" {
            // The proxy could not tell (or the connection is its own): whatever follows is ignored.
            return .complete(ProxyHeader(version: 1, length: length, keepsRealAddresses: true))
        }
        let family: Int32
        switch protocolName {
        case "TCP4": family = AF_INET
        case "TCP6": family = AF_INET6
        default: return .invalid("a PROXY protocol v1 header with an unknown protocol \"\(protocolName.prefix(16))\"")
        }
        guard fields.count == 5 else {
            return .invalid("a PROXY protocol v1 header needs protocol, two addresses and two ports, single spaces apart")
        }
        guard let sourcePort = port(fields[3]), let destinationPort = port(fields[4]) else {
            return .invalid("a PROXY protocol v1 header with a port that is not a decimal number in 0...65535")
        }
        guard let source = address(fields[1], family: family, port: sourcePort),
              let destination = address(fields[2], family: family, port: destinationPort) else {
            return .invalid("a PROXY protocol v1 header with an address that is not a \(protocolName == "TCP4" ? "IPv4" : "IPv6") literal")
        }
        return .complete(ProxyHeader(version: 1, length: length, keepsRealAddresses: false,
                                     source: source, destination: destination))
    }

    /// A decimal port without sign or leading zeros, as the specification writes it.
    private static func port(_ text: String) -> UInt16? {
        let digits = Array(text.utf8)
        guard (1...5).contains(digits.count), digits.allSatisfy({ (0x30...0x39).contains($0) }),
              digits.count == 1 || digits[0] != 0x30, let value = Int(text), value <= 65535 else { return nil }
        return UInt16(value)
    }

    /// A numeric address of exactly `family` (inet_pton: no scope, no names).
    private static func address(_ text: String, family: Int32, port: UInt16) -> SocketAddress? {
        if family == AF_INET {
            var address = sockaddr_in()
            address.sin_family = sa_family_t(AF_INET)
            address.sin_port = port.bigEndian
            guard inet_pton(AF_INET, text, &address.sin_addr) == 1 else { return nil }
            return SocketAddress(ipv4: address)
        }
        var address = sockaddr_in6()
        address.sin6_family = sa_family_t(AF_INET6)
        address.sin6_port = port.bigEndian
        guard inet_pton(AF_INET6, text, &address.sin6_addr) == 1 else { return nil }
        return SocketAddress(ipv6: address)
    }

    // MARK: Version 2

    private static func parseV2(_ bytes: UnsafeRawBufferPointer) -> Outcome {
        let prefixCount = min(bytes.count, v2Signature.count)
        guard bytes.prefix(prefixCount).elementsEqual(v2Signature.prefix(prefixCount)) else {
            return .invalid("not a PROXY protocol v2 header (the 12-byte signature does not match)")
        }
        guard bytes.count >= 16 else { return .needMore }
        let versionAndCommand = bytes[12]
        guard versionAndCommand >> 4 == 2 else {
            return .invalid("a PROXY protocol v2 signature with version \(versionAndCommand >> 4)")
        }
        let command = versionAndCommand & 0x0F
        guard command <= 1 else { return .invalid("a PROXY protocol v2 header with an unknown command \(command)") }
        let addressLength = Int(bytes[14]) << 8 | Int(bytes[15])
        let length = 16 + addressLength
        guard length <= maximumV2Length else {
            return .invalid("a PROXY protocol v2 header of \(length) bytes, more than the \(maximumV2Length) taken")
        }
        let familyAndTransport = bytes[13]
        let family = familyAndTransport >> 4
        let transport = familyAndTransport & 0x0F
        guard family <= 3, transport <= 2 else {
            return .invalid("a PROXY protocol v2 header with an unknown family or transport (0x\(String(familyAndTransport, radix: 16)))")
        }
        guard bytes.count >= length else { return .needMore }
        let header = UnsafeRawBufferPointer(rebasing: bytes[0..<length])
        let needed = family == 0 ? 0 : family == 1 ? 12 : family == 2 ? 36 : 216
        // The TLVs follow the family's addresses (a LOCAL header's short block has none).
        if 16 + needed <= length, let problem = checkTLVs(header, from: 16 + needed) {
            return .invalid(problem)
        }
        // LOCAL: the proxy's own connection (a health check); the block, if any, is skipped.
        if command == 0 || family == 0 || transport == 0 {
            return .complete(ProxyHeader(version: 2, length: length, keepsRealAddresses: true))
        }
        guard transport == 1 else {
            return .invalid("a PROXY protocol v2 header for a datagram connection on a stream listener")
        }
        let block = UnsafeRawBufferPointer(rebasing: bytes[16..<length])
        guard block.count >= needed else {
            return .invalid("a PROXY protocol v2 address block of \(block.count) bytes, shorter than its family's \(needed)")
        }
        // The TLVs (ALPN, authority, SSL details, unique id) are not exposed; only a CRC32C
        // is acted on (checkTLVs).
        let source: SocketAddress?
        let destination: SocketAddress?
        switch family {
        case 1:
            source = ipv4(block, addressAt: 0, portAt: 8)
            destination = ipv4(block, addressAt: 4, portAt: 10)
        case 2:
            source = ipv6(block, addressAt: 0, portAt: 32)
            destination = ipv6(block, addressAt: 16, portAt: 34)
        default:
            source = unix(UnsafeRawBufferPointer(rebasing: block[0..<108]))
            destination = unix(UnsafeRawBufferPointer(rebasing: block[108..<216]))
        }
        guard let source, let destination else {
            return .invalid("a PROXY protocol v2 header with an unusable Unix-domain address")
        }
        return .complete(ProxyHeader(version: 2, length: length, keepsRealAddresses: false,
                                     source: source, destination: destination))
    }

    /// PP2_TYPE_CRC32C: the CRC32C of the whole header, taken with this value as zeros.
    static let crc32cType: UInt8 = 0x03

    /// Walks the TLVs of a complete v2 header from `start`: nil when they are well formed
    /// and a CRC32C among them (if any) matches, else why not. The specification says a
    /// receiver MUST verify a CRC32C that is present (2.2.5): a header damaged on the way,
    /// or forged without knowing it is checked, is refused instead of trusted. A TLV that
    /// runs past the header's announced end is refused as HAProxy refuses it.
    static func checkTLVs(_ header: UnsafeRawBufferPointer, from start: Int) -> String? {
        var offset = start
        while offset < header.count {
            guard offset + 3 <= header.count else {
                return "a PROXY protocol v2 header whose TLVs end in \(header.count - offset) stray bytes"
            }
            let type = header[offset]
            let length = Int(header[offset + 1]) << 8 | Int(header[offset + 2])
            let value = offset + 3
            guard value + length <= header.count else {
                return "a PROXY protocol v2 TLV (type 0x\(String(type, radix: 16))) that runs past the header's end"
            }
            if type == crc32cType {
                guard length == 4 else { return "a PROXY protocol v2 CRC32C TLV of \(length) bytes, not 4" }
                let sent = header[value..<value + 4].reduce(UInt32(0)) { $0 << 8 | UInt32($1) }
                let computed = crc32c(header, zeroing: value..<value + 4)
                guard sent == computed else {
                    return "a PROXY protocol v2 header whose CRC32C does not match (sent 0x\(String(sent, radix: 16)), computed 0x\(String(computed, radix: 16)))"
                }
            }
            offset = value + length
        }
        return nil
    }

    /// CRC32C (Castagnoli, as iSCSI and the PROXY protocol use it) of `bytes`, with the bytes
    /// in `zeroing` taken as zeros.
    static func crc32c(_ bytes: UnsafeRawBufferPointer, zeroing: Range<Int> = 0..<0) -> UInt32 {
        var crc: UInt32 = 0xFFFF_FFFF
        for index in bytes.indices {
            let byte = zeroing.contains(index) ? 0 : bytes[index]
            crc = crc32cTable[Int((crc ^ UInt32(byte)) & 0xFF)] ^ (crc >> 8)
        }
        return crc ^ 0xFFFF_FFFF
    }

    /// The reflected table of the Castagnoli polynomial (0x1EDC6F41, reversed 0x82F63B78).
    private static let crc32cTable: [UInt32] = (0..<256).map { index in
        var value = UInt32(index)
        for _ in 0..<8 { value = value & 1 == 1 ? (value >> 1) ^ 0x82F6_3B78 : value >> 1 }
        return value
    }

    private static func bigEndianPort(_ block: UnsafeRawBufferPointer, at offset: Int) -> UInt16 {
        UInt16(block[offset]) << 8 | UInt16(block[offset + 1])
    }

    private static func ipv4(_ block: UnsafeRawBufferPointer, addressAt offset: Int, portAt portOffset: Int) -> SocketAddress {
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = bigEndianPort(block, at: portOffset).bigEndian
        withUnsafeMutableBytes(of: &address.sin_addr) {
            $0.copyMemory(from: UnsafeRawBufferPointer(rebasing: block[offset..<offset + 4]))
        }
        return SocketAddress(ipv4: address)
    }

    private static func ipv6(_ block: UnsafeRawBufferPointer, addressAt offset: Int, portAt portOffset: Int) -> SocketAddress {
        var address = sockaddr_in6()
        address.sin6_family = sa_family_t(AF_INET6)
        address.sin6_port = bigEndianPort(block, at: portOffset).bigEndian
        withUnsafeMutableBytes(of: &address.sin6_addr) {
            $0.copyMemory(from: UnsafeRawBufferPointer(rebasing: block[offset..<offset + 16]))
        }
        return SocketAddress(ipv6: address)
    }

    /// A 108-byte `sun_path`: a pathname ends at its first NUL; one beginning with NUL is an
    /// abstract name, whose length the header does not carry (trailing NULs are dropped).
    private static func unix(_ path: UnsafeRawBufferPointer) -> SocketAddress? {
        var bytes = Array(path)
        if bytes.first == 0 {
            while bytes.count > 1, bytes.last == 0 { bytes.removeLast() }
        } else if let nul = bytes.firstIndex(of: 0) {
            bytes.removeSubrange(nul...)
        }
        var family = sa_family_t(AF_UNIX)
        let raw = withUnsafeBytes(of: &family) { Array($0) } + bytes
        return SocketAddress(bytes: raw)
    }
}
