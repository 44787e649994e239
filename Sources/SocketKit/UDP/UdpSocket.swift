// SPDX-License-Identifier: MIT
import Glibc
import Synchronization

/// An asynchronous UDP socket with GCDAsyncUdpSocket's programming model: queued sends with
/// tags and timeouts, receiving once or continuously, optional connect, send and receive
/// filters, multicast and broadcast, and a delegate told of everything on the callback
/// queue you choose.
///
/// Descriptors are made lazily, one per address family (IPv6 with `IPV6_V6ONLY`), by the
/// first bind, connect or send. Where GCDAsyncUdpSocket closes the whole socket, this one
/// does not: a datagram that cannot be sent fails alone (`didNotSendDataWithTag`), ICMP
/// errors and oversized datagrams are reported (`didReceiveError`), both families can join
/// groups side by side, and empty datagrams can be sent and received.
///
/// Threads: every method may be called from any thread. The socket's state has one
/// writer, its event loop: every call that changes it (bind, connect, receiving, filters,
/// multicast, options, close, the setters) runs there and returns its answer (bound after
/// `bind`, closed after `close`), waiting for the loop when made on another thread (see
/// `EventLoop` for the rule they share, which no deadlock can break); sends and `perform`
/// are queued and answered through the delegate; getters read the state the loop last
/// published and never wait.
///
/// Text: a host, interface or multicast group holding a NUL character is refused
/// (`.badParam`): the system calls would see only the text before it.
public final class UdpSocket: SocketFront, @unchecked Sendable {
    typealias Receiver = UdpSocketEventReceiver
    /// The loop the socket lives on.
    public let eventLoop: EventLoop
    let core: UDPSocketCore

    let router = CallbackRouter()
    nonisolated(unsafe) var routing: CallbackRouting<UdpSocketEventReceiver>
    nonisolated(unsafe) var mailbox: EventMailbox<UdpSocketEvent>? = nil
    /// The C API's handle for this socket (0 when it has none).
    let cHandle = Atomic<UInt>(0)
    /// Set by the C API: its filters run under it and stop once the handle is released
    /// (the release waits for a call in progress).
    nonisolated(unsafe) var cFilterGuard: CallerBufferGuard? = nil

    /// A UDP socket with a delegate and a callback queue, on `eventLoop` (default: the next
    /// loop of `EventLoopGroup.default`).
    public convenience init(delegate: UdpSocketDelegate? = nil, callbackQueue: CallbackQueue = .eventLoop,
                            eventLoop: EventLoop? = nil) {
        self.init(receiver: SwiftUdpDelegateReceiver(delegate), callbackQueue: callbackQueue, eventLoop: eventLoop)
    }

    /// A UDP socket whose delegate lives on the main actor: its callbacks run there
    /// (`CallbackQueue.mainActor`).
    @MainActor
    public convenience init(delegate: MainActorUdpSocketDelegate, eventLoop: EventLoop? = nil) {
        self.init(receiver: SwiftUdpDelegateReceiver(mainActor: delegate),
                  callbackQueue: PinnedCallbackQueue(.mainActor, behind: .eventLoop), eventLoop: eventLoop)
    }

    init(receiver: UdpSocketEventReceiver?, callbackQueue: CallbackQueue, eventLoop: EventLoop?) {
        let loop = eventLoop ?? EventLoopGroup.default.next()
        self.eventLoop = loop
        core = UDPSocketCore(loop: loop)
        routing = CallbackRouting(queue: callbackQueue, receiver: receiver)
        core.ownerWantsSendCompletions.store(receiver?.wantsSendCompletions ?? false, ordering: .relaxed)
        core.attach(owner: self)
    }

    /// Dropping the last reference closes without callbacks (no `udpSocketDidClose`): queued
    /// datagrams are dropped, unless `closeAfterSending` came first (see there).
    deinit {
        releaseCore()
    }

    // MARK: Delegate and queue

    /// The delegate, held weakly. Setting it is synchronous, as for `Socket.delegate`.
    /// nil while the delegate is a `MainActorUdpSocketDelegate` (see `mainActorDelegate`).
    public var delegate: UdpSocketDelegate? {
        get { (receiver as? SwiftUdpDelegateReceiver)?.publicDelegate }
        set { setReceiver(SwiftUdpDelegateReceiver(newValue), callbackQueue: nil) }
    }

    /// The delegate, when it lives on the main actor (held weakly): as `Socket.mainActorDelegate`.
    @MainActor
    public var mainActorDelegate: MainActorUdpSocketDelegate? {
        get { (receiver as? SwiftUdpDelegateReceiver)?.mainActorAdapter?.target }
        set { setDelegate(newValue) }
    }

    /// Sets a main-actor delegate: its callbacks run on the main actor from now on.
    @MainActor
    public func setDelegate(_ delegate: MainActorUdpSocketDelegate?) {
        let receiver = SwiftUdpDelegateReceiver(mainActor: delegate)
        setReceiver(receiver, callbackQueue: nil, pinnedQueue: receiver == nil ? nil : CallbackQueue.mainActor)
    }

    /// Where callbacks run (and asynchronous filters given no queue of their own). While the
    /// delegate is a `MainActorUdpSocketDelegate` this is `.mainActor`, and a queue set
    /// meanwhile applies once another delegate is set.
    public var callbackQueue: CallbackQueue {
        get { routedQueue }
        set { routedQueue = newValue }
    }

    public func setDelegate(_ delegate: UdpSocketDelegate?, callbackQueue: CallbackQueue) {
        setReceiver(SwiftUdpDelegateReceiver(delegate), callbackQueue: callbackQueue)
    }

    /// Whether `didSend` events are wanted at all (loop thread; a receiver set meanwhile
    /// is seen by the next datagram).
    var wantsSendCompletions: Bool { core.ownerWantsSendCompletions.load(ordering: .relaxed) }

    /// Anything you want to keep with the socket; never touched by SocketKit.
    public var userData: AnyObject? {
        get { routedUserData }
        set { routedUserData = newValue }
    }

    // MARK: Configuration (read when descriptors are made, names resolved, datagrams received)

    private var configuration: UdpConfiguration { core.readPublished { $0.configuration } }

    /// A setter: the loop changes the configuration before this returns, so a datagram
    /// arriving next sees the new value (see `onLoopOrQueued`).
    private func configure(_ change: @escaping @Sendable (inout UdpConfiguration) -> Void) {
        onLoopOrQueued { $0.configure(change) }
    }

    /// Whether IPv4 is used (default true). Set before the first bind, connect or send.
    public var isIPv4Enabled: Bool {
        get { configuration.isIPv4Enabled }
        set { configure { $0.isIPv4Enabled = newValue } }
    }

    /// Whether IPv6 is used (default true). Set before the first bind, connect or send.
    public var isIPv6Enabled: Bool {
        get { configuration.isIPv6Enabled }
        set { configure { $0.isIPv6Enabled = newValue } }
    }

    /// Which resolved address a host name maps to (default: the resolver's first).
    public var addressPreference: UdpAddressPreference {
        get { configuration.preference }
        set { configure { $0.preference = newValue } }
    }

    /// The largest IPv4 datagram delivered (1...65535, default 65535; other values are
    /// clamped). Larger ones are dropped and reported as `.truncated`.
    public var maxReceiveIPv4BufferSize: Int {
        get { configuration.maxReceiveIPv4BufferSize }
        set { configure { $0.maxReceiveIPv4BufferSize = min(65535, max(1, newValue)) } }
    }

    /// The largest IPv6 datagram delivered (1...65535, default 65535; jumbograms are not
    /// supported).
    public var maxReceiveIPv6BufferSize: Int {
        get { configuration.maxReceiveIPv6BufferSize }
        set { configure { $0.maxReceiveIPv6BufferSize = min(65535, max(1, newValue)) } }
    }

    /// SO_SNDBUF requested when descriptors are made (0, the default: the kernel's).
    /// Upstream's `maxSendBufferSize`; unlike upstream it does not also set SO_RCVBUF.
    public var maxSendBufferSize: Int {
        get { configuration.sendBufferSize }
        set { configure { $0.sendBufferSize = max(0, newValue) } }
    }

    /// SO_RCVBUF requested when descriptors are made (0, the default: the kernel's).
    public var receiveBufferSize: Int {
        get { configuration.receiveBufferSize }
        set { configure { $0.receiveBufferSize = max(0, newValue) } }
    }

    // MARK: Binding

    /// Binds every enabled family on `interface` (nil: any; "localhost"/"loopback"; a name
    /// or an IP address) to `port`; 0 picks one free port for both families. Families
    /// without an address there are given up. Throws `.badConfig` (bound twice, after a
    /// connect or an earlier send), `.badParam` (unknown interface), `.system`
    /// (`EADDRINUSE`, `EACCES`).
    public func bind(toPort port: UInt16, interface: String? = nil) throws(SocketError) {
        try onLoop { core throws(SocketError) in try core.bind(port: port, interface: interface) }
    }

    /// Binds one family to `address` (the other family is given up).
    public func bind(toAddress address: SocketAddress) throws(SocketError) {
        try onLoop { core throws(SocketError) in try core.bind(address: address) }
    }

    // MARK: Connecting

    /// Connects to `host` (resolved off the loop), queued behind earlier sends;
    /// `didConnectToAddress` or `didNotConnect` follows. Throws `.badConfig` when already
    /// connected or connecting.
    public func connect(toHost host: String, port: UInt16) throws(SocketError) {
        try AddressResolver.checkHost(host)
        try onLoop { core throws(SocketError) in try core.connect(.host(host, port)) }
    }

    /// Connects to `address`, as `connect(toHost:port:)`.
    public func connect(toAddress address: SocketAddress) throws(SocketError) {
        guard address.family != .unix else { throw SocketError(.badParam, "UDP connects to IPv4 or IPv6 addresses") }
        try onLoop { core throws(SocketError) in try core.connect(.address(address)) }
    }

    // MARK: Sending

    /// Queues a datagram to the connected peer. Empty data sends an empty datagram.
    /// `timeout` (seconds, negative: none) counts from when the datagram reaches the head of
    /// the queue. The outcome comes as `didSendDataWithTag` or `didNotSendDataWithTag`
    /// (also for an unconnected socket).
    public func send(_ data: [UInt8], timeout: Double = -1, tag: Int = 0) throws(SocketError) {
        try send(borrowing: data, to: nil, timeout: timeout, tag: tag)
    }

    /// Queues a datagram to `host` (resolved off the loop; the address chosen by
    /// `addressPreference`).
    public func send(_ data: [UInt8], toHost host: String, port: UInt16, timeout: Double = -1,
                     tag: Int = 0) throws(SocketError) {
        try AddressResolver.checkHost(host)
        try queue(data.withUnsafeBytes { DatagramBytes(copying: $0) }, .host(host, port), timeout: timeout, tag: tag)
    }

    /// Queues a datagram to `address`.
    public func send(_ data: [UInt8], toAddress address: SocketAddress, timeout: Double = -1,
                     tag: Int = 0) throws(SocketError) {
        guard address.family != .unix else { throw SocketError(.badParam, "UDP sends to IPv4 or IPv6 addresses") }
        try send(borrowing: data, to: address, timeout: timeout, tag: tag)
    }

    private func send(borrowing data: [UInt8], to address: SocketAddress?, timeout: Double, tag: Int) throws(SocketError) {
        let failure = data.withUnsafeBytes { bytes -> SocketError? in
            do throws(SocketError) {
                try send(borrowing: bytes, to: address, timeout: timeout, tag: tag)
                return nil
            } catch {
                return error
            }
        }
        if let failure { throw failure }
    }

    /// Sends `bytes` (borrowed for the call) to `address`, or to the connected peer when nil.
    /// On the loop thread with nothing queued ahead, the bytes go to the kernel without a
    /// queued copy (see `UDPSocketCore.sendImmediately`); otherwise they are copied and
    /// queued. Either way the outcome comes as `didSend` / `didNotSend`.
    func send(borrowing bytes: UnsafeRawBufferPointer, to address: SocketAddress?, timeout: Double, tag: Int) throws(SocketError) {
        guard !timeout.isNaN else { throw SocketError(.badParam, "timeout is NaN") }
        guard bytes.count <= 65535 else {
            throw SocketError(.badParam, "a UDP datagram holds at most 65,535 bytes; this one has \(bytes.count)")
        }
        if eventLoop.inEventLoop && core.sendImmediately(bytes, to: address, timeout: timeout, tag: tag) { return }
        try queue(DatagramBytes(copying: bytes), address.map { .address($0) } ?? .connected, timeout: timeout, tag: tag)
    }

    func queue(_ bytes: DatagramBytes, _ destination: UdpDestination, timeout: Double, tag: Int) throws(SocketError) {
        guard !timeout.isNaN else { throw SocketError(.badParam, "timeout is NaN") }
        guard bytes.count <= 65535 else {
            throw SocketError(.badParam, "a UDP datagram holds at most 65,535 bytes; this one has \(bytes.count)")
        }
        let core = UncheckedSendable(self.core)
        let item = UncheckedSendable(bytes)
        if eventLoop.inEventLoop {
            core.value.send(bytes, to: destination, timeout: timeout, tag: tag)
            return
        }
        let target = UncheckedSendable(destination)
        guard eventLoop.execute({ core.value.send(item.value, to: target.value, timeout: timeout, tag: tag) }) else {
            throw SocketError(.badConfig, "the socket's event loop has stopped")
        }
    }

    /// Sets (or with nil removes) the send filter. Synchronous filters run on the socket's
    /// loop thread as each datagram is sent (`queue` must be nil); asynchronous ones on
    /// `queue` (nil: the socket's callback queue), in order. A datagram the filter refuses
    /// is dropped and still reported as sent (as upstream).
    public func setSendFilter(_ filter: UdpSendFilter?, queue: CallbackQueue? = nil,
                              isAsynchronous: Bool = true) throws(SocketError) {
        let entry = try filterEntry(filter, queue: queue, isAsynchronous: isAsynchronous)
        try onLoop { core throws(SocketError) in core.setSendFilter(entry) }
    }

    /// A filter as the core keeps it; a synchronous one runs on the loop and takes no queue.
    private func filterEntry<Filter>(_ filter: Filter?, queue: CallbackQueue?,
                                     isAsynchronous: Bool) throws(SocketError) -> (filter: Filter, queue: CallbackQueue?, async: Bool)? {
        if !isAsynchronous, let queue, !queue.runsOnEventLoop {
            throw SocketError(.badParam, "a synchronous filter runs on the socket's loop: pass no queue")
        }
        return filter.map { (filter: $0, queue: queue, async: isAsynchronous) }
    }

    // MARK: Receiving

    /// Delivers the next datagram (one the receive filter keeps), then stops. Throws
    /// `.badConfig` before the socket has descriptors (bind, connect or send first).
    public func receiveOnce() throws(SocketError) {
        try onLoop { core throws(SocketError) in try core.setReceiveMode(.once) }
    }

    /// Delivers every datagram until `pauseReceiving()` or close.
    public func beginReceiving() throws(SocketError) {
        try onLoop { core throws(SocketError) in try core.setReceiveMode(.continuous) }
    }

    /// Stops reading from the kernel (datagrams wait there); callbacks already queued may
    /// still arrive.
    public func pauseReceiving() {
        onLoopOrQueued { try? $0.setReceiveMode(.off) }
    }

    /// Sets (or removes) the receive filter; threads as for `setSendFilter`. In receive-once
    /// mode a dropped datagram does not count, and reading pauses while an asynchronous
    /// verdict is pending.
    public func setReceiveFilter(_ filter: UdpReceiveFilter?, queue: CallbackQueue? = nil,
                                 isAsynchronous: Bool = true) throws(SocketError) {
        let entry = try filterEntry(filter, queue: queue, isAsynchronous: isAsynchronous)
        try onLoop { core throws(SocketError) in core.setReceiveFilter(entry) }
    }

    // MARK: Multicast, broadcast, reuse

    /// Joins `group` (a numeric IPv4 or IPv6 address) on `interface` (nil: the kernel's
    /// choice; a name, "localhost", or an IP address of one). Each family joins on its own
    /// descriptor; the other family stays open. Needs a bound, unconnected socket.
    public func joinMulticastGroup(_ group: String, onInterface interface: String? = nil) throws(SocketError) {
        try onLoop { core throws(SocketError) in try core.joinOrLeave(join: true, group: group, interface: interface) }
    }

    public func leaveMulticastGroup(_ group: String, onInterface interface: String? = nil) throws(SocketError) {
        try onLoop { core throws(SocketError) in try core.joinOrLeave(join: false, group: group, interface: interface) }
    }

    /// Source-specific multicast (RFC 4607, IGMPv3/MLDv2): receive what `source` sends to
    /// `group`, and nothing others send to it (`MCAST_JOIN_SOURCE_GROUP`); both numeric, of
    /// one family (IPv4's SSM range is 232.0.0.0/8, IPv6's ff3x::/96). The same rules as
    /// `joinMulticastGroup` otherwise (bound, not connected, each family on its own
    /// descriptor). Joining several sources of a group is allowed; a group joined without a
    /// source cannot also be joined with one (EINVAL from the kernel). Throws `.badParam`
    /// for a group or source that is not a numeric address, or of different families.
    public func joinMulticastGroup(_ group: String, source: String, onInterface interface: String? = nil) throws(SocketError) {
        try onLoop { core throws(SocketError) in
            try core.joinOrLeaveSource(join: true, group: group, source: source, interface: interface)
        }
    }

    /// Stops receiving what `source` sends to `group` (`MCAST_LEAVE_SOURCE_GROUP`);
    /// `.system` when not joined (the kernel's EADDRNOTAVAIL, or EINVAL when the group has
    /// no source joined).
    public func leaveMulticastGroup(_ group: String, source: String, onInterface interface: String? = nil) throws(SocketError) {
        try onLoop { core throws(SocketError) in
            try core.joinOrLeaveSource(join: false, group: group, source: source, interface: interface)
        }
    }

    /// Packet info (IP_PKTINFO / IPV6_RECVPKTINFO; off by default): each datagram comes
    /// with the address it was sent to and the interface it arrived on, through
    /// `udpSocket(_:didReceive:fromAddress:packetInfo:withFilterContext:)`. Applies to the
    /// descriptors there are and those made later; datagrams already queued in the kernel
    /// when it is turned on come without it (through the method without `packetInfo`).
    public func setReceivesPacketInfo(_ enabled: Bool) throws(SocketError) {
        try onLoop { core throws(SocketError) in try core.setReceivesPacketInfo(enabled) }
    }

    /// Whether packet info is on (`setReceivesPacketInfo`).
    public var receivesPacketInfo: Bool {
        (try? onLoop { core throws(SocketError) in core.receivesPacketInfo }) ?? false
    }

    /// UDP segmentation offload (`UDP_SEGMENT`; 0, the default: off): each datagram sent
    /// larger than `size` bytes leaves as datagrams of `size` bytes (the last shorter), cut
    /// by the kernel (or the network card) after one trip through the stack, instead of one
    /// send per datagram. A datagram of `size` or less goes as it is. The kernel's limits
    /// hold: at most 64 segments, and `size` plus headers within the route's MTU; sends
    /// beyond them fail alone (`didNotSendDataWithTag`, `.system` EINVAL or EMSGSIZE).
    /// Applies to the descriptors there are and those made later. Throws `.badParam`
    /// outside 0...65535, `.system` ENOPROTOOPT on a kernel without it (before 4.18):
    /// there is no silent fallback, as the datagrams the peer sees would differ.
    public func setSendSegmentSize(_ size: Int) throws(SocketError) {
        try onLoop { core throws(SocketError) in try core.setSendSegmentSize(size) }
    }

    /// The segment size set with `setSendSegmentSize` (0: off).
    public var sendSegmentSize: Int {
        (try? onLoop { core throws(SocketError) in Int(core.sendSegmentSize) }) ?? 0
    }

    /// UDP receive offload (`UDP_GRO`; off by default): the kernel may hand over several
    /// datagrams of one sender in one buffer, saving a trip through the stack per datagram;
    /// SocketKit cuts them apart again, so the delegate sees the same datagrams, in order,
    /// each held to the receive limit. In receive-once mode the datagrams of one such buffer
    /// come together. Throws `.system` ENOPROTOOPT on a kernel without it (before 5.0).
    public func setReceiveOffload(_ enabled: Bool) throws(SocketError) {
        try onLoop { core throws(SocketError) in try core.setReceiveOffload(enabled) }
    }

    /// Whether receive offload is on (`setReceiveOffload`).
    public var receiveOffload: Bool {
        (try? onLoop { core throws(SocketError) in core.receiveOffload }) ?? false
    }

    /// The interface IPv4 multicast leaves through (IP_MULTICAST_IF).
    public func sendIPv4Multicast(onInterface interface: String) throws(SocketError) {
        try onLoop { core throws(SocketError) in try core.setMulticastInterface(interface, family: .ipv4) }
    }

    /// The interface IPv6 multicast leaves through (IPV6_MULTICAST_IF).
    public func sendIPv6Multicast(onInterface interface: String) throws(SocketError) {
        try onLoop { core throws(SocketError) in try core.setMulticastInterface(interface, family: .ipv6) }
    }

    /// Multicast TTL (IPv4) and hop limit (IPv6), 0...255 (kernel default 1).
    public func setMulticastTTL(_ ttl: Int) throws(SocketError) {
        guard (0...255).contains(ttl) else { throw SocketError(.badParam, "multicast TTL / hop limit must be 0...255") }
        try onLoop { core throws(SocketError) in try core.setMulticastTTL(Int32(ttl)) }
    }

    /// Whether this host's own multicast comes back to it (kernel default: yes).
    public func setMulticastLoopback(_ enabled: Bool) throws(SocketError) {
        try onLoop { core throws(SocketError) in try core.setMulticastLoopback(enabled) }
    }

    /// SO_BROADCAST on the IPv4 descriptor (IPv6 has no broadcast).
    public func enableBroadcast(_ enabled: Bool) throws(SocketError) {
        try onLoop { core throws(SocketError) in try core.setBroadcast(enabled) }
    }

    /// SO_REUSEPORT (several sockets bound to one port); call before binding.
    public func enableReusePort(_ enabled: Bool) throws(SocketError) {
        try onLoop { core throws(SocketError) in try core.setReusePort(enabled) }
    }

    /// SO_REUSEADDR; call before binding. Off by default: on Linux it lets UDP sockets
    /// share a port silently (upstream turns it on, which hides "port in use").
    public func enableReuseAddress(_ enabled: Bool) throws(SocketError) {
        try onLoop { core throws(SocketError) in try core.setReuseAddress(enabled) }
    }

    // MARK: Closing

    /// Closes now: queued datagrams are dropped without callbacks; `udpSocketDidClose`
    /// (nil) follows if the socket had descriptors. The socket can be used again.
    public func close() {
        onLoopOrQueued { $0.closeSocket(error: nil, announce: true) }
    }

    /// Closes once every queued datagram (and any queued after this call) has been sent.
    ///
    /// Dropping the last reference afterwards still sends them, as a TCP socket's release
    /// after `disconnectAfterWriting` sends its queued writes (the lingering close): those
    /// waiting for a name too, each within its own timeout and all within two minutes, then
    /// the descriptors close; receiving stops, and the delegate hears nothing more. Not
    /// with a send filter set: it would be called after the release, so the release drops
    /// the queue. A loop that stops ends it.
    public func closeAfterSending() {
        onLoopOrQueued { $0.setCloseAfterSending() }
    }

    // MARK: Diagnostics

    /// One snapshot of what the loop last published.
    private var state: UdpPublished { core.snapshot }

    /// The IPv4 local address if the socket has one, else the IPv6 one.
    public var localAddress: SocketAddress? { let s = state; return s.local4 ?? s.local6 }
    public var localHost: String? { localAddress?.host }
    public var localPort: UInt16 { localAddress?.port ?? 0 }
    public var localAddressIPv4: SocketAddress? { state.local4 }
    public var localAddressIPv6: SocketAddress? { state.local6 }
    public var localPortIPv4: UInt16 { state.local4?.port ?? 0 }
    public var localPortIPv6: UInt16 { state.local6?.port ?? 0 }
    public var connectedAddress: SocketAddress? { state.connectedAddress }
    public var connectedHost: String? { state.connectedAddress?.host }
    public var connectedPort: UInt16 { state.connectedAddress?.port ?? 0 }
    public var isConnected: Bool { state.isConnected }
    /// True while the socket has no descriptor (fresh, or closed).
    public var isClosed: Bool { let s = state; return !s.has4 && !s.has6 }
    /// With descriptors: whether an IPv4 one exists; before: whether IPv4 is enabled.
    public var isIPv4: Bool { let s = state; return isClosed ? s.configuration.isIPv4Enabled : s.has4 }
    public var isIPv6: Bool { let s = state; return isClosed ? s.configuration.isIPv6Enabled : s.has6 }
    /// The descriptors (-1 where absent).
    public var descriptors: SocketDescriptors { state.descriptors }

    /// Runs `body` on the socket's loop with its descriptors. Do not close them.
    public func perform(_ body: @escaping @Sendable (SocketDescriptors) -> Void) {
        let core = UncheckedSendable(self.core)
        if eventLoop.inEventLoop { body(core.value.descriptors); return }
        _ = eventLoop.execute { body(core.value.descriptors) }
    }

    // MARK: Delivery (called by the core on the loop thread; see CallbackRouter.swift)

    /// A send made in one of this socket's callbacks on the loop may fail at once: its
    /// event waits for a task after that callback.
    static var coreRaisesEventsInsideCallbacks: Bool { true }

    func call(_ receiver: UdpSocketEventReceiver, with event: UdpSocketEvent) {
        receiver.receive(event, on: self)
    }

    func receiverChanged(to receiver: UdpSocketEventReceiver?) {
        core.ownerWantsSendCompletions.store(receiver?.wantsSendCompletions ?? false, ordering: .relaxed)
    }

    /// Delivers a received datagram to `receiver` (from `directReceiver`) now, as
    /// `route(.didReceive(...))` would (see `UdpSocketEventReceiver.receiveDatagram` and
    /// `deliverDirectly`). Loop thread only.
    @inline(__always)
    func deliverReceived(_ bytes: UnsafeRawBufferPointer, from name: UnsafeRawPointer, length: socklen_t,
                         to receiver: UdpSocketEventReceiver, version: UInt32) -> Bool {
        deliverDirectly(version: version) { receiver.receiveDatagram(bytes, from: name, length: length, on: self) }
    }

    // MARK: Utilities

    /// The numeric host of raw `sockaddr` bytes (IPv4 or IPv6), or nil.
    public static func host(fromAddress bytes: [UInt8]) -> String? { SocketAddress(bytes: bytes)?.host }
    public static func port(fromAddress bytes: [UInt8]) -> UInt16 { SocketAddress(bytes: bytes)?.port ?? 0 }
    public static func isIPv4Address(_ bytes: [UInt8]) -> Bool { SocketAddress(bytes: bytes)?.family == .ipv4 }
    public static func isIPv6Address(_ bytes: [UInt8]) -> Bool { SocketAddress(bytes: bytes)?.family == .ipv6 }
}
