// SPDX-License-Identifier: MIT
import Glibc

/// Where a read to a file (`Socket.read(toLength:intoFile:)`) writes: a duplicate of the
/// caller's descriptor of a regular file, written at its position (shared with the
/// caller's, as `dup` shares it), and closed when the read is done or dropped.
final class FileSink {
    let fd: Int32
    let length: Int

    init(duplicating descriptor: Int32, length: Int) throws(SocketError) {
        let duplicate = fcntl(descriptor, F_DUPFD_CLOEXEC, 0)
        guard duplicate >= 0 else { throw SocketError.lastSystemError("fcntl(F_DUPFD_CLOEXEC)") }
        fd = duplicate
        self.length = length
    }

    /// Writes all of `bytes`; the error of a write that failed (ENOSPC, EIO, ...).
    func write(_ bytes: UnsafeRawBufferPointer) -> SocketError? {
        var done = 0
        while done < bytes.count {
            let written = Glibc.write(fd, bytes.baseAddress! + done, bytes.count - done)
            if written < 0 {
                if errno == EINTR { continue }
                return SocketError.lastSystemError("write to the file of a read")
            }
            done += written
        }
        return nil
    }

    deinit { close(fd) }
}

/// One queued read: its framing, where its bytes go, its timeout and tag, and how far it
/// has got. The framing logic here is pure (no I/O): the engine feeds it bytes from the
/// prebuffer or from the kernel and acts on the result.
struct ReadRequest {
    enum Framing {
        /// Whatever is available (at least one byte), at most `maximumLength`.
        case available
        /// Exactly this many bytes.
        case length(Int)
        /// Up to and including the separator, failing with `.readMaxedOut` once
        /// `maximumLength` bytes arrived without it.
        case separator([UInt8])
        /// Exactly the sink's length, written to its file as it arrives; completes with no
        /// bytes of its own.
        case file(FileSink)
    }

    // Field order keeps the request small (it sits in every core as `currentRead`): the
    // nine-byte framing last, the caller's buffer without an Optional's extra byte.
    let tag: Int
    /// Seconds; negative = no timeout. Grows with each extension the delegate grants, so it
    /// is also the "elapsed" value reported at the next expiry.
    var timeout: Double
    /// The most bytes this read may take (framing maximum, caller buffer room, socket limit).
    let maximumLength: Int
    var bytesDone = 0
    /// Bytes of earlier passes, for library-owned reads that did not complete in one pass.
    var collected: [UInt8] = []
    let callerOffset: Int
    /// Copies into `callerBuffer` happen only while this allows them (see CallerBufferGuard).
    let callerBufferGuard: CallerBufferGuard?
    /// The caller's memory (a nil base address when the read is into SocketKit's memory).
    private let callerStorage: UnsafeMutableRawBufferPointer
    let framing: Framing

    /// Caller's memory, when reading into a caller buffer; bytes go to `callerOffset...`.
    var callerBuffer: UnsafeMutableRawBufferPointer? {
        callerStorage.baseAddress == nil ? nil : callerStorage
    }

    init(framing: Framing, tag: Int, timeout: Double, maximumLength: Int,
         callerBuffer: UnsafeMutableRawBufferPointer? = nil, callerOffset: Int = 0,
         callerBufferGuard: CallerBufferGuard? = nil) {
        self.framing = framing
        self.tag = tag
        self.timeout = timeout
        self.maximumLength = maximumLength
        self.callerStorage = callerBuffer ?? UnsafeMutableRawBufferPointer(start: nil, count: 0)
        self.callerOffset = callerOffset
        self.callerBufferGuard = callerBufferGuard
    }

    /// The total to report as progress: known only for reads to a length.
    var totalLength: Int? {
        switch framing {
        case .length(let length): return length
        case .file(let sink): return sink.length
        case .available, .separator: return nil
        }
    }

    /// Whether partial progress is reported for this framing (as upstream: length and
    /// separator reads only).
    var reportsPartialProgress: Bool {
        if case .available = framing { return false }
        return true
    }

    enum Outcome {
        /// Every consumed byte went into the request; it needs more.
        case incomplete(consumed: Int)
        /// The read is complete. With `borrowed`, its bytes are exactly `source[0..<consumed]`
        /// (nothing was copied); otherwise they are in `collected` or the caller's buffer.
        case complete(consumed: Int, borrowed: Bool)
        /// A separator read consumed its maximum without finding the separator.
        case maxedOut(consumed: Int)
        /// A read to a file could not write to it.
        case failed(SocketError)
    }

    /// Takes what the read needs from the front of `source`.
    mutating func absorb(_ source: UnsafeRawBufferPointer) -> Outcome {
        let room = maximumLength - bytesDone
        switch framing {
        case .available:
            let take = min(source.count, room)
            if callerBuffer == nil && bytesDone == 0 {
                return .complete(consumed: take, borrowed: true)
            }
            store(UnsafeRawBufferPointer(rebasing: source[0..<take]))
            return .complete(consumed: take, borrowed: false)

        case .length(let length):
            let take = min(source.count, length - bytesDone)
            if callerBuffer == nil && bytesDone == 0 && take == length {
                return .complete(consumed: take, borrowed: true)
            }
            // Reserve for what may come soon, never the whole (peer-chosen) length at once:
            // the array grows as bytes actually arrive.
            if callerBuffer == nil && collected.capacity < length {
                collected.reserveCapacity(min(length, max(collected.capacity * 2, 64 * 1024)))
            }
            store(UnsafeRawBufferPointer(rebasing: source[0..<take]))
            return bytesDone == length ? .complete(consumed: take, borrowed: false) : .incomplete(consumed: take)

        case .separator(let separator):
            let limit = min(source.count, room)
            if let end = findSeparator(separator, in: UnsafeRawBufferPointer(rebasing: source[0..<limit])) {
                if callerBuffer == nil && bytesDone == 0 {
                    return .complete(consumed: end, borrowed: true)
                }
                store(UnsafeRawBufferPointer(rebasing: source[0..<end]))
                return .complete(consumed: end, borrowed: false)
            }
            store(UnsafeRawBufferPointer(rebasing: source[0..<limit]))
            return bytesDone >= maximumLength ? .maxedOut(consumed: limit) : .incomplete(consumed: limit)

        case .file(let sink):
            let take = min(source.count, sink.length - bytesDone)
            if let error = sink.write(UnsafeRawBufferPointer(rebasing: source[0..<take])) { return .failed(error) }
            bytesDone += take
            return bytesDone == sink.length ? .complete(consumed: take, borrowed: false) : .incomplete(consumed: take)
        }
    }

    /// The end (exclusive, counted in `source`) of the first separator in the bytes gathered
    /// so far followed by `source`, or nil. A separator may straddle the seam.
    private func findSeparator(_ separator: [UInt8], in source: UnsafeRawBufferPointer) -> Int? {
        let width = separator.count
        let seamStart = max(0, bytesDone - (width - 1))
        if seamStart < bytesDone {
            // Candidates starting in the gathered bytes and ending in `source`.
            for start in seamStart..<bytesDone {
                let fromGathered = bytesDone - start
                guard width - fromGathered <= source.count else { break }
                var matches = true
                for index in 0..<width {
                    let position = start + index
                    let byte = position < bytesDone ? gatheredByte(at: position) : source[position - bytesDone]
                    if byte != separator[index] { matches = false; break }
                }
                if matches { return width - fromGathered }
            }
        }
        guard source.count >= width, let base = source.baseAddress else { return nil }
        return separator.withUnsafeBytes { pattern -> Int? in
            let first = Int32(pattern[0])
            var offset = 0
            let lastStart = source.count - width
            while offset <= lastStart {
                guard let hit = memchr(base + offset, first, lastStart - offset + 1) else { return nil }
                let position = base.distance(to: UnsafeRawPointer(hit))
                if width == 1 || memcmp(base + position + 1, pattern.baseAddress! + 1, width - 1) == 0 {
                    return position + width
                }
                offset = position + 1
            }
            return nil
        }
    }

    private func gatheredByte(at position: Int) -> UInt8 {
        if let callerBuffer {
            return callerBuffer[callerOffset + position]
        }
        return collected[position]
    }

    private mutating func store(_ bytes: UnsafeRawBufferPointer) {
        guard bytes.count > 0 else { return }
        if let callerBuffer {
            let destination = callerBuffer.baseAddress! + callerOffset + bytesDone
            if let callerBufferGuard {
                callerBufferGuard.access { destination.copyMemory(from: bytes.baseAddress!, byteCount: bytes.count) }
            } else {
                destination.copyMemory(from: bytes.baseAddress!, byteCount: bytes.count)
            }
        } else {
            collected.append(contentsOf: bytes)
        }
        bytesDone += bytes.count
    }

    /// A copy of the bytes gathered so far (a withdrawn read gives them back). From a
    /// caller's buffer only while the guard allows it: after a release, nobody reads them.
    func gatheredBytes() -> [UInt8] {
        guard bytesDone > 0 else { return [] }
        guard let callerBuffer else { return collected }
        var copy: [UInt8] = []
        let take = {
            copy = Array(UnsafeRawBufferPointer(rebasing: callerBuffer[self.callerOffset..<(self.callerOffset + self.bytesDone)]))
        }
        if let callerBufferGuard { callerBufferGuard.access(take) } else { take() }
        return copy
    }

    /// The payload of a completed read that was not borrowed.
    mutating func takePayload() -> ReadPayload {
        if let callerBuffer {
            return .callerBuffer(callerBuffer, range: callerOffset..<(callerOffset + bytesDone))
        }
        var result: [UInt8] = []
        swap(&result, &collected)
        return .owned(result)
    }
}

/// A FIFO with O(1) removal at the front, for the read and write queues.
struct FIFO<Element> {
    private var storage: [Element] = []
    private var head = 0

    var isEmpty: Bool { head == storage.count }
    var count: Int { storage.count - head }

    mutating func append(_ element: Element) {
        storage.append(element)
    }

    mutating func popFirst() -> Element? {
        guard head < storage.count else { return nil }
        let element = storage[head]
        head += 1
        if head == storage.count {
            storage.removeAll(keepingCapacity: storage.capacity <= 64)
            head = 0
        } else if head >= 32 && head * 2 >= storage.count {
            storage.removeFirst(head)
            head = 0
        }
        return element
    }

    var first: Element? {
        head < storage.count ? storage[head] : nil
    }

    /// The element `offset` places after the front.
    subscript(offset: Int) -> Element {
        get { storage[head + offset] }
        set { storage[head + offset] = newValue }
    }

    mutating func removeAll() {
        storage.removeAll()
        head = 0
    }

    func reduce<Result>(_ initial: Result, _ next: (Result, Element) -> Result) -> Result {
        storage[head...].reduce(initial, next)
    }

    /// Removes the elements `shouldRemove` picks (told each one's offset from the front),
    /// keeping the order of the rest.
    mutating func removeAll(where shouldRemove: (_ offset: Int, Element) -> Bool) {
        var kept: [Element] = []
        for offset in 0..<count where !shouldRemove(offset, storage[head + offset]) {
            kept.append(storage[head + offset])
        }
        storage = kept
        head = 0
    }

    /// Drops every element after the first `count`.
    mutating func keepFirst(_ count: Int) {
        guard count > 0 else { return removeAll() }
        let end = head + count
        if end < storage.count { storage.removeLast(storage.count - end) }
    }
}
