// SPDX-License-Identifier: MIT
import Glibc
import SocketKitC

extension TCPSocketCore {
    /// Queued writes gathered into one `sendmsg`.
    static let writesPerSystemCall = 64
    /// System calls per flush before yielding to the other sockets of the loop.
    static let systemCallsPerFlush = 16

    /// Whether a write of `count` bytes fits under `limit` (0: no limit) with what is
    /// queued now.
    @inline(__always)
    func queuedWriteBytesAllow(_ count: Int, limit: Int) -> Bool {
        limit == 0 || queuedWriteBytes <= limit - count
    }

    /// Counts `count` bytes of a write about to be queued, on any thread before it is handed
    /// to the loop, so that writes on their way count too and writers on several threads
    /// cannot pass `limit` together. False (nothing counted) when they would pass it; 0 is
    /// no limit.
    func reserveQueuedWriteBytes(_ count: Int, limit: Int) -> Bool {
        guard limit > 0 else {
            publishedQueuedWriteBytes.wrappingAdd(count, ordering: .relaxed)
            return true
        }
        var current = queuedWriteBytes
        while current <= limit - count {
            let (exchanged, original) = publishedQueuedWriteBytes.compareExchange(
                expected: current, desired: current + count, ordering: .relaxed)
            if exchanged { return true }
            current = original
        }
        return false
    }

    /// Bytes written, or dropped with their request.
    func releaseQueuedWriteBytes(_ count: Int) {
        publishedQueuedWriteBytes.wrappingSubtract(count, ordering: .relaxed)
    }

    /// Queues a write whose bytes were counted (`reserveQueuedWriteBytes`). False when the
    /// session it was made for is over (its bytes are no longer counted).
    @discardableResult
    func enqueueWrite(_ request: WriteRequest, session: UInt64) -> Bool {
        guard session == self.session, phase == .resolving || phase == .connecting || phase == .proxying || phase == .connected,
              !disconnectAfterReads, !disconnectAfterWrites else {
            releaseQueuedWriteBytes(request.remaining)
            return false
        }
        writeQueue.append(request)
        if phase == .connected {
            if !headWriteStarted { startHeadWrite() }
            scheduleWriteFlush()
        }
        checkWatermarks()
        return true
    }

    /// The fast path of a write made on the loop thread: with nothing queued ahead and the
    /// socket writable, the bytes go to the kernel at once (as libuv's uv_write does), so
    /// a callback that answers a read costs one `send` and no copy. Returns the bytes the
    /// kernel took, or nil when the write must take the queue (nothing sent: not connected,
    /// writes queued ahead, a disconnect pending, the socket full, or a send that failed for
    /// good, which `sendFailed` records for the read side to report).
    ///
    /// Taken only where its completion cannot run user code re-entrantly: inside this
    /// socket's own callback (didWrite then follows that callback, as always), when the
    /// delegate does not listen for write completions, or when the caller takes a whole
    /// write's completion from the return value instead of an event (`silentCompletion`: the
    /// async face, whose tasks run on the loop outside callbacks).
    func writeImmediately(_ bytes: UnsafeRawBufferPointer, session: UInt64, silentCompletion: Bool = false) -> Int? {
        guard session == self.session, phase == .connected, writable, !hasQueuedWrites,
              !writeTimeoutPending, !disconnectAfterReads, !disconnectAfterWrites, bytes.count > 0,
              inCallout || silentCompletion || (!ownerWants(.write) && !ownerWants(.writePartial)) else { return nil }
        if hasTLS { return writeImmediatelySecure(bytes) }
        let written = skc_send(fd, bytes.baseAddress, bytes.count, SystemCalls.sendFlags)
        guard written > 0 else {
            if written < 0 { sendReturnedError(errno) }
            return nil
        }
        if written < bytes.count { writable = false }
        return written
    }

    /// A send returned -1 with `error`: EAGAIN clears `writable`, EINTR is nothing, anything
    /// else fails the connection's output (`sendFailed`: the error is the socket's, and this
    /// send took it, so it is recorded or lost). False in that last case.
    @discardableResult
    func sendReturnedError(_ error: Int32) -> Bool {
        if error == EAGAIN || error == EWOULDBLOCK {
            writable = false
        } else if error != EINTR {
            sendFailed(transportError(error, "write"))
            return false
        }
        return true
    }

    /// A send failed for good (the peer reset, the connection broke): nothing more goes
    /// out, but what the peer sent before is still in the kernel. The read side delivers it
    /// to the queued reads, then ends the session with `error` (`handleEndOfStream`), as for
    /// a reset epoll reports. Never a teardown inside the send: a write made in a callback,
    /// on any socket of the loop, ends nothing under its caller.
    func sendFailed(_ error: SocketError) {
        if outOfLine.sendFailure == nil { outOfLine.sendFailure = error }
        writable = false
        peerHalfClosed = true
        readable = true
        scheduleReadPump()
    }

    /// Completes a write the fast path sent whole.
    func finishImmediateWrite(tag: Int) {
        if ownerWants(.write) { emit(.didWrite(tag: tag)) }
    }

    /// Queues the rest of a write the fast path sent in part (`request.offset` bytes). The
    /// whole write fitted under the limit before it was sent: the rest is counted as it is.
    func enqueuePartlyWritten(_ request: WriteRequest, session: UInt64) {
        if ownerWants(.writePartial) { emit(.didWritePartial(length: request.offset, tag: request.tag)) }
        _ = reserveQueuedWriteBytes(request.remaining, limit: 0)
        enqueueWrite(request, session: session)
    }

    /// Makes the front of the queue the current write: publishes its progress and arms its
    /// timeout (upstream: the timer starts when a write becomes current).
    func startHeadWrite() {
        // A write queued after a TLS marker becomes current only once the connection is secure.
        guard phase == .connected, !tlsHoldsWrites, let head = writeQueue.first else { return }
        headWriteStarted = true
        let progress = writeProgressBox.load() ?? writeProgressBox.storeIfNil(ProgressBox())
        progress.cell.publish(tag: head.tag, done: head.offset, total: head.length)
        if head.timeout >= 0 {
            arm(&writeTimer, deadline: deadline(afterSeconds: head.timeout)) { $0.writeTimerFired() }
        }
    }

    /// Writes as much of the queue as the kernel takes, several requests per system call.
    func flushWrites() {
        if let tls, tls.stage != .waiting {
            if tls.stage == .secure {
                flushSecureWrites()
            } else {
                sendTLSOutput() // handshake records
            }
            return
        }
        var systemCalls = 0
        while phase == .connected && writable && !writeTimeoutPending && hasQueuedWrites && !tlsHoldsWrites {
            guard systemCalls < TCPSocketCore.systemCallsPerFlush else {
                scheduleWriteFlush()
                return
            }
            systemCalls += 1
            let (written, attempted) = sendQueuedWrites()
            if written < 0 {
                guard sendReturnedError(errno) else { return }
                continue
            }
            if written < attempted { writable = false }
            guard account(written: written) else { return }
        }
        closeIfDisconnectAfterIsDue()
    }

    /// One `send`/`sendmsg` of the front requests. Returns the result and the bytes offered.
    private func sendQueuedWrites() -> (written: Int, attempted: Int) {
        // Before a TLS marker, only the writes queued ahead of it go out in plaintext.
        let count = min(writeQueue.count, TCPSocketCore.writesPerSystemCall, tls?.writesBefore ?? Int.max)
        if specialQueuedWrites > 0 { return sendQueuedWritesOneByOne(count: count) }
        if count == 1, let head = writeQueue.first {
            return head.withRemainingBytes { bytes in
                (skc_send(fd, bytes.baseAddress, bytes.count, SystemCalls.sendFlags), bytes.count)
            }
        }
        return withUnsafeTemporaryAllocation(of: iovec.self, capacity: count) { vectors in
            gather(index: 0, count: count, into: vectors, attempted: 0)
        }
    }

    /// Fills `vectors[index...]` from the queue, keeping each request's bytes pinned while
    /// the system call runs (recursion keeps every `withRemainingBytes` scope open). With
    /// `passing`, the `sendmsg` carries those descriptors (SCM_RIGHTS).
    func gather(index: Int, count: Int, into vectors: UnsafeMutableBufferPointer<iovec>,
                attempted: Int, passing: [Int32]? = nil) -> (written: Int, attempted: Int) {
        if index == count {
            if let passing {
                let written = passing.withUnsafeBufferPointer {
                    skc_send_with_descriptors(fd, vectors.baseAddress, Int32(count), $0.baseAddress, Int32($0.count))
                }
                return (written, attempted)
            }
            var message = msghdr()
            message.msg_iov = vectors.baseAddress
            message.msg_iovlen = count
            return (skc_sendmsg(fd, &message, SystemCalls.sendFlags), attempted)
        }
        return writeQueue[index].withRemainingBytes { bytes in
            vectors[index] = iovec(iov_base: UnsafeMutableRawPointer(mutating: bytes.baseAddress), iov_len: bytes.count)
            return gather(index: index + 1, count: count, into: vectors, attempted: attempted + bytes.count,
                          passing: passing)
        }
    }

    /// Queues a write that needs a system call of its own (descriptors to pass, a file
    /// region), counted by `reserveQueuedWriteBytes`.
    func enqueueSpecialWrite(_ request: WriteRequest, session: UInt64) {
        if enqueueWrite(request, session: session) { specialQueuedWrites += 1 }
    }

    /// `sendQueuedWrites` while special writes are queued: each begins a system call of its
    /// own, and the writes before it leave without it. A file region goes with `sendfile`
    /// (the kernel copies from the page cache to the socket: no copy through this process).
    /// Descriptors ride with the first byte of their write, so their write begins a
    /// `sendmsg` carrying SCM_RIGHTS (with the plain writes after it).
    private func sendQueuedWritesOneByOne(count: Int) -> (written: Int, attempted: Int) {
        var plain = 0
        while plain < count && !writeQueue[plain].isSpecial { plain += 1 }
        if plain > 0 {
            return withUnsafeTemporaryAllocation(of: iovec.self, capacity: plain) { vectors in
                gather(index: 0, count: plain, into: vectors, attempted: 0)
            }
        }
        let head = writeQueue[0]
        if case .file(let region) = head.storage {
            let chunk = min(head.remaining, TCPSocketCore.largestFileChunk)
            let written = skc_sendfile(fd, region.fd, region.offset + Int64(head.offset), chunk)
            if written == 0 {
                // The file is shorter than it was when the write was queued: what went out
                // cannot be taken back, and the peer would wait for the rest, so the
                // connection ends here (this runs in a flush, never under a write's caller).
                writable = false
                closeSession(SocketError(.other, "the file ended \(head.remaining) bytes before the region written from it (truncated meanwhile?)"))
                return (0, chunk)
            }
            if written == head.remaining { specialQueuedWrites -= 1 }
            return (written, chunk)
        }
        guard let passing = head.pendingDescriptors else { return (0, 0) }
        var end = 1
        while end < count && !writeQueue[end].isSpecial { end += 1 }
        let result = withUnsafeTemporaryAllocation(of: iovec.self, capacity: end) { vectors in
            gather(index: 0, count: end, into: vectors, attempted: 0, passing: passing.descriptors)
        }
        if result.written > 0 {
            passing.sent()
            specialQueuedWrites -= 1
        }
        return result
    }

    /// The most one `sendfile` is asked for (the kernel's own cap is about 2 GiB).
    static let largestFileChunk = 1 << 30

    /// Attributes `written` bytes to the queued requests in order, completing them.
    /// Returns false when the session ended in a callback.
    func account(written: Int) -> Bool {
        let session = self.session
        var left = written
        releaseQueuedWriteBytes(written)
        while left > 0, let head = writeQueue.first {
            let chunk = min(head.remaining, left)
            left -= chunk
            if chunk == head.remaining {
                _ = writeQueue.popFirst()
                headWriteStarted = false
                cancel(writeTimer)
                writeProgressBox.load()?.cell.clear()
                if hasTLS { tlsCountCompletedWrite() }
                if ownerWants(.write) {
                    emit(.didWrite(tag: head.tag))
                    guard session == self.session && phase == .connected else { return false }
                }
                if !headWriteStarted { startHeadWrite() }
            } else {
                writeQueue[0].offset += chunk
                writeProgressBox.load()?.cell.update(done: writeQueue[0].offset)
                if ownerWants(.writePartial) {
                    emit(.didWritePartial(length: chunk, tag: head.tag))
                    guard session == self.session && phase == .connected else { return false }
                }
            }
        }
        checkWatermarks()
        return session == self.session && phase == .connected
    }

    /// Reports crossings of the high and low watermarks, once each way.
    func checkWatermarks() {
        if !aboveHighWatermark && queuedWriteBytes >= configuration.writeHighWatermark {
            aboveHighWatermark = true
            if ownerWants(.watermarks) { emit(.didReachWriteHighWatermark(queuedBytes: queuedWriteBytes)) }
        } else if aboveHighWatermark && queuedWriteBytes <= configuration.writeLowWatermark {
            aboveHighWatermark = false
            if ownerWants(.watermarks) { emit(.didDrainToWriteLowWatermark(queuedBytes: queuedWriteBytes)) }
        }
    }

    // MARK: Write timeouts

    func writeTimerFired() {
        guard phase == .connected, let head = writeQueue.first, !writeTimeoutPending else { return }
        writeTimeoutPending = true
        timeoutQuestions += 1
        writeTimeoutQuestion = timeoutQuestions
        emit(.shouldTimeoutWrite(tag: head.tag, elapsed: head.timeout, bytesDone: head.offset,
                                 question: writeTimeoutQuestion))
    }

    /// The delegate's answer to `shouldTimeoutWrite`.
    func resolveWriteTimeout(extension seconds: Double, question: UInt64) {
        guard question == writeTimeoutQuestion, phase == .connected, writeTimeoutPending, hasQueuedWrites else { return }
        writeTimeoutPending = false
        if seconds > 0 {  // +INFINITY included: extended for good, as an infinite timeout never expires
            writeQueue[0].timeout += seconds
            arm(&writeTimer, deadline: deadline(afterSeconds: seconds)) { $0.writeTimerFired() }
            scheduleWriteFlush()
        } else {
            closeSession(SocketError(.writeTimeout, "write operation timed out"))
        }
    }
}
