import Glibc
import SocketKitC

// The sk_udp_socket_* functions: validating wrappers over `UdpSocket`, its C delegate and
// its event records.

/// A receive filter's context from C: an opaque pointer handed back to did_receive.
struct CFilterContext: @unchecked Sendable {
    let pointer: UnsafeMutableRawPointer?
}

/// Delivers a UDP socket's events to a C `sk_udp_socket_delegate_t`, or records them when a
/// poll of its host-driven queue runs on this thread.
final class CUdpDelegateReceiver: UdpSocketEventReceiver, @unchecked Sendable {
    let delegate: sk_udp_socket_delegate_t
    let userdata: UnsafeMutableRawPointer?

    init(delegate source: UnsafePointer<sk_udp_socket_delegate_t>, size: Int, userdata: UnsafeMutableRawPointer?) {
        delegate = copyDelegateStruct(source, size: size, into: sk_udp_socket_delegate_t())
        self.userdata = userdata
    }

    override var wantsSendCompletions: Bool { delegate.did_send != nil }

    /// The receive fast path: the kernel's address goes to did_receive as it is. No
    /// CEventSink check: this runs only for a socket whose callbacks run on its loop, and a
    /// sink belongs to a poll of a host-driven queue.
    override func receiveDatagram(_ bytes: UnsafeRawBufferPointer, from name: UnsafeRawPointer, length: socklen_t,
                                  on socket: UdpSocket) {
        guard let callback = delegate.did_receive else { return }
        let handle = OpaquePointer(bitPattern: socket.cHandle.load(ordering: .relaxed))
        CallbackScope.with(socket, handle: handle, kind: CallbackScope.udpSocketKind) {
            callback(handle, bytes.baseAddress, bytes.count, name.assumingMemoryBound(to: sockaddr.self), length, nil, userdata)
        }
    }

    static func make(_ delegate: UnsafePointer<sk_udp_socket_delegate_t>?, size: Int,
                     userdata: UnsafeMutableRawPointer?) throws(SocketError) -> CUdpDelegateReceiver? {
        guard let delegate else { return nil }
        // Published whole: every member was there from the first version.
        try checkDelegateSize(delegate, size: size, firstPublished: MemoryLayout<sk_udp_socket_delegate_t>.size,
                              name: "sk_udp_socket_delegate_t")
        return CUdpDelegateReceiver(delegate: delegate, size: size, userdata: userdata)
    }

    override func receive(_ event: UdpSocketEvent, on socket: UdpSocket) {
        let handle = OpaquePointer(bitPattern: socket.cHandle.load(ordering: .relaxed))
        if let sink = CEventSink.current, socket.callbackQueue === sink.queue {
            record(event, handle: handle, into: sink)
            return
        }
        CallbackScope.with(socket, handle: handle, kind: CallbackScope.udpSocketKind) { deliver(event, handle: handle) }
    }

    private func deliver(_ event: UdpSocketEvent, handle: OpaquePointer?) {
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
        case .didReceiveError(let error):
            guard let callback = delegate.did_receive_error else { return }
            withCError(error) { callback(handle, $0, userdata) }
        case .didClose(let error):
            guard let callback = delegate.did_close else { return }
            if let error {
                withCError(error) { callback(handle, $0, userdata) }
            } else {
                callback(handle, nil, userdata)
            }
        }
    }

    private func record(_ event: UdpSocketEvent, handle: OpaquePointer?, into sink: CEventSink) {
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
            let bytes = payload.array
            record.data = sink.keep(bytes)
            record.length = bytes.count
            record.context = (context as? CFilterContext)?.pointer
            fillAddress(address)
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

// MARK: Lookup

func lookupUdpSocket(_ handle: OpaquePointer?) throws(SocketError) -> UdpSocket {
    guard let socket = HandleRegistry.shared.lookup(handle, .udpSocket, as: UdpSocket.self) else {
        throw HandleRegistry.invalid(.udpSocket)
    }
    return socket
}

@inline(__always)
private func withUdp(_ handle: OpaquePointer?, _ error: UnsafeMutablePointer<sk_error_t>?,
                     _ body: (UdpSocket) throws(SocketError) -> Void) -> Int32 {
    if let current = CallbackScope.udpSocket(handle) {
        return RuntimeShortcuts.withUnretained(current) { socket in
            reporting(error) { () throws(SocketError) in try body(socket) }
        }
    }
    return reporting(error) { () throws(SocketError) in try body(try lookupUdpSocket(handle)) }
}

@inline(__always)
private func udpFlag(_ handle: OpaquePointer?, _ property: (UdpSocket) -> Bool) -> Int32 {
    guard let socket = try? lookupUdpSocket(handle) else { return SocketError.Code.invalidHandle.rawValue }
    return property(socket) ? 1 : 0
}

private func datagram(_ data: UnsafeRawPointer?, _ length: Int) throws(SocketError) -> DatagramBytes {
    DatagramBytes(copying: try datagramBytes(data, length))
}

/// The caller's datagram, validated, borrowed for the call.
private func datagramBytes(_ data: UnsafeRawPointer?, _ length: Int) throws(SocketError) -> UnsafeRawBufferPointer {
    guard length >= 0, length <= 65535 else { throw badParam("a UDP datagram holds at most 65,535 bytes; length is \(length)") }
    guard length == 0 || data != nil else { throw badParam("data is NULL") }
    return UnsafeRawBufferPointer(start: length == 0 ? nil : data, count: length)
}

private func udpFamily(_ family: Int32) throws(SocketError) -> SocketAddress.Family? {
    switch family {
    case AF_UNSPEC: return nil
    case AF_INET: return .ipv4
    case AF_INET6: return .ipv6
    default: throw badParam("family must be AF_UNSPEC, AF_INET or AF_INET6")
    }
}

private func localAddress(_ socket: UdpSocket, _ family: SocketAddress.Family?) -> SocketAddress? {
    switch family {
    case nil: return socket.localAddress
    case .ipv4?: return socket.localAddressIPv4
    default: return socket.localAddressIPv6
    }
}

// MARK: Lifetime

@_cdecl("sk_udp_socket_create")
public func sk_udp_socket_create(_ delegate: UnsafePointer<sk_udp_socket_delegate_t>?, _ delegateSize: Int,
                                 _ userdata: UnsafeMutableRawPointer?, _ queue: OpaquePointer?, _ group: OpaquePointer?,
                                 _ outSocket: UnsafeMutablePointer<OpaquePointer?>?,
                                 _ error: UnsafeMutablePointer<sk_error_t>?) -> Int32 {
    reporting(error) { () throws(SocketError) in
        guard let outSocket else { throw badParam("out_socket is NULL") }
        let receiver = try CUdpDelegateReceiver.make(delegate, size: delegateSize, userdata: userdata)
        let callbackQueue = try lookupQueue(queue)
        let loopGroup = try lookupGroup(group)
        let socket = UdpSocket(receiver: receiver, callbackQueue: callbackQueue, eventLoop: loopGroup?.next())
        socket.cFilterGuard = CallerBufferGuard(revoked: false)
        let handle = HandleRegistry.shared.register(socket, kind: .udpSocket)
        socket.cHandle.store(UInt(bitPattern: Int(bitPattern: UnsafeRawPointer(handle))), ordering: .relaxed)
        outSocket.pointee = handle
    }
}

@_cdecl("sk_udp_socket_release")
public func sk_udp_socket_release(_ handle: OpaquePointer?) -> Int32 {
    guard let socket = HandleRegistry.shared.remove(handle, .udpSocket) as? UdpSocket else {
        return SocketError.Code.invalidHandle.rawValue
    }
    socket.setReceiver(nil, callbackQueue: nil)
    socket.cFilterGuard?.revoke()
    // After the wait above: ends CallbackScope's fast path for this handle.
    socket.cHandle.store(0, ordering: .releasing)
    return 0
}

@_cdecl("sk_udp_socket_set_delegate")
public func sk_udp_socket_set_delegate(_ handle: OpaquePointer?, _ delegate: UnsafePointer<sk_udp_socket_delegate_t>?,
                                       _ delegateSize: Int, _ userdata: UnsafeMutableRawPointer?) -> Int32 {
    withUdp(handle, nil) { (socket) throws(SocketError) in
        socket.setReceiver(try CUdpDelegateReceiver.make(delegate, size: delegateSize, userdata: userdata),
                           callbackQueue: nil)
    }
}

@_cdecl("sk_udp_socket_set_callback_queue")
public func sk_udp_socket_set_callback_queue(_ handle: OpaquePointer?, _ queue: OpaquePointer?) -> Int32 {
    withUdp(handle, nil) { (socket) throws(SocketError) in socket.callbackQueue = try lookupQueue(queue) }
}

@_cdecl("sk_udp_socket_get_userdata")
public func sk_udp_socket_get_userdata(_ handle: OpaquePointer?,
                                       _ outUserdata: UnsafeMutablePointer<UnsafeMutableRawPointer?>?) -> Int32 {
    withUdp(handle, nil) { (socket) throws(SocketError) in
        outUserdata?.pointee = (socket.receiver as? CUdpDelegateReceiver)?.userdata
    }
}

// MARK: Configuration

@_cdecl("sk_udp_socket_set_ipv4_enabled")
public func sk_udp_socket_set_ipv4_enabled(_ handle: OpaquePointer?, _ enabled: Int32) -> Int32 {
    withUdp(handle, nil) { $0.isIPv4Enabled = enabled != 0 }
}

@_cdecl("sk_udp_socket_is_ipv4_enabled")
public func sk_udp_socket_is_ipv4_enabled(_ handle: OpaquePointer?) -> Int32 { udpFlag(handle) { $0.isIPv4Enabled } }

@_cdecl("sk_udp_socket_set_ipv6_enabled")
public func sk_udp_socket_set_ipv6_enabled(_ handle: OpaquePointer?, _ enabled: Int32) -> Int32 {
    withUdp(handle, nil) { $0.isIPv6Enabled = enabled != 0 }
}

@_cdecl("sk_udp_socket_is_ipv6_enabled")
public func sk_udp_socket_is_ipv6_enabled(_ handle: OpaquePointer?) -> Int32 { udpFlag(handle) { $0.isIPv6Enabled } }

@_cdecl("sk_udp_socket_set_address_preference")
public func sk_udp_socket_set_address_preference(_ handle: OpaquePointer?, _ preference: Int32) -> Int32 {
    withUdp(handle, nil) { (socket) throws(SocketError) in
        guard let value = UdpAddressPreference(rawValue: preference) else {
            throw badParam("preference must be SK_UDP_PREFER_NEUTRAL, _IPV4 or _IPV6")
        }
        socket.addressPreference = value
    }
}

@_cdecl("sk_udp_socket_get_address_preference")
public func sk_udp_socket_get_address_preference(_ handle: OpaquePointer?) -> Int32 {
    guard let socket = try? lookupUdpSocket(handle) else { return SocketError.Code.invalidHandle.rawValue }
    return socket.addressPreference.rawValue
}

@_cdecl("sk_udp_socket_set_max_receive_sizes")
public func sk_udp_socket_set_max_receive_sizes(_ handle: OpaquePointer?, _ ipv4: Int, _ ipv6: Int,
                                                _ error: UnsafeMutablePointer<sk_error_t>?) -> Int32 {
    withUdp(handle, error) { (socket) throws(SocketError) in
        guard (1...65535).contains(ipv4), (1...65535).contains(ipv6) else {
            throw badParam("receive sizes must be 1...65535")
        }
        socket.maxReceiveIPv4BufferSize = ipv4
        socket.maxReceiveIPv6BufferSize = ipv6
    }
}

@_cdecl("sk_udp_socket_get_max_receive_sizes")
public func sk_udp_socket_get_max_receive_sizes(_ handle: OpaquePointer?, _ outIPv4: UnsafeMutablePointer<Int>?,
                                                _ outIPv6: UnsafeMutablePointer<Int>?) -> Int32 {
    withUdp(handle, nil) { (socket) throws(SocketError) in
        outIPv4?.pointee = socket.maxReceiveIPv4BufferSize
        outIPv6?.pointee = socket.maxReceiveIPv6BufferSize
    }
}

@_cdecl("sk_udp_socket_set_buffer_sizes")
public func sk_udp_socket_set_buffer_sizes(_ handle: OpaquePointer?, _ sendSize: Int32, _ receiveSize: Int32,
                                           _ error: UnsafeMutablePointer<sk_error_t>?) -> Int32 {
    withUdp(handle, error) { (socket) throws(SocketError) in
        guard sendSize >= 0, receiveSize >= 0 else { throw badParam("buffer sizes must be 0 or more") }
        socket.maxSendBufferSize = Int(sendSize)
        socket.receiveBufferSize = Int(receiveSize)
    }
}

@_cdecl("sk_udp_socket_get_buffer_sizes")
public func sk_udp_socket_get_buffer_sizes(_ handle: OpaquePointer?, _ outSend: UnsafeMutablePointer<Int32>?,
                                           _ outReceive: UnsafeMutablePointer<Int32>?) -> Int32 {
    withUdp(handle, nil) { (socket) throws(SocketError) in
        outSend?.pointee = Int32(clamping: socket.maxSendBufferSize)
        outReceive?.pointee = Int32(clamping: socket.receiveBufferSize)
    }
}

// MARK: Binding and connecting

@_cdecl("sk_udp_socket_bind_to_port")
public func sk_udp_socket_bind_to_port(_ handle: OpaquePointer?, _ interface: UnsafePointer<CChar>?, _ port: UInt16,
                                       _ error: UnsafeMutablePointer<sk_error_t>?) -> Int32 {
    withUdp(handle, error) { (socket) throws(SocketError) in
        try socket.bind(toPort: port, interface: interface.map { String(cString: $0) })
    }
}

@_cdecl("sk_udp_socket_bind_to_address")
public func sk_udp_socket_bind_to_address(_ handle: OpaquePointer?, _ address: UnsafePointer<sockaddr>?,
                                          _ length: socklen_t, _ error: UnsafeMutablePointer<sk_error_t>?) -> Int32 {
    withUdp(handle, error) { (socket) throws(SocketError) in
        try socket.bind(toAddress: try socketAddress(address, length))
    }
}

@_cdecl("sk_udp_socket_connect_to_host")
public func sk_udp_socket_connect_to_host(_ handle: OpaquePointer?, _ host: UnsafePointer<CChar>?, _ port: UInt16,
                                          _ error: UnsafeMutablePointer<sk_error_t>?) -> Int32 {
    withUdp(handle, error) { (socket) throws(SocketError) in
        try socket.connect(toHost: try string(from: host, "host"), port: port)
    }
}

@_cdecl("sk_udp_socket_connect_to_address")
public func sk_udp_socket_connect_to_address(_ handle: OpaquePointer?, _ address: UnsafePointer<sockaddr>?,
                                             _ length: socklen_t, _ error: UnsafeMutablePointer<sk_error_t>?) -> Int32 {
    withUdp(handle, error) { (socket) throws(SocketError) in
        try socket.connect(toAddress: try socketAddress(address, length))
    }
}

// MARK: Sending

@_cdecl("sk_udp_socket_send")
public func sk_udp_socket_send(_ handle: OpaquePointer?, _ data: UnsafeRawPointer?, _ length: Int, _ timeout: Double,
                               _ tag: Int, _ error: UnsafeMutablePointer<sk_error_t>?) -> Int32 {
    withUdp(handle, error) { (socket) throws(SocketError) in
        try socket.send(borrowing: try datagramBytes(data, length), to: nil, timeout: timeout, tag: tag)
    }
}

@_cdecl("sk_udp_socket_send_to_host")
public func sk_udp_socket_send_to_host(_ handle: OpaquePointer?, _ data: UnsafeRawPointer?, _ length: Int,
                                       _ host: UnsafePointer<CChar>?, _ port: UInt16, _ timeout: Double, _ tag: Int,
                                       _ error: UnsafeMutablePointer<sk_error_t>?) -> Int32 {
    withUdp(handle, error) { (socket) throws(SocketError) in
        let name = try string(from: host, "host")
        guard !name.isEmpty else { throw badParam("empty host") }
        try socket.queue(try datagram(data, length), .host(name, port), timeout: timeout, tag: tag)
    }
}

@_cdecl("sk_udp_socket_send_to_address")
public func sk_udp_socket_send_to_address(_ handle: OpaquePointer?, _ data: UnsafeRawPointer?, _ length: Int,
                                          _ address: UnsafePointer<sockaddr>?, _ addressLength: socklen_t,
                                          _ timeout: Double, _ tag: Int,
                                          _ error: UnsafeMutablePointer<sk_error_t>?) -> Int32 {
    withUdp(handle, error) { (socket) throws(SocketError) in
        // The echo pattern (a send from did_receive, on the loop thread, arguments valid):
        // the address goes from the caller's sockaddr to the kernel without a SocketAddress.
        if let address, let family = ipFamily(address, addressLength), length >= 0, length <= 65535,
           length == 0 || data != nil, !timeout.isNaN, socket.eventLoop.inEventLoop,
           socket.core.sendImmediately(UnsafeRawBufferPointer(start: length == 0 ? nil : data, count: length),
                                       toUnconnected: address, length: addressLength, family: family,
                                       timeout: timeout, tag: tag) {
            return
        }
        let parsed = try socketAddress(address, addressLength)
        guard parsed.family != .unix else { throw badParam("UDP sends to IPv4 or IPv6 addresses") }
        try socket.send(borrowing: try datagramBytes(data, length), to: parsed, timeout: timeout, tag: tag)
    }
}

/// The family of a complete `sockaddr_in` or `sockaddr_in6` (what `SocketAddress(raw:)`
/// accepts as IPv4 or IPv6), or nil.
@inline(__always)
private func ipFamily(_ address: UnsafePointer<sockaddr>, _ length: socklen_t) -> SocketAddress.Family? {
    if length == socklen_t(MemoryLayout<sockaddr_in>.size) && Int32(address.pointee.sa_family) == AF_INET { return .ipv4 }
    if length == socklen_t(MemoryLayout<sockaddr_in6>.size) && Int32(address.pointee.sa_family) == AF_INET6 { return .ipv6 }
    return nil
}

private func filterQueue(_ queue: OpaquePointer?, asynchronous: Int32) throws(SocketError) -> CallbackQueue? {
    guard let queue else { return nil }
    guard asynchronous != 0 else { throw badParam("a synchronous filter runs on the socket's loop: pass no queue") }
    return try lookupQueue(queue)
}

@_cdecl("sk_udp_socket_set_send_filter")
public func sk_udp_socket_set_send_filter(_ handle: OpaquePointer?, _ filter: sk_udp_send_filter_fn?,
                                          _ filterUserdata: UnsafeMutableRawPointer?, _ queue: OpaquePointer?,
                                          _ asynchronous: Int32, _ error: UnsafeMutablePointer<sk_error_t>?) -> Int32 {
    withUdp(handle, error) { (socket) throws(SocketError) in
        let callbackQueue = try filterQueue(queue, asynchronous: asynchronous)
        guard let filter else {
            try socket.setSendFilter(nil)
            return
        }
        let call = CValue((filter, filterUserdata, socket.cHandle.load(ordering: .relaxed),
                           socket.cFilterGuard ?? CallerBufferGuard(revoked: false)))
        try socket.setSendFilter({ data, address, tag in
            var send = false
            call.value.3.write {
                send = data.withUnsafeBytes { bytes in
                    address.withSockAddr { pointer, length in
                        call.value.0(OpaquePointer(bitPattern: call.value.2), bytes.baseAddress, bytes.count,
                                     pointer, length, tag, call.value.1) != 0
                    }
                }
            }
            return send
        }, queue: callbackQueue, isAsynchronous: asynchronous != 0)
    }
}

@_cdecl("sk_udp_socket_set_receive_filter")
public func sk_udp_socket_set_receive_filter(_ handle: OpaquePointer?, _ filter: sk_udp_receive_filter_fn?,
                                             _ filterUserdata: UnsafeMutableRawPointer?, _ queue: OpaquePointer?,
                                             _ asynchronous: Int32, _ error: UnsafeMutablePointer<sk_error_t>?) -> Int32 {
    withUdp(handle, error) { (socket) throws(SocketError) in
        let callbackQueue = try filterQueue(queue, asynchronous: asynchronous)
        guard let filter else {
            try socket.setReceiveFilter(nil)
            return
        }
        let call = CValue((filter, filterUserdata, socket.cHandle.load(ordering: .relaxed),
                           socket.cFilterGuard ?? CallerBufferGuard(revoked: false)))
        try socket.setReceiveFilter({ data, address in
            var verdict = UdpReceiveFilterVerdict.drop
            call.value.3.write {
                var context: UnsafeMutableRawPointer? = nil
                let keep = data.withUnsafeBytes { bytes in
                    address.withSockAddr { pointer, length in
                        call.value.0(OpaquePointer(bitPattern: call.value.2), bytes.baseAddress, bytes.count,
                                     pointer, length, &context, call.value.1) != 0
                    }
                }
                if keep { verdict = .accept(context: CFilterContext(pointer: context)) }
            }
            return verdict
        }, queue: callbackQueue, isAsynchronous: asynchronous != 0)
    }
}

// MARK: Receiving

@_cdecl("sk_udp_socket_receive_once")
public func sk_udp_socket_receive_once(_ handle: OpaquePointer?, _ error: UnsafeMutablePointer<sk_error_t>?) -> Int32 {
    withUdp(handle, error) { (socket) throws(SocketError) in try socket.receiveOnce() }
}

@_cdecl("sk_udp_socket_begin_receiving")
public func sk_udp_socket_begin_receiving(_ handle: OpaquePointer?, _ error: UnsafeMutablePointer<sk_error_t>?) -> Int32 {
    withUdp(handle, error) { (socket) throws(SocketError) in try socket.beginReceiving() }
}

@_cdecl("sk_udp_socket_pause_receiving")
public func sk_udp_socket_pause_receiving(_ handle: OpaquePointer?) -> Int32 {
    withUdp(handle, nil) { $0.pauseReceiving() }
}

// MARK: Multicast, broadcast, reuse

private func text(_ pointer: UnsafePointer<CChar>?) -> String? { pointer.map { String(cString: $0) } }

@_cdecl("sk_udp_socket_join_multicast_group")
public func sk_udp_socket_join_multicast_group(_ handle: OpaquePointer?, _ group: UnsafePointer<CChar>?,
                                               _ interface: UnsafePointer<CChar>?,
                                               _ error: UnsafeMutablePointer<sk_error_t>?) -> Int32 {
    withUdp(handle, error) { (socket) throws(SocketError) in
        try socket.joinMulticastGroup(try string(from: group, "group"), onInterface: text(interface))
    }
}

@_cdecl("sk_udp_socket_leave_multicast_group")
public func sk_udp_socket_leave_multicast_group(_ handle: OpaquePointer?, _ group: UnsafePointer<CChar>?,
                                                _ interface: UnsafePointer<CChar>?,
                                                _ error: UnsafeMutablePointer<sk_error_t>?) -> Int32 {
    withUdp(handle, error) { (socket) throws(SocketError) in
        try socket.leaveMulticastGroup(try string(from: group, "group"), onInterface: text(interface))
    }
}

@_cdecl("sk_udp_socket_send_ipv4_multicast_on_interface")
public func sk_udp_socket_send_ipv4_multicast_on_interface(_ handle: OpaquePointer?, _ interface: UnsafePointer<CChar>?,
                                                           _ error: UnsafeMutablePointer<sk_error_t>?) -> Int32 {
    withUdp(handle, error) { (socket) throws(SocketError) in
        try socket.sendIPv4Multicast(onInterface: try string(from: interface, "interface"))
    }
}

@_cdecl("sk_udp_socket_send_ipv6_multicast_on_interface")
public func sk_udp_socket_send_ipv6_multicast_on_interface(_ handle: OpaquePointer?, _ interface: UnsafePointer<CChar>?,
                                                           _ error: UnsafeMutablePointer<sk_error_t>?) -> Int32 {
    withUdp(handle, error) { (socket) throws(SocketError) in
        try socket.sendIPv6Multicast(onInterface: try string(from: interface, "interface"))
    }
}

@_cdecl("sk_udp_socket_set_multicast_ttl")
public func sk_udp_socket_set_multicast_ttl(_ handle: OpaquePointer?, _ ttl: Int32,
                                            _ error: UnsafeMutablePointer<sk_error_t>?) -> Int32 {
    withUdp(handle, error) { (socket) throws(SocketError) in try socket.setMulticastTTL(Int(ttl)) }
}

@_cdecl("sk_udp_socket_set_multicast_loopback")
public func sk_udp_socket_set_multicast_loopback(_ handle: OpaquePointer?, _ enabled: Int32,
                                                 _ error: UnsafeMutablePointer<sk_error_t>?) -> Int32 {
    withUdp(handle, error) { (socket) throws(SocketError) in try socket.setMulticastLoopback(enabled != 0) }
}

@_cdecl("sk_udp_socket_enable_broadcast")
public func sk_udp_socket_enable_broadcast(_ handle: OpaquePointer?, _ enabled: Int32,
                                           _ error: UnsafeMutablePointer<sk_error_t>?) -> Int32 {
    withUdp(handle, error) { (socket) throws(SocketError) in try socket.enableBroadcast(enabled != 0) }
}

@_cdecl("sk_udp_socket_enable_reuse_port")
public func sk_udp_socket_enable_reuse_port(_ handle: OpaquePointer?, _ enabled: Int32,
                                            _ error: UnsafeMutablePointer<sk_error_t>?) -> Int32 {
    withUdp(handle, error) { (socket) throws(SocketError) in try socket.enableReusePort(enabled != 0) }
}

@_cdecl("sk_udp_socket_enable_reuse_address")
public func sk_udp_socket_enable_reuse_address(_ handle: OpaquePointer?, _ enabled: Int32,
                                               _ error: UnsafeMutablePointer<sk_error_t>?) -> Int32 {
    withUdp(handle, error) { (socket) throws(SocketError) in try socket.enableReuseAddress(enabled != 0) }
}

// MARK: Closing

@_cdecl("sk_udp_socket_close")
public func sk_udp_socket_close(_ handle: OpaquePointer?) -> Int32 {
    withUdp(handle, nil) { $0.close() }
}

@_cdecl("sk_udp_socket_close_after_sending")
public func sk_udp_socket_close_after_sending(_ handle: OpaquePointer?) -> Int32 {
    withUdp(handle, nil) { $0.closeAfterSending() }
}

// MARK: Diagnostics

@_cdecl("sk_udp_socket_get_local_host")
public func sk_udp_socket_get_local_host(_ handle: OpaquePointer?, _ family: Int32, _ buffer: UnsafeMutablePointer<CChar>?,
                                         _ capacity: Int) -> Int32 {
    guard let socket = try? lookupUdpSocket(handle) else { return SocketError.Code.invalidHandle.rawValue }
    let which: SocketAddress.Family?
    do { which = try udpFamily(family) } catch { return SocketError.Code.badParam.rawValue }
    return copyText(localAddress(socket, which)?.host, into: buffer, capacity: capacity)
}

@_cdecl("sk_udp_socket_get_local_port")
public func sk_udp_socket_get_local_port(_ handle: OpaquePointer?, _ family: Int32,
                                         _ outPort: UnsafeMutablePointer<UInt16>?) -> Int32 {
    withUdp(handle, nil) { (socket) throws(SocketError) in
        guard let address = localAddress(socket, try udpFamily(family)) else {
            throw SocketError(.badConfig, "no local address (not bound, connected or used yet)")
        }
        outPort?.pointee = address.port
    }
}

@_cdecl("sk_udp_socket_get_local_address")
public func sk_udp_socket_get_local_address(_ handle: OpaquePointer?, _ family: Int32,
                                            _ address: UnsafeMutablePointer<sockaddr>?,
                                            _ length: UnsafeMutablePointer<socklen_t>?) -> Int32 {
    guard let socket = try? lookupUdpSocket(handle) else { return SocketError.Code.invalidHandle.rawValue }
    let which: SocketAddress.Family?
    do { which = try udpFamily(family) } catch { return SocketError.Code.badParam.rawValue }
    return copyAddress(localAddress(socket, which), into: address, length: length)
}

@_cdecl("sk_udp_socket_get_connected_host")
public func sk_udp_socket_get_connected_host(_ handle: OpaquePointer?, _ buffer: UnsafeMutablePointer<CChar>?,
                                             _ capacity: Int) -> Int32 {
    guard let socket = try? lookupUdpSocket(handle) else { return SocketError.Code.invalidHandle.rawValue }
    return copyText(socket.connectedHost, into: buffer, capacity: capacity)
}

@_cdecl("sk_udp_socket_get_connected_port")
public func sk_udp_socket_get_connected_port(_ handle: OpaquePointer?, _ outPort: UnsafeMutablePointer<UInt16>?) -> Int32 {
    withUdp(handle, nil) { (socket) throws(SocketError) in
        guard let address = socket.connectedAddress else { throw SocketError(.badConfig, "not connected") }
        outPort?.pointee = address.port
    }
}

@_cdecl("sk_udp_socket_get_connected_address")
public func sk_udp_socket_get_connected_address(_ handle: OpaquePointer?, _ address: UnsafeMutablePointer<sockaddr>?,
                                                _ length: UnsafeMutablePointer<socklen_t>?) -> Int32 {
    guard let socket = try? lookupUdpSocket(handle) else { return SocketError.Code.invalidHandle.rawValue }
    return copyAddress(socket.connectedAddress, into: address, length: length)
}

@_cdecl("sk_udp_socket_is_connected")
public func sk_udp_socket_is_connected(_ handle: OpaquePointer?) -> Int32 { udpFlag(handle) { $0.isConnected } }

@_cdecl("sk_udp_socket_is_closed")
public func sk_udp_socket_is_closed(_ handle: OpaquePointer?) -> Int32 { udpFlag(handle) { $0.isClosed } }

@_cdecl("sk_udp_socket_is_ipv4")
public func sk_udp_socket_is_ipv4(_ handle: OpaquePointer?) -> Int32 { udpFlag(handle) { $0.isIPv4 } }

@_cdecl("sk_udp_socket_is_ipv6")
public func sk_udp_socket_is_ipv6(_ handle: OpaquePointer?) -> Int32 { udpFlag(handle) { $0.isIPv6 } }

@_cdecl("sk_udp_socket_perform")
public func sk_udp_socket_perform(_ handle: OpaquePointer?,
                                  _ function: (@convention(c) (UnsafePointer<sk_socket_descriptors_t>?, UnsafeMutableRawPointer?) -> Void)?,
                                  _ context: UnsafeMutableRawPointer?) -> Int32 {
    withUdp(handle, nil) { (socket) throws(SocketError) in
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
