// SPDX-License-Identifier: MIT
import Synchronization

/// A listener whose accepted connections are an `AsyncSequence` of `AsyncSocket`s.
///
/// ```swift
/// let listener = try AsyncListener(host: "127.0.0.1", port: 0)
/// try await listener.executeThenClose { connections in
///     try await withThrowingDiscardingTaskGroup { group in
///         for try await connection in connections {
///             group.addTask(executorPreference: connection.eventLoop) {
///                 try await connection.executeThenClose { connection in
///                     for try await chunk in connection.chunks() { try await connection.write(chunk) }
///                 }
///             }
///         }
///     }
/// }
/// ```
///
/// Accepted connections wait in the listener until the sequence takes them (the kernel's
/// backlog bounds how many arrive while nobody accepts, not this queue: iterate promptly).
/// The sequence ends when the listener closes, and throws the error that ended it otherwise.
/// Accepted sockets inherit the listener's configuration (`configure`).
public final class AsyncListener: Sendable {
    /// The listening socket, for its addresses and configuration. Its delegate is the
    /// listener's own: do not replace it.
    public let socket: Socket
    let bridge: ListenerBridge

    /// Listens on `host` (nil: every interface; `"localhost"`: IPv4 and IPv6 loopback; an
    /// interface name or an IP address) at `port` (0: one the kernel picks, the same for both
    /// families). `configure` sets the listener up before it listens; accepted sockets
    /// inherit that configuration. Behind a load balancer, `{ $0.proxyProtocol = .v2 }`
    /// reads each connection's PROXY protocol header before the sequence hands it out: its
    /// `socket.connectedAddress` is then the client the header names.
    public convenience init(host: String? = nil, port: UInt16, eventLoop: EventLoop? = nil,
                            configure: (Socket) throws -> Void = { _ in }) throws {
        try self.init(eventLoop: eventLoop, configure: configure) { socket throws(SocketError) in
            try socket.accept(onInterface: host, port: port)
        }
    }

    /// Listens on a Unix-domain socket at `path` (a stale socket file there is replaced;
    /// the file goes when the listener closes).
    public convenience init(unixPath path: String, eventLoop: EventLoop? = nil,
                            configure: (Socket) throws -> Void = { _ in }) throws {
        try self.init(eventLoop: eventLoop, configure: configure) { socket throws(SocketError) in
            try socket.accept(onUnixPath: path)
        }
    }

    private init(eventLoop: EventLoop?, configure: (Socket) throws -> Void,
                 listen: (Socket) throws(SocketError) -> Void) throws {
        bridge = ListenerBridge()
        socket = Socket(delegate: bridge, callbackQueue: .eventLoop, eventLoop: eventLoop)
        // Accepted connections inherit it: their reads see the end of the stream themselves.
        socket.autoDisconnectOnClosedReadStream = false
        try configure(socket)
        try listen(socket)
    }

    /// The port it listens on.
    public var localPort: UInt16 { socket.localPort }
    /// Every address it listens on.
    public var listeningAddresses: [SocketAddress] { socket.listeningAddresses }

    /// The accepted connections, in order. One iterator at a time.
    public var connections: Connections { Connections(bridge: bridge) }

    /// Runs `body` with the connections, then closes the listener (also when `body`
    /// throws). Connections accepted and not taken are closed.
    public func executeThenClose<Result>(isolation: isolated (any Actor)? = #isolation,
                                         _ body: (Connections) async throws -> Result) async throws -> Result {
        defer { close() }
        return try await body(connections)
    }

    /// Stops listening (the port is free when this returns) and closes the connections
    /// accepted and not yet taken; the sequence ends.
    public func close() {
        socket.disconnect()
    }

    public struct Connections: AsyncSequence, Sendable {
        public typealias Element = AsyncSocket
        public typealias Failure = any Error
        let bridge: ListenerBridge

        public struct AsyncIterator: AsyncIteratorProtocol, Sendable {
            let bridge: ListenerBridge

            nonisolated(nonsending) public mutating func next() async throws -> AsyncSocket? {
                try await bridge.next()
            }
        }

        public func makeAsyncIterator() -> AsyncIterator { AsyncIterator(bridge: bridge) }
    }
}

/// An `AsyncListener`'s delegate: accepted connections, each given its own
/// `ConnectionBridge`, wait here for the task that iterates.
final class ListenerBridge: SocketDelegate {
    typealias Waiter = SocketKit.Waiter<AsyncSocket?>

    struct State {
        var accepted: [AsyncSocket] = []
        var head = 0
        var waiter: (id: UInt64, waiter: Waiter)? = nil
        /// Set once the listener ended: why (nil: closed).
        var ended: SocketError?? = nil
    }

    private let state = LockedValue(State())
    private let ids = Atomic<UInt64>(1)

    /// Accepted connections not yet taken by the sequence.
    var heldConnections: Int { state.withLock { $0.accepted.count - $0.head } }

    func socket(_ listener: Socket, didAcceptNewSocket newSocket: Socket) {
        let bridge = ConnectionBridge()
        bridge.state.withLock { $0.connected = true }
        // Before the connection's first callback: none can precede this one.
        newSocket.setDelegate(bridge, callbackQueue: .eventLoop)
        let connection = AsyncSocket(socket: newSocket, bridge: bridge)
        let waiter = state.withLock { state -> Waiter? in
            if let waiting = state.waiter.take() { return waiting.waiter }
            state.accepted.append(connection)
            return nil
        }
        waiter?.resume(returning: connection)
    }

    func socketDidDisconnect(_ sock: Socket, withError error: SocketError?) {
        let (waiter, dropped) = state.withLock { state -> (Waiter?, [AsyncSocket]) in
            state.ended = .some(error)
            defer {
                state.accepted.removeAll()
                state.head = 0
            }
            return (state.waiter.take()?.waiter, Array(state.accepted[state.head...]))
        }
        for connection in dropped { connection.abort() }
        if let error { waiter?.resume(throwing: error) } else { waiter?.resume(returning: nil) }
    }

    nonisolated(nonsending) func next() async throws -> AsyncSocket? {
        let id = ids.add(1, ordering: .relaxed).newValue
        return try await withTaskCancellationHandler {
            try await suspend { (waiter: Waiter) in
                let result = state.withLock { state -> Result<AsyncSocket?, any Error>? in
                    if state.head < state.accepted.count {
                        let connection = state.accepted[state.head]
                        state.head += 1
                        if state.head == state.accepted.count {
                            state.accepted.removeAll(keepingCapacity: true)
                            state.head = 0
                        }
                        return .success(connection)
                    }
                    if let ended = state.ended { return ended.map { .failure($0) } ?? .success(nil) }
                    guard state.waiter == nil else {
                        return .failure(SocketError(.badConfig, "another task is iterating the connections"))
                    }
                    state.waiter = (id, waiter)
                    return nil
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
}
