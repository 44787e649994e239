// SPDX-License-Identifier: MIT
import Glibc
import SocketKitC

// The sk_udp_socket_* functions: validating wrappers over `UdpSocket`, through the handle
// layer both socket kinds share (`CSocketObject`).

extension UdpSocket: CSocketObject {
    static var handleKind: HandleRegistry.Kind { .udpSocket }

    var cUserdata: UnsafeMutableRawPointer? { (receiver as? CUdpSocketDelegateReceiver)?.userdata }

    func finishRelease() {
        // A filter call in progress is waited for; none starts afterwards.
        cFilterGuard?.revoke()
    }
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

/// A local host or address getter's answer from `body`, given the address of `family`
/// (AF_UNSPEC: either); SK_ERR_BAD_PARAM for another family.
private func withLocalAddress(_ handle: OpaquePointer?, _ family: Int32, _ body: (SocketAddress?) -> Int32) -> Int32 {
    UdpSocket.answer(handle) { socket in
        do throws(SocketError) {
            return body(localAddress(socket, try udpFamily(family)))
        } catch {
            return error.code.rawValue
        }
    }
}

// MARK: Lifetime

@_cdecl("sk_udp_socket_create")
public func sk_udp_socket_create(_ delegate: UnsafePointer<sk_udp_socket_delegate_t>?, _ delegateSize: Int,
                                 _ userdata: UnsafeMutableRawPointer?, _ queue: OpaquePointer?, _ group: OpaquePointer?,
                                 _ outSocket: UnsafeMutablePointer<OpaquePointer?>?,
                                 _ error: UnsafeMutablePointer<sk_error_t>?) -> Int32 {
    UdpSocket.create(outSocket, error, receiver: { () throws(SocketError) in
        try CUdpSocketDelegateReceiver.make(delegate, size: delegateSize, userdata: userdata)
    }, queue: queue, group: group, start: { $0.cFilterGuard = CallerBufferGuard(revoked: false) })
}

@_cdecl("sk_udp_socket_release")
public func sk_udp_socket_release(_ handle: OpaquePointer?) -> Int32 {
    UdpSocket.release(handle)
}

@_cdecl("sk_udp_socket_set_delegate")
public func sk_udp_socket_set_delegate(_ handle: OpaquePointer?, _ delegate: UnsafePointer<sk_udp_socket_delegate_t>?,
                                       _ delegateSize: Int, _ userdata: UnsafeMutableRawPointer?) -> Int32 {
    UdpSocket.setDelegate(handle) { () throws(SocketError) in
        try CUdpSocketDelegateReceiver.make(delegate, size: delegateSize, userdata: userdata)
    }
}

@_cdecl("sk_udp_socket_set_callback_queue")
public func sk_udp_socket_set_callback_queue(_ handle: OpaquePointer?, _ queue: OpaquePointer?) -> Int32 {
    UdpSocket.setCallbackQueue(handle, queue)
}

@_cdecl("sk_udp_socket_get_userdata")
public func sk_udp_socket_get_userdata(_ handle: OpaquePointer?,
                                       _ outUserdata: UnsafeMutablePointer<UnsafeMutableRawPointer?>?) -> Int32 {
    UdpSocket.userdata(handle, outUserdata)
}

// MARK: Configuration

@_cdecl("sk_udp_socket_set_ipv4_enabled")
public func sk_udp_socket_set_ipv4_enabled(_ handle: OpaquePointer?, _ enabled: Int32) -> Int32 {
    UdpSocket.withHandle(handle) { $0.isIPv4Enabled = enabled != 0 }
}

@_cdecl("sk_udp_socket_is_ipv4_enabled")
public func sk_udp_socket_is_ipv4_enabled(_ handle: OpaquePointer?) -> Int32 { UdpSocket.flag(handle) { $0.isIPv4Enabled } }

@_cdecl("sk_udp_socket_set_ipv6_enabled")
public func sk_udp_socket_set_ipv6_enabled(_ handle: OpaquePointer?, _ enabled: Int32) -> Int32 {
    UdpSocket.withHandle(handle) { $0.isIPv6Enabled = enabled != 0 }
}

@_cdecl("sk_udp_socket_is_ipv6_enabled")
public func sk_udp_socket_is_ipv6_enabled(_ handle: OpaquePointer?) -> Int32 { UdpSocket.flag(handle) { $0.isIPv6Enabled } }

@_cdecl("sk_udp_socket_set_address_preference")
public func sk_udp_socket_set_address_preference(_ handle: OpaquePointer?, _ preference: Int32) -> Int32 {
    UdpSocket.withHandle(handle) { (socket) throws(SocketError) in
        guard let value = UdpAddressPreference(rawValue: preference) else {
            throw badParam("preference must be SK_UDP_PREFER_NEUTRAL, _IPV4 or _IPV6")
        }
        socket.addressPreference = value
    }
}

@_cdecl("sk_udp_socket_get_address_preference")
public func sk_udp_socket_get_address_preference(_ handle: OpaquePointer?) -> Int32 {
    UdpSocket.answer(handle) { $0.addressPreference.rawValue }
}

@_cdecl("sk_udp_socket_set_max_receive_sizes")
public func sk_udp_socket_set_max_receive_sizes(_ handle: OpaquePointer?, _ ipv4: Int, _ ipv6: Int,
                                                _ error: UnsafeMutablePointer<sk_error_t>?) -> Int32 {
    UdpSocket.withHandle(handle, error) { (socket) throws(SocketError) in
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
    UdpSocket.withHandle(handle) { (socket) throws(SocketError) in
        outIPv4?.pointee = socket.maxReceiveIPv4BufferSize
        outIPv6?.pointee = socket.maxReceiveIPv6BufferSize
    }
}

@_cdecl("sk_udp_socket_set_buffer_sizes")
public func sk_udp_socket_set_buffer_sizes(_ handle: OpaquePointer?, _ sendSize: Int32, _ receiveSize: Int32,
                                           _ error: UnsafeMutablePointer<sk_error_t>?) -> Int32 {
    UdpSocket.withHandle(handle, error) { (socket) throws(SocketError) in
        guard sendSize >= 0, receiveSize >= 0 else { throw badParam("buffer sizes must be 0 or more") }
        socket.maxSendBufferSize = Int(sendSize)
        socket.receiveBufferSize = Int(receiveSize)
    }
}

@_cdecl("sk_udp_socket_get_buffer_sizes")
public func sk_udp_socket_get_buffer_sizes(_ handle: OpaquePointer?, _ outSend: UnsafeMutablePointer<Int32>?,
                                           _ outReceive: UnsafeMutablePointer<Int32>?) -> Int32 {
    UdpSocket.withHandle(handle) { (socket) throws(SocketError) in
        outSend?.pointee = Int32(clamping: socket.maxSendBufferSize)
        outReceive?.pointee = Int32(clamping: socket.receiveBufferSize)
    }
}

// MARK: Binding and connecting

@_cdecl("sk_udp_socket_bind_to_port")
public func sk_udp_socket_bind_to_port(_ handle: OpaquePointer?, _ interface: UnsafePointer<CChar>?, _ port: UInt16,
                                       _ error: UnsafeMutablePointer<sk_error_t>?) -> Int32 {
    UdpSocket.withHandle(handle, error) { (socket) throws(SocketError) in
        try socket.bind(toPort: port, interface: interface.map { String(cString: $0) })
    }
}

@_cdecl("sk_udp_socket_bind_to_address")
public func sk_udp_socket_bind_to_address(_ handle: OpaquePointer?, _ address: UnsafePointer<sockaddr>?,
                                          _ length: socklen_t, _ error: UnsafeMutablePointer<sk_error_t>?) -> Int32 {
    UdpSocket.withHandle(handle, error) { (socket) throws(SocketError) in
        try socket.bind(toAddress: try socketAddress(address, length))
    }
}

@_cdecl("sk_udp_socket_connect_to_host")
public func sk_udp_socket_connect_to_host(_ handle: OpaquePointer?, _ host: UnsafePointer<CChar>?, _ port: UInt16,
                                          _ error: UnsafeMutablePointer<sk_error_t>?) -> Int32 {
    UdpSocket.withHandle(handle, error) { (socket) throws(SocketError) in
        try socket.connect(toHost: try string(from: host, "host"), port: port)
    }
}

@_cdecl("sk_udp_socket_connect_to_address")
public func sk_udp_socket_connect_to_address(_ handle: OpaquePointer?, _ address: UnsafePointer<sockaddr>?,
                                             _ length: socklen_t, _ error: UnsafeMutablePointer<sk_error_t>?) -> Int32 {
    UdpSocket.withHandle(handle, error) { (socket) throws(SocketError) in
        try socket.connect(toAddress: try socketAddress(address, length))
    }
}

// MARK: Sending

@_cdecl("sk_udp_socket_send")
public func sk_udp_socket_send(_ handle: OpaquePointer?, _ data: UnsafeRawPointer?, _ length: Int, _ timeout: Double,
                               _ tag: Int, _ error: UnsafeMutablePointer<sk_error_t>?) -> Int32 {
    UdpSocket.withHandle(handle, error) { (socket) throws(SocketError) in
        try socket.send(borrowing: try datagramBytes(data, length), to: nil, timeout: timeout, tag: tag)
    }
}

@_cdecl("sk_udp_socket_send_to_host")
public func sk_udp_socket_send_to_host(_ handle: OpaquePointer?, _ data: UnsafeRawPointer?, _ length: Int,
                                       _ host: UnsafePointer<CChar>?, _ port: UInt16, _ timeout: Double, _ tag: Int,
                                       _ error: UnsafeMutablePointer<sk_error_t>?) -> Int32 {
    UdpSocket.withHandle(handle, error) { (socket) throws(SocketError) in
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
    UdpSocket.withHandle(handle, error) { (socket) throws(SocketError) in
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

/// A C filter as the socket runs it: given the socket's handle and the filter's userdata,
/// the datagram and its address borrowed for the call, under the socket's filter guard (a
/// release waits for a call in progress, and no call starts after it).
private struct CFilterCall<Filter>: @unchecked Sendable {
    let filter: Filter
    let userdata: UnsafeMutableRawPointer?
    let handle: UInt
    let filterGuard: CallerBufferGuard

    init(_ filter: Filter, userdata: UnsafeMutableRawPointer?, socket: UdpSocket) {
        self.filter = filter
        self.userdata = userdata
        handle = socket.cHandle.load(ordering: .relaxed)
        filterGuard = socket.cFilterGuard ?? CallerBufferGuard(revoked: false)
    }

    /// Whether `call` (the filter's C call) kept the datagram; false once released.
    func keeps(_ data: [UInt8], _ address: SocketAddress,
               _ call: (Filter, OpaquePointer?, UnsafeRawPointer?, Int, UnsafePointer<sockaddr>?, socklen_t) -> Int32) -> Bool {
        var kept = false
        filterGuard.access {
            kept = data.withUnsafeBytes { bytes in
                address.withSockAddr { call(filter, OpaquePointer(bitPattern: handle), bytes.baseAddress, bytes.count, $0, $1) != 0 }
            }
        }
        return kept
    }
}

/// sk_udp_socket_set_send_filter and _receive_filter: the queue checked, then `install`
/// given the filter (nil: none), the queue and whether the filter is asynchronous.
private func setFilter<Filter>(_ handle: OpaquePointer?, _ error: UnsafeMutablePointer<sk_error_t>?, _ filter: Filter?,
                               _ userdata: UnsafeMutableRawPointer?, _ queue: OpaquePointer?, _ asynchronous: Int32,
                               _ install: (UdpSocket, CFilterCall<Filter>?, CallbackQueue?, Bool) throws(SocketError) -> Void)
    -> Int32 {
    UdpSocket.withHandle(handle, error) { (socket) throws(SocketError) in
        var callbackQueue: CallbackQueue? = nil
        if let queue {
            guard asynchronous != 0 else { throw badParam("a synchronous filter runs on the socket's loop: pass no queue") }
            callbackQueue = try lookupQueue(queue)
        }
        try install(socket, filter.map { CFilterCall($0, userdata: userdata, socket: socket) }, callbackQueue, asynchronous != 0)
    }
}

@_cdecl("sk_udp_socket_set_send_filter")
public func sk_udp_socket_set_send_filter(_ handle: OpaquePointer?, _ filter: sk_udp_send_filter_fn?,
                                          _ filterUserdata: UnsafeMutableRawPointer?, _ queue: OpaquePointer?,
                                          _ asynchronous: Int32, _ error: UnsafeMutablePointer<sk_error_t>?) -> Int32 {
    setFilter(handle, error, filter, filterUserdata, queue, asynchronous) { (socket, call, queue, isAsynchronous) throws(SocketError) in
        let send = call.map { (call) -> UdpSendFilter in
            { data, address, tag in
                call.keeps(data, address) { filter, handle, bytes, count, name, length in
                    filter(handle, bytes, count, name, length, tag, call.userdata)
                }
            }
        }
        try socket.setSendFilter(send, queue: queue, isAsynchronous: isAsynchronous)
    }
}

@_cdecl("sk_udp_socket_set_receive_filter")
public func sk_udp_socket_set_receive_filter(_ handle: OpaquePointer?, _ filter: sk_udp_receive_filter_fn?,
                                             _ filterUserdata: UnsafeMutableRawPointer?, _ queue: OpaquePointer?,
                                             _ asynchronous: Int32, _ error: UnsafeMutablePointer<sk_error_t>?) -> Int32 {
    setFilter(handle, error, filter, filterUserdata, queue, asynchronous) { (socket, call, queue, isAsynchronous) throws(SocketError) in
        let receive = call.map { (call) -> UdpReceiveFilter in
            { data, address in
                var context: UnsafeMutableRawPointer? = nil
                let kept = call.keeps(data, address) { filter, handle, bytes, count, name, length in
                    filter(handle, bytes, count, name, length, &context, call.userdata)
                }
                return kept ? .accept(context: CFilterContext(pointer: context)) : .drop
            }
        }
        try socket.setReceiveFilter(receive, queue: queue, isAsynchronous: isAsynchronous)
    }
}

// MARK: Receiving

@_cdecl("sk_udp_socket_receive_once")
public func sk_udp_socket_receive_once(_ handle: OpaquePointer?, _ error: UnsafeMutablePointer<sk_error_t>?) -> Int32 {
    UdpSocket.withHandle(handle, error) { (socket) throws(SocketError) in try socket.receiveOnce() }
}

@_cdecl("sk_udp_socket_begin_receiving")
public func sk_udp_socket_begin_receiving(_ handle: OpaquePointer?, _ error: UnsafeMutablePointer<sk_error_t>?) -> Int32 {
    UdpSocket.withHandle(handle, error) { (socket) throws(SocketError) in try socket.beginReceiving() }
}

@_cdecl("sk_udp_socket_pause_receiving")
public func sk_udp_socket_pause_receiving(_ handle: OpaquePointer?) -> Int32 {
    UdpSocket.withHandle(handle) { $0.pauseReceiving() }
}

// MARK: Multicast, broadcast, reuse

@_cdecl("sk_udp_socket_join_multicast_group")
public func sk_udp_socket_join_multicast_group(_ handle: OpaquePointer?, _ group: UnsafePointer<CChar>?,
                                               _ interface: UnsafePointer<CChar>?,
                                               _ error: UnsafeMutablePointer<sk_error_t>?) -> Int32 {
    UdpSocket.withHandle(handle, error) { (socket) throws(SocketError) in
        try socket.joinMulticastGroup(try string(from: group, "group"), onInterface: optionalString(interface))
    }
}

@_cdecl("sk_udp_socket_set_receives_packet_info")
public func sk_udp_socket_set_receives_packet_info(_ handle: OpaquePointer?, _ enabled: Int32,
                                                   _ error: UnsafeMutablePointer<sk_error_t>?) -> Int32 {
    UdpSocket.withHandle(handle, error) { (socket) throws(SocketError) in try socket.setReceivesPacketInfo(enabled != 0) }
}

@_cdecl("sk_udp_socket_get_receives_packet_info")
public func sk_udp_socket_get_receives_packet_info(_ handle: OpaquePointer?) -> Int32 {
    UdpSocket.flag(handle) { $0.receivesPacketInfo }
}

@_cdecl("sk_udp_socket_set_send_segment_size")
public func sk_udp_socket_set_send_segment_size(_ handle: OpaquePointer?, _ size: Int,
                                                _ error: UnsafeMutablePointer<sk_error_t>?) -> Int32 {
    UdpSocket.withHandle(handle, error) { (socket) throws(SocketError) in try socket.setSendSegmentSize(size) }
}

@_cdecl("sk_udp_socket_get_send_segment_size")
public func sk_udp_socket_get_send_segment_size(_ handle: OpaquePointer?, _ size: UnsafeMutablePointer<Int>?) -> Int32 {
    UdpSocket.withHandle(handle) { socket in size?.pointee = socket.sendSegmentSize }
}

@_cdecl("sk_udp_socket_set_receive_offload")
public func sk_udp_socket_set_receive_offload(_ handle: OpaquePointer?, _ enabled: Int32,
                                              _ error: UnsafeMutablePointer<sk_error_t>?) -> Int32 {
    UdpSocket.withHandle(handle, error) { (socket) throws(SocketError) in try socket.setReceiveOffload(enabled != 0) }
}

@_cdecl("sk_udp_socket_get_receive_offload")
public func sk_udp_socket_get_receive_offload(_ handle: OpaquePointer?) -> Int32 {
    UdpSocket.flag(handle) { $0.receiveOffload }
}

@_cdecl("sk_udp_event_packet_info")
public func sk_udp_event_packet_info(_ event: UnsafePointer<sk_event_t>?) -> UnsafePointer<sk_udp_packet_info_t>? {
    guard let event, event.pointee.kind == Int32(SK_EVENT_UDP_RECEIVE_PACKET_INFO.rawValue) else { return nil }
    return UnsafePointer(bitPattern: UInt(event.pointee.token))
}

@_cdecl("sk_udp_socket_join_multicast_source")
public func sk_udp_socket_join_multicast_source(_ handle: OpaquePointer?, _ group: UnsafePointer<CChar>?,
                                                _ source: UnsafePointer<CChar>?, _ interface: UnsafePointer<CChar>?,
                                                _ error: UnsafeMutablePointer<sk_error_t>?) -> Int32 {
    UdpSocket.withHandle(handle, error) { (socket) throws(SocketError) in
        try socket.joinMulticastGroup(try string(from: group, "group"), source: try string(from: source, "source"),
                                      onInterface: optionalString(interface))
    }
}

@_cdecl("sk_udp_socket_leave_multicast_source")
public func sk_udp_socket_leave_multicast_source(_ handle: OpaquePointer?, _ group: UnsafePointer<CChar>?,
                                                 _ source: UnsafePointer<CChar>?, _ interface: UnsafePointer<CChar>?,
                                                 _ error: UnsafeMutablePointer<sk_error_t>?) -> Int32 {
    UdpSocket.withHandle(handle, error) { (socket) throws(SocketError) in
        try socket.leaveMulticastGroup(try string(from: group, "group"), source: try string(from: source, "source"),
                                       onInterface: optionalString(interface))
    }
}

@_cdecl("sk_udp_socket_leave_multicast_group")
public func sk_udp_socket_leave_multicast_group(_ handle: OpaquePointer?, _ group: UnsafePointer<CChar>?,
                                                _ interface: UnsafePointer<CChar>?,
                                                _ error: UnsafeMutablePointer<sk_error_t>?) -> Int32 {
    UdpSocket.withHandle(handle, error) { (socket) throws(SocketError) in
        try socket.leaveMulticastGroup(try string(from: group, "group"), onInterface: optionalString(interface))
    }
}

@_cdecl("sk_udp_socket_send_ipv4_multicast_on_interface")
public func sk_udp_socket_send_ipv4_multicast_on_interface(_ handle: OpaquePointer?, _ interface: UnsafePointer<CChar>?,
                                                           _ error: UnsafeMutablePointer<sk_error_t>?) -> Int32 {
    UdpSocket.withHandle(handle, error) { (socket) throws(SocketError) in
        try socket.sendIPv4Multicast(onInterface: try string(from: interface, "interface"))
    }
}

@_cdecl("sk_udp_socket_send_ipv6_multicast_on_interface")
public func sk_udp_socket_send_ipv6_multicast_on_interface(_ handle: OpaquePointer?, _ interface: UnsafePointer<CChar>?,
                                                           _ error: UnsafeMutablePointer<sk_error_t>?) -> Int32 {
    UdpSocket.withHandle(handle, error) { (socket) throws(SocketError) in
        try socket.sendIPv6Multicast(onInterface: try string(from: interface, "interface"))
    }
}

@_cdecl("sk_udp_socket_set_multicast_ttl")
public func sk_udp_socket_set_multicast_ttl(_ handle: OpaquePointer?, _ ttl: Int32,
                                            _ error: UnsafeMutablePointer<sk_error_t>?) -> Int32 {
    UdpSocket.withHandle(handle, error) { (socket) throws(SocketError) in try socket.setMulticastTTL(Int(ttl)) }
}

@_cdecl("sk_udp_socket_set_multicast_loopback")
public func sk_udp_socket_set_multicast_loopback(_ handle: OpaquePointer?, _ enabled: Int32,
                                                 _ error: UnsafeMutablePointer<sk_error_t>?) -> Int32 {
    UdpSocket.withHandle(handle, error) { (socket) throws(SocketError) in try socket.setMulticastLoopback(enabled != 0) }
}

@_cdecl("sk_udp_socket_enable_broadcast")
public func sk_udp_socket_enable_broadcast(_ handle: OpaquePointer?, _ enabled: Int32,
                                           _ error: UnsafeMutablePointer<sk_error_t>?) -> Int32 {
    UdpSocket.withHandle(handle, error) { (socket) throws(SocketError) in try socket.enableBroadcast(enabled != 0) }
}

@_cdecl("sk_udp_socket_enable_reuse_port")
public func sk_udp_socket_enable_reuse_port(_ handle: OpaquePointer?, _ enabled: Int32,
                                            _ error: UnsafeMutablePointer<sk_error_t>?) -> Int32 {
    UdpSocket.withHandle(handle, error) { (socket) throws(SocketError) in try socket.enableReusePort(enabled != 0) }
}

@_cdecl("sk_udp_socket_enable_reuse_address")
public func sk_udp_socket_enable_reuse_address(_ handle: OpaquePointer?, _ enabled: Int32,
                                               _ error: UnsafeMutablePointer<sk_error_t>?) -> Int32 {
    UdpSocket.withHandle(handle, error) { (socket) throws(SocketError) in try socket.enableReuseAddress(enabled != 0) }
}

// MARK: Closing

@_cdecl("sk_udp_socket_close")
public func sk_udp_socket_close(_ handle: OpaquePointer?) -> Int32 {
    UdpSocket.withHandle(handle) { $0.close() }
}

@_cdecl("sk_udp_socket_close_after_sending")
public func sk_udp_socket_close_after_sending(_ handle: OpaquePointer?) -> Int32 {
    UdpSocket.withHandle(handle) { $0.closeAfterSending() }
}

// MARK: Diagnostics

@_cdecl("sk_udp_socket_get_local_host")
public func sk_udp_socket_get_local_host(_ handle: OpaquePointer?, _ family: Int32, _ buffer: UnsafeMutablePointer<CChar>?,
                                         _ capacity: Int) -> Int32 {
    withLocalAddress(handle, family) { copyText($0?.host, into: buffer, capacity: capacity) }
}

@_cdecl("sk_udp_socket_get_local_port")
public func sk_udp_socket_get_local_port(_ handle: OpaquePointer?, _ family: Int32,
                                         _ outPort: UnsafeMutablePointer<UInt16>?) -> Int32 {
    UdpSocket.port(handle, outPort, missing: "no local address (not bound, connected or used yet)") {
        (socket) throws(SocketError) in localAddress(socket, try udpFamily(family))
    }
}

@_cdecl("sk_udp_socket_get_local_address")
public func sk_udp_socket_get_local_address(_ handle: OpaquePointer?, _ family: Int32,
                                            _ address: UnsafeMutablePointer<sockaddr>?,
                                            _ length: UnsafeMutablePointer<socklen_t>?) -> Int32 {
    withLocalAddress(handle, family) { copyAddress($0, into: address, length: length) }
}

@_cdecl("sk_udp_socket_get_connected_host")
public func sk_udp_socket_get_connected_host(_ handle: OpaquePointer?, _ buffer: UnsafeMutablePointer<CChar>?,
                                             _ capacity: Int) -> Int32 {
    UdpSocket.connectedHost(handle, buffer, capacity)
}

@_cdecl("sk_udp_socket_get_connected_port")
public func sk_udp_socket_get_connected_port(_ handle: OpaquePointer?, _ outPort: UnsafeMutablePointer<UInt16>?) -> Int32 {
    UdpSocket.port(handle, outPort, missing: "not connected") { $0.connectedAddress }
}

@_cdecl("sk_udp_socket_get_connected_address")
public func sk_udp_socket_get_connected_address(_ handle: OpaquePointer?, _ address: UnsafeMutablePointer<sockaddr>?,
                                                _ length: UnsafeMutablePointer<socklen_t>?) -> Int32 {
    UdpSocket.connectedAddress(handle, address, length)
}

@_cdecl("sk_udp_socket_is_connected")
public func sk_udp_socket_is_connected(_ handle: OpaquePointer?) -> Int32 { UdpSocket.flag(handle) { $0.isConnected } }

@_cdecl("sk_udp_socket_is_closed")
public func sk_udp_socket_is_closed(_ handle: OpaquePointer?) -> Int32 { UdpSocket.flag(handle) { $0.isClosed } }

@_cdecl("sk_udp_socket_is_ipv4")
public func sk_udp_socket_is_ipv4(_ handle: OpaquePointer?) -> Int32 { UdpSocket.flag(handle) { $0.isIPv4 } }

@_cdecl("sk_udp_socket_is_ipv6")
public func sk_udp_socket_is_ipv6(_ handle: OpaquePointer?) -> Int32 { UdpSocket.flag(handle) { $0.isIPv6 } }

@_cdecl("sk_udp_socket_perform")
public func sk_udp_socket_perform(_ handle: OpaquePointer?,
                                  _ function: (@convention(c) (UnsafePointer<sk_socket_descriptors_t>?, UnsafeMutableRawPointer?) -> Void)?,
                                  _ context: UnsafeMutableRawPointer?) -> Int32 {
    UdpSocket.perform(handle, function, context)
}
