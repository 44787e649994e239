// SPDX-License-Identifier: MIT
/// A TCP or Unix-domain connection for structured concurrency: `async` reads and writes on
/// the same engine as `Socket` (it is one, with a delegate of SocketKit's own).
///
/// ```swift
/// try await AsyncSocket.withConnection(toHost: "127.0.0.1", port: 7000) { connection in
///     try await connection.write(Array("hello\n".utf8))
///     let line = try await connection.read(upTo: Socket.lf, maxLength: 4096)
/// }   // closed here, whatever happened inside
/// ```
///
/// - Errors are `SocketError`s, as the delegate API reports them (`.closed`, `.system` with
///   `ECONNRESET`, `.tlsHostnameMismatch`, ...); a cancelled task gets `CancellationError`.
/// - Reads: one task reads at a time (another's read throws `.badConfig`); any number of
///   tasks may write. Cancelling a task that waits for a read loses no bytes: the read is
///   withdrawn and what it had gathered, or what it got just as the cancellation came, goes
///   to the next read, of any kind.
/// - End of stream: the connection stays open for writing when the peer closes its side.
///   `read(maxLength:)` then returns what was left, then `[]`; `read(exactly:)` and
///   `read(upTo:maxLength:)` throw `.closed` when what is left cannot satisfy them (it stays
///   for `read(maxLength:)`); `chunks` and `messages(separatedBy:maxLength:)` end.
/// - Writes return once the kernel has accepted the bytes. While the socket's write queue is
///   above its high watermark (`socket.setWriteWatermarks`), a write waits until it has
///   drained to the low one before queueing more.
/// - Lifetime: `executeThenClose` and `withConnection` close the connection when their body
///   returns or throws; `close()` (graceful) and `abort()` close it explicitly. Dropping the
///   last reference closes it too (at once, queued writes dropped).
/// - Threads: `Sendable`; call it from any task. A task that prefers the connection's
///   `eventLoop` as its executor (`addTask(executorPreference:)`, `withTaskExecutorPreference`)
///   runs beside the I/O, with no hand-over between threads.
public final class AsyncSocket: Sendable {
    /// The socket underneath, for its configuration and diagnostics (options, watermarks,
    /// addresses, `tlsInfo`). Its delegate is the `AsyncSocket`'s: do not replace it, and do
    /// not queue reads or writes on it directly.
    public let socket: Socket
    let bridge: ConnectionBridge

    /// The loop the connection lives on: the executor to prefer for tasks that serve it.
    public var eventLoop: EventLoop { socket.eventLoop }

    init(socket: Socket, bridge: ConnectionBridge) {
        self.socket = socket
        self.bridge = bridge
    }

    /// A socket with this bridge as its delegate, set up for the async API.
    static func makeSocket(eventLoop: EventLoop?) -> (Socket, ConnectionBridge) {
        let bridge = ConnectionBridge()
        let socket = Socket(delegate: bridge, callbackQueue: .eventLoop, eventLoop: eventLoop)
        // Reads see the end of the stream themselves (see ConnectionBridge).
        socket.autoDisconnectOnClosedReadStream = false
        return (socket, bridge)
    }

    deinit {
        // Releasing `socket` closes it (no callbacks): nobody can be waiting, as every wait
        // holds this object.
    }

    // MARK: Connecting

    /// Connects to a host name, an IP literal or `"localhost"` (every resolved address is
    /// raced, Happy Eyeballs), and with `tls` set, secures the connection before returning
    /// (with `manualTrustEvaluation` in it, `evaluateTrust` decides). `timeout` covers
    /// resolution and connecting (nil: none); `configure` sets the socket up before it
    /// connects (options, watermarks, limits). Cancelling the task closes the attempt and
    /// throws `CancellationError`.
    nonisolated(nonsending) public static func connect(toHost host: String, port: UInt16, viaInterface interface: String? = nil,
                               timeout: Duration? = nil, tls: TLSSettings? = nil,
                               eventLoop: EventLoop? = nil,
                               configure: (Socket) throws -> Void = { _ in },
                               evaluateTrust: (@Sendable (TLSTrust) async -> Bool)? = nil) async throws -> AsyncSocket {
        try await connect(tls: tls, evaluateTrust: evaluateTrust, eventLoop: eventLoop, configure: configure) {
            (socket: Socket) throws(SocketError) in
            try socket.connect(toHost: host, port: port, viaInterface: interface, timeout: seconds(timeout))
        }
    }

    /// Connects to a raw address (IPv4, IPv6 or Unix-domain), as `connect(toHost:port:...)`.
    nonisolated(nonsending) public static func connect(to address: SocketAddress, viaInterface interface: String? = nil,
                               timeout: Duration? = nil, tls: TLSSettings? = nil,
                               eventLoop: EventLoop? = nil,
                               configure: (Socket) throws -> Void = { _ in },
                               evaluateTrust: (@Sendable (TLSTrust) async -> Bool)? = nil) async throws -> AsyncSocket {
        try await connect(tls: tls, evaluateTrust: evaluateTrust, eventLoop: eventLoop, configure: configure) {
            (socket: Socket) throws(SocketError) in
            try socket.connect(to: address, viaInterface: interface, timeout: seconds(timeout))
        }
    }

    /// Connects to a Unix-domain socket at `path`, as `connect(toHost:port:...)`.
    nonisolated(nonsending) public static func connect(toUnixPath path: String, timeout: Duration? = nil, tls: TLSSettings? = nil,
                               eventLoop: EventLoop? = nil,
                               configure: (Socket) throws -> Void = { _ in },
                               evaluateTrust: (@Sendable (TLSTrust) async -> Bool)? = nil) async throws -> AsyncSocket {
        try await connect(tls: tls, evaluateTrust: evaluateTrust, eventLoop: eventLoop, configure: configure) {
            (socket: Socket) throws(SocketError) in
            try socket.connect(toUnixPath: path, timeout: seconds(timeout))
        }
    }

    /// Connects as `connect(toHost:port:...)`, runs `body` with the connection, and closes
    /// it when `body` returns (gracefully: queued writes go first) or throws (at once).
    public static func withConnection<Result>(toHost host: String, port: UInt16, timeout: Duration? = nil,
                                              tls: TLSSettings? = nil, eventLoop: EventLoop? = nil,
                                              isolation: isolated (any Actor)? = #isolation,
                                              _ body: (AsyncSocket) async throws -> Result) async throws -> Result {
        let connection = try await connect(toHost: host, port: port, timeout: timeout, tls: tls, eventLoop: eventLoop)
        return try await connection.executeThenClose(body)
    }

    /// Disconnects `socket` without waiting for its loop: what a cancellation handler does.
    /// A handler must not wait for the loop: while it runs, its task cannot be resumed, and
    /// the loop may be resuming that very task (its disconnect answers the task's wait).
    static func closeLater(_ socket: Socket) {
        if !socket.eventLoop.execute({ socket.disconnect() }) { socket.disconnect() }
    }

    /// A duration as the engine's seconds (negative: none).
    static func seconds(_ duration: Duration?) -> Double {
        guard let duration else { return -1 }
        let (seconds, attoseconds) = duration.components
        return max(0, Double(seconds) + Double(attoseconds) / 1e18)
    }

    nonisolated(nonsending) private static func connect(tls: TLSSettings?, evaluateTrust: (@Sendable (TLSTrust) async -> Bool)?,
                                eventLoop: EventLoop?, configure: (Socket) throws -> Void,
                                start: @escaping @Sendable (Socket) throws(SocketError) -> Void) async throws -> AsyncSocket {
        let (socket, bridge) = makeSocket(eventLoop: eventLoop)
        try configure(socket)
        bridge.trustEvaluator.withLock { $0 = evaluateTrust }
        try await withTaskCancellationHandler {
            try await suspend { (waiter: ConnectionBridge.VoidWaiter) in
                let cancelled = bridge.state.withLock { state -> Bool in
                    guard !state.connectCancelled else { return true }
                    state.connectWaiter = waiter
                    return false
                }
                if cancelled {
                    waiter.resume(throwing: CancellationError())
                    return
                }
                do {
                    try start(socket)
                } catch {
                    bridge.state.withLock { $0.connectWaiter.take() }?.resume(throwing: error)
                    return
                }
                // A cancellation that came while the connect was being started found nothing
                // to close yet: close the attempt now.
                if bridge.state.withLock({ $0.connectCancelled }) { socket.disconnect() }
            }
        } onCancel: {
            let started = bridge.state.withLock { state -> Bool in
                state.connectCancelled = true
                return state.connectWaiter != nil
            }
            // The attempt closes; its end (socketDidDisconnect) answers the waiting connect.
            if started { AsyncSocket.closeLater(socket) }
        }
        let connection = AsyncSocket(socket: socket, bridge: bridge)
        if let tls {
            do {
                try await connection.startTLS(tls)
            } catch {
                connection.abort()
                throw error
            }
        }
        return connection
    }

    // MARK: Scoped lifetime

    /// Runs `body`, then closes the connection: gracefully when `body` returns (its queued
    /// writes are sent first), at once when it throws (the error is rethrown). The connection
    /// cannot outlive the scope by accident.
    public func executeThenClose<Result>(isolation: isolated (any Actor)? = #isolation,
                                         _ body: (AsyncSocket) async throws -> Result) async throws -> Result {
        let result: Result
        do {
            result = try await body(self)
        } catch {
            abort()
            throw error
        }
        await close()
        return result
    }

    // MARK: Reading

    /// Whatever is available, at least one byte (at most `maxLength` when positive); `[]`
    /// at the end of the stream.
    nonisolated(nonsending) public func read(maxLength: Int = 0) async throws -> [UInt8] {
        guard maxLength >= 0 else { throw SocketError(.badParam, "negative maxLength") }
        return try await read(.available(maxLength: maxLength))
    }

    /// Exactly `length` bytes (at most the socket's `maximumReadLength`). At the end of the
    /// stream with fewer left: `.closed` (they stay for `read(maxLength:)`).
    nonisolated(nonsending) public func read(exactly length: Int) async throws -> [UInt8] {
        guard length > 0 else { throw SocketError(.badParam, "length must be positive") }
        return try await read(.exactly(length))
    }

    /// Up to and including `separator`. Throws `.readMaxedOut` (and the connection ends, as
    /// for `Socket.read(toData:maxLength:)`) when `maxLength` bytes came without it; with
    /// `maxLength` 0 the socket's `maximumReadLength` applies.
    nonisolated(nonsending) public func read(upTo separator: [UInt8], maxLength: Int) async throws -> [UInt8] {
        guard !separator.isEmpty else { throw SocketError(.badParam, "empty separator") }
        guard maxLength >= 0 else { throw SocketError(.badParam, "negative maxLength") }
        guard maxLength == 0 || maxLength >= separator.count else {
            throw SocketError(.badParam, "maxLength is shorter than the separator")
        }
        return try await read(.upTo(separator: separator, maxLength: maxLength))
    }

    /// Every read: a continuation the bridge resumes, under a cancellation handler. Written
    /// out here, not through `suspend`: each async frame between the caller and the
    /// continuation is a task switch more per read (bench/README.md, "The async echo").
    @inline(__always)
    nonisolated(nonsending) func read(_ kind: AsyncReadKind) async throws -> [UInt8] {
        let id = bridge.newID()
        let (socket, bridge) = (self.socket, self.bridge)
        return try await withTaskCancellationHandler {
            #if DEBUG
            try await withCheckedThrowingContinuation { (waiter: ConnectionBridge.ReadWaiter) in
                bridge.startRead(id: id, kind: kind, waiter: waiter, on: socket)
            }
            #else
            try await withUnsafeThrowingContinuation { (waiter: ConnectionBridge.ReadWaiter) in
                bridge.startRead(id: id, kind: kind, waiter: waiter, on: socket)
            }
            #endif
        } onCancel: {
            bridge.cancelRead(id: id, on: socket)
        }
    }

    /// The bytes as they arrive, each chunk what one read got (at most `maxLength` when
    /// positive); ends at the end of the stream.
    public func chunks(maxLength: Int = 0) -> Chunks { Chunks(connection: self, maxLength: max(0, maxLength)) }

    /// The messages that `separator` ends, without it; ends at the end of the stream (a
    /// last message without its separator is an error: `.closed`, and its bytes stay for
    /// `read(maxLength:)`). A message longer than `maxLength` ends the connection with
    /// `.readMaxedOut`.
    public func messages(separatedBy separator: [UInt8], maxLength: Int) -> Messages {
        Messages(connection: self, separator: separator, maxLength: maxLength)
    }

    // MARK: Writing

    /// Queues `bytes` and returns once the kernel has accepted all of them; first waits
    /// while the write queue is above its high watermark. Empty `bytes` are refused
    /// (`.badParam`), as is a write past `maximumQueuedWriteBytes` (`.writeQueueFull`).
    /// Cancelling the task stops the wait (`CancellationError`); bytes already queued are
    /// still sent.
    nonisolated(nonsending) public func write(_ bytes: [UInt8]) async throws {
        guard !bytes.isEmpty else { throw SocketError(.badParam, "empty write") }
        if bridge.isAboveHighWatermark { try await bridge.waitForRoom() }
        // On the loop thread no event can come before this call returns: the write is
        // registered only if the kernel did not take it whole at once (the common case of a
        // task that prefers its connection's loop, which then never waits for a write).
        let onLoop = socket.eventLoop.inEventLoop
        let tag = try bridge.beginWrite(registered: !onLoop)
        let completed: Bool
        do {
            completed = try socket.writeCompletingInline(bytes, tag: tag)
        } catch {
            if !onLoop { bridge.abandonWrite(tag: tag) }
            throw error
        }
        if completed { return }
        if onLoop { bridge.register(write: tag) }
        try await bridge.finishWrite(tag: tag)
    }

    /// Closes the write side once every write made so far has been accepted (the peer reads
    /// the end of the stream; under TLS a close_notify goes first), and keeps reading. Later
    /// writes throw `.badConfig`.
    nonisolated(nonsending) public func shutdownOutput() async throws {
        try await bridge.shutWritesAndWaitForThem()
        socket.closeWriteStream()
    }

    // MARK: TLS

    /// Secures the connection (STARTTLS: after the plaintext exchanged so far) and returns
    /// once the handshake is done; errors are the handshake's (`.tlsHostnameMismatch`, ...),
    /// and the connection ends with them. Waits behind a read in progress. With
    /// `manualTrustEvaluation` in `settings`, `evaluateTrust` decides (no closure: refused).
    /// Cancelling the task ends the connection (a handshake cannot be left half-way).
    nonisolated(nonsending) public func startTLS(_ settings: TLSSettings = TLSSettings(),
                         evaluateTrust: (@Sendable (TLSTrust) async -> Bool)? = nil) async throws {
        let (socket, bridge) = (self.socket, self.bridge)
        if let evaluateTrust { bridge.trustEvaluator.withLock { $0 = evaluateTrust } }
        try await withTaskCancellationHandler {
            try await suspend { (waiter: ConnectionBridge.VoidWaiter) in
                let refused = bridge.state.withLock { state -> SocketError? in
                    if let ended = state.ended { return ConnectionBridge.endedError(ended) }
                    guard state.tlsWaiter == nil else { return SocketError(.badConfig, "a TLS handshake is under way") }
                    state.tlsWaiter = waiter
                    return nil
                }
                if let refused {
                    waiter.resume(throwing: refused)
                    return
                }
                do {
                    try socket.startTLS(settings)
                } catch {
                    bridge.state.withLock { $0.tlsWaiter.take() }?.resume(throwing: error)
                }
            }
        } onCancel: {
            AsyncSocket.closeLater(socket)
        }
    }

    /// True once a TLS handshake has finished.
    public var isSecure: Bool { socket.isSecure }

    // MARK: Closing

    /// Closes gracefully: what was written is sent (FIN follows the last byte), then the
    /// connection ends; returns once it has. A read waiting meanwhile throws `.badConfig`.
    /// Cancelling the task closes at once instead.
    nonisolated(nonsending) public func close() async {
        let socket = self.socket
        await withTaskCancellationHandler {
            socket.disconnectAfterWriting()
            await bridge.waitForEnd()
        } onCancel: {
            AsyncSocket.closeLater(socket)
        }
    }

    /// Closes now: queued writes are dropped; waiting reads and writes throw `.badConfig`.
    public func abort() {
        socket.disconnect()
    }

    /// True once the connection has ended (closed by either side, or failed).
    public var isClosed: Bool { bridge.state.withLock { $0.ended != nil } }
}

extension AsyncSocket {
    /// The bytes of a connection as they arrive (`AsyncSocket.chunks(maxLength:)`). One
    /// iterator at a time, as one reader at a time.
    public struct Chunks: AsyncSequence, Sendable {
        public typealias Element = [UInt8]
        public typealias Failure = any Error
        let connection: AsyncSocket
        let maxLength: Int

        public struct AsyncIterator: AsyncIteratorProtocol, Sendable {
            let connection: AsyncSocket
            let maxLength: Int
            var finished = false

            nonisolated(nonsending) public mutating func next() async throws -> [UInt8]? {
                guard !finished else { return nil }
                let chunk = try await connection.read(.available(maxLength: maxLength))
                if chunk.isEmpty {
                    finished = true
                    return nil
                }
                return chunk
            }
        }

        public func makeAsyncIterator() -> AsyncIterator { AsyncIterator(connection: connection, maxLength: maxLength) }
    }

    /// The messages of a connection (`AsyncSocket.messages(separatedBy:maxLength:)`).
    public struct Messages: AsyncSequence, Sendable {
        public typealias Element = [UInt8]
        public typealias Failure = any Error
        let connection: AsyncSocket
        let separator: [UInt8]
        let maxLength: Int

        public struct AsyncIterator: AsyncIteratorProtocol, Sendable {
            let connection: AsyncSocket
            let separator: [UInt8]
            let maxLength: Int
            var finished = false

            nonisolated(nonsending) public mutating func next() async throws -> [UInt8]? {
                guard !finished else { return nil }
                do {
                    let message = try await connection.read(upTo: separator, maxLength: maxLength)
                    return Array(message.dropLast(separator.count))
                } catch let error as SocketError where error.code == .closed {
                    // A clean end between messages ends the sequence; in the middle of one it
                    // is the error.
                    finished = true
                    if connection.bridge.state.withLock({ $0.tail?.isEmpty ?? false }) { return nil }
                    throw error
                }
            }
        }

        public func makeAsyncIterator() -> AsyncIterator {
            AsyncIterator(connection: connection, separator: separator, maxLength: maxLength)
        }
    }
}
