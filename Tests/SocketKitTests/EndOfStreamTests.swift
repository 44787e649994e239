// SPDX-License-Identifier: MIT
import Glibc
import Testing
@testable import SocketKit

/// The end of the peer's stream, a FIN or a reset, is read like data: bytes (and TLS
/// alerts) that arrived before it are delivered first, and an idle socket with nothing
/// unread reports it at once, as GCDAsyncSocket does.
@Suite struct EndOfStreamTests {
    /// Holds `socket`'s loop while `arrive` makes the peer's bytes and its reset reach the
    /// kernel, so that one readiness event carries them together (the loop sees them only
    /// once the kernel has the reset); `then` runs on the loop once it has, before the loop
    /// goes on.
    static func holdingTheLoop(of socket: Socket, while arrive: () throws -> Void,
                               then: @escaping @Sendable () -> Void = {}) rethrows {
        // A first round trip: what earlier calls gave the loop to do in its current
        // iteration (a read's first pass over the socket) has run before the hold begins.
        let settled = Latch()
        socket.perform { _ in settled.open() }
        settled.wait()
        let held = Latch()
        let release = Latch()
        socket.perform { descriptors in
            held.open()
            release.wait()
            _ = CalloutTests.waitForHangUp(descriptors.primary)
            then()
        }
        held.wait()
        defer { release.open() }
        try arrive()
    }

    @Test func anOrderlyCloseOnAnIdleSocketIsReportedAtOnce() throws {
        let pair = try ReadTests.RawPair()
        pair.peer.shutdownWrite()
        // No read queued: the close is reported all the same.
        let error = try #require(pair.recorder.waitForDisconnect())
        #expect(error?.code == .closed)
        #expect(pair.recorder.reads().isEmpty)
    }

    @Test func withoutAutoDisconnectAnIdleSocketReportsTheClosedReadStreamAtOnce() throws {
        let pair = try ReadTests.RawPair { $0.autoDisconnectOnClosedReadStream = false }
        pair.peer.shutdownWrite()
        #expect(pair.recorder.wait { $0.contains(.closedReadStream) })
        #expect(pair.socket.isConnected)
        try pair.socket.write(bytes("still here"))
        #expect(try pair.peer.receive(exactly: 10) == bytes("still here"))
        #expect(pair.recorder.events.filter { $0 == .closedReadStream }.count == 1)
    }

    @Test func withoutAutoDisconnectASendFailingAfterTheReportedHalfCloseEndsTheIdleSession() throws {
        let pair = try ReadTests.RawPair { $0.autoDisconnectOnClosedReadStream = false }
        pair.peer.shutdownWrite()
        #expect(pair.recorder.wait { $0.contains(.closedReadStream) })
        pair.peer.reset()
        // No read is queued, and the end was reported already: the failed send ends the
        // session with its error (the writes would otherwise stay queued for good).
        try pair.socket.write(bytes("to a peer that is gone"))
        let error = try #require(pair.recorder.waitForDisconnect())
        #expect(error?.code == .system)
        #expect(error?.osError == ECONNRESET || error?.osError == EPIPE)
    }

    @Test func bytesThatArrivedBeforeAnOrderlyCloseAreReadBeforeItIsReported() throws {
        let pair = try ReadTests.RawPair()
        try pair.peer.send("last words")
        pair.peer.shutdownWrite()
        // Unread bytes hold the report back (never dropped silently)...
        #expect(!pair.recorder.wait(timeout: 0.3) { $0.contains(where: \.isDisconnect) })
        // ...until the reads have taken them: then the close, without another read queued.
        try pair.socket.read(toLength: 4, tag: 1)
        try pair.socket.read(toLength: 6, tag: 2)
        let error = try #require(pair.recorder.waitForDisconnect())
        #expect(error?.code == .closed)
        #expect(pair.recorder.reads().map(\.bytes) == [bytes("last"), bytes(" words")])
    }

    @Test func bytesThatArrivedBeforeAResetAreDeliveredBeforeTheError() throws {
        let pair = try ReadTests.RawPair()
        try pair.socket.read(toLength: 10, tag: 1)
        try EndOfStreamTests.holdingTheLoop(of: pair.socket) {
            try pair.peer.send("0123456789")
            pair.peer.reset()
        }
        let error = try #require(pair.recorder.waitForDisconnect())
        #expect(pair.recorder.reads().map(\.bytes) == [bytes("0123456789")])
        #expect(error?.code == .system)
        #expect(error?.osError == ECONNRESET)
    }

    @Test func aTLSAlertFollowedByAResetIsReportedAsTheAlert() throws {
        let rawListener = try RawSocket.listen()
        defer { rawListener.close() }
        let (client, recorder) = recordedSocket("client")
        defer { client.disconnect() }
        try client.connect(toHost: "127.0.0.1", port: rawListener.localPort, timeout: 5)
        try client.startTLS(TestCertificates.client())
        let peer = try rawListener.accept()
        defer { peer.close() }
        // The ClientHello: a record header, then its body.
        let header = try peer.receive(exactly: 5)
        _ = try peer.receive(exactly: Int(header[3]) << 8 | Int(header[4]))
        try EndOfStreamTests.holdingTheLoop(of: client) {
            // A fatal protocol_version alert, as a server that refuses the versions sends,
            // then a reset.
            try peer.send([0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 0x46])
            peer.reset()
        }
        let error = try #require(recorder.waitForDisconnect())
        #expect(error?.code == .tlsProtocolVersion, "\(String(describing: error))")
    }

    @Test func aResetThatFailsAWriteIsReportedAfterTheBytesBeforeIt() throws {
        let pair = try ReadTests.RawPair()
        try pair.socket.read(toLength: 4, tag: 1)
        // The write's send meets the reset before the loop has looked at the socket: the
        // read still gets what came before it.
        let socket = pair.socket
        try EndOfStreamTests.holdingTheLoop(of: socket, while: {
            try pair.peer.send("ping")
            pair.peer.reset()
        }, then: { try? socket.write(bytes("pong")) })
        let error = try #require(pair.recorder.waitForDisconnect())
        #expect(pair.recorder.reads().map(\.bytes) == [bytes("ping")])
        #expect(error?.code == .system)
        #expect(error?.osError == ECONNRESET || error?.osError == EPIPE)
    }

    /// The hostile-peer report (issue 34): a server that stopped reading a client (at its
    /// write queue's high watermark, say) and then fails a send to it, because the client
    /// reset, must let the connection go. With bytes of the client's still unread, the
    /// session waited for a read that the application, waiting for its writes to drain,
    /// never made: connection, descriptor and writes stayed for good.
    @Test func aFailedSendEndsAnIdleSessionWithBytesStillUnread() throws {
        let pair = try ReadTests.RawPair()
        let socket = pair.socket
        try EndOfStreamTests.holdingTheLoop(of: socket, while: {
            try pair.peer.send("never read")
            pair.peer.reset()
        }, then: { try? socket.write(bytes("to a peer that is gone")) })
        let error = try #require(pair.recorder.waitForDisconnect())
        #expect(error?.code == .system)
        #expect(error?.osError == ECONNRESET || error?.osError == EPIPE)
        #expect(pair.recorder.reads().isEmpty)
    }

    /// The end waits for callbacks on another queue: each read here queues the next from
    /// its callback, on a serial queue, so when a read completes the loop sees none queued
    /// until that callback has run. All three reads still get their bytes before the error.
    @Test func aFailedSendStillServesReadsQueuedByCallbacksOnAnotherQueue() throws {
        let queue = try SerialCallbackQueue(name: "reads-in-callbacks")
        let pair = try ReadTests.RawPair { $0.callbackQueue = queue }
        let socket = pair.socket
        pair.recorder.onRead = { sock, _, tag in
            if tag < 3 { try? sock.read(toLength: 2, tag: tag + 1) }
        }
        try socket.read(toLength: 2, tag: 1)
        try EndOfStreamTests.holdingTheLoop(of: socket, while: {
            try pair.peer.send("aabbcc")
            pair.peer.reset()
        }, then: { try? socket.write(bytes("to a peer that is gone")) })
        let error = try #require(pair.recorder.waitForDisconnect())
        #expect(pair.recorder.reads().map(\.bytes) == [bytes("aa"), bytes("bb"), bytes("cc")])
        #expect(error?.code == .system)
        #expect(error?.osError == ECONNRESET || error?.osError == EPIPE)
    }
}
