// SPDX-License-Identifier: MIT
import Glibc
import Synchronization
import Testing
@testable import SocketKit

/// SO_REUSEPORT on listeners, and a listener with one accepting socket per loop of its group
/// (issue 32, item 3).
@Suite("Multi-loop listeners")
struct MultiLoopListenerTests {
    @Test func reusePortLetsListenersShareAPort() throws {
        let (first, _) = recordedSocket("first")
        first.reusePort = true
        try first.accept(onInterface: "127.0.0.1", port: 0)
        defer { first.disconnect() }
        #expect(descriptorOption(first, SOL_SOCKET, SO_REUSEPORT) == 1)
        let (second, _) = recordedSocket("second")
        #expect { try second.accept(onInterface: "127.0.0.1", port: first.localPort) } throws: {
            ($0 as? SocketError)?.osError == EADDRINUSE
        }
        second.reusePort = true
        #expect(second.reusePort)
        try second.accept(onInterface: "127.0.0.1", port: first.localPort)
        second.disconnect()
        #expect(!Socket().reusePort)
    }

    /// Who accepted each connection, on which thread, and where the connection lives.
    final class Acceptances: SocketDelegate, @unchecked Sendable {
        struct Seen: Sendable {
            let listenerIsThePrimary: Bool
            let ranOnTheConnectionsLoop: Bool
            let loopIndex: Int
        }
        let seen = LockedValue<[Seen]>([])
        let accepted = LockedValue<[Socket]>([])
        let changed = ConditionLock()
        nonisolated(unsafe) var primary: Socket? = nil

        func socket(_ listener: Socket, didAcceptNewSocket newSocket: Socket) {
            seen.withLock {
                $0.append(Seen(listenerIsThePrimary: listener === primary, ranOnTheConnectionsLoop: newSocket.eventLoop.inEventLoop,
                               loopIndex: newSocket.eventLoop.index))
            }
            accepted.withLock { $0.append(newSocket) }
            changed.withLock { changed.broadcast() }
        }

        func wait(for count: Int) -> [Seen] {
            let limit = deadline(afterSeconds: 20)
            changed.withLock {
                while seen.withLock({ $0.count }) < count {
                    if !changed.wait(untilDeadline: limit) { break }
                }
            }
            return seen.withLock { $0 }
        }
    }

    @Test func aListenerOnEveryLoopSpreadsConnectionsAndKeepsEachOnTheLoopThatAcceptedIt() throws {
        let group = EventLoopGroup(loopCount: 2)
        defer { try? group.shutdown() }
        let delegate = Acceptances()
        let listener = Socket(delegate: delegate, eventLoop: group.loops[0])
        delegate.primary = listener
        listener.acceptsOnEveryLoop = true
        try listener.accept(onInterface: "127.0.0.1", port: 0)
        #expect(listener.isAccepting && listener.acceptsOnEveryLoop)
        #expect(descriptorOption(listener, SOL_SOCKET, SO_REUSEPORT) == 1)
        // The kernel spreads by the connection's addresses: with 32 clients from different
        // ports, both sockets get some (all on one: 2^-31).
        var clients: [RawSocket] = []
        defer { for client in clients { client.close() } }
        for _ in 0..<32 { clients.append(try RawSocket.connect(port: listener.localPort)) }
        let seen = delegate.wait(for: 32)
        #expect(seen.count == 32)
        #expect(seen.allSatisfy { $0.listenerIsThePrimary && $0.ranOnTheConnectionsLoop })
        #expect(Set(seen.map(\.loopIndex)) == [0, 1], "every connection on one loop: \(seen.map(\.loopIndex))")
        // Each connection works where it lives.
        let sockets = delegate.accepted.withLock { $0 }
        let (echo, echoRecorder) = (sockets[0], Recorder("echo"))
        echo.delegate = echoRecorder
        try echo.read(toLength: 2, tag: 1)
        // (Which raw client it is does not matter: every client sends, one is read.)
        for client in clients { try client.send("hi") }
        #expect(echoRecorder.waitForBytes(2) == bytes("hi"))

        // A new delegate reaches every loop's socket at once.
        let second = Acceptances()
        second.primary = listener
        listener.delegate = second
        var more: [RawSocket] = []
        defer { for client in more { client.close() } }
        for _ in 0..<32 { more.append(try RawSocket.connect(port: listener.localPort)) }
        let later = second.wait(for: 32)
        #expect(later.count == 32 && Set(later.map(\.loopIndex)) == [0, 1])
        #expect(delegate.seen.withLock { $0.count } == 32)

        // Disconnecting ends every loop's socket before it returns: the port refuses.
        let port = listener.localPort
        listener.disconnect()
        #expect(listener.isDisconnected)
        #expect(MultiLoopListeners.siblings(of: listener.core).isEmpty)
        #expect(throws: (any Error).self) { try RawSocket.connect(port: port) }
        for socket in sockets + second.accepted.withLock({ $0 }) { socket.disconnect() }
    }

    @Test func aGroupOfOneLoopOrAUnixPathListensOnce() throws {
        let group = EventLoopGroup(loopCount: 1)
        defer { try? group.shutdown() }
        let recorder = Recorder("one")
        let listener = Socket(delegate: recorder, eventLoop: group.loops[0])
        listener.acceptsOnEveryLoop = true
        try listener.accept(onInterface: "127.0.0.1", port: 0)
        #expect(MultiLoopListeners.siblings(of: listener.core).isEmpty)
        let client = try RawSocket.connect(port: listener.localPort)
        defer { client.close() }
        #expect(recorder.waitForAccepted(1).count == 1)
        listener.disconnect()

        let twoLoops = EventLoopGroup(loopCount: 2)
        defer { try? twoLoops.shutdown() }
        let unix = Socket(delegate: recorder, eventLoop: twoLoops.loops[0])
        unix.acceptsOnEveryLoop = true
        try unix.accept(onUnixPath: temporaryUnixPath("every-loop"))
        #expect(MultiLoopListeners.siblings(of: unix.core).isEmpty)
        unix.disconnect()
    }

    /// A port another socket holds without SO_REUSEPORT is refused, and nothing stays.
    @Test func aPortTakenWithoutReusePortIsRefusedAndNothingStays() throws {
        let group = EventLoopGroup(loopCount: 2)
        defer { try? group.shutdown() }
        let blocker = try RawSocket.listen()
        defer { blocker.close() }
        let recorder = Recorder("failing")
        let listener = Socket(delegate: recorder, eventLoop: group.loops[0])
        listener.acceptsOnEveryLoop = true
        #expect { try listener.accept(onInterface: "127.0.0.1", port: blocker.localPort) } throws: {
            ($0 as? SocketError)?.osError == EADDRINUSE
        }
        #expect(listener.isDisconnected)
        #expect(MultiLoopListeners.siblings(of: listener.core).isEmpty)
    }
}
