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
/// Threads: every method may be called from any thread. Sends and `perform` are queued and
/// answered through the delegate; getters read published state; every other call runs on
/// the socket's loop and returns its answer (bound after `bind`, closed after `close`): the
/// caller waits for the loop, inline on the loop's thread. No such wait can deadlock (see
/// `EventLoop`): when the loop's thread is itself waiting for the caller through a loop of
/// its own, a call that returns an answer throws `.badConfig` with `EDEADLK` and has no
/// effect, and one that does not is queued.
///
/// Text: a host, interface or multicast group holding a NUL character is refused
/// (`.badParam`): the system calls would see only the text before it.
public final class UdpSocket: WaitGraph.Target, @unchecked Sendable {
    /// The loop the socket lives on.
    public let eventLoop: EventLoop
    let core: UDPSocketCore

    private struct Routing {
        var queue: CallbackQueue
        var receiver: UdpSocketEventReceiver?
        var userData: AnyObject?
    }
    /// Guarded by the core's state lock (`core.withStateLock`).
    private nonisolated(unsafe) var routing: Routing
    /// Bumped, under the state lock, whenever the receiver or the callback queue changes: a
    /// receive batch that took the receiver once (`directReceiver`) sees it at its next datagram.
    private let routingVersion = Atomic<UInt32>(0)
    private let gate = InlineCallbackGate()
    private nonisolated(unsafe) var mailboxStorage: EventMailbox<UdpSocketEvent>? = nil
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

    init(receiver: UdpSocketEventReceiver?, callbackQueue: CallbackQueue, eventLoop: EventLoop?) {
        let loop = eventLoop ?? EventLoopGroup.default.next()
        self.eventLoop = loop
        core = UDPSocketCore(loop: loop)
        routing = Routing(queue: callbackQueue, receiver: receiver, userData: nil)
        core.ownerWantsSendCompletions.store(receiver?.wantsSendCompletions ?? false, ordering: .relaxed)
        core.attach(owner: self)
    }

    deinit {
        let core = UncheckedSendable(self.core)
        if !eventLoop.execute({ core.value.ownerReleased() }) {
            eventLoop.afterStopping { core.value.abandon() }
        }
    }

    // MARK: Delegate and queue

    /// The delegate, held weakly. Setting it is synchronous, as for `Socket.delegate`.
    public var delegate: UdpSocketDelegate? {
        get { (core.withStateLock { routing.receiver } as? SwiftUdpDelegateReceiver)?.delegate }
        set { setReceiver(SwiftUdpDelegateReceiver(newValue), callbackQueue: nil) }
    }

    /// Where callbacks run (and asynchronous filters given no queue of their own).
    public var callbackQueue: CallbackQueue {
        get { core.withStateLock { routing.queue } }
        set {
            core.withStateLock {
                routing.queue = newValue
                routingVersion.add(1, ordering: .relaxed)
            }
        }
    }

    public func setDelegate(_ delegate: UdpSocketDelegate?, callbackQueue: CallbackQueue) {
        setReceiver(SwiftUdpDelegateReceiver(delegate), callbackQueue: callbackQueue)
    }

    func setReceiver(_ receiver: UdpSocketEventReceiver?, callbackQueue: CallbackQueue?) {
        withGate {
            core.withStateLock {
                routing.receiver = receiver
                if let callbackQueue { routing.queue = callbackQueue }
                routingVersion.add(1, ordering: .relaxed)
            }
            core.ownerWantsSendCompletions.store(receiver?.wantsSendCompletions ?? false, ordering: .relaxed)
        }
    }

    /// Whether `didSend` events are wanted at all (loop thread; a receiver set meanwhile
    /// is seen by the next datagram).
    var wantsSendCompletions: Bool { core.ownerWantsSendCompletions.load(ordering: .relaxed) }

    var receiver: UdpSocketEventReceiver? { core.withStateLock { routing.receiver } }

    /// Anything you want to keep with the socket; never touched by SocketKit.
    public var userData: AnyObject? {
        get { core.withStateLock { routing.userData } }
        set { core.withStateLock { routing.userData = newValue } }
    }

    // MARK: Configuration (read when descriptors are made, names resolved, datagrams received)

    private var configuration: UdpConfiguration { core.withPublished { $0.configuration } }

    private func configure(_ change: (inout UdpConfiguration) -> Void) {
        core.withPublished { change(&$0.configuration) }
        // Applied before the setter returns: a datagram arriving next sees the new value.
        onLoopOrQueued { core throws(SocketError) in core.updateConfiguration() }
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
        if !isAsynchronous, let queue, !queue.runsOnEventLoop {
            throw SocketError(.badParam, "a synchronous filter runs on the socket's loop: pass no queue")
        }
        let entry = filter.map { (filter: $0, queue: queue, async: isAsynchronous) }
        try onLoop { core throws(SocketError) in core.setSendFilter(entry) }
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
        onLoopOrQueued { core throws(SocketError) in try core.setReceiveMode(.off) }
    }

    /// Sets (or removes) the receive filter; threads as for `setSendFilter`. In receive-once
    /// mode a dropped datagram does not count, and reading pauses while an asynchronous
    /// verdict is pending.
    public func setReceiveFilter(_ filter: UdpReceiveFilter?, queue: CallbackQueue? = nil,
                                 isAsynchronous: Bool = true) throws(SocketError) {
        if !isAsynchronous, let queue, !queue.runsOnEventLoop {
            throw SocketError(.badParam, "a synchronous filter runs on the socket's loop: pass no queue")
        }
        let entry = filter.map { (filter: $0, queue: queue, async: isAsynchronous) }
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
        onLoopOrQueued { core throws(SocketError) in core.closeSocket(error: nil, announce: true) }
    }

    /// Closes once every queued datagram (and any queued after this call) has been sent.
    public func closeAfterSending() {
        onLoopOrQueued { core throws(SocketError) in core.setCloseAfterSending() }
    }

    // MARK: Diagnostics

    private var state: UdpPublished { core.withPublished { $0 } }

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

    // MARK: Plumbing

    /// Runs `body` on the loop and returns its outcome: inline on the loop thread, else the
    /// caller waits for the loop (`EventLoop.runWaiting`). Throws `.badConfig` when the loop
    /// has stopped, and `.badConfig` with `EDEADLK` when the wait would deadlock (this thread
    /// runs a callback the loop's thread is waiting for, through a loop of its own: see
    /// `WaitGraph`); the call then has no effect.
    func onLoop(_ body: @escaping (UDPSocketCore) throws(SocketError) -> Void) throws(SocketError) {
        if let error = eventLoop.startupError { throw error }
        final class Outcome: @unchecked Sendable {
            var error: SocketError? = nil
        }
        let outcome = Outcome()
        let core = UncheckedSendable(self.core)
        let work = UncheckedSendable(body)
        switch eventLoop.runWaiting({
            do throws(SocketError) { try work.value(core.value) } catch { outcome.error = error }
        }) {
        case .ran:
            if let error = outcome.error { throw error }
        case .refused:
            throw SocketError(.badConfig, "the socket's event loop has stopped")
        case .wouldDeadlock:
            throw SocketError(.badConfig, osError: EDEADLK,
                              "the socket's event loop is waiting for this thread: waiting for it would deadlock")
        }
    }

    /// `onLoop` for the calls that return nothing (pause, close, settings): when waiting
    /// would deadlock, the call is queued for the loop instead, and takes effect when the
    /// loop gets to it.
    private func onLoopOrQueued(_ body: @escaping (UDPSocketCore) throws(SocketError) -> Void) {
        do throws(SocketError) {
            try onLoop(body)
        } catch where error.osError == EDEADLK {
            let core = UncheckedSendable(self.core)
            let work = UncheckedSendable(body)
            _ = eventLoop.execute { try? work.value(core.value) }
        } catch {
            // The loop has stopped (the socket is closed), or the call itself failed.
        }
    }

    /// Hands an event to the callback queue (see `Socket.deliver`).
    func deliver(_ event: UdpSocketEvent) {
        let queue = core.withStateLock { routing.queue }
        // Inside one of this socket's callbacks on the loop (it sent, say), the event waits
        // for a task after it: callbacks never nest.
        if queue.runsOnEventLoop && !(mailboxStorage?.isBusy ?? false) && !gate.isHeldByCurrentThread {
            deliverNow(event)
            return
        }
        let mailbox: EventMailbox<UdpSocketEvent>
        if let existing = mailboxStorage {
            mailbox = existing
        } else {
            mailbox = EventMailbox()
            mailboxStorage = mailbox
        }
        if mailbox.post(event.owned()) {
            queue.enqueue({ [weak self] budget in self?.drainMailbox(budget: budget) ?? 0 }, loop: eventLoop)
        }
    }

    /// The receiver a batch of received datagrams may hand them to directly
    /// (`deliverReceived`), and the routing version it belongs to: the callbacks run on the
    /// loop, none is waiting or running, and there is a receiver. nil: each datagram takes
    /// the general path (`deliver`). Taken once per batch, not per datagram: that was a
    /// retain and a release of the owner and of the receiver, and the state lock, for each
    /// (bench/callgrind.sh udp). Loop thread only.
    func directReceiver() -> (receiver: UdpSocketEventReceiver, version: UInt32)? {
        guard !(mailboxStorage?.isBusy ?? false), !gate.isHeldByCurrentThread else { return nil }
        return core.withStateLock {
            guard routing.queue.runsOnEventLoop, let receiver = routing.receiver else { return nil }
            return (receiver, routingVersion.load(ordering: .relaxed))
        }
    }

    /// Delivers a received datagram to `receiver` (from `directReceiver`) now, as
    /// `deliver(.didReceive(...))` would (see `UdpSocketEventReceiver.receiveDatagram`);
    /// false, with nothing done, when the routing has changed since (the caller asks
    /// `directReceiver` again) or an event waits for delivery (this one must follow it).
    /// Loop thread only.
    @inline(__always)
    func deliverReceived(_ bytes: UnsafeRawBufferPointer, from name: UnsafeRawPointer, length: socklen_t,
                         to receiver: UdpSocketEventReceiver, version: UInt32) -> Bool {
        guard !(mailboxStorage?.isBusy ?? false) else { return false }
        let key = gateKey
        gate.enter(key: key)
        // Read with the gate held: a receiver replaced from another thread (`setReceiver`
        // holds the gate while it does) is seen here, and the old one is not called.
        guard routingVersion.load(ordering: .relaxed) == version else {
            gate.leave(key: key)
            return false
        }
        receiver.receiveDatagram(bytes, from: name, length: length, on: self)
        gate.leave(key: key)
        return true
    }

    private func drainMailbox(budget: Int) -> Int {
        guard let mailbox = mailboxStorage else { return 0 }
        let events = mailbox.take(upTo: max(1, budget))
        for event in events {
            deliverNow(event)
        }
        if mailbox.finishDrain() {
            let queue = core.withStateLock { routing.queue }
            queue.enqueue({ [weak self] budget in self?.drainMailbox(budget: budget) ?? 0 }, loop: eventLoop)
        }
        return events.count
    }

    private func deliverNow(_ event: UdpSocketEvent) {
        let key = gateKey
        gate.enter(key: key)
        if let receiver = core.withStateLock({ routing.receiver }) { receiver.receive(event, on: self) }
        gate.leave(key: key)
    }

    // MARK: The callback gate

    /// Where a thread waiting for the gate sleeps (ParkingLot).
    private var gateKey: UInt { parkingKey(of: self) }

    /// The thread running one of this socket's callbacks (WaitGraph).
    var waitedThread: UInt { gate.holderThread }

    /// Runs `body` with the callback gate held (see `InlineCallbackGate`): directly when this
    /// thread already holds it, without it when waiting would deadlock.
    private func withGate<Result>(_ body: () throws -> Result) rethrows -> Result {
        try gate.withEntry(key: gateKey, holder: self, body)
    }

    // MARK: Utilities

    /// The numeric host of raw `sockaddr` bytes (IPv4 or IPv6), or nil.
    public static func host(fromAddress bytes: [UInt8]) -> String? { SocketAddress(bytes: bytes)?.host }
    public static func port(fromAddress bytes: [UInt8]) -> UInt16 { SocketAddress(bytes: bytes)?.port ?? 0 }
    public static func isIPv4Address(_ bytes: [UInt8]) -> Bool { SocketAddress(bytes: bytes)?.family == .ipv4 }
    public static func isIPv6Address(_ bytes: [UInt8]) -> Bool { SocketAddress(bytes: bytes)?.family == .ipv6 }
}
