// SPDX-License-Identifier: MIT
import Glibc
import SocketKitC

/// Connecting through a proxy (`Socket.setProxy`). The core stays the one owner of the
/// connection: the Happy Eyeballs race runs to the proxy as to any host, the winner's
/// descriptor becomes the core's, and the session stays `.connecting` (phase `.proxying`)
/// while `ProxyHandshake` (a protocol machine without I/O) and the core exchange the
/// proxy's handshake on it. The connect timer keeps running across the handshake; reads,
/// writes and `startTLS` queued meanwhile wait in their queues as during any connect, and
/// run once the proxy said yes (`becomeConnected`). What the proxy sent after its answer is
/// the target's first bytes: it goes to the prebuffer, ahead of anything read later.
extension TCPSocketCore {
    /// What `startConnect` connects to: the proxy instead of the target, when the socket has
    /// one and the target is not a Unix-domain address (those never go through a proxy),
    /// and the handshake to run there. Throws `.badParam` for a target the proxy cannot be
    /// asked for (see `ProxyHandshake.init`).
    func proxied(_ target: ConnectTarget) throws(SocketError) -> (ConnectTarget, ProxyHandshake?) {
        guard let settings = configuration.proxy else { return (target, nil) }
        let proxied: ProxiedTarget
        switch target {
        case .host(let host, let port):
            proxied = ProxiedTarget(host: host, port: port)
        case .address(let address):
            guard address.family != .unix, let host = address.host else { return (target, nil) }
            proxied = ProxiedTarget(host: host, port: address.port)
        }
        let handshake = try ProxyHandshake(settings: settings, target: proxied)
        return (.host(settings.host, port: settings.port), handshake)
    }

    /// The race to the proxy is won: the handshake begins on the winner's descriptor, which
    /// the core already holds (`fd`, `registration`). `events` completed the connect: with
    /// edge-triggered epoll, a proxy that closed (or spoke) at once is reported only there.
    func beginProxyHandshake(_ handshake: ProxyHandshake, events: UInt32) {
        phase = .proxying
        readable = events & (EPOLLIN.rawValue | EPOLLRDHUP.rawValue | EPOLLHUP.rawValue) != 0
        writable = true
        let greeting = handshake.greeting()
        connecting.proxyOutbound = greeting
        EngineLog.log(.debug, .connection, "connected to \(handshake.settings); asking for \(handshake.target.host):\(handshake.target.port)")
        proxyPump()
    }

    /// Readiness during the handshake (`handleEvents`).
    func proxyHandleEvents(_ events: UInt32) {
        if events & (EPOLLIN.rawValue | EPOLLRDHUP.rawValue | EPOLLHUP.rawValue | EPOLLERR.rawValue) != 0 {
            readable = true
        }
        if events & EPOLLOUT.rawValue != 0 { writable = true }
        proxyPump()
    }

    /// Sends what the handshake has to send, then reads the proxy's answer until the kernel
    /// has no more (edge-triggered: every readiness is drained here).
    private func proxyPump() {
        guard phase == .proxying, let handshake = connectingState?.proxy else { return }
        while writable, let outbound = connectingState?.proxyOutbound, !outbound.isEmpty {
            let sent = outbound.withUnsafeBytes { skc_send(fd, $0.baseAddress, $0.count, SystemCalls.sendFlags | Int32(MSG_DONTWAIT)) }
            if sent < 0 {
                if errno == EAGAIN || errno == EWOULDBLOCK { writable = false; break }
                if errno == EINTR { continue }
                closeSession(proxyTransportError(errno, handshake))
                return
            }
            connecting.proxyOutbound = Array(outbound[sent...])
        }
        let buffer = loop.discardBuffer
        while readable && phase == .proxying {
            let count = skc_recv(fd, buffer.baseAddress, buffer.count, Int32(MSG_DONTWAIT))
            if count < 0 {
                if errno == EAGAIN || errno == EWOULDBLOCK { readable = false; break }
                if errno == EINTR { continue }
                closeSession(proxyTransportError(errno, handshake))
                return
            }
            if count == 0 {
                closeSession(handshake.receivedEnd())
                return
            }
            switch handshake.receive(UnsafeRawBufferPointer(rebasing: buffer[..<count])) {
            case .send(let more):
                guard !more.isEmpty else { continue }
                connecting.proxyOutbound = (connectingState?.proxyOutbound ?? []) + more
                proxyPump()
                return
            case .failed(let error):
                closeSession(error)
                return
            case .done(let leftover):
                proxyHandshakeSucceeded(handshake, leftover: leftover)
                return
            }
        }
    }

    private func proxyTransportError(_ error: Int32, _ handshake: ProxyHandshake) -> SocketError {
        if error == ECONNRESET || error == EPIPE { return handshake.receivedEnd() }
        return SocketError.systemError(error, "\(handshake.settings)")
    }

    private func proxyHandshakeSucceeded(_ handshake: ProxyHandshake, leftover: [UInt8]) {
        cancel(connectTimer)
        connecting.proxy = nil
        connecting.proxyOutbound = []
        if !leftover.isEmpty { leftover.withUnsafeBytes { prebuffer.append($0) } }
        // The kernel may hold more of the target's bytes: `pumpReads` looks (readable).
        becomeConnected(peer: nil, announce: true, proxied: handshake.target)
    }
}
