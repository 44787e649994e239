// SPDX-License-Identifier: MIT
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
        /// A Unix-domain address's raw bytes (one pointer: a `SocketAddress` here would make
        /// every case as large as it is).
        case array([UInt8])
    }

    private let storage: Storage

    init(_ address: SocketAddress) {
        guard address.family != .unix else {
            storage = .array(address.bytes)
            return
        }
        var inline: InlineBytes = (0, 0, 0, 0)
        let count = address.withRawBytes { raw -> Int in
            withUnsafeMutableBytes(of: &inline) { $0.copyMemory(from: raw) }
            return raw.count
        }
        storage = .inline(inline, count: UInt8(count))
    }

    var address: SocketAddress? {
        switch storage {
        case .inline(let inline, let count):
            return withUnsafeBytes(of: inline) { SocketAddress(raw: UnsafeRawBufferPointer(rebasing: $0.prefix(Int(count)))) }
        case .array(let bytes):
            return SocketAddress(bytes: bytes)
        }
    }
}
