/// A `SocketAddress` kept without a heap allocation when it is an IPv4 or IPv6 one: the raw
/// `sockaddr_in` / `sockaddr_in6` (at most 28 bytes) stored inline. Unix-domain addresses
/// keep their array. For addresses every connection holds for its whole life (its local
/// and peer address), where a `SocketAddress` would cost an array of its own (64 bytes of
/// heap each); reading one back makes that array.
struct CompactSocketAddress: Sendable {
    private typealias InlineBytes = (UInt64, UInt64, UInt64, UInt32)
    private static let inlineCapacity = MemoryLayout<InlineBytes>.size

    private enum Storage: Sendable {
        case inline(InlineBytes, count: UInt8)
        case array(SocketAddress)
    }

    private let storage: Storage

    init(_ address: SocketAddress) {
        let bytes = address.bytes
        guard address.family != .unix, bytes.count <= CompactSocketAddress.inlineCapacity else {
            storage = .array(address)
            return
        }
        var inline: InlineBytes = (0, 0, 0, 0)
        withUnsafeMutableBytes(of: &inline) { $0.copyBytes(from: bytes) }
        storage = .inline(inline, count: UInt8(bytes.count))
    }

    var address: SocketAddress? {
        switch storage {
        case .inline(let inline, let count):
            return withUnsafeBytes(of: inline) { SocketAddress(bytes: Array($0.prefix(Int(count)))) }
        case .array(let address):
            return address
        }
    }
}
