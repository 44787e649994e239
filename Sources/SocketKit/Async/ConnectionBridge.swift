// SPDX-License-Identifier: MIT
import Synchronization

/// What an async read asks for.
enum AsyncReadKind: Sendable {
    /// Whatever is available, at least one byte (at most `maxLength` when positive).
    case available(maxLength: Int)
    case exactly(Int)
    /// Up to and including `separator`, failing past `maxLength` (0: the socket's maximum).
    case upTo(separator: [UInt8], maxLength: Int)
}

/// An `AsyncSocket`'s delegate: turns the socket's callbacks into the resumption of the
/// tasks that wait for them. Its state is behind one mutex; the socket is never called with
/// the mutex held (a call made on the loop thread may call back at once).
///
/// Reads: at most one engine read is outstanding, and one task reads at a time. A task
/// cancelled while its read is outstanding gets `CancellationError` at once, and the read is
/// withdrawn (`Socket.cancelRead`); until the answer comes, a new read waits. Bytes of a read
/// that completed before the withdrawal reached the loop are given back (`Socket.unread`)
/// before the next read is queued, so the next read of any kind gets them first: nothing is
/// lost. The socket runs with `autoDisconnectOnClosedReadStream` off: at the peer's end of
/// stream a pending read is withdrawn, what SocketKit still holds is read in one piece (the
/// tail), and every later read is served from the tail, then answered with the end.
final class ConnectionBridge: SocketDelegate {
    /// A task waiting for a read's bytes.
    typealias ReadWaiter = Waiter<[UInt8]>
    typealias VoidWaiter = Waiter<Void>

    enum ReadState {
        case idle
        /// An engine read with `tag` answers `id`'s task. `issued`: the read is queued (a
        /// cancellation may withdraw it); before that, a cancellation only asks
        /// (`cancelRequested`) and the issuing thread withdraws it itself, after the read,
        /// so that the two reach the loop in that order.
        case reading(id: UInt64, tag: Int, kind: AsyncReadKind, waiter: ReadWaiter?, issued: Bool, cancelRequested: Bool)
        /// The engine read `tag` is being withdrawn; its task has gone. `kept`: its bytes, if
        /// it completed meanwhile. `next`: a read waiting for the answer.
        case withdrawing(tag: Int, kept: [UInt8]?, next: (id: UInt64, kind: AsyncReadKind, waiter: ReadWaiter)?)
        /// At the end of the stream: the pending read `tag` is withdrawn (its task still
        /// waits, for the tail), or the tail is being read with `tag`.
        case endingWithdraw(tag: Int, id: UInt64, kind: AsyncReadKind, waiter: ReadWaiter?, kept: [UInt8]?)
        case endingTail(tag: Int, id: UInt64, kind: AsyncReadKind, waiter: ReadWaiter?)
    }

    enum WriteState {
        case pending
        case waiting(VoidWaiter)
        /// Its task stopped waiting (cancelled); the bytes still go.
        case abandoned
        case done(SocketError?)
    }

    struct State {
        var connected = false
        var connectWaiter: VoidWaiter? = nil
        var connectCancelled = false
        var tlsWaiter: VoidWaiter? = nil
        /// Set once the connection ended: why (nil: closed by this side).
        var ended: SocketError?? = nil
        var closeWaiters: [EndWaiter] = []

        var read = ReadState.idle
        /// The peer's end of stream was reported while a withdrawal was under way.
        var endOfStreamSeen = false
        /// Once the end of stream was handled: what was left; reads are served from here.
        var tail: [UInt8]? = nil

        var nextTag = 1
        /// Writes in the order they were queued (the engine completes them in that order).
        var writes: [(tag: Int, state: WriteState)] = []
        var aboveHighWatermark = false
        var roomWaiters: [(id: UInt64, waiter: VoidWaiter)] = []
        var outputShut = false
        var outputShutWaiter: VoidWaiter? = nil

        mutating func takeTag() -> Int {
            defer { nextTag = nextTag == Int.max ? 1 : nextTag + 1 }
            return nextTag
        }
    }

    let state = LockedValue(State())
    /// Identifies a read call or a wait for room, so that a cancellation that comes late
    /// never touches a later one.
    private let ids = Atomic<UInt64>(1)
    /// Manual trust evaluation, when the settings ask for it.
    let trustEvaluator = LockedValue<(@Sendable (TLSTrust) async -> Bool)?>(nil)

    func newID() -> UInt64 { ids.add(1, ordering: .relaxed).newValue }

    /// The error a call gets on a connection that has ended.
    static func endedError(_ ended: SocketError?) -> SocketError {
        ended ?? SocketError(.badConfig, "the connection is closed")
    }

    // MARK: Reading

    /// What to do after the state changed, outside the mutex.
    enum ReadAction {
        case none
        case resume(ReadWaiter, Result<[UInt8], any Error>)
        case issue(tag: Int, kind: AsyncReadKind)
        case withdraw(tag: Int)
        case cancelAndWithdraw(ReadWaiter, tag: Int)
        /// Bytes of a read whose task has gone, given back from its `didRead`.
        case unread([UInt8])
        case unreadThenIssue(kept: [UInt8]?, issue: (tag: Int, kind: AsyncReadKind)?)
        case unreadThenReadTail(kept: [UInt8]?, tailTag: Int, count: Int)
    }

    /// Starts read `id`, resumed through `waiter`. Called by the task, any thread.
    func startRead(id: UInt64, kind: AsyncReadKind, waiter: ReadWaiter, on socket: Socket) {
        let action = state.withLock { state -> ReadAction in
            if var tail = state.tail {
                let result = Self.take(kind, from: &tail)
                state.tail = tail
                return .resume(waiter, result)
            }
            if let ended = state.ended { return .resume(waiter, .failure(Self.endedError(ended))) }
            switch state.read {
            case .idle:
                let tag = state.takeTag()
                state.read = .reading(id: id, tag: tag, kind: kind, waiter: waiter, issued: false, cancelRequested: false)
                return .issue(tag: tag, kind: kind)
            case .withdrawing(let tag, let kept, nil):
                state.read = .withdrawing(tag: tag, kept: kept, next: (id, kind, waiter))
                return .none
            default:
                return .resume(waiter, .failure(SocketError(.badConfig,
                    "another task is reading from this socket: one reader at a time")))
            }
        }
        perform(action, on: socket)
    }

    /// The read call `id`'s task was cancelled. Any thread.
    func cancelRead(id: UInt64, on socket: Socket) {
        let action = state.withLock { state -> ReadAction in
            switch state.read {
            case .reading(id, let tag, let kind, let waiter?, let issued, _):
                if issued {
                    state.read = .withdrawing(tag: tag, kept: nil, next: nil)
                    return .cancelAndWithdraw(waiter, tag: tag)
                }
                state.read = .reading(id: id, tag: tag, kind: kind, waiter: nil, issued: false, cancelRequested: true)
                return .resume(waiter, .failure(CancellationError()))
            case .withdrawing(let tag, let kept, let next?) where next.id == id:
                state.read = .withdrawing(tag: tag, kept: kept, next: nil)
                return .resume(next.waiter, .failure(CancellationError()))
            default:
                // Finished already; or at the end of the stream, where its answer (from the
                // tail) is on its way without waiting for the peer.
                return .none
            }
        }
        perform(action, on: socket)
    }

    private func perform(_ action: ReadAction, on socket: Socket) {
        switch action {
        case .none:
            break
        case .resume(let waiter, let result):
            waiter.resume(with: result)
        case .issue(let tag, let kind):
            issue(tag: tag, kind: kind, on: socket)
        case .withdraw(let tag):
            withdraw(tag: tag, on: socket)
        case .cancelAndWithdraw(let waiter, let tag):
            waiter.resume(throwing: CancellationError())
            // From a cancellation handler, which must not run the loop's work inline (see
            // `AsyncSocket.closeLater`): queued, after the read it withdraws.
            if !socket.eventLoop.execute({ self.withdraw(tag: tag, on: socket) }) {
                withdraw(tag: tag, on: socket)
            }
        case .unread(let bytes):
            try? socket.unread(bytes)
        case .unreadThenIssue(let kept, let next):
            if let kept { try? socket.unread(kept) }
            if let next { issue(tag: next.tag, kind: next.kind, on: socket) }
        case .unreadThenReadTail(let kept, let tailTag, let count):
            if let kept { try? socket.unread(kept) }
            do {
                try socket.read(toLength: count, tag: tailTag)
            } catch {
                failEnding(error)
            }
        }
    }

    /// Queues the engine read for the state's current read.
    private func issue(tag: Int, kind: AsyncReadKind, on socket: Socket) {
        var failure: SocketError? = nil
        do {
            switch kind {
            case .available(let maxLength): try socket.read(maxLength: maxLength, tag: tag)
            case .exactly(let length): try socket.read(toLength: length, tag: tag)
            case .upTo(let separator, let maxLength): try socket.read(toData: separator, maxLength: maxLength, tag: tag)
            }
        } catch {
            failure = error
        }
        let action = state.withLock { state -> ReadAction in
            guard case .reading(let id, tag, let kind, let waiter, _, let cancelRequested) = state.read else {
                return .none // answered meanwhile (at once, from SocketKit's buffer)
            }
            if let failure {
                state.read = .idle
                return waiter.map { .resume($0, .failure(failure)) } ?? .none
            }
            if cancelRequested {
                state.read = .withdrawing(tag: tag, kept: nil, next: nil)
                return .withdraw(tag: tag)
            }
            if state.endOfStreamSeen {
                // The end of the stream was reported before this read reached the loop.
                state.endOfStreamSeen = false
                state.read = .endingWithdraw(tag: tag, id: id, kind: kind, waiter: waiter, kept: nil)
                return .withdraw(tag: tag)
            }
            state.read = .reading(id: id, tag: tag, kind: kind, waiter: waiter, issued: true, cancelRequested: false)
            return .none
        }
        perform(action, on: socket)
    }

    private func withdraw(tag: Int, on socket: Socket) {
        do {
            try socket.cancelRead(withTag: tag)
        } catch {
            // The session has ended (its disconnect settles everything) or the loop stopped.
            state.withLock { state in
                if case .withdrawing(tag, _, let next) = state.read {
                    state.read = .idle
                    if let next { next.waiter.resume(throwing: error) }
                }
            }
        }
    }

    /// Serves `kind` from the bytes left at the end of the stream.
    static func take(_ kind: AsyncReadKind, from tail: inout [UInt8]) -> Result<[UInt8], any Error> {
        switch kind {
        case .available(let maxLength):
            let count = maxLength > 0 ? min(maxLength, tail.count) : tail.count
            defer { tail.removeFirst(count) }
            return .success(Array(tail.prefix(count)))
        case .exactly(let length):
            guard tail.count >= length else {
                return .failure(SocketError(.closed, "the peer closed the connection \(tail.count) bytes short of the " +
                                            "\(length) asked for; read() returns them"))
            }
            defer { tail.removeFirst(length) }
            return .success(Array(tail.prefix(length)))
        case .upTo(let separator, let maxLength):
            guard let end = tail.firstRange(of: separator)?.upperBound else {
                return .failure(SocketError(.closed, "the peer closed the connection: \(tail.count) bytes left " +
                                            "without the separator; read() returns them"))
            }
            if maxLength > 0 && end > maxLength {
                return .failure(SocketError(.readMaxedOut, "no separator within \(maxLength) bytes"))
            }
            defer { tail.removeFirst(end) }
            return .success(Array(tail.prefix(end)))
        }
    }

    func socket(_ sock: Socket, didRead data: [UInt8], withTag tag: Int) {
        let action = state.withLock { state -> ReadAction in
            switch state.read {
            case .reading(_, tag, _, let waiter, _, _):
                state.read = .idle
                // No waiter: its task was cancelled before the read was even queued, and the
                // read completed at once from SocketKit's buffer: give the bytes back.
                return waiter.map { .resume($0, .success(data)) } ?? .unread(data)
            case .withdrawing(tag, _, let next):
                state.read = .withdrawing(tag: tag, kept: data, next: next)
                return .none
            case .endingWithdraw(tag, let id, let kind, let waiter, _):
                // It completed before the withdrawal: its task gets it.
                state.read = .endingWithdraw(tag: tag, id: id, kind: kind, waiter: nil, kept: nil)
                return waiter.map { .resume($0, .success(data)) } ?? .none
            case .endingTail(tag, _, let kind, let waiter):
                var tail = data
                state.read = .idle
                guard let waiter else {
                    state.tail = tail
                    return .none
                }
                let result = Self.take(kind, from: &tail)
                state.tail = tail
                return .resume(waiter, result)
            default:
                return .none
            }
        }
        perform(action, on: sock)
    }

    func socket(_ sock: Socket, didCancelReadWithTag tag: Int, unreadBytes: Int) {
        let action = state.withLock { state -> ReadAction in
            switch state.read {
            case .withdrawing(tag, let kept, let next):
                if state.endOfStreamSeen {
                    state.endOfStreamSeen = false
                    let left = unreadBytes + (kept?.count ?? 0)
                    let waiter = next.map { (id: $0.id, kind: $0.kind, waiter: $0.waiter) }
                    return finishEnd(&state, left: left, kept: kept, waiting: waiter)
                }
                guard let next else {
                    state.read = .idle
                    return kept.map { .unreadThenIssue(kept: $0, issue: nil) } ?? .none
                }
                let nextTag = state.takeTag()
                state.read = .reading(id: next.id, tag: nextTag, kind: next.kind, waiter: next.waiter,
                                      issued: false, cancelRequested: false)
                return .unreadThenIssue(kept: kept, issue: (nextTag, next.kind))
            case .endingWithdraw(tag, let id, let kind, let waiter, let kept):
                let left = unreadBytes + (kept?.count ?? 0)
                return finishEnd(&state, left: left, kept: kept, waiting: waiter.map { (id, kind, $0) })
            default:
                return .none
            }
        }
        perform(action, on: sock)
    }

    /// The end of the stream, once no read is outstanding: `left` bytes remain with
    /// SocketKit (`kept` among them once given back). Reads them as the tail, or, with none,
    /// serves the waiting read at once.
    private func finishEnd(_ state: inout State, left: Int,
                           kept: [UInt8]?, waiting: (id: UInt64, kind: AsyncReadKind, waiter: ReadWaiter)?) -> ReadAction {
        guard left > 0 else {
            state.read = .idle
            var tail: [UInt8] = []
            guard let waiting else {
                state.tail = tail
                return .none
            }
            let result = Self.take(waiting.kind, from: &tail)
            state.tail = tail
            return .resume(waiting.waiter, result)
        }
        let tailTag = state.takeTag()
        state.read = .endingTail(tag: tailTag, id: waiting?.id ?? 0, kind: waiting?.kind ?? .available(maxLength: 0),
                                 waiter: waiting?.waiter)
        return .unreadThenReadTail(kept: kept, tailTag: tailTag, count: left)
    }

    /// The tail could not be read: the read waiting for it fails.
    private func failEnding(_ error: any Error) {
        let waiter = state.withLock { state -> ReadWaiter? in
            guard case .endingTail(_, _, _, let waiter) = state.read else { return nil }
            state.read = .idle
            state.tail = []
            return waiter
        }
        waiter?.resume(throwing: error)
    }

    func socketDidCloseReadStream(_ sock: Socket) {
        let action = state.withLock { state -> ReadAction in
            switch state.read {
            case .idle:
                // Nothing unread (the report waits for the bytes to be read), none pending.
                state.tail = []
                return .none
            case .reading(let id, let tag, let kind, let waiter, let issued, _):
                // It cannot complete any more: withdraw it and serve it from the tail.
                guard issued else {
                    // Its issuer withdraws nothing: the read is answered before it looks.
                    state.endOfStreamSeen = true
                    return .none
                }
                state.read = .endingWithdraw(tag: tag, id: id, kind: kind, waiter: waiter, kept: nil)
                return .withdraw(tag: tag)
            case .withdrawing:
                state.endOfStreamSeen = true
                return .none
            case .endingWithdraw, .endingTail:
                return .none
            }
        }
        if case .withdraw(let tag) = action {
            do { try sock.cancelRead(withTag: tag) } catch { failEnding(error) }
            return
        }
        perform(action, on: sock)
    }

    // MARK: Writing

    /// Waits while the write queue is above its high watermark (until it drains to the
    /// low one). Cancellable.
    nonisolated(nonsending) func waitForRoom() async throws {
        let id = newID()
        try await withTaskCancellationHandler {
            try await suspend { (waiter: VoidWaiter) in
                let ready = state.withLock { state -> Result<Void, any Error>? in
                    if let ended = state.ended { return .failure(Self.endedError(ended)) }
                    guard state.aboveHighWatermark else { return .success(()) }
                    state.roomWaiters.append((id, waiter))
                    return nil
                }
                if let ready { waiter.resume(with: ready) }
            }
        } onCancel: {
            let waiter = state.withLock { state -> VoidWaiter? in
                guard let index = state.roomWaiters.firstIndex(where: { $0.id == id }) else { return nil }
                return state.roomWaiters.remove(at: index).waiter
            }
            waiter?.resume(throwing: CancellationError())
        }
    }

    var isAboveHighWatermark: Bool { state.withLock { $0.aboveHighWatermark } }

    /// The tag of a write about to be made, registered (`register`) unless `registered` is
    /// false: a write made on the loop thread registers only if it did not complete at once
    /// (no event of it can come in between there). Throws when the connection cannot take
    /// writes.
    func beginWrite(registered: Bool) throws -> Int {
        try state.withLock { state throws -> Int in
            if let ended = state.ended { throw Self.endedError(ended) }
            if state.outputShut { throw SocketError(.badConfig, "the write side is shut: no writes after shutdownOutput()") }
            let tag = state.takeTag()
            if registered { state.writes.append((tag, .pending)) }
            return tag
        }
    }

    /// Registers write `tag`, whose completion comes as an event.
    func register(write tag: Int) {
        state.withLock { $0.writes.append((tag, .pending)) }
    }

    /// The write could not be queued.
    func abandonWrite(tag: Int) {
        state.withLock { state in state.writes.removeAll { $0.tag == tag } }
    }


    /// Nil once the write has completed (it went out at once), otherwise waits for it.
    nonisolated(nonsending) func finishWrite(tag: Int) async throws {
        let settled = state.withLock { state -> SocketError?? in
            guard let index = state.writes.firstIndex(where: { $0.tag == tag }),
                  case .done(let error) = state.writes[index].state else { return .none }
            state.writes.remove(at: index)
            return .some(error)
        }
        if let settled {
            if let error = settled { throw error }
            return
        }
        try await withTaskCancellationHandler {
            try await suspend { (waiter: VoidWaiter) in
                let result = state.withLock { state -> Result<Void, any Error>? in
                    guard let index = state.writes.firstIndex(where: { $0.tag == tag }) else {
                        return .failure(Self.endedError(state.ended ?? nil))
                    }
                    if case .done(let error) = state.writes[index].state {
                        state.writes.remove(at: index)
                        return error.map { .failure($0) } ?? .success(())
                    }
                    state.writes[index].state = .waiting(waiter)
                    return nil
                }
                if let result { waiter.resume(with: result) }
            }
        } onCancel: {
            let waiter = state.withLock { state -> VoidWaiter? in
                guard let index = state.writes.firstIndex(where: { $0.tag == tag }),
                      case .waiting(let waiter) = state.writes[index].state else { return nil }
                state.writes[index].state = .abandoned
                return waiter
            }
            waiter?.resume(throwing: CancellationError())
        }
    }

    func socket(_ sock: Socket, didWriteDataWithTag tag: Int) {
        let (waiter, shutWaiter) = state.withLock { state -> (VoidWaiter?, VoidWaiter?) in
            var waiter: VoidWaiter? = nil
            if let index = state.writes.firstIndex(where: { $0.tag == tag }) {
                switch state.writes[index].state {
                case .waiting(let w):
                    waiter = w
                    state.writes.remove(at: index)
                case .abandoned:
                    state.writes.remove(at: index)
                case .pending, .done:
                    state.writes[index].state = .done(nil)
                }
            }
            let shut = state.writes.isEmpty ? state.outputShutWaiter.take() : nil
            return (waiter, shut)
        }
        waiter?.resume()
        shutWaiter?.resume()
    }

    func socket(_ sock: Socket, writeQueueDidReachHighWatermark queuedBytes: Int) {
        state.withLock { $0.aboveHighWatermark = true }
    }

    func socket(_ sock: Socket, writeQueueDidDrainToLowWatermark queuedBytes: Int) {
        let waiters = state.withLock { state -> [(id: UInt64, waiter: VoidWaiter)] in
            state.aboveHighWatermark = false
            defer { state.roomWaiters.removeAll() }
            return state.roomWaiters
        }
        for entry in waiters { entry.waiter.resume() }
    }

    /// Waits until every write queued so far has completed (for `shutdownOutput`), and
    /// refuses writes from now on.
    nonisolated(nonsending) func shutWritesAndWaitForThem() async throws {
        try await suspend { (waiter: VoidWaiter) in
            let result = state.withLock { state -> Result<Void, any Error>? in
                if let ended = state.ended { return .failure(Self.endedError(ended)) }
                if state.outputShut { return .failure(SocketError(.badConfig, "the write side is already shut")) }
                state.outputShut = true
                guard state.writes.allSatisfy({ if case .done = $0.state { return true }; return false }) else {
                    state.outputShutWaiter = waiter
                    return nil
                }
                return .success(())
            }
            if let result { waiter.resume(with: result) }
        }
    }

    // MARK: Connecting, TLS, the end

    func socket(_ sock: Socket, didConnectToHost host: String, port: UInt16) { connected() }
    func socket(_ sock: Socket, didConnectToUnixPath path: String) { connected() }

    private func connected() {
        let waiter = state.withLock { state -> VoidWaiter? in
            state.connected = true
            return state.connectWaiter.take()
        }
        waiter?.resume()
    }

    func socketDidSecure(_ sock: Socket) {
        state.withLock { $0.tlsWaiter.take() }?.resume()
    }

    func socket(_ sock: Socket, didReceiveTrust trust: TLSTrust, completionHandler: @escaping @Sendable (Bool) -> Void) {
        guard let evaluate = trustEvaluator.withLock({ $0 }) else {
            completionHandler(false)
            return
        }
        Task { completionHandler(await evaluate(trust)) }
    }

    func socketDidDisconnect(_ sock: Socket, withError error: SocketError?) {
        var waiters: [(VoidWaiter, any Error)] = []
        var readWaiter: (ReadWaiter, Result<[UInt8], any Error>)? = nil
        let closeWaiters = state.withLock { state -> [EndWaiter] in
            state.ended = .some(error)
            let failure = Self.endedError(error)
            if let waiter = state.connectWaiter.take() {
                waiters.append((waiter, state.connectCancelled ? CancellationError() : failure))
            }
            if let waiter = state.tlsWaiter.take() { waiters.append((waiter, failure)) }
            for entry in state.roomWaiters { waiters.append((entry.waiter, failure)) }
            state.roomWaiters.removeAll()
            // Writes not yet complete fail: a waiting task now, one about to wait when it looks.
            var unsettled: [(tag: Int, state: WriteState)] = []
            for write in state.writes {
                switch write.state {
                case .waiting(let waiter): waiters.append((waiter, failure))
                case .abandoned: break
                case .pending: unsettled.append((write.tag, .done(failure)))
                case .done: unsettled.append(write)
                }
            }
            state.writes = unsettled
            if let waiter = state.outputShutWaiter.take() { waiters.append((waiter, failure)) }
            // The peer's orderly close reported as the end of the connection (TLS): for
            // reads, the end of the stream.
            let isEndOfStream = error?.code == .closed
            if isEndOfStream && state.tail == nil { state.tail = [] }
            let pending: (ReadWaiter, AsyncReadKind)?
            switch state.read {
            case .reading(_, _, let kind, let waiter?, _, _): pending = (waiter, kind)
            case .withdrawing(_, _, let next?): pending = (next.waiter, next.kind)
            case .endingWithdraw(_, _, let kind, let waiter?, _): pending = (waiter, kind)
            case .endingTail(_, _, let kind, let waiter?): pending = (waiter, kind)
            default: pending = nil
            }
            state.read = .idle
            if let (waiter, kind) = pending {
                if var tail = state.tail {
                    readWaiter = (waiter, Self.take(kind, from: &tail))
                    state.tail = tail
                } else {
                    readWaiter = (waiter, .failure(failure))
                }
            }
            defer { state.closeWaiters.removeAll() }
            return state.closeWaiters
        }
        for (waiter, failure) in waiters { waiter.resume(throwing: failure) }
        if let (waiter, result) = readWaiter { waiter.resume(with: result) }
        for waiter in closeWaiters { waiter.resume() }
    }

    /// Waits until the connection has ended.
    nonisolated(nonsending) func waitForEnd() async {
        await suspendUntilEnd { (waiter: EndWaiter) in
            let ended = state.withLock { state -> Bool in
                guard state.ended == nil else { return true }
                state.closeWaiters.append(waiter)
                return false
            }
            if ended { waiter.resume() }
        }
    }
}
