// SPDX-License-Identifier: MIT
import Glibc
import SocketKitC

/// Delivers a socket's events to a C `sk_socket_delegate_t` (a NULL member means "not
/// interested"): as calls, or as records for a poll of the socket's host-driven queue
/// (`CSocketObject.deliverToC` decides). Read data is passed as borrowed pointers: on the
/// `.eventLoop` queue straight from the loop's buffer, without a copy.
final class CSocketDelegateReceiver: SocketEventReceiver, @unchecked Sendable {
    let delegate: sk_socket_delegate_t
    let userdata: UnsafeMutableRawPointer?
    let interests: SocketEventInterests

    private init(_ delegate: sk_socket_delegate_t, userdata: UnsafeMutableRawPointer?) {
        self.delegate = delegate
        self.userdata = userdata
        var wanted: SocketEventInterests = []
        if delegate.did_read != nil { wanted.insert(.read) }
        if delegate.did_read_partial != nil { wanted.insert(.readPartial) }
        if delegate.did_write != nil { wanted.insert(.write) }
        if delegate.did_write_partial != nil { wanted.insert(.writePartial) }
        if delegate.did_reach_high_watermark != nil || delegate.did_drain_to_low_watermark != nil {
            wanted.insert(.watermarks)
        }
        interests = wanted
    }

    /// The receiver for the caller's struct (see `copyDelegate`), nil for a NULL delegate.
    static func make(_ delegate: UnsafePointer<sk_socket_delegate_t>?, size: Int,
                     userdata: UnsafeMutableRawPointer?) throws(SocketError) -> CSocketDelegateReceiver? {
        // The first published struct ended with did_disconnect (TLS came later).
        try copyDelegate(delegate, size: size, firstPublished: MemoryLayout<sk_socket_delegate_t>.offset(of: \.did_secure)!,
                         name: "sk_socket_delegate_t", empty: sk_socket_delegate_t())
            .map { CSocketDelegateReceiver($0, userdata: userdata) }
    }

    func receive(_ event: SocketEvent, on socket: Socket) -> Double {
        socket.deliverToC(record: { record(event, on: socket, handle: $0, into: $1) },
                          call: { call(event, on: socket, handle: $0) })
    }

    func receiverForAcceptedSocket() -> SocketEventReceiver? { self }

    func eventLoopForConnection(from address: SocketAddress, on listener: Socket) -> EventLoop? {
        guard let hook = delegate.new_socket_loop_for_connection else { return nil }
        let handle = OpaquePointer(bitPattern: listener.cHandle.load(ordering: .relaxed))
        let index = address.withSockAddr { hook(handle, $0, $1, userdata) }
        guard let loops = listener.eventLoop.group?.loops, index >= 0, Int(index) < loops.count else { return nil }
        return loops[Int(index)]
    }

    /// The handle of an accepted connection, owned by whoever takes it; nil without
    /// did_accept: as upstream, an accepted socket nobody takes closes.
    private func acceptedHandle(_ child: Socket) -> OpaquePointer? {
        delegate.did_accept == nil ? nil : child.publishHandle()
    }

    /// The text did_connect and SK_EVENT_CONNECT carry: the host, or the Unix path.
    private func connectedText(_ peer: SocketAddress) -> String {
        peer.family == .unix ? (peer.unixDisplayName ?? "") : (peer.host ?? "")
    }

    // MARK: Calls

    /// Calls the member for `event`; returns a timeout question's answer (else 0).
    private func call(_ event: SocketEvent, on socket: Socket, handle: OpaquePointer?) -> Double {
        switch event {
        case .didConnect(let peer, let proxied):
            guard let callback = delegate.did_connect else { return 0 }
            (proxied?.host ?? connectedText(peer)).withCString { callback(handle, $0, proxied?.port ?? peer.port, userdata) }
        case .didAccept:
            break
        case .didAcceptSocket(let child):
            if let childHandle = acceptedHandle(child) { delegate.did_accept?(handle, childHandle, userdata) }
        case .didNotAccept(let error):
            guard let callback = delegate.did_pause_accepting else { return 0 }
            withCError(error) { callback(handle, $0, userdata) }
        case .didRead(let payload, let tag):
            guard let callback = delegate.did_read else { return 0 }
            switch payload {
            case .borrowed(let bytes):
                callback(handle, bytes.baseAddress, bytes.count, tag, userdata)
            case .owned(let bytes):
                // Empty only for a read to a file: data NULL, as the header says.
                if bytes.isEmpty { callback(handle, nil, 0, tag, userdata); break }
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
            withOptionalCError(error) { callback(handle, $0, userdata) }
        case .didCancelRead(let tag, let unreadBytes):
            delegate.did_cancel_read?(handle, tag, unreadBytes, userdata)
        }
        return 0
    }

    // MARK: Records

    /// Records `event` (a member that is NULL: nothing, as a call would do nothing).
    /// Returns `.nan` for a recorded timeout: its answer comes with sk_socket_answer_timeout.
    func record(_ event: SocketEvent, on socket: Socket, handle: OpaquePointer?, into sink: CEventSink) -> Double {
        var record = sk_event_t()
        record.sock = handle
        record.userdata = userdata
        var answerLater = false
        func timeout(_ kind: sk_event_kind_t, _ tag: Int, _ elapsed: Double, _ bytesDone: Int, _ question: UInt64) {
            record.kind = Int32(kind.rawValue)
            record.tag = tag
            record.elapsed = elapsed
            record.length = bytesDone
            record.token = question
            answerLater = true
        }
        switch event {
        case .didConnect(let peer, let proxied):
            guard delegate.did_connect != nil else { return 0 }
            record.kind = Int32(SK_EVENT_CONNECT.rawValue)
            record.host = sink.keep(proxied?.host ?? connectedText(peer))
            record.port = proxied?.port ?? peer.port
        case .didAccept:
            return 0
        case .didAcceptSocket(let child):
            guard let childHandle = acceptedHandle(child) else { return 0 }
            record.kind = Int32(SK_EVENT_ACCEPT.rawValue)
            record.new_socket = childHandle
        case .didNotAccept(let error):
            guard delegate.did_pause_accepting != nil else { return 0 }
            record.kind = Int32(SK_EVENT_PAUSE_ACCEPTING.rawValue)
            record.error = sink.keep(error)
        case .didRead(let payload, let tag):
            guard delegate.did_read != nil else { return 0 }
            record.kind = Int32(SK_EVENT_READ.rawValue)
            record.tag = tag
            switch payload {
            case .borrowed(let bytes):
                record.data = bytes.isEmpty ? nil : sink.keep(Array(bytes))
                record.length = bytes.count
            case .owned(let bytes):
                record.data = bytes.isEmpty ? nil : sink.keep(bytes)
                record.length = bytes.count
            case .callerBuffer(let buffer, let range):
                record.data = UnsafeRawPointer(buffer.baseAddress.map { $0 + range.lowerBound })
                record.length = range.count
            }
        case .didReadPartial(let length, let tag):
            guard delegate.did_read_partial != nil else { return 0 }
            record.kind = Int32(SK_EVENT_READ_PARTIAL.rawValue)
            record.length = length
            record.tag = tag
        case .shouldTimeoutRead(let tag, let elapsed, let bytesDone, let question):
            guard delegate.should_timeout_read != nil else { return 0 }
            timeout(SK_EVENT_READ_TIMEOUT, tag, elapsed, bytesDone, question)
        case .didWrite(let tag):
            guard delegate.did_write != nil else { return 0 }
            record.kind = Int32(SK_EVENT_WRITE.rawValue)
            record.tag = tag
        case .didWritePartial(let length, let tag):
            guard delegate.did_write_partial != nil else { return 0 }
            record.kind = Int32(SK_EVENT_WRITE_PARTIAL.rawValue)
            record.length = length
            record.tag = tag
        case .shouldTimeoutWrite(let tag, let elapsed, let bytesDone, let question):
            guard delegate.should_timeout_write != nil else { return 0 }
            timeout(SK_EVENT_WRITE_TIMEOUT, tag, elapsed, bytesDone, question)
        case .didSecure:
            guard delegate.did_secure != nil else { return 0 }
            record.kind = Int32(SK_EVENT_SECURE.rawValue)
        case .didReceiveTrust(let trust, let question):
            guard delegate.did_receive_trust != nil else {
                socket.answerTrust(question: question, accept: false)
                return 0
            }
            record.kind = Int32(SK_EVENT_TRUST.rawValue)
            record.token = question
            record.trust = UnsafePointer(sink.keep(CTrust(trust, token: question)).trust)
        case .didCloseReadStream:
            guard delegate.did_close_read_stream != nil else { return 0 }
            record.kind = Int32(SK_EVENT_CLOSE_READ_STREAM.rawValue)
        case .didReachWriteHighWatermark(let queued):
            guard delegate.did_reach_high_watermark != nil else { return 0 }
            record.kind = Int32(SK_EVENT_HIGH_WATERMARK.rawValue)
            record.length = queued
        case .didDrainToWriteLowWatermark(let queued):
            guard delegate.did_drain_to_low_watermark != nil else { return 0 }
            record.kind = Int32(SK_EVENT_LOW_WATERMARK.rawValue)
            record.length = queued
        case .didDisconnect(let error):
            guard delegate.did_disconnect != nil else { return 0 }
            record.kind = Int32(SK_EVENT_DISCONNECT.rawValue)
            record.error = error.map { sink.keep($0) }
        case .didCancelRead(let tag, let unreadBytes):
            guard delegate.did_cancel_read != nil else { return 0 }
            record.kind = Int32(SK_EVENT_CANCEL_READ.rawValue)
            record.tag = tag
            record.length = unreadBytes
        }
        sink.append(record)
        return answerLater ? .nan : 0
    }
}
