import Glibc

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

/// The bytes of a write that passes descriptors over a Unix-domain connection (SCM_RIGHTS),
/// and duplicates of them: the caller keeps its own. The duplicates are closed once the
/// kernel has taken them (`sent`), or when the write is dropped.
final class DescriptorPassingBytes {
    let bytes: [UInt8]
    private(set) var descriptors: [Int32]

    /// Duplicates `descriptors` (close-on-exec). Throws `.badParam` for one that is not
    /// open, closing the duplicates made so far.
    init(bytes: [UInt8], descriptors: [Int32]) throws(SocketError) {
        var duplicates: [Int32] = []
        duplicates.reserveCapacity(descriptors.count)
        for descriptor in descriptors {
            let duplicate = descriptor < 0 ? -1 : fcntl(descriptor, F_DUPFD_CLOEXEC, 0)
            guard duplicate >= 0 else {
                let error = descriptor < 0 ? EBADF : errno
                for made in duplicates { close(made) }
                throw SocketError(error == EBADF ? .badParam : .system, osError: error,
                                  "descriptor \(descriptor) cannot be passed: \(String(cString: strerror(error)))")
            }
            duplicates.append(duplicate)
        }
        self.bytes = bytes
        self.descriptors = duplicates
    }

    /// True until the kernel took the descriptors.
    var isPending: Bool { !descriptors.isEmpty }

    /// The kernel holds its own references now.
    func sent() {
        for descriptor in descriptors { close(descriptor) }
        descriptors = []
    }

    deinit { sent() }
}

/// One queued write.
struct WriteRequest {
    enum Storage {
        case array([UInt8])
        case external(ExternalBytes)
        /// Bytes with descriptors to pass with their first byte (Unix-domain only).
        case passing(DescriptorPassingBytes)
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
        case .passing(let passing): length = passing.bytes.count
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
        case .passing(let passing):
            return passing.bytes.withUnsafeBytes { body(UnsafeRawBufferPointer(rebasing: $0[offset...])) }
        }
    }

    /// The descriptors this write still has to pass (with its next byte: its first).
    var pendingDescriptors: DescriptorPassingBytes? {
        if case .passing(let passing) = storage, passing.isPending { return passing }
        return nil
    }
}
