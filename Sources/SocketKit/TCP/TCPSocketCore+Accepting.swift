// SPDX-License-Identifier: MIT
import Glibc
import SocketKitC

extension TCPSocketCore {
    /// Accepts per readiness event before yielding to the other sockets of the loop.
    static let acceptsPerEvent = 64
    static let firstAcceptBackoff: UInt64 = 50_000_000
    static let longestAcceptBackoff: UInt64 = 1_000_000_000

    /// The loop side of `Socket.accept`: makes the listeners (`make`, given the socket's
    /// configuration: families, options), publishes their addresses and starts listening on them. Until the
    /// session starts they are bound and listening, so a connection made meanwhile waits in
    /// the kernel's backlog.
    /// `multiLoop`: a listener of a multi-loop listener (true: its primary; see
    /// `MultiLoopListeners`).
    func requestListen(requireFamilies: Bool, multiLoop: Bool? = nil,
                       _ make: (SocketConfiguration) throws(SocketError) -> [ListenerFactory.Listener]) throws(SocketError) {
        try checkSessionMayBegin(requireFamilies: requireFamilies)
        let made = try make(configuration)
        try beginSession(.accepting, setUp: { published in
            published.listenerAddresses = made.map(\.address)
            published.isUnixDomain = made.contains { $0.address.family == .unix }
        }, start: { core in
            core.startAccepting(made)
            if let multiLoop, core.phase == .accepting { core.keepAcceptedConnectionsOnThisLoop(spreading: multiLoop) }
        }, unused: {
            for listener in made {
                close(listener.fd)
                listener.unixFile?.unlinkIfStillOurs()
            }
        })
    }

    /// Starts a listening session on descriptors made by `ListenerFactory`.
    private func startAccepting(_ made: [ListenerFactory.Listener]) {
        phase = .accepting
        listeners = made.map { ListenerEndpoint(core: self, fd: $0.fd, address: $0.address) }
        unixListenerFile = made.lazy.compactMap(\.unixFile).first
        for endpoint in listeners {
            do {
                endpoint.registration = try loop.register(fd: endpoint.fd, events: TCPSocketCore.listenerEvents,
                                                          handler: endpoint)
            } catch {
                closeSession(error)
                return
            }
        }
    }

    func closeListeners() {
        for endpoint in listeners {
            if let registration = endpoint.registration { loop.deregister(registration, fd: endpoint.fd) }
            close(endpoint.fd)
        }
        listeners.removeAll()
        closeProxyHeaderReaders()
        unixListenerFile?.unlinkIfStillOurs()
        unixListenerFile = nil
    }

    /// Accepts pending connections on `endpoint`. Out of descriptors (EMFILE, ENFILE) or
    /// kernel memory, the listener stops, tells the delegate once, and retries on a timer
    /// that backs off from 50 ms to 1 s: it never spins, and serves again by itself as soon
    /// as descriptors are free.
    func acceptConnections(on endpoint: ListenerEndpoint) {
        guard phase == .accepting, !acceptPaused, listeners.contains(where: { $0 === endpoint }) else { return }
        let session = self.session
        for _ in 0..<TCPSocketCore.acceptsPerEvent {
            var storage = sockaddr_storage()
            var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
            let child = withUnsafeMutablePointer(to: &storage) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    skc_accept_nonblocking(endpoint.fd, $0, &length)
                }
            }
            if child >= 0 {
                if acceptFailureReported {
                    EngineLog.log(.info, .accept, "the listener on \(listenerDescription) accepts again")
                }
                acceptBackoff = 0
                acceptFailureReported = false
                let peer = withUnsafeBytes(of: &storage) { SocketAddress(storage: $0.baseAddress!, length: length) }
                if configuration.proxyProtocol != .none {
                    // Reported as accepted once its header is complete (or closed).
                    startReadingProxyHeader(child, peer: peer, via: endpoint)
                    continue
                }
                handleAccepted(child, peer: peer, via: endpoint)
                // The callback may have ended this listening session (and started another).
                guard phase == .accepting, session == self.session else { return }
                continue
            }
            let error = errno
            switch error {
            case EAGAIN, EWOULDBLOCK:
                return
            case EINTR, ECONNABORTED, EPROTO, EPERM, ENETDOWN, ENOPROTOOPT, EHOSTDOWN, ENONET,
                 EHOSTUNREACH, EOPNOTSUPP, ENETUNREACH:
                continue
            default:
                // EMFILE, ENFILE, ENOBUFS, ENOMEM, or anything unexpected: back off.
                pauseAccepting(SocketError.systemError(error, "accept"))
                return
            }
        }
        // More may be waiting and the edge will not fire again: come back after the others.
        acceptContinuationScheduled = true
        loop.scheduleEndOfIterationWork(self)
    }

    func acceptOnAllListeners() {
        let session = self.session
        for endpoint in listeners {
            guard phase == .accepting, !acceptPaused, session == self.session else { return }
            acceptConnections(on: endpoint)
        }
    }

    private func pauseAccepting(_ error: SocketError) {
        acceptPaused = true
        acceptBackoff = acceptBackoff == 0
            ? TCPSocketCore.firstAcceptBackoff
            : min(acceptBackoff * 2, TCPSocketCore.longestAcceptBackoff)
        arm(&acceptTimer, deadline: monotonicNanoseconds() + acceptBackoff) { $0.acceptTimerFired() }
        if !acceptFailureReported {
            acceptFailureReported = true
            EngineLog.log(.warning, .accept, "the listener on \(listenerDescription) stopped accepting (\(error.message)); "
                + "retrying in \(acceptBackoff / 1_000_000) ms, backing off to \(TCPSocketCore.longestAcceptBackoff / 1_000_000) ms")
            emit(.didNotAccept(error))
        } else {
            EngineLog.log(.debug, .accept, "the listener on \(listenerDescription) still cannot accept (\(error.message)); "
                + "retrying in \(acceptBackoff / 1_000_000) ms")
        }
    }

    private var listenerDescription: String {
        listeners.map { "\($0.address)" }.joined(separator: ", ")
    }

    func acceptTimerFired() {
        guard phase == .accepting else { return }
        acceptPaused = false
        acceptOnAllListeners()
    }

    /// Wraps an accepted descriptor in a new socket on the loop the delegate picks (or the
    /// next loop of the group), hands it to the user in `didAccept`, then starts its I/O on
    /// its own loop: nothing of the child reaches the user before `didAccept`.
    /// `proxy`: what a PROXY protocol header said (`peer` is then the header's source).
    func handleAccepted(_ descriptor: Int32, peer: SocketAddress?, via endpoint: ListenerEndpoint,
                        proxy: ProxiedConnection? = nil) {
        guard let owner else {
            close(descriptor)
            return
        }
        let unix = endpoint.address.family == .unix
        let session = self.session
        // One of a multi-loop listener's sockets keeps its connections on its own loop: no
        // hand-off to another thread, and no hook to ask.
        let childLoop: EventLoop
        if keepsAcceptedConnectionsOnItsLoop {
            childLoop = loop
        } else {
            // The new-connection hook is user code, so it runs as a callout: what it raises
            // (a disconnect's didDisconnect) waits until it returns, and closing its own
            // listener from it frees nothing the loop is using.
            var chosenLoop: EventLoop? = nil
            callout(owner) { chosenLoop = peer.flatMap { owner.eventLoopForAcceptedConnection(from: $0) } }
            // The hook may have ended this listening session (and reported that): a
            // connection accepted meanwhile must not follow the session's didDisconnect.
            guard phase == .accepting, session == self.session else {
                close(descriptor)
                return
            }
            childLoop = chosenLoop ?? loop.group?.next() ?? loop
        }
        // A listener bound to one address accepts on exactly that address: no system call.
        let local = proxy?.destination
            ?? (unix || !endpoint.address.isUnspecifiedIP ? endpoint.address : SystemCalls.localAddress(descriptor))
        let child = TCPSocketCore(loop: childLoop, configuration: configuration)
        // The child's first session, published before anyone else knows the child: from here
        // on its own loop is its only writer.
        child.publish { published in
            published.beginSession(.connected)
            published.localAddress = local
            published.peerAddress = peer
            published.isUnixDomain = unix
            published.proxied = proxy
        }
        child.prepareConnected(fd: descriptor, unix: unix)
        // The child starts once its didAccept has been delivered (Socket.activateAccepted).
        emit(.didAccept(child))
    }

    /// For a socket whose loop has stopped (called once the loop thread has finished, or on
    /// it): close a descriptor the loop never knew about (an accepted child that was never
    /// activated); registered ones were closed by the loop itself.
    func abandon() {
        if fd >= 0 { close(fd) }
        fd = -1
        phase = .idle
    }
}
