// SPDX-License-Identifier: MIT
import Glibc
import Synchronization
import SocketKitC

// The handle layer both socket kinds share: the sk_socket_* and sk_udp_socket_* functions
// check handles, create, release, route events to C and answer the common getters through
// the generic functions below, so TCP and UDP differ only where their APIs differ.

/// What the C API needs of a socket, TCP (`Socket`) or UDP (`UdpSocket`).
protocol CSocketObject: CHandleObject {
    /// The socket kind's event receiver (its C delegate is one).
    associatedtype Receiver

    /// The C API's handle for this socket: 0 while it has none, and again once released.
    var cHandle: Atomic<UInt> { get }
    var eventLoop: EventLoop { get }
    var callbackQueue: CallbackQueue { get set }
    var connectedHost: String? { get }
    var connectedAddress: SocketAddress? { get }
    /// The userdata of the socket's C delegate (NULL without one).
    var cUserdata: UnsafeMutableRawPointer? { get }

    init(receiver: Receiver?, callbackQueue: CallbackQueue, eventLoop: EventLoop?)
    /// Waits for a callback running on another thread; afterwards the new receiver gets
    /// every event.
    func setReceiver(_ receiver: Receiver?, callbackQueue: CallbackQueue?)
    func perform(_ body: @escaping @Sendable (SocketDescriptors) -> Void)
    /// What a release does beyond ending the callbacks: the kind's other uses of the
    /// caller's memory end, and the effects the header promises on return take place.
    func finishRelease()
}

extension CSocketObject {
    // MARK: Handle checks

    /// `body` with the socket behind `handle`, else `invalid()`. From inside one of the
    /// socket's own C callbacks, without the handle table (`CallbackScope`).
    @inline(__always)
    static func withResolved<Result>(_ handle: OpaquePointer?, _ body: (Self) -> Result,
                                     invalid: () -> Result) -> Result {
        if let current = CallbackScope.current(handle, as: Self.self) {
            return RuntimeShortcuts.withUnretained(current, body)
        }
        guard let socket = lookup(handle) else { return invalid() }
        return body(socket)
    }

    /// Runs `body` on the socket behind `handle`; SK_OK, or the code of what it threw (also
    /// through `error`), or SK_ERR_INVALID_HANDLE.
    @inline(__always)
    static func withHandle(_ handle: OpaquePointer?, _ error: UnsafeMutablePointer<sk_error_t>? = nil,
                           _ body: (Self) throws(SocketError) -> Void) -> Int32 {
        // As `withResolved`, written out: the calls from callbacks (sk_socket_write from
        // did_read) are the C API's hot path, and this form keeps `body` inlined there.
        if let current = CallbackScope.current(handle, as: Self.self) {
            return RuntimeShortcuts.withUnretained(current) { socket in
                reporting(error) { () throws(SocketError) in try body(socket) }
            }
        }
        return reporting(error) { () throws(SocketError) in try body(try resolve(handle)) }
    }

    /// `body`'s answer about the socket behind `handle` (a length, a code, 1 or 0), or
    /// SK_ERR_INVALID_HANDLE.
    @inline(__always)
    static func answer(_ handle: OpaquePointer?, _ body: (Self) -> Int32) -> Int32 {
        withResolved(handle, body, invalid: { SocketError.Code.invalidHandle.rawValue })
    }

    /// 1 or 0 from a Boolean property, or SK_ERR_INVALID_HANDLE.
    @inline(__always)
    static func flag(_ handle: OpaquePointer?, _ property: (Self) -> Bool) -> Int32 {
        answer(handle) { property($0) ? 1 : 0 }
    }

    // MARK: Lifetime

    /// A new handle, also kept in `cHandle`, where the socket's callbacks find it.
    func publishHandle() -> OpaquePointer {
        let handle = makeHandle()
        cHandle.store(UInt(bitPattern: Int(bitPattern: UnsafeRawPointer(handle))), ordering: .relaxed)
        return handle
    }

    /// sk_*_create: a socket with the C delegate `receiver` makes, on the queue and in the
    /// loop group the handles name (NULL: the socket's loop, the default group). Its handle
    /// exists before `start` runs, so the first callback can name it; if `start` throws,
    /// the handle goes again.
    static func create(_ outSocket: UnsafeMutablePointer<OpaquePointer?>?, _ error: UnsafeMutablePointer<sk_error_t>?,
                       receiver: () throws(SocketError) -> Receiver?, queue: OpaquePointer?, group: OpaquePointer?,
                       start: (Self) throws(SocketError) -> Void = { _ in }) -> Int32 {
        reporting(error) { () throws(SocketError) in
            guard let outSocket else { throw badParam("out_socket is NULL") }
            let socket = Self(receiver: try receiver(), callbackQueue: try lookupQueue(queue),
                              eventLoop: try lookupGroup(group)?.next())
            let handle = socket.publishHandle()
            do throws(SocketError) {
                try start(socket)
            } catch {
                _ = removeHandle(handle)
                throw error
            }
            outSocket.pointee = handle
        }
    }

    /// sk_*_release: once it returns no callback of the socket starts (one running on
    /// another thread is waited for) and its userdata is not touched again.
    static func release(_ handle: OpaquePointer?) -> Int32 {
        guard let socket = removeHandle(handle) else { return SocketError.Code.invalidHandle.rawValue }
        socket.setReceiver(nil, callbackQueue: nil)
        socket.finishRelease()
        // After the wait above: ends CallbackScope's fast path for this handle.
        socket.cHandle.store(0, ordering: .releasing)
        return 0
    }

    /// sk_*_set_delegate: the receiver is made (and the struct checked) once the handle is.
    static func setDelegate(_ handle: OpaquePointer?, _ receiver: () throws(SocketError) -> Receiver?) -> Int32 {
        withHandle(handle) { (socket) throws(SocketError) in socket.setReceiver(try receiver(), callbackQueue: nil) }
    }

    static func setCallbackQueue(_ handle: OpaquePointer?, _ queue: OpaquePointer?) -> Int32 {
        withHandle(handle) { (socket) throws(SocketError) in socket.callbackQueue = try lookupQueue(queue) }
    }

    static func userdata(_ handle: OpaquePointer?, _ outUserdata: UnsafeMutablePointer<UnsafeMutableRawPointer?>?) -> Int32 {
        withHandle(handle) { outUserdata?.pointee = $0.cUserdata }
    }

    // MARK: Events

    /// Hands one event of this socket to its C delegate: as a record when a poll of the
    /// socket's host-driven queue runs on this thread (`CEventSink`), else as a call of the
    /// member, inside `CallbackScope`.
    @inline(__always)
    func deliverToC<Result>(record: (OpaquePointer?, CEventSink) -> Result,
                            call: (OpaquePointer?) -> Result) -> Result {
        let handle = OpaquePointer(bitPattern: cHandle.load(ordering: .relaxed))
        if let sink = CEventSink.current, callbackQueue === sink.queue {
            return record(handle, sink)
        }
        return CallbackScope.with(self, handle: handle) { call(handle) }
    }

    // MARK: Calls both kinds have

    static func perform(_ handle: OpaquePointer?,
                        _ function: (@convention(c) (UnsafePointer<sk_socket_descriptors_t>?, UnsafeMutableRawPointer?) -> Void)?,
                        _ context: UnsafeMutableRawPointer?) -> Int32 {
        withHandle(handle) { (socket) throws(SocketError) in
            guard let function else { throw badParam("function is NULL") }
            guard socket.eventLoop.isAcceptingTasks else { throw SocketError(.badConfig, "the socket's event loop has stopped") }
            let call = CValue((function, context))
            socket.perform { descriptors in
                var converted = sk_socket_descriptors_t(primary: descriptors.primary, ipv4: descriptors.ipv4,
                                                        ipv6: descriptors.ipv6, unix_domain: descriptors.unix)
                call.value.0(&converted, call.value.1)
            }
        }
    }

    static func connectedHost(_ handle: OpaquePointer?, _ buffer: UnsafeMutablePointer<CChar>?, _ capacity: Int) -> Int32 {
        answer(handle) { copyText($0.connectedHost, into: buffer, capacity: capacity) }
    }

    /// A port getter: the port of the address `address` gives, or SK_ERR_BAD_CONFIG with
    /// `missing` when there is none.
    static func port(_ handle: OpaquePointer?, _ outPort: UnsafeMutablePointer<UInt16>?, missing: String,
                     of address: (Self) throws(SocketError) -> SocketAddress?) -> Int32 {
        withHandle(handle) { (socket) throws(SocketError) in
            guard let found = try address(socket) else { throw SocketError(.badConfig, missing) }
            outPort?.pointee = found.port
        }
    }

    static func connectedAddress(_ handle: OpaquePointer?, _ address: UnsafeMutablePointer<sockaddr>?,
                                 _ length: UnsafeMutablePointer<socklen_t>?) -> Int32 {
        answer(handle) { copyAddress($0.connectedAddress, into: address, length: length) }
    }
}
