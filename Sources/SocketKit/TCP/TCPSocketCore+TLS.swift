// SPDX-License-Identifier: MIT
import Glibc
import SocketKitC

/// A connection's TLS state, from `startTLS` on. Kept out of line: plain connections carry
/// one pointer for it.
///
/// `startTLS` is a marker in both queues, as upstream: `readsBefore` and `writesBefore`
/// count the reads and writes queued ahead of it. They run in plaintext; reads and writes
/// queued after the marker wait. When both counts reach zero the handshake starts (bytes
/// that arrived ahead of it, in the prebuffer, are its first input); once it succeeds (and,
/// with manual trust, once the delegate said yes) the waiting reads and writes run
/// encrypted.
final class TLSState {
    enum Stage {
        case waiting, handshaking, awaitingTrust, secure
    }

    let context: TLSContext
    var stage = Stage.waiting
    var readsBefore: Int
    var writesBefore: Int
    var session: TLSSession? = nil
    var handshakeTimer: LoopTimer? = nil
    /// Watches whether the connection is busy enough to keep OpenSSL's record buffers
    /// (see `noteTLSBuffersUsed`).
    var idleTimer: LoopTimer? = nil
    /// Reads and writes since `idleTimer` last fired (capped meaning: above
    /// `TCPSocketCore.tlsBusyUses` the connection is busy).
    var bufferUses = 0
    /// The period of `idleTimer` (`TCPSocketCore.tlsIdleSeconds`; tests shorten it).
    var idleSeconds = TCPSocketCore.tlsIdleSeconds
    /// Times the buffers were freed because a whole period passed quietly (for tests).
    var idleReleases = 0
    /// Ciphertext OpenSSL produced that the kernel has not taken yet.
    var outbound = ByteQueue()
    /// The peer's FIN arrived (OpenSSL decides whether close_notify came first).
    var transportEOF = false
    var trustQuestion: UInt64 = 0
    /// The end of stream or error `readSecure` met after decrypting bytes it delivered first.
    var deferredReadEnd: TCPSocketCore.SecureRead? = nil

    init(context: TLSContext, readsBefore: Int, writesBefore: Int) {
        self.context = context
        self.readsBefore = readsBefore
        self.writesBefore = writesBefore
    }

    /// Decrypted bytes or ciphertext OpenSSL holds, or an end of stream it has not reported.
    var hasBufferedInput: Bool {
        guard let session else { return false }
        return transportEOF || deferredReadEnd != nil || session.hasBufferedInput
    }
}

extension TCPSocketCore {
    /// Records encrypted per round before they are sent in one system call (with the chunk
    /// below, the queue stays under 96 KiB: one heap block, below malloc's mmap threshold).
    /// A 64 KiB write goes out whole: four records, one `send`.
    static let tlsOutboundLimit = 64 * 1024
    /// Plaintext handed to one SSL_write (one full record).
    static let tlsWriteChunk = 16 * 1024

    // MARK: Starting

    /// The loop side of `Socket.startTLS`: the marker joins the queues (the first call of a
    /// session only: see `tlsClaim`).
    func startTLS(context: TLSContext, session: UInt64) {
        guard session == self.session, phase == .resolving || phase == .connecting || phase == .proxying || phase == .connected,
              !disconnectAfterReads, !disconnectAfterWrites, !hasTLS else { return }
        tls = TLSState(context: context, readsBefore: readQueue.count + (currentRead == nil ? 0 : 1),
                       writesBefore: writeQueue.count)
        if phase == .connected && registration != nil { scheduleReadPump() }
    }

    /// True while reads queued after the marker must wait.
    var tlsHoldsReads: Bool {
        guard let tls else { return false }
        return tls.stage != .secure && tls.readsBefore == 0
    }

    /// True while writes queued after the marker must wait.
    var tlsHoldsWrites: Bool {
        guard let tls else { return false }
        return tls.stage != .secure && tls.writesBefore == 0
    }

    /// A read ahead of the marker completed.
    func tlsCountCompletedRead() {
        guard let tls, tls.stage == .waiting, tls.readsBefore > 0 else { return }
        tls.readsBefore -= 1
        if tls.readsBefore == 0 && tls.writesBefore == 0 { scheduleReadPump() }
    }

    /// A write ahead of the marker completed.
    func tlsCountCompletedWrite() {
        guard let tls, tls.stage == .waiting, tls.writesBefore > 0 else { return }
        tls.writesBefore -= 1
        if tls.readsBefore == 0 && tls.writesBefore == 0 { scheduleReadPump() }
    }

    /// Called by the read pump while TLS is not secure: starts or drives the handshake.
    /// Returns true when the pump should go on: with plaintext reads (the marker is not
    /// reached yet), or with secure ones (the handshake has just finished: application
    /// data that came with the peer's last flight is delivered in this same iteration, so
    /// an answer written from a loop-thread callback leaves with our last flight).
    func tlsPumpBeforeSecure() -> Bool {
        guard let tls else { return true }
        switch tls.stage {
        case .waiting:
            if tls.readsBefore == 0 && tls.writesBefore == 0 {
                startHandshake()
                return tls.stage == .secure
            }
            return true
        case .handshaking:
            driveHandshake()
            return tls.stage == .secure
        case .awaitingTrust, .secure:
            return false
        }
    }

    private func startHandshake() {
        guard let tls, tls.stage == .waiting, phase == .connected, fd >= 0 else { return }
        let settings = tls.context.settings
        let peer = publishedState.peerAddress ?? SystemCalls.peerAddress(fd)
        var name = settings.peerName
        if settings.role == .client && name == nil {
            name = connectHost ?? peer?.host
        }
        let session: TLSSession
        do {
            session = try TLSSession(context: tls.context, peerName: name, port: peer?.port ?? 0)
        } catch {
            closeSession(error)
            return
        }
        tls.session = session
        tls.stage = .handshaking
        if !prebuffer.isEmpty {
            session.feed(prebuffer.readableBytes)
            prebuffer.removeAll()
        }
        if readEOF {
            tls.transportEOF = true
            session.feedEndOfStream()
        }
        if settings.handshakeTimeout >= 0 {
            arm(&tls.handshakeTimer, deadline: deadline(afterSeconds: settings.handshakeTimeout)) {
                $0.closeSession(SocketError(.tlsHandshakeTimeout,
                                            "the TLS handshake did not finish within \(settings.handshakeTimeout) s"))
            }
        }
        driveHandshake()
    }

    private func driveHandshake() {
        guard let tls, tls.stage == .handshaking, let session = tls.session else { return }
        while phase == .connected {
            let step = session.handshake()
            if case .done = step {
                // Our last flight (a client's Finished, a server's session tickets) waits in
                // the BIO for the end of this iteration, so that what follows it at once
                // leaves in the same send: writes queued behind startTLS, writes made in
                // didSecure, an answer to data that came with the peer's Finished. Sent
                // apart, the second send waits under Nagle for the ACK of the first, which a
                // peer with nothing to send back delays (delayed ACK).
                handshakeFinished()
                if phase == .connected { scheduleWriteFlush() }
                return
            }
            // Send what the step produced first: a ClientHello, a flight, or an alert.
            guard sendTLSOutput() else { return }
            guard phase == .connected else { return }
            switch step {
            case .done:
                return // handled above
            case .failed(let error):
                closeSession(error)
                return
            case .wantRead:
                guard !tls.transportEOF else {
                    closeSession(SocketError(.tlsPeerClosed, "the peer closed the connection during the TLS handshake"))
                    return
                }
                switch receiveCiphertext(into: session, tls: tls) {
                case .received: continue
                case .wouldBlock: return
                case .failed(let error):
                    closeSession(error)
                    return
                }
            }
        }
    }

    private func handshakeFinished() {
        guard let tls, let session = tls.session else { return }
        if tls.context.settings.manualTrustEvaluation {
            tls.stage = .awaitingTrust
            timeoutQuestions += 1
            tls.trustQuestion = timeoutQuestions
            emit(.didReceiveTrust(session.trust, question: tls.trustQuestion))
            return
        }
        becomeSecure()
    }

    /// The delegate's answer to `didReceiveTrust` (only the first answer counts).
    func resolveTrust(accept: Bool, question: UInt64) {
        guard phase == .connected, let tls, tls.stage == .awaitingTrust, tls.trustQuestion == question else { return }
        if accept {
            becomeSecure()
        } else {
            closeSession(SocketError(.tlsPeerRejected, "manual trust evaluation rejected the peer's certificate"))
        }
    }

    private func becomeSecure() {
        guard let tls, let session = tls.session else { return }
        tls.stage = .secure
        cancel(tls.handshakeTimer)
        tls.handshakeTimer = nil
        session.releaseIdleBuffers(threshold: 0) // idle from here on, typically: keep nothing
        let info = TLSInfoBox(session.info)
        let current = self.session
        if publishedState.status != .disconnected {
            publish { $0.tls = info }
        }
        emit(.didSecure)
        guard current == self.session, phase == .connected else { return }
        if hasQueuedWrites {
            if !headWriteStarted { startHeadWrite() }
            scheduleWriteFlush()
        }
        scheduleReadPump()
    }

    // MARK: Ciphertext to and from the kernel

    enum CiphertextInput {
        case received, wouldBlock
        case failed(SocketError)
    }

    /// One `recv` of ciphertext for OpenSSL (into the loop's scratch buffer, which no
    /// callback ever borrows). The peer's FIN is passed on as end of input.
    private func receiveCiphertext(into session: TLSSession, tls: TLSState) -> CiphertextInput {
        guard readable else { return .wouldBlock }
        let scratch = loop.discardBuffer
        while true {
            let count = skc_recv(fd, scratch.baseAddress, scratch.count, 0)
            if count > 0 {
                if count < scratch.count && !peerHalfClosed { readable = false }
                session.feed(UnsafeRawBufferPointer(rebasing: scratch[0..<count]))
                return .received
            }
            if count == 0 {
                readable = false
                tls.transportEOF = true
                session.feedEndOfStream()
                return .received
            }
            let error = errno
            if error == EINTR { continue }
            if error == EAGAIN || error == EWOULDBLOCK {
                readable = false
                return .wouldBlock
            }
            return .failed(transportError(error, "read"))
        }
    }

    /// Moves OpenSSL's output to the outbound queue and sends what the kernel takes.
    /// Returns false when a send failed for good (the read side then ends the session).
    @discardableResult
    func sendTLSOutput() -> Bool {
        guard let tls else { return true }
        if tls.outbound.isEmpty, let session = tls.session {
            switch sendTLSOutputDirectly(tls, session) {
            case .sent: return true
            case .failed: return false
            case .useQueue: break
            }
        }
        tls.session?.takeOutput(into: &tls.outbound)
        var systemCalls = 0
        while !tls.outbound.isEmpty && writable && phase == .connected {
            guard systemCalls < TCPSocketCore.systemCallsPerFlush else {
                scheduleWriteFlush()
                return true
            }
            systemCalls += 1
            guard sendOutboundOnce(tls) else { return false }
        }
        return true
    }

    enum DirectSend { case sent, failed, useQueue }

    /// The usual case of a small message: OpenSSL's records go to the kernel through the
    /// loop's scratch buffer in one `send`, and only what the kernel does not take goes to
    /// the outbound queue (which frees its block whenever it drains, so queueing every
    /// message would cost a malloc and a free each).
    /// `.useQueue`: more than the scratch holds, or not writable now.
    private func sendTLSOutputDirectly(_ tls: TLSState, _ session: TLSSession) -> DirectSend {
        let scratch = loop.discardBuffer // transient use: nothing runs until it is empty again
        let pending = session.pendingOutput
        guard pending > 0 else { return .sent }
        guard writable, phase == .connected, pending <= scratch.count else { return .useQueue }
        let count = session.readOutput(into: scratch)
        guard let sent = sendCiphertext(UnsafeRawBufferPointer(rebasing: scratch[0..<count])) else { return .failed }
        if sent < count {
            tls.outbound.append(UnsafeRawBufferPointer(rebasing: scratch[sent..<count]))
            return .useQueue
        }
        return .sent
    }

    /// One `send` from the front of the outbound queue; a short send or EAGAIN clears
    /// `writable`. Returns false when a send failed for good.
    private func sendOutboundOnce(_ tls: TLSState) -> Bool {
        guard let sent = sendCiphertext(tls.outbound.readableBytes) else { return false }
        tls.outbound.consume(sent)
        return true
    }

    /// One `send` of ciphertext: the bytes the kernel took (0 for EAGAIN or EINTR); a short
    /// send or EAGAIN clears `writable`. nil when the send failed for good (`sendFailed`:
    /// the read side ends the session).
    private func sendCiphertext(_ bytes: UnsafeRawBufferPointer) -> Int? {
        let sent = skc_send(fd, bytes.baseAddress, bytes.count, SystemCalls.sendFlags)
        if sent < 0 { return sendReturnedError(errno) ? 0 : nil }
        if sent < bytes.count { writable = false }
        return sent
    }

    /// A failed socket call as reported: during a handshake a reset or broken pipe is the
    /// peer closing (typically with our hello unread), `.tlsPeerClosed`.
    func transportError(_ error: Int32, _ call: String) -> SocketError {
        if let tls, tls.stage == .handshaking, error == ECONNRESET || error == EPIPE {
            return SocketError(.tlsPeerClosed, osError: error, "the peer closed the connection during the TLS handshake")
        }
        return SocketError.systemError(error, call)
    }

    var tlsHasOutbound: Bool { !(tls?.outbound.isEmpty ?? true) }

    // MARK: Secure reads and writes

    enum SecureRead {
        case bytes(Int), wouldBlock, endOfStream
        case failed(SocketError)
    }

    /// Decrypted bytes into `buffer`: what OpenSSL holds first, then one `recv` of
    /// ciphertext at a time while it needs more, until the buffer is full or the kernel has
    /// nothing more (a read gets every record that arrived, not one 16 KiB record per
    /// call: a stream's echo then writes up to 256 KiB, the loop's read buffer, at a time
    /// and sends it in one call). An end of stream or error met after some bytes were
    /// decrypted waits in `deferredReadEnd`: the bytes are delivered first.
    func readSecure(into buffer: UnsafeMutableRawBufferPointer) -> SecureRead {
        let result = readSecureRecords(into: buffer)
        if let tls, let session = tls.session { noteTLSBuffersUsed(tls, session) }
        return result
    }

    private func readSecureRecords(into buffer: UnsafeMutableRawBufferPointer) -> SecureRead {
        guard let tls, let session = tls.session else { return .wouldBlock }
        if let end = tls.deferredReadEnd {
            tls.deferredReadEnd = nil
            return end
        }
        var total = 0
        while true {
            if !tls.transportEOF && !session.hasBufferedInput {
                // Nothing inside OpenSSL: SSL_read would only say "want read" (and cost an
                // SSL_get_error besides). Receive first.
                if let end = receiveForRead(session, tls, delivering: total) { return end }
            }
            let step = session.read(into: UnsafeMutableRawBufferPointer(rebasing: buffer[total...]))
            // Reading can produce output (a key update answer), and our last handshake flight
            // may still wait in the BIO: both go at the end of the iteration, with the
            // answers callbacks write meanwhile.
            if session.pendingOutput > 0 { scheduleWriteFlush() }
            switch step {
            case .bytes(let count):
                total += count
                // Full, or nothing more to decrypt (a short recv drained the socket): the
                // usual end of a small message, without another SSL_read to find out.
                if total == buffer.count || (!readable && !session.hasBufferedInput) { return .bytes(total) }
                continue
            case .closed:
                return deliver(total, then: .endOfStream, tls)
            case .failed(let error):
                return deliver(total, then: error.code == .tlsTruncated ? endWithoutCloseNotify(error) : .failed(error), tls)
            case .wantRead:
                if tls.transportEOF {
                    let truncation = SocketError(.tlsTruncated, "the peer closed the connection without a TLS close_notify")
                    return deliver(total, then: endWithoutCloseNotify(truncation), tls)
                }
                if let end = receiveForRead(session, tls, delivering: total) { return end }
            }
        }
    }

    /// `readSecure` without taking plaintext: `.bytes` when some is waiting (it stays in
    /// OpenSSL for the next read), else the end or error the stream has reached, or
    /// `.wouldBlock`. The ciphertext received on the way stays in OpenSSL too.
    func peekSecure(_ tls: TLSState) -> SecureRead {
        guard let session = tls.session else { return .wouldBlock }
        if let end = tls.deferredReadEnd { return end } // left for the read that takes it
        while true {
            if !tls.transportEOF && !session.hasBufferedInput {
                if let end = receiveForRead(session, tls, delivering: 0) { return end }
            }
            let step = session.peek()
            if session.pendingOutput > 0 { guard sendTLSOutput() else { return .wouldBlock } }
            switch step {
            case .bytes:
                return .bytes(0)
            case .closed:
                return .endOfStream
            case .failed(let error):
                return error.code == .tlsTruncated ? endWithoutCloseNotify(error) : .failed(error)
            case .wantRead:
                if tls.transportEOF {
                    return endWithoutCloseNotify(SocketError(.tlsTruncated, "the peer closed the connection without a TLS close_notify"))
                }
                if let end = receiveForRead(session, tls, delivering: 0) { return end }
            }
        }
    }

    /// One `recv` of ciphertext for a secure read that has decrypted `total` bytes so far:
    /// nil when some arrived (decrypt on), else what the read returns. Drained is
    /// `.wouldBlock` (`readSecure` decides whether to keep the buffers).
    private func receiveForRead(_ session: TLSSession, _ tls: TLSState, delivering total: Int) -> SecureRead? {
        switch receiveCiphertext(into: session, tls: tls) {
        case .received: return nil
        case .wouldBlock: return total > 0 ? .bytes(total) : .wouldBlock
        case .failed(let error): return deliver(total, then: .failed(error), tls)
        }
    }

    /// The end of a stream that stopped without close_notify: a truncation, unless a failed
    /// send explains it (the connection broke: `handleEndOfStream` reports that failure).
    private func endWithoutCloseNotify(_ truncation: SocketError) -> SecureRead {
        sendFailure != nil ? .endOfStream : .failed(truncation)
    }

    /// `total` decrypted bytes first, if any, and `end` on the next read.
    private func deliver(_ total: Int, then end: SecureRead, _ tls: TLSState) -> SecureRead {
        guard total > 0 else { return end }
        tls.deferredReadEnd = end
        return .bytes(total)
    }

    /// Encrypts queued writes (each completes once OpenSSL took all its bytes) and sends
    /// the records, several writes per system call.
    func flushSecureWrites() {
        guard let tls, let session = tls.session else { return }
        var systemCalls = 0
        while phase == .connected {
            // Encrypt only into an empty queue: appending behind unsent records would move
            // them, and a queue that stays small never needs more than one heap block.
            while tls.outbound.isEmpty && !writeTimeoutPending && hasQueuedWrites
                    && session.pendingOutput < TCPSocketCore.tlsOutboundLimit {
                if !headWriteStarted { startHeadWrite() }
                let result = writeQueue[0].withRemainingBytes { bytes in
                    session.write(UnsafeRawBufferPointer(rebasing: bytes.prefix(TCPSocketCore.tlsWriteChunk)))
                }
                switch result {
                case .failure(let error):
                    closeSession(error)
                    return
                case .success(let count):
                    guard count > 0 else { break }
                    guard account(written: count) else { return }
                    continue
                }
                break
            }
            session.takeOutput(into: &tls.outbound)
            guard !tls.outbound.isEmpty, writable else { break }
            guard systemCalls < TCPSocketCore.systemCallsPerFlush else {
                scheduleWriteFlush()
                return
            }
            systemCalls += 1
            guard sendOutboundOnce(tls) else { return }
        }
        noteTLSBuffersUsed(tls, session)
        closeIfDisconnectAfterIsDue()
    }

    /// The write fast path on a secure connection: the bytes go to OpenSSL straight from
    /// the caller (no copy into a queued request) and the records to the kernel. Complete
    /// once OpenSSL took them all, as any TLS write; records the kernel did not take wait in
    /// the outbound queue, flushed on the next EPOLLOUT. nil: take the queue.
    func writeImmediatelySecure(_ bytes: UnsafeRawBufferPointer) -> Int? {
        guard let tls, tls.stage == .secure, tls.outbound.isEmpty, let session = tls.session,
              session.pendingOutput == 0, bytes.count <= TCPSocketCore.tlsOutboundLimit else { return nil }
        // OpenSSL takes one record per call (partial-write mode): every record goes into
        // the memory BIO first, and all of them to the kernel in one send.
        var taken = 0
        encrypting: while taken < bytes.count {
            switch session.write(UnsafeRawBufferPointer(rebasing: bytes[taken...])) {
            case .failure:
                break encrypting // the queued path meets the error again and reports it
            case .success(let count):
                guard count > 0 else { break encrypting }
                taken += count
            }
        }
        guard taken > 0 else { return nil }
        // A send that failed ends the session later, from the read side: the queued path
        // then holds the write until the session's end drops it, as it would.
        guard sendTLSOutput(), phase == .connected else { return nil }
        noteTLSBuffersUsed(tls, session)
        return taken
    }

    // MARK: OpenSSL's record buffers

    /// Uses of a connection's buffers within one `tlsIdleSeconds` after which it counts as
    /// busy and keeps them.
    static let tlsBusyUses = 4
    static let tlsIdleSeconds = 1.0

    /// After a secure read or write. OpenSSL allocates a record-sized buffer for each
    /// direction when it first needs it; SSL_MODE_RELEASE_BUFFERS would free both after
    /// every record (a free and a malloc of each per message), keeping them for good would
    /// cost every idle connection both buffers (bench/README.md, "Figures behind the
    /// engine's comments"). So: a connection
    /// that has said little lately frees them after each use, as RELEASE_BUFFERS would; once
    /// it uses them more than `tlsBusyUses` times within `tlsIdleSeconds`, it keeps them
    /// until a whole period passes without a use (`tlsIdleTimerFired`). A connection that
    /// goes quiet holds them for at most two periods.
    @inline(__always)
    func noteTLSBuffersUsed(_ tls: TLSState, _ session: TLSSession) {
        tls.bufferUses &+= 1
        guard tls.bufferUses <= TCPSocketCore.tlsBusyUses else { return }
        session.releaseIdleBuffers(threshold: 16 * 1024)
        // Only for the live session's state: endTLS cancels that one's timer (the timer
        // holds the core unowned).
        if tls.idleTimer?.isScheduled != true && self.tls === tls && phase == .connected {
            arm(&tls.idleTimer, deadline: deadline(afterSeconds: tls.idleSeconds)) { $0.tlsIdleTimerFired() }
        }
    }

    func tlsIdleTimerFired() {
        guard let tls, let session = tls.session, phase == .connected else { return }
        if tls.bufferUses > TCPSocketCore.tlsBusyUses {
            // Busy this period: watch the next one, keeping the buffers through it (a use
            // in it makes the count pass the limit again).
            tls.bufferUses = TCPSocketCore.tlsBusyUses
            arm(&tls.idleTimer, deadline: deadline(afterSeconds: tls.idleSeconds)) { $0.tlsIdleTimerFired() }
            return
        }
        // A period without a use (or with a few, after each of which the buffers went):
        // keep nothing until the next use.
        tls.bufferUses = 0
        tls.idleReleases += 1
        session.releaseIdleBuffers()
    }

    // MARK: Ending

    /// Before the descriptor closes: an orderly close of a secure connection sends
    /// close_notify (best effort: what the kernel takes at once).
    func endTLS(orderly: Bool) {
        guard let tls else { return }
        cancel(tls.handshakeTimer)
        tls.handshakeTimer = nil
        cancel(tls.idleTimer)
        tls.idleTimer = nil
        if orderly, tls.stage == .secure, let session = tls.session, fd >= 0 {
            session.shutdown()
            session.takeOutput(into: &tls.outbound)
            let bytes = tls.outbound.readableBytes
            if bytes.count > 0 { _ = send(fd, bytes.baseAddress, bytes.count, SystemCalls.sendFlags) }
        }
        self.tls = nil
    }
}

/// The handshake's results, published for any thread (a box: one pointer in the shared
/// state of every connection).
final class TLSInfoBox: @unchecked Sendable {
    let info: TLSConnectionInfo
    init(_ info: TLSConnectionInfo) { self.info = info }
}
