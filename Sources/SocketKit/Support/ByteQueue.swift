// SPDX-License-Identifier: MIT
import Glibc

/// A FIFO of bytes in one malloc'd block: the socket's prebuffer (bytes read from the kernel
/// that no read has consumed yet).
///
/// Manual memory on purpose: a read callback may hold a pointer into this storage while the
/// engine runs, and Swift's exclusivity checks on a class property holding an array would
/// trap on the first unrelated access. The engine never mutates the queue during a callback.
/// The block is freed as soon as the queue drains, so an idle connection owns no buffer.
///
/// One pointer wide: the capacity and the read and write offsets live at the start of the
/// block, so a queue with nothing in it (every idle connection's prebuffer) costs 8 bytes.
struct ByteQueue: ~Copyable {
    private struct Header {
        var capacity: Int
        var start: Int
        var end: Int
    }
    /// Bytes before the data: the header, rounded up to keep the data 16-byte aligned.
    private static let headerSize = 32

    private var block: UnsafeMutablePointer<Header>? = nil

    init() {}

    deinit { free(block) }

    private var data: UnsafeMutableRawPointer { UnsafeMutableRawPointer(block!) + ByteQueue.headerSize }

    var count: Int {
        guard let block else { return 0 }
        return block.pointee.end - block.pointee.start
    }

    var isEmpty: Bool {
        guard let block else { return true }
        return block.pointee.end == block.pointee.start
    }

    /// The queued bytes, valid until the next mutation.
    var readableBytes: UnsafeRawBufferPointer {
        guard let block else { return UnsafeRawBufferPointer(start: nil, count: 0) }
        return UnsafeRawBufferPointer(start: data + block.pointee.start, count: block.pointee.end - block.pointee.start)
    }

    mutating func append(_ bytes: UnsafeRawBufferPointer) {
        guard bytes.count > 0 else { return }
        if room < bytes.count {
            makeRoom(for: bytes.count)
        }
        (data + block!.pointee.end).copyMemory(from: bytes.baseAddress!, byteCount: bytes.count)
        block!.pointee.end += bytes.count
    }

    /// Makes room for `count` bytes at the back and lets `fill` write up to that many;
    /// `fill` returns how many it wrote.
    mutating func append(count: Int, _ fill: (UnsafeMutableRawBufferPointer) -> Int) {
        guard count > 0 else { return }
        if room < count {
            makeRoom(for: count)
        }
        let written = fill(UnsafeMutableRawBufferPointer(start: data + block!.pointee.end, count: count))
        block!.pointee.end += max(0, min(written, count))
    }

    /// Puts `bytes` in front of the queued ones (`Socket.unread`, a withdrawn read's bytes).
    mutating func prepend(_ bytes: UnsafeRawBufferPointer) {
        guard bytes.count > 0 else { return }
        if let block, block.pointee.start >= bytes.count {
            block.pointee.start -= bytes.count
            (data + block.pointee.start).copyMemory(from: bytes.baseAddress!, byteCount: bytes.count)
            return
        }
        let live = count
        var capacity = 4096
        while capacity < live + bytes.count { capacity *= 2 }
        let grown = malloc(ByteQueue.headerSize + capacity)!.bindMemory(to: Header.self, capacity: 1)
        grown.initialize(to: Header(capacity: capacity, start: 0, end: live + bytes.count))
        let grownData = UnsafeMutableRawPointer(grown) + ByteQueue.headerSize
        grownData.copyMemory(from: bytes.baseAddress!, byteCount: bytes.count)
        if live > 0 {
            (grownData + bytes.count).copyMemory(from: data + block!.pointee.start, byteCount: live)
        }
        free(block)
        block = grown
    }

    /// Drops `count` bytes from the front; frees the block once empty.
    mutating func consume(_ count: Int) {
        guard let block else { return }
        block.pointee.start += count
        if block.pointee.start >= block.pointee.end {
            removeAll()
        }
    }

    /// Drops `count` bytes from the front but keeps the block even when that empties it, so
    /// that a callback may go on looking at the dropped bytes; `releaseIfEmpty` afterwards.
    /// Nothing can overwrite them meanwhile: the engine changes no prebuffer while a callback
    /// of its socket runs (calls that would, `Socket.unread` and `cancelRead`, wait for it).
    mutating func consumeKeepingStorage(_ count: Int) {
        guard let block else { return }
        block.pointee.start += count
    }

    /// Frees the block if nothing is queued (after `consumeKeepingStorage`).
    mutating func releaseIfEmpty() {
        if let block, block.pointee.start >= block.pointee.end {
            removeAll()
        }
    }

    mutating func removeAll() {
        free(block)
        block = nil
    }

    /// Free bytes after the end.
    private var room: Int {
        guard let block else { return 0 }
        return block.pointee.capacity - block.pointee.end
    }

    private mutating func makeRoom(for additional: Int) {
        let capacity = block?.pointee.capacity ?? 0
        let start = block?.pointee.start ?? 0
        let live = count
        if let block, start > 0 && capacity - live >= additional {
            // Enough room once the consumed prefix is reclaimed.
            if live > 0 { memmove(data, data + start, live) }
            block.pointee.start = 0
            block.pointee.end = live
            return
        }
        var newCapacity = max(capacity * 2, 4096)
        while newCapacity - live < additional { newCapacity *= 2 }
        let grown = malloc(ByteQueue.headerSize + newCapacity)!.bindMemory(to: Header.self, capacity: 1)
        grown.initialize(to: Header(capacity: newCapacity, start: 0, end: live))
        if live > 0 {
            (UnsafeMutableRawPointer(grown) + ByteQueue.headerSize).copyMemory(from: data + start, byteCount: live)
        }
        free(block)
        block = grown
    }
}
