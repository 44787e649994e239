// SPDX-License-Identifier: MIT
import Glibc
import SocketKitC

/// A receive filter's context from C: an opaque pointer handed back to did_receive.
struct CFilterContext: @unchecked Sendable {
    let pointer: UnsafeMutableRawPointer?
}

/// Delivers a UDP socket's events to a C `sk_udp_socket_delegate_t`: as calls, or as
/// records for a poll of the socket's host-driven queue (`CSocketObject.deliverToC`).
final class CUdpSocketDelegateReceiver: UdpSocketEventReceiver, @unchecked Sendable {
    let delegate: sk_udp_socket_delegate_t
    let userdata: UnsafeMutableRawPointer?

    private init(_ delegate: sk_udp_socket_delegate_t, userdata: UnsafeMutableRawPointer?) {
        self.delegate = delegate
        self.userdata = userdata
    }

    /// The receiver for the caller's struct (see `copyDelegate`), nil for a NULL delegate.
    static func make(_ delegate: UnsafePointer<sk_udp_socket_delegate_t>?, size: Int,
                     userdata: UnsafeMutableRawPointer?) throws(SocketError) -> CUdpSocketDelegateReceiver? {
        // The first published version ended with did_close.
        try copyDelegate(delegate, size: size,
                         firstPublished: MemoryLayout<sk_udp_socket_delegate_t>.offset(of: \.did_receive_with_packet_info)!,
                         name: "sk_udp_socket_delegate_t", empty: sk_udp_socket_delegate_t())
            .map { CUdpSocketDelegateReceiver($0, userdata: userdata) }
    }

    override var wantsSendCompletions: Bool { delegate.did_send != nil }

    /// The receive fast path: the kernel's address goes to did_receive as it is. No
    /// CEventSink check: this runs only for a socket whose callbacks run on its loop, and a
    /// sink belongs to a poll of a host-driven queue.
    override func receiveDatagram(_ bytes: UnsafeRawBufferPointer, from name: UnsafeRawPointer, length: socklen_t,
                                  on socket: UdpSocket) {
        guard let callback = delegate.did_receive else { return }
        let handle = OpaquePointer(bitPattern: socket.cHandle.load(ordering: .relaxed))
        CallbackScope.with(socket, handle: handle) {
            callback(handle, bytes.baseAddress, bytes.count, name.assumingMemoryBound(to: sockaddr.self), length, nil, userdata)
        }
    }

    override func receive(_ event: UdpSocketEvent, on socket: UdpSocket) {
        socket.deliverToC(record: { record(event, handle: $0, into: $1) }, call: { call(event, handle: $0) })
    }

    // MARK: Calls

    private func call(_ event: UdpSocketEvent, handle: OpaquePointer?) {
        switch event {
        case .didConnect(let address):
            guard let callback = delegate.did_connect else { return }
            address.withSockAddr { callback(handle, $0, $1, userdata) }
        case .didNotConnect(let error):
            guard let callback = delegate.did_not_connect else { return }
            withCError(error) { callback(handle, $0, userdata) }
        case .didSend(let tag):
            delegate.did_send?(handle, tag, userdata)
        case .didNotSend(let tag, let error):
            guard let callback = delegate.did_not_send else { return }
            withCError(error) { callback(handle, tag, $0, userdata) }
        case .didReceive(let payload, let address, let context):
            guard let callback = delegate.did_receive else { return }
            let pointer = (context as? CFilterContext)?.pointer
            payload.withBytes { bytes in
                address.withSockAddr { callback(handle, bytes.baseAddress, bytes.count, $0, $1, pointer, userdata) }
            }
        case .didReceiveWithPacketInfo(let payload, let address, let context, let info):
            guard let callback = delegate.did_receive_with_packet_info else {
                call(.didReceive(payload, from: address, context: context), handle: handle)
                return
            }
            let pointer = (context as? CFilterContext)?.pointer
            var converted = info.cValue
            payload.withBytes { bytes in
                address.withSockAddr { callback(handle, bytes.baseAddress, bytes.count, $0, $1, &converted, pointer, userdata) }
            }
        case .didReceiveError(let error):
            guard let callback = delegate.did_receive_error else { return }
            withCError(error) { callback(handle, $0, userdata) }
        case .didClose(let error):
            guard let callback = delegate.did_close else { return }
            withOptionalCError(error) { callback(handle, $0, userdata) }
        }
    }

    // MARK: Records

    /// Records `event` (a member that is NULL: nothing, as a call would do nothing).
    func record(_ event: UdpSocketEvent, handle: OpaquePointer?, into sink: CEventSink) {
        var record = sk_event_t()
        record.udp_sock = handle
        record.userdata = userdata
        func fillAddress(_ address: SocketAddress) {
            let kept = sink.keep(address.bytes)
            record.address = kept?.assumingMemoryBound(to: sockaddr.self)
            record.address_length = socklen_t(address.bytes.count)
            record.host = sink.keep(address.host ?? "")
            record.port = address.port
        }
        func fillDatagram(_ payload: DatagramPayload, _ address: SocketAddress, _ context: (any Sendable)?) {
            let bytes = payload.array
            record.data = sink.keep(bytes)
            record.length = bytes.count
            record.context = (context as? CFilterContext)?.pointer
            fillAddress(address)
        }
        switch event {
        case .didConnect(let address):
            guard delegate.did_connect != nil else { return }
            record.kind = Int32(SK_EVENT_UDP_CONNECT.rawValue)
            fillAddress(address)
        case .didNotConnect(let error):
            guard delegate.did_not_connect != nil else { return }
            record.kind = Int32(SK_EVENT_UDP_NOT_CONNECT.rawValue)
            record.error = sink.keep(error)
        case .didSend(let tag):
            guard delegate.did_send != nil else { return }
            record.kind = Int32(SK_EVENT_UDP_SEND.rawValue)
            record.tag = tag
        case .didNotSend(let tag, let error):
            guard delegate.did_not_send != nil else { return }
            record.kind = Int32(SK_EVENT_UDP_NOT_SEND.rawValue)
            record.tag = tag
            record.error = sink.keep(error)
        case .didReceive(let payload, let address, let context):
            guard delegate.did_receive != nil else { return }
            record.kind = Int32(SK_EVENT_UDP_RECEIVE.rawValue)
            fillDatagram(payload, address, context)
        case .didReceiveWithPacketInfo(let payload, let address, let context, let info):
            guard delegate.did_receive_with_packet_info != nil else {
                self.record(.didReceive(payload, from: address, context: context), handle: handle, into: sink)
                return
            }
            record.kind = Int32(SK_EVENT_UDP_RECEIVE_PACKET_INFO.rawValue)
            fillDatagram(payload, address, context)
            // sk_udp_event_packet_info reads the kept struct back from the token.
            let converted = withUnsafeBytes(of: info.cValue) { Array($0) }
            record.token = UInt64(UInt(bitPattern: sink.keep(converted)))
        case .didReceiveError(let error):
            guard delegate.did_receive_error != nil else { return }
            record.kind = Int32(SK_EVENT_UDP_RECEIVE_ERROR.rawValue)
            record.error = sink.keep(error)
        case .didClose(let error):
            guard delegate.did_close != nil else { return }
            record.kind = Int32(SK_EVENT_UDP_CLOSE.rawValue)
            record.error = error.map { sink.keep($0) }
        }
        sink.append(record)
    }
}

extension UdpPacketInfo {
    /// The C struct (sk_udp_packet_info_t).
    var cValue: sk_udp_packet_info_t {
        var converted = sk_udp_packet_info_t()
        let bytes = destination.bytes
        withUnsafeMutableBytes(of: &converted.destination) { target in
            target.copyBytes(from: bytes.prefix(target.count))
        }
        converted.destination_length = socklen_t(min(bytes.count, MemoryLayout<sockaddr_storage>.size))
        converted.interface_index = interfaceIndex
        return converted
    }
}
