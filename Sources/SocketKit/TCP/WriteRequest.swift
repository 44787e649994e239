// SPDX-License-Identifier: MIT
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

/// The checks `Socket.writeFile` and `Socket.read(toLength:intoFile:)` make of a caller's
/// descriptor: a regular file (what `sendfile` reads, what a write to disk never blocks on
/// as a pipe could), open for the direction used.
enum FileChecks {
    /// The file's size; throws `.badParam` otherwise.
    @discardableResult
    static func regularFile(_ descriptor: Int32, writable: Bool) throws(SocketError) -> Int64 {
        var status = stat()
        guard descriptor >= 0, fstat(descriptor, &status) == 0 else {
            throw SocketError(.badParam, osError: descriptor < 0 ? EBADF : errno, "descriptor \(descriptor) is not open")
        }
        guard status.st_mode & S_IFMT == S_IFREG else {
            throw SocketError(.badParam, "descriptor \(descriptor) is not a regular file")
        }
        let mode = fcntl(descriptor, F_GETFL) & O_ACCMODE
        guard writable ? (mode == O_WRONLY || mode == O_RDWR) : (mode == O_RDONLY || mode == O_RDWR) else {
            throw SocketError(.badParam, "descriptor \(descriptor) is not open for \(writable ? "writing" : "reading")")
        }
        return Int64(status.st_size)
    }
}

/// A region of a regular file to send with `sendfile` (`Socket.writeFile`): a duplicate of
/// the caller's descriptor (the caller keeps its own), closed when the write is done or
/// dropped. `sendfile` reads at an explicit offset, so the file's own position is untouched.
final class FileRegion {
    let fd: Int32
    let offset: Int64
    let length: Int

    init(duplicating descriptor: Int32, offset: Int64, length: Int) throws(SocketError) {
        let duplicate = fcntl(descriptor, F_DUPFD_CLOEXEC, 0)
        guard duplicate >= 0 else { throw SocketError.lastSystemError("fcntl(F_DUPFD_CLOEXEC)") }
        fd = duplicate
        self.offset = offset
        self.length = length
    }

    deinit { close(fd) }
}

/// One queued write.
struct WriteRequest {
    enum Storage {
        case array([UInt8])
        case external(ExternalBytes)
        /// Bytes with descriptors to pass with their first byte (Unix-domain only).
        case passing(DescriptorPassingBytes)
        /// A file region, sent with `sendfile` (never gathered with other writes).
        case file(FileRegion)
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
        case .file(let region): length = region.length
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
        case .file:
            // Never gathered (`isSpecial`): its bytes are the kernel's to copy.
            return body(UnsafeRawBufferPointer(start: nil, count: 0))
        }
    }

    /// Needs a system call of its own (`TCPSocketCore.sendQueuedWritesOneByOne`).
    var isSpecial: Bool {
        switch storage {
        case .array, .external: return false
        case .passing(let passing): return passing.isPending
        case .file: return true
        }
    }

    /// The descriptors this write still has to pass (with its next byte: its first).
    var pendingDescriptors: DescriptorPassingBytes? {
        if case .passing(let passing) = storage, passing.isPending { return passing }
        return nil
    }
}
