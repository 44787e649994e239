// SPDX-License-Identifier: MIT
import Glibc
import SocketKitC

/// What `connect` was asked to reach.
enum ConnectTarget: Sendable {
    case host(String, port: UInt16)
    case address(SocketAddress)
}

extension TCPSocketCore {
    /// The loop side of `Socket.connect`: begins a connecting session and starts it.
    func requestConnect(to target: ConnectTarget, localEndpoints: Interfaces.Endpoints?,
                        timeout: Double) throws(SocketError) {
        let (target, proxy) = try proxied(target)
        switch target {
        case .address(let address):
            if address.family == .ipv4 && !configuration.isIPv4Enabled {
                throw SocketError(.badConfig, "IPv4 is disabled")
            }
            if address.family == .ipv6 && !configuration.isIPv6Enabled {
                throw SocketError(.badConfig, "IPv6 is disabled")
            }
            try beginSession(.connecting, start: {
                $0.startConnect(to: target, proxy: proxy, localEndpoints: localEndpoints, timeout: timeout)
            })
        case .host:
            try beginSession(.connecting, requireFamilies: true, start: {
                $0.startConnect(to: target, proxy: proxy, localEndpoints: localEndpoints, timeout: timeout)
            })
        }
    }

    /// The loop side of adopting a connected descriptor (`Socket.adopt`): from here on the
    /// socket owns `descriptor`, also if the session ends before it starts.
    func requestAdopt(_ descriptor: Int32, peer: SocketAddress, local: SocketAddress?, unix: Bool) throws(SocketError) {
        try beginSession(.connected, setUp: { published in
            published.peerAddress = peer
            published.localAddress = local
            published.isUnixDomain = unix
        }, start: { core in
            core.prepareConnected(fd: descriptor, unix: unix)
            core.adoptedDescriptor = true
            core.activatePrepared(announce: true)
        }, unused: {
            close(descriptor)
        })
    }

    /// Starts a session that connects to `target`: resolution (off the loop, for names),
    /// then Happy Eyeballs v2 (RFC 8305): each enabled family's addresses are asked for
    /// apart, and connecting starts with the first answer (the other family's first answer
    /// waits `resolutionDelay` for the preferred family's); the preferred family first, the
    /// families alternating, the next attempt started `alternateAddressDelay` after the
    /// previous one or at once when it fails, and addresses answered later join those not
    /// yet tried. The first to connect wins; the others are closed. The connect timeout
    /// covers resolution and connecting.
    /// With a `proxy`, `target` is the proxy, and the handshake follows the race
    /// (TCPSocketCore+Proxy.swift).
    func startConnect(to target: ConnectTarget, proxy: ProxyHandshake? = nil,
                      localEndpoints: Interfaces.Endpoints?, timeout: Double) {
        let session = self.session
        self.localEndpoints = localEndpoints
        if let proxy {
            connectHost = proxy.target.host
            connecting.proxy = proxy
        } else if case .host(let host, _) = target {
            connectHost = host
        } else {
            connectHost = nil
        }
        phase = .resolving
        if timeout >= 0 {
            arm(&connectTimer, deadline: deadline(afterSeconds: timeout)) { $0.connectTimerFired() }
        }
        switch target {
        case .address(let address):
            isUnixDomain = address.family == .unix
            beginAttempts([address])
        case .host(let host, let port):
            if let immediate = TCPSocketCore.addressesWithoutResolver(host: host, port: port) {
                beginAttempts(orderForHappyEyeballs(immediate))
                return
            }
            let loop = self.loop
            // Each request holds the core until it answers or is cancelled by the session's
            // end; the registration makes a stopping loop end the session (and a lingering
            // core let go of itself) before an answer that would find the loop stopped.
            startWaitingForResolution()
            var families: [SocketAddress.Family] = []
            if configuration.isIPv4Enabled { families.append(.ipv4) }
            if configuration.isIPv6Enabled { families.append(.ipv6) }
            resolutions = families.map { family in
                AddressResolver.shared.resolve(host: host, port: port, family: family) { [self] result in
                    loop.execute { self.resolutionFinished(result, family: family, session: session) }
                }
            }
        }
    }

    static func addressesWithoutResolver(host: String, port: UInt16) -> [SocketAddress]? {
        if host == "localhost" || host == "loopback" {
            return [.ipv4Loopback(port: port), .ipv6Loopback(port: port)]
        }
        if let literal = SocketAddress.parseIPLiteral(host, port: port) { return [literal] }
        return nil
    }

    /// The resolution delay (RFC 8305 §3: 50 ms recommended): how long the other family's
    /// answer, come first, waits for the preferred family's before connecting.
    var resolutionDelay: Double { configuration.resolutionDelay }

    var preferredFamily: SocketAddress.Family { configuration.isIPv4PreferredOverIPv6 ? .ipv4 : .ipv6 }

    /// One family's answer (RFC 8305 §3): the preferred family's starts connecting at once;
    /// the other's waits `resolutionDelay` for it; once attempts are under way, addresses
    /// join those not yet tried. Every family failed: the session ends with the first
    /// lookup's error.
    private func resolutionFinished(_ result: Result<[SocketAddress], SocketError>, family: SocketAddress.Family,
                                    session: UInt64) {
        guard session == self.session, phase == .resolving || phase == .connecting else { return }
        resolutions.removeAll { $0.family == family }
        let waitingForOthers = !resolutions.isEmpty
        if !waitingForOthers { stopWaitingForResolution() }
        var found: [SocketAddress] = []
        switch result {
        case .failure(let error):
            if resolutionError == nil { resolutionError = error }
        case .success(let addresses):
            found = addresses.filter { $0.family == family }
        }
        if phase == .connecting {
            mergeIntoAttempts(found)
            return
        }
        if family == preferredFamily || !waitingForOthers {
            // The preferred family answered (or nothing else will): connect with what is known.
            cancel(resolutionDelayTimer)
            let known = heldAddresses + found
            heldAddresses = []
            if known.isEmpty && waitingForOthers { return } // the preferred failed; the other may answer
            beginResolved(known)
        } else if !found.isEmpty {
            heldAddresses += found
            arm(&resolutionDelayTimer, deadline: deadline(afterSeconds: resolutionDelay)) { core in
                guard core.phase == .resolving else { return }
                let held = core.heldAddresses
                core.heldAddresses = []
                core.beginResolved(held)
            }
        }
    }

    /// Connects to the first addresses a name gave, or ends the session if it gave none.
    private func beginResolved(_ addresses: [SocketAddress]) {
        guard !addresses.isEmpty else {
            let error = resolutionError ?? SocketError(.resolution, osError: EAI_FAIL, "\(connectHost ?? ""): no usable address")
            EngineLog.log(.info, .resolver, "\"\(connectHost ?? "")\" did not resolve: \(error)")
            closeSession(error)
            return
        }
        beginAttempts(orderForHappyEyeballs(addresses))
    }

    /// Addresses answered once attempts are under way join those not yet tried, the families
    /// still alternating from the last attempt's (RFC 8305 §4). With nothing left to try
    /// before them, the next attempt starts now, or after the attempt delay when one is in
    /// flight. No address and nothing left to wait for: the session ends as the last
    /// attempt failed.
    private func mergeIntoAttempts(_ addresses: [SocketAddress]) {
        let tried = Array(connectAddresses[..<nextConnectAddress])
        let fresh = addresses.filter { !connectAddresses.contains($0) }
        if !fresh.isEmpty {
            let remaining = Array(connectAddresses[nextConnectAddress...]) + fresh
            let lastFamily = tried.last?.family
            let first: SocketAddress.Family = lastFamily == .ipv4 ? .ipv6 : (lastFamily == .ipv6 ? .ipv4 : preferredFamily)
            connectAddresses = tried + orderForHappyEyeballs(remaining, startingWith: first)
        }
        if nextConnectAddress < connectAddresses.count {
            if connectAttempts.isEmpty {
                startNextAttempt()
            } else if !(attemptTimer?.isScheduled ?? false) {
                arm(&attemptTimer, deadline: deadline(afterSeconds: configuration.alternateAddressDelay)) {
                    $0.attemptTimerFired()
                }
            }
        } else if connectAttempts.isEmpty && resolutions.isEmpty {
            closeSession(lastAttemptError ?? resolutionError ?? SocketError(.other, "no address to connect to"))
        }
    }

    /// Enabled families only, `first` (default: the preferred family) first, then
    /// alternating (RFC 8305 §4).
    func orderForHappyEyeballs(_ addresses: [SocketAddress], startingWith first: SocketAddress.Family? = nil) -> [SocketAddress] {
        let enabled = addresses.filter {
            ($0.family == .ipv4 && configuration.isIPv4Enabled) || ($0.family == .ipv6 && configuration.isIPv6Enabled)
        }
        let leading = first ?? preferredFamily
        let preferred = enabled.filter { $0.family == leading }
        let others = enabled.filter { $0.family != leading }
        var ordered: [SocketAddress] = []
        ordered.reserveCapacity(enabled.count)
        for index in 0..<max(preferred.count, others.count) {
            if index < preferred.count { ordered.append(preferred[index]) }
            if index < others.count { ordered.append(others[index]) }
        }
        return ordered
    }

    private func beginAttempts(_ addresses: [SocketAddress]) {
        guard !addresses.isEmpty else {
            closeSession(SocketError(.other, "the host has no address of an enabled family"))
            return
        }
        phase = .connecting
        connectAddresses = addresses
        nextConnectAddress = 0
        startNextAttempt()
    }

    private func startNextAttempt() {
        cancel(attemptTimer)
        while nextConnectAddress < connectAddresses.count {
            let address = connectAddresses[nextConnectAddress]
            nextConnectAddress += 1
            var localAddress: SocketAddress? = nil
            if let localEndpoints, address.family != .unix {
                localAddress = address.family == .ipv4 ? localEndpoints.ipv4 : localEndpoints.ipv6
                guard localAddress != nil else {
                    lastAttemptError = SocketError(.badParam, "the interface has no \(address.family == .ipv4 ? "IPv4" : "IPv6") address")
                    continue
                }
            }
            do throws(SocketError) {
                let attempt = try ConnectionAttempt.start(to: address, from: localAddress, core: self)
                connectAttempts.append(attempt)
                if nextConnectAddress < connectAddresses.count {
                    arm(&attemptTimer, deadline: deadline(afterSeconds: configuration.alternateAddressDelay)) {
                        $0.attemptTimerFired()
                    }
                }
                return
            } catch {
                lastAttemptError = error
            }
        }
        // Every address tried: end, unless another family's answer is still to come.
        if connectAttempts.isEmpty && resolutions.isEmpty {
            closeSession(lastAttemptError ?? SocketError(.other, "no address to connect to"))
        }
    }

    func attemptTimerFired() {
        guard phase == .connecting, nextConnectAddress < connectAddresses.count else { return }
        startNextAttempt()
    }

    func attemptFailed(_ attempt: ConnectionAttempt, error: Int32) {
        guard phase == .connecting else { return }
        lastAttemptError = SocketError.systemError(error, "connect(\(attempt.address))")
        attempt.close()
        connectAttempts.removeAll { $0 === attempt }
        if nextConnectAddress < connectAddresses.count {
            startNextAttempt()
        } else if connectAttempts.isEmpty && resolutions.isEmpty {
            closeSession(lastAttemptError)
        }
    }

    /// `events` is the edge that completed the connect: with edge-triggered epoll it is the
    /// only report of what had already happened (the peer's data, or its FIN), so it is
    /// taken into account here rather than lost.
    func attemptSucceeded(_ winner: ConnectionAttempt, events: UInt32) {
        guard phase == .connecting, let winnerRegistration = winner.registration else { return }
        cancel(attemptTimer)
        let proxy = connectingState?.proxy
        // Through a proxy, the connect timeout covers its handshake too.
        if proxy == nil { cancel(connectTimer) }
        for attempt in connectAttempts where attempt !== winner { attempt.close() }
        connectAttempts.removeAll()
        connectAddresses.removeAll()
        localEndpoints = nil
        lastAttemptError = nil
        fd = winner.fd
        registration = winnerRegistration
        winner.detach()
        loop.replaceHandler(winnerRegistration, with: self)
        isUnixDomain = winner.address.family == .unix
        if let proxy {
            beginProxyHandshake(proxy, events: events)
            return
        }
        becomeConnected(peer: winner.address, announce: true)
        if events & (EPOLLRDHUP.rawValue | EPOLLHUP.rawValue) != 0 && phase == .connected {
            peerHalfClosed = true
        }
        if configuration.fastOpen && !isUnixDomain && phase == .connected && !hasQueuedWrites {
            // TCP_FASTOPEN_CONNECT with a cookie: the kernel reported the socket writable
            // without a SYN, which it sends with the first write. Nothing to write (a server
            // that speaks first): an empty send sends the SYN alone. On a socket that is
            // connecting or connected (a write made in didConnect went first) it does nothing.
            _ = skc_send(fd, nil, 0, SystemCalls.sendFlags | Int32(MSG_DONTWAIT))
        }
    }

    func connectTimerFired() {
        guard phase == .resolving || phase == .connecting || phase == .proxying else { return }
        if phase == .proxying, let proxy = connectingState?.proxy {
            closeSession(SocketError(.connectTimeout, "\(proxy.settings) did not finish its handshake before the connect timeout"))
            return
        }
        closeSession(SocketError(.connectTimeout, "attempt to connect to host timed out"))
    }

    /// The connection is up: publish it, tell the user, then run what was queued meanwhile.
    /// `proxied`: the target a proxy connected us to (`didConnect` reports it; the peer
    /// address stays the proxy's).
    func becomeConnected(peer: SocketAddress?, announce: Bool, proxied: ProxiedTarget? = nil) {
        phase = .connected
        readable = true
        writable = true
        applyTCPOptions(initial: true)
        if isUnixDomain { updateReceivesDescriptors() }
        let session = self.session
        // Accepted and adopted connections published their local address already.
        let local = publishedState.localAddress ?? SystemCalls.localAddress(fd)
        let remote = peer ?? SystemCalls.peerAddress(fd)
        let unix = isUnixDomain
        if publishedState.status != .disconnected {
            publish { published in
                published.status = .connected
                published.localAddress = local
                published.peerAddress = remote
                published.isUnixDomain = unix
                // Only when set: an accepted connection keeps its PROXY protocol details,
                // which share the field (`SocketPublishedState.roleDetails`); a session
                // starts with neither.
                if let proxied { published.proxiedTarget = proxied }
            }
        }
        if announce, let remote {
            emit(.didConnect(peer: remote, proxied: proxied))
            guard session == self.session, phase == .connected else { return }
        }
        if hasQueuedWrites {
            startHeadWrite()
            scheduleWriteFlush()
        }
        scheduleReadPump()
    }

    /// Takes an already connected descriptor (adopted, or accepted by a listener) as this
    /// core's session, without touching the loop yet: an accepted child is prepared on the
    /// listener's thread, handed to the user in `didAccept` (where reads and writes may
    /// already be queued), and activated on its own loop afterwards.
    func prepareConnected(fd descriptor: Int32, unix: Bool) {
        fd = descriptor
        isUnixDomain = unix
        connectHost = nil
        phase = .connected
        readable = false
        writable = false
    }

    /// Registers the prepared descriptor and starts I/O. `announce` reports `didConnect`
    /// (adopted sockets, as upstream; accepted ones are announced by `didAccept`).
    func activatePrepared(announce: Bool) {
        guard phase == .connected, fd >= 0, registration == nil else { return }
        do {
            registration = try loop.register(fd: fd, events: TCPSocketCore.connectionEvents, handler: self)
        } catch {
            closeSession(error)
            return
        }
        // The peer was published when the descriptor was prepared (accept, adopt).
        becomeConnected(peer: publishedState.peerAddress, announce: announce)
    }
}
