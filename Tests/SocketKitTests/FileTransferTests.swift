// SPDX-License-Identifier: MIT
import Glibc
import Testing
@testable import SocketKit

/// An unlinked temporary file holding `contents`, open read-write at position 0.
func temporaryFile(_ contents: [UInt8] = []) throws -> Int32 {
    var template = Array("/tmp/socketkit-file-XXXXXX".utf8CString)
    let fd = template.withUnsafeMutableBufferPointer { mkstemp($0.baseAddress!) }
    guard fd >= 0 else { throw TestFailure("mkstemp: \(errno)") }
    template.withUnsafeBufferPointer { _ = unlink($0.baseAddress!) }
    var done = 0
    while done < contents.count {
        let written = contents.withUnsafeBytes { write(fd, $0.baseAddress! + done, contents.count - done) }
        guard written > 0 else { throw TestFailure("write: \(errno)") }
        done += written
    }
    lseek(fd, 0, SEEK_SET)
    return fd
}

/// A file region sent with sendfile as a queued write, and a read whose bytes go to a file
/// (issue 32, item 7).
@Suite("File transfer")
struct FileTransferTests {
    typealias RawPair = ReadTests.RawPair

    @Test func aFileRegionIsAWriteInTheQueueWithItsTag() throws {
        let contents = pattern(3 * 1024 * 1024, seed: 9)
        let file = try temporaryFile(contents)
        let pair = try RawPair()
        try pair.socket.write(bytes("head"), tag: 1)
        try pair.socket.writeFile(file, offset: 1000, length: 2 * 1024 * 1024, tag: 2)
        close(file) // SocketKit keeps its own duplicate
        try pair.socket.write(bytes("tail"), tag: 3)
        let expected = bytes("head") + contents[1000..<(1000 + 2 * 1024 * 1024)] + bytes("tail")
        #expect(try pair.peer.receive(exactly: expected.count) == expected)
        #expect(pair.recorder.wait {
            $0.compactMap { if case .wrote(let tag) = $0 { tag } else { nil } } == [1, 2, 3]
        })
        #expect(pair.socket.queuedWriteBytes == 0)
    }

    @Test func theWholeFileByDefaultAndItsPositionIsUntouched() throws {
        let contents = pattern(100_000, seed: 2)
        let file = try temporaryFile(contents)
        defer { close(file) }
        lseek(file, 5, SEEK_SET)
        let pair = try RawPair()
        try pair.socket.writeFile(file, tag: 4)
        #expect(try pair.peer.receive(exactly: contents.count) == contents)
        #expect(pair.recorder.wait { $0.contains(.wrote(tag: 4)) })
        #expect(lseek(file, 0, SEEK_CUR) == 5)
    }

    @Test func aFileThatShrinksBeforeItIsSentEndsTheConnection() throws {
        let file = try temporaryFile(pattern(32 * 1024 * 1024))
        defer { close(file) }
        let pair = try RawPair(configure: { try $0.setBufferSizes(send: 64 * 1024, receive: 0) })
        try pair.socket.writeFile(file, tag: 1)
        // The peer reads nothing yet: the kernel's buffers fill long before 32 MiB, and the
        // write goes on in parts.
        #expect(pair.recorder.wait { $0.contains { if case .wrotePartial = $0 { true } else { false } } })
        ftruncate(file, 1024)
        _ = try? pair.peer.receiveUntilEndOfStream()
        let error = try #require(pair.recorder.waitForDisconnect() ?? nil)
        #expect(error.code == .other, "\(error)")
    }

    @Test func badRegionsAreRefusedBeforeAnythingIsQueued() throws {
        let file = try temporaryFile(pattern(1000))
        defer { close(file) }
        let pair = try RawPair()
        func refused(_ code: SocketError.Code, _ body: () throws -> Void) {
            #expect { try body() } throws: { ($0 as? SocketError)?.code == code }
        }
        refused(.badParam) { try pair.socket.writeFile(file, offset: -1) }
        refused(.badParam) { try pair.socket.writeFile(file, offset: 1001) }
        refused(.badParam) { try pair.socket.writeFile(file, offset: 1000) } // empty
        refused(.badParam) { try pair.socket.writeFile(file, offset: 10, length: 991) }
        refused(.badParam) { try pair.socket.writeFile(-1) }
        var ends: [Int32] = [-1, -1]
        #expect(pipe(&ends) == 0)
        defer { close(ends[0]); close(ends[1]) }
        refused(.badParam) { try pair.socket.writeFile(ends[0]) }
        let writeOnly = open("/dev/null", O_WRONLY)
        defer { close(writeOnly) }
        refused(.badParam) { try pair.socket.writeFile(writeOnly) }
        refused(.badConfig) { try Socket().writeFile(file) }
        #expect(pair.socket.queuedWriteBytes == 0)
        let tls = try Pair()
        defer { tls.close() }
        try tls.client.startTLS(TestCertificates.client())
        refused(.badConfig) { try tls.client.writeFile(file) }
    }

    @Test func aReadIntoAFileWritesItsBytesThereAndCompletesEmpty() throws {
        let file = try temporaryFile()
        defer { close(file) }
        let payload = pattern(3 * 1024 * 1024, seed: 5)
        let pair = try RawPair()
        try pair.socket.read(toLength: payload.count, intoFile: file, tag: 7)
        try pair.socket.read(toLength: 4, tag: 8)
        try pair.peer.send(payload + bytes("next"))
        #expect(pair.recorder.wait { $0.contains(.read(bytes("next"), tag: 8)) })
        let events = pair.recorder.events
        #expect(events.contains(.read([], tag: 7)))
        let partial = events.reduce(0) { sum, event in
            if case .readPartial(let length, 7) = event { sum + length } else { sum }
        }
        #expect(partial > 0 && partial <= payload.count)
        #expect(lseek(file, 0, SEEK_CUR) == off_t(payload.count)) // written at its position
        var written = [UInt8](repeating: 0, count: payload.count)
        #expect(pread(file, &written, written.count, 0) == payload.count)
        #expect(written == payload)
    }

    @Test func badReadsIntoAFileAreRefused() throws {
        let file = try temporaryFile()
        defer { close(file) }
        let pair = try RawPair()
        let readOnly = open("/dev/null", O_RDONLY)
        defer { close(readOnly) }
        func badParam(_ body: () throws -> Void) {
            #expect { try body() } throws: { ($0 as? SocketError)?.code == .badParam }
        }
        badParam { try pair.socket.read(toLength: 0, intoFile: file) }
        badParam { try pair.socket.read(toLength: 10, intoFile: readOnly) }
        badParam { try pair.socket.read(toLength: 10, intoFile: -1) }
        let readOnlyFile = open("/proc/self/stat", O_RDONLY)
        defer { close(readOnlyFile) }
        badParam { try pair.socket.read(toLength: 10, intoFile: readOnlyFile) }
        #expect { try Socket().read(toLength: 10, intoFile: file) } throws: { ($0 as? SocketError)?.code == .badConfig }
    }
}
