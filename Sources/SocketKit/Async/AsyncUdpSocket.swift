// SPDX-License-Identifier: MIT
import Synchronization

/// One received datagram.
public struct Datagram: Sendable, Hashable {
    public let bytes: [UInt8]
    /// Who sent it.
    public let sender: SocketAddress

    public init(bytes: [UInt8], sender: SocketAddress) {
        self.bytes = bytes
        self.sender = sender
    }
}

/// A UDP socket for structured concurrency: received datagrams are an `AsyncSequence`,
/// sends are `async throws`.
///
/// ```swift
/// let udp = try AsyncUdpSocket(host: "127.0.0.1", port: 0)
/// try await udp.send(Array("ping".utf8), toHost: "127.0.0.1", port: 9999)
/// for try await datagram in udp.datagrams { ... }
/// ```
///
/// Received datagrams wait in a buffer of `bufferCapacity` until the sequence takes them.
/// A consumer slower than the peers: once the buffer is full, SocketKit stops reading from
/// the kernel, and datagrams wait in the socket's kernel receive buffer (`SO_RCVBUF`,
/// `UdpSocket.receiveBufferSize`), which drops what does not fit, as UDP always may; reading
/// resumes once the consumer has taken half the buffer. So memory stays bounded (the buffer
/// holds at most `bufferCapacity` datagrams plus the rest of the batch SocketKit was reading
/// when it filled, at most 63 more) and SocketKit itself drops nothing. Errors that do not
/// close the socket (an ICMP error for an earlier datagram, a datagram above the receive
/// limit) are not in the sequence: they are counted in `receiveErrors`.
public final class AsyncUdpSocket: Sendable {
    /// The socket underneath, for its configuration and addresses. Its delegate is the
    /// `AsyncUdpSocket`'s own: do not replace it.
    public let socket: UdpSocket
    let bridge: DatagramBridge

    /// The loop the socket lives on.
    public var eventLoop: EventLoop { socket.eventLoop }

    /// Binds to `port` on `host` (nil: every interface; an interface name or an IP address;
    /// 0: a port the kernel picks) and starts receiving. `configure` runs before the bind
    /// (families, buffer sizes, reuse options).
    public convenience init(host: String? = nil, port: UInt16 = 0, bufferCapacity: Int = 256,
                            eventLoop: EventLoop? = nil, configure: (UdpSocket) throws -> Void = { _ in }) throws {
        try self.init(bufferCapacity: bufferCapacity, eventLoop: eventLoop, configure: configure) { socket throws(SocketError) in
            try socket.bind(toPort: port, interface: host)
        }
    }

    /// Connects to `address` (only it can send to this socket; `send(_:)` goes there) and
    /// starts receiving.
    public convenience init(connectedTo address: SocketAddress, bufferCapacity: Int = 256,
                            eventLoop: EventLoop? = nil, configure: (UdpSocket) throws -> Void = { _ in }) async throws {
        try self.init(bufferCapacity: bufferCapacity, eventLoop: eventLoop, configure: configure) { _ throws(SocketError) in }
        try await connect(to: address)
    }

    private init(bufferCapacity: Int, eventLoop: EventLoop?, configure: (UdpSocket) throws -> Void,
                 setUp: (UdpSocket) throws(SocketError) -> Void) throws {
        guard bufferCapacity >= 1 else { throw SocketError(.badParam, "bufferCapacity must be at least 1") }
        bridge = DatagramBridge(capacity: bufferCapacity)
        socket = UdpSocket(delegate: bridge, callbackQueue: .eventLoop, eventLoop: eventLoop)
        try configure(socket)
        try setUp(socket)
        if !socket.isClosed { try socket.beginReceiving() }
    }

    /// Connects to `address`; returns once connected (`didConnectToAddress`).
    nonisolated(nonsending) public func connect(to address: SocketAddress) async throws {
        let (socket, bridge) = (self.socket, self.bridge)
        try await suspend { (waiter: SocketKit.Waiter<Void>) in
            bridge.state.withLock { $0.connectWaiter = waiter }
            do {
                try socket.connect(toAddress: address)
            } catch {
                bridge.state.withLock { $0.connectWaiter.take() }?.resume(throwing: error)
            }
        }
        try socket.beginReceiving()
    }

    /// The port it is bound to.
    public var localPort: UInt16 { socket.localPort }

    // MARK: Sending

    /// Sends a datagram to the connected peer; returns once the kernel took it. Errors of
    /// this datagram (`.sendTimeout`, `.system` with `EMSGSIZE`, ...) are thrown; the socket
    /// stays open.
    nonisolated(nonsending) public func send(_ bytes: [UInt8]) async throws {
        try await send { (socket, tag) throws(SocketError) in try socket.send(bytes, tag: tag) }
    }

    /// Sends a datagram to `address`.
    nonisolated(nonsending) public func send(_ bytes: [UInt8], to address: SocketAddress) async throws {
        try await send { (socket, tag) throws(SocketError) in try socket.send(bytes, toAddress: address, tag: tag) }
    }

    /// Sends a datagram to `host` (resolved off the loop).
    nonisolated(nonsending) public func send(_ bytes: [UInt8], toHost host: String, port: UInt16) async throws {
        try await send { (socket, tag) throws(SocketError) in try socket.send(bytes, toHost: host, port: port, tag: tag) }
    }

    nonisolated(nonsending) private func send(_ queue: (UdpSocket, Int) throws(SocketError) -> Void) async throws {
        let tag = try bridge.beginSend()
        do {
            try queue(socket, tag)
        } catch {
            bridge.settleSend(tag: tag, error: nil, abandon: true)
            throw error
        }
        try await bridge.finishSend(tag: tag)
    }

    // MARK: Receiving

    /// The datagrams, in the order they arrived; ends when the socket closes. One
    /// iterator at a time.
    public var datagrams: Datagrams { Datagrams(socket: self) }

    /// Datagrams received and not yet taken by the sequence.
    public var bufferedDatagrams: Int { bridge.state.withLock { $0.datagrams.count - $0.head } }

    /// Problems while receiving that did not close the socket (ICMP errors, oversized
    /// datagrams), in order; cleared when read.
    public func takeReceiveErrors() -> [SocketError] {
        bridge.state.withLock { state in
            defer { state.receiveErrors.removeAll() }
            return state.receiveErrors
        }
    }

    public struct Datagrams: AsyncSequence, Sendable {
        public typealias Element = Datagram
        public typealias Failure = any Error
        let socket: AsyncUdpSocket

        public struct AsyncIterator: AsyncIteratorProtocol, Sendable {
            let socket: AsyncUdpSocket

            nonisolated(nonsending) public mutating func next() async throws -> Datagram? {
                try await socket.bridge.next(resume: socket.socket)
            }
        }

        public func makeAsyncIterator() -> AsyncIterator { AsyncIterator(socket: socket) }
    }

    // MARK: Closing

    /// Runs `body`, then closes the socket (after the datagrams queued are sent when `body`
    /// returns; at once when it throws).
    public func executeThenClose<Result>(isolation: isolated (any Actor)? = #isolation,
                                         _ body: (AsyncUdpSocket) async throws -> Result) async throws -> Result {
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

    /// Closes once the datagrams queued are sent; returns once closed. The sequence ends.
    nonisolated(nonsending) public func close() async {
        socket.closeAfterSending()
        await bridge.waitForClose()
    }

    /// Closes now: queued datagrams are dropped. The sequence ends.
    public func abort() {
        socket.close()
    }
}

/// An `AsyncUdpSocket`'s delegate.
final class DatagramBridge: UdpSocketDelegate {
    typealias Waiter = SocketKit.Waiter<Datagram?>
    typealias SendWaiter = SocketKit.Waiter<Void>

    enum SendState {
        case pending
        case waiting(SendWaiter)
        case done(SocketError?)
    }

    struct State {
        var datagrams: [Datagram] = []
        var head = 0
        /// Reading from the kernel is paused because the buffer is full.
        var paused = false
        var waiter: (id: UInt64, waiter: Waiter)? = nil
        var closed = false
        var closeWaiters: [EndWaiter] = []
        var connectWaiter: SocketKit.Waiter<Void>? = nil
        var receiveErrors: [SocketError] = []
        var nextTag = 1
        var sends: [Int: SendState] = [:]
        /// The most datagrams the buffer held at once (for tests).
        var highestBuffered = 0
    }

    let capacity: Int
    let state = LockedValue(State())
    private let ids = Atomic<UInt64>(1)

    init(capacity: Int) { self.capacity = capacity }

    // MARK: Receiving

    func udpSocket(_ sock: UdpSocket, didReceive data: [UInt8], fromAddress address: SocketAddress,
                   withFilterContext context: (any Sendable)?) {
        let datagram = Datagram(bytes: data, sender: address)
        let (waiter, pause) = state.withLock { state -> (Waiter?, Bool) in
            if let waiting = state.waiter.take() { return (waiting.waiter, false) }
            state.datagrams.append(datagram)
            let buffered = state.datagrams.count - state.head
            state.highestBuffered = max(state.highestBuffered, buffered)
            guard buffered >= capacity, !state.paused else { return (nil, false) }
            state.paused = true
            return (nil, true)
        }
        waiter?.resume(returning: datagram)
        // On the loop, in the socket's callback: takes effect at once (the rest of the
        // batch already read from the kernel still arrives).
        if pause { sock.pauseReceiving() }
    }

    nonisolated(nonsending) func next(resume socket: UdpSocket) async throws -> Datagram? {
        let id = ids.add(1, ordering: .relaxed).newValue
        return try await withTaskCancellationHandler {
            try await suspend { (waiter: Waiter) in
                var resumeReading = false
                let result = state.withLock { state -> Result<Datagram?, any Error>? in
                    if state.head < state.datagrams.count {
                        let datagram = state.datagrams[state.head]
                        state.head += 1
                        if state.head == state.datagrams.count {
                            state.datagrams.removeAll(keepingCapacity: true)
                            state.head = 0
                        }
                        if state.paused && state.datagrams.count - state.head <= capacity / 2 {
                            state.paused = false
                            resumeReading = !state.closed
                        }
                        return .success(datagram)
                    }
                    if state.closed { return .success(nil) }
                    guard state.waiter == nil else {
                        return .failure(SocketError(.badConfig, "another task is iterating the datagrams"))
                    }
                    state.waiter = (id, waiter)
                    return nil
                }
                if resumeReading {
                    // Queued for the loop: no wait for it here.
                    _ = socket.eventLoop.execute { try? socket.beginReceiving() }
                }
                if let result { waiter.resume(with: result) }
            }
        } onCancel: {
            let waiter = state.withLock { state -> Waiter? in
                guard state.waiter?.id == id else { return nil }
                return state.waiter.take()?.waiter
            }
            waiter?.resume(throwing: CancellationError())
        }
    }

    func udpSocket(_ sock: UdpSocket, didReceiveError error: SocketError) {
        state.withLock { state in
            state.receiveErrors.append(error)
            if state.receiveErrors.count > 64 { state.receiveErrors.removeFirst() }
        }
    }

    // MARK: Sending

    func beginSend() throws -> Int {
        try state.withLock { state throws -> Int in
            guard !state.closed else { throw SocketError(.badConfig, "the socket is closed") }
            let tag = state.nextTag
            state.nextTag = state.nextTag == Int.max ? 1 : state.nextTag + 1
            state.sends[tag] = .pending
            return tag
        }
    }

    func settleSend(tag: Int, error: SocketError?, abandon: Bool = false) {
        let waiter = state.withLock { state -> SendWaiter? in
            if abandon {
                state.sends[tag] = nil
                return nil
            }
            switch state.sends[tag] {
            case .waiting(let waiter)?:
                state.sends[tag] = nil
                return waiter
            case .pending?:
                state.sends[tag] = .done(error)
                return nil
            default:
                return nil
            }
        }
        if let error { waiter?.resume(throwing: error) } else { waiter?.resume() }
    }

    nonisolated(nonsending) func finishSend(tag: Int) async throws {
        try await suspend { (waiter: SendWaiter) in
            let result = state.withLock { state -> Result<Void, any Error>? in
                switch state.sends[tag] {
                case .done(let error)?:
                    state.sends[tag] = nil
                    return error.map { .failure($0) } ?? .success(())
                case .pending?:
                    state.sends[tag] = .waiting(waiter)
                    return nil
                default:
                    return .failure(SocketError(.badConfig, "the socket is closed"))
                }
            }
            if let result { waiter.resume(with: result) }
        }
    }

    func udpSocket(_ sock: UdpSocket, didSendDataWithTag tag: Int) { settleSend(tag: tag, error: nil) }

    func udpSocket(_ sock: UdpSocket, didNotSendDataWithTag tag: Int, dueToError error: SocketError) {
        settleSend(tag: tag, error: error)
    }

    // MARK: Connecting, closing

    func udpSocket(_ sock: UdpSocket, didConnectToAddress address: SocketAddress) {
        state.withLock { $0.connectWaiter.take() }?.resume()
    }

    func udpSocket(_ sock: UdpSocket, didNotConnect error: SocketError) {
        state.withLock { $0.connectWaiter.take() }?.resume(throwing: error)
    }

    func udpSocketDidClose(_ sock: UdpSocket, withError error: SocketError?) {
        let failure = error ?? SocketError(.badConfig, "the socket is closed")
        let (waiter, sendWaiters, closeWaiters, connectWaiter) = state.withLock { state in
            state.closed = true
            var sendWaiters: [SendWaiter] = []
            for (tag, send) in state.sends {
                if case .waiting(let waiter) = send {
                    sendWaiters.append(waiter)
                    state.sends[tag] = nil
                } else if case .pending = send {
                    state.sends[tag] = .done(failure)
                }
            }
            defer { state.closeWaiters.removeAll() }
            return (state.waiter.take()?.waiter, sendWaiters, state.closeWaiters, state.connectWaiter.take())
        }
        // The datagrams already buffered stay for the sequence, which then ends.
        waiter?.resume(returning: nil)
        for waiter in sendWaiters { waiter.resume(throwing: failure) }
        connectWaiter?.resume(throwing: failure)
        for waiter in closeWaiters { waiter.resume() }
    }

    nonisolated(nonsending) func waitForClose() async {
        await suspendUntilEnd { (waiter: EndWaiter) in
            let closed = state.withLock { state -> Bool in
                guard !state.closed else { return true }
                state.closeWaiters.append(waiter)
                return false
            }
            if closed { waiter.resume() }
        }
    }
}
