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

    @Test func connectTimeoutOfZeroFailsUnlessConnectedAtOnce() throws {
        let (socket, recorder) = recordedSocket()
        try socket.connect(toHost: "no-such-host.invalid", port: 1, timeout: 0)
        let error = try #require(recorder.waitForDisconnect())
        #expect(error?.code == .connectTimeout || error?.code == .resolution)
    }
}
