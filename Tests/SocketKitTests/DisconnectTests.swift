// SPDX-License-Identifier: MIT
import Glibc
import Testing
@testable import SocketKit

/// Ending connections: `socketDidDisconnect` exactly once and last, the disconnect-after
/// variants, half-close, and disconnecting or releasing from inside a callback.
@Suite("Disconnecting")
struct DisconnectTests {
    @Test func disconnectDropsPendingReadsAndReportsOnceWithoutError() throws {
        let pair = try ReadTests.RawPair()
        try pair.socket.read(toLength: 100, tag: 1)
        try pair.socket.read(toLength: 100, tag: 2)
        pair.socket.disconnect()
        #expect(pair.socket.isDisconnected)
        #expect(pair.socket.connectedHost == nil)
        #expect(pair.recorder.waitForDisconnect() == .some(nil))
        #expect(try pair.peer.receiveUntilEndOfStream().isEmpty)
        // Nothing else arrives afterwards, and a second disconnect does nothing.
        pair.socket.disconnect()
        #expect(!pair.recorder.wait(timeout: 0.2) { $0.filter(\.isDisconnect).count > 1 })
        #expect(pair.recorder.events == [.connected(host: "127.0.0.1", port: pair.rawListener.localPort), .disconnected(nil)])
    }

    @Test func disconnectingAnIdleSocketDoesNothing() throws {
        let (socket, recorder) = recordedSocket()
        socket.disconnect()
        socket.disconnectAfterWriting()
        #expect(!recorder.wait(timeout: 0.2) { !$0.isEmpty })
    }

    @Test func disconnectAfterReadingWaitsForQueuedReads() throws {
        let pair = try ReadTests.RawPair()
        try pair.socket.read(toData: Socket.lf, tag: 1)
        try pair.socket.read(toData: Socket.lf, tag: 2)
        pair.socket.disconnectAfterReading()
        #expect(throws: SocketError.self) { try pair.socket.read() }
        #expect(throws: SocketError.self) { try pair.socket.write([1]) }
        #expect(!pair.recorder.wait(timeout: 0.2) { $0.contains(where: \.isDisconnect) })
        try pair.peer.send("one\ntwo\n")
        #expect(pair.recorder.waitForDisconnect() == .some(nil))
        #expect(pair.recorder.reads().map(\.tag) == [1, 2])
        #expect(pair.recorder.events.last?.isDisconnect == true)
    }

    @Test func disconnectAfterReadingAndWritingWaitsForBoth() throws {
        let pair = try ReadTests.RawPair()
        try pair.socket.read(toLength: 3, tag: 1)
        try pair.socket.write(bytes("reply"), tag: 2)
        pair.socket.disconnectAfterReadingAndWriting()
        #expect(try pair.peer.receive(exactly: 5) == bytes("reply"))
        #expect(!pair.recorder.wait(timeout: 0.2) { $0.contains(where: \.isDisconnect) })
        try pair.peer.send("abc")
        #expect(pair.recorder.waitForDisconnect() == .some(nil))
        #expect(try pair.peer.receiveUntilEndOfStream().isEmpty)
    }

    @Test func halfCloseKeepsTheSocketOpenForWriting() throws {
        let pair = try ReadTests.RawPair { $0.autoDisconnectOnClosedReadStream = false }
        try pair.peer.send("last words")
        pair.peer.shutdownWrite()
        try pair.socket.read(toLength: 10, tag: 1)
        try pair.socket.read(tag: 2)
        #expect(pair.recorder.wait { $0.contains(.closedReadStream) })
        #expect(pair.recorder.reads().map(\.bytes) == [bytes("last words")])
        #expect(pair.socket.isConnected)
        try pair.socket.write(bytes("goodbye"), tag: 3)
        #expect(try pair.peer.receive(exactly: 7) == bytes("goodbye"))
        pair.socket.disconnectAfterWriting()
        #expect(try pair.peer.receiveUntilEndOfStream().isEmpty)
        #expect(pair.recorder.waitForDisconnect() == .some(nil))
        #expect(pair.recorder.events.filter { $0 == .closedReadStream }.count == 1)
    }

    @Test func aResetIsReportedWithItsErrnoEvenWithNothingQueued() throws {
        let pair = try ReadTests.RawPair()
        pair.peer.reset()
        let error = try #require(pair.recorder.waitForDisconnect())
        #expect(error?.code == .system)
        #expect(error?.osError == ECONNRESET)
    }

    @Test func disconnectFromInsideACallbackComesAfterItAndLast() throws {
        let pair = try ReadTests.RawPair()
        pair.recorder.onRead = { sock, data, _ in
            sock.disconnect()
            #expect(sock.isDisconnected)
            #expect(data == bytes("ping"), "the data of the running callback stays valid")
        }
        try pair.socket.read(toLength: 4, tag: 1)
        try pair.socket.read(toLength: 4, tag: 2)
        try pair.peer.send("pingpong")
        #expect(pair.recorder.waitForDisconnect() == .some(nil))
        #expect(pair.recorder.reads().map(\.tag) == [1])
        #expect(pair.recorder.callbacksAfterDisconnect == 0)
        #expect(!pair.recorder.wait(timeout: 0.2) { $0.count > 3 })
    }

    @Test func disconnectAndReconnectFromInsideACallback() throws {
        let listenerRecorder = Recorder()
        let listener = Socket(delegate: listenerRecorder)
        try listener.accept(onInterface: "127.0.0.1", port: 0)
        defer { listener.disconnect() }
        let port = listener.localPort
        let (socket, recorder) = recordedSocket()
        var reconnected = false
        recorder.onConnect = { sock in
            guard !reconnected else { return }
            reconnected = true
            sock.disconnect()
            #expect(throws: Never.self) { try sock.connect(toHost: "127.0.0.1", port: port) }
            #expect(throws: Never.self) { try sock.write(bytes("second session")) }
        }
        try socket.connect(toHost: "127.0.0.1", port: port)
        let accepted = listenerRecorder.waitForAccepted(2)
        #expect(accepted.count == 2)
        #expect(recorder.wait { $0.filter { if case .connected = $0 { return true }; return false }.count == 2 })
        let events = recorder.events
        #expect(events.count >= 3)
        #expect(events.dropFirst().first == .disconnected(nil))
        #expect(events.dropFirst(3).allSatisfy { $0 == .wrote(tag: 0) })
        let serverRecorder = Recorder()
        accepted[1].delegate = serverRecorder
        try accepted[1].read(toLength: 14)
        #expect(serverRecorder.waitForBytes(14) == bytes("second session"))
        socket.disconnect()
    }

    @Test func releasingTheLastReferenceClosesTheConnection() throws {
        let rawListener = try RawSocket.listen()
        defer { rawListener.close() }
        var socket: Socket? = recordedSocket().0
        try socket?.connect(toHost: "127.0.0.1", port: rawListener.localPort)
        let peer = try rawListener.accept()
        defer { peer.close() }
        try socket?.write(bytes("bye"))
        #expect(try peer.receive(exactly: 3) == bytes("bye"))
        socket = nil
        #expect(try peer.receiveUntilEndOfStream().isEmpty)
    }

    @Test func releasingAfterDisconnectAfterWritingStillDeliversEverything() throws {
        let rawListener = try RawSocket.listen()
        defer { rawListener.close() }
        var socket: Socket? = recordedSocket().0
        try socket?.connect(toHost: "127.0.0.1", port: rawListener.localPort)
        let peer = try rawListener.accept()
        defer { peer.close() }
        // Far more than the kernel buffers hold while the peer is not reading.
        let payload = pattern(16 * 1024 * 1024, seed: 11)
        try socket?.write(payload)
        socket?.disconnectAfterWriting()
        socket = nil
        let received = try peer.receiveUntilEndOfStream(timeout: 30)
        #expect(received.count == payload.count)
        #expect(received == payload)
    }

    /// A listener whose accept queue is full (backlog 0, one connection waiting): the
    /// kernel drops the next SYN, so a connect to it stays in progress until the queue has
    /// room and the SYN is sent again (one second later).
    final class StalledListener {
        let listener: RawSocket
        private let filler: RawSocket

        init() throws {
            listener = try RawSocket.listen(backlog: 0)
            filler = try RawSocket.connect(port: listener.localPort)
            // Until the filler is in the queue: a SYN that came before would still get in.
            try listener.waitFor(Int16(POLLIN), timeout: 10)
        }

        var port: UInt16 { listener.localPort }

        /// Makes room: the next connection gets in once its SYN comes again.
        func admit() throws -> RawSocket {
            try listener.accept().close()
            filler.close()
            return try listener.accept(timeout: 10)
        }

        deinit {
            filler.close()
            listener.close()
        }
    }

    @Test func releasingWhileStillConnectingAfterDisconnectAfterWritingStillDelivers() throws {
        let stalled = try StalledListener()
        let payload = pattern(256 * 1024, seed: 3)
        let recorder = Recorder()
        var socket: Socket? = Socket(delegate: recorder)
        try socket?.connect(toHost: "127.0.0.1", port: stalled.port)
        try socket?.write(payload)
        socket?.disconnectAfterWriting()
        #expect(socket?.isConnected == false, "the connect should still be in progress")
        socket = nil
        let peer = try stalled.admit()
        defer { peer.close() }
        #expect(try peer.receiveUntilEndOfStream() == payload)
        // Released: no callbacks (a watermark may have come before the release).
        #expect(!recorder.events.contains { $0.isDisconnect || $0 == .connected(host: "127.0.0.1", port: stalled.port) })
    }

    @Test func writesQueuedBehindStartTLSWhileConnectingAreSentAfterARelease() throws {
        let stalled = try StalledListener()
        let payload = pattern(100_000, seed: 4)
        let recorder = Recorder()
        var socket: Socket? = Socket(delegate: recorder)
        try socket?.connect(toHost: "127.0.0.1", port: stalled.port)
        try socket?.startTLS(TestCertificates.client(peerName: "localhost"))
        try socket?.write(payload)
        socket?.disconnectAfterWriting()
        #expect(socket?.isConnected == false, "the connect should still be in progress")
        socket = nil
        let peer = try stalled.admit()
        let (server, serverRecorder) = recordedSocket("server")
        try server.adopt(peer.detach())
        defer { server.disconnect() }
        try server.startTLS(TestCertificates.server())
        try server.read(toLength: payload.count)
        #expect(serverRecorder.waitForBytes(payload.count) == payload)
        // Then the client's close_notify and FIN.
        #expect(serverRecorder.waitForDisconnect()??.code == .closed)
        // Released: no callbacks (a watermark may have come before the release).
        #expect(!recorder.events.contains { $0.isDisconnect || $0 == .connected(host: "127.0.0.1", port: stalled.port) })
    }

    @Test func aReleasedSocketStopsSendingAfterTheLingerTime() throws {
        let rawListener = try RawSocket.listen()
        defer { rawListener.close() }
        let recorder = Recorder()
        var socket: Socket? = Socket(delegate: recorder)
        // With a connect timeout: its timer exists, and must not stand in for the linger's.
        try socket?.connect(toHost: "127.0.0.1", port: rawListener.localPort, timeout: 5)
        let peer = try rawListener.accept()
        defer { peer.close() }
        #expect(recorder.waitForConnect())
        // Far more than the kernel buffers hold while the peer is not reading.
        let payload = pattern(16 * 1024 * 1024, seed: 6)
        try socket?.write(payload)
        socket?.disconnectAfterWriting()
        let shortened = Latch()
        socket?.perform { [weak core = socket?.core] _ in
            core?.lingerDuration = 0.2
            shortened.open()
        }
        #expect(shortened.wait())
        weak let lingering = socket?.core
        socket = nil
        // The linger ends: the core lets go of itself, and what it still held is dropped.
        let limit = deadline(afterSeconds: 10)
        while lingering != nil && monotonicNanoseconds() < limit { usleep(10_000) }
        #expect(lingering == nil, "still lingering after its linger time")
        #expect(try peer.receiveUntilEndOfStream().count < payload.count)
    }

    @Test func releasingFromInsideItsOwnCallbackIsSafe() throws {
        final class Holder: @unchecked Sendable { var socket: Socket? }
        let holder = Holder()
        let rawListener = try RawSocket.listen()
        defer { rawListener.close() }
        let recorder = Recorder()
        holder.socket = Socket(delegate: recorder, callbackQueue: try SerialCallbackQueue())
        recorder.onRead = { _, _, _ in holder.socket = nil }
        try holder.socket?.connect(toHost: "127.0.0.1", port: rawListener.localPort)
        let peer = try rawListener.accept()
        defer { peer.close() }
        try holder.socket?.read(tag: 1)
        try peer.send("x")
        #expect(try peer.receiveUntilEndOfStream().isEmpty)
        #expect(recorder.reads().count == 1)
        #expect(!recorder.wait(timeout: 0.2) { $0.contains(where: \.isDisconnect) }, "no callbacks after release")
    }

    @Test func stoppingALoopGroupClosesItsSocketsWithAnError() throws {
        let group = EventLoopGroup(loopCount: 1)
        let (socket, recorder) = recordedSocket(eventLoop: group.next())
        let rawListener = try RawSocket.listen()
        defer { rawListener.close() }
        try socket.connect(toHost: "127.0.0.1", port: rawListener.localPort)
        let peer = try rawListener.accept()
        defer { peer.close() }
        #expect(recorder.waitForConnect())
        try group.shutdown()
        let error = try #require(recorder.waitForDisconnect())
        #expect(error?.code == .badConfig)
        #expect(try peer.receiveUntilEndOfStream().isEmpty)
        let after = #expect(throws: SocketError.self) { try socket.connect(toHost: "127.0.0.1", port: rawListener.localPort) }
        #expect(after?.code == .badConfig)
        #expect(throws: SocketError.self) { try EventLoopGroup.default.shutdown() }
    }
}
