// SPDX-License-Identifier: MIT
/// Bytes the caller lent to a no-copy write; `release` runs once SocketKit no longer needs
/// them (written, or dropped by a disconnect), on the socket's loop thread.
final class ExternalBytes: @unchecked Sendable {
    let bytes: UnsafeRawBufferPointer
    private let release: (() -> Void)?

    init(bytes: UnsafeRawBufferPointer, release: (() -> Void)?) {
        self.bytes = bytes
        self.release = release
    }

    deinit { release?() }
}

/// One queued write.
struct WriteRequest {
    enum Storage {
        case array([UInt8])
        case external(ExternalBytes)
    }

    let storage: Storage
    let tag: Int
    /// Seconds; negative = no timeout. Grows with each extension.
    var timeout: Double
    /// Bytes already accepted by the kernel.
    var offset = 0
    let length: Int

    init(_ storage: Storage, tag: Int, timeout: Double) {
        self.storage = storage
        self.tag = tag
        self.timeout = timeout
        switch storage {
        case .array(let bytes): length = bytes.count
        case .external(let external): length = external.bytes.count
        }
    }

    var remaining: Int { length - offset }

    /// Calls `body` with the bytes not yet written.
    func withRemainingBytes<Result>(_ body: (UnsafeRawBufferPointer) -> Result) -> Result {
        switch storage {
        case .array(let bytes):
            return bytes.withUnsafeBytes { body(UnsafeRawBufferPointer(rebasing: $0[offset...])) }
        case .external(let external):
            return body(UnsafeRawBufferPointer(rebasing: external.bytes[offset...]))
        }
    }
}
