// SPDX-License-Identifier: MIT
import Glibc
import SocketKitC

extension TCPSocketCore {
    /// Reads per pump before yielding to the other sockets of the loop.
    static let kernelReadsPerPump = 16

    func enqueueRead(_ request: consuming ReadRequest, session: UInt64) {
        guard session == self.session, phase == .resolving || phase == .connecting || phase == .proxying || phase == .connected,
              !disconnectAfterReads, !disconnectAfterWrites else { return }
        // The usual case, one read at a time, never touches the queue's array: the read
        // waits in `currentRead` (not started) and an idle socket owns no queue storage.
        if currentRead == nil && !hasQueuedReads {
            currentRead = consume request
        } else {
            readQueue.append(consume request)
        }
        // A callback of this socket's own pump queued it: that pump's loop starts it.
        if phase == .connected && !pumpingReads { scheduleReadPump() }
    }

    /// Serves the read queue: from the prebuffer first, then from the kernel while the
    /// socket is readable. With no read queued the socket is not read at all, so a peer that
    /// sends faster than the application reads fills the kernel buffers and TCP flow control
    /// slows it down; once the peer's stream has ended, an idle socket looks for the end
    /// (`reportEndOfStreamIfNothingUnread`).
    func pumpReads() {
        if hasTLS && tls!.stage != .secure {
            guard tlsPumpBeforeSecure() else { return }
        }
        let secure = tls?.stage == .secure
        var kernelReads = 0
        let wasPumping = pumpingReads
        pumpingReads = true
        defer { pumpingReads = wasPumping }
        pump: while phase == .connected && !readTimeoutPending {
            if !currentReadStarted {
                guard !tlsHoldsReads else { break }
                if currentRead == nil {
                    guard let next = readQueue.popFirst() else { break }
                    currentRead = next
                }
                startCurrentRead()
            }
            if !prebuffer.isEmpty {
                guard feedCurrentRead(from: prebuffer.readableBytes, fromPrebuffer: true) else { return }
                continue
            }
            if readEOF {
                handleEndOfStream()
                // Its report's callbacks may have queued a read of what is left (a delegate
                // taking back the bytes of the read it withdrew): a read queued by this pump's
                // callbacks is this pump's to start, from the prebuffer.
                guard phase == .connected, !prebuffer.isEmpty, currentRead != nil || hasQueuedReads else { return }
                continue
            }
            guard readable || (secure && tls!.hasBufferedInput) else { break }
            guard kernelReads < TCPSocketCore.kernelReadsPerPump else {
                scheduleReadPump()
                break
            }
            kernelReads += 1
            let buffer = loop.readBuffer
            if secure {
                switch readSecure(into: buffer) {
                case .bytes(let count):
                    guard feedCurrentRead(from: UnsafeRawBufferPointer(rebasing: buffer[0..<count]),
                                          fromPrebuffer: false) else { return }
                case .wouldBlock:
                    break pump
                case .endOfStream:
                    readEOF = true
                case .failed(let error):
                    closeSession(error)
                    return
                }
                continue
            }
            let count = receivesDescriptors
                ? readKeepingDescriptors(buffer)
                : skc_read(fd, buffer.baseAddress, buffer.count)
            if count > 0 {
                // Edge-triggered: a short read drained the socket, and new data raises a new
                // edge. Unless the peer's FIN is already queued: then read on to see EOF.
                // (A Unix-domain read that carries descriptors stops where they came, short
                // of what is there: only EAGAIN says drained.)
                if count < buffer.count && !peerHalfClosed && !receivesDescriptors { readable = false }
                guard feedCurrentRead(from: UnsafeRawBufferPointer(rebasing: buffer[0..<count]),
                                      fromPrebuffer: false) else { return }
                if receivesDescriptors, let dropped = existingUnixExtras?.takeDroppedError() {
                    closeSession(dropped)
                    return
                }
            } else if count == 0 {
                readEOF = true
                readable = false
            } else {
                let error = errno
                if error == EAGAIN || error == EWOULDBLOCK {
                    readable = false
                } else if error != EINTR {
                    closeSession(SocketError.systemError(error, "read"))
                    return
                }
            }
        }
        // Idle, with the peer's stream ended, or (TLS) records waiting that may end it.
        if currentRead == nil && !hasQueuedReads && phase == .connected && !readStreamClosedReported
            && (peerHalfClosed || readEOF || (secure && (readable || tls!.hasBufferedInput))) {
            reportEndOfStreamIfNothingUnread()
            guard phase == .connected else { return }
        }
        // Idle after a failed send, with bytes still unread (with none, the end was reported
        // above) or after a half-close was reported: see `endAfterSendFailure`.
        if currentRead == nil && !hasQueuedReads && phase == .connected, let failure = sendFailure {
            endAfterSendFailure(failure)
            return
        }
        closeIfDisconnectAfterIsDue()
    }

    /// A send failed (the peer reset or went away) and no read is queued. The bytes that came
    /// before the failure went to the reads that were queued and to those their callbacks
    /// queued; once the socket's callbacks have all run without queueing another, the session
    /// ends with the failure, and what is still unread goes with it (GCDAsyncSocket ends at
    /// once, with all of it). Waiting for a read instead waits for good when the application
    /// waits for its writes first: one that stopped reading at the high watermark until the
    /// queue drains, which a failed connection never does, or an async writer awaiting its
    /// write. The connection, its descriptor and its queued writes would stay.
    ///
    /// Callbacks on the loop have run by now (a pump's callbacks run inside it). Those on
    /// another queue may still be on their way, and one of them may queue the next read: the
    /// pump then looks again once the mailbox has been delivered. And a callback that has
    /// returned on another thread may have left its read in the loop's task queue, not yet
    /// run (the drain can finish while this pump runs): so the end is decided by a task
    /// behind it (`lookedBehindTasks`), which finds that read queued if there is one.
    private func endAfterSendFailure(_ failure: SocketError, lookedBehindTasks: Bool = false) {
        let session = self.session
        let waits = owner?.notifyWhenCallbacksHaveRun { [self] in
            _ = loop.execute { [self] in
                if session == self.session { scheduleReadPump() }
            }
        } ?? false
        if waits { return }
        if lookedBehindTasks { closeSession(failure); return }
        let queued = loop.execute { [self] in
            // A read that came meanwhile scheduled a pump, which serves it and looks again.
            guard session == self.session, phase == .connected, currentRead == nil, !hasQueuedReads else { return }
            endAfterSendFailure(failure, lookedBehindTasks: true)
        }
        if !queued { closeSession(failure) }
    }

    /// No read is queued and the peer's stream has ended (FIN, reset, a failed send, or
    /// under TLS a close_notify, which needs no FIN). As GCDAsyncSocket does, the end is
    /// reported at once when nothing unread is left before it (`handleEndOfStream`, or the
    /// error); bytes still unread wait for reads, and the end is reported once they have
    /// been read, so none is lost. Finding out takes nothing: a one-byte peek, of the socket
    /// in plaintext, of OpenSSL's plaintext under TLS (`peekSecure`).
    private func reportEndOfStreamIfNothingUnread() {
        guard prebuffer.isEmpty else { return }
        if readEOF {
            handleEndOfStream()
            return
        }
        if let tls, tls.stage != .waiting {
            guard tls.stage == .secure else { return } // a handshake meets the end itself
            switch peekSecure(tls) {
            case .bytes, .wouldBlock:
                break
            case .endOfStream:
                readEOF = true
                handleEndOfStream()
            case .failed(let error):
                closeSession(error)
            }
            return
        }
        var byte: UInt8 = 0
        let count = recv(fd, &byte, 1, Int32(MSG_PEEK | MSG_DONTWAIT))
        if count == 0 {
            readEOF = true
            readable = false
            handleEndOfStream()
        } else if count < 0 {
            let error = errno
            if error != EAGAIN && error != EWOULDBLOCK && error != EINTR {
                closeSession(SocketError.systemError(error, "read"))
            }
        }
    }

    private func startCurrentRead() {
        // Field by field rather than a copy of the request (Swift 6.3's release optimizer
        // fails on `guard let request = currentRead` here with "Found ownership error").
        guard let tag = currentRead?.tag, let timeout = currentRead?.timeout else { return }
        currentReadStarted = true
        readProgress.publish(tag: tag, done: 0, total: currentRead?.totalLength)
        if timeout >= 0 {
            arm(&readTimer, deadline: deadline(afterSeconds: timeout)) { $0.readTimerFired() }
        }
    }

    /// Gives `source` to the current read and acts on the outcome. Returns false when the
    /// session ended (an error, or a callback that disconnected).
    private func feedCurrentRead(from source: UnsafeRawBufferPointer, fromPrebuffer: Bool) -> Bool {
        let session = self.session
        guard let outcome = currentRead?.absorb(source) else { return true }
        switch outcome {
        case .incomplete(let consumed):
            if fromPrebuffer { prebuffer.consume(consumed) }
            guard let request = currentRead else { return true }
            readProgress.update(done: request.bytesDone)
            if request.reportsPartialProgress && ownerWants(.readPartial) {
                emit(.didReadPartial(length: consumed, tag: request.tag))
                return session == self.session && phase == .connected
            }
            return true

        case .failed(let error):
            closeSession(error)
            return false

        case .maxedOut:
            closeSession(SocketError(.readMaxedOut,
                                     "read reached its maximum length (\(currentRead?.maximumLength ?? 0) bytes) without the separator"))
            return false

        case .complete(let consumed, let borrowed):
            if !fromPrebuffer && consumed < source.count {
                prebuffer.append(UnsafeRawBufferPointer(rebasing: source[consumed...]))
            }
            guard var request = currentRead.take() else { return true }
            currentReadStarted = false
            cancel(readTimer)
            readProgress.clear()
            if hasTLS { tlsCountCompletedRead() }
            // Consumed before delivery, so that what the callback does next (an unread, a
            // withdrawn read giving its bytes back: run once it returns) lands in front of
            // what is left; the storage stays, as the payload may point into it.
            if fromPrebuffer { prebuffer.consumeKeepingStorage(consumed) }
            if ownerWants(.read) {
                let payload: ReadPayload = borrowed
                    ? .borrowed(UnsafeRawBufferPointer(rebasing: source[0..<consumed]))
                    : request.takePayload()
                emit(.didRead(payload, tag: request.tag))
            }
            if fromPrebuffer { prebuffer.releaseIfEmpty() }
            return session == self.session && phase == .connected
        }
    }

    /// The peer sent FIN and every buffered byte has been consumed (a read wants more, or
    /// none is queued). As upstream: disconnect with `.closed` (after our own half-close,
    /// cleanly: error nil), or with `autoDisconnectOnClosedReadStream` off report the
    /// half-close once and keep the socket open (pending reads then wait for their timeout;
    /// the application ends the connection, also after a half-close of its own: it asked to
    /// hear of the end, e.g. to take back a pending read's bytes). After a failed send the
    /// end is the connection's: the session ends with that failure.
    func handleEndOfStream() {
        if let failure = sendFailure {
            closeSession(failure)
        } else if configuration.autoDisconnectOnClosedReadStream {
            // Both directions closed, ours first (`closeWriteStream`): an orderly end.
            closeSession(writeStreamEnd == .done ? nil : SocketError(.closed))
        } else if !readStreamClosedReported {
            readStreamClosedReported = true
            emit(.didCloseReadStream)
        }
    }

    // MARK: Withdrawing reads, giving bytes back

    /// The loop side of `Socket.cancelRead(withTag:)`: withdraws every queued read with
    /// `tag` that has not completed. The current one's gathered bytes go back in front of
    /// the unread ones, so the next read gets them in order; its timer and any timeout
    /// question it had are void. A withdrawn read ahead of a TLS marker counts as done for
    /// the marker (the reads before it are the first `readsBefore` in the queue).
    /// Always answered with `didCancelRead`, after the `didRead` of a read that had
    /// already completed: the order of one socket's events is how a caller tells the two
    /// apart.
    func cancelReads(withTag tag: Int, session: UInt64) {
        guard session == self.session, phase == .resolving || phase == .connecting || phase == .proxying || phase == .connected
        else { return }
        let aheadOfTLS = tls?.stage == .waiting ? tls!.readsBefore : 0
        var withdrawnAheadOfTLS = 0
        if currentRead?.tag == tag {
            if currentReadStarted {
                let gathered = currentRead!.gatheredBytes()
                gathered.withUnsafeBytes { prebuffer.prepend($0) }
                cancel(readTimer)
                readProgress.clear()
                readTimeoutPending = false
                currentReadStarted = false
            }
            currentRead = nil
            if aheadOfTLS > 0 { withdrawnAheadOfTLS += 1 }
        }
        if hasQueuedReads {
            // Offsets in the queue count from the read after `currentRead`'s slot.
            let firstOffset = 1
            outOfLine.readQueue.removeAll { offset, request in
                guard request.tag == tag else { return false }
                if firstOffset + offset < aheadOfTLS { withdrawnAheadOfTLS += 1 }
                return true
            }
        }
        if withdrawnAheadOfTLS > 0 {
            for _ in 0..<withdrawnAheadOfTLS { tlsCountCompletedRead() }
        }
        emit(.didCancelRead(tag: tag, unreadBytes: prebuffer.count))
        guard session == self.session else { return }
        if phase == .connected && !pumpingReads { scheduleReadPump() }
        closeIfDisconnectAfterIsDue()
    }

    /// The loop side of `Socket.unread`: `bytes` go in front of the unread ones.
    func unread(_ bytes: [UInt8], session: UInt64) {
        guard session == self.session, phase == .resolving || phase == .connecting || phase == .proxying || phase == .connected
        else { return }
        bytes.withUnsafeBytes { prebuffer.prepend($0) }
        if phase == .connected && !pumpingReads { scheduleReadPump() }
    }

    // MARK: Read timeouts

    func readTimerFired() {
        guard phase == .connected, currentReadStarted, let request = currentRead, !readTimeoutPending else { return }
        readTimeoutPending = true
        timeoutQuestions += 1
        readTimeoutQuestion = timeoutQuestions
        emit(.shouldTimeoutRead(tag: request.tag, elapsed: request.timeout, bytesDone: request.bytesDone,
                                question: readTimeoutQuestion))
    }

    /// The delegate's answer to `shouldTimeoutRead`: a positive extension re-arms the timer
    /// and resumes reading; anything else ends the session with `.readTimeout`.
    func resolveReadTimeout(extension seconds: Double, question: UInt64) {
        guard question == readTimeoutQuestion, phase == .connected, readTimeoutPending, currentRead != nil else { return }
        readTimeoutPending = false
        if seconds > 0 {  // +INFINITY included: extended for good, as an infinite timeout never expires
            currentRead?.timeout += seconds
            arm(&readTimer, deadline: deadline(afterSeconds: seconds)) { $0.readTimerFired() }
            scheduleReadPump()
        } else {
            closeSession(SocketError(.readTimeout, "read operation timed out"))
        }
    }
}
