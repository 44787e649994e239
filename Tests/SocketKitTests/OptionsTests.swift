// SPDX-License-Identifier: MIT
import Glibc
import Synchronization
import Testing
@testable import SocketKit

/// TCP options are first-class settings: applied when a connection is established, at once
/// when changed while connected, and inherited by accepted sockets.
@Suite("TCP options")
struct OptionsTests {
    /// Reads an integer option of the socket's descriptor on its loop.
    private func option(_ socket: Socket, _ level: Int32, _ name: Int32) -> Int32? {
        let result = LockedValue<Int32?>(nil)
        let done = Latch()
        socket.perform { descriptors in
            result.withLock { $0 = SystemCalls.getOption(descriptors.primary, level, name) }
            done.open()
        }
        done.wait()
        return result.withLock { $0 }
    }

    @Test func optionsSetBeforeConnectingApplyOnConnectAndChangesApplyAtOnce() throws {
        let pair = try Pair(configureClient: { client in
            client.noDelay = true
            try client.setKeepAlive(KeepAlive(idle: 30, interval: 5, count: 3))
            try client.setBufferSizes(send: 256 * 1024, receive: 128 * 1024)
        })
        defer { pair.close() }
        let tcp = Int32(IPPROTO_TCP)
        #expect(option(pair.client, tcp, TCP_NODELAY) == 1)
        #expect(option(pair.client, SOL_SOCKET, SO_KEEPALIVE) == 1)
        #expect(option(pair.client, tcp, TCP_KEEPIDLE) == 30)
        #expect(option(pair.client, tcp, TCP_KEEPINTVL) == 5)
        #expect(option(pair.client, tcp, TCP_KEEPCNT) == 3)
        #expect((option(pair.client, SOL_SOCKET, SO_SNDBUF) ?? 0) >= 256 * 1024)
        #expect(pair.client.keepAlive == KeepAlive(idle: 30, interval: 5, count: 3))
        #expect(pair.client.sendBufferSize == 256 * 1024 && pair.client.receiveBufferSize == 128 * 1024)

        pair.client.noDelay = false
        try pair.client.setKeepAlive(nil)
        #expect(option(pair.client, tcp, TCP_NODELAY) == 0)
        #expect(option(pair.client, SOL_SOCKET, SO_KEEPALIVE) == 0)
    }

    @Test func noDelayIsOnByDefaultAndOffWhenAsked() throws {
        // On by default, as asyncio, Go and curl (see Socket.noDelay).
        let pair = try Pair(configureListener: { $0.noDelay = false })
        defer { pair.close() }
        #expect(pair.client.noDelay)
        #expect(option(pair.client, Int32(IPPROTO_TCP), TCP_NODELAY) == 1)
        #expect(!pair.server.noDelay) // inherited from the listener
        #expect(option(pair.server, Int32(IPPROTO_TCP), TCP_NODELAY) == 0)
        #expect(Socket().noDelay)
    }

    @Test func acceptedSocketsInheritTheListenersOptions() throws {
        let pair = try Pair(configureListener: { listener in
            listener.noDelay = true
            try listener.setKeepAlive(KeepAlive(idle: 77, interval: 7, count: 2))
        })
        defer { pair.close() }
        #expect(pair.server.noDelay)
        #expect(option(pair.server, Int32(IPPROTO_TCP), TCP_NODELAY) == 1)
        #expect(option(pair.server, Int32(IPPROTO_TCP), TCP_KEEPIDLE) == 77)
    }

    @Test func anAdoptedDescriptorGetsTheSocketsOptionsEvenKeepAliveOff() throws {
        // SocketKit skips turning keep-alive off on connections it made itself (they start
        // with it off): an adopted descriptor, whose options are unknown, still gets it.
        let listenerRecorder = Recorder("listener")
        let listener = Socket(delegate: listenerRecorder)
        defer { listener.disconnect() }
        try listener.accept(onInterface: "127.0.0.1", port: 0)
        let raw = try RawSocket.connect(port: listener.localPort)
        var on: Int32 = 1
        #expect(setsockopt(raw.fd, SOL_SOCKET, SO_KEEPALIVE, &on, socklen_t(MemoryLayout<Int32>.size)) == 0)
        let recorder = Recorder("adopted")
        let adopted = try Socket(connectedSocketDescriptor: raw.detach(), delegate: recorder)
        #expect(recorder.waitForConnect())
        #expect(option(adopted, SOL_SOCKET, SO_KEEPALIVE) == 0)
        adopted.disconnect()
    }

    @Test func acceptedConnectionsKnowTheirLocalAddressFromSpecificAndWildcardListeners() throws {
        // A listener on one address gives its connections that address without asking the
        // kernel; a wildcard listener's connections ask (0.0.0.0 is no local address).
        let pair = try Pair() // listening on 127.0.0.1
        defer { pair.close() }
        #expect(pair.server.localHost == "127.0.0.1")
        #expect(pair.server.localPort == pair.listener.localPort)
        let recorder = Recorder("wildcard")
        let listener = Socket(delegate: recorder)
        defer { listener.disconnect() }
        try listener.accept(onPort: 0)
        let clientRecorder = Recorder("client") // delegates are held weakly
        let client = Socket(delegate: clientRecorder)
        defer { client.disconnect() }
        try client.connect(toHost: "127.0.0.1", port: listener.localPort)
        guard let accepted = recorder.waitForAccepted(1).first else {
            Issue.record("nothing accepted")
            return
        }
        #expect(accepted.localHost == "127.0.0.1")
        #expect(accepted.localPort == listener.localPort)
        accepted.disconnect()
    }

    @Test func invalidOptionValuesAreRefused() throws {
        let (socket, _) = recordedSocket()
        #expect(throws: SocketError.self) { try socket.setKeepAlive(KeepAlive(idle: 0, interval: 1, count: 1)) }
        #expect(throws: SocketError.self) { try socket.setKeepAlive(KeepAlive(idle: 1, interval: 1, count: 1000)) }
        #expect(throws: SocketError.self) { try socket.setBufferSizes(send: -1, receive: 0) }
        #expect(throws: SocketError.self) { try socket.setWriteWatermarks(low: -1, high: 10) }
        socket.alternateAddressDelay = -3
        #expect(socket.alternateAddressDelay == 0)
        // A maximum read length of 0 (it was silently made 1) or less is refused.
        for length in [0, -1, Int.min] {
            let refused = #expect(throws: SocketError.self) { try socket.setMaximumReadLength(length) }
            #expect(refused?.code == .badParam)
        }
        #expect(socket.maximumReadLength == 16 * 1024 * 1024)
        try socket.setMaximumReadLength(1)
        #expect(socket.maximumReadLength == 1)
    }

    @Test func performRunsOnTheLoopWithTheDescriptors() throws {
        let pair = try Pair()
        defer { pair.close() }
        let seen = LockedValue<(Bool, SocketDescriptors)?>(nil)
        let done = Latch()
        let loop = pair.listener.eventLoop
        pair.listener.perform { descriptors in
            seen.withLock { $0 = (loop.inEventLoop, descriptors) }
            done.open()
        }
        #expect(done.wait())
        let (onLoop, descriptors) = try #require(seen.withLock { $0 })
        #expect(onLoop)
        #expect(descriptors.ipv4 >= 0 && descriptors.primary == descriptors.ipv4)
        #expect(descriptors.unix == -1)
    }

    /// Upstream's socketFD is -1 for Unix-domain sockets; here `unix` and `primary` hold it,
    /// for the listener and for both ends of a connection.
    @Test func performShowsUnixDomainDescriptors() throws {
        func descriptors(_ socket: Socket) -> SocketDescriptors? {
            let seen = LockedValue<SocketDescriptors?>(nil)
            let done = Latch()
            socket.perform { found in
                seen.withLock { $0 = found }
                done.open()
            }
            return done.wait() ? seen.withLock { $0 } : nil
        }
        let path = temporaryUnixPath("descriptors")
        let (listener, listenerRecorder) = recordedSocket()
        try listener.accept(onUnixPath: path)
        defer { listener.disconnect() }
        let (client, clientRecorder) = recordedSocket()
        try client.connect(toUnixPath: path, timeout: 5)
        #expect(clientRecorder.waitForConnect())
        let server = try #require(listenerRecorder.waitForAccepted(1).first)
        defer { client.disconnect(); server.disconnect() }
        for socket in [listener, client, server] {
            let found = try #require(descriptors(socket))
            #expect(found.unix >= 0 && found.primary == found.unix && found.ipv4 == -1 && found.ipv6 == -1, "\(found)")
            #expect(SystemCalls.socketFamily(found.unix) == AF_UNIX)
        }
    }
}
