import Glibc

/// A FIFO of bytes in one malloc'd block: the socket's prebuffer (bytes read from the kernel
/// that no read has consumed yet).
///
/// Manual memory on purpose: a read callback may hold a pointer into this storage while the
/// engine runs, and Swift's exclusivity checks on a class property holding an array would
/// trap on the first unrelated access. The engine never mutates the queue during a callback.
/// The block is freed as soon as the queue drains, so an idle connection owns no buffer.
struct ByteQueue: ~Copyable {
    private var base: UnsafeMutableRawPointer? = nil
    private var capacity = 0
    private var start = 0
    private var end = 0

    init() {}

    deinit { free(base) }

    var count: Int { end - start }
    var isEmpty: Bool { end == start }

    /// The queued bytes, valid until the next mutation.
    var readableBytes: UnsafeRawBufferPointer {
        guard let base else { return UnsafeRawBufferPointer(start: nil, count: 0) }
        return UnsafeRawBufferPointer(start: base + start, count: end - start)
    }

    mutating func append(_ bytes: UnsafeRawBufferPointer) {
        guard bytes.count > 0 else { return }
        if capacity - end < bytes.count {
            makeRoom(for: bytes.count)
        }
        (base! + end).copyMemory(from: bytes.baseAddress!, byteCount: bytes.count)
        end += bytes.count
    }

    /// Makes room for `count` bytes at the back and lets `fill` write up to that many;
    /// `fill` returns how many it wrote.
    mutating func append(count: Int, _ fill: (UnsafeMutableRawBufferPointer) -> Int) {
        guard count > 0 else { return }
        if capacity - end < count {
            makeRoom(for: count)
        }
        let written = fill(UnsafeMutableRawBufferPointer(start: base! + end, count: count))
        end += max(0, min(written, count))
    }

    /// Drops `count` bytes from the front; frees the block once empty.
    mutating func consume(_ count: Int) {
        start += count
        if start >= end {
            removeAll()
        }
    }

    mutating func removeAll() {
        free(base)
        base = nil
        capacity = 0
        start = 0
        end = 0
    }

    private mutating func makeRoom(for additional: Int) {
        let live = end - start
        if start > 0 && capacity - live >= additional {
            // Enough room once the consumed prefix is reclaimed.
            if live > 0 { memmove(base!, base! + start, live) }
        } else {
            var newCapacity = max(capacity * 2, 4096)
            while newCapacity - live < additional { newCapacity *= 2 }
            let grown = malloc(newCapacity)!
            if live > 0 { grown.copyMemory(from: base! + start, byteCount: live) }
            free(base)
            base = grown
            capacity = newCapacity
        }
        start = 0
        end = live
    }
}
