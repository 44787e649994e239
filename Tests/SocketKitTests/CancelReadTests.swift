// SPDX-License-Identifier: MIT
import Glibc
import Testing
@testable import SocketKit

/// `cancelRead(withTag:)` and `unread(_:)`: a read can be withdrawn, and bytes given back,
/// without losing or reordering a byte (what async callers that stop waiting rely on).
@Suite("Cancelling reads")
struct CancelReadTests {
    typealias RawPair = ReadTests.RawPair

    static func readCount(_ events: [Recorder.Event]) -> Int {
        events.filter { if case .read = $0 { return true }; return false }.count
    }

    @Test func aWithdrawnReadToLengthGivesItsBytesToTheNextRead() throws {
        let pair = try RawPair()
        try pair.socket.read(toLength: 10, tag: 1)
        try pair.peer.send("12345")
        #expect(pair.recorder.wait { $0.contains(.readPartial(length: 5, tag: 1)) })
        try pair.socket.cancelRead(withTag: 1)
        #expect(pair.recorder.wait { $0.contains(.cancelledRead(tag: 1, unreadBytes: 5)) })
        try pair.socket.read(toData: Socket.lf, tag: 2)
        try pair.peer.send("67\n")
        #expect(pair.recorder.waitForBytes(8) == bytes("1234567\n"))
        #expect(pair.recorder.reads().map(\.tag) == [2])
    }

    @Test func aWithdrawnReadToASeparatorGivesItsBytesBack() throws {
        let pair = try RawPair()
        try pair.socket.read(toData: bytes("\r\n\r\n"), tag: 1)
        try pair.peer.send("partial line\r\n")
        #expect(pair.recorder.wait { $0.contains(.readPartial(length: 14, tag: 1)) })
        try pair.socket.cancelRead(withTag: 1)
        #expect(pair.recorder.wait { $0.contains(.cancelledRead(tag: 1, unreadBytes: 14)) })
        // The withdrawn read's bytes are served from SocketKit's buffer, with nothing new.
        try pair.socket.read(toLength: 14, tag: 2)
        #expect(pair.recorder.waitForBytes(14) == bytes("partial line\r\n"))
    }

    @Test func aReadIntoACallersBufferGivesItsBytesBackToo() throws {
        let pair = try RawPair()
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 16, alignment: 1)
        defer { buffer.deallocate() }
        try pair.socket.read(toLength: 8, into: buffer, tag: 1)
        try pair.peer.send("abc")
        #expect(pair.recorder.wait { $0.contains(.readPartial(length: 3, tag: 1)) })
        try pair.socket.cancelRead(withTag: 1)
        #expect(pair.recorder.wait { $0.contains(.cancelledRead(tag: 1, unreadBytes: 3)) })
        try pair.socket.read(toLength: 4, tag: 2)
        try pair.peer.send("d")
        #expect(pair.recorder.waitForBytes(4) == bytes("abcd"))
    }

    @Test func aReadThatAlreadyCompletedIsReportedBeforeTheAnswer() throws {
        let pair = try RawPair()
        try pair.socket.read(tag: 1)
        try pair.peer.send("done")
        #expect(pair.recorder.waitForBytes(4) == bytes("done"))
        try pair.socket.cancelRead(withTag: 1)
        #expect(pair.recorder.wait { $0.contains(.cancelledRead(tag: 1, unreadBytes: 0)) })
        let relevant = pair.recorder.events.filter {
            if case .read = $0 { return true }
            if case .cancelledRead = $0 { return true }
            return false
        }
        #expect(relevant == [.read(bytes("done"), tag: 1), .cancelledRead(tag: 1, unreadBytes: 0)])
    }

    @Test func onlyTheReadsWithTheTagAreWithdrawnAndTheRestKeepTheirOrder() throws {
        let pair = try RawPair()
        try pair.socket.read(toLength: 2, tag: 1)
        try pair.socket.read(toData: Socket.lf, tag: 2)
        try pair.socket.read(toLength: 3, tag: 3)
        try pair.socket.read(toData: Socket.lf, tag: 2)
        try pair.socket.cancelRead(withTag: 2)
        #expect(pair.recorder.wait { $0.contains(.cancelledRead(tag: 2, unreadBytes: 0)) })
        try pair.peer.send("ab\ncd")
        #expect(pair.recorder.wait { Self.readCount($0) == 2 })
        #expect(pair.recorder.reads().map(\.tag) == [1, 3])
        #expect(pair.recorder.reads().map(\.bytes) == [bytes("ab"), bytes("\ncd")])
    }

    /// Bytes given back from a read's own callback land in front of what was left after
    /// that read, also when the read was served from SocketKit's buffer (whose bytes the
    /// callback borrows): the change waits for the callback, and the read's bytes are
    /// consumed before it.
    @Test func bytesGivenBackInADidReadComeBeforeWhatFollowedThatRead() throws {
        let pair = try RawPair()
        pair.recorder.onRead = { socket, _, tag in
            if tag == 0 { try? socket.read(toData: Socket.lf, tag: 1) }
            if tag == 1 {
                try? socket.unread(bytes("XY"))
                try? socket.read(toLength: 5, tag: 2)
            }
        }
        try pair.peer.send("a\nbb\ncc\n")
        try pair.socket.read(toData: Socket.lf, tag: 0)
        #expect(pair.recorder.wait { Self.readCount($0) == 3 })
        #expect(pair.recorder.reads().map(\.bytes) == [bytes("a\n"), bytes("bb\n"), bytes("XYcc\n")])
    }

    @Test func unreadBytesAreReadFirstByAnyFraming() throws {
        let pair = try RawPair()
        try pair.peer.send("world\n")
        try pair.socket.read(toLength: 2, tag: 1)
        #expect(pair.recorder.waitForBytes(2) == bytes("wo"))
        try pair.socket.unread(bytes("hello "))
        try pair.socket.read(toData: Socket.lf, tag: 2)
        #expect(pair.recorder.waitForBytes(12) == bytes("wohello rld\n"))
    }

    @Test func aWithdrawnReadsTimeoutNoLongerRuns() throws {
        let pair = try RawPair()
        try pair.socket.read(toLength: 10, timeout: 0.2, tag: 1)
        try pair.peer.send("1")
        #expect(pair.recorder.wait { $0.contains(.readPartial(length: 1, tag: 1)) })
        try pair.socket.cancelRead(withTag: 1)
        #expect(pair.recorder.wait { $0.contains(.cancelledRead(tag: 1, unreadBytes: 1)) })
        try pair.socket.read(toLength: 2, tag: 2)
        // A timer left armed would ask about the new read and, unanswered, end the connection.
        #expect(!pair.recorder.wait(timeout: 1) { $0.contains { $0.isDisconnect } })
        try pair.peer.send("2")
        #expect(pair.recorder.waitForBytes(2) == bytes("12"))
        #expect(!pair.recorder.events.contains { if case .readTimeout = $0 { return true }; return false })
    }

    /// What asyncio's and NIO's readers do at the end of the stream (a short last read)
    /// needs the bytes a pending read had gathered when the peer closed.
    @Test func atTheEndOfTheStreamAPendingReadsBytesCanBeTakenBack() throws {
        let pair = try RawPair { $0.autoDisconnectOnClosedReadStream = false }
        try pair.socket.read(toLength: 10, tag: 1)
        try pair.peer.send("last")
        pair.peer.shutdownWrite()
        #expect(pair.recorder.wait { $0.contains(.closedReadStream) })
        try pair.socket.cancelRead(withTag: 1)
        #expect(pair.recorder.wait { $0.contains(.cancelledRead(tag: 1, unreadBytes: 4)) })
        try pair.socket.read(toLength: 4, tag: 2)
        #expect(pair.recorder.waitForBytes(4) == bytes("last"))
        #expect(pair.socket.isConnected)
    }

    @Test func aWithdrawnReadAheadOfStartTLSLetsTheHandshakeBegin() throws {
        let pair = try Pair()
        defer { pair.close() }
        // The client's plaintext read before the marker never gets its bytes: withdrawing it
        // must count as done for the marker, or the handshake would wait for ever.
        try pair.client.read(toData: Socket.crlf, tag: 1)
        try pair.client.startTLS(TestCertificates.client())
        try pair.server.startTLS(TestCertificates.server())
        try pair.client.cancelRead(withTag: 1)
        #expect(pair.clientRecorder.waitForSecure())
        #expect(pair.serverRecorder.waitForSecure())
    }

    @Test func underTLSAWithdrawnReadsPlaintextGoesBack() throws {
        let pair = try securePair()
        defer { pair.close() }
        #expect(pair.clientRecorder.waitForSecure())
        #expect(pair.serverRecorder.waitForSecure())
        try pair.client.read(toLength: 10, tag: 1)
        try pair.server.write(bytes("12345"))
        #expect(pair.clientRecorder.wait { $0.contains(.readPartial(length: 5, tag: 1)) })
        try pair.client.cancelRead(withTag: 1)
        #expect(pair.clientRecorder.wait { $0.contains(.cancelledRead(tag: 1, unreadBytes: 5)) })
        try pair.client.read(toData: Socket.lf, tag: 2)
        try pair.server.write(bytes("67\n"))
        #expect(pair.clientRecorder.waitForBytes(8) == bytes("1234567\n"))
    }

    @Test func badInputIsRefused() throws {
        let pair = try RawPair()
        #expect(throws: SocketError.self) { try pair.socket.unread([]) }
        let idle = Socket(delegate: Recorder())
        #expect { try idle.cancelRead(withTag: 1) } throws: { ($0 as? SocketError)?.code == .badConfig }
        #expect { try idle.unread(bytes("x")) } throws: { ($0 as? SocketError)?.code == .badConfig }
    }
}
