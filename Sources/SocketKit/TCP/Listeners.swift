// SPDX-License-Identifier: MIT
import Glibc
import SocketKitC

/// One listening descriptor of a socket that accepts (IPv4, IPv6 or Unix-domain).
/// Holds its core `unowned` (no side table on the core): the core deregisters its endpoints
/// in `closeSession` before it can go away, so no event reaches an endpoint of a dead core.
final class ListenerEndpoint: EventLoopHandler {
    unowned let core: TCPSocketCore
    let fd: Int32
    let address: SocketAddress
    var registration: RegistrationID? = nil

    init(core: TCPSocketCore, fd: Int32, address: SocketAddress) {
        self.core = core
        self.fd = fd
        self.address = address
    }

    func handleEvents(_ events: UInt32) {
        core.acceptConnections(on: self)
    }

    func eventLoopWillStop() {
        core.eventLoopWillStop()
    }
}

/// Creates listening sockets on the caller's thread, so that "address in use", "unknown
/// interface" and the like are reported synchronously by `accept(on…)`, as upstream.
enum ListenerFactory {
    struct Listener {
        let fd: Int32
        /// The bound address (with the port the kernel picked, for port 0).
        let address: SocketAddress
        /// For a Unix-domain listener: the socket file its bind created.
        var unixFile: UnixSocketFile? = nil
    }

    static let backlog = SOMAXCONN

    /// IPv4 and/or IPv6 listeners on `interface` (see `Interfaces`) and `port`. Both
    /// families get the same port, also when the kernel picks it (port 0); the IPv6 socket
    /// is IPv6-only so the two coexist on Linux.
    static func makeIPListeners(interface: String?, port: UInt16,
                                configuration: SocketConfiguration) throws(SocketError) -> [Listener] {
        let ipv4Enabled = configuration.isIPv4Enabled
        let ipv6Enabled = configuration.isIPv6Enabled
        var name = interface
        var port = port
        if let interface, !interface.isEmpty {
            let parts = try Interfaces.split(interface)
            name = parts.name
            if port == 0, let interfacePort = parts.port { port = interfacePort }
        }
        let endpoints = try Interfaces.endpoints(for: name, port: port)
        let ipv4 = ipv4Enabled ? endpoints.ipv4 : nil
        let ipv6 = ipv6Enabled ? endpoints.ipv6 : nil
        guard ipv4 != nil || ipv6 != nil else {
            throw SocketError(.badParam, "the interface has no address of an enabled family")
        }
        // With port 0 the IPv6 bind can find the IPv4 port taken by someone else: retry.
        var lastError: SocketError? = nil
        for _ in 0..<8 {
            var made: [Listener] = []
            do throws(SocketError) {
                var chosenPort = port
                if let ipv4 {
                    let listener = try listen(on: ipv4.withPort(chosenPort), configuration: configuration)
                    made.append(listener)
                    chosenPort = listener.address.port
                }
                if let ipv6 {
                    do throws(SocketError) {
                        made.append(try listen(on: ipv6.withPort(chosenPort), configuration: configuration))
                    } catch let error where ipv4 != nil && error.code == .system
                                && (error.osError == EAFNOSUPPORT || error.osError == EADDRNOTAVAIL)
                                && (name == nil || name == "localhost" || name == "loopback") {
                        // No IPv6 on this host: listen on IPv4 alone.
                    }
                }
                return made
            } catch {
                for listener in made { close(listener.fd) }
                lastError = error
                let retryable = port == 0 && ipv4 != nil && error.code == .system && error.osError == EADDRINUSE
                if !retryable { throw error }
            }
        }
        throw lastError ?? SocketError(.other, "could not bind both families to one port")
    }

    /// A listening TCP socket on `address`, with the socket's options: its own (before the
    /// bind), SO_REUSEPORT (before the bind, where the kernel looks for it), TCP Fast Open
    /// (before `listen`, which sizes its queue).
    static func listen(on address: SocketAddress, configuration: SocketConfiguration) throws(SocketError) -> Listener {
        let fd = try SystemCalls.makeStreamSocket(family: address.posixFamily)
        do throws(SocketError) {
            try SystemCalls.setOption(fd, SOL_SOCKET, SO_REUSEADDR, 1, "SO_REUSEADDR")
            if address.family == .ipv6 {
                try SystemCalls.setOption(fd, Int32(IPPROTO_IPV6), IPV6_V6ONLY, 1, "IPV6_V6ONLY")
            }
            if configuration.reusePort {
                try SystemCalls.setOption(fd, SOL_SOCKET, SO_REUSEPORT, 1, "SO_REUSEPORT")
            }
            for option in configuration.socketOptions { try option.apply(to: fd) }
            try SystemCalls.bind(fd, to: address)
            if configuration.fastOpen {
                try SystemCalls.setOption(fd, Int32(IPPROTO_TCP), TCP_FASTOPEN, fastOpenQueueLength, "TCP_FASTOPEN")
            }
            guard Glibc.listen(fd, backlog) == 0 else { throw SocketError.lastSystemError("listen") }
            return Listener(fd: fd, address: SystemCalls.localAddress(fd) ?? address)
        } catch {
            close(fd)
            throw error
        }
    }

    /// Connections whose SYN carried data and that were not accepted yet, at most (the
    /// kernel falls back to a plain handshake beyond it).
    static let fastOpenQueueLength: Int32 = 256

    /// A Unix-domain listener at `path`. A stale socket file there is removed first (a file
    /// that is not a socket is never deleted: that fails with EADDRINUSE).
    static func makeUnixListener(path: String, configuration: SocketConfiguration) throws(SocketError) -> Listener {
        let address = try SocketAddress(unixPath: path)
        var status = stat()
        if lstat(path, &status) == 0 {
            guard status.st_mode & S_IFMT == S_IFSOCK else {
                throw SocketError(.system, osError: EADDRINUSE, "\(path) exists and is not a socket")
            }
            unlink(path)
        }
        let fd = try SystemCalls.makeStreamSocket(family: AF_UNIX)
        do throws(SocketError) {
            for option in configuration.socketOptions { try option.apply(to: fd) }
            try SystemCalls.bind(fd, to: address)
            guard Glibc.listen(fd, backlog) == 0 else { throw SocketError.lastSystemError("listen") }
            return Listener(fd: fd, address: address, unixFile: UnixSocketFile(boundAt: path))
        } catch {
            close(fd)
            throw error
        }
    }
}

extension ListenerFactory {
    /// A Unix-domain listener on a Linux abstract address (`SocketAddress(abstractUnixName:)`):
    /// no file to replace before, nor to remove after.
    static func makeAbstractUnixListener(address: SocketAddress, configuration: SocketConfiguration) throws(SocketError) -> Listener {
        let fd = try SystemCalls.makeStreamSocket(family: AF_UNIX)
        do throws(SocketError) {
            for option in configuration.socketOptions { try option.apply(to: fd) }
            try SystemCalls.bind(fd, to: address)
            guard Glibc.listen(fd, backlog) == 0 else { throw SocketError.lastSystemError("listen") }
            return Listener(fd: fd, address: address)
        } catch {
            close(fd)
            throw error
        }
    }
}

extension ListenerFactory {
    /// The most descriptors one listener adopts.
    static let maximumAdoptedDescriptors = 64

    /// Checks descriptors handed to `Socket.accept(onDescriptors:)`, changing nothing: each
    /// must be a stream socket of IPv4, IPv6 or the Unix domain, bound (to a port, a path or
    /// an abstract name), listening or not, and not connected; no duplicates. Returns their
    /// bound addresses.
    static func checkAdoptable(_ descriptors: [Int32]) throws(SocketError) -> [SocketAddress] {
        guard !descriptors.isEmpty, descriptors.count <= maximumAdoptedDescriptors else {
            throw SocketError(.badParam, "a listener adopts 1...\(maximumAdoptedDescriptors) descriptors")
        }
        guard Set(descriptors).count == descriptors.count else {
            throw SocketError(.badParam, "the same descriptor is given twice")
        }
        var addresses: [SocketAddress] = []
        for descriptor in descriptors {
            guard descriptor >= 0 else { throw SocketError(.badParam, "negative descriptor") }
            guard let family = SystemCalls.socketFamily(descriptor) else {
                throw SocketError.lastSystemError("getsockopt(SO_DOMAIN) of descriptor \(descriptor)")
            }
            guard family == AF_INET || family == AF_INET6 || family == AF_UNIX else {
                throw SocketError(.badParam, "descriptor \(descriptor) is not an IPv4, IPv6 or Unix-domain socket")
            }
            guard SystemCalls.getOption(descriptor, SOL_SOCKET, SO_TYPE) == SystemCalls.streamType else {
                throw SocketError(.badParam, "descriptor \(descriptor) is not a stream socket")
            }
            if SystemCalls.getOption(descriptor, SOL_SOCKET, SO_ACCEPTCONN) != 1 && SystemCalls.peerAddress(descriptor) != nil {
                throw SocketError(.badParam, "descriptor \(descriptor) is connected: adopt it with Socket(connectedSocketDescriptor:)")
            }
            guard let address = SystemCalls.localAddress(descriptor), address.isBound else {
                throw SocketError(.badParam, "descriptor \(descriptor) is not bound: bind it first (or let SocketKit make the listener)")
            }
            addresses.append(address)
        }
        return addresses
    }

    /// Takes descriptors `checkAdoptable` passed: each made to listen if it does not,
    /// non-blocking and close-on-exec. No Unix socket file is recorded: SocketKit did not
    /// make it, so it does not remove it.
    static func adopt(_ descriptors: [Int32], addresses: [SocketAddress]) throws(SocketError) -> [Listener] {
        var listeners: [Listener] = []
        for (descriptor, address) in zip(descriptors, addresses) {
            if SystemCalls.getOption(descriptor, SOL_SOCKET, SO_ACCEPTCONN) != 1 {
                guard Glibc.listen(descriptor, backlog) == 0 else {
                    throw SocketError.lastSystemError("listen(descriptor \(descriptor))")
                }
            }
            try SystemCalls.makeNonBlocking(descriptor)
            listeners.append(Listener(fd: descriptor, address: address))
        }
        return listeners
    }
}

/// systemd's socket activation (sd_listen_fds(3)): the listening descriptors the service
/// manager passed, from 3 on, when LISTEN_PID names this process.
enum SocketActivation {
    static let firstDescriptor: Int32 = 3

    static func descriptors(unsettingEnvironment: Bool) throws(SocketError) -> [Int32] {
        defer {
            if unsettingEnvironment {
                unsetenv("LISTEN_PID")
                unsetenv("LISTEN_FDS")
                unsetenv("LISTEN_FDNAMES")
            }
        }
        guard let pidText = getenv("LISTEN_PID").map({ String(cString: $0) }) else { return [] }
        guard let pid = Int32(pidText), pid > 0 else {
            throw SocketError(.badParam, "LISTEN_PID is not a process id: '\(pidText)'")
        }
        guard pid == getpid() else { return [] }
        guard let countText = getenv("LISTEN_FDS").map({ String(cString: $0) }) else { return [] }
        guard let count = Int32(countText), count >= 0, count <= Int32.max - firstDescriptor else {
            throw SocketError(.badParam, "LISTEN_FDS is not a count: '\(countText)'")
        }
        let descriptors = (0..<count).map { firstDescriptor + $0 }
        for descriptor in descriptors {
            let flags = fcntl(descriptor, F_GETFD)
            if flags >= 0 { _ = fcntl(descriptor, F_SETFD, flags | FD_CLOEXEC) }
        }
        return descriptors
    }
}

/// The socket file a Unix-domain listener's bind created, and which file it is (device and
/// inode): the listener removes it when it closes, but only while it is still that file. A
/// new listener may have replaced it at the same path meanwhile (it removes a stale socket
/// file before its bind), and its file must not go with the old listener.
struct UnixSocketFile {
    let path: String
    private let device: UInt64
    private let inode: UInt64

    /// The file at `path` just after the bind; nil if it cannot be looked at (then it is
    /// never removed: better a stale file than someone else's gone).
    init?(boundAt path: String) {
        var status = stat()
        guard lstat(path, &status) == 0 else { return nil }
        self.path = path
        device = UInt64(status.st_dev)
        inode = UInt64(status.st_ino)
    }

    /// Removes the file if it is still the one the bind created.
    func unlinkIfStillOurs() {
        var status = stat()
        guard lstat(path, &status) == 0, UInt64(status.st_dev) == device, UInt64(status.st_ino) == inode else { return }
        unlink(path)
    }
}
