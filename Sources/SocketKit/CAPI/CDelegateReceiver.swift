import Glibc
import SocketKitC

/// Delivers a socket's events to a C `sk_socket_delegate_t` (a NULL member means "not
/// interested"). Read data is passed as borrowed pointers: on the `.eventLoop` queue straight
/// from the loop's buffer, without a copy.
final class CDelegateReceiver: SocketEventReceiver, @unchecked Sendable {
    let delegate: sk_socket_delegate_t
    let userdata: UnsafeMutableRawPointer?

    /// Copies the caller's struct (its size checked by `checkDelegateSize`): members beyond
    /// `size` (an older header) stay NULL.
    init(delegate source: UnsafePointer<sk_socket_delegate_t>, size: Int, userdata: UnsafeMutableRawPointer?) {
        let copy = copyDelegateStruct(source, size: size, into: sk_socket_delegate_t())
        delegate = copy
        self.userdata = userdata
        var wanted: SocketEventInterests = []
        if copy.did_read != nil { wanted.insert(.read) }
        if copy.did_read_partial != nil { wanted.insert(.readPartial) }
        if copy.did_write != nil { wanted.insert(.write) }
        if copy.did_write_partial != nil { wanted.insert(.writePartial) }
        if copy.did_reach_high_watermark != nil || copy.did_drain_to_low_watermark != nil { wanted.insert(.watermarks) }
        interests = wanted
    }

    let interests: SocketEventInterests

    static func make(_ delegate: UnsafePointer<sk_socket_delegate_t>?, size: Int,
                     userdata: UnsafeMutableRawPointer?) throws(SocketError) -> CDelegateReceiver? {
        guard let delegate else { return nil }
        // The first published struct ended with did_disconnect (TLS came later).
        try checkDelegateSize(delegate, size: size,
                              firstPublished: MemoryLayout<sk_socket_delegate_t>.offset(of: \.did_secure)!,
                              name: "sk_socket_delegate_t")
        return CDelegateReceiver(delegate: delegate, size: size, userdata: userdata)
    }

    func receive(_ event: SocketEvent, on socket: Socket) -> Double {
        let handle = OpaquePointer(bitPattern: socket.cHandle.load(ordering: .relaxed))
        if let sink = sink(for: socket) {
            return record(event, on: socket, handle: handle, into: sink)
        }
        return CallbackScope.with(socket, handle: handle, kind: CallbackScope.socketKind) {
            deliver(event, on: socket, handle: handle)
        }
    }

    private func deliver(_ event: SocketEvent, on socket: Socket, handle: OpaquePointer?) -> Double {
        switch event {
        case .didConnect(let peer):
            guard let callback = delegate.did_connect else { return 0 }
            let host = peer.family == .unix ? (peer.unixPath ?? "") : (peer.host ?? "")
            host.withCString { callback(handle, $0, peer.port, userdata) }
        case .didAccept:
            break
        case .didAcceptSocket(let child):
            let childHandle = HandleRegistry.shared.register(child, kind: .socket)
            child.cHandle.store(UInt(bitPattern: Int(bitPattern: UnsafeRawPointer(childHandle))), ordering: .relaxed)
            if let callback = delegate.did_accept {
                callback(handle, childHandle, userdata)
            } else {
                // Nobody takes it: as upstream, an unowned accepted socket closes.
                _ = HandleRegistry.shared.remove(childHandle, .socket)
            }
        case .didNotAccept(let error):
            guard let callback = delegate.did_pause_accepting else { return 0 }
            withCError(error) { callback(handle, $0, userdata) }
        case .didRead(let payload, let tag):
            guard let callback = delegate.did_read else { return 0 }
            switch payload {
            case .borrowed(let bytes):
                callback(handle, bytes.baseAddress, bytes.count, tag, userdata)
            case .owned(let bytes):
                bytes.withUnsafeBytes { callback(handle, $0.baseAddress, $0.count, tag, userdata) }
            case .callerBuffer(let buffer, let range):
                callback(handle, buffer.baseAddress.map { $0 + range.lowerBound }, range.count, tag, userdata)
            }
        case .didReadPartial(let length, let tag):
            delegate.did_read_partial?(handle, length, tag, userdata)
        case .shouldTimeoutRead(let tag, let elapsed, let bytesDone, _):
            return timeoutAnswer(delegate.should_timeout_read?(handle, tag, elapsed, bytesDone, userdata) ?? 0)
        case .didWrite(let tag):
            delegate.did_write?(handle, tag, userdata)
        case .didWritePartial(let length, let tag):
            delegate.did_write_partial?(handle, length, tag, userdata)
        case .shouldTimeoutWrite(let tag, let elapsed, let bytesDone, _):
            return timeoutAnswer(delegate.should_timeout_write?(handle, tag, elapsed, bytesDone, userdata) ?? 0)
        case .didCloseReadStream:
            delegate.did_close_read_stream?(handle, userdata)
        case .didSecure:
            delegate.did_secure?(handle, userdata)
        case .didReceiveTrust(let trust, let question):
            guard let callback = delegate.did_receive_trust else {
                socket.answerTrust(question: question, accept: false)
                return 0
            }
            let converted = CTrust(trust, token: question)
            withExtendedLifetime(converted) { callback(handle, converted.trust, userdata) }
        case .didReachWriteHighWatermark(let queued):
            delegate.did_reach_high_watermark?(handle, queued, userdata)
        case .didDrainToWriteLowWatermark(let queued):
            delegate.did_drain_to_low_watermark?(handle, queued, userdata)
        case .didDisconnect(let error):
            guard let callback = delegate.did_disconnect else { return 0 }
            if let error {
                withCError(error) { callback(handle, $0, userdata) }
            } else {
                callback(handle, nil, userdata)
            }
        }
        return 0
    }

    func receiverForAcceptedSocket() -> SocketEventReceiver? { self }

    func eventLoopForConnection(from address: SocketAddress, on listener: Socket) -> EventLoop? {
        guard let hook = delegate.new_socket_loop_for_connection else { return nil }
        let handle = OpaquePointer(bitPattern: listener.cHandle.load(ordering: .relaxed))
        let index = address.withSockAddr { hook(handle, $0, $1, userdata) }
        guard let loops = listener.eventLoop.group?.loops, index >= 0, Int(index) < loops.count else { return nil }
        return loops[Int(index)]
    }
}

/// The delegate_size rule (socketkit.h, ABI), as the kernel checks its extensible structs
/// (openat2, clone3): a whole number of members, at least the struct's first published
/// version (an older header: the members it lacks read as NULL), and beyond the members
/// this library knows (a newer header) only NULL ones, since a set member we do not know
/// would never be called. At most 64 KiB is read.
func checkDelegateSize<Delegate>(_ delegate: UnsafePointer<Delegate>, size: Int, firstPublished: Int,
                                 name: String) throws(SocketError) {
    let member = MemoryLayout<UnsafeRawPointer>.size
    let known = MemoryLayout<Delegate>.size
    guard size >= firstPublished, size % member == 0, size <= 64 * 1024 else {
        throw badParam("delegate_size \(size) is not the size of a \(name) (pass sizeof(\(name)); "
                       + "\(firstPublished)...\(known) bytes are known to this library)")
    }
    guard size > known else { return }
    let unknown = UnsafeRawBufferPointer(start: UnsafeRawPointer(delegate) + known, count: size - known)
    if let set = unknown.firstIndex(where: { $0 != 0 }) {
        throw badParam("member \((known + set) / member) of \(name) is set, and this library is older than the header "
                       + "that has it: it would never be called (update the library, or leave the member NULL)")
    }
}

/// The caller's delegate struct copied over `empty` (its size checked by
/// `checkDelegateSize`): members beyond `size` (an older header) stay NULL, and the NULL
/// members beyond ours (a newer header) are not read.
func copyDelegateStruct<Delegate>(_ source: UnsafePointer<Delegate>, size: Int, into empty: Delegate) -> Delegate {
    var copy = empty
    withUnsafeMutableBytes(of: &copy) { destination in
        destination.copyMemory(from: UnsafeRawBufferPointer(start: source, count: min(size, MemoryLayout<Delegate>.size)))
    }
    return copy
}

/// Calls `body` with a C copy of `error`, valid for the call.
func withCError<Result>(_ error: SocketError, _ body: (UnsafePointer<sk_error_t>) -> Result) -> Result {
    var converted = sk_error_t()
    fill(&converted, with: error)
    return body(&converted)
}
