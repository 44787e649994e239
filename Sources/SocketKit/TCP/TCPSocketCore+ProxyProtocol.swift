// SPDX-License-Identifier: MIT
import Glibc
import SocketKitC

/// One accepted connection of a listener with `proxyProtocol` set, whose PROXY header has
/// not all arrived yet. It lives on the listener's loop and belongs to the listener's
/// session (`AcceptingState.proxyHeaderReaders`): nothing of the connection exists for the
/// user until its header is complete, so there is no second owner of connection state. The
/// header is looked at with `MSG_PEEK` and only its own bytes are taken from the kernel
/// (`recv` of exactly its length), so what the client sent after it (in the same segment or
/// not) stays in the socket for the connection's first read, or for its TLS handshake.
/// Holds its core `unowned`, like ListenerEndpoint: the core closes its readers in
/// `closeListeners` before it can go away.
final class ProxyHeaderReader: EventLoopHandler {
    unowned let core: TCPSocketCore
    let fd: Int32
    /// The proxy's address (getpeername of the accepted descriptor).
    let peer: SocketAddress?
    let endpoint: ListenerEndpoint
    var registration: RegistrationID? = nil
    var timer: LoopTimer? = nil

    init(core: TCPSocketCore, fd: Int32, peer: SocketAddress?, endpoint: ListenerEndpoint) {
        self.core = core
        self.fd = fd
        self.peer = peer
        self.endpoint = endpoint
    }

    func handleEvents(_ events: UInt32) {
        core.readProxyHeader(self, events: events)
    }

    func eventLoopWillStop() {
        core.eventLoopWillStop()
    }
}

extension TCPSocketCore {
    /// How long an accepted connection may take to send its whole PROXY header (default).
    static let defaultProxyHeaderTimeout = 5.0

    /// Starts waiting for the header of a connection just accepted on `endpoint`. Edge-
    /// triggered registration reports data already there at once.
    func startReadingProxyHeader(_ descriptor: Int32, peer: SocketAddress?, via endpoint: ListenerEndpoint) {
        let reader = ProxyHeaderReader(core: self, fd: descriptor, peer: peer, endpoint: endpoint)
        do {
            reader.registration = try loop.register(fd: descriptor, events: TCPSocketCore.connectionEvents, handler: reader)
        } catch {
            close(descriptor)
            EngineLog.log(.warning, .accept, "a connection from \(peer.map { "\($0)" } ?? "?") on \(endpoint.address) "
                + "was closed: it could not wait for its PROXY protocol header (\(error.message))")
            return
        }
        proxyHeaderReaders.append(reader)
        let timeout = configuration.proxyHeaderTimeout
        let deadline = monotonicNanoseconds() + UInt64(timeout * 1_000_000_000)
        reader.timer = LoopTimer { [unowned self, unowned reader] in
            self.refuseProxiedConnection(reader, "no complete PROXY protocol header within \(timeout) s")
        }
        loop.schedule(reader.timer!, deadline: deadline)
    }

    /// Looks at what arrived so far; once the header is complete, takes exactly its bytes
    /// and reports the connection as accepted, with the header's addresses.
    func readProxyHeader(_ reader: ProxyHeaderReader, events: UInt32) {
        guard proxyHeaderReaders.contains(where: { $0 === reader }) else { return }
        let scratch = UnsafeMutableRawBufferPointer(rebasing: loop.discardBuffer[0..<ProxyHeader.maximumLength])
        let peeked = skc_recv(reader.fd, scratch.baseAddress, scratch.count, Int32(MSG_PEEK))
        if peeked < 0 {
            let error = errno
            if error == EAGAIN || error == EWOULDBLOCK || error == EINTR { return }
            refuseProxiedConnection(reader, "the connection failed before its PROXY protocol header (\(String(cString: strerror(error))))")
            return
        }
        let seen = UnsafeRawBufferPointer(rebasing: scratch[0..<peeked])
        switch ProxyHeader.parse(seen, mode: configuration.proxyProtocol) {
        case .needMore:
            let ended = events & (EPOLLRDHUP.rawValue | EPOLLHUP.rawValue | EPOLLERR.rawValue) != 0
            if peeked == 0 || ended {
                refuseProxiedConnection(reader, "the connection ended before its PROXY protocol header was complete")
            } else if peeked == scratch.count {
                // Cannot happen (a header is never longer than what is looked at): refuse
                // rather than wait for an edge that will not come.
                refuseProxiedConnection(reader, "a PROXY protocol header longer than \(ProxyHeader.maximumLength) bytes")
            }
            // Otherwise the rest comes with a later segment, and a new edge.
        case .invalid(let reason):
            refuseProxiedConnection(reader, reason)
        case .complete(let header):
            // The bytes were peeked: they are there, and this takes exactly them.
            let taken = skc_recv(reader.fd, scratch.baseAddress, header.length, 0)
            guard taken == header.length else {
                refuseProxiedConnection(reader, "the PROXY protocol header could not be taken from the socket")
                return
            }
            let endpoint = reader.endpoint
            detachProxyHeaderReader(reader)
            if header.keepsRealAddresses {
                handleAccepted(reader.fd, peer: reader.peer, via: endpoint, proxy: nil)
            } else {
                handleAccepted(reader.fd, peer: header.source, via: endpoint,
                               proxy: ProxiedConnection(proxyAddress: reader.peer, destination: header.destination,
                                                        version: header.version))
            }
        }
    }

    /// The connection's header is wrong, late or cut short: that connection alone is closed
    /// (nothing of it reached the user), and the log says why.
    func refuseProxiedConnection(_ reader: ProxyHeaderReader, _ reason: String) {
        guard proxyHeaderReaders.contains(where: { $0 === reader }) else { return }
        detachProxyHeaderReader(reader)
        close(reader.fd)
        EngineLog.log(.warning, .accept, "a connection from \(reader.peer.map { "\($0)" } ?? "?") on "
            + "\(reader.endpoint.address) was closed: \(reason)")
    }

    /// Forgets `reader` without closing its descriptor.
    private func detachProxyHeaderReader(_ reader: ProxyHeaderReader) {
        proxyHeaderReaders.removeAll { $0 === reader }
        if let registration = reader.registration { loop.deregister(registration, fd: reader.fd) }
        reader.registration = nil
        cancel(reader.timer)
    }

    /// The listening session ends: connections still sending their header are closed.
    func closeProxyHeaderReaders() {
        for reader in proxyHeaderReaders {
            if let registration = reader.registration { loop.deregister(registration, fd: reader.fd) }
            cancel(reader.timer)
            close(reader.fd)
        }
        proxyHeaderReaders.removeAll()
    }
}

/// What an accepted connection's PROXY protocol header said beside its source (published
/// with the connection; `Socket.proxyAddress`).
final class ProxiedConnection: Sendable {
    /// The proxy: the connection's real TCP peer.
    let proxyAddress: SocketAddress?
    /// The address the client connected to on the proxy.
    let destination: SocketAddress?
    /// 1 or 2.
    let version: UInt8

    init(proxyAddress: SocketAddress?, destination: SocketAddress?, version: UInt8) {
        self.proxyAddress = proxyAddress
        self.destination = destination
        self.version = version
    }
}
