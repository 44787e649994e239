// SPDX-License-Identifier: MIT
import Glibc
import Testing
@testable import SocketKit

/// Every read variant, over a real loopback connection to a raw peer, and their edge cases.
@Suite("Reading")
struct ReadTests {
    /// A SocketKit client connected to a raw blocking peer.
    final class RawPair {
        let rawListener: RawSocket
        let peer: RawSocket
        let socket: Socket
        let recorder: Recorder

        init(configure: (Socket) throws -> Void = { _ in }) throws {
            rawListener = try RawSocket.listen()
            (socket, recorder) = recordedSocket("reader")
            try configure(socket)
            try socket.connect(toHost: "127.0.0.1", port: rawListener.localPort, timeout: 5)
            peer = try rawListener.accept()
            guard recorder.waitForConnect() else { throw TestFailure("no connect") }
        }

        deinit {
            socket.disconnect()
            peer.close()
            rawListener.close()
        }
    }

    @Test func readAvailableReturnsWhatArrivedAndAtMostMaxLength() throws {
        let pair = try RawPair()
        try pair.peer.send("hello world")
        try pair.socket.read(maxLength: 5, tag: 1)
        #expect(pair.recorder.waitForBytes(5) == bytes("hello"))
        try pair.socket.read(tag: 2)
        #expect(pair.recorder.waitForBytes(11) == bytes("hello world"))
        #expect(pair.recorder.reads().map(\.tag) == [1, 2])
        #expect(pair.recorder.reads().allSatisfy { !$0.bytes.isEmpty })
    }

    @Test func readToLengthWaitsForExactlyThatMany() throws {
        let pair = try RawPair()
        try pair.socket.read(toLength: 10, tag: 7)
        try pair.peer.send("12345")
        #expect(pair.recorder.wait { $0.contains(.readPartial(length: 5, tag: 7)) })
        #expect(pair.recorder.reads().isEmpty)
        try pair.peer.send("67890abc")
        #expect(pair.recorder.waitForBytes(10) == bytes("1234567890"))
        try pair.socket.read(toLength: 3, tag: 8)
        #expect(pair.recorder.waitForBytes(13) == bytes("1234567890abc"))
        #expect(pair.recorder.reads().map(\.tag) == [7, 8])
    }

    @Test func readToDataReturnsTheSeparator() throws {
        let pair = try RawPair()
        try pair.socket.read(toData: Socket.crlf, tag: 1)
        try pair.peer.send("GET / HTTP/1.1\r\nHost: x\r\n")
        #expect(pair.recorder.waitForBytes(16) == bytes("GET / HTTP/1.1\r\n"))
        try pair.socket.read(toData: Socket.crlf, tag: 2)
        #expect(pair.recorder.waitForBytes(25) == bytes("GET / HTTP/1.1\r\nHost: x\r\n"))
    }

    @Test func pipelinedMessagesInOneSegmentAreServedFromThePrebuffer() throws {
        let pair = try RawPair()
        try pair.peer.send("a\nbb\nccc\ndddd")
        for tag in 0..<3 { try pair.socket.read(toData: Socket.lf, tag: tag) }
        #expect(pair.recorder.wait { events in events.filter { if case .read = $0 { return true }; return false }.count == 3 })
        #expect(pair.recorder.reads().map(\.bytes) == [bytes("a\n"), bytes("bb\n"), bytes("ccc\n")])
        try pair.socket.read(toLength: 4, tag: 3)
        #expect(pair.recorder.waitForBytes(13).suffix(4) == bytes("dddd")[...])
    }

    @Test func readsQueuedByDidReadOnTheLoopAreStartedByThePumpThatMadeTheCallback() throws {
        let pair = try RawPair()
        // Each read's callback (on the loop, inside the read pump) queues the next one, which
        // that pump then starts itself, with nothing scheduled; the third queues nothing.
        pair.recorder.onRead = { socket, _, tag in
            if tag < 2 { try? socket.read(toData: Socket.lf, tag: tag + 1) }
        }
        try pair.socket.read(toData: Socket.lf, tag: 0)
        try pair.peer.send("a\nbb\nccc\ndddd\n")
        #expect(pair.recorder.wait { $0.filter { if case .read = $0 { return true }; return false }.count == 3 })
        #expect(pair.recorder.reads().map(\.bytes) == [bytes("a\n"), bytes("bb\n"), bytes("ccc\n")])
        // That pump has ended: reads queued from another thread still run, from the
        // prebuffer and then from new bytes.
        try pair.socket.read(toData: Socket.lf, tag: 3)
        #expect(pair.recorder.wait { $0.filter { if case .read = $0 { return true }; return false }.count == 4 })
        try pair.socket.read(toLength: 2, tag: 4)
        try pair.peer.send("ee")
        #expect(pair.recorder.wait { $0.filter { if case .read = $0 { return true }; return false }.count == 5 })
        #expect(pair.recorder.reads().map(\.bytes).suffix(2) == [bytes("dddd\n"), bytes("ee")])
        #expect(pair.recorder.reads().map(\.tag) == [0, 1, 2, 3, 4])
    }

    @Test func separatorSplitAcrossOneByteWritesIsFound() throws {
        let pair = try RawPair()
        let separator = bytes("\r\n\r\n")
        try pair.socket.read(toData: separator, tag: 1)
        let message = bytes("Header: value\r\n\r\n")
        for (index, byte) in message.enumerated() {
            try pair.peer.send([byte])
            if index < message.count - 1 {
                // Each byte arrives on its own: wait for the read to take it.
                #expect(pair.recorder.wait { $0.filter { if case .readPartial = $0 { return true }; return false }.count == index + 1 })
            }
        }
        #expect(pair.recorder.waitForBytes(message.count) == message)
        let partials = pair.recorder.events.compactMap { event -> Int? in
            if case .readPartial(let length, 1) = event { return length }
            return nil
        }
        #expect(partials == Array(repeating: 1, count: message.count - 1))
    }

    @Test func separatorAtTheVeryEndOfTheMaximumSucceeds() throws {
        let pair = try RawPair()
        try pair.socket.read(toData: Socket.crlf, maxLength: 10, tag: 1)
        try pair.peer.send("12345678\r\nrest")
        #expect(pair.recorder.waitForBytes(10) == bytes("12345678\r\n"))
        #expect(pair.socket.isConnected)
    }

    @Test func separatorPastTheMaximumFailsWithReadMaxedOut() throws {
        let pair = try RawPair()
        try pair.socket.read(toData: Socket.crlf, maxLength: 10, tag: 1)
        try pair.peer.send("123456789\r\n")
        let error = try #require(pair.recorder.waitForDisconnect())
        #expect(error?.code == .readMaxedOut)
        #expect(pair.recorder.reads().isEmpty)
    }

    @Test func separatorReadsWithoutMaximumAreBoundedByTheSocketLimit() throws {
        let pair = try RawPair { try $0.setMaximumReadLength(1000) }
        try pair.socket.read(toData: Socket.lf)
        try pair.peer.send(pattern(1500).map { $0 == 0x0A ? 0x0B : $0 })
        let error = try #require(pair.recorder.waitForDisconnect())
        #expect(error?.code == .readMaxedOut)
    }

    /// The maximum read length caps reads to a length into SocketKit's memory (a length from
    /// the peer is an allocation the peer controls), at the limit exactly; a read into the
    /// caller's buffer is bounded by the buffer, not by it.
    @Test func readToLengthIsCappedByTheMaximumReadLengthButNotIntoACallerBuffer() throws {
        let pair = try RawPair { try $0.setMaximumReadLength(8) }
        let refused = #expect(throws: SocketError.self) { try pair.socket.read(toLength: 9, tag: 1) }
        #expect(refused?.code == .badParam)
        #expect(refused?.message.contains("maximumReadLength") == true)
        try pair.socket.read(toLength: 8, tag: 2)
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 64, alignment: 1)
        defer { buffer.deallocate() }
        try pair.socket.read(toLength: 64, into: buffer, offset: 0, tag: 3)
        try pair.peer.send(pattern(72))
        #expect(pair.recorder.wait { $0.filter { if case .readInto = $0 { return true }; return false }.count == 1 })
        #expect(pair.recorder.reads().first?.bytes == Array(pattern(72).prefix(8)))
        #expect(Array(buffer) == Array(pattern(72).dropFirst(8)))
        #expect(pair.socket.isConnected)
    }

    @Test func readsIntoACallerBufferLandAtTheOffset() throws {
        let pair = try RawPair()
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 32, alignment: 1)
        defer { buffer.deallocate() }
        buffer.initializeMemory(as: UInt8.self, repeating: 0xEE)
        try pair.socket.read(toLength: 4, into: buffer, offset: 3, tag: 1)
        try pair.socket.read(toData: Socket.lf, into: buffer, offset: 10, tag: 2)
        try pair.socket.read(into: buffer, offset: 20, maxLength: 2, tag: 3)
        try pair.peer.send("abcdline\nXYZ")
        #expect(pair.recorder.wait { $0.filter { if case .readInto = $0 { return true }; return false }.count == 3 })
        #expect(pair.recorder.events.filter { if case .readInto = $0 { return true }; return false } == [
            .readInto(range: 3..<7, tag: 1), .readInto(range: 10..<15, tag: 2), .readInto(range: 20..<22, tag: 3),
        ])
        let contents = Array(buffer)
        #expect(contents[0..<3] == [0xEE, 0xEE, 0xEE])
        #expect(Array(contents[3..<7]) == bytes("abcd"))
        #expect(contents[7..<10] == [0xEE, 0xEE, 0xEE])
        #expect(Array(contents[10..<15]) == bytes("line\n"))
        #expect(Array(contents[20..<22]) == bytes("XY"))
        #expect(contents[22] == 0xEE)
    }

    @Test func aReadIntoABufferWithoutMaximumTakesWhatFits() throws {
        let pair = try RawPair()
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 6, alignment: 1)
        defer { buffer.deallocate() }
        try pair.peer.send("0123456789")
        try pair.socket.read(into: buffer, offset: 2, tag: 1)
        #expect(pair.recorder.wait { $0.contains(.readInto(range: 2..<6, tag: 1)) })
        #expect(Array(buffer[2..<6]) == bytes("0123"))
        try pair.socket.read(tag: 2)
        #expect(pair.recorder.waitForBytes(6) == bytes("456789"))
    }

    @Test func aSeparatorThatDoesNotFitTheCallerBufferFailsWithReadMaxedOut() throws {
        let pair = try RawPair()
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 8, alignment: 1)
        defer { buffer.deallocate() }
        try pair.socket.read(toData: Socket.lf, into: buffer, offset: 2, tag: 1)
        try pair.peer.send("0123456789\n")
        let error = try #require(pair.recorder.waitForDisconnect())
        #expect(error?.code == .readMaxedOut)
    }

    @Test func aSeparatorReadIntoABufferHonoursAnExplicitMaximumBelowTheRoom() throws {
        let pair = try RawPair()
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 32, alignment: 1)
        defer { buffer.deallocate() }
        buffer.initializeMemory(as: UInt8.self, repeating: 0xEE)
        // Within the maximum: delivered as usual.
        try pair.socket.read(toData: Socket.lf, into: buffer, offset: 2, maxLength: 5, tag: 1)
        try pair.peer.send("abc\n")
        #expect(pair.recorder.wait { $0.contains(.readInto(range: 2..<6, tag: 1)) })
        #expect(Array(buffer[2..<6]) == bytes("abc\n"))
        // Five bytes without the separator end the read there, although 30 would fit.
        try pair.socket.read(toData: Socket.lf, into: buffer, offset: 10, maxLength: 5, tag: 2)
        try pair.peer.send("0123456789\n")
        let error = try #require(pair.recorder.waitForDisconnect())
        #expect(error?.code == .readMaxedOut)
        #expect(Array(buffer[10..<15]) == bytes("01234"))
        #expect(buffer[15] == 0xEE, "nothing is written past the maximum")
    }

    @Test func theDefaultDidReadIntoDeliversACopy() throws {
        final class PlainDelegate: SocketDelegate, @unchecked Sendable {
            let recorder = Recorder()
            func socket(_ sock: Socket, didRead data: [UInt8], withTag tag: Int) {
                recorder.socket(sock, didRead: data, withTag: tag)
            }
            func socket(_ sock: Socket, didConnectToHost host: String, port: UInt16) {
                recorder.socket(sock, didConnectToHost: host, port: port)
            }
        }
        let rawListener = try RawSocket.listen()
        defer { rawListener.close() }
        let delegate = PlainDelegate()
        let socket = Socket(delegate: delegate)
        try socket.connect(toHost: "127.0.0.1", port: rawListener.localPort)
        let peer = try rawListener.accept()
        defer { peer.close() }
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 16, alignment: 1)
        defer { buffer.deallocate() }
        try socket.read(toLength: 3, into: buffer, offset: 5, tag: 9)
        try peer.send("abc")
        #expect(delegate.recorder.waitForBytes(3) == bytes("abc"))
        socket.disconnect()
    }

    @Test func endOfStreamInTheMiddleOfAReadDisconnectsWithClosedAfterServingBufferedBytes() throws {
        let pair = try RawPair()
        try pair.peer.send("complete\npartial")
        pair.peer.shutdownWrite()
        try pair.socket.read(toData: Socket.lf, tag: 1)
        try pair.socket.read(toData: Socket.lf, tag: 2)
        let error = try #require(pair.recorder.waitForDisconnect())
        #expect(error?.code == .closed)
        #expect(pair.recorder.reads().map(\.bytes) == [bytes("complete\n")], "the incomplete read is not delivered")
        #expect(pair.recorder.events.last?.isDisconnect == true)
    }

    @Test func readsAndWritesQueuedBeforeTheConnectionCompletesRunInOrder() throws {
        let rawListener = try RawSocket.listen()
        defer { rawListener.close() }
        let (socket, recorder) = recordedSocket()
        try socket.connect(toHost: "127.0.0.1", port: rawListener.localPort, timeout: 5)
        for tag in 0..<3 {
            try socket.write(bytes("request \(tag)\n"), tag: 100 + tag)
            try socket.read(toData: Socket.lf, timeout: 5, tag: tag)
        }
        let peer = try rawListener.accept()
        defer { peer.close() }
        let requests = try peer.receive(exactly: 30)
        #expect(requests == bytes("request 0\nrequest 1\nrequest 2\n"))
        try peer.send("reply 0\nreply 1\nreply 2\n")
        #expect(recorder.wait { $0.filter { if case .read = $0 { return true }; return false }.count == 3 })
        let events = recorder.events
        #expect(events.first == .connected(host: "127.0.0.1", port: rawListener.localPort))
        #expect(events.compactMap { if case .wrote(let tag) = $0 { return tag }; return nil } == [100, 101, 102])
        #expect(recorder.reads().map(\.tag) == [0, 1, 2])
        #expect(recorder.reads().map(\.bytes) == [bytes("reply 0\n"), bytes("reply 1\n"), bytes("reply 2\n")])
        socket.disconnect()
    }

    @Test func readProgressReportsTheCurrentRead() throws {
        let pair = try RawPair()
        #expect(pair.socket.readProgress == nil)
        try pair.socket.read(toLength: 100, tag: 42)
        try pair.peer.send(pattern(40))
        #expect(pair.recorder.wait { $0.contains(.readPartial(length: 40, tag: 42)) })
        let progress = try #require(pair.socket.readProgress)
        #expect(progress.tag == 42)
        #expect(progress.bytesDone == 40)
        #expect(progress.totalBytes == 100)
        #expect(progress.fractionCompleted == 0.4)
        try pair.peer.send(pattern(60))
        #expect(pair.recorder.waitForBytes(100).count == 100)
        #expect(pair.socket.readProgress == nil)

        try pair.socket.read(toData: Socket.lf, tag: 43)
        try pair.peer.send("abc")
        #expect(pair.recorder.wait { $0.contains(.readPartial(length: 3, tag: 43)) })
        #expect(pair.socket.readProgress?.totalBytes == nil)
        #expect(pair.socket.readProgress?.fractionCompleted == 1.0)
    }

    @Test func largeReadToLengthArrivesIntact() throws {
        let pair = try RawPair()
        let payload = pattern(3 * 1024 * 1024 + 17, seed: 5)
        try pair.socket.read(toLength: payload.count, timeout: 30, tag: 1)
        try pair.peer.send(payload)
        #expect(pair.recorder.waitForBytes(payload.count, timeout: 30) == payload)
        let partialTotal = pair.recorder.events.reduce(0) { total, event in
            if case .readPartial(let length, 1) = event { return total + length }
            return total
        }
        #expect(partialTotal < payload.count)
    }

    @Test func invalidReadsAreErrorsNotSilentNoOps() throws {
        let (idle, _) = recordedSocket()
        let notConnected = #expect(throws: SocketError.self) { try idle.read() }
        #expect(notConnected?.code == .badConfig)

        let pair = try RawPair()
        let socket = pair.socket
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 8, alignment: 1)
        defer { buffer.deallocate() }
        let cases: [(String, () throws(SocketError) -> Void)] = [
            ("zero length", { () throws(SocketError) in try socket.read(toLength: 0) }),
            ("negative length", { () throws(SocketError) in try socket.read(toLength: -1) }),
            ("empty separator", { () throws(SocketError) in try socket.read(toData: []) }),
            ("max shorter than separator", { () throws(SocketError) in try socket.read(toData: Socket.crlf, maxLength: 1) }),
            ("negative max", { () throws(SocketError) in try socket.read(maxLength: -5) }),
            ("NaN timeout", { () throws(SocketError) in try socket.read(timeout: .nan) }),
            ("offset past the buffer", { () throws(SocketError) in try socket.read(into: buffer, offset: 9) }),
            ("no room at the offset", { () throws(SocketError) in try socket.read(into: buffer, offset: 8) }),
            ("length larger than the room", { () throws(SocketError) in try socket.read(toLength: 6, into: buffer, offset: 3) }),
            ("empty buffer", { () throws(SocketError) in try socket.read(into: UnsafeMutableRawBufferPointer(start: nil, count: 0)) }),
        ]
        for (name, call) in cases {
            let error = #expect(throws: SocketError.self, "\(name)") { try call() }
            #expect(error?.code == .badParam, "\(name)")
        }
        #expect(socket.isConnected, "invalid calls leave the connection alone")

        let (listener, _) = recordedSocket()
        try listener.accept(onInterface: "127.0.0.1", port: 0)
        defer { listener.disconnect() }
        #expect(throws: SocketError.self) { try listener.read() }
        #expect(throws: SocketError.self) { try listener.write([1]) }

        socket.disconnectAfterWriting()
        let after = #expect(throws: SocketError.self) { try socket.read() }
        #expect(after?.code == .badConfig)
    }
}
