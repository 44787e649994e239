// SPDX-License-Identifier: MIT
import Glibc
import Synchronization
import Testing
@testable import SocketKit

/// Writes: order and tags, completion when the kernel accepted the bytes, partial progress,
/// the queued-byte count and watermarks, delivery on disconnect-after-writing.
@Suite("Writing")
struct WriteTests {
    @Test func writesCompleteInOrderWithTheirTags() throws {
        let pair = try ReadTests.RawPair()
        for tag in 0..<20 { try pair.socket.write(bytes("message \(tag);"), tag: tag) }
        let expected = (0..<20).flatMap { bytes("message \($0);") }
        #expect(try pair.peer.receive(exactly: expected.count) == expected)
        #expect(pair.recorder.wait { $0.filter { if case .wrote = $0 { return true }; return false }.count == 20 })
        #expect(pair.recorder.events.compactMap { if case .wrote(let tag) = $0 { return tag }; return nil } == Array(0..<20))
        #expect(pair.socket.queuedWriteBytes == 0)
        #expect(pair.socket.writeProgress == nil)
    }

    @Test func disconnectAfterWritingDeliversEightMebibytesIntact() throws {
        let pair = try ReadTests.RawPair()
        var payload: [UInt8] = []
        var sizes = [1, 7, 4096, 65536, 1_000_003, 3]
        var tag = 0
        while payload.count < 8 * 1024 * 1024 {
            let size = min(sizes[tag % sizes.count], 8 * 1024 * 1024 - payload.count)
            let chunk = pattern(size, seed: UInt8(truncatingIfNeeded: tag))
            payload += chunk
            try pair.socket.write(chunk, tag: tag)
            tag += 1
        }
        sizes.removeAll()
        pair.socket.disconnectAfterWriting()
        #expect(throws: SocketError.self) { try pair.socket.write([1]) }
        let received = try pair.peer.receiveUntilEndOfStream(timeout: 30)
        #expect(received.count == payload.count)
        #expect(checksum(received) == checksum(payload))
        #expect(received == payload)
        #expect(pair.recorder.waitForDisconnect() == .some(nil))
        #expect(pair.recorder.events.filter { if case .wrote = $0 { return true }; return false }.count == tag)
        #expect(pair.recorder.events.last?.isDisconnect == true)
    }

    private func checksum(_ bytes: [UInt8]) -> UInt64 {
        bytes.reduce(UInt64(14_695_981_039_346_656_037)) { ($0 ^ UInt64($1)) &* 1_099_511_628_211 }
    }

    @Test func partialWriteProgressAddsUpAndTheProgressQueryFollows() throws {
        let pair = try ReadTests.RawPair()
        let payload = pattern(32 * 1024 * 1024)
        try pair.socket.write(payload, tag: 77)
        // The peer is not reading: the write stalls part way.
        #expect(pair.recorder.wait { $0.contains { if case .wrotePartial = $0 { return true }; return false } })
        let progress = try #require(pair.socket.writeProgress)
        #expect(progress.tag == 77)
        #expect(progress.totalBytes == payload.count)
        #expect(progress.bytesDone > 0 && progress.bytesDone < payload.count)
        #expect(pair.socket.queuedWriteBytes == payload.count - progress.bytesDone)
        #expect(try pair.peer.receive(exactly: payload.count, timeout: 30) == payload)
        #expect(pair.recorder.wait { $0.contains(.wrote(tag: 77)) })
        let partial = pair.recorder.events.reduce(0) { total, event in
            if case .wrotePartial(let length, 77) = event { return total + length }
            return total
        }
        #expect(partial > 0 && partial < payload.count)
        #expect(pair.socket.queuedWriteBytes == 0)
    }

    /// A write made inside the socket's own callback goes to the kernel at once (no copy,
    /// no queue); what the kernel does not take is queued and reported as usual; the
    /// completions follow the callback, in order.
    @Test func writesFromInsideACallbackGoOutAtOnceAndCompleteAfterIt() throws {
        let pair = try ReadTests.RawPair()
        let large = pattern(32 * 1024 * 1024, seed: 3)
        let queuedInside = Atomic<Int>(-1)
        let doneInside = Atomic<Int>(-1)
        pair.recorder.onRead = { socket, _, _ in
            try? socket.write(bytes("small;"), tag: 1)
            try? socket.write(large, tag: 2)
            queuedInside.store(socket.queuedWriteBytes, ordering: .releasing)
            doneInside.store(socket.writeProgress?.bytesDone ?? -1, ordering: .releasing)
        }
        try pair.socket.read(toLength: 1, tag: 9)
        try pair.peer.send("x")
        #expect(try pair.peer.receive(exactly: 6 + large.count, timeout: 30) == bytes("small;") + large)
        #expect(pair.recorder.wait { $0.contains(.wrote(tag: 2)) })
        let firstChunk = doneInside.load(ordering: .acquiring)
        #expect(firstChunk > 0 && firstChunk < large.count, "the kernel took part of the large write at once")
        #expect(queuedInside.load(ordering: .acquiring) == large.count - firstChunk)
        let events = pair.recorder.events.filter {
            switch $0 {
            case .read, .wrote, .wrotePartial: return true
            default: return false
            }
        }
        #expect(Array(events.prefix(3)) == [.read(bytes("x"), tag: 9), .wrote(tag: 1), .wrotePartial(length: firstChunk, tag: 2)])
        #expect(events.last == .wrote(tag: 2))
        #expect(events.filter { $0 == .wrote(tag: 2) }.count == 1)
        #expect(pair.socket.queuedWriteBytes == 0)
        #expect(pair.socket.writeProgress == nil)
    }

    @Test func watermarksTellWhenAPeerStopsReadingAndCatchesUp() throws {
        let pair = try ReadTests.RawPair()
        try pair.socket.setWriteWatermarks(low: 64 * 1024, high: 1024 * 1024)
        #expect(pair.socket.writeWatermarks == (64 * 1024, 1024 * 1024))
        let chunk = pattern(256 * 1024)
        // Keep writing until the queue reports the high watermark (the kernel absorbs the
        // first few megabytes on loopback).
        var written = 0
        for tag in 0..<400 {
            try pair.socket.write(chunk, tag: tag)
            written += chunk.count
            if pair.recorder.wait(timeout: 0.005, until: { $0.contains { if case .highWatermark = $0 { return true }; return false } }) { break }
        }
        #expect(pair.recorder.wait { $0.contains { if case .highWatermark = $0 { return true }; return false } })
        #expect(pair.socket.queuedWriteBytes >= 1024 * 1024)
        #expect(!pair.recorder.events.contains { if case .lowWatermark = $0 { return true }; return false })
        _ = try pair.peer.receive(exactly: written, timeout: 30)
        #expect(pair.recorder.wait { $0.contains { if case .lowWatermark = $0 { return true }; return false } })
        let marks = pair.recorder.events.compactMap { event -> Int? in
            if case .highWatermark(let queued) = event { return queued }
            if case .lowWatermark(let queued) = event { return -queued }
            return nil
        }
        #expect(marks.count == 2)
        #expect(marks[0] >= 1024 * 1024)
        #expect(-marks[1] <= 64 * 1024)
        #expect(throws: SocketError.self) { try pair.socket.setWriteWatermarks(low: 10, high: 5) }
    }

    @Test func aWritePastTheQueueMaximumFailsAndQueuesNothing() throws {
        let pair = try ReadTests.RawPair() // the peer reads nothing until the end
        #expect(pair.socket.maximumQueuedWriteBytes == 64 * 1024 * 1024, "on by default")
        #expect(throws: SocketError(.badParam, "maximumQueuedWriteBytes must be 0 (no limit) or positive")) {
            try pair.socket.setMaximumQueuedWriteBytes(-1)
        }
        try pair.socket.setMaximumQueuedWriteBytes(1024 * 1024)
        #expect(pair.socket.maximumQueuedWriteBytes == 1024 * 1024)
        var accepted: [UInt8] = []
        var refusal: SocketError? = nil
        for tag in 0..<1000 { // bounded: 250 MiB at most
            let chunk = pattern(256 * 1024, seed: UInt8(truncatingIfNeeded: tag))
            do {
                try pair.socket.write(chunk, tag: tag)
                accepted += chunk
            } catch {
                refusal = error
                break
            }
        }
        #expect(refusal?.code == .writeQueueFull)
        #expect(pair.socket.queuedWriteBytes <= 1024 * 1024, "the memory held stays under the maximum")
        #expect(pair.socket.isConnected, "refused, not disconnected")
        // Every accepted write arrives intact, and nothing of the refused one.
        #expect(try pair.peer.receive(exactly: accepted.count) == accepted)
        #expect(pair.recorder.wait { $0.filter { if case .wrote = $0 { return true }; return false }.count * 256 * 1024 == accepted.count })
        try pair.socket.write(bytes("after"))
        #expect(try pair.peer.receive(exactly: 5) == bytes("after"))
        // A single write above the maximum never fits; 0 lifts the limit.
        let large = [UInt8](repeating: 7, count: 1024 * 1024 + 1)
        #expect { try pair.socket.write(large) } throws: { ($0 as? SocketError)?.code == .writeQueueFull }
        try pair.socket.setMaximumQueuedWriteBytes(0)
        try pair.socket.write(large)
        #expect(try pair.peer.receive(exactly: large.count) == large)
    }

    @Test func theDefaultQueueMaximumRefusesAWriteLargerThanIt() throws {
        let pair = try ReadTests.RawPair()
        let tooLarge = [UInt8](repeating: 1, count: 64 * 1024 * 1024 + 1)
        #expect { try pair.socket.write(tooLarge) } throws: { ($0 as? SocketError)?.code == .writeQueueFull }
        #expect(pair.socket.queuedWriteBytes == 0)
    }

    @Test func emptyWritesAreRefused() throws {
        let pair = try ReadTests.RawPair()
        let error = #expect(throws: SocketError.self) { try pair.socket.write([]) }
        #expect(error?.code == .badParam)
        #expect(throws: SocketError.self) { try pair.socket.write([1], timeout: .nan) }
    }

    @Test func aPeerResetMidWriteIsAnErrorNotASignal() throws {
        let pair = try ReadTests.RawPair()
        try pair.socket.write(pattern(32 * 1024 * 1024), tag: 1)
        #expect(pair.recorder.wait { $0.contains { if case .wrotePartial = $0 { return true }; return false } })
        pair.peer.reset()
        let error = try #require(pair.recorder.waitForDisconnect())
        #expect(error?.code == .system)
        #expect([ECONNRESET, EPIPE].contains(error?.osError ?? 0))
    }

    @Test func callsFromManyThreadsAtOnceOnOneSocketKeepEachThreadsOrder() throws {
        let pair = try ReadTests.RawPair()
        let threads = 8
        let perThread = 200
        let done = Atomic<Int>(0)
        let socket = pair.socket
        for thread in 0..<threads {
            _ = try PosixThread.spawnDetached(name: "writer-\(thread)") {
                for index in 0..<perThread {
                    try? socket.write([UInt8(thread), UInt8(index & 0xff), UInt8(index >> 8)], tag: thread * 1000 + index)
                    _ = socket.isConnected
                    _ = socket.writeProgress
                }
                done.add(1, ordering: .releasing)
            }
        }
        let received = try pair.peer.receive(exactly: threads * perThread * 3, timeout: 30)
        #expect(done.load(ordering: .acquiring) == threads)
        var next = [Int](repeating: 0, count: threads)
        for offset in stride(from: 0, to: received.count, by: 3) {
            let thread = Int(received[offset])
            let index = Int(received[offset + 1]) | Int(received[offset + 2]) << 8
            #expect(index == next[thread], "thread \(thread)'s writes stay in order")
            next[thread] = index + 1
        }
        #expect(next == Array(repeating: perThread, count: threads))
        #expect(pair.recorder.wait { $0.filter { if case .wrote = $0 { return true }; return false }.count == threads * perThread })
        #expect(pair.recorder.overlappingCallbacks == 0)
    }
}
