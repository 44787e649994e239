// SPDX-License-Identifier: MIT
import Glibc
import SocketKitC

/// Thin wrappers over the socket system calls, turning `-1`/`errno` into `SocketError`.
enum SystemCalls {
    static let streamType = Int32(SOCK_STREAM.rawValue)
    static let nonBlockingFlags = Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue)
    /// Every send carries it: SIGPIPE never fires, whatever the host's signal disposition.
    static let sendFlags = Int32(MSG_NOSIGNAL)

    /// A new non-blocking, close-on-exec stream socket.
    static func makeStreamSocket(family: Int32) throws(SocketError) -> Int32 {
        let fd = socket(family, streamType | nonBlockingFlags, 0)
        guard fd >= 0 else { throw SocketError.lastSystemError("socket") }
        return fd
    }

    static func setOption(_ fd: Int32, _ level: Int32, _ name: Int32, _ value: Int32, _ what: String) throws(SocketError) {
        var value = value
        guard setsockopt(fd, level, name, &value, socklen_t(MemoryLayout<Int32>.size)) == 0 else {
            throw SocketError.lastSystemError("setsockopt(\(what))")
        }
    }

    static func getOption(_ fd: Int32, _ level: Int32, _ name: Int32) -> Int32? {
        var value: Int32 = 0
        var length = socklen_t(MemoryLayout<Int32>.size)
        guard getsockopt(fd, level, name, &value, &length) == 0 else { return nil }
        return value
    }

    /// The pending error of a socket (`SO_ERROR`), which also clears it.
    static func pendingError(_ fd: Int32) -> Int32 {
        var value: Int32 = 0
        var length = socklen_t(MemoryLayout<Int32>.size)
        guard getsockopt(fd, SOL_SOCKET, SO_ERROR, &value, &length) == 0 else { return errno }
        return value
    }

    static func bind(_ fd: Int32, to address: SocketAddress) throws(SocketError) {
        let result = address.withSockAddr { Glibc.bind(fd, $0, $1) }
        guard result == 0 else {
            throw SocketError.lastSystemError("bind(\(address))")
        }
    }

    static func localAddress(_ fd: Int32) -> SocketAddress? { address(of: fd, getsockname) }

    static func peerAddress(_ fd: Int32) -> SocketAddress? { address(of: fd, getpeername) }

    /// The address `query` (getsockname or getpeername) reports for `fd`, or nil.
    private static func address(
        of fd: Int32, _ query: (Int32, UnsafeMutablePointer<sockaddr>?, UnsafeMutablePointer<socklen_t>?) -> Int32
    ) -> SocketAddress? {
        var storage = sockaddr_storage()
        var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
        let result = withUnsafeMutablePointer(to: &storage) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { query(fd, $0, &length) }
        }
        guard result == 0 else { return nil }
        return withUnsafeBytes(of: &storage) { SocketAddress(storage: $0.baseAddress!, length: length) }
    }

    static func socketFamily(_ fd: Int32) -> Int32? {
        getOption(fd, SOL_SOCKET, SO_DOMAIN)
    }

    static func makeNonBlocking(_ fd: Int32) throws(SocketError) {
        let flags = fcntl(fd, F_GETFL)
        guard flags >= 0, fcntl(fd, F_SETFL, flags | O_NONBLOCK) == 0 else {
            throw SocketError.lastSystemError("fcntl(O_NONBLOCK)")
        }
        let descriptorFlags = fcntl(fd, F_GETFD)
        if descriptorFlags >= 0 { _ = fcntl(fd, F_SETFD, descriptorFlags | FD_CLOEXEC) }
    }

    /// Bytes waiting in the kernel's receive buffer.
    static func bytesReadable(_ fd: Int32) -> Int {
        var count: Int32 = 0
        return skc_bytes_readable(fd, &count) == 0 ? Int(count) : 0
    }
}
