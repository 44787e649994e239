// SPDX-License-Identifier: MIT
import Glibc
import SocketKitC

/// One non-blocking `connect` of a Happy Eyeballs race. Registered with the loop for the
/// connection's final event mask, so the winner's registration becomes the connection's.
/// Holds its core `unowned`, like ListenerEndpoint: attempts are closed (deregistered) by the
/// core before it can go away.
final class ConnectionAttempt: EventLoopHandler {
    private unowned let core: TCPSocketCore
    private(set) var fd: Int32
    let address: SocketAddress
    private(set) var registration: RegistrationID?

    private init(core: TCPSocketCore, fd: Int32, address: SocketAddress) {
        self.core = core
        self.fd = fd
        self.address = address
    }

    /// Creates the socket, sets the socket's options on it (its own, then TCP Fast Open),
    /// binds it to `localAddress` if given, starts connecting and registers it. Throws when
    /// any of that fails at once (e.g. ECONNREFUSED on a Unix path).
    static func start(to address: SocketAddress, from localAddress: SocketAddress?,
                      core: TCPSocketCore) throws(SocketError) -> ConnectionAttempt {
        let fd = try SystemCalls.makeStreamSocket(family: address.posixFamily)
        do throws(SocketError) {
            let configuration = core.configuration
            for option in configuration.socketOptions { try option.apply(to: fd) }
            if configuration.fastOpen && address.family != .unix {
                try SystemCalls.setOption(fd, Int32(IPPROTO_TCP), TCP_FASTOPEN_CONNECT, 1, "TCP_FASTOPEN_CONNECT")
            }
            if let localAddress {
                if localAddress.port != 0 {
                    try SystemCalls.setOption(fd, SOL_SOCKET, SO_REUSEADDR, 1, "SO_REUSEADDR")
                }
                try SystemCalls.bind(fd, to: localAddress)
            }
            let result = address.withSockAddr { Glibc.connect(fd, $0, $1) }
            if result != 0 && errno != EINPROGRESS {
                throw SocketError.lastSystemError("connect(\(address))")
            }
            let attempt = ConnectionAttempt(core: core, fd: fd, address: address)
            // Edge-triggered registration reports the current state at once, so an
            // immediate success (Unix sockets) arrives as an event like any other.
            attempt.registration = try core.loop.register(fd: fd, events: TCPSocketCore.connectionEvents, handler: attempt)
            return attempt
        } catch {
            Glibc.close(fd)
            throw error
        }
    }

    func handleEvents(_ events: UInt32) {
        guard fd >= 0 else { return }
        let error = SystemCalls.pendingError(fd)
        if error != 0 {
            core.attemptFailed(self, error: error)
        } else if events & EPOLLOUT.rawValue != 0 {
            core.attemptSucceeded(self, events: events)
        } else if events & (EPOLLERR.rawValue | EPOLLHUP.rawValue) != 0 {
            core.attemptFailed(self, error: ECONNREFUSED)
        }
    }

    func eventLoopWillStop() {
        core.eventLoopWillStop()
        close()
    }

    /// The winner hands its descriptor and registration to the connection.
    func detach() {
        fd = -1
        registration = nil
    }

    func close() {
        guard fd >= 0 else { return }
        if let registration { core.loop.deregister(registration, fd: fd) }
        Glibc.close(fd)
        fd = -1
        registration = nil
    }

    /// For deinit paths where the loop is gone: just the descriptor.
    func closeDescriptor() {
        if fd >= 0 { Glibc.close(fd) }
        fd = -1
    }
}
