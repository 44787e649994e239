// SPDX-License-Identifier: MIT
import Glibc
import SocketKitC

// The sk_socket_* functions: validating wrappers over `Socket`, through the handle layer
// both socket kinds share (`CSocketObject`).

extension Socket: CSocketObject {
    static var handleKind: HandleRegistry.Kind { .socket }

    var cUserdata: UnsafeMutableRawPointer? { (receiver as? CSocketDelegateReceiver)?.userdata }

    func finishRelease() {
        // The loop no longer writes into the caller's read buffers.
        revokeCallerBuffers()
        // A listener's descriptors are closed before release returns, as by sk_socket_disconnect.
        disconnectIfListening()
    }
}

// MARK: Lifetime

@_cdecl("sk_socket_create")
public func sk_socket_create(_ delegate: UnsafePointer<sk_socket_delegate_t>?, _ delegateSize: Int,
                             _ userdata: UnsafeMutableRawPointer?, _ queue: OpaquePointer?, _ group: OpaquePointer?,
                             _ outSocket: UnsafeMutablePointer<OpaquePointer?>?,
                             _ error: UnsafeMutablePointer<sk_error_t>?) -> Int32 {
    Socket.create(outSocket, error, receiver: { () throws(SocketError) in
        try CSocketDelegateReceiver.make(delegate, size: delegateSize, userdata: userdata)
    }, queue: queue, group: group)
}

@_cdecl("sk_socket_create_from_fd")
public func sk_socket_create_from_fd(_ fd: Int32, _ delegate: UnsafePointer<sk_socket_delegate_t>?, _ delegateSize: Int,
                                     _ userdata: UnsafeMutableRawPointer?, _ queue: OpaquePointer?, _ group: OpaquePointer?,
                                     _ outSocket: UnsafeMutablePointer<OpaquePointer?>?,
                                     _ error: UnsafeMutablePointer<sk_error_t>?) -> Int32 {
    Socket.create(outSocket, error, receiver: { () throws(SocketError) in
        try CSocketDelegateReceiver.make(delegate, size: delegateSize, userdata: userdata)
    }, queue: queue, group: group, start: { (socket) throws(SocketError) in try socket.adopt(fd) })
}

@_cdecl("sk_socket_release")
public func sk_socket_release(_ handle: OpaquePointer?) -> Int32 {
    Socket.release(handle)
}

@_cdecl("sk_socket_set_delegate")
public func sk_socket_set_delegate(_ handle: OpaquePointer?, _ delegate: UnsafePointer<sk_socket_delegate_t>?,
                                   _ delegateSize: Int, _ userdata: UnsafeMutableRawPointer?) -> Int32 {
    Socket.setDelegate(handle) { () throws(SocketError) in
        try CSocketDelegateReceiver.make(delegate, size: delegateSize, userdata: userdata)
    }
}

@_cdecl("sk_socket_set_callback_queue")
public func sk_socket_set_callback_queue(_ handle: OpaquePointer?, _ queue: OpaquePointer?) -> Int32 {
    Socket.setCallbackQueue(handle, queue)
}

@_cdecl("sk_socket_get_userdata")
public func sk_socket_get_userdata(_ handle: OpaquePointer?, _ outUserdata: UnsafeMutablePointer<UnsafeMutableRawPointer?>?) -> Int32 {
    Socket.userdata(handle, outUserdata)
}

// MARK: Configuration

@_cdecl("sk_socket_set_ipv4_enabled")
public func sk_socket_set_ipv4_enabled(_ handle: OpaquePointer?, _ enabled: Int32) -> Int32 {
    Socket.withHandle(handle) { $0.isIPv4Enabled = enabled != 0 }
}

@_cdecl("sk_socket_is_ipv4_enabled")
public func sk_socket_is_ipv4_enabled(_ handle: OpaquePointer?) -> Int32 { Socket.flag(handle) { $0.isIPv4Enabled } }

@_cdecl("sk_socket_set_ipv6_enabled")
public func sk_socket_set_ipv6_enabled(_ handle: OpaquePointer?, _ enabled: Int32) -> Int32 {
    Socket.withHandle(handle) { $0.isIPv6Enabled = enabled != 0 }
}

@_cdecl("sk_socket_is_ipv6_enabled")
public func sk_socket_is_ipv6_enabled(_ handle: OpaquePointer?) -> Int32 { Socket.flag(handle) { $0.isIPv6Enabled } }

@_cdecl("sk_socket_set_ipv4_preferred_over_ipv6")
public func sk_socket_set_ipv4_preferred_over_ipv6(_ handle: OpaquePointer?, _ preferred: Int32) -> Int32 {
    Socket.withHandle(handle) { $0.isIPv4PreferredOverIPv6 = preferred != 0 }
}

@_cdecl("sk_socket_is_ipv4_preferred_over_ipv6")
public func sk_socket_is_ipv4_preferred_over_ipv6(_ handle: OpaquePointer?) -> Int32 {
    Socket.flag(handle) { $0.isIPv4PreferredOverIPv6 }
}

@_cdecl("sk_socket_set_alternate_address_delay")
public func sk_socket_set_alternate_address_delay(_ handle: OpaquePointer?, _ seconds: Double) -> Int32 {
    Socket.withHandle(handle) { $0.alternateAddressDelay = seconds }
}

@_cdecl("sk_socket_get_alternate_address_delay")
public func sk_socket_get_alternate_address_delay(_ handle: OpaquePointer?, _ outSeconds: UnsafeMutablePointer<Double>?) -> Int32 {
    Socket.withHandle(handle) { (socket) throws(SocketError) in
        outSeconds?.pointee = socket.alternateAddressDelay
    }
}

@_cdecl("sk_socket_set_resolution_delay")
public func sk_socket_set_resolution_delay(_ handle: OpaquePointer?, _ seconds: Double) -> Int32 {
    Socket.withHandle(handle) { $0.resolutionDelay = seconds }
}

@_cdecl("sk_socket_get_resolution_delay")
public func sk_socket_get_resolution_delay(_ handle: OpaquePointer?, _ outSeconds: UnsafeMutablePointer<Double>?) -> Int32 {
    Socket.withHandle(handle) { (socket) throws(SocketError) in
        outSeconds?.pointee = socket.resolutionDelay
    }
}

@_cdecl("sk_socket_set_auto_disconnect_on_closed_read_stream")
public func sk_socket_set_auto_disconnect_on_closed_read_stream(_ handle: OpaquePointer?, _ enabled: Int32) -> Int32 {
    Socket.withHandle(handle) { $0.autoDisconnectOnClosedReadStream = enabled != 0 }
}

@_cdecl("sk_socket_get_auto_disconnect_on_closed_read_stream")
public func sk_socket_get_auto_disconnect_on_closed_read_stream(_ handle: OpaquePointer?) -> Int32 {
    Socket.flag(handle) { $0.autoDisconnectOnClosedReadStream }
}

@_cdecl("sk_socket_set_maximum_read_length")
public func sk_socket_set_maximum_read_length(_ handle: OpaquePointer?, _ length: Int) -> Int32 {
    Socket.withHandle(handle) { (socket) throws(SocketError) in
        try socket.setMaximumReadLength(try checkedLength(length, "length"))
    }
}

@_cdecl("sk_socket_get_maximum_read_length")
public func sk_socket_get_maximum_read_length(_ handle: OpaquePointer?, _ outLength: UnsafeMutablePointer<Int>?) -> Int32 {
    Socket.withHandle(handle) { (socket) throws(SocketError) in
        outLength?.pointee = socket.maximumReadLength
    }
}

@_cdecl("sk_socket_set_write_watermarks")
public func sk_socket_set_write_watermarks(_ handle: OpaquePointer?, _ low: Int, _ high: Int,
                                           _ error: UnsafeMutablePointer<sk_error_t>?) -> Int32 {
    Socket.withHandle(handle, error) { (socket) throws(SocketError) in
        try socket.setWriteWatermarks(low: try checkedLength(low, "low"), high: try checkedLength(high, "high"))
    }
}

@_cdecl("sk_socket_get_write_watermarks")
public func sk_socket_get_write_watermarks(_ handle: OpaquePointer?, _ outLow: UnsafeMutablePointer<Int>?,
                                           _ outHigh: UnsafeMutablePointer<Int>?) -> Int32 {
    Socket.withHandle(handle) { (socket) throws(SocketError) in
        let marks = socket.writeWatermarks
        outLow?.pointee = marks.low
        outHigh?.pointee = marks.high
    }
}

@_cdecl("sk_socket_set_maximum_queued_write_bytes")
public func sk_socket_set_maximum_queued_write_bytes(_ handle: OpaquePointer?, _ maximum: Int) -> Int32 {
    Socket.withHandle(handle) { (socket) throws(SocketError) in
        try socket.setMaximumQueuedWriteBytes(try checkedLength(maximum, "maximum"))
    }
}

@_cdecl("sk_socket_get_maximum_queued_write_bytes")
public func sk_socket_get_maximum_queued_write_bytes(_ handle: OpaquePointer?, _ outMaximum: UnsafeMutablePointer<Int>?) -> Int32 {
    Socket.withHandle(handle) { (socket) throws(SocketError) in
        outMaximum?.pointee = socket.maximumQueuedWriteBytes
    }
}

@_cdecl("sk_socket_set_no_delay")
public func sk_socket_set_no_delay(_ handle: OpaquePointer?, _ enabled: Int32) -> Int32 {
    Socket.withHandle(handle) { $0.noDelay = enabled != 0 }
}

@_cdecl("sk_socket_get_no_delay")
public func sk_socket_get_no_delay(_ handle: OpaquePointer?) -> Int32 { Socket.flag(handle) { $0.noDelay } }

@_cdecl("sk_socket_set_keep_alive")
public func sk_socket_set_keep_alive(_ handle: OpaquePointer?, _ enabled: Int32, _ idle: Int32, _ interval: Int32,
                                     _ count: Int32, _ error: UnsafeMutablePointer<sk_error_t>?) -> Int32 {
    Socket.withHandle(handle, error) { (socket) throws(SocketError) in
        try socket.setKeepAlive(enabled != 0 ? KeepAlive(idle: Int(idle), interval: Int(interval), count: Int(count)) : nil)
    }
}

@_cdecl("sk_socket_get_keep_alive")
public func sk_socket_get_keep_alive(_ handle: OpaquePointer?, _ outEnabled: UnsafeMutablePointer<Int32>?,
                                     _ outIdle: UnsafeMutablePointer<Int32>?, _ outInterval: UnsafeMutablePointer<Int32>?,
                                     _ outCount: UnsafeMutablePointer<Int32>?) -> Int32 {
    Socket.withHandle(handle) { (socket) throws(SocketError) in
        let keepAlive = socket.keepAlive
        outEnabled?.pointee = keepAlive == nil ? 0 : 1
        outIdle?.pointee = Int32(clamping: keepAlive?.idle ?? 0)
        outInterval?.pointee = Int32(clamping: keepAlive?.interval ?? 0)
        outCount?.pointee = Int32(clamping: keepAlive?.count ?? 0)
    }
}

@_cdecl("sk_socket_set_buffer_sizes")
public func sk_socket_set_buffer_sizes(_ handle: OpaquePointer?, _ sendSize: Int32, _ receiveSize: Int32,
                                       _ error: UnsafeMutablePointer<sk_error_t>?) -> Int32 {
    Socket.withHandle(handle, error) { (socket) throws(SocketError) in
        try socket.setBufferSizes(send: Int(sendSize), receive: Int(receiveSize))
    }
}

@_cdecl("sk_socket_get_buffer_sizes")
public func sk_socket_get_buffer_sizes(_ handle: OpaquePointer?, _ outSend: UnsafeMutablePointer<Int32>?,
                                       _ outReceive: UnsafeMutablePointer<Int32>?) -> Int32 {
    Socket.withHandle(handle) { (socket) throws(SocketError) in
        outSend?.pointee = Int32(clamping: socket.sendBufferSize)
        outReceive?.pointee = Int32(clamping: socket.receiveBufferSize)
    }
}

@_cdecl("sk_socket_set_reuse_port")
public func sk_socket_set_reuse_port(_ handle: OpaquePointer?, _ enabled: Int32) -> Int32 {
    Socket.withHandle(handle) { $0.reusePort = enabled != 0 }
}

@_cdecl("sk_socket_get_reuse_port")
public func sk_socket_get_reuse_port(_ handle: OpaquePointer?) -> Int32 { Socket.flag(handle) { $0.reusePort } }

@_cdecl("sk_socket_set_accepts_on_every_loop")
public func sk_socket_set_accepts_on_every_loop(_ handle: OpaquePointer?, _ enabled: Int32) -> Int32 {
    Socket.withHandle(handle) { $0.acceptsOnEveryLoop = enabled != 0 }
}

@_cdecl("sk_socket_get_accepts_on_every_loop")
public func sk_socket_get_accepts_on_every_loop(_ handle: OpaquePointer?) -> Int32 {
    Socket.flag(handle) { $0.acceptsOnEveryLoop }
}

@_cdecl("sk_socket_set_proxy_protocol")
public func sk_socket_set_proxy_protocol(_ handle: OpaquePointer?, _ mode: Int32) -> Int32 {
    guard let mode = ProxyProtocolMode(rawValue: mode) else { return SocketError.Code.badParam.rawValue }
    return Socket.withHandle(handle) { $0.proxyProtocol = mode }
}

@_cdecl("sk_socket_get_proxy_protocol")
public func sk_socket_get_proxy_protocol(_ handle: OpaquePointer?) -> Int32 {
    Socket.answer(handle) { $0.proxyProtocol.rawValue }
}

@_cdecl("sk_socket_set_proxy_header_timeout")
public func sk_socket_set_proxy_header_timeout(_ handle: OpaquePointer?, _ seconds: Double,
                                               _ error: UnsafeMutablePointer<sk_error_t>?) -> Int32 {
    Socket.withHandle(handle, error) { (socket) throws(SocketError) in try socket.setProxyHeaderTimeout(seconds) }
}

@_cdecl("sk_socket_get_proxy_header_timeout")
public func sk_socket_get_proxy_header_timeout(_ handle: OpaquePointer?, _ outSeconds: UnsafeMutablePointer<Double>?) -> Int32 {
    Socket.withHandle(handle) { (socket) throws(SocketError) in
        outSeconds?.pointee = socket.proxyHeaderTimeout
    }
}

@_cdecl("sk_socket_set_user_timeout")
public func sk_socket_set_user_timeout(_ handle: OpaquePointer?, _ seconds: Double,
                                       _ error: UnsafeMutablePointer<sk_error_t>?) -> Int32 {
    Socket.withHandle(handle, error) { (socket) throws(SocketError) in try socket.setUserTimeout(seconds) }
}

@_cdecl("sk_socket_get_user_timeout")
public func sk_socket_get_user_timeout(_ handle: OpaquePointer?, _ outSeconds: UnsafeMutablePointer<Double>?) -> Int32 {
    Socket.withHandle(handle) { (socket) throws(SocketError) in
        outSeconds?.pointee = socket.userTimeout
    }
}

@_cdecl("sk_socket_set_fast_open")
public func sk_socket_set_fast_open(_ handle: OpaquePointer?, _ enabled: Int32) -> Int32 {
    Socket.withHandle(handle) { $0.fastOpen = enabled != 0 }
}

@_cdecl("sk_socket_get_fast_open")
public func sk_socket_get_fast_open(_ handle: OpaquePointer?) -> Int32 { Socket.flag(handle) { $0.fastOpen } }

@_cdecl("sk_socket_set_socket_option")
public func sk_socket_set_socket_option(_ handle: OpaquePointer?, _ level: Int32, _ name: Int32,
                                        _ value: UnsafeRawPointer?, _ length: Int,
                                        _ error: UnsafeMutablePointer<sk_error_t>?) -> Int32 {
    Socket.withHandle(handle, error) { (socket) throws(SocketError) in
        guard let value else { throw badParam("value is NULL") }
        let count = try checkedLength(length, "length")
        guard count <= SocketOption.maximumValueLength else {
            throw badParam("length must be 1...\(SocketOption.maximumValueLength)")
        }
        let bytes = Array(UnsafeRawBufferPointer(start: value, count: count))
        try socket.setSocketOption(try SocketOption(level: level, name: name, value: bytes))
    }
}

@_cdecl("sk_socket_clear_socket_options")
public func sk_socket_clear_socket_options(_ handle: OpaquePointer?) -> Int32 {
    Socket.withHandle(handle) { $0.removeAllSocketOptions() }
}

// MARK: Accepting and connecting

@_cdecl("sk_socket_accept_on_port")
public func sk_socket_accept_on_port(_ handle: OpaquePointer?, _ port: UInt16, _ error: UnsafeMutablePointer<sk_error_t>?) -> Int32 {
    Socket.withHandle(handle, error) { (socket) throws(SocketError) in try socket.accept(onPort: port) }
}

@_cdecl("sk_socket_accept_on_interface")
public func sk_socket_accept_on_interface(_ handle: OpaquePointer?, _ interface: UnsafePointer<CChar>?, _ port: UInt16,
                                          _ error: UnsafeMutablePointer<sk_error_t>?) -> Int32 {
    Socket.withHandle(handle, error) { (socket) throws(SocketError) in
        try socket.accept(onInterface: interface.map { String(cString: $0) }, port: port)
    }
}

@_cdecl("sk_socket_accept_on_unix_path")
public func sk_socket_accept_on_unix_path(_ handle: OpaquePointer?, _ path: UnsafePointer<CChar>?,
                                          _ error: UnsafeMutablePointer<sk_error_t>?) -> Int32 {
    Socket.withHandle(handle, error) { (socket) throws(SocketError) in
        try socket.accept(onUnixPath: try string(from: path, "path"))
    }
}

@_cdecl("sk_socket_accept_on_fds")
public func sk_socket_accept_on_fds(_ handle: OpaquePointer?, _ fds: UnsafePointer<Int32>?, _ count: Int,
                                    _ error: UnsafeMutablePointer<sk_error_t>?) -> Int32 {
    Socket.withHandle(handle, error) { (socket) throws(SocketError) in
        guard let fds else { throw badParam("fds is NULL") }
        let number = try checkedLength(count, "count")
        guard number <= ListenerFactory.maximumAdoptedDescriptors else {
            throw badParam("a listener adopts 1...\(ListenerFactory.maximumAdoptedDescriptors) descriptors")
        }
        try socket.accept(onDescriptors: Array(UnsafeBufferPointer(start: fds, count: number)))
    }
}

@_cdecl("sk_socket_activation_fds")
public func sk_socket_activation_fds(_ fds: UnsafeMutablePointer<Int32>?, _ capacity: Int, _ unsetEnvironment: Int32,
                                     _ error: UnsafeMutablePointer<sk_error_t>?) -> Int32 {
    var found = 0
    let status = reporting(error) { () throws(SocketError) in
        let room = fds == nil ? 0 : try checkedLength(capacity, "capacity")
        let descriptors = try Socket.socketActivationDescriptors(unsettingEnvironment: unsetEnvironment != 0)
        for (index, descriptor) in descriptors.prefix(room).enumerated() { fds?[index] = descriptor }
        found = descriptors.count
    }
    return status == 0 ? Int32(clamping: found) : status
}

@_cdecl("sk_socket_connect_to_host")
public func sk_socket_connect_to_host(_ handle: OpaquePointer?, _ host: UnsafePointer<CChar>?, _ port: UInt16,
                                      _ interface: UnsafePointer<CChar>?, _ timeout: Double,
                                      _ error: UnsafeMutablePointer<sk_error_t>?) -> Int32 {
    Socket.withHandle(handle, error) { (socket) throws(SocketError) in
        try socket.connect(toHost: try string(from: host, "host"), port: port,
                           viaInterface: interface.map { String(cString: $0) }, timeout: timeout)
    }
}

@_cdecl("sk_socket_connect_to_address")
public func sk_socket_connect_to_address(_ handle: OpaquePointer?, _ address: UnsafePointer<sockaddr>?, _ length: socklen_t,
                                         _ interface: UnsafePointer<CChar>?, _ timeout: Double,
                                         _ error: UnsafeMutablePointer<sk_error_t>?) -> Int32 {
    Socket.withHandle(handle, error) { (socket) throws(SocketError) in
        let parsed = try socketAddress(address, length)
        try socket.connect(to: parsed, viaInterface: interface.map { String(cString: $0) }, timeout: timeout)
    }
}

@_cdecl("sk_socket_connect_to_unix_path")
public func sk_socket_connect_to_unix_path(_ handle: OpaquePointer?, _ path: UnsafePointer<CChar>?, _ timeout: Double,
                                           _ error: UnsafeMutablePointer<sk_error_t>?) -> Int32 {
    Socket.withHandle(handle, error) { (socket) throws(SocketError) in
        try socket.connect(toUnixPath: try string(from: path, "path"), timeout: timeout)
    }
}

@_cdecl("sk_socket_accept_on_abstract_unix_name")
public func sk_socket_accept_on_abstract_unix_name(_ handle: OpaquePointer?, _ name: UnsafeRawPointer?, _ length: Int,
                                                   _ error: UnsafeMutablePointer<sk_error_t>?) -> Int32 {
    Socket.withHandle(handle, error) { (socket) throws(SocketError) in
        try socket.accept(onAbstractUnixName: try abstractName(name, length))
    }
}

@_cdecl("sk_socket_connect_to_abstract_unix_name")
public func sk_socket_connect_to_abstract_unix_name(_ handle: OpaquePointer?, _ name: UnsafeRawPointer?, _ length: Int,
                                                    _ timeout: Double, _ error: UnsafeMutablePointer<sk_error_t>?) -> Int32 {
    Socket.withHandle(handle, error) { (socket) throws(SocketError) in
        try socket.connect(toAbstractUnixName: try abstractName(name, length), timeout: timeout)
    }
}

/// An abstract Unix-domain name from C: `length` bytes (NULs included) at `name`.
private func abstractName(_ name: UnsafeRawPointer?, _ length: Int) throws(SocketError) -> [UInt8] {
    guard let name else { throw badParam("name is NULL") }
    let count = try checkedLength(length, "length")
    guard count <= 1024 else { throw badParam("an abstract Unix socket name takes 1...107 bytes") }
    return Array(UnsafeRawBufferPointer(start: name, count: count))
}

// MARK: Unix-domain extras

@_cdecl("sk_socket_set_receives_descriptors")
public func sk_socket_set_receives_descriptors(_ handle: OpaquePointer?, _ enabled: Int32) -> Int32 {
    Socket.withHandle(handle) { $0.receivesDescriptors = enabled != 0 }
}

@_cdecl("sk_socket_get_receives_descriptors")
public func sk_socket_get_receives_descriptors(_ handle: OpaquePointer?) -> Int32 {
    Socket.flag(handle) { $0.receivesDescriptors }
}

@_cdecl("sk_socket_take_received_descriptors")
public func sk_socket_take_received_descriptors(_ handle: OpaquePointer?, _ fds: UnsafeMutablePointer<Int32>?,
                                                _ capacity: Int, _ error: UnsafeMutablePointer<sk_error_t>?) -> Int32 {
    var result: Int32 = 0
    let status = Socket.withHandle(handle, error) { (socket) throws(SocketError) in
        guard let fds else {
            result = Int32(clamping: try socket.receivedDescriptorCount())
            return
        }
        let taken = try socket.takeReceivedDescriptors(limit: try checkedLength(capacity, "capacity"))
        for (index, descriptor) in taken.enumerated() { fds[index] = descriptor }
        result = Int32(taken.count)
    }
    return status == 0 ? result : status
}

@_cdecl("sk_socket_write_with_descriptors")
public func sk_socket_write_with_descriptors(_ handle: OpaquePointer?, _ data: UnsafeRawPointer?, _ length: Int,
                                             _ fds: UnsafePointer<Int32>?, _ fdCount: Int, _ timeout: Double, _ tag: Int,
                                             _ error: UnsafeMutablePointer<sk_error_t>?) -> Int32 {
    Socket.withHandle(handle, error) { (socket) throws(SocketError) in
        guard let data else { throw badParam("data is NULL") }
        guard let fds else { throw badParam("fds is NULL") }
        let count = try checkedLength(length, "length")
        let descriptors = try checkedLength(fdCount, "fd_count")
        guard descriptors <= Int(SKC_MAX_PASSED_DESCRIPTORS) else {
            throw badParam("a write passes 1...\(SKC_MAX_PASSED_DESCRIPTORS) descriptors")
        }
        try socket.write(Array(UnsafeRawBufferPointer(start: data, count: count)),
                         passingDescriptors: Array(UnsafeBufferPointer(start: fds, count: descriptors)),
                         timeout: timeout, tag: tag)
    }
}

@_cdecl("sk_socket_get_peer_credentials")
public func sk_socket_get_peer_credentials(_ handle: OpaquePointer?, _ outPid: UnsafeMutablePointer<Int32>?,
                                           _ outUid: UnsafeMutablePointer<UInt32>?, _ outGid: UnsafeMutablePointer<UInt32>?,
                                           _ error: UnsafeMutablePointer<sk_error_t>?) -> Int32 {
    Socket.withHandle(handle, error) { (socket) throws(SocketError) in
        let credentials = try socket.peerCredentials()
        outPid?.pointee = credentials.processID
        outUid?.pointee = credentials.userID
        outGid?.pointee = credentials.groupID
    }
}

// MARK: Reading

/// A caller buffer from C, validated.
private func callerBuffer(_ buffer: UnsafeMutableRawPointer?, _ capacity: Int) throws(SocketError) -> UnsafeMutableRawBufferPointer {
    guard let buffer else { throw badParam("buffer is NULL") }
    return UnsafeMutableRawBufferPointer(start: buffer, count: try checkedLength(capacity, "capacity"))
}

private func separatorBytes(_ separator: UnsafeRawPointer?, _ length: Int) throws(SocketError) -> [UInt8] {
    guard let separator else { throw badParam("separator is NULL") }
    let count = try checkedLength(length, "separator_length")
    guard count > 0, count <= 1 << 20 else { throw badParam("separator_length must be 1...1048576") }
    return Array(UnsafeRawBufferPointer(start: separator, count: count))
}

@_cdecl("sk_socket_read")
public func sk_socket_read(_ handle: OpaquePointer?, _ maxLength: Int, _ timeout: Double, _ tag: Int,
                           _ error: UnsafeMutablePointer<sk_error_t>?) -> Int32 {
    Socket.withHandle(handle, error) { (socket) throws(SocketError) in
        try socket.read(maxLength: try checkedLength(maxLength, "max_length"), timeout: timeout, tag: tag)
    }
}

@_cdecl("sk_socket_read_into")
public func sk_socket_read_into(_ handle: OpaquePointer?, _ buffer: UnsafeMutableRawPointer?, _ capacity: Int, _ offset: Int,
                                _ maxLength: Int, _ timeout: Double, _ tag: Int,
                                _ error: UnsafeMutablePointer<sk_error_t>?) -> Int32 {
    Socket.withHandle(handle, error) { (socket) throws(SocketError) in
        try socket.read(into: try callerBuffer(buffer, capacity), offset: try checkedLength(offset, "offset"),
                        maxLength: try checkedLength(maxLength, "max_length"), timeout: timeout, tag: tag)
    }
}

@_cdecl("sk_socket_read_to_length")
public func sk_socket_read_to_length(_ handle: OpaquePointer?, _ length: Int, _ timeout: Double, _ tag: Int,
                                     _ error: UnsafeMutablePointer<sk_error_t>?) -> Int32 {
    Socket.withHandle(handle, error) { (socket) throws(SocketError) in
        try socket.read(toLength: try checkedLength(length, "length"), timeout: timeout, tag: tag)
    }
}

@_cdecl("sk_socket_read_to_length_into")
public func sk_socket_read_to_length_into(_ handle: OpaquePointer?, _ length: Int, _ buffer: UnsafeMutableRawPointer?,
                                          _ capacity: Int, _ offset: Int, _ timeout: Double, _ tag: Int,
                                          _ error: UnsafeMutablePointer<sk_error_t>?) -> Int32 {
    Socket.withHandle(handle, error) { (socket) throws(SocketError) in
        try socket.read(toLength: try checkedLength(length, "length"), into: try callerBuffer(buffer, capacity),
                        offset: try checkedLength(offset, "offset"), timeout: timeout, tag: tag)
    }
}

@_cdecl("sk_socket_read_to_data")
public func sk_socket_read_to_data(_ handle: OpaquePointer?, _ separator: UnsafeRawPointer?, _ separatorLength: Int,
                                   _ maxLength: Int, _ timeout: Double, _ tag: Int,
                                   _ error: UnsafeMutablePointer<sk_error_t>?) -> Int32 {
    Socket.withHandle(handle, error) { (socket) throws(SocketError) in
        try socket.read(toData: try separatorBytes(separator, separatorLength),
                        maxLength: try checkedLength(maxLength, "max_length"), timeout: timeout, tag: tag)
    }
}

@_cdecl("sk_socket_read_to_data_into")
public func sk_socket_read_to_data_into(_ handle: OpaquePointer?, _ separator: UnsafeRawPointer?, _ separatorLength: Int,
                                        _ buffer: UnsafeMutableRawPointer?, _ capacity: Int, _ offset: Int,
                                        _ maxLength: Int, _ timeout: Double, _ tag: Int,
                                        _ error: UnsafeMutablePointer<sk_error_t>?) -> Int32 {
    Socket.withHandle(handle, error) { (socket) throws(SocketError) in
        try socket.read(toData: try separatorBytes(separator, separatorLength), into: try callerBuffer(buffer, capacity),
                        offset: try checkedLength(offset, "offset"), maxLength: try checkedLength(maxLength, "max_length"),
                        timeout: timeout, tag: tag)
    }
}

@_cdecl("sk_socket_read_to_file")
public func sk_socket_read_to_file(_ handle: OpaquePointer?, _ length: Int, _ fd: Int32, _ timeout: Double, _ tag: Int,
                                   _ error: UnsafeMutablePointer<sk_error_t>?) -> Int32 {
    Socket.withHandle(handle, error) { (socket) throws(SocketError) in
        try socket.read(toLength: try checkedLength(length, "length"), intoFile: fd, timeout: timeout, tag: tag)
    }
}

@_cdecl("sk_socket_cancel_read")
public func sk_socket_cancel_read(_ handle: OpaquePointer?, _ tag: Int, _ error: UnsafeMutablePointer<sk_error_t>?) -> Int32 {
    Socket.withHandle(handle, error) { (socket) throws(SocketError) in
        try socket.cancelRead(withTag: tag)
    }
}

@_cdecl("sk_socket_unread")
public func sk_socket_unread(_ handle: OpaquePointer?, _ bytes: UnsafeRawPointer?, _ length: Int,
                             _ error: UnsafeMutablePointer<sk_error_t>?) -> Int32 {
    Socket.withHandle(handle, error) { (socket) throws(SocketError) in
        guard let bytes else { throw badParam("bytes is NULL") }
        let count = try checkedLength(length, "length")
        try socket.unread(Array(UnsafeRawBufferPointer(start: bytes, count: count)))
    }
}

private func report(_ progress: OperationProgress?, _ outTag: UnsafeMutablePointer<Int>?,
                    _ outDone: UnsafeMutablePointer<Int>?, _ outTotal: UnsafeMutablePointer<Int>?) -> Int32 {
    guard let progress else { return 0 }
    outTag?.pointee = progress.tag
    outDone?.pointee = progress.bytesDone
    outTotal?.pointee = progress.totalBytes ?? 0
    return 1
}

@_cdecl("sk_socket_read_progress")
public func sk_socket_read_progress(_ handle: OpaquePointer?, _ outTag: UnsafeMutablePointer<Int>?,
                                    _ outDone: UnsafeMutablePointer<Int>?, _ outTotal: UnsafeMutablePointer<Int>?) -> Int32 {
    Socket.answer(handle) { socket in report(socket.readProgress, outTag, outDone, outTotal) }
}

// MARK: Writing

@_cdecl("sk_socket_write")
public func sk_socket_write(_ handle: OpaquePointer?, _ data: UnsafeRawPointer?, _ length: Int, _ timeout: Double,
                            _ tag: Int, _ error: UnsafeMutablePointer<sk_error_t>?) -> Int32 {
    Socket.withHandle(handle, error) { (socket) throws(SocketError) in
        let count = try checkedLength(length, "length")
        guard let data else { throw badParam("data is NULL") }
        try socket.write(copying: UnsafeRawBufferPointer(start: data, count: count), timeout: timeout, tag: tag)
    }
}

@_cdecl("sk_socket_write_no_copy")
public func sk_socket_write_no_copy(_ handle: OpaquePointer?, _ data: UnsafeRawPointer?, _ length: Int,
                                    _ release: (@convention(c) (UnsafeMutableRawPointer?, UnsafeMutableRawPointer?) -> Void)?,
                                    _ releaseContext: UnsafeMutableRawPointer?, _ timeout: Double, _ tag: Int,
                                    _ error: UnsafeMutablePointer<sk_error_t>?) -> Int32 {
    Socket.withHandle(handle, error) { (socket) throws(SocketError) in
        let count = try checkedLength(length, "length")
        guard let data else { throw badParam("data is NULL") }
        guard count > 0 else { throw SocketError(.badParam, "empty write") }
        var armed = false
        let external = ExternalBytes(bytes: UnsafeRawBufferPointer(start: data, count: count)) {
            // Only a write that was accepted owes the release.
            if armed { release?(UnsafeMutableRawPointer(mutating: data), releaseContext) }
        }
        armed = true
        do throws(SocketError) {
            try socket.write(external: external, timeout: timeout, tag: tag)
        } catch {
            armed = false
            throw error
        }
    }
}

@_cdecl("sk_socket_write_file")
public func sk_socket_write_file(_ handle: OpaquePointer?, _ fd: Int32, _ offset: Int64, _ length: Int, _ timeout: Double,
                                 _ tag: Int, _ error: UnsafeMutablePointer<sk_error_t>?) -> Int32 {
    Socket.withHandle(handle, error) { (socket) throws(SocketError) in
        let count = try checkedLength(length, "length")
        try socket.writeFile(fd, offset: offset, length: count == 0 ? nil : count, timeout: timeout, tag: tag)
    }
}

@_cdecl("sk_socket_write_progress")
public func sk_socket_write_progress(_ handle: OpaquePointer?, _ outTag: UnsafeMutablePointer<Int>?,
                                     _ outDone: UnsafeMutablePointer<Int>?, _ outTotal: UnsafeMutablePointer<Int>?) -> Int32 {
    Socket.answer(handle) { socket in report(socket.writeProgress, outTag, outDone, outTotal) }
}

@_cdecl("sk_socket_get_queued_write_bytes")
public func sk_socket_get_queued_write_bytes(_ handle: OpaquePointer?, _ outBytes: UnsafeMutablePointer<Int>?) -> Int32 {
    Socket.withHandle(handle) { (socket) throws(SocketError) in
        outBytes?.pointee = socket.queuedWriteBytes
    }
}

// MARK: Disconnecting

@_cdecl("sk_socket_disconnect")
public func sk_socket_disconnect(_ handle: OpaquePointer?) -> Int32 { Socket.withHandle(handle) { $0.disconnect() } }

@_cdecl("sk_socket_disconnect_after_reading")
public func sk_socket_disconnect_after_reading(_ handle: OpaquePointer?) -> Int32 {
    Socket.withHandle(handle) { $0.disconnectAfterReading() }
}

@_cdecl("sk_socket_disconnect_after_writing")
public func sk_socket_disconnect_after_writing(_ handle: OpaquePointer?) -> Int32 {
    Socket.withHandle(handle) { $0.disconnectAfterWriting() }
}

@_cdecl("sk_socket_disconnect_after_reading_and_writing")
public func sk_socket_disconnect_after_reading_and_writing(_ handle: OpaquePointer?) -> Int32 {
    Socket.withHandle(handle) { $0.disconnectAfterReadingAndWriting() }
}

@_cdecl("sk_socket_disconnect_with_reset")
public func sk_socket_disconnect_with_reset(_ handle: OpaquePointer?) -> Int32 {
    Socket.withHandle(handle) { $0.disconnectWithReset() }
}

@_cdecl("sk_socket_close_write_stream")
public func sk_socket_close_write_stream(_ handle: OpaquePointer?) -> Int32 {
    Socket.withHandle(handle) { $0.closeWriteStream() }
}

// MARK: Diagnostics

@_cdecl("sk_socket_is_connected")
public func sk_socket_is_connected(_ handle: OpaquePointer?) -> Int32 { Socket.flag(handle) { $0.isConnected } }

@_cdecl("sk_socket_is_disconnected")
public func sk_socket_is_disconnected(_ handle: OpaquePointer?) -> Int32 { Socket.flag(handle) { $0.isDisconnected } }

@_cdecl("sk_socket_is_accepting")
public func sk_socket_is_accepting(_ handle: OpaquePointer?) -> Int32 { Socket.flag(handle) { $0.isAccepting } }

@_cdecl("sk_socket_is_ipv4")
public func sk_socket_is_ipv4(_ handle: OpaquePointer?) -> Int32 { Socket.flag(handle) { $0.isIPv4 } }

@_cdecl("sk_socket_is_ipv6")
public func sk_socket_is_ipv6(_ handle: OpaquePointer?) -> Int32 { Socket.flag(handle) { $0.isIPv6 } }

@_cdecl("sk_socket_is_unix")
public func sk_socket_is_unix(_ handle: OpaquePointer?) -> Int32 { Socket.flag(handle) { $0.isUnixDomain } }

@_cdecl("sk_socket_get_connected_host")
public func sk_socket_get_connected_host(_ handle: OpaquePointer?, _ buffer: UnsafeMutablePointer<CChar>?, _ capacity: Int) -> Int32 {
    Socket.connectedHost(handle, buffer, capacity)
}

@_cdecl("sk_socket_get_connected_port")
public func sk_socket_get_connected_port(_ handle: OpaquePointer?, _ outPort: UnsafeMutablePointer<UInt16>?) -> Int32 {
    // Through a proxy the target's port (`Socket.connectedPort`), not the proxy's address's.
    Socket.withHandle(handle) { (socket) throws(SocketError) in
        let port = socket.connectedPort
        guard socket.connectedAddress != nil else { throw SocketError(.badConfig, "not connected") }
        outPort?.pointee = port
    }
}

@_cdecl("sk_socket_get_connected_address")
public func sk_socket_get_connected_address(_ handle: OpaquePointer?, _ address: UnsafeMutablePointer<sockaddr>?,
                                            _ length: UnsafeMutablePointer<socklen_t>?) -> Int32 {
    Socket.connectedAddress(handle, address, length)
}

@_cdecl("sk_socket_get_connected_unix_path")
public func sk_socket_get_connected_unix_path(_ handle: OpaquePointer?, _ buffer: UnsafeMutablePointer<CChar>?, _ capacity: Int) -> Int32 {
    Socket.answer(handle) { socket in copyText(socket.connectedUnixPath, into: buffer, capacity: capacity) }
}

@_cdecl("sk_socket_get_local_host")
public func sk_socket_get_local_host(_ handle: OpaquePointer?, _ buffer: UnsafeMutablePointer<CChar>?, _ capacity: Int) -> Int32 {
    Socket.answer(handle) { socket in copyText(socket.localHost, into: buffer, capacity: capacity) }
}

@_cdecl("sk_socket_get_local_port")
public func sk_socket_get_local_port(_ handle: OpaquePointer?, _ outPort: UnsafeMutablePointer<UInt16>?) -> Int32 {
    Socket.port(handle, outPort, missing: "not connected or accepting") { $0.localAddress }
}

@_cdecl("sk_socket_get_local_address")
public func sk_socket_get_local_address(_ handle: OpaquePointer?, _ address: UnsafeMutablePointer<sockaddr>?,
                                        _ length: UnsafeMutablePointer<socklen_t>?) -> Int32 {
    Socket.answer(handle) { socket in copyAddress(socket.localAddress, into: address, length: length) }
}

@_cdecl("sk_socket_get_proxy_address")
public func sk_socket_get_proxy_address(_ handle: OpaquePointer?, _ address: UnsafeMutablePointer<sockaddr>?,
                                        _ length: UnsafeMutablePointer<socklen_t>?) -> Int32 {
    Socket.answer(handle) { socket in copyAddress(socket.proxyAddress, into: address, length: length) }
}

@_cdecl("sk_socket_get_proxy_protocol_version")
public func sk_socket_get_proxy_protocol_version(_ handle: OpaquePointer?) -> Int32 {
    Socket.answer(handle) { Int32($0.proxyProtocolVersion ?? 0) }
}

// MARK: Advanced

@_cdecl("sk_socket_perform")
public func sk_socket_perform(_ handle: OpaquePointer?,
                              _ function: (@convention(c) (UnsafePointer<sk_socket_descriptors_t>?, UnsafeMutableRawPointer?) -> Void)?,
                              _ context: UnsafeMutableRawPointer?) -> Int32 {
    Socket.perform(handle, function, context)
}

// MARK: Utilities

@_cdecl("sk_lookup_host")
public func sk_lookup_host(_ host: UnsafePointer<CChar>?, _ port: UInt16, _ addresses: UnsafeMutablePointer<sockaddr_storage>?,
                           _ capacity: Int, _ outCount: UnsafeMutablePointer<Int>?,
                           _ error: UnsafeMutablePointer<sk_error_t>?) -> Int32 {
    reporting(error) { () throws(SocketError) in
        let name = try string(from: host, "host")
        let room = try checkedLength(capacity, "capacity")
        guard room == 0 || addresses != nil else { throw badParam("addresses is NULL") }
        let found = try AddressResolver.lookup(host: name, port: port).get()
        let written = min(room, found.count)
        for index in 0..<written {
            if let slot = addresses?.advanced(by: index) {
                slot.pointee = sockaddr_storage()
                UnsafeMutableRawPointer(slot).copyMemory(from: found[index].bytes, byteCount: found[index].bytes.count)
            }
        }
        outCount?.pointee = written
    }
}

@_cdecl("sk_lookup_host_addresses")
public func sk_lookup_host_addresses(_ host: UnsafePointer<CChar>?, _ port: UInt16,
                                     _ addresses: UnsafeMutablePointer<sk_address_t>?, _ capacity: Int,
                                     _ error: UnsafeMutablePointer<sk_error_t>?) -> Int32 {
    var found = 0
    let status = reporting(error) { () throws(SocketError) in
        let name = try string(from: host, "host")
        let room = addresses == nil ? 0 : try checkedLength(capacity, "capacity")
        let resolved = try AddressResolver.lookup(host: name, port: port).get()
        for (index, address) in resolved.prefix(room).enumerated() {
            guard let slot = addresses?.advanced(by: index) else { break }
            slot.pointee = sk_address_t()
            address.withSockAddr { pointer, length in
                withUnsafeMutableBytes(of: &slot.pointee.address) {
                    $0.copyMemory(from: UnsafeRawBufferPointer(start: pointer, count: Int(length)))
                }
                slot.pointee.length = length
            }
        }
        found = resolved.count
    }
    return status == 0 ? Int32(clamping: found) : status
}

private func ipAddress(_ address: UnsafePointer<sockaddr>?, _ length: socklen_t) -> SocketAddress? {
    guard let parsed = try? socketAddress(address, length), parsed.family != .unix else { return nil }
    return parsed
}

@_cdecl("sk_address_get_host")
public func sk_address_get_host(_ address: UnsafePointer<sockaddr>?, _ length: socklen_t,
                                _ buffer: UnsafeMutablePointer<CChar>?, _ capacity: Int) -> Int32 {
    guard let parsed = ipAddress(address, length) else { return SocketError.Code.badParam.rawValue }
    return copyText(parsed.host, into: buffer, capacity: capacity)
}

@_cdecl("sk_address_get_port")
public func sk_address_get_port(_ address: UnsafePointer<sockaddr>?, _ length: socklen_t,
                                _ outPort: UnsafeMutablePointer<UInt16>?) -> Int32 {
    guard let parsed = ipAddress(address, length) else { return SocketError.Code.badParam.rawValue }
    outPort?.pointee = parsed.port
    return 0
}

@_cdecl("sk_address_is_ipv4")
public func sk_address_is_ipv4(_ address: UnsafePointer<sockaddr>?, _ length: socklen_t) -> Int32 {
    ipAddress(address, length)?.family == .ipv4 ? 1 : 0
}

@_cdecl("sk_address_is_ipv6")
public func sk_address_is_ipv6(_ address: UnsafePointer<sockaddr>?, _ length: socklen_t) -> Int32 {
    ipAddress(address, length)?.family == .ipv6 ? 1 : 0
}

// MARK: Proxies

@_cdecl("sk_socket_set_proxy")
public func sk_socket_set_proxy(_ handle: OpaquePointer?, _ kind: Int32, _ host: UnsafePointer<CChar>?, _ port: UInt16,
                                _ username: UnsafePointer<CChar>?, _ password: UnsafePointer<CChar>?,
                                _ error: UnsafeMutablePointer<sk_error_t>?) -> Int32 {
    Socket.withHandle(handle, error) { (socket) throws(SocketError) in
        guard kind != Int32(SK_PROXY_NONE.rawValue) else {
            try socket.setProxy(nil)
            return
        }
        guard let kind = ProxySettings.Kind(rawValue: kind) else {
            throw badParam("kind must be SK_PROXY_NONE, SK_PROXY_SOCKS5 or SK_PROXY_HTTP_CONNECT")
        }
        let settings = try ProxySettings(kind: kind, host: try string(from: host, "host"), port: port,
                                         username: optionalString(username), password: optionalString(password))
        try socket.setProxy(settings)
    }
}

@_cdecl("sk_socket_get_proxy")
public func sk_socket_get_proxy(_ handle: OpaquePointer?, _ outKind: UnsafeMutablePointer<Int32>?,
                                _ buffer: UnsafeMutablePointer<CChar>?, _ capacity: Int,
                                _ outPort: UnsafeMutablePointer<UInt16>?) -> Int32 {
    Socket.answer(handle) { socket in
        let proxy = socket.proxy
        outKind?.pointee = proxy?.kind.rawValue ?? Int32(SK_PROXY_NONE.rawValue)
        outPort?.pointee = proxy?.port ?? 0
        return copyText(proxy?.host ?? "", into: buffer, capacity: capacity)
    }
}
