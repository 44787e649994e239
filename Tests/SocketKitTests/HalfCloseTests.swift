// SPDX-License-Identifier: MIT
import Glibc
import Testing
@testable import SocketKit

/// Our half-close (`closeWriteStream`) and the abortive close (`disconnectWithReset`).
@Suite("Half-close and reset")
struct HalfCloseTests {
    typealias RawPair = ReadTests.RawPair

    @Test func closeWriteStreamSendsFINAfterTheQueuedWritesAndKeepsReading() throws {
        let pair = try RawPair()
        let payload = pattern(4 * 1024 * 1024, seed: 3)
        try pair.socket.write(payload, tag: 1)
        pair.socket.closeWriteStream()
        // The peer reads every byte, then the end of our stream.
        #expect(try pair.peer.receiveUntilEndOfStream() == payload)
        // Our side still reads.
        try pair.socket.read(toLength: 5, tag: 2)
        try pair.peer.send("reply")
        #expect(pair.recorder.waitForBytes(5) == bytes("reply"))
        #expect(pair.socket.isConnected)
        // The peer's close after ours ends the connection cleanly.
        pair.peer.close()
        #expect(pair.recorder.waitForDisconnect() == .some(nil))
    }

    @Test func writesAndStartTLSAreRefusedOnceTheWriteStreamIsClosed() throws {
        let pair = try RawPair()
        pair.socket.closeWriteStream()
        #expect { try pair.socket.write(bytes("late")) } throws: { ($0 as? SocketError)?.code == .badConfig }
        #expect { try pair.socket.startTLS(TestCertificates.client()) } throws: { ($0 as? SocketError)?.code == .badConfig }
        #expect(try pair.peer.receiveUntilEndOfStream().isEmpty)
        // Reads are still taken.
        try pair.socket.read(tag: 1)
        try pair.peer.send("x")
        #expect(pair.recorder.waitForBytes(1) == bytes("x"))
    }

    @Test func aNewSessionMayWriteAgain() throws {
        let pair = try RawPair()
        pair.socket.closeWriteStream()
        pair.socket.disconnect()
        let listener = try RawSocket.listen()
        defer { listener.close() }
        try pair.socket.connect(toHost: "127.0.0.1", port: listener.localPort, timeout: 5)
        let peer = try listener.accept()
        defer { peer.close() }
        try pair.socket.write(bytes("again"))
        #expect(try peer.receive(exactly: 5) == bytes("again"))
    }

    /// Under TLS: close_notify, then FIN, and the peer (SocketKit, reading to the end of our
    /// stream) still answers over the same session.
    @Test func underTLSTheHalfCloseIsACloseNotifyAndTheAnswerStillArrives() throws {
        let pair = try Pair(configureListener: { $0.autoDisconnectOnClosedReadStream = false })
        defer { pair.close() }
        try pair.server.startTLS(TestCertificates.server())
        try pair.client.startTLS(TestCertificates.client())
        #expect(pair.clientRecorder.waitForSecure())
        #expect(pair.serverRecorder.waitForSecure())
        try pair.client.write(bytes("ping"))
        pair.client.closeWriteStream()
        try pair.server.read(toLength: 4, tag: 1)
        #expect(pair.serverRecorder.waitForBytes(4) == bytes("ping"))
        #expect(pair.serverRecorder.wait { $0.contains(.closedReadStream) })
        try pair.server.write(bytes("pong"))
        pair.server.disconnectAfterWriting()
        try pair.client.read(toLength: 4, tag: 2)
        #expect(pair.clientRecorder.waitForBytes(4) == bytes("pong"))
        #expect(pair.clientRecorder.waitForDisconnect() == .some(nil))
    }

    @Test func disconnectWithResetSendsARSTInsteadOfAFIN() throws {
        let pair = try RawPair()
        pair.socket.disconnectWithReset()
        #expect(pair.recorder.waitForDisconnect() == .some(nil))
        try pair.peer.waitFor(Int16(POLLIN), timeout: 10)
        var byte: UInt8 = 0
        let got = recv(pair.peer.fd, &byte, 1, 0)
        #expect(got < 0 && errno == ECONNRESET, "the peer saw \(got) (errno \(errno)), not a reset")
    }
}
