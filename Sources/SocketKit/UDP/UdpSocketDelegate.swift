// SPDX-License-Identifier: MIT
import Glibc
import SocketKitC

/// What a `UdpSocket` tells its delegate, on the socket's callback queue, in the order it
/// happened; `udpSocketDidClose` is the last call of a session. Every method has an empty
/// default, so implement only those you need.
///
/// Isolation and misspelled methods: as for `SocketDelegate`. The methods run on the
/// callback queue's thread, so the protocol requires `Sendable` and Swift 6 checks the
/// conforming type; a delegate that lives on the main actor conforms to
/// `MainActorUdpSocketDelegate` instead. Declare the conformance in an extension that holds
/// the methods to be warned of a near miss ("nearly matches defaulted requirement").
public protocol UdpSocketDelegate: AnyObject, Sendable {
    /// `connect(toHost:port:)` / `connect(toAddress:)` succeeded: only `address` can now
    /// send to this socket, and sends without a destination go there.
    func udpSocket(_ sock: UdpSocket, didConnectToAddress address: SocketAddress)
    /// The connect failed (resolution, family disabled, `connect(2)`); the socket stays
    /// bound and usable.
    func udpSocket(_ sock: UdpSocket, didNotConnect error: SocketError)
    /// The kernel accepted the datagram queued with `tag` (or the send filter dropped it).
    func udpSocket(_ sock: UdpSocket, didSendDataWithTag tag: Int)
    /// The datagram queued with `tag` was not sent: timeout, resolution failure, a bad
    /// destination, or the kernel refused it (`EMSGSIZE`, `ENETUNREACH`, ...). The socket
    /// stays open and goes on with the next datagram.
    func udpSocket(_ sock: UdpSocket, didNotSendDataWithTag tag: Int, dueToError error: SocketError)
    /// One datagram (possibly empty) from `address`; `context` is what the receive filter
    /// attached (nil without a filter).
    func udpSocket(_ sock: UdpSocket, didReceive data: [UInt8], fromAddress address: SocketAddress,
                   withFilterContext context: (any Sendable)?)
    /// One datagram, as above, with where it arrived: the address it was sent to and the
    /// interface it came in on. Called instead of the method above for the datagrams that
    /// carry packet info (`setReceivesPacketInfo(true)`); its default calls that method.
    func udpSocket(_ sock: UdpSocket, didReceive data: [UInt8], fromAddress address: SocketAddress,
                   packetInfo: UdpPacketInfo, withFilterContext context: (any Sendable)?)
    /// A problem while receiving that does not close the socket: an ICMP error for an
    /// earlier datagram (`ECONNREFUSED` on a connected socket) or a datagram larger than the
    /// receive limit (`.truncated`, dropped).
    func udpSocket(_ sock: UdpSocket, didReceiveError error: SocketError)
    /// The socket closed: nil after `close()` / `closeAfterSending()`, an error when its loop
    /// stopped. Only sent if the socket had created its descriptors.
    func udpSocketDidClose(_ sock: UdpSocket, withError error: SocketError?)
}

public extension UdpSocketDelegate {
    func udpSocket(_ sock: UdpSocket, didConnectToAddress address: SocketAddress) {}
    func udpSocket(_ sock: UdpSocket, didNotConnect error: SocketError) {}
    func udpSocket(_ sock: UdpSocket, didSendDataWithTag tag: Int) {}
    func udpSocket(_ sock: UdpSocket, didNotSendDataWithTag tag: Int, dueToError error: SocketError) {}
    func udpSocket(_ sock: UdpSocket, didReceive data: [UInt8], fromAddress address: SocketAddress,
                   withFilterContext context: (any Sendable)?) {}
    func udpSocket(_ sock: UdpSocket, didReceive data: [UInt8], fromAddress address: SocketAddress,
                   packetInfo: UdpPacketInfo, withFilterContext context: (any Sendable)?) {
        udpSocket(sock, didReceive: data, fromAddress: address, withFilterContext: context)
    }
    func udpSocket(_ sock: UdpSocket, didReceiveError error: SocketError) {}
    func udpSocketDidClose(_ sock: UdpSocket, withError error: SocketError?) {}
}

/// Where a datagram arrived (IP_PKTINFO / IPV6_RECVPKTINFO): what a server bound to the
/// wildcard address needs to answer from the address it was asked on, or to tell a
/// multicast or broadcast datagram from one sent to it alone.
public struct UdpPacketInfo: Sendable, Equatable, CustomStringConvertible {
    /// The address the datagram was sent to, as its IP header says (a multicast group, a
    /// broadcast address, or one of this host's); port 0.
    public let destination: SocketAddress
    /// The index of the interface it came in on (`if_nametoindex`).
    public let interfaceIndex: UInt32

    public init(destination: SocketAddress, interfaceIndex: UInt32) {
        self.destination = destination
        self.interfaceIndex = interfaceIndex
    }

    /// From a received message's control messages; nil when it carries none.
    init?(_ message: UnsafePointer<skc_mmsghdr>) {
        var storage = sockaddr_storage()
        var length = socklen_t(0)
        var interface: UInt32 = 0
        let found = withUnsafePointer(to: message.pointee.msg_hdr) { header in
            skc_packet_info(header, &storage, &length, &interface)
        }
        guard found == 1, let address = withUnsafePointer(to: &storage, { SocketAddress(storage: $0, length: length) }) else {
            return nil
        }
        self.init(destination: address, interfaceIndex: interface)
    }

    /// The interface's name (`if_indextoname`), nil if it is gone.
    public var interfaceName: String? {
        var name = [CChar](repeating: 0, count: Int(IF_NAMESIZE) + 1)
        guard if_indextoname(interfaceIndex, &name) != nil else { return nil }
        return string(fromCString: name)
    }

    public var description: String { "to \(destination.host ?? "?") on interface \(interfaceIndex)" }
}

/// The bytes of a received datagram as the engine hands them over.
enum DatagramPayload {
    /// A view of the loop's receive buffer, valid only while the callback runs.
    case borrowed(UnsafeRawBufferPointer)
    case owned([UInt8])

    func withBytes<Result>(_ body: (UnsafeRawBufferPointer) -> Result) -> Result {
        switch self {
        case .borrowed(let bytes): return body(bytes)
        case .owned(let bytes): return bytes.withUnsafeBytes(body)
        }
    }

    var array: [UInt8] {
        switch self {
        case .borrowed(let bytes): return Array(bytes)
        case .owned(let bytes): return bytes
        }
    }
}

/// Everything a UDP socket reports, in order.
enum UdpSocketEvent: RoutedEvent {
    case didConnect(SocketAddress)
    case didNotConnect(SocketError)
    case didSend(tag: Int)
    case didNotSend(tag: Int, SocketError)
    case didReceive(DatagramPayload, from: SocketAddress, context: (any Sendable)?)
    /// A datagram that carries packet info (a socket with `receivesPacketInfo`).
    case didReceiveWithPacketInfo(DatagramPayload, from: SocketAddress, context: (any Sendable)?, info: UdpPacketInfo)
    case didReceiveError(SocketError)
    case didClose(SocketError?)

    /// The same event with no borrowed memory.
    func owned() -> UdpSocketEvent {
        if case .didReceive(.borrowed(let bytes), let address, let context) = self {
            return .didReceive(.owned(Array(bytes)), from: address, context: context)
        }
        if case .didReceiveWithPacketInfo(.borrowed(let bytes), let address, let context, let info) = self {
            return .didReceiveWithPacketInfo(.owned(Array(bytes)), from: address, context: context, info: info)
        }
        return self
    }
}

/// Turns events into calls of a delegate (Swift protocol or C struct); each kind of
/// receiver overrides `receive`. A class, not a protocol: a batch of received datagrams
/// holds its receiver as `Unmanaged` and calls it without reference counting per datagram
/// (`DirectDelivery`), which a protocol existential does not allow.
class UdpSocketEventReceiver {
    init() {}

    func receive(_ event: UdpSocketEvent, on socket: UdpSocket) {
        preconditionFailure("every UdpSocketEventReceiver overrides receive(_:on:)")
    }

    /// False when `didSend` would go nowhere (a C delegate without `did_send`): the engine
    /// then skips making those events at all, one per datagram.
    var wantsSendCompletions: Bool { true }

    /// A datagram received and delivered at once on the loop thread (the socket's callbacks
    /// run there), with no receive filter and no context: the same as `receive` of
    /// `.didReceive(.borrowed(bytes), from: sender, context: nil)`, where the sender is the
    /// complete `sockaddr_in` / `sockaddr_in6` at `name`. Both are borrowed for the call.
    /// A receiver that can use the raw address (the C one) skips making the event.
    func receiveDatagram(_ bytes: UnsafeRawBufferPointer, from name: UnsafeRawPointer, length: socklen_t,
                         on socket: UdpSocket) {
        guard let sender = SocketAddress(storage: name, length: length) else { return }
        receive(.didReceive(.borrowed(bytes), from: sender, context: nil), on: socket)
    }
}

/// Delivers events to a Swift `UdpSocketDelegate`, held weakly (or to a
/// `MainActorUdpSocketDelegate` through the adapter it keeps, which holds that one weakly).
final class SwiftUdpDelegateReceiver: UdpSocketEventReceiver {
    weak var delegate: UdpSocketDelegate?
    /// The adapter of a main-actor delegate (nobody else holds it); nil otherwise.
    let mainActorAdapter: MainActorUdpSocketDelegateAdapter?

    init?(_ delegate: UdpSocketDelegate?) {
        guard let delegate else { return nil }
        self.delegate = delegate
        mainActorAdapter = nil
    }

    init?(mainActor target: MainActorUdpSocketDelegate?) {
        guard let target else { return nil }
        let adapter = MainActorUdpSocketDelegateAdapter(target)
        delegate = adapter
        mainActorAdapter = adapter
    }

    /// What `UdpSocket.delegate` reports: not the adapter.
    var publicDelegate: UdpSocketDelegate? { mainActorAdapter == nil ? delegate : nil }

    override func receive(_ event: UdpSocketEvent, on socket: UdpSocket) {
        guard let delegate else {
            if case .didClose = event {} else {
                EngineLog.log(.debug, .callbacks, "a UDP socket's delegate is gone (delegates are held weakly): "
                    + "\(EngineLog.name(of: event)) dropped")
            }
            return
        }
        switch event {
        case .didConnect(let address): delegate.udpSocket(socket, didConnectToAddress: address)
        case .didNotConnect(let error): delegate.udpSocket(socket, didNotConnect: error)
        case .didSend(let tag): delegate.udpSocket(socket, didSendDataWithTag: tag)
        case .didNotSend(let tag, let error): delegate.udpSocket(socket, didNotSendDataWithTag: tag, dueToError: error)
        case .didReceive(let payload, let address, let context):
            delegate.udpSocket(socket, didReceive: payload.array, fromAddress: address, withFilterContext: context)
        case .didReceiveWithPacketInfo(let payload, let address, let context, let info):
            delegate.udpSocket(socket, didReceive: payload.array, fromAddress: address, packetInfo: info,
                               withFilterContext: context)
        case .didReceiveError(let error): delegate.udpSocket(socket, didReceiveError: error)
        case .didClose(let error): delegate.udpSocketDidClose(socket, withError: error)
        }
    }
}

/// A send filter's verdict is a Bool (false drops the datagram, which is still reported as
/// sent, as upstream does); a receive filter's is this.
public enum UdpReceiveFilterVerdict: Sendable {
    /// Pass the datagram to the delegate with `context` (its `withFilterContext`).
    case accept(context: (any Sendable)?)
    /// Drop it silently (in receive-once mode the socket goes on waiting for one it keeps).
    case drop
}

/// Decides on each received datagram: `(data, sender) -> verdict`.
public typealias UdpReceiveFilter = @Sendable ([UInt8], SocketAddress) -> UdpReceiveFilterVerdict
/// Decides on each datagram about to be sent: `(data, destination, tag) -> send it?`.
public typealias UdpSendFilter = @Sendable ([UInt8], SocketAddress, Int) -> Bool

/// Which of a host name's addresses a UDP socket uses (only one address is ever used per
/// send or connect).
public enum UdpAddressPreference: Int32, Sendable {
    /// The resolver's first address (default).
    case neutral = 0
    case ipv4 = 1
    case ipv6 = 2
}
