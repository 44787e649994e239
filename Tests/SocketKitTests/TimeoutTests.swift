// SPDX-License-Identifier: MIT
import Glibc
import Testing
@testable import SocketKit

/// Timeouts keep upstream's meaning: negative = none, zero = fail unless the operation
/// completes at once, positive = seconds from when the operation becomes current; on expiry
/// the delegate may extend.
@Suite("Timeouts")
struct TimeoutTests {
    @Test func readTimeoutAsksTheDelegateThenDisconnects() throws {
        let pair = try ReadTests.RawPair()
        try pair.socket.read(toLength: 10, timeout: 0.2, tag: 5)
        try pair.peer.send("abc")
        let error = try #require(pair.recorder.waitForDisconnect())
        #expect(error?.code == .readTimeout)
        let asked = pair.recorder.events.compactMap { event -> (Int, Double, Int)? in
            if case .readTimeout(let tag, let elapsed, let done) = event { return (tag, elapsed, done) }
            return nil
        }
        #expect(asked.count == 1)
        #expect(asked.first?.0 == 5)
        #expect(asked.first?.1 == 0.2)
        #expect(asked.first?.2 == 3)
    }

    @Test func anExtendedReadCompletesWhenTheDataComesInTime() throws {
        let pair = try ReadTests.RawPair()
        pair.recorder.readTimeoutExtensions = [5]
        try pair.socket.read(toLength: 4, timeout: 0.1, tag: 1)
        #expect(pair.recorder.wait { $0.contains(.readTimeout(tag: 1, elapsed: 0.1, bytesDone: 0)) })
        try pair.peer.send("data")
        #expect(pair.recorder.waitForBytes(4) == bytes("data"))
        #expect(pair.socket.isConnected)
    }

    /// +INFINITY is no timeout, as a negative one: a timeout of INFINITY (or one beyond the
    /// clock, Double.greatestFiniteMagnitude) is taken, and an extension of INFINITY keeps the
    /// read for good (it used to end the connection with `.readTimeout`). NaN is refused.
    @Test func infiniteTimeoutsAndExtensionsNeverExpire() throws {
        let pair = try ReadTests.RawPair()
        let refused = #expect(throws: SocketError.self) { try pair.socket.read(toLength: 1, timeout: .nan, tag: 0) }
        #expect(refused?.code == .badParam)
        #expect(throws: SocketError.self) { try pair.socket.write(bytes("x"), timeout: .nan) }
        try pair.socket.read(toLength: 2, timeout: .infinity, tag: 1)
        try pair.socket.read(toLength: 2, timeout: .greatestFiniteMagnitude, tag: 2)
        try pair.socket.write(bytes("ok"), timeout: .infinity, tag: 3)
        try pair.peer.send("wxyz")
        #expect(pair.recorder.waitForBytes(4) == bytes("wxyz"))
        pair.recorder.readTimeoutExtensions = [.infinity]
        try pair.socket.read(toLength: 3, timeout: 0.05, tag: 4)
        #expect(pair.recorder.wait { $0.contains(.readTimeout(tag: 4, elapsed: 0.05, bytesDone: 0)) })
        #expect(pair.recorder.waitForDisconnect(timeout: 0.2) == nil)
        try pair.peer.send("end")
        #expect(pair.recorder.waitForBytes(7) == bytes("wxyzend"))
        #expect(pair.socket.isConnected)
    }

    @Test func extensionsAccumulateInElapsed() throws {
        let pair = try ReadTests.RawPair()
        pair.recorder.readTimeoutExtensions = [0.1, 0.15]
        try pair.socket.read(timeout: 0.1, tag: 2)
        let error = try #require(pair.recorder.waitForDisconnect())
        #expect(error?.code == .readTimeout)
        let elapsed = pair.recorder.events.compactMap { event -> Double? in
            if case .readTimeout(_, let elapsed, _) = event { return elapsed }
            return nil
        }
        #expect(elapsed.count == 3)
        #expect(abs(elapsed[0] - 0.1) < 1e-9 && abs(elapsed[1] - 0.2) < 1e-9 && abs(elapsed[2] - 0.35) < 1e-9)
    }

    @Test func zeroTimeoutFailsAtOnceWithoutData() throws {
        let pair = try ReadTests.RawPair()
        try pair.socket.read(timeout: 0, tag: 3)
        let error = try #require(pair.recorder.waitForDisconnect(timeout: 2))
        #expect(error?.code == .readTimeout)
    }

    @Test func zeroTimeoutSucceedsWhenTheDataIsAlreadyThere() throws {
        let pair = try ReadTests.RawPair()
        try pair.peer.send("ready\nnext\n")
        try pair.socket.read(toData: Socket.lf, timeout: 5, tag: 1)
        #expect(pair.recorder.waitForBytes(6) == bytes("ready\n"))
        // "next\n" now waits in the prebuffer: a zero timeout read completes at once.
        try pair.socket.read(toData: Socket.lf, timeout: 0, tag: 2)
        #expect(pair.recorder.waitForBytes(11) == bytes("ready\nnext\n"))
        #expect(pair.socket.isConnected)
    }

    @Test func theTimerStartsWhenTheReadBecomesCurrent() throws {
        let pair = try ReadTests.RawPair()
        try pair.socket.read(toLength: 4, timeout: 5, tag: 1)
        try pair.socket.read(toLength: 4, timeout: 0.3, tag: 2)
        // Let 0.4 s pass on the first read (longer than the second read's timeout) ...
        #expect(!pair.recorder.wait(timeout: 0.4) { !$0.filter { if case .read = $0 { return true }; return false }.isEmpty })
        try pair.peer.send("1111")
        #expect(pair.recorder.waitForBytes(4) == bytes("1111"))
        // ... the second read's clock only started now, so it is still alive.
        #expect(pair.socket.isConnected)
        try pair.peer.send("2222")
        #expect(pair.recorder.waitForBytes(8) == bytes("11112222"))
    }

    @Test func negativeTimeoutNeverFires() throws {
        let pair = try ReadTests.RawPair()
        try pair.socket.read(timeout: -1, tag: 1)
        #expect(!pair.recorder.wait(timeout: 0.5) { $0.contains { if case .readTimeout = $0 { return true }; return $0.isDisconnect } })
        try pair.peer.send("late")
        #expect(pair.recorder.waitForBytes(4) == bytes("late"))
    }

    @Test func writeTimeoutFiresAgainstAPeerThatStopsReading() throws {
        let pair = try ReadTests.RawPair()
        try pair.socket.setBufferSizes(send: 65536, receive: 0)
        try pair.socket.write(pattern(64 * 1024 * 1024), timeout: 0.3, tag: 9)
        let error = try #require(pair.recorder.waitForDisconnect())
        #expect(error?.code == .writeTimeout)
        let asked = pair.recorder.events.compactMap { event -> (Int, Int)? in
            if case .writeTimeout(let tag, _, let done) = event { return (tag, done) }
            return nil
        }
        #expect(asked.count == 1)
        #expect(asked.first?.0 == 9)
        #expect((asked.first?.1 ?? 0) > 0, "some bytes went out before the peer's window closed")
    }

    @Test func anExtendedWriteCompletesWhenThePeerCatchesUp() throws {
        let pair = try ReadTests.RawPair()
        pair.recorder.writeTimeoutExtensions = [30]
        let payload = pattern(16 * 1024 * 1024, seed: 3)
        try pair.socket.write(payload, timeout: 0.1, tag: 4)
        #expect(pair.recorder.wait { $0.contains { if case .writeTimeout(4, _, _) = $0 { return true }; return false } })
        #expect(try pair.peer.receive(exactly: payload.count, timeout: 30) == payload)
        #expect(pair.recorder.wait { $0.contains(.wrote(tag: 4)) })
        #expect(pair.socket.isConnected)
    }

    // A zero connect timeout: connected by the time the loop next polls, or
    // `.connectTimeout`. Resolution runs off the loop, so it can never finish in time.

    @Test func aZeroConnectTimeoutFailsWhileTheNameIsStillBeingResolved() throws {
        let (socket, recorder) = recordedSocket()
        try socket.connect(toHost: "no-such-host.invalid", port: 1, timeout: 0)
        let error = try #require(recorder.waitForDisconnect())
        #expect(error?.code == .connectTimeout, "not the resolver's answer: the timeout came first")
        #expect(recorder.events.count == 1, "\(recorder.events)")
    }

    @Test func aZeroConnectTimeoutFailsWhenTheHandshakeCannotCompleteAtOnce() throws {
        // A listener whose accept queue is full drops further SYNs.
        let blackhole = try RawSocket.listen(backlog: 0)
        defer { blackhole.close() }
        let fillerRecorder = Recorder()
        let fillers = (0..<4).map { _ in Socket(delegate: fillerRecorder) }
        for filler in fillers { try filler.connect(toHost: "127.0.0.1", port: blackhole.localPort) }
        defer { for filler in fillers { filler.disconnect() } }
        let (socket, recorder) = recordedSocket()
        try socket.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: blackhole.localPort), timeout: 0)
        let error = try #require(recorder.waitForDisconnect(timeout: 2))
        #expect(error?.code == .connectTimeout)
        #expect(recorder.events.count == 1, "\(recorder.events)")
    }

    @Test func aZeroConnectTimeoutSucceedsWhenTheConnectCompletesAtOnce() throws {
        // connect(2) on a Unix-domain socket completes in the call itself.
        let path = temporaryUnixPath("zero-timeout")
        let (listener, listenerRecorder) = recordedSocket()
        try listener.accept(onUnixPath: path)
        defer { listener.disconnect() }
        let (socket, recorder) = recordedSocket()
        try socket.connect(toUnixPath: path, timeout: 0)
        #expect(recorder.waitForConnect(), "\(recorder.events)")
        #expect(recorder.events.first == .connectedUnix(path: path))
        #expect(listenerRecorder.waitForAccepted(1).count == 1)
        #expect(socket.isConnected)
        socket.disconnect()
    }

    @Test func aZeroConnectTimeoutFromACallbackOnTheLoopAlsoWaitsForTheNextPoll() throws {
        // The same connect, started from a callback that runs on the loop thread (the
        // callback's iteration has already polled): it must still see its completion.
        let path = temporaryUnixPath("zero-timeout-callback")
        let (listener, _) = recordedSocket()
        try listener.accept(onUnixPath: path)
        defer { listener.disconnect() }
        let (trigger, triggerRecorder) = recordedSocket()
        let (socket, recorder) = recordedSocket(eventLoop: trigger.eventLoop)
        triggerRecorder.onConnect = { _ in
            do { try socket.connect(toUnixPath: path, timeout: 0) } catch { Issue.record("connect: \(error)") }
        }
        let peer = try RawSocket.listen()
        defer { peer.close() }
        try trigger.connect(toHost: "127.0.0.1", port: peer.localPort, timeout: 10)
        #expect(recorder.waitForConnect(), "\(recorder.events)")
        #expect(recorder.events.first == .connectedUnix(path: path))
        socket.disconnect()
        trigger.disconnect()
    }
}

