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
        let result = Mutex<Int32?>(nil)
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

    @Test func invalidOptionValuesAreRefused() throws {
        let (socket, _) = recordedSocket()
        #expect(throws: SocketError.self) { try socket.setKeepAlive(KeepAlive(idle: 0, interval: 1, count: 1)) }
        #expect(throws: SocketError.self) { try socket.setKeepAlive(KeepAlive(idle: 1, interval: 1, count: 1000)) }
        #expect(throws: SocketError.self) { try socket.setBufferSizes(send: -1, receive: 0) }
        #expect(throws: SocketError.self) { try socket.setWriteWatermarks(low: -1, high: 10) }
        socket.alternateAddressDelay = -3
        #expect(socket.alternateAddressDelay == 0)
        socket.maximumReadLength = 0
        #expect(socket.maximumReadLength == 1)
    }

    @Test func performRunsOnTheLoopWithTheDescriptors() throws {
        let pair = try Pair()
        defer { pair.close() }
        let seen = Mutex<(Bool, SocketDescriptors)?>(nil)
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
}
