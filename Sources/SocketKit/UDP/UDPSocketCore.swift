// SPDX-License-Identifier: MIT
import Glibc
import SocketKitC
import Synchronization

/// Settings of a UDP socket. Read when its descriptors are created (buffer sizes) or when a
/// datagram is received (receive limits) or a name resolved (families, preference).
struct UdpConfiguration: Sendable {
    var isIPv4Enabled = true
    var isIPv6Enabled = true
    var preference = UdpAddressPreference.neutral
    /// The largest datagram delivered per family (1...65535); larger ones are reported as
    /// truncated and dropped.
    var maxReceiveIPv4BufferSize = 65535
    var maxReceiveIPv6BufferSize = 65535
    /// SO_SNDBUF / SO_RCVBUF requested at creation (0: the kernel's default).
    var sendBufferSize = 0
    var receiveBufferSize = 0
}

/// What any thread may read without waiting for the loop.
struct UdpPublished: Sendable {
    var configuration = UdpConfiguration()
    var local4: SocketAddress? = nil
    var local6: SocketAddress? = nil
    var connectedAddress: SocketAddress? = nil
    var has4 = false
    var has6 = false
    var isConnected = false
    var descriptors = SocketDescriptors()
}

/// One family's descriptor, registered with the loop.
final class UDPChannel: EventLoopHandler {
    let fd: Int32
    let family: SocketAddress.Family
    var registration: RegistrationID? = nil
    var events: UInt32 = 0
    var local: SocketAddress? = nil {
        didSet { hasLocalPort = local.map { $0.port != 0 } ?? false }
    }
    /// `local` is known and has its port (the kernel picks one at the first send).
    private(set) var hasLocalPort = false
    /// Unowned, not weak (a weak reference gives the core a side table and sends every
    /// retain of it down the runtime's slow path): the core sets this to nil when it closes
    /// the channel, and it closes its channels before it goes (`ownerReleased`,
    /// `loopWillStop`, or at the latest its deinit).
    unowned var core: UDPSocketCore?

    init(fd: Int32, family: SocketAddress.Family) {
        self.fd = fd
        self.family = family
    }

    func handleEvents(_ events: UInt32) { core?.handle(self, events: events) }
    func eventLoopWillStop() { core?.loopWillStop() }
}

/// A destination as queued.
enum UdpDestination {
    case connected
    case address(SocketAddress)
    case host(String, UInt16)
}

/// A queued datagram's bytes, in memory of their own so a batch can point at many at once.
final class DatagramBytes {
    let bytes: UnsafeMutableRawBufferPointer

    init(copying source: UnsafeRawBufferPointer) {
        bytes = .allocate(byteCount: max(source.count, 1), alignment: 1)
        if source.count > 0 { bytes.copyMemory(from: source) }
        count = source.count
    }

    let count: Int
    var view: UnsafeRawBufferPointer { UnsafeRawBufferPointer(start: bytes.baseAddress, count: count) }

    deinit { bytes.deallocate() }
}

/// The UDP engine of one socket. Loop-confined: every method runs on `loop`'s thread, the
/// only writer of its state, the published part included (`publishState`); other threads
/// read that through `snapshot`, and touch only the atomics.
final class UDPSocketCore: SocketCore {
    let loop: EventLoop
    /// The user-facing UdpSocket (see `owner`).
    private var ownerReference = OwnerReference<UdpSocket>()
    /// Guards `publishedState` and the owning UdpSocket's routing (delegate, queue, user
    /// data). Never held around user code.
    let stateLock = InlineLock()
    /// Written by the loop only, under `stateLock` (`publishState`, `configure`).
    nonisolated(unsafe) var publishedState = UdpPublished()
    /// Whether the owner's receiver listens for `didSend`: read by the loop without a lock
    /// or a reference to the owner.
    let ownerWantsSendCompletions = Atomic<Bool>(false)

    private var v4: UDPChannel? = nil
    private var v6: UDPChannel? = nil
    /// Families given up by a bind to one family or by a connect (until close).
    private var deactivated4 = false
    private var deactivated6 = false
    private var bound = false
    private var connected = false
    private var connectQueued = false
    private var connectedAddress: SocketAddress? = nil
    /// Bumped by close: async completions of an earlier session are dropped.
    private var generation: UInt64 = 0
    private var released = false

    // Sending.
    private enum Item {
        case datagram(DatagramBytes, UdpDestination, tag: Int, timeout: Double)
        case connect(UdpDestination)
    }
    private struct Queued {
        let id: UInt64
        var item: Item
        var resolved: SocketAddress? = nil
        var filtered = false
    }
    private var queue: [Queued] = []
    private var head = 0
    private var nextID: UInt64 = 1
    private enum Phase { case idle, resolving, filtering, waitingWritable }
    private var phase = Phase.idle
    /// While a datagram waits for a name's answer: the loop's record of this socket, which
    /// may have no descriptor yet (a stopping loop must end it all the same).
    private var resolvingRegistration: RegistrationID? = nil
    private var timedItem: UInt64 = 0
    private var timer: LoopTimer? = nil
    private var closeAfterSending = false
    /// Bounds a released socket's last datagrams (`ownerReleased`).
    private var lingerTimer: LoopTimer? = nil
    /// A released socket's core sending its last datagrams (`ownerReleased`) keeps itself
    /// alive until its close lets go of this reference.
    private var lingeringCore: UDPSocketCore? = nil

    // Receiving.
    enum ReceiveMode { case off, once, continuous }
    private(set) var receiveMode = ReceiveMode.off
    private var asyncFiltersPending = 0
    private var receiveFilter: (filter: UdpReceiveFilter, queue: CallbackQueue?, async: Bool)? = nil
    private var sendFilter: (filter: UdpSendFilter, queue: CallbackQueue?, async: Bool)? = nil

    // Options remembered for descriptors made later.
    private var broadcast = false
    private var reusePort = false
    private var reuseAddress = false
    /// IP_PKTINFO / IPV6_RECVPKTINFO: each datagram's destination and interface go with it.
    private(set) var receivesPacketInfo = false
    /// UDP_GRO: coalesced buffers are cut back into their datagrams on receipt.
    private(set) var receiveOffload = false
    /// UDP_SEGMENT (0: off): the kernel cuts each send into datagrams of this size.
    private(set) var sendSegmentSize: UInt16 = 0
    private var multicastTTL: Int32? = nil
    private var multicastLoopback: Bool? = nil
    private var multicastInterface4: Int32? = nil
    private var multicastInterface6: Int32? = nil

    init(loop: EventLoop) {
        self.loop = loop
    }

    deinit {
        // The channels are normally closed by `ownerReleased` or `loopWillStop`; whatever
        // happens, none may point at a core that is gone.
        v4?.core = nil
        v6?.core = nil
    }

    // MARK: The owner and the shared state

    /// The user-facing socket, strongly held for the caller's use; nil once the user
    /// released it (its deinit has begun).
    ///
    /// Not a weak reference (see `OwnerReference`).
    var owner: UdpSocket? { ownerReference.load() }

    /// Called once, by the UdpSocket's initializer.
    func attach(owner: UdpSocket) { ownerReference.attach(owner) }

    // MARK: Configuration

    /// The settings (loop thread; other threads: `snapshot`).
    private var configuration: UdpConfiguration { publishedState.configuration }

    /// The loop side of `UdpSocket`'s setters.
    func configure(_ change: (inout UdpConfiguration) -> Void) {
        publish { change(&$0.configuration) }
    }

    // MARK: Descriptors

    private func channel(_ family: SocketAddress.Family) -> UDPChannel? { family == .ipv4 ? v4 : v6 }

    private func isUsable(_ family: SocketAddress.Family) -> Bool {
        switch family {
        case .ipv4: return configuration.isIPv4Enabled && !deactivated4
        case .ipv6: return configuration.isIPv6Enabled && !deactivated6
        case .unix: return false
        }
    }

    /// The family's descriptor, made on first use (an unbound socket gets its port from the
    /// kernel on the first send).
    private func ensureChannel(_ family: SocketAddress.Family) throws(SocketError) -> UDPChannel {
        if let existing = channel(family) { return existing }
        guard isUsable(family) else {
            let name = family == .ipv4 ? "IPv4" : "IPv6"
            if bound || connected {
                throw SocketError(.other, "the socket is bound or connected without \(name)")
            }
            throw SocketError(.other, "\(name) is disabled on this socket")
        }
        let made = try makeChannel(family)
        if family == .ipv4 { v4 = made } else { v6 = made }
        publishState()
        return made
    }

    private func makeChannel(_ family: SocketAddress.Family) throws(SocketError) -> UDPChannel {
        if let error = loop.startupError { throw error }
        let fd = socket(family == .ipv4 ? AF_INET : AF_INET6, Int32(SOCK_DGRAM.rawValue) | SystemCalls.nonBlockingFlags, 0)
        guard fd >= 0 else { throw SocketError.lastSystemError("socket") }
        do throws(SocketError) {
            if reuseAddress { try SystemCalls.setOption(fd, SOL_SOCKET, SO_REUSEADDR, 1, "SO_REUSEADDR") }
            if family == .ipv6 {
                try SystemCalls.setOption(fd, Int32(IPPROTO_IPV6), IPV6_V6ONLY, 1, "IPV6_V6ONLY")
            }
            if reusePort { try SystemCalls.setOption(fd, SOL_SOCKET, SO_REUSEPORT, 1, "SO_REUSEPORT") }
            if broadcast && family == .ipv4 {
                try SystemCalls.setOption(fd, SOL_SOCKET, SO_BROADCAST, 1, "SO_BROADCAST")
            }
            if configuration.sendBufferSize > 0 {
                try SystemCalls.setOption(fd, SOL_SOCKET, SO_SNDBUF, Int32(clamping: configuration.sendBufferSize), "SO_SNDBUF")
            }
            if configuration.receiveBufferSize > 0 {
                try SystemCalls.setOption(fd, SOL_SOCKET, SO_RCVBUF, Int32(clamping: configuration.receiveBufferSize), "SO_RCVBUF")
            }
            try applyMulticastOptions(fd, family)
            if receivesPacketInfo { try UDPSocketCore.setPacketInfo(fd, family, true) }
            if receiveOffload { try UDPSocketCore.setReceiveOffload(fd, true) }
            if sendSegmentSize > 0 { try UDPSocketCore.setSegmentSize(fd, Int32(sendSegmentSize)) }
            let made = UDPChannel(fd: fd, family: family)
            made.core = self
            made.events = wantedEvents(made)
            made.registration = try loop.register(fd: fd, events: made.events, handler: made)
            return made
        } catch {
            close(fd)
            throw error
        }
    }

    private func applyMulticastOptions(_ fd: Int32, _ family: SocketAddress.Family) throws(SocketError) {
        if family == .ipv4 {
            if let ttl = multicastTTL { try SystemCalls.setOption(fd, Int32(IPPROTO_IP), IP_MULTICAST_TTL, ttl, "IP_MULTICAST_TTL") }
            if let loopback = multicastLoopback {
                try SystemCalls.setOption(fd, Int32(IPPROTO_IP), IP_MULTICAST_LOOP, loopback ? 1 : 0, "IP_MULTICAST_LOOP")
            }
            if let index = multicastInterface4 { try setIPv4MulticastInterface(fd, index: index) }
        } else {
            if let ttl = multicastTTL { try SystemCalls.setOption(fd, Int32(IPPROTO_IPV6), IPV6_MULTICAST_HOPS, ttl, "IPV6_MULTICAST_HOPS") }
            if let loopback = multicastLoopback {
                try SystemCalls.setOption(fd, Int32(IPPROTO_IPV6), IPV6_MULTICAST_LOOP, loopback ? 1 : 0, "IPV6_MULTICAST_LOOP")
            }
            if let index = multicastInterface6 {
                try SystemCalls.setOption(fd, Int32(IPPROTO_IPV6), IPV6_MULTICAST_IF, index, "IPV6_MULTICAST_IF")
            }
        }
    }

    private func setIPv4MulticastInterface(_ fd: Int32, index: Int32) throws(SocketError) {
        var request = ip_mreqn()
        request.imr_ifindex = index
        let result = setsockopt(fd, Int32(IPPROTO_IP), IP_MULTICAST_IF, &request, socklen_t(MemoryLayout<ip_mreqn>.size))
        guard result == 0 else { throw SocketError.lastSystemError("setsockopt(IP_MULTICAST_IF)") }
    }

    private func closeChannel(_ family: SocketAddress.Family) {
        guard let existing = channel(family) else { return }
        if let registration = existing.registration { loop.deregister(registration, fd: existing.fd) }
        existing.core = nil
        close(existing.fd)
        if family == .ipv4 { v4 = nil } else { v6 = nil }
    }

    private func wantedEvents(_ channel: UDPChannel) -> UInt32 {
        var events: UInt32 = 0
        if receiveMode != .off && !(receiveMode == .once && asyncFiltersPending > 0) { events |= EPOLLIN.rawValue }
        if phase == .waitingWritable, let current = currentChannelFamily, current == channel.family { events |= EPOLLOUT.rawValue }
        return events
    }

    private var currentChannelFamily: SocketAddress.Family? = nil

    private func updateInterest() {
        for case let existing? in [v4, v6] {
            let wanted = wantedEvents(existing)
            guard wanted != existing.events, let registration = existing.registration else { continue }
            existing.events = wanted
            try? loop.modify(registration, fd: existing.fd, events: wanted)
        }
    }

    /// Publishes the descriptors, local addresses and connection: the one place that
    /// writes them (closing included).
    private func publishState() {
        if let v4, !v4.hasLocalPort { v4.local = SystemCalls.localAddress(v4.fd) }
        if let v6, !v6.hasLocalPort { v6.local = SystemCalls.localAddress(v6.fd) }
        let snapshot = (v4?.local, v6?.local, v4?.fd ?? -1, v6?.fd ?? -1)
        publish { state in
            state.local4 = snapshot.0
            state.local6 = snapshot.1
            state.has4 = snapshot.2 >= 0
            state.has6 = snapshot.3 >= 0
            state.connectedAddress = connectedAddress
            state.isConnected = connected
            state.descriptors = SocketDescriptors(primary: snapshot.2 >= 0 ? snapshot.2 : snapshot.3,
                                                  ipv4: snapshot.2, ipv6: snapshot.3, unix: -1)
        }
    }

    var descriptors: SocketDescriptors {
        SocketDescriptors(primary: v4?.fd ?? v6?.fd ?? -1, ipv4: v4?.fd ?? -1, ipv6: v6?.fd ?? -1, unix: -1)
    }

    // MARK: Binding

    func bind(port: UInt16, interface: String?) throws(SocketError) {
        try checkBindable()
        let endpoints = try Interfaces.endpoints(for: interface, port: port)
        let use4 = endpoints.ipv4 != nil && isUsable(.ipv4)
        let use6 = endpoints.ipv6 != nil && isUsable(.ipv6)
        guard use4 || use6 else {
            throw SocketError(.badParam, "no enabled address family has an address on '\(interface ?? "any")'")
        }
        var attempt = 0
        while true {
            attempt += 1
            do throws(SocketError) {
                var chosenPort = port
                if use4, let address = endpoints.ipv4 {
                    let made = try ensureChannel(.ipv4)
                    try SystemCalls.bind(made.fd, to: address)
                    if port == 0 { chosenPort = SystemCalls.localAddress(made.fd)?.port ?? 0 }
                }
                if use6, let address = endpoints.ipv6 {
                    let made = try ensureChannel(.ipv6)
                    try SystemCalls.bind(made.fd, to: address.withPort(chosenPort))
                }
                break
            } catch {
                closeChannel(.ipv4)
                closeChannel(.ipv6)
                // Port 0: the port the kernel gave IPv4 may be taken on IPv6; try another.
                if port == 0 && use4 && use6 && error.osError == EADDRINUSE && attempt < 8 { continue }
                publishState()
                throw error
            }
        }
        if !use4 { closeChannel(.ipv4); deactivated4 = true }
        if !use6 { closeChannel(.ipv6); deactivated6 = true }
        bound = true
        publishState()
    }

    func bind(address: SocketAddress) throws(SocketError) {
        try checkBindable()
        guard address.family != .unix else { throw SocketError(.badParam, "UDP binds IPv4 or IPv6 addresses") }
        guard isUsable(address.family) else {
            throw SocketError(.badParam, "\(address.family == .ipv4 ? "IPv4" : "IPv6") is disabled on this socket")
        }
        let made = try ensureChannel(address.family)
        do throws(SocketError) {
            try SystemCalls.bind(made.fd, to: address)
        } catch {
            closeChannel(address.family)
            publishState()
            throw error
        }
        let other: SocketAddress.Family = address.family == .ipv4 ? .ipv6 : .ipv4
        closeChannel(other)
        if other == .ipv4 { deactivated4 = true } else { deactivated6 = true }
        bound = true
        publishState()
    }

    private func checkBindable() throws(SocketError) {
        guard !bound else { throw SocketError(.badConfig, "the socket is already bound") }
        guard !connected && !connectQueued else { throw SocketError(.badConfig, "bind before connecting") }
        for case let existing? in [v4, v6] where (SystemCalls.localAddress(existing.fd)?.port ?? 0) != 0 {
            throw SocketError(.badConfig, "the socket is already bound (implicitly, by an earlier send); bind first")
        }
        guard configuration.isIPv4Enabled || configuration.isIPv6Enabled else {
            throw SocketError(.badConfig, "both IPv4 and IPv6 are disabled")
        }
    }

    // MARK: Connecting and sending (the send queue)

    func connect(_ destination: UdpDestination) throws(SocketError) {
        guard !connected && !connectQueued else { throw SocketError(.badConfig, "the socket is already connected") }
        guard configuration.isIPv4Enabled || configuration.isIPv6Enabled else {
            throw SocketError(.badConfig, "both IPv4 and IPv6 are disabled")
        }
        connectQueued = true
        append(.connect(destination))
    }

    func send(_ bytes: DatagramBytes, to destination: UdpDestination, timeout: Double, tag: Int) {
        guard !released else { return }
        append(.datagram(bytes, destination, tag: tag, timeout: timeout))
    }

    private func append(_ item: Item) {
        // Datagrams staged by the fast path were sent first: they leave before this one.
        if stagedCount > 0 { flushStagedSends() }
        queue.append(Queued(id: nextID, item: item))
        nextID += 1
        pumpSends()
    }

    func setCloseAfterSending() {
        // Datagrams staged by this very callback go out (and are reported) before the close.
        if stagedCount > 0 { flushStagedSends() }
        closeAfterSending = true
        pumpSends()
    }

    // MARK: The send fast path

    /// Sends a datagram without queueing a copy, when nothing is queued ahead of it: the
    /// echo pattern (send from `didReceive`) then costs no allocation. Inside this socket's
    /// own receive batch the datagram is staged in the loop's scratch and leaves with the
    /// others of the batch in one `sendmmsg` when the batch ends (`flushStagedSends`);
    /// otherwise it goes out now with one `sendto`. Returns false when the caller must take
    /// the queue: something is queued or in progress, a filter or resolution is involved,
    /// the family has no descriptor yet, or the kernel is full. A datagram the kernel refuses
    /// gets `didNotSend` here. Loop thread only.
    func sendImmediately(_ bytes: UnsafeRawBufferPointer, to address: SocketAddress?, timeout: Double, tag: Int) -> Bool {
        guard mayTakeFastPath else { return false }
        let destination: SocketAddress
        if let address {
            guard !connected, !connectQueued else { return false }
            destination = address
        } else {
            guard connected, let connectedAddress else { return false }
            destination = connectedAddress
        }
        guard destination.family != .unix else { return false }
        return destination.withSockAddr { name, length in
            sendImmediately(bytes, name: name, length: length, family: destination.family, timeout: timeout, tag: tag)
        }
    }

    /// `sendImmediately(_:to:timeout:tag:)` for an unconnected socket and a destination the
    /// caller has as a raw `sockaddr_in` / `sockaddr_in6` of `family` (the C API's
    /// `sk_udp_socket_send_to_address` from a receive callback): no `SocketAddress` is made.
    func sendImmediately(_ bytes: UnsafeRawBufferPointer, toUnconnected name: UnsafePointer<sockaddr>, length: socklen_t,
                         family: SocketAddress.Family, timeout: Double, tag: Int) -> Bool {
        guard mayTakeFastPath, !connected, !connectQueued else { return false }
        return sendImmediately(bytes, name: name, length: length, family: family, timeout: timeout, tag: tag)
    }

    /// Nothing is queued or in progress ahead of a new datagram, and nothing would look at it.
    private var mayTakeFastPath: Bool {
        !released && head >= queue.count && phase == .idle && sendFilter == nil && !closeAfterSending
    }

    private func sendImmediately(_ bytes: UnsafeRawBufferPointer, name: UnsafePointer<sockaddr>, length: socklen_t,
                                 family: SocketAddress.Family, timeout: Double, tag: Int) -> Bool {
        // The descriptor, not the channel: holding the channel object across the body cost a
        // retain and a release per datagram.
        guard isUsable(family), let fd = channel(family)?.fd else { return false }
        let scratch = loop.udpScratch
        if receivingBatch && (scratch.stagingOwner == nil || scratch.stagingOwner == ObjectIdentifier(self)) {
            if stagedCount > 0 && (stagedFamily != family || !scratch.canStage(byteCount: bytes.count)) {
                flushStagedSends()
                guard head >= queue.count, phase == .idle, !released else { return false }
            }
            scratch.stage(bytes, toName: connected ? nil : UnsafeRawPointer(name), length: length, tag: tag, timeout: timeout)
            scratch.stagingOwner = ObjectIdentifier(self)
            stagedFamily = family
            return true
        }
        let sent = skc_sendto(fd, bytes.baseAddress, bytes.count, SystemCalls.sendFlags, connected ? nil : name,
                          connected ? 0 : length)
        if sent < 0 {
            let number = errno
            // Full or interrupted: the queue waits for the socket and tries again. Any other
            // error belongs to this datagram (a retry would not see a consumed ICMP error again).
            if number == EAGAIN || number == EWOULDBLOCK || number == ENOBUFS || number == EINTR { return false }
            let destination = SocketAddress(storage: name, length: length).map { "\($0)" } ?? "?"
            report(.didNotSend(tag: tag, SocketError.systemError(number, "sendto(\(destination))")))
            return true
        }
        if !(channel(family)?.hasLocalPort ?? true) { publishState() }
        if ownerWantsSendCompletions.load(ordering: .relaxed) { report(.didSend(tag: tag)) }
        return true
    }

    /// True while this socket delivers a batch of received datagrams: sends from its
    /// callbacks are staged.
    private var receivingBatch = false
    private var stagedFamily = SocketAddress.Family.ipv4
    private var stagedCount: Int {
        guard let scratch = loop.udpScratchIfMade, scratch.stagingOwner == ObjectIdentifier(self) else { return 0 }
        return scratch.stagedCount
    }

    /// Sends the staged datagrams in as few `sendmmsg` calls as the kernel allows. One the
    /// kernel refuses gets `didNotSend` and the rest go on; when the kernel is full, the
    /// rest join the front of the queue (copied) and wait for the socket to drain.
    ///
    /// Every system call happens first and the staging area is released before any event is
    /// reported: a callback that sends again, closes the socket or re-binds it then finds no
    /// staged datagram left to send twice, and nothing is reported after a close.
    private func flushStagedSends() {
        guard let scratch = loop.udpScratchIfMade, scratch.stagingOwner == ObjectIdentifier(self) else { return }
        let count = scratch.stagedCount
        guard count > 0, let target = channel(stagedFamily) else {
            scratch.resetStaging()
            return
        }
        let session = generation
        let wantsCompletions = ownerWantsSendCompletions.load(ordering: .relaxed)
        // Per staged datagram: its tag and outcome (0 sent, > 0 errno of a refusal, -1 queued).
        withUnsafeTemporaryAllocation(of: (tag: Int, outcome: Int32).self, capacity: count) { outcomes in
            var index = 0
            var leftovers: [Queued] = []
            while index < count {
                let sent = Int(skc_send_datagrams(target.fd, scratch.stage.messages + index, UInt32(count - index)))
                if sent > 0 {
                    for position in index..<(index + sent) { outcomes[position] = (scratch.stageTags[position], 0) }
                    index += sent
                    continue
                }
                let number = errno
                if sent < 0 && number == EINTR { continue }
                if sent == 0 || number == EAGAIN || number == EWOULDBLOCK || number == ENOBUFS {
                    // The kernel is full: the rest wait in the queue, in order, ahead of anything later.
                    for position in index..<count {
                        let header = scratch.stage.messages[position].msg_hdr
                        let bytes = DatagramBytes(copying: UnsafeRawBufferPointer(start: header.msg_iov.pointee.iov_base,
                                                                                  count: header.msg_iov.pointee.iov_len))
                        let destination: UdpDestination
                        if header.msg_name != nil,
                           let address = SocketAddress(storage: header.msg_name, length: header.msg_namelen) {
                            destination = .address(address)
                        } else {
                            destination = .connected
                        }
                        leftovers.append(Queued(id: nextID, item: .datagram(bytes, destination, tag: scratch.stageTags[position],
                                                                            timeout: scratch.stageTimeouts[position])))
                        nextID += 1
                        outcomes[position] = (scratch.stageTags[position], -1)
                    }
                    break
                }
                outcomes[index] = (scratch.stageTags[index], number)
                index += 1
            }
            scratch.resetStaging()
            if !target.hasLocalPort { publishState() }
            if !leftovers.isEmpty { queue.insert(contentsOf: leftovers, at: head) }
            for position in 0..<count {
                guard session == generation else { return } // a callback closed the socket
                let (tag, outcome) = outcomes[position]
                if outcome == 0 {
                    if wantsCompletions { report(.didSend(tag: tag)) }
                } else if outcome > 0 {
                    report(.didNotSend(tag: tag, SocketError.systemError(outcome, "sendmmsg")))
                }
            }
            if !leftovers.isEmpty && session == generation { pumpSends() }
        }
    }

    /// True while `pumpSends` runs: a send queued from a callback it caused joins its loop
    /// instead of starting another.
    private var pumping = false

    private func pumpSends() {
        guard !pumping else { return }
        pumping = true
        defer { pumping = false }
        while phase == .idle && head < queue.count {
            let current = queue[head]
            if timedItem != current.id {
                timedItem = current.id
                armTimer(for: current)
            }
            let before = generation
            let finished = process(head)
            if before != generation { continue } // a callback closed (and maybe reused) the socket
            if finished == 0 { break }
            popHead(finished)
        }
        if head >= queue.count {
            queue.removeAll(keepingCapacity: queue.capacity <= 64)
            head = 0
            if closeAfterSending {
                closeSocket(error: nil, announce: true)
            }
        }
    }

    private func popHead(_ count: Int) {
        head += count
        timer.map { loop.cancel($0) }
        if head > 64 && head * 2 > queue.count {
            queue.removeFirst(head)
            head = 0
        }
    }

    private func armTimer(for current: Queued) {
        guard case .datagram(_, _, _, let timeout) = current.item, timeout >= 0 else {
            timer.map { loop.cancel($0) }
            return
        }
        let made = timer ?? LoopTimer { [unowned self] in sendTimedOut() }
        timer = made
        loop.schedule(made, deadline: monotonicNanoseconds() &+ UInt64(min(timeout, 1e9) * 1e9))
    }

    private func sendTimedOut() {
        guard head < queue.count, case .datagram(_, _, let tag, let timeout) = queue[head].item else { return }
        phase = .idle
        currentChannelFamily = nil
        updateInterest()
        popHead(1)
        report(.didNotSend(tag: tag, SocketError(.sendTimeout, "the datagram was not sent within \(timeout) s")))
        pumpSends()
    }

    /// Works on the item at `index` (the head); returns how many items finished (0: the
    /// head waits for something).
    private func process(_ index: Int) -> Int {
        switch queue[index].item {
        case .connect(let destination):
            guard let address = destinationAddress(index, destination) else { return phase == .resolving ? 0 : 1 }
            finishConnect(to: address)
            return 1
        case .datagram(let bytes, let destination, let tag, _):
            if case .connected = destination, !connected {
                report(.didNotSend(tag: tag, SocketError(.badConfig,
                    "the socket is not connected: give a destination, or connect first")))
                return 1
            }
            if !isConnectedDestination(destination) && connected {
                report(.didNotSend(tag: tag, SocketError(.badConfig,
                    "the socket is connected: send without a destination")))
                return 1
            }
            guard let address = destinationAddress(index, destination) else { return phase == .resolving ? 0 : 1 }
            let target: UDPChannel
            do throws(SocketError) {
                target = try ensureChannel(address.family)
            } catch {
                report(.didNotSend(tag: tag, error))
                return 1
            }
            if let sendFilter, !queue[index].filtered {
                return filterAndSend(index, bytes: bytes, address: address, tag: tag, filter: sendFilter)
            }
            return transmit(from: index, first: address, channel: target)
        }
    }

    private func isConnectedDestination(_ destination: UdpDestination) -> Bool {
        if case .connected = destination { return true }
        return false
    }

    /// The item's address: known, resolved earlier, or (nil) being resolved now / failed
    /// (the failure already reported).
    private func destinationAddress(_ index: Int, _ destination: UdpDestination) -> SocketAddress? {
        if let resolved = queue[index].resolved { return resolved }
        switch destination {
        case .connected:
            return connectedAddress
        case .address(let address):
            guard address.family != .unix else {
                fail(index, SocketError(.badParam, "UDP sends to IPv4 or IPv6 addresses"))
                return nil
            }
            guard isUsable(address.family) else {
                fail(index, SocketError(.other, "no usable \(address.family == .ipv4 ? "IPv4" : "IPv6") socket for \(address)"))
                return nil
            }
            return address
        case .host(let host, let port):
            if let literal = SocketAddress.parseIPLiteral(host, port: port) {
                queue[index].resolved = literal
                return destinationAddress(index, .address(literal))
            }
            phase = .resolving
            let id = queue[index].id
            let session = generation
            resolvingRegistration = loop.registerWithoutDescriptor(handler: LoopStopObserver { [self] in loopWillStop() })
            let core = UncheckedSendable(self)
            AddressResolver.shared.resolve(host: host, port: port) { result in
                let loop = core.value.loop
                loop.execute { core.value.resolved(id: id, session: session, result) }
            }
            return nil
        }
    }

    private func resolved(id: UInt64, session: UInt64, _ result: Result<[SocketAddress], SocketError>) {
        guard session == generation, phase == .resolving, head < queue.count, queue[head].id == id else { return }
        phase = .idle
        stopWaitingForResolution()
        switch result {
        case .failure(let error):
            fail(head, error)
            popHead(1)
        case .success(let addresses):
            if let chosen = choose(from: addresses) {
                queue[head].resolved = chosen
            } else {
                fail(head, SocketError(.other, "no address of the host is usable by this socket (families enabled, bound or connected)"))
                popHead(1)
            }
        }
        pumpSends()
    }

    private func choose(from addresses: [SocketAddress]) -> SocketAddress? {
        let usable = addresses.filter { isUsable($0.family) && (!bound || channel($0.family) != nil) }
        switch configuration.preference {
        case .neutral: return usable.first
        case .ipv4: return usable.first { $0.family == .ipv4 } ?? usable.first
        case .ipv6: return usable.first { $0.family == .ipv6 } ?? usable.first
        }
    }

    /// Reports the item at `index` as failed (the caller pops it).
    private func fail(_ index: Int, _ error: SocketError) {
        switch queue[index].item {
        case .connect:
            connectQueued = false
            report(.didNotConnect(error))
        case .datagram(_, _, let tag, _):
            report(.didNotSend(tag: tag, error))
        }
    }

    private func finishConnect(to address: SocketAddress) {
        connectQueued = false
        do throws(SocketError) {
            if bound && channel(address.family) == nil {
                throw SocketError(.other, "the socket is bound without \(address.family == .ipv4 ? "IPv4" : "IPv6")")
            }
            let target = try ensureChannel(address.family)
            let result = address.withSockAddr { Glibc.connect(target.fd, $0, $1) }
            guard result == 0 else { throw SocketError.lastSystemError("connect(\(address))") }
        } catch {
            publishState()
            report(.didNotConnect(error))
            return
        }
        let other: SocketAddress.Family = address.family == .ipv4 ? .ipv6 : .ipv4
        closeChannel(other)
        if other == .ipv4 { deactivated4 = true } else { deactivated6 = true }
        connected = true
        connectedAddress = address
        channel(address.family)?.local = nil
        publishState()
        report(.didConnect(address))
    }

    private func filterAndSend(_ index: Int, bytes: DatagramBytes, address: SocketAddress, tag: Int,
                               filter: (filter: UdpSendFilter, queue: CallbackQueue?, async: Bool)) -> Int {
        let data = Array(bytes.view)
        if !filter.async {
            if filter.filter(data, address, tag) {
                queue[index].filtered = true
                return process(index)
            }
            report(.didSend(tag: tag))
            return 1
        }
        phase = .filtering
        let id = queue[index].id
        let session = generation
        let core = UncheckedSendable(self)
        let loop = self.loop
        let run = filter.filter
        (filter.queue ?? owner?.callbackQueue ?? .eventLoop).enqueue({ _ in
            let verdict = run(data, address, tag)
            _ = loop.execute { core.value.sendFilterAnswered(id: id, session: session, send: verdict) }
            return 1
        }, loop: loop)
        return 0
    }

    private func sendFilterAnswered(id: UInt64, session: UInt64, send: Bool) {
        guard session == generation, phase == .filtering, head < queue.count, queue[head].id == id,
              case .datagram(_, _, let tag, _) = queue[head].item else { return }
        phase = .idle
        if send {
            queue[head].filtered = true
        } else {
            popHead(1)
            report(.didSend(tag: tag))
        }
        pumpSends()
    }

    /// Sends the head datagram and as many following ready ones as one `sendmmsg` takes.
    private func transmit(from index: Int, first address: SocketAddress, channel target: UDPChannel) -> Int {
        guard case .datagram(let bytes, _, let tag, _) = queue[index].item else { return 1 }
        var batch = [(bytes, address, tag)]
        var cursor = index + 1
        // Only datagrams whose destination needs no work (and no filter) join a batch.
        while sendFilter == nil && cursor < queue.count && batch.count < UDPScratch.capacity,
              case .datagram(let more, let destination, let moreTag, _) = queue[cursor].item,
              let next = readyAddress(destination, family: target.family) {
            batch.append((more, next, moreTag))
            cursor += 1
        }
        return send(batch, channel: target)
    }

    private func readyAddress(_ destination: UdpDestination, family: SocketAddress.Family) -> SocketAddress? {
        switch destination {
        case .connected where connected: return connectedAddress
        case .address(let given) where !connected && given.family == family: return given
        default: return nil
        }
    }

    private func send(_ batch: [(DatagramBytes, SocketAddress, Int)], channel target: UDPChannel) -> Int {
        let count = batch.count
        let scratch = loop.udpScratch
        let connectedSend = connected
        for (offset, entry) in batch.enumerated() {
            scratch.send.prepareSend(offset, bytes: entry.0.bytes.baseAddress, count: entry.0.count,
                                     to: connectedSend ? nil : entry.1)
        }
        let sent = skc_send_datagrams(target.fd, scratch.send.messages, UInt32(count))
        if sent < 0 {
            let number = errno
            if number == EAGAIN || number == EWOULDBLOCK || number == ENOBUFS {
                phase = .waitingWritable
                currentChannelFamily = target.family
                updateInterest()
                return 0
            }
            if number == EINTR { return 0 }
            report(.didNotSend(tag: batch[0].2, SocketError.systemError(number, "sendmsg(\(batch[0].1))")))
            return 1
        }
        if !target.hasLocalPort { publishState() }
        if ownerWantsSendCompletions.load(ordering: .relaxed) {
            for entry in batch.prefix(Int(sent)) {
                report(.didSend(tag: entry.2))
            }
        }
        return Int(sent)
    }

    // MARK: Receiving

    func setReceiveMode(_ mode: ReceiveMode) throws(SocketError) {
        if mode != .off && v4 == nil && v6 == nil {
            throw SocketError(.badConfig, "bind, connect or send before receiving")
        }
        receiveMode = mode
        updateInterest()
    }

    func setReceiveFilter(_ filter: (filter: UdpReceiveFilter, queue: CallbackQueue?, async: Bool)?) {
        receiveFilter = filter
    }

    func setSendFilter(_ filter: (filter: UdpSendFilter, queue: CallbackQueue?, async: Bool)?) {
        sendFilter = filter
    }

    func handle(_ source: UDPChannel, events: UInt32) {
        if events & EPOLLOUT.rawValue != 0 && phase == .waitingWritable && currentChannelFamily == source.family {
            phase = .idle
            currentChannelFamily = nil
            updateInterest()
            pumpSends()
        }
        guard source.core != nil else { return }
        if events & EPOLLIN.rawValue != 0 && receiveMode != .off {
            receive(on: source)
        } else if events & (EPOLLERR.rawValue | EPOLLIN.rawValue) != 0 {
            // An ICMP error for an earlier datagram (nobody is receiving): report it once.
            let pending = SystemCalls.pendingError(source.fd)
            if pending != 0 {
                report(.didReceiveError(SocketError.systemError(pending, "ICMP error for an earlier datagram")))
            }
        }
    }

    private func receive(on source: UDPChannel) {
        let session = generation
        let scratch = loop.udpScratch
        let buffer = scratch.receiveBuffer
        let limit = max(1, min(65535, source.family == .ipv4 ? configuration.maxReceiveIPv4BufferSize
                                                               : configuration.maxReceiveIPv6BufferSize))
        // With receive offload a buffer may hold many datagrams: its slot takes the most the
        // kernel coalesces (64 KiB); each datagram is held to `limit` on its own.
        let layoutLimit = receiveOffload ? 65535 : limit
        let (stride, slots) = UDPScratch.receiveLayout(limit: layoutLimit)
        var budget = 64
        while budget > 0 && session == generation && source.core != nil && receiveMode != .off
                && !(receiveMode == .once && asyncFiltersPending > 0) {
            let count = receiveMode == .once ? 1 : min(slots, budget)
            scratch.prepareReceive(count: count, limit: layoutLimit, control: receivesPacketInfo || receiveOffload)
            let received = Int(skc_recv_datagrams(source.fd, scratch.receive.messages, UInt32(count)))
            if received < 0 {
                let number = errno
                if number == EAGAIN || number == EWOULDBLOCK { return }
                if number == EINTR { continue }
                report(.didReceiveError(SocketError.systemError(number, "recvmmsg")))
                if number == ECONNREFUSED || number == EHOSTUNREACH || number == ENETUNREACH || number == EHOSTDOWN {
                    budget -= 1
                    continue // an ICMP report for an earlier datagram: consumed, go on
                }
                return
            }
            // Callbacks below may send on this loop: the receive scratch stays ours, and their
            // sends are staged and leave together after the batch.
            receivingBatch = true
            defer {
                receivingBatch = false
                if stagedCount > 0 { flushStagedSends() }
            }
            // The common case (continuous receiving, no filter, callbacks on the loop): each
            // datagram straight to the receiver, without making a SocketAddress or an event.
            var direct = DirectDelivery()
            defer { direct.drop() }
            for slot in 0..<received {
                let total = Int(scratch.receive.messages[slot].msg_len)
                let header = scratch.receive.messages[slot].msg_hdr
                // Receive offload: the kernel may hand over several datagrams of one sender in
                // one buffer, each `segment` bytes but the last; each goes on as its own.
                var segment = total
                if receiveOffload {
                    let size = withUnsafePointer(to: header) { Int(skc_coalesced_segment_size($0)) }
                    if size > 0 { segment = size }
                }
                var offset = 0
                repeat {
                    let length = min(segment, total - offset)
                    let start = buffer + slot * stride + offset
                    offset += length
                    if receiveMode == .continuous && receiveFilter == nil && !released && !receivesPacketInfo
                        && header.msg_flags & Int32(MSG_TRUNC) == 0 && length <= limit
                        && UDPSocketCore.isCompleteIPAddress(header.msg_name, header.msg_namelen)
                        && direct.deliver(UnsafeRawBufferPointer(start: start, count: length),
                                          from: header.msg_name, length: header.msg_namelen, owner: { owner }) {
                        guard session == generation else { return }
                        continue
                    }
                    // The general path looks the owner up itself: the batch's hold must not keep
                    // alive a socket the user dropped in a callback for this datagram's events.
                    direct.drop()
                    guard let sender = SocketAddress(storage: scratch.receive.names + slot, length: header.msg_namelen) else {
                        continue
                    }
                    if header.msg_flags & Int32(MSG_TRUNC) != 0 || length > limit {
                        report(.didReceiveError(SocketError(.truncated,
                            "a datagram from \(sender) was larger than the receive limit of \(limit) bytes and was dropped")))
                        guard session == generation else { return }
                        continue
                    }
                    let bytes = UnsafeRawBufferPointer(start: start, count: length)
                    let info = receivesPacketInfo ? UdpPacketInfo(scratch.receive.messages + slot) : nil
                    handleDatagram(bytes, from: sender, info: info, session: session)
                    guard session == generation else { return }
                } while offset < total
            }
            budget -= received
            if received < count { return }
        }
    }

    /// Whether `name` holds what `SocketAddress(storage:length:)` takes as IPv4 or IPv6.
    @inline(__always)
    static func isCompleteIPAddress(_ name: UnsafeMutableRawPointer?, _ length: socklen_t) -> Bool {
        guard let name else { return false }
        let family = Int32(name.load(as: sa_family_t.self))
        return (length == socklen_t(MemoryLayout<sockaddr_in>.size) && family == AF_INET)
            || (length == socklen_t(MemoryLayout<sockaddr_in6>.size) && family == AF_INET6)
    }

    private func handleDatagram(_ bytes: UnsafeRawBufferPointer, from sender: SocketAddress, info: UdpPacketInfo?,
                                session: UInt64) {
        guard let receiveFilter else {
            deliverDatagram(.borrowed(bytes), from: sender, context: nil, info: info)
            return
        }
        let data = Array(bytes)
        if !receiveFilter.async {
            if case .accept(let context) = receiveFilter.filter(data, sender) {
                deliverDatagram(.owned(data), from: sender, context: context, info: info)
            }
            return
        }
        asyncFiltersPending += 1
        if receiveMode == .once { updateInterest() }
        let core = UncheckedSendable(self)
        let loop = self.loop
        let run = receiveFilter.filter
        (receiveFilter.queue ?? owner?.callbackQueue ?? .eventLoop).enqueue({ _ in
            let verdict = run(data, sender)
            let answer = UncheckedSendable(verdict)
            _ = loop.execute { core.value.receiveFilterAnswered(session: session, data: data, sender: sender, info: info, answer.value) }
            return 1
        }, loop: loop)
    }

    private func receiveFilterAnswered(session: UInt64, data: [UInt8], sender: SocketAddress, info: UdpPacketInfo?,
                                       _ verdict: UdpReceiveFilterVerdict) {
        guard session == generation else { return }
        asyncFiltersPending -= 1
        if case .accept(let context) = verdict {
            deliverDatagram(.owned(data), from: sender, context: context, info: info)
        }
        updateInterest()
    }

    private func deliverDatagram(_ payload: DatagramPayload, from sender: SocketAddress, context: (any Sendable)?,
                                 info: UdpPacketInfo?) {
        if receiveMode == .once {
            receiveMode = .off
            updateInterest()
        }
        if let info {
            report(.didReceiveWithPacketInfo(payload, from: sender, context: context, info: info))
        } else {
            report(.didReceive(payload, from: sender, context: context))
        }
    }

    // MARK: Multicast, broadcast, options

    func joinOrLeave(join: Bool, group: String, interface: String?) throws(SocketError) {
        guard v4 != nil || v6 != nil else {
            throw SocketError(.badConfig, "bind before joining a multicast group")
        }
        guard !connected else { throw SocketError(.badConfig, "a connected socket cannot join multicast groups") }
        guard let address = SocketAddress.parseIPLiteral(try group.checkedForC("the multicast group"), port: 0) else {
            throw SocketError(.badParam, "'\(group)' is not a numeric IP address")
        }
        guard let target = channel(address.family) else {
            throw SocketError(.badParam, "the socket has no \(address.family == .ipv4 ? "IPv4" : "IPv6") descriptor for \(group)")
        }
        let index = try UDPSocketCore.interfaceIndex(interface, family: address.family)
        let result: Int32
        if address.family == .ipv4 {
            var request = ip_mreqn()
            request.imr_multiaddr = address.bytes.withUnsafeBytes { $0.loadUnaligned(as: sockaddr_in.self).sin_addr }
            request.imr_ifindex = index
            result = setsockopt(target.fd, Int32(IPPROTO_IP), join ? IP_ADD_MEMBERSHIP : IP_DROP_MEMBERSHIP,
                                &request, socklen_t(MemoryLayout<ip_mreqn>.size))
        } else {
            var request = ipv6_mreq()
            request.ipv6mr_multiaddr = address.bytes.withUnsafeBytes { $0.loadUnaligned(as: sockaddr_in6.self).sin6_addr }
            request.ipv6mr_interface = UInt32(index)
            // Linux's numbers (20/21), not Darwin's IP_ADD_MEMBERSHIP at the IPv6 level.
            result = setsockopt(target.fd, Int32(IPPROTO_IPV6), join ? 20 : 21,
                                &request, socklen_t(MemoryLayout<ipv6_mreq>.size))
        }
        guard result == 0 else {
            throw SocketError.lastSystemError(join ? "join multicast group \(group)" : "leave multicast group \(group)")
        }
    }

    /// Source-specific multicast (RFC 4607): receive what `source` sends to `group`, and
    /// only that (MCAST_JOIN_SOURCE_GROUP), or stop (MCAST_LEAVE_SOURCE_GROUP).
    func joinOrLeaveSource(join: Bool, group: String, source: String, interface: String?) throws(SocketError) {
        guard v4 != nil || v6 != nil else {
            throw SocketError(.badConfig, "bind before joining a multicast group")
        }
        guard !connected else { throw SocketError(.badConfig, "a connected socket cannot join multicast groups") }
        guard let groupAddress = SocketAddress.parseIPLiteral(try group.checkedForC("the multicast group"), port: 0) else {
            throw SocketError(.badParam, "'\(group)' is not a numeric IP address")
        }
        guard let sourceAddress = SocketAddress.parseIPLiteral(try source.checkedForC("the source"), port: 0) else {
            throw SocketError(.badParam, "'\(source)' is not a numeric IP address")
        }
        guard sourceAddress.family == groupAddress.family else {
            throw SocketError(.badParam, "the source \(source) and the group \(group) are of different families")
        }
        guard let target = channel(groupAddress.family) else {
            throw SocketError(.badParam, "the socket has no \(groupAddress.family == .ipv4 ? "IPv4" : "IPv6") descriptor for \(group)")
        }
        let index = try UDPSocketCore.interfaceIndex(interface, family: groupAddress.family)
        let level = groupAddress.family == .ipv4 ? Int32(IPPROTO_IP) : Int32(IPPROTO_IPV6)
        let result = groupAddress.withSockAddr { groupName, groupLength in
            sourceAddress.withSockAddr { sourceName, sourceLength in
                skc_source_membership(target.fd, join ? 1 : 0, level, UInt32(index), groupName, groupLength, sourceName,
                                      sourceLength)
            }
        }
        guard result == 0 else {
            throw SocketError.lastSystemError(join ? "join multicast group \(group) from \(source)"
                                                   : "leave multicast group \(group) from \(source)")
        }
    }

    /// The index of `interface` (nil: 0, any; a name; "localhost"/"loopback"; an IP of one).
    static func interfaceIndex(_ interface: String?, family: SocketAddress.Family) throws(SocketError) -> Int32 {
        guard let interface, !interface.isEmpty else { return 0 }
        try interface.checkedForC("the interface")
        let name = (interface == "localhost" || interface == "loopback") ? "lo" : interface
        if SocketAddress.parseIPLiteral(name, port: 0) == nil {
            let index = if_nametoindex(name)
            guard index != 0 else { throw SocketError(.badParam, "unknown interface '\(interface)'") }
            return Int32(index)
        }
        let wanted = SocketAddress.parseIPLiteral(name, port: 0)!
        var list: UnsafeMutablePointer<ifaddrs>? = nil
        guard getifaddrs(&list) == 0 else { throw SocketError.lastSystemError("getifaddrs") }
        defer { freeifaddrs(list) }
        var cursor = list
        while let entry = cursor {
            defer { cursor = entry.pointee.ifa_next }
            guard let raw = entry.pointee.ifa_addr else { continue }
            let length = socklen_t(raw.pointee.sa_family == sa_family_t(AF_INET6) ? MemoryLayout<sockaddr_in6>.size
                                                                                   : MemoryLayout<sockaddr_in>.size)
            guard raw.pointee.sa_family == sa_family_t(AF_INET) || raw.pointee.sa_family == sa_family_t(AF_INET6),
                  let address = SocketAddress(storage: raw, length: length),
                  address.host == wanted.host else { continue }
            return Int32(if_nametoindex(entry.pointee.ifa_name))
        }
        throw SocketError(.badParam, "no interface has the address '\(interface)'")
    }

    func setMulticastInterface(_ interface: String?, family: SocketAddress.Family) throws(SocketError) {
        let index = try UDPSocketCore.interfaceIndex(interface, family: family)
        if family == .ipv4 {
            multicastInterface4 = index
            if let v4 { try setIPv4MulticastInterface(v4.fd, index: index) }
        } else {
            multicastInterface6 = index
            if let v6 { try SystemCalls.setOption(v6.fd, Int32(IPPROTO_IPV6), IPV6_MULTICAST_IF, index, "IPV6_MULTICAST_IF") }
        }
    }

    func setMulticastTTL(_ ttl: Int32) throws(SocketError) {
        guard (0...255).contains(ttl) else { throw SocketError(.badParam, "multicast TTL / hop limit must be 0...255") }
        multicastTTL = ttl
        if let v4 { try SystemCalls.setOption(v4.fd, Int32(IPPROTO_IP), IP_MULTICAST_TTL, ttl, "IP_MULTICAST_TTL") }
        if let v6 { try SystemCalls.setOption(v6.fd, Int32(IPPROTO_IPV6), IPV6_MULTICAST_HOPS, ttl, "IPV6_MULTICAST_HOPS") }
    }

    /// Packet info on or off, on the descriptors there are and those made later. Datagrams
    /// the kernel queued before the change come as they were queued.
    func setReceivesPacketInfo(_ enabled: Bool) throws(SocketError) {
        if let v4 { try UDPSocketCore.setPacketInfo(v4.fd, .ipv4, enabled) }
        if let v6 { try UDPSocketCore.setPacketInfo(v6.fd, .ipv6, enabled) }
        receivesPacketInfo = enabled
    }

    /// Receive offload (UDP_GRO) on or off, now and on descriptors made later; the
    /// datagrams reach the delegate one by one either way.
    func setReceiveOffload(_ enabled: Bool) throws(SocketError) {
        if let v4 { try UDPSocketCore.setReceiveOffload(v4.fd, enabled) }
        if let v6 { try UDPSocketCore.setReceiveOffload(v6.fd, enabled) }
        receiveOffload = enabled
    }

    /// Segmentation offload (UDP_SEGMENT): 0 turns it off.
    func setSendSegmentSize(_ size: Int) throws(SocketError) {
        guard (0...65535).contains(size) else { throw SocketError(.badParam, "the segment size must be 0...65535") }
        if let v4 { try UDPSocketCore.setSegmentSize(v4.fd, Int32(size)) }
        if let v6 { try UDPSocketCore.setSegmentSize(v6.fd, Int32(size)) }
        sendSegmentSize = UInt16(size)
    }

    private static func setReceiveOffload(_ fd: Int32, _ enabled: Bool) throws(SocketError) {
        guard skc_set_udp_gro(fd, enabled ? 1 : 0) == 0 else { throw SocketError.lastSystemError("UDP_GRO") }
    }

    private static func setSegmentSize(_ fd: Int32, _ size: Int32) throws(SocketError) {
        guard skc_set_udp_segment(fd, size) == 0 else { throw SocketError.lastSystemError("UDP_SEGMENT") }
    }

    private static func setPacketInfo(_ fd: Int32, _ family: SocketAddress.Family, _ enabled: Bool) throws(SocketError) {
        guard skc_set_packet_info(fd, family == .ipv4 ? AF_INET : AF_INET6, enabled ? 1 : 0) == 0 else {
            throw SocketError.lastSystemError(family == .ipv4 ? "IP_PKTINFO" : "IPV6_RECVPKTINFO")
        }
    }

    func setMulticastLoopback(_ enabled: Bool) throws(SocketError) {
        multicastLoopback = enabled
        if let v4 { try SystemCalls.setOption(v4.fd, Int32(IPPROTO_IP), IP_MULTICAST_LOOP, enabled ? 1 : 0, "IP_MULTICAST_LOOP") }
        if let v6 { try SystemCalls.setOption(v6.fd, Int32(IPPROTO_IPV6), IPV6_MULTICAST_LOOP, enabled ? 1 : 0, "IPV6_MULTICAST_LOOP") }
    }

    func setBroadcast(_ enabled: Bool) throws(SocketError) {
        broadcast = enabled
        if let v4 { try SystemCalls.setOption(v4.fd, SOL_SOCKET, SO_BROADCAST, enabled ? 1 : 0, "SO_BROADCAST") }
    }

    func setReuseAddress(_ enabled: Bool) throws(SocketError) {
        guard !bound else { throw SocketError(.badConfig, "enable address reuse before binding") }
        reuseAddress = enabled
        for case let existing? in [v4, v6] {
            try SystemCalls.setOption(existing.fd, SOL_SOCKET, SO_REUSEADDR, enabled ? 1 : 0, "SO_REUSEADDR")
        }
    }

    func setReusePort(_ enabled: Bool) throws(SocketError) {
        guard !bound else { throw SocketError(.badConfig, "enable port reuse before binding") }
        reusePort = enabled
        for case let existing? in [v4, v6] {
            try SystemCalls.setOption(existing.fd, SOL_SOCKET, SO_REUSEPORT, enabled ? 1 : 0, "SO_REUSEPORT")
        }
    }

    // MARK: Closing

    func closeSocket(error: SocketError?, announce: Bool) {
        let hadDescriptors = v4 != nil || v6 != nil
        generation += 1
        // Staged datagrams are dropped like queued ones (no callbacks, as upstream).
        if let scratch = loop.udpScratchIfMade, scratch.stagingOwner == ObjectIdentifier(self) {
            scratch.resetStaging()
        }
        timer.map { loop.cancel($0) }
        lingerTimer.map { loop.cancel($0) }
        endLingering()
        queue.removeAll()
        head = 0
        timedItem = 0
        phase = .idle
        stopWaitingForResolution()
        currentChannelFamily = nil
        closeAfterSending = false
        receiveMode = .off
        asyncFiltersPending = 0
        bound = false
        connected = false
        connectQueued = false
        connectedAddress = nil
        deactivated4 = false
        deactivated6 = false
        closeChannel(.ipv4)
        closeChannel(.ipv6)
        publishState()
        if hadDescriptors && announce { report(.didClose(error)) }
    }

    /// The user released the handle: close without telling anyone. After `closeAfterSending`
    /// the queued datagrams are sent first (those waiting for a name too, each within its own
    /// timeout), for at most `TCPSocketCore.lingerSeconds`, as a TCP socket's lingering close
    /// sends its queued writes; receiving stops. Not with a send filter: its calls would come
    /// after the release, which promises none (the C face answers them "drop").
    func ownerReleased() {
        released = true
        if closeAfterSending && sendFilter == nil && (head < queue.count || phase != .idle) {
            receiveMode = .off
            updateInterest()
            let made = lingerTimer ?? LoopTimer { [unowned self] in closeSocket(error: nil, announce: false) }
            lingerTimer = made
            loop.schedule(made, deadline: monotonicNanoseconds() &+ UInt64(TCPSocketCore.lingerSeconds * 1e9))
            lingeringCore = self
            return
        }
        closeSocket(error: nil, announce: false)
        timer = nil
    }

    /// Lets go of a lingering core's reference to itself, not at once: the caller (a timer, a
    /// send or a resolution answer) goes on using the core until it returns. From the loop's
    /// thread the task is accepted also while the loop stops (it runs before the loop ends).
    private func endLingering() {
        guard let lingering = lingeringCore else { return }
        lingeringCore = nil
        let last = UncheckedSendable(lingering)
        loop.execute { withExtendedLifetime(last) {} }
    }

    private func stopWaitingForResolution() {
        guard let id = resolvingRegistration else { return }
        loop.deregister(id, fd: -1, removeFromEpoll: false)
        resolvingRegistration = nil
    }

    /// A stopping loop ends the socket: with descriptors, or with datagrams still queued
    /// (their sender waits to hear of them), it says so, as a socket closed with an error does.
    func loopWillStop() {
        let error = SocketError(.closed, "the event loop stopped")
        let onlyQueued = v4 == nil && v6 == nil && head < queue.count
        closeSocket(error: error, announce: true)
        if onlyQueued { report(.didClose(error)) }
    }

    /// The owner was released after the loop stopped (called once the loop thread has
    /// finished, or on it). The loop closed the registered descriptors (`loopWillStop`) and
    /// dropped its timers and scratch memory: those belong to nobody now, so this touches
    /// none of the loop's structures (`closeSocket` would: it cancels the send timer) and
    /// lets go of what is left, which only this core holds.
    func abandon() {
        released = true
        for case let channel? in [v4, v6] {
            channel.core = nil
            close(channel.fd)
        }
        v4 = nil
        v6 = nil
        queue.removeAll()
        head = 0
        timer = nil
        lingerTimer = nil
        lingeringCore = nil
    }

    private func report(_ event: UdpSocketEvent) {
        guard !released else { return }
        owner?.route(event)
    }
}

/// A received batch's direct delivery (`SocketFront.directReceiver`): the owner and its
/// receiver are looked up at the batch's first datagram and held (one retain each) until
/// `drop`, and each datagram calls them without reference counting, instead of a
/// `swift_tryRetain` of the owner, the state lock and a retain of the receiver, and their
/// releases, per datagram. Loop thread only.
struct DirectDelivery {
    private var owner: Unmanaged<UdpSocket>? = nil
    private var target: Unmanaged<UdpSocketEventReceiver>? = nil
    private var version: UInt32 = 0
    private var stopped = false

    /// Releases what the batch holds.
    mutating func drop() {
        owner?.release()
        target?.release()
        owner = nil
        target = nil
    }

    /// Delivers one datagram now (see `UdpSocket.deliverReceived`); false, with nothing
    /// done, when the caller must take the general path: the callbacks do not run on the
    /// loop, an event waits, there is no receiver or owner, or the batch holds the owner's
    /// only reference (the last other one went in a callback: nothing more is delivered
    /// to it, as when each datagram looked the owner up). A routing change since the
    /// lookup (a callback set a delegate) is looked up again.
    @inline(__always)
    mutating func deliver(_ bytes: UnsafeRawBufferPointer, from name: UnsafeRawPointer, length: socklen_t,
                          owner lookup: () -> UdpSocket?) -> Bool {
        if stopped { return false }
        if let held = owner {
            if RuntimeShortcuts.isOnlyReference(held) { return stop() }
            if attempt(bytes, from: name, length: length) { return true }
            drop() // the routing changed or an event waits: look it up again, once
        }
        guard let socket = lookup(), let taken = socket.directReceiver() else { return stop() }
        owner = Unmanaged.passRetained(socket)
        target = Unmanaged.passRetained(taken.receiver)
        version = taken.version
        return attempt(bytes, from: name, length: length) || stop()
    }

    /// Nothing more of this batch is delivered directly; always false.
    private mutating func stop() -> Bool {
        drop()
        stopped = true
        return false
    }

    /// One datagram to the held owner and receiver (both present).
    @inline(__always)
    private func attempt(_ bytes: UnsafeRawBufferPointer, from name: UnsafeRawPointer, length: socklen_t) -> Bool {
        let version = self.version
        return RuntimeShortcuts.withUnretained(owner.unsafelyUnwrapped) { socket in
            RuntimeShortcuts.withUnretained(target.unsafelyUnwrapped) { receiver in
                socket.deliverReceived(bytes, from: name, length: length, to: receiver, version: version)
            }
        }
    }
}

/// The message headers of one `recvmmsg` or `sendmmsg` batch, as the kernel reads them
/// (`skc_mmsghdr`: a `msghdr` and the byte count the kernel reports), each with its iovec
/// and room for an address.
struct DatagramHeaders {
    let messages: UnsafeMutablePointer<skc_mmsghdr>
    let vectors: UnsafeMutablePointer<iovec>
    let names: UnsafeMutablePointer<sockaddr_storage>

    init(capacity: Int) {
        messages = .allocate(capacity: capacity)
        messages.initialize(repeating: skc_mmsghdr(), count: capacity)
        vectors = .allocate(capacity: capacity)
        names = .allocate(capacity: capacity)
    }

    func deallocate() {
        messages.deallocate()
        vectors.deallocate()
        names.deallocate()
    }

    /// Points header `index` at `bytes` for sending to `destination` (nil: the connected peer).
    func prepareSend(_ index: Int, bytes: UnsafeMutableRawPointer?, count: Int, to destination: SocketAddress?) {
        guard let destination else {
            prepareSend(index, bytes: bytes, count: count, toName: nil, length: 0)
            return
        }
        destination.withSockAddr { address, length in
            prepareSend(index, bytes: bytes, count: count, toName: UnsafeRawPointer(address), length: length)
        }
    }

    /// Points header `index` at `bytes` for sending to the raw address `name` of `length`
    /// bytes (copied; nil: the connected peer).
    func prepareSend(_ index: Int, bytes: UnsafeMutableRawPointer?, count: Int, toName source: UnsafeRawPointer?,
                     length: socklen_t) {
        vectors[index] = iovec(iov_base: bytes, iov_len: count)
        var header = msghdr()
        if let source {
            let name = UnsafeMutableRawPointer(names + index)
            name.copyMemory(from: source, byteCount: Int(length))
            header.msg_name = name
            header.msg_namelen = length
        }
        header.msg_iov = vectors + index
        header.msg_iovlen = 1
        messages[index].msg_hdr = header
    }
}

/// A loop's memory for UDP system calls, made on its first use: the receive buffer (1 MiB
/// of address space; pages are touched only as large datagrams arrive) and the message
/// headers of one `recvmmsg`, one `sendmmsg` and the staged sends. The parts are separate:
/// a callback run from the receive path may send, through the queue or staged.
///
/// One pointer, not a class: the hot path reads it from the loop once per datagram (a send
/// from a receive callback), and a class reference read from the loop's `var` costs a
/// retain and a release each time. Copies share the memory; the loop deallocates it once,
/// in deinit.
struct UDPScratch {
    static let capacity = Int(SKC_MAX_DATAGRAM_BATCH)
    static let receiveSlots = 16
    static let receiveBufferSize = 16 * 65536
    // Staged sends: datagrams sent from a receive callback, waiting for the end of the
    // batch (UDPSocketCore.sendImmediately). One socket stages at a time.
    static let stageBytesCapacity = 128 * 1024

    private struct Parts {
        let receiveBuffer = UnsafeMutableRawPointer.allocate(byteCount: UDPScratch.receiveBufferSize, alignment: 16)
        let receive = DatagramHeaders(capacity: UDPScratch.receiveSlots)
        /// Each receive slot's control room (packet info), used only by sockets that ask.
        let receiveControl = UnsafeMutableRawPointer.allocate(
            byteCount: UDPScratch.receiveSlots * Int(SKC_PACKET_INFO_CONTROL), alignment: 16)
        let send = DatagramHeaders(capacity: UDPScratch.capacity)
        let stage = DatagramHeaders(capacity: UDPScratch.capacity)
        let stageTags = UnsafeMutablePointer<Int>.allocate(capacity: UDPScratch.capacity)
        let stageTimeouts = UnsafeMutablePointer<Double>.allocate(capacity: UDPScratch.capacity)
        let stageBytes = UnsafeMutableRawPointer.allocate(byteCount: UDPScratch.stageBytesCapacity, alignment: 16)
        var stagedCount = 0
        var stagedByteCount = 0
        var stagingOwner: ObjectIdentifier? = nil
        // The receive limit the receive headers are laid out for (0: not set up yet).
        var receiveLimit = 0
        // Whether the receive headers point at the control area (a socket with packet info
        // or receive offload read last); most never do, and then pay nothing for it.
        var receiveControlSet = false
    }

    private let parts: UnsafeMutablePointer<Parts>

    init() {
        parts = .allocate(capacity: 1)
        parts.initialize(to: Parts())
    }

    var receiveBuffer: UnsafeMutableRawPointer { parts.pointee.receiveBuffer }
    var receive: DatagramHeaders { parts.pointee.receive }
    var send: DatagramHeaders { parts.pointee.send }
    var stage: DatagramHeaders { parts.pointee.stage }
    var stageTags: UnsafeMutablePointer<Int> { parts.pointee.stageTags }
    var stageTimeouts: UnsafeMutablePointer<Double> { parts.pointee.stageTimeouts }
    var stagedCount: Int { parts.pointee.stagedCount }

    /// The socket whose datagrams are staged (reset before that socket closes).
    var stagingOwner: ObjectIdentifier? {
        get { parts.pointee.stagingOwner }
        nonmutating set { parts.pointee.stagingOwner = newValue }
    }

    /// The receive buffer cut into slots for datagrams of up to `limit` bytes: each slot
    /// takes one byte more (a datagram that fills it was too large), rounded up to 16.
    static func receiveLayout(limit: Int) -> (stride: Int, slots: Int) {
        let stride = (limit + 1 + 15) & ~15
        return (stride, max(1, min(receiveSlots, receiveBufferSize / stride)))
    }

    /// Readies the first `count` receive headers for one `recvmmsg` into the slots of
    /// `receiveLayout(limit:)`. The headers keep their layout from call to call (it changes
    /// only with the socket's receive limit): a call resets just the address lengths the
    /// kernel overwrote, not every header of the batch (most batches are a few datagrams).
    func prepareReceive(count: Int, limit: Int, control: Bool) {
        let receive = parts.pointee.receive
        if parts.pointee.receiveLimit != limit {
            let (stride, slots) = UDPScratch.receiveLayout(limit: limit)
            for slot in 0..<slots {
                receive.vectors[slot] = iovec(iov_base: parts.pointee.receiveBuffer + slot * stride, iov_len: limit + 1)
                var header = msghdr()
                header.msg_name = UnsafeMutableRawPointer(receive.names + slot)
                header.msg_iov = receive.vectors + slot
                header.msg_iovlen = 1
                receive.messages[slot].msg_hdr = header
            }
            parts.pointee.receiveLimit = limit
        }
        for slot in 0..<count {
            receive.messages[slot].msg_hdr.msg_namelen = socklen_t(MemoryLayout<sockaddr_storage>.size)
        }
        // The control area (packet info, receive offload) is set per call, as the kernel
        // overwrites its length, and taken away once from the headers of the sockets that
        // did not ask (with no area the kernel leaves the length 0): the per-datagram cost
        // of sockets without them stays what it was (the c-udp-echo budget).
        if control {
            let room = Int(SKC_PACKET_INFO_CONTROL)
            for slot in 0..<count {
                receive.messages[slot].msg_hdr.msg_control = parts.pointee.receiveControl + slot * room
                receive.messages[slot].msg_hdr.msg_controllen = room
            }
            parts.pointee.receiveControlSet = true
        } else if parts.pointee.receiveControlSet {
            for slot in 0..<UDPScratch.receiveSlots {
                receive.messages[slot].msg_hdr.msg_control = nil
                receive.messages[slot].msg_hdr.msg_controllen = 0
            }
            parts.pointee.receiveControlSet = false
        }
    }

    func canStage(byteCount: Int) -> Bool {
        parts.pointee.stagedCount < UDPScratch.capacity
            && parts.pointee.stagedByteCount + byteCount <= UDPScratch.stageBytesCapacity
    }

    /// Copies a datagram and its raw destination address into the staging area (the caller
    /// checked `canStage`); a nil `name` sends to the connected peer.
    func stage(_ bytes: UnsafeRawBufferPointer, toName name: UnsafeRawPointer?, length: socklen_t, tag: Int, timeout: Double) {
        let index = parts.pointee.stagedCount
        let target = parts.pointee.stageBytes + parts.pointee.stagedByteCount
        if bytes.count > 0 { target.copyMemory(from: bytes.baseAddress!, byteCount: bytes.count) }
        parts.pointee.stage.prepareSend(index, bytes: target, count: bytes.count, toName: name, length: length)
        parts.pointee.stageTags[index] = tag
        parts.pointee.stageTimeouts[index] = timeout
        parts.pointee.stagedCount = index + 1
        parts.pointee.stagedByteCount += (bytes.count + 15) & ~15
    }

    func resetStaging() {
        parts.pointee.stagedCount = 0
        parts.pointee.stagedByteCount = 0
        parts.pointee.stagingOwner = nil
    }

    /// Called once, by the loop's deinit.
    func deallocate() {
        let made = parts.pointee
        made.receiveBuffer.deallocate()
        made.receive.deallocate()
        made.receiveControl.deallocate()
        made.send.deallocate()
        made.stage.deallocate()
        made.stageTags.deallocate()
        made.stageTimeouts.deallocate()
        made.stageBytes.deallocate()
        parts.deinitialize(count: 1)
        parts.deallocate()
    }
}
