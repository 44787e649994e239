// SPDX-License-Identifier: MIT
import Glibc
import SocketKitC
import Synchronization

/// An asynchronous TCP or Unix-domain socket with GCDAsyncSocket's programming model:
/// queued reads and writes with tags and timeouts, framing (available bytes, a length, a
/// separator), listeners whose connections arrive as new sockets, and a delegate told of
/// everything on the callback queue you choose.
///
/// Threads: every method may be called from any thread. The socket's state has one
/// writer, its event loop: the calls that change it (connecting, accepting, adopting, the
/// disconnects and the setters) run there and return once they have had their effect (a
/// read queued right after `connect` is accepted), waiting for the loop when made on
/// another thread (see `EventLoop` for the rule they share, which no deadlock can break);
/// reads, writes, `startTLS` and `perform` are queued and answered through the delegate;
/// getters read the state the loop last published and never wait. Setting the delegate
/// waits for a callback running elsewhere.
/// Keep a reference: a socket nobody holds closes (no callbacks follow), dropping queued
/// reads and writes; after `disconnectAfterWriting()` it sends its queued writes first (for
/// at most two minutes), connecting first if it still was.
///
/// Timeouts are seconds: negative or `.infinity` = none, 0 = fail unless the operation can
/// complete at once, positive = from when the operation reaches the front of its queue; NaN
/// throws `.badParam`. On expiry the delegate may extend: a positive extension (`.infinity`:
/// for good) re-arms the timer, anything else ends the connection.
///
/// Cost: a connected idle socket owns no buffer; its reads use its loop's buffer.
///
/// Text: a host, interface or Unix path holding a NUL character is refused (`.badParam`):
/// the system calls would see only the text before it.
public final class Socket: SocketFront, @unchecked Sendable {
    typealias Receiver = SocketEventReceiver
    let core: TCPSocketCore

    /// The loop the socket lives on, for its whole life.
    public var eventLoop: EventLoop { core.loop }

    let router = CallbackRouter()
    nonisolated(unsafe) var routing: CallbackRouting<SocketEventReceiver>
    nonisolated(unsafe) var mailbox: EventMailbox<SocketEvent>? = nil
    /// The C API's handle for this socket (0 when it has none).
    let cHandle = Atomic<UInt>(0)

    /// A socket with a delegate and a callback queue, on `eventLoop` (default: the next loop
    /// of `EventLoopGroup.default`).
    public convenience init(delegate: SocketDelegate? = nil, callbackQueue: CallbackQueue = .eventLoop,
                            eventLoop: EventLoop? = nil) {
        self.init(receiver: SwiftDelegateReceiver(delegate), callbackQueue: callbackQueue, eventLoop: eventLoop)
    }

    /// A socket whose delegate lives on the main actor: its callbacks run there
    /// (`CallbackQueue.mainActor`), on `eventLoop` (default: the next loop of
    /// `EventLoopGroup.default`).
    @MainActor
    public convenience init(delegate: MainActorSocketDelegate, eventLoop: EventLoop? = nil) {
        self.init(receiver: SwiftDelegateReceiver(mainActor: delegate),
                  callbackQueue: PinnedCallbackQueue(.mainActor, behind: .eventLoop), eventLoop: eventLoop)
    }

    convenience init(receiver: SocketEventReceiver?, callbackQueue: CallbackQueue, eventLoop: EventLoop?) {
        let loop = eventLoop ?? EventLoopGroup.default.next()
        self.init(core: TCPSocketCore(loop: loop, configuration: SocketConfiguration()), receiver: receiver,
                  callbackQueue: callbackQueue)
    }

    /// A multi-loop listener's sibling (`MultiLoopListeners`).
    convenience init(siblingCore core: TCPSocketCore, receiver: SocketEventReceiver?, callbackQueue: CallbackQueue) {
        self.init(core: core, receiver: receiver, callbackQueue: callbackQueue)
    }

    /// A socket around `core` (for an accepted connection: made on the listener's loop).
    private init(core: TCPSocketCore, receiver: SocketEventReceiver?, callbackQueue: CallbackQueue) {
        self.core = core
        routing = CallbackRouting(queue: callbackQueue, receiver: receiver)
        core.ownerInterests.store(receiver?.interests.rawValue ?? 0, ordering: .relaxed)
        core.attach(owner: self)
    }

    /// Wraps an already connected TCP or Unix-domain stream socket (upstream's
    /// `socketFromConnectedSocketFD`). On success the socket owns `descriptor`, makes it
    /// non-blocking and reports `didConnect` to the delegate. Throws `.badParam` for a
    /// descriptor that is not a connected stream socket (the caller keeps it then).
    public convenience init(connectedSocketDescriptor descriptor: Int32, delegate: SocketDelegate? = nil,
                            callbackQueue: CallbackQueue = .eventLoop, eventLoop: EventLoop? = nil) throws(SocketError) {
        self.init(receiver: SwiftDelegateReceiver(delegate), callbackQueue: callbackQueue, eventLoop: eventLoop)
        try adopt(descriptor)
    }

    deinit {
        core.ownerInterests.store(0, ordering: .relaxed)
        core.revokeCallerBuffers()
        releaseCore()
    }

    // MARK: Delegate and callback queue

    /// The delegate, held weakly. Setting it is synchronous: once the setter returns, no
    /// callback reaches the previous delegate (a callback running on another thread is
    /// waited for; from inside a callback of this socket it takes effect at once; when that
    /// wait would deadlock, it is not made, and the running callback may still be finishing).
    /// nil while the delegate is a `MainActorSocketDelegate` (see `mainActorDelegate`).
    public var delegate: SocketDelegate? {
        get { (receiver as? SwiftDelegateReceiver)?.publicDelegate }
        set { setReceiver(SwiftDelegateReceiver(newValue), callbackQueue: nil) }
    }

    /// The delegate, when it lives on the main actor (held weakly). Setting it is synchronous
    /// as for `delegate`, and pins the callbacks to the main actor; setting `delegate` (or
    /// nil here) lets them go back to `callbackQueue`.
    @MainActor
    public var mainActorDelegate: MainActorSocketDelegate? {
        get { (receiver as? SwiftDelegateReceiver)?.mainActorAdapter?.target }
        set { setDelegate(newValue) }
    }

    /// Sets a main-actor delegate (see `mainActorDelegate`).
    @MainActor
    public func setDelegate(_ delegate: MainActorSocketDelegate?) {
        let receiver = SwiftDelegateReceiver(mainActor: delegate)
        setReceiver(receiver, callbackQueue: nil, pinnedQueue: receiver.pinnedQueue)
    }

    /// Where callbacks run. Changing it keeps callbacks in order: those already queued on the
    /// old queue run there first. While the delegate is a `MainActorSocketDelegate` this is
    /// `.mainActor`, and a queue set meanwhile applies once another delegate is set.
    public var callbackQueue: CallbackQueue {
        get { routedQueue }
        set {
            routedQueue = newValue
            routingChangedForSiblings()
        }
    }

    /// Sets both, synchronously (see `delegate`).
    public func setDelegate(_ delegate: SocketDelegate?, callbackQueue: CallbackQueue) {
        setReceiver(SwiftDelegateReceiver(delegate), callbackQueue: callbackQueue)
    }

    /// For the C API's release: no further copies into callers' read buffers.
    func revokeCallerBuffers() {
        core.revokeCallerBuffers()
    }

    /// Anything you want to keep with the socket; never touched by SocketKit.
    public var userData: AnyObject? {
        get { routedUserData }
        set { routedUserData = newValue }
    }

    // MARK: Configuration

    /// A setter: the loop changes the configuration (see `onLoopOrQueued`).
    private func configure(_ change: @escaping @Sendable (inout SocketConfiguration) -> Void) {
        onLoopOrQueued { $0.configure(change) }
    }

    private var configuration: SocketConfiguration { core.readPublished { $0.configuration } }

    /// Whether IPv4 is used when connecting and accepting (default true).
    public var isIPv4Enabled: Bool {
        get { configuration.isIPv4Enabled }
        set { configure { $0.isIPv4Enabled = newValue } }
    }

    /// Whether IPv6 is used when connecting and accepting (default true).
    public var isIPv6Enabled: Bool {
        get { configuration.isIPv6Enabled }
        set { configure { $0.isIPv6Enabled = newValue } }
    }

    /// Which family Happy Eyeballs tries first when a name has both (default IPv4).
    public var isIPv4PreferredOverIPv6: Bool {
        get { configuration.isIPv4PreferredOverIPv6 }
        set { configure { $0.isIPv4PreferredOverIPv6 = newValue } }
    }

    /// Seconds between starting one connection attempt and the next (default 0.3).
    /// Negative or NaN values become 0.
    public var alternateAddressDelay: Double {
        get { configuration.alternateAddressDelay }
        set { configure { $0.alternateAddressDelay = newValue.isNaN ? 0 : max(0, newValue) } }
    }

    /// Happy Eyeballs v2's resolution delay (RFC 8305 §3), in seconds (default 0.05): a name's
    /// A and AAAA records are asked for apart, and connecting starts with the first answer;
    /// when that is the other family's (IPv6 when IPv4 is preferred, and the reverse), it
    /// waits this long for the preferred family's before connecting with what it has.
    /// Negative or NaN values become 0.
    public var resolutionDelay: Double {
        get { configuration.resolutionDelay }
        set { configure { $0.resolutionDelay = newValue.isNaN ? 0 : max(0, newValue) } }
    }

    /// When the peer closes its side: true (default) ends the connection with `.closed`,
    /// false keeps it open for writing and reports `socketDidCloseReadStream`; either once
    /// every byte that arrived before the close has been read (at once when none is
    /// unread, whether or not a read is queued, as GCDAsyncSocket does).
    public var autoDisconnectOnClosedReadStream: Bool {
        get { configuration.autoDisconnectOnClosedReadStream }
        set { configure { $0.autoDisconnectOnClosedReadStream = newValue } }
    }

    /// The most bytes a read may gather in SocketKit's memory (default 16 MiB): a read to a
    /// separator without an explicit maximum ends the connection with `.readMaxedOut` once
    /// it holds that many without the separator, and a read to a length above it is refused
    /// (`.badParam`). Reads into a caller's buffer are bounded by the buffer instead.
    ///
    /// GCDAsyncSocket has no such limit. SocketKit has one because a read's length usually
    /// comes from the peer (a length prefix, a Content-Length): without a limit, a peer that
    /// announces 4 GiB makes the process hold up to 4 GiB before the application sees any
    /// of it. Raise it for bigger messages, or read them into a buffer of your own.
    public var maximumReadLength: Int { configuration.maximumReadLength }

    /// Sets `maximumReadLength`. Throws `.badParam` below 1: a limit of 0 bytes would make
    /// every read to a separator fail.
    public func setMaximumReadLength(_ length: Int) throws(SocketError) {
        guard length >= 1 else { throw SocketError(.badParam, "the maximum read length must be at least 1 byte") }
        configure { $0.maximumReadLength = length }
    }

    /// The write watermarks (defaults 32 KiB low, 64 KiB high).
    public var writeWatermarks: (low: Int, high: Int) {
        let configuration = self.configuration
        return (configuration.writeLowWatermark, configuration.writeHighWatermark)
    }

    /// Sets the write watermarks. Throws `.badParam` unless `0 <= low <= high`.
    public func setWriteWatermarks(low: Int, high: Int) throws(SocketError) {
        guard low >= 0, low <= high else { throw SocketError(.badParam, "watermarks need 0 <= low <= high") }
        configure {
            $0.writeLowWatermark = low
            $0.writeHighWatermark = high
        }
    }

    /// The most bytes the write queue may hold: written, and not yet taken by the kernel
    /// (64 MiB by default; 0: no limit). A write that would take the queue above it fails
    /// at once with `.writeQueueFull` and queues nothing, so a peer that stops reading
    /// cannot make the socket's memory grow without bound, even when the application
    /// ignores the watermarks (which it should heed first: stop writing, or reading what it
    /// echoes, at the high one). A single write larger than the maximum always fails.
    public var maximumQueuedWriteBytes: Int { configuration.maximumQueuedWriteBytes }

    /// Sets `maximumQueuedWriteBytes` (0: no limit); it applies to the next write. Throws
    /// `.badParam` for a negative value.
    public func setMaximumQueuedWriteBytes(_ maximum: Int) throws(SocketError) {
        guard maximum >= 0 else { throw SocketError(.badParam, "maximumQueuedWriteBytes must be 0 (no limit) or positive") }
        configure { $0.maximumQueuedWriteBytes = maximum }
    }

    /// TCP_NODELAY: send small writes at once instead of holding them under Nagle's algorithm
    /// until earlier data is acknowledged. On by default, as asyncio, Go and curl set it:
    /// SocketKit already sends what is queued together (several writes per system call,
    /// a TLS handshake's last flight with the records that follow it), so Nagle adds little,
    /// and it costs a delayed-ACK wait (40 ms on Linux) whenever a message leaves in two
    /// sends that the peer does not answer in between (a request written in two parts, a
    /// response behind a TLS server's session tickets). Turn it off to let the kernel
    /// coalesce many tiny writes made from other threads.
    public var noDelay: Bool {
        get { configuration.tcpOptions.noDelay }
        set { configure { $0.tcpOptions.noDelay = newValue } }
    }

    /// TCP keep-alive probing, or nil (default) for none.
    public var keepAlive: KeepAlive? { configuration.tcpOptions.keepAlive }

    /// Turns keep-alive on with these settings, or off with nil. Throws `.badParam` for
    /// values the kernel refuses (idle and interval 1...32767 s, count 1...127).
    public func setKeepAlive(_ keepAlive: KeepAlive?) throws(SocketError) {
        if let keepAlive, !keepAlive.isValid {
            throw SocketError(.badParam, "keep-alive needs idle and interval in 1...32767 and count in 1...127")
        }
        configure { $0.tcpOptions.keepAlive = keepAlive }
    }

    /// SO_SNDBUF to request (0, the default, leaves the kernel's).
    public var sendBufferSize: Int { configuration.tcpOptions.sendBufferSize }
    /// SO_RCVBUF to request (0, the default, leaves the kernel's).
    public var receiveBufferSize: Int { configuration.tcpOptions.receiveBufferSize }

    /// Throws `.badParam` for negative sizes or sizes above `Int32.max`.
    public func setBufferSizes(send: Int, receive: Int) throws(SocketError) {
        guard (0...Int(Int32.max)).contains(send), (0...Int(Int32.max)).contains(receive) else {
            throw SocketError(.badParam, "buffer sizes must be in 0...\(Int32.max)")
        }
        configure {
            $0.tcpOptions.sendBufferSize = send
            $0.tcpOptions.receiveBufferSize = receive
        }
    }

    /// SO_REUSEPORT on the listening sockets `accept(onPort:)` and `accept(onInterface:port:)`
    /// make (off by default): other sockets with it set, of this process or another of the
    /// same user, may listen on the same address and port, and the kernel spreads new
    /// connections among them (for several processes, or a rolling restart). See
    /// `acceptsOnEveryLoop` for one listener spread over the loops of its group.
    public var reusePort: Bool {
        get { configuration.reusePort }
        set { configure { $0.reusePort = newValue } }
    }

    /// A listener with one accepting socket per loop of its group (off by default):
    /// `accept(onPort:)` and `accept(onInterface:port:)` open an SO_REUSEPORT socket on
    /// every loop of the socket's `EventLoopGroup`, listening on the same addresses and
    /// port, so the kernel spreads connections over the loops, and each connection lives on
    /// the loop that accepted it: no hand-off between threads (the new-connection hook,
    /// `newEventLoop(forConnectionFrom:)`, is not asked). `didAccept` names this socket as
    /// the listener; on `.eventLoop` it runs on the accepting loop, so the didAccepts of
    /// different loops may run at the same time (on a serial queue they take turns).
    /// Everything else is as one listener: getters, `perform` and `disconnect` (which ends
    /// every loop's socket before it returns) are this socket's; delegate and queue changes
    /// reach every loop's socket. A group of one loop, and Unix-domain or adopted listeners,
    /// listen once as usual.
    public var acceptsOnEveryLoop: Bool {
        get { configuration.acceptsOnEveryLoop }
        set { configure { $0.acceptsOnEveryLoop = newValue } }
    }

    /// The PROXY protocol header (HAProxy's, v1 text or v2 binary) every connection this
    /// listener accepts must begin with (`.none` by default): set it for a listener behind a
    /// load balancer that sends one (HAProxy `send-proxy`, `send-proxy-v2`). A connection is
    /// reported in `didAccept` only once its whole header has arrived (the new-connection
    /// hook is asked then too); its `connectedAddress` / `connectedHost` / `connectedPort`
    /// are then the header's source (the client), its `localAddress` the header's
    /// destination, and `proxyAddress` the proxy it really came from. A v2 LOCAL header (a
    /// health check) or v1 `UNKNOWN` keeps the real addresses; v2 TLVs are skipped, except a
    /// CRC32C, which must match the header. What the client sent after
    /// the header is its first read (or its TLS handshake: the header comes before the
    /// ClientHello). A malformed, oversized or cut-short header, or one not complete within
    /// `proxyHeaderTimeout`, closes that connection alone, with a warning in the engine's
    /// log (subsystem `.accept`); the listener goes on. Read when accepting starts.
    public var proxyProtocol: ProxyProtocolMode {
        get { configuration.proxyProtocol }
        set { configure { $0.proxyProtocol = newValue } }
    }

    /// Seconds an accepted connection may take to send its whole PROXY protocol header
    /// (default 5).
    public var proxyHeaderTimeout: Double { configuration.proxyHeaderTimeout }

    /// Throws `.badParam` unless `seconds` is finite and in (0, 86400].
    public func setProxyHeaderTimeout(_ seconds: Double) throws(SocketError) {
        guard seconds.isFinite, seconds > 0, seconds <= 86_400 else {
            throw SocketError(.badParam, "the PROXY protocol header timeout takes 0 < seconds <= 86400")
        }
        configure { $0.proxyHeaderTimeout = seconds }
    }

    /// TCP_USER_TIMEOUT, in seconds: how long written data may stay unacknowledged before
    /// the kernel gives up on the connection, which then ends with `.system` ETIMEDOUT (a
    /// peer that vanished is noticed in seconds instead of the ~15 minutes of the kernel's
    /// retransmissions). 0 (the default) leaves the kernel's. Applies to connections (made,
    /// accepted: they take the listener's, adopted), at once when connected; millisecond
    /// resolution.
    public var userTimeout: Double { Double(configuration.tcpOptions.userTimeoutMilliseconds) / 1000 }

    /// Sets `userTimeout`. Throws `.badParam` for a negative, NaN or infinite value, or one
    /// above `Int32.max` milliseconds (about 24 days).
    public func setUserTimeout(_ seconds: Double) throws(SocketError) {
        guard seconds.isFinite, seconds >= 0, (seconds * 1000).rounded(.up) <= Double(Int32.max) else {
            throw SocketError(.badParam, "the user timeout takes 0...\(Int32.max / 1000) seconds")
        }
        let milliseconds = UInt32((seconds * 1000).rounded(.up))
        configure { $0.tcpOptions.userTimeoutMilliseconds = milliseconds }
    }

    /// TCP Fast Open (RFC 7413), off by default; TCP only. A listener accepts data in the
    /// client's SYN (TCP_FASTOPEN). A connect sends its first write with the SYN when the
    /// kernel holds a cookie from an earlier connection to that server
    /// (TCP_FASTOPEN_CONNECT), and otherwise asks for one and connects as usual. The
    /// kernel decides too: net.ipv4.tcp_fastopen has bit 1 for clients (its default) and
    /// bit 2 for servers.
    ///
    /// With a cookie the kernel sends the SYN with the first write, so `didConnect` comes
    /// before the handshake: a server that is not there then ends the connection with
    /// `.system` ECONNREFUSED, and the first address of a name wins the Happy Eyeballs
    /// race at once. For the first write to ride in the SYN, queue it right after `connect`
    /// on the socket's loop thread (in a callback or `perform`); made from another thread it
    /// does when it reaches the loop before the kernel reports the socket writable. A
    /// connection with nothing queued by then sends a plain SYN once it is reported connected.
    public var fastOpen: Bool {
        get { configuration.fastOpen }
        set { configure { $0.fastOpen = newValue } }
    }

    /// The proxy connects go through (nil: none, the default); see `setProxy(_:)`.
    public var proxy: ProxySettings? { configuration.proxy }

    /// Connects from now on go through `proxy` (nil: directly): `connect(toHost:port:)` and
    /// `connect(to:)` with an IP address connect to the proxy (its name resolved, Happy
    /// Eyeballs and the connect timeout as for any host), send the target to it unresolved
    /// (the proxy resolves a name; IP literals go as addresses), and report
    /// `didConnectToHost` with the target's name and port once the proxy said yes. The
    /// connect timeout covers the proxy's handshake. Reads, writes and `startTLS` queued
    /// meanwhile run afterwards; TLS verifies the target's name, not the proxy's. Unix-domain
    /// connects never use it. `connectedHost`/`connectedPort` give the target,
    /// `connectedAddress` the proxy's address. Failures: `.proxy` (the proxy refused or
    /// failed; `osError` holds its SOCKS5 reply code or HTTP status), `.proxyAuthentication`,
    /// `.system` (the proxy cannot be reached), `.connectTimeout`. Throws `.badConfig` while
    /// connected or connecting.
    public func setProxy(_ proxy: ProxySettings?) throws(SocketError) {
        guard isDisconnected else {
            throw SocketError(.badConfig, "the proxy is set before connecting")
        }
        configure { $0.proxy = proxy }
    }

    /// The options `setSocketOption` set, in the order they are applied.
    public var socketOptions: [SocketOption] { configuration.socketOptions }

    /// The most options `setSocketOption` keeps.
    public static let maximumSocketOptions = 64

    /// Sets `option` on every descriptor SocketKit makes for this socket from now on, right
    /// after `socket(2)`: before a listener binds and listens, before each connection
    /// attempt binds and connects. For what `perform` (which sees descriptors already
    /// connected or listening) comes too late for: TCP_MAXSEG for the SYN, IP_TOS,
    /// IP_FREEBIND, SO_BINDTODEVICE, SO_MARK... One value per level and name: setting it
    /// again replaces it. Descriptors that exist already keep what they have (see
    /// `perform`). An option the kernel refuses fails the `accept` that makes the listener
    /// (`.system` with its errno and the option's numbers), or the connection attempt, as
    /// a refused connect does (`socketDidDisconnect`). Throws `.badParam` beyond
    /// `maximumSocketOptions` options.
    public func setSocketOption(_ option: SocketOption) throws(SocketError) {
        let options = configuration.socketOptions
        let replaces = options.contains { $0.level == option.level && $0.name == option.name }
        guard replaces || options.count < Socket.maximumSocketOptions else {
            throw SocketError(.badParam, "at most \(Socket.maximumSocketOptions) socket options")
        }
        configure { configuration in
            configuration.socketOptions.removeAll { $0.level == option.level && $0.name == option.name }
            configuration.socketOptions.append(option)
        }
    }

    /// Forgets every option `setSocketOption` set (descriptors that have them keep them).
    public func removeAllSocketOptions() {
        configure { $0.socketOptions.removeAll() }
    }

    // MARK: Accepting

    /// Listens on every interface, IPv4 and IPv6 (as enabled). Port 0 picks one free port
    /// for both families. Throws synchronously for a port in use and the like; returns
    /// listening (the loop has taken the listener over).
    public func accept(onPort port: UInt16) throws(SocketError) {
        try accept(onInterface: nil, port: port)
    }

    /// Listens on `interface`: nil for any, `"localhost"`/`"loopback"`, an interface name
    /// (`"eth0"`) or an IP address, optionally with a port (`"eth0:8080"`, used when `port`
    /// is 0).
    public func accept(onInterface interface: String?, port: UInt16) throws(SocketError) {
        try checkDelegate()
        let loops = eventLoop.group?.loops ?? [eventLoop]
        let spreading = configuration.acceptsOnEveryLoop && loops.count > 1
        let session = try onLoop { core throws(SocketError) -> UInt64 in
            try core.requestListen(requireFamilies: true, multiLoop: spreading ? true : nil) { configuration throws(SocketError) in
                var configuration = configuration
                if spreading { configuration.reusePort = true }
                return try ListenerFactory.makeIPListeners(interface: interface, port: port, configuration: configuration)
            }
            return core.session
        }
        if spreading { try startSiblings(session: session, on: loops) }
    }

    /// The other loops' listeners of a multi-loop listener, on the addresses (and ports) the
    /// primary got. A failure ends the whole listener.
    private func startSiblings(session: UInt64, on loops: [EventLoop]) throws(SocketError) {
        let addresses = listeningAddresses
        var configuration = self.configuration
        configuration.reusePort = true
        let (queue, receiver) = core.withStateLock { (routing.queue, routing.receiver) }
        do throws(SocketError) {
            for loop in loops where loop !== eventLoop {
                try MultiLoopListeners.startSibling(of: self, session: session, on: loop, addresses: addresses,
                                                    receiver: receiver, queue: queue, configuration: configuration)
            }
        } catch {
            disconnect()
            throw error
        }
        // Ended meanwhile (a disconnect from another thread, the loop stopping): the
        // siblings started after it ended would otherwise stay.
        if core.readPublished({ $0.session != session || $0.status != .accepting }) {
            MultiLoopListeners.stopSiblings(of: core)
        }
    }

    /// Listens on a Unix-domain socket at `path`. A stale socket file there is replaced;
    /// the file is removed when the listener closes (if it is still the one this listener
    /// made: a newer listener's file at the same path stays).
    public func accept(onUnixPath path: String) throws(SocketError) {
        try checkDelegate()
        try onLoop { core throws(SocketError) in
            try core.requestListen(requireFamilies: false) { configuration throws(SocketError) in
                [try ListenerFactory.makeUnixListener(path: path, configuration: configuration)]
            }
        }
    }

    /// Listens on a Linux abstract Unix-domain name (`SocketAddress(abstractUnixName:)`): a
    /// name in the kernel's namespace, no file, gone with the listener. Throws `.badParam`
    /// for an empty name or one longer than 107 bytes, `.system` EADDRINUSE when it is taken.
    public func accept(onAbstractUnixName name: [UInt8]) throws(SocketError) {
        let address = try SocketAddress(abstractUnixName: name)
        try checkDelegate()
        try onLoop { core throws(SocketError) in
            try core.requestListen(requireFamilies: false) { configuration throws(SocketError) in
                [try ListenerFactory.makeAbstractUnixListener(address: address, configuration: configuration)]
            }
        }
    }

    /// Listens on the abstract name made of `name`'s UTF-8 bytes.
    public func accept(onAbstractUnixName name: String) throws(SocketError) {
        try accept(onAbstractUnixName: Array(name.utf8))
    }

    /// Listens on descriptors made elsewhere (NIO's `withBoundSocket`, asyncio's
    /// `create_server(sock=)`): sockets systemd's socket activation passed
    /// (`socketActivationDescriptors`), or a supervisor, or code that set options SocketKit
    /// does not offer. Each must be a bound stream socket (IPv4, IPv6 or Unix-domain: to a
    /// port, a path or an abstract name), listening or not (one that is not is made to);
    /// one listener may take several (an IPv4 and an IPv6 one). On success the socket owns
    /// them: made non-blocking and close-on-exec, closed when the listener stops; a Unix
    /// socket file is left where it is (SocketKit did not make it). They keep the options
    /// they were made with (`setSocketOption`, `fastOpen` and `reusePort` concern
    /// descriptors SocketKit makes). On failure they stay yours, unchanged (unless the
    /// failure is `listen` itself on one of several). Throws `.badParam` for a descriptor
    /// that is negative, not a socket of those kinds, not bound, connected, or given twice
    /// (1...64 of them), `.system` for one that is not open or not a socket (EBADF,
    /// ENOTSOCK), `.badConfig` when not disconnected or without a delegate.
    public func accept(onDescriptors descriptors: [Int32]) throws(SocketError) {
        try checkDelegate()
        let addresses = try ListenerFactory.checkAdoptable(descriptors)
        try onLoop { core throws(SocketError) in
            try core.requestListen(requireFamilies: false) { _ throws(SocketError) in
                try ListenerFactory.adopt(descriptors, addresses: addresses)
            }
        }
    }

    /// The listening descriptors systemd's socket activation passed to this process
    /// (sd_listen_fds(3)): `LISTEN_FDS` of them from descriptor 3 on, when `LISTEN_PID` is
    /// this process; none otherwise. They are made close-on-exec; with
    /// `unsettingEnvironment` (the default) the variables are removed, so that a child
    /// process does not take them for its own. Hand them to `accept(onDescriptors:)`.
    /// Throws `.badParam` when a variable is malformed.
    public static func socketActivationDescriptors(unsettingEnvironment: Bool = true) throws(SocketError) -> [Int32] {
        try SocketActivation.descriptors(unsettingEnvironment: unsettingEnvironment)
    }

    // MARK: Connecting

    /// Connects to a host name, an IP literal or `"localhost"`. Resolution runs off the
    /// loop, A and AAAA apart, and every resolved address is raced as it comes (Happy
    /// Eyeballs v2, RFC 8305: see `resolutionDelay` and `alternateAddressDelay`). `interface` binds the local
    /// end: `"eth0"`, an IP, `"eth0:5000"`, or `":5000"` for a local port only.
    /// `timeout` (seconds; negative = none) covers resolution and connecting; with 0 the
    /// connect succeeds only if it completes by the loop's next poll (a Unix-domain path
    /// does, a loopback handshake normally does), so a name that needs the resolver always
    /// ends with `.connectTimeout`. Reads and writes may be queued right away. The result
    /// arrives as `didConnectToHost` or `socketDidDisconnect` (`.other` when no resolved
    /// address is of an enabled family). With a proxy (`setProxy(_:)`), the proxy resolves
    /// `host`.
    public func connect(toHost host: String, port: UInt16, viaInterface interface: String? = nil,
                        timeout: Double = -1) throws(SocketError) {
        try AddressResolver.checkHost(host)
        try checkTimeout(timeout)
        let local = try interface.map { (description: String) throws(SocketError) in try Socket.localEndpoints(description) }
        try connect(.host(host, port: port), local: local, timeout: timeout)
    }

    /// Connects to a raw address (IPv4, IPv6 or Unix-domain), without resolution.
    public func connect(to address: SocketAddress, viaInterface interface: String? = nil,
                        timeout: Double = -1) throws(SocketError) {
        try checkTimeout(timeout)
        let address = try address.checkedPathname()
        let local = try interface.map { (description: String) throws(SocketError) in try Socket.localEndpoints(description) }
        try connect(.address(address), local: local, timeout: timeout)
    }

    /// Connects to a Unix-domain socket at `path`; `didConnectToUnixPath` reports success.
    public func connect(toUnixPath path: String, timeout: Double = -1) throws(SocketError) {
        try checkTimeout(timeout)
        try connect(.address(try SocketAddress(unixPath: path)), local: nil, timeout: timeout)
    }

    /// Connects to a Linux abstract Unix-domain name; `didConnectToUnixPath` reports it as
    /// `@` followed by the name.
    public func connect(toAbstractUnixName name: [UInt8], timeout: Double = -1) throws(SocketError) {
        try checkTimeout(timeout)
        try connect(.address(try SocketAddress(abstractUnixName: name)), local: nil, timeout: timeout)
    }

    /// Connects to the abstract name made of `name`'s UTF-8 bytes.
    public func connect(toAbstractUnixName name: String, timeout: Double = -1) throws(SocketError) {
        try connect(toAbstractUnixName: Array(name.utf8), timeout: timeout)
    }

    private static func localEndpoints(_ description: String) throws(SocketError) -> Interfaces.Endpoints {
        let parts = try Interfaces.split(description)
        return try Interfaces.endpoints(for: parts.name, port: parts.port ?? 0)
    }

    private func connect(_ target: ConnectTarget, local: Interfaces.Endpoints?, timeout: Double) throws(SocketError) {
        try checkDelegate()
        try onLoop { core throws(SocketError) in try core.requestConnect(to: target, localEndpoints: local, timeout: timeout) }
    }

    func adopt(_ descriptor: Int32) throws(SocketError) {
        guard descriptor >= 0 else { throw SocketError(.badParam, "negative descriptor") }
        guard let family = SystemCalls.socketFamily(descriptor) else {
            throw SocketError.lastSystemError("getsockopt(SO_DOMAIN)")
        }
        guard family == AF_INET || family == AF_INET6 || family == AF_UNIX else {
            throw SocketError(.badParam, "not an IPv4, IPv6 or Unix-domain socket")
        }
        guard SystemCalls.getOption(descriptor, SOL_SOCKET, SO_TYPE) == SystemCalls.streamType else {
            throw SocketError(.badParam, "not a stream socket")
        }
        guard let peer = SystemCalls.peerAddress(descriptor) else {
            throw SocketError.lastSystemError("getpeername")
        }
        try SystemCalls.makeNonBlocking(descriptor)
        let local = SystemCalls.localAddress(descriptor)
        try onLoop { core throws(SocketError) in
            try core.requestAdopt(descriptor, peer: peer, local: local, unix: family == AF_UNIX)
        }
    }

    // MARK: Reading

    /// Reads whatever is available (at least one byte; at most `maxLength` when it is
    /// positive). `timeout` in seconds: negative = none, 0 = fail unless data is there.
    public func read(maxLength: Int = 0, timeout: Double = -1, tag: Int = 0) throws(SocketError) {
        guard maxLength >= 0 else { throw SocketError(.badParam, "negative maxLength") }
        try checkTimeout(timeout)
        let (session, _, _) = try sessionForTransfer()
        try queue(ReadRequest(framing: .available, tag: tag, timeout: timeout,
                              maximumLength: maxLength > 0 ? maxLength : Int.max), session: session)
    }

    /// Reads whatever is available into `buffer` at `offset` (at most `maxLength` bytes when
    /// positive, and no more than fits). The buffer must stay valid until the read completes
    /// (`didReadInto`), `socketDidDisconnect` arrives, or the socket is released.
    public func read(into buffer: UnsafeMutableRawBufferPointer, offset: Int = 0, maxLength: Int = 0,
                     timeout: Double = -1, tag: Int = 0) throws(SocketError) {
        try checkBuffer(buffer, offset: offset, needing: 1)
        guard maxLength >= 0 else { throw SocketError(.badParam, "negative maxLength") }
        try checkTimeout(timeout)
        let room = buffer.count - offset
        let (session, _, _) = try sessionForTransfer()
        try queue(ReadRequest(framing: .available, tag: tag, timeout: timeout,
                              maximumLength: maxLength > 0 ? min(maxLength, room) : room,
                              callerBuffer: buffer, callerOffset: offset,
                              callerBufferGuard: core.callerBuffers), session: session)
    }

    /// Reads exactly `length` bytes. Lengths above `maximumReadLength` are refused
    /// (`.badParam`): a length usually comes from the peer, and SocketKit holds the bytes
    /// until the read completes (see `maximumReadLength`). Raise the limit for bigger reads,
    /// or read into a buffer of your own (`read(toLength:into:offset:timeout:tag:)`).
    public func read(toLength length: Int, timeout: Double = -1, tag: Int = 0) throws(SocketError) {
        guard length > 0 else { throw SocketError(.badParam, "length must be positive") }
        try checkTimeout(timeout)
        let (session, maximumReadLength, _) = try sessionForTransfer()
        guard length <= maximumReadLength else {
            throw SocketError(.badParam,
                              "length \(length) is above maximumReadLength (\(maximumReadLength)); raise it to read more at once")
        }
        try queue(ReadRequest(framing: .length(length), tag: tag, timeout: timeout, maximumLength: length),
                  session: session)
    }

    /// Reads exactly `length` bytes into `buffer` at `offset` (which must have room).
    public func read(toLength length: Int, into buffer: UnsafeMutableRawBufferPointer, offset: Int = 0,
                     timeout: Double = -1, tag: Int = 0) throws(SocketError) {
        guard length > 0 else { throw SocketError(.badParam, "length must be positive") }
        try checkBuffer(buffer, offset: offset, needing: length)
        try checkTimeout(timeout)
        let (session, _, _) = try sessionForTransfer()
        try queue(ReadRequest(framing: .length(length), tag: tag, timeout: timeout, maximumLength: length,
                              callerBuffer: buffer, callerOffset: offset, callerBufferGuard: core.callerBuffers),
                  session: session)
    }

    /// Reads up to and including `separator`. With `maxLength` > 0 the read fails with
    /// `.readMaxedOut` (ending the connection) once that many bytes arrived without the
    /// separator; with 0 the socket's `maximumReadLength` applies.
    public func read(toData separator: [UInt8], maxLength: Int = 0, timeout: Double = -1,
                     tag: Int = 0) throws(SocketError) {
        try checkSeparator(separator, maxLength: maxLength)
        try checkTimeout(timeout)
        let (session, maximumReadLength, _) = try sessionForTransfer()
        let limit = maxLength > 0 ? maxLength : max(maximumReadLength, separator.count)
        try queue(ReadRequest(framing: .separator(separator), tag: tag, timeout: timeout, maximumLength: limit),
                  session: session)
    }

    /// Reads up to and including `separator` into `buffer` at `offset`; the room left in
    /// the buffer caps the length as `maxLength` does.
    public func read(toData separator: [UInt8], into buffer: UnsafeMutableRawBufferPointer, offset: Int = 0,
                     maxLength: Int = 0, timeout: Double = -1, tag: Int = 0) throws(SocketError) {
        try checkSeparator(separator, maxLength: maxLength)
        try checkBuffer(buffer, offset: offset, needing: separator.count)
        try checkTimeout(timeout)
        let room = buffer.count - offset
        let (session, _, _) = try sessionForTransfer()
        try queue(ReadRequest(framing: .separator(separator), tag: tag, timeout: timeout,
                              maximumLength: maxLength > 0 ? min(maxLength, room) : room,
                              callerBuffer: buffer, callerOffset: offset, callerBufferGuard: core.callerBuffers),
                  session: session)
    }

    /// Reads exactly `length` bytes into the regular file open for writing at
    /// `descriptor`, written at its position as they arrive (`write(2)`: the position, which
    /// the caller's descriptor shares, advances), so a large body goes to disk without being
    /// held in memory (no `maximumReadLength` applies). SocketKit writes through a duplicate
    /// of the descriptor: close yours when you like. Progress as for a read to a length
    /// (`didReadPartialDataOfLength`, `readProgress`); completion is `didRead` with no bytes
    /// and the tag (no other read completes empty). A write to the file that fails (ENOSPC,
    /// EIO) ends the connection with that error; a withdrawn read keeps what it wrote.
    /// Under TLS the file gets the plaintext. Throws `.badParam` for a length below 1 or a
    /// descriptor that is not a regular file open for writing.
    public func read(toLength length: Int, intoFile descriptor: Int32, timeout: Double = -1,
                     tag: Int = 0) throws(SocketError) {
        guard length > 0 else { throw SocketError(.badParam, "length must be positive") }
        try checkTimeout(timeout)
        try FileChecks.regularFile(descriptor, writable: true)
        let (session, _, _) = try sessionForTransfer()
        let sink = try FileSink(duplicating: descriptor, length: length)
        try queue(ReadRequest(framing: .file(sink), tag: tag, timeout: timeout, maximumLength: length), session: session)
    }

    /// Withdraws every queued read with `tag` that has not completed; the bytes the current
    /// one had gathered go back in front of the unread ones, so the next read gets them, in
    /// order. Nothing is lost: this is how a read is cancelled (an async caller that stopped
    /// waiting, a read whose framing turned out wrong). Answered once by
    /// `socket(_:didCancelReadWithTag:unreadBytes:)`; a read with that tag that had already
    /// completed delivered its `didRead` before that answer. Queued like a read, in order
    /// with the reads, `unread`s and cancels made before it.
    public func cancelRead(withTag tag: Int) throws(SocketError) {
        let (session, _, _) = try sessionForTransfer()
        try queueReadQueueChange { $0.cancelReads(withTag: tag, session: session) }
    }

    /// Puts `bytes` in front of the socket's unread bytes, as if they had arrived before
    /// everything not yet read: the next read gets them first. For bytes a read delivered to
    /// a caller that no longer wanted them, or a protocol sniffed and not consumed. Under TLS
    /// they are plaintext, in front of what the next read gets (before the marker of a
    /// `startTLS` still queued: the handshake's input). Queued like a read, in order.
    public func unread(_ bytes: [UInt8]) throws(SocketError) {
        guard !bytes.isEmpty else { throw SocketError(.badParam, "nothing to unread") }
        let (session, _, _) = try sessionForTransfer()
        try queueReadQueueChange { $0.unread(bytes, session: session) }
    }

    /// Changes to the read queue and the unread bytes wait for a running callback of this
    /// socket (its read's bytes may be the prebuffer's), and keep their order with reads.
    private func queueReadQueueChange(_ change: @escaping @Sendable (TCPSocketCore) -> Void) throws(SocketError) {
        let core = self.core
        if eventLoop.inEventLoop {
            core.perform(touchesLentMemory: true, change)
            return
        }
        guard eventLoop.execute({ core.perform(touchesLentMemory: true, change) }) else {
            throw SocketError(.badConfig, "the socket's event loop has stopped")
        }
    }

    /// The current read's progress, or nil when no read is under way.
    public var readProgress: OperationProgress? { core.readProgress.read() }

    private func queue(_ request: consuming ReadRequest, session: UInt64) throws(SocketError) {
        let core = self.core
        if eventLoop.inEventLoop && core.acceptsInlineOperation {
            core.enqueueRead(consume request, session: session)
            return
        }
        let sendable = UncheckedSendable(request)
        guard submit({ $0.enqueueRead(sendable.value, session: session) }) else {
            throw SocketError(.badConfig, "the socket's event loop has stopped")
        }
    }

    // MARK: Writing

    /// Queues `data`; `didWriteDataWithTag` reports when the kernel has accepted all of it.
    /// Empty data is refused (`.badParam`); so is a write that would take the queue above
    /// `maximumQueuedWriteBytes` (`.writeQueueFull`: nothing of it is queued).
    public func write(_ data: [UInt8], timeout: Double = -1, tag: Int = 0) throws(SocketError) {
        let (session, limit) = try admitWrite(count: data.count, timeout: timeout)
        let sent = data.withUnsafeBytes { writeInline($0, tag: tag, timeout: timeout, session: session) { .array(data) } }
        if sent { return }
        try queue(WriteRequest(.array(data), tag: tag, timeout: timeout), session: session, limit: limit)
    }

    /// The async face's write (`AsyncSocket.write`): as `write(_:timeout:tag:)`, except that
    /// a write the kernel takes whole at once, on the loop thread outside a callback (a task
    /// running on the socket's loop), completes without `didWriteDataWithTag`: true then.
    /// False when its completion comes as the event, as for any write.
    func writeCompletingInline(_ data: [UInt8], tag: Int) throws(SocketError) -> Bool {
        let (session, limit) = try admitWrite(count: data.count, timeout: -1)
        let core = self.core
        if eventLoop.inEventLoop && !core.inCallout && core.acceptsInlineOperation,
           let written = data.withUnsafeBytes({ core.writeImmediately($0, session: session, silentCompletion: true) }) {
            if written == data.count { return true }
            var request = WriteRequest(.array(data), tag: tag, timeout: -1)
            request.offset = written
            core.enqueuePartlyWritten(request, session: session)
            return false
        }
        try queue(WriteRequest(.array(data), tag: tag, timeout: -1), session: session, limit: limit)
        return false
    }

    /// Writes bytes the caller keeps (the C API's copying write): sent at once when the
    /// fast path allows, so the copy is made only of what the kernel did not take.
    func write(copying bytes: UnsafeRawBufferPointer, timeout: Double, tag: Int) throws(SocketError) {
        let (session, limit) = try admitWrite(count: bytes.count, timeout: timeout)
        if writeInline(bytes, tag: tag, timeout: timeout, session: session, storage: { .array(Array(bytes)) }) { return }
        try queue(WriteRequest(.array(Array(bytes)), tag: tag, timeout: timeout), session: session, limit: limit)
    }

    /// Queues caller memory without copying; `external` releases it when done. Takes the
    /// same fast path: a write the kernel took whole is released before this returns, and
    /// only what it did not take waits in the queue, still borrowed.
    func write(external: ExternalBytes, timeout: Double, tag: Int) throws(SocketError) {
        let (session, limit) = try admitWrite(count: external.bytes.count, timeout: timeout)
        if writeInline(external.bytes, tag: tag, timeout: timeout, session: session, storage: { .external(external) }) {
            return
        }
        try queue(WriteRequest(.external(external), tag: tag, timeout: timeout), session: session, limit: limit)
    }

    /// What every write checks before it goes anywhere: bytes, a valid timeout, a session
    /// that takes writes, room under `maximumQueuedWriteBytes`. The session and that limit.
    private func admitWrite(count: Int, timeout: Double) throws(SocketError) -> (session: UInt64, limit: Int) {
        guard count > 0 else { throw SocketError(.badParam, "empty write") }
        try checkTimeout(timeout)
        let (session, _, limit) = try sessionForTransfer(writing: true)
        guard core.queuedWriteBytesAllow(count, limit: limit) else { throw writeQueueFull(adding: count, limit: limit) }
        return (session, limit)
    }

    private func writeQueueFull(adding count: Int, limit: Int) -> SocketError {
        SocketError(.writeQueueFull, "\(queuedWriteBytes) bytes are queued: \(count) more would pass " +
                    "maximumQueuedWriteBytes (\(limit)); the peer is not reading as fast as it is written to")
    }

    /// The writes' fast path on the loop thread: with nothing queued ahead, `bytes` go to
    /// the kernel at once (see `TCPSocketCore.writeImmediately`) and only what it did not
    /// take is queued, kept as `storage` makes it. False when nothing was sent and the whole
    /// write must take the queue.
    private func writeInline(_ bytes: UnsafeRawBufferPointer, tag: Int, timeout: Double, session: UInt64,
                             storage: () -> WriteRequest.Storage) -> Bool {
        let core = self.core
        guard eventLoop.inEventLoop && core.acceptsInlineOperation,
              let written = core.writeImmediately(bytes, session: session) else { return false }
        if written == bytes.count {
            core.finishImmediateWrite(tag: tag)
        } else {
            var request = WriteRequest(storage(), tag: tag, timeout: timeout)
            request.offset = written
            core.enqueuePartlyWritten(request, session: session)
        }
        return true
    }

    /// Counts the request's bytes against `limit` (refusing it when they would pass it),
    /// then hands it to the loop.
    private func queue(_ request: WriteRequest, session: UInt64, limit: Int) throws(SocketError) {
        let core = self.core
        guard core.reserveQueuedWriteBytes(request.remaining, limit: limit) else {
            throw writeQueueFull(adding: request.remaining, limit: limit)
        }
        if eventLoop.inEventLoop && core.acceptsInlineOperation {
            core.enqueueWrite(request, session: session)
            return
        }
        let sendable = UncheckedSendable(request)
        guard submit({ $0.enqueueWrite(sendable.value, session: session) }) else {
            core.releaseQueuedWriteBytes(request.remaining)
            throw SocketError(.badConfig, "the socket's event loop has stopped")
        }
    }

    /// Queues `length` bytes of the regular file at `descriptor` from `offset` (nil: to the
    /// end), sent with `sendfile(2)`: the kernel copies them from the page cache to the
    /// socket, with no copy through this process (NIO's `FileRegion`, asyncio's
    /// `loop.sendfile`). A write in the queue like any other: in order, with its tag
    /// (`didWriteDataWithTag` once the kernel took all of it, `didWritePartialDataOfLength`
    /// as it goes), timeout and progress. Its bytes count in `queuedWriteBytes` and the
    /// watermarks but not against `maximumQueuedWriteBytes` (they take no memory).
    /// SocketKit reads through a duplicate of the descriptor at explicit offsets: the file's
    /// position is untouched, and you may close yours at once. A file that shrinks before
    /// the region is sent ends the connection (`.other`).
    /// Plaintext only (TCP or Unix-domain). Throws `.badParam` for a descriptor that is not
    /// a regular file open for reading, a negative offset, or a region that is empty or
    /// passes the end of the file; `.badConfig` under TLS or when not connected.
    public func writeFile(_ descriptor: Int32, offset: Int64 = 0, length: Int? = nil, timeout: Double = -1,
                          tag: Int = 0) throws(SocketError) {
        try checkTimeout(timeout)
        let size = try FileChecks.regularFile(descriptor, writable: false)
        guard offset >= 0, offset <= size else {
            throw SocketError(.badParam, "offset \(offset) is outside the file (\(size) bytes)")
        }
        let count = length ?? Int(size - offset)
        guard count > 0 else { throw SocketError(.badParam, "the region is empty") }
        guard Int64(count) <= size - offset else {
            throw SocketError(.badParam, "the region (\(count) bytes from \(offset)) passes the end of the file (\(size) bytes)")
        }
        let (session, _, _) = try sessionForTransfer(writing: true)
        guard core.tlsClaim.load(ordering: .relaxed) != session else {
            throw SocketError(.badConfig, "a file region goes with sendfile, which bypasses TLS: write its bytes instead")
        }
        let request = WriteRequest(.file(try FileRegion(duplicating: descriptor, offset: offset, length: count)),
                                   tag: tag, timeout: timeout)
        let core = self.core
        _ = core.reserveQueuedWriteBytes(request.remaining, limit: 0) // no memory: no limit
        let sendable = UncheckedSendable(request)
        guard submit({ $0.enqueueSpecialWrite(sendable.value, session: session) }) else {
            core.releaseQueuedWriteBytes(request.remaining)
            throw SocketError(.badConfig, "the socket's event loop has stopped")
        }
    }

    /// The current write's progress, or nil when no write is under way.
    public var writeProgress: OperationProgress? { core.writeProgressBox.load()?.cell.read() }

    /// Bytes queued and not yet accepted by the kernel (writes on their way to the loop
    /// included).
    public var queuedWriteBytes: Int { core.queuedWriteBytes }

    // MARK: Unix-domain extras

    /// Whether reads of a Unix-domain connection keep the descriptors the peer passes with
    /// its bytes (SCM_RIGHTS), for `takeReceivedDescriptors` (off by default: without it the
    /// kernel closes them as the bytes are read, so a peer cannot fill this process with
    /// open files). Accepted sockets take the listener's; changes apply at once. Not under
    /// TLS (its records are read without control messages: the kernel closes them).
    public var receivesDescriptors: Bool {
        get { configuration.receivesDescriptors }
        set { configure { $0.receivesDescriptors = newValue } }
    }

    /// Takes up to `limit` descriptors the peer passed (with `receivesDescriptors` on), in
    /// the order they came: yours to close. They are there by the time the bytes they came
    /// with reach a read (a `didRead`), possibly earlier, since a read may take fewer bytes
    /// than arrived. Those nobody takes are closed when the next session begins or the
    /// socket goes; more than 1024 held at once end the connection (`.other`). Waits for
    /// the loop (inline on it: call it from `didRead`).
    public func takeReceivedDescriptors(limit: Int = Int.max) throws(SocketError) -> [Int32] {
        guard limit >= 0 else { throw SocketError(.badParam, "negative limit") }
        return try onLoop { core in core.takeReceivedDescriptors(limit: limit) }
    }

    /// How many passed descriptors wait to be taken (waits for the loop, as
    /// `takeReceivedDescriptors`).
    public func receivedDescriptorCount() throws(SocketError) -> Int {
        try onLoop { core in core.heldReceivedDescriptors }
    }

    /// Writes `data` with `descriptors` passed along (SCM_RIGHTS), over a Unix-domain
    /// connection: they reach the peer with the first byte of `data`. SocketKit passes
    /// duplicates, so you keep yours (close them when you like). Otherwise a write as
    /// `write(_:timeout:tag:)` (queued in order, `didWriteDataWithTag`), never sent by the
    /// fast path. Throws `.badParam` for empty data, no or more than 253 descriptors, or one
    /// that is not open; `.badConfig` when not a Unix-domain connection or under TLS.
    public func write(_ data: [UInt8], passingDescriptors descriptors: [Int32], timeout: Double = -1,
                      tag: Int = 0) throws(SocketError) {
        guard !descriptors.isEmpty, descriptors.count <= Int(SKC_MAX_PASSED_DESCRIPTORS) else {
            throw SocketError(.badParam, "a write passes 1...\(SKC_MAX_PASSED_DESCRIPTORS) descriptors")
        }
        let (session, limit) = try admitWrite(count: data.count, timeout: timeout)
        guard core.readPublished({ $0.isUnixDomain }) else {
            throw SocketError(.badConfig, "descriptors are passed over Unix-domain connections only")
        }
        guard core.tlsClaim.load(ordering: .relaxed) != session else {
            throw SocketError(.badConfig, "descriptors are not passed under TLS")
        }
        let passing = try DescriptorPassingBytes(bytes: data, descriptors: descriptors)
        let request = WriteRequest(.passing(passing), tag: tag, timeout: timeout)
        let core = self.core
        guard core.reserveQueuedWriteBytes(request.remaining, limit: limit) else {
            throw writeQueueFull(adding: request.remaining, limit: limit)
        }
        let sendable = UncheckedSendable(request)
        guard submit({ $0.enqueueSpecialWrite(sendable.value, session: session) }) else {
            core.releaseQueuedWriteBytes(request.remaining)
            throw SocketError(.badConfig, "the socket's event loop has stopped")
        }
    }

    /// The process, user and group at the other end of a connected Unix-domain socket, as
    /// the kernel recorded them when the connection was made (SO_PEERCRED). Throws
    /// `.badConfig` for any other socket. Waits for the loop (inline on it).
    public func peerCredentials() throws(SocketError) -> PeerCredentials {
        try onLoop { core throws(SocketError) in try core.peerCredentials() }
    }

    // MARK: TLS

    /// Queues the TLS handshake behind every read and write already queued (GCDAsyncSocket's
    /// `startTLS:`): those run in plaintext, the ones queued afterwards run encrypted once
    /// `socketDidSecure` was called. Bytes that arrived before the handshake starts are fed
    /// to it. May be called while connecting.
    ///
    /// The settings are checked and loaded here: unreadable or invalid certificates, keys or
    /// trust files throw `.tlsSettings`. Throws `.badConfig` when not connecting or
    /// connected, after `disconnectAfter…`, or when TLS was already started in this session
    /// (only the first call counts). Handshake failures arrive as `socketDidDisconnect` with
    /// their own code (`.tlsCertificateExpired`, `.tlsHostnameMismatch`, ...).
    public func startTLS(_ settings: TLSSettings = TLSSettings()) throws(SocketError) {
        let context = try TLSContext.forSettings(settings)
        // Queued like a read or a write (the marker's place in the queues is what counts),
        // after the same checks against the published state.
        let (status, accepted, writeStreamClosed, session) = core.readPublished {
            ($0.status, $0.acceptsReadsAndWrites, $0.writeStreamClosed, $0.session)
        }
        try checkSessionTakes("startTLS", status: status, accepted: accepted,
                              listener: "a listening socket does not start TLS; start it on each accepted socket")
        guard !writeStreamClosed else {
            throw SocketError(.badConfig, "the write stream is closed (closeWriteStream): TLS cannot start")
        }
        guard core.tlsClaim.exchange(session, ordering: .relaxed) != session else {
            throw SocketError(.badConfig, "TLS was already started on this connection")
        }
        guard submit({ $0.startTLS(context: context, session: session) }) else {
            throw SocketError(.badConfig, "the socket's event loop has stopped")
        }
    }

    /// True once the TLS handshake has finished (and manual trust said yes).
    public var isSecure: Bool { core.readPublished { $0.tls != nil } }

    /// What the TLS handshake settled (version, cipher, ALPN, the peer's certificates,
    /// resumption), or nil while not secure. One consistent snapshot; the session can end
    /// at any moment (even while `socketDidSecure` runs), so read it once rather than after
    /// checking `isSecure`.
    public var tlsInfo: TLSConnectionInfo? { core.readPublished { $0.tls?.info } }

    /// The answer to the `didReceiveTrust` event that carried `question` (the Swift
    /// delegate's completion handler calls this; so does the C API). Any thread; only the
    /// first answer counts.
    func answerTrust(question: UInt64, accept: Bool) {
        let core = self.core
        _ = eventLoop.execute { core.resolveTrust(accept: accept, question: question) }
    }

    // MARK: Disconnecting

    /// Closes now: pending reads and writes are dropped without callbacks, and
    /// `socketDidDisconnect` (error nil) follows the callbacks already queued. Does nothing
    /// on a disconnected socket. Returns disconnected: the socket can connect or accept again
    /// at once (from inside one of its callbacks, the teardown itself follows the callback).
    ///
    /// A listener's descriptors are closed, and its Unix-domain socket file removed, before
    /// this returns: a new listener can take the port or the path at once. When the loop is
    /// waiting for this thread (two loops' callbacks disconnecting each other's sockets at
    /// the same moment), the loop does it as soon as it goes on. Releasing the last reference
    /// to a listener closes it later, on its loop: call this first to know when.
    public func disconnect() {
        onLoopOrQueued { $0.requestDisconnect(listenerOnly: false) }
    }

    /// Ends the connection abortively: the peer gets a reset (RST) instead of an orderly
    /// close, queued writes are dropped, and under TLS no close_notify is sent (libuv's
    /// `uv_tcp_close_reset`). For a peer that misbehaves, or to free the port's state at
    /// once (no TIME_WAIT). Otherwise as `disconnect()`: `socketDidDisconnect` (error nil)
    /// follows, and the socket may connect again. A listener just stops.
    public func disconnectWithReset() {
        onLoopOrQueued { $0.requestDisconnect(listenerOnly: false, reset: true) }
    }

    /// Closes our sending side once the writes queued before it have been written (FIN;
    /// under TLS close_notify, then FIN) and keeps reading: the peer reads to the end of our
    /// stream and may go on sending (asyncio's `write_eof`, NIO's `close(mode: .output)`,
    /// libuv's `uv_shutdown`). Writes are refused from now on (`.badConfig`). When the peer
    /// then closes its side, the connection ends cleanly: `socketDidDisconnect` with nil (with
    /// `autoDisconnectOnClosedReadStream` off, `socketDidCloseReadStream` instead, and the
    /// connection stays until you end it: what is left of a pending read can be taken back).
    /// Does nothing when not connecting or connected, or when called before. Returns with
    /// writes refused (it waits for the loop, as `disconnectAfterWriting` does).
    public func closeWriteStream() {
        onLoopOrQueued { $0.requestCloseWriteStream() }
    }

    /// For the C API's release: a listener closes before the release returns, as with
    /// `disconnect`; any other socket as the release closes it (see `deinit`).
    func disconnectIfListening() {
        guard core.readPublished({ $0.status }) == .accepting else { return }
        onLoopOrQueued { $0.requestDisconnect(listenerOnly: true) }
    }

    /// Closes once every queued read has completed; no reads or writes may be added.
    public func disconnectAfterReading() { disconnectAfter(reading: true, writing: false) }

    /// Closes once every queued write has been written (FIN follows the last byte). A socket
    /// released afterwards still sends them (a fire-and-forget graceful close), even while
    /// it is still connecting (within the connect timeout; at most two minutes).
    public func disconnectAfterWriting() { disconnectAfter(reading: false, writing: true) }

    /// Closes once both queues have drained.
    public func disconnectAfterReadingAndWriting() { disconnectAfter(reading: true, writing: true) }

    private func disconnectAfter(reading: Bool, writing: Bool) {
        onLoopOrQueued { $0.requestDisconnectAfter(reading: reading, writing: writing) }
    }

    // MARK: Diagnostics

    /// One snapshot of what the loop last published.
    private var published: SocketPublishedState { core.snapshot }

    /// True when neither connecting, connected nor accepting.
    public var isDisconnected: Bool { published.status == .disconnected }
    /// True once a connection is established (not while connecting).
    public var isConnected: Bool { published.status == .connected }
    /// True while listening.
    public var isAccepting: Bool { published.status == .accepting }

    /// For a connection accepted with a PROXY protocol header that named the client
    /// (`proxyProtocol`): the proxy's address, the connection's real TCP peer (then
    /// `connectedAddress` is the client's). Nil otherwise (no header expected, a LOCAL or
    /// UNKNOWN header, not connected).
    public var proxyAddress: SocketAddress? { published.proxied?.proxyAddress }
    /// 1 or 2 when `proxyAddress` is set: the version of the header that gave the addresses.
    public var proxyProtocolVersion: Int? { published.proxied.map { Int($0.version) } }

    /// The peer's IP address; nil when not connected or for Unix-domain sockets. Through a
    /// proxy: the target as given to connect (a name stays a name, since the proxy resolved
    /// it), as `didConnectToHost` reported it.
    public var connectedHost: String? {
        let state = published
        return state.proxiedTarget?.host ?? state.peerAddress?.host
    }
    /// The peer's port; 0 when not connected or for Unix-domain sockets. Through a proxy:
    /// the target's.
    public var connectedPort: UInt16 {
        let state = published
        return state.proxiedTarget?.port ?? state.peerAddress?.port ?? 0
    }
    /// The peer's address (IP or Unix-domain). Through a proxy: the proxy's, the other end of
    /// the TCP connection (the target may have no address SocketKit knows); `localAddress`,
    /// `localHost` and `localPort` are our end of that connection.
    public var connectedAddress: SocketAddress? { published.peerAddress }
    /// For Unix-domain connections: the path at the other end (for a client, the listener's),
    /// or for an abstract name `@` followed by the name.
    public var connectedUnixPath: String? { published.peerAddress?.unixDisplayName }

    private var localSocketAddress: SocketAddress? {
        let state = published
        if let local = state.localAddress { return local }
        return state.listenerAddresses.first { $0.family == .ipv4 } ?? state.listenerAddresses.first
    }

    /// The local IP address (for a listener, its IPv4 one if any).
    public var localHost: String? { localSocketAddress?.host }
    /// The local port (for a listener, the port it accepts on).
    public var localPort: UInt16 { localSocketAddress?.port ?? 0 }
    /// The local address.
    public var localAddress: SocketAddress? { localSocketAddress }
    /// Every address a listener accepts on.
    public var listeningAddresses: [SocketAddress] { published.listenerAddresses }

    /// True when the connection, or one of the listener's sockets, is IPv4.
    public var isIPv4: Bool {
        let state = published
        return state.peerAddress?.family == .ipv4 || state.listenerAddresses.contains { $0.family == .ipv4 }
    }

    /// True when the connection, or one of the listener's sockets, is IPv6.
    public var isIPv6: Bool {
        let state = published
        return state.peerAddress?.family == .ipv6 || state.listenerAddresses.contains { $0.family == .ipv6 }
    }

    /// True for Unix-domain connections and listeners.
    public var isUnixDomain: Bool { published.isUnixDomain }

    // MARK: Advanced

    /// Runs `body` on the socket's loop with its descriptors (e.g. for a `setsockopt`
    /// SocketKit does not offer). Do not close them or change their blocking mode. `body`
    /// runs as a callback of the socket does: callbacks it causes follow it, and a
    /// disconnect it makes takes effect once it returns.
    public func perform(_ body: @escaping @Sendable (SocketDescriptors) -> Void) {
        _ = submit { core in core.callout(core.owner) { body(core.descriptors) } }
    }

    // MARK: Utilities

    /// Resolves `host` synchronously (this blocks: never call it on an event loop thread).
    /// `"localhost"`/`"loopback"` give 127.0.0.1 and ::1 without asking the resolver; a name
    /// under `.invalid` fails at once (RFC 6761: `.resolution`, EAI_NONAME).
    public static func lookupHost(_ host: String, port: UInt16) throws(SocketError) -> [SocketAddress] {
        try AddressResolver.lookup(host: host, port: port).get()
    }

    /// The numeric host of raw `sockaddr` bytes (IPv4 or IPv6), or nil.
    public static func host(fromAddress bytes: [UInt8]) -> String? { SocketAddress(bytes: bytes)?.host }
    /// The port of raw `sockaddr` bytes, or 0.
    public static func port(fromAddress bytes: [UInt8]) -> UInt16 { SocketAddress(bytes: bytes)?.port ?? 0 }
    public static func isIPv4Address(_ bytes: [UInt8]) -> Bool { SocketAddress(bytes: bytes)?.family == .ipv4 }
    public static func isIPv6Address(_ bytes: [UInt8]) -> Bool { SocketAddress(bytes: bytes)?.family == .ipv6 }

    /// Separators for `read(toData:)`.
    public static let crlf: [UInt8] = [0x0D, 0x0A]
    public static let cr: [UInt8] = [0x0D]
    public static let lf: [UInt8] = [0x0A]
    public static let zero: [UInt8] = [0x00]

    // MARK: Plumbing

    private func checkTimeout(_ timeout: Double) throws(SocketError) {
        guard !timeout.isNaN else { throw SocketError(.badParam, "timeout is NaN") }
    }

    private func checkBuffer(_ buffer: UnsafeMutableRawBufferPointer, offset: Int, needing: Int) throws(SocketError) {
        guard buffer.baseAddress != nil, buffer.count > 0 else { throw SocketError(.badParam, "empty buffer") }
        guard offset >= 0, offset <= buffer.count else { throw SocketError(.badParam, "offset outside the buffer") }
        guard buffer.count - offset >= needing else {
            throw SocketError(.badParam, "the buffer has \(buffer.count - offset) bytes of room after the offset; \(needing) needed")
        }
    }

    private func checkSeparator(_ separator: [UInt8], maxLength: Int) throws(SocketError) {
        guard !separator.isEmpty else { throw SocketError(.badParam, "empty separator") }
        guard maxLength >= 0 else { throw SocketError(.badParam, "negative maxLength") }
        guard maxLength == 0 || maxLength >= separator.count else {
            throw SocketError(.badParam, "maxLength is shorter than the separator")
        }
    }

    /// Connecting and accepting need a delegate to report to.
    private func checkDelegate() throws(SocketError) {
        guard hasDelegate else { throw SocketError(.badConfig, "set a delegate before connecting or accepting") }
    }

    var hasDelegate: Bool {
        guard let receiver else { return false }
        if let swiftReceiver = receiver as? SwiftDelegateReceiver {
            if let adapter = swiftReceiver.mainActorAdapter { return adapter.target != nil }
            return swiftReceiver.delegate != nil
        }
        return true
    }

    /// The session to queue a read or write in, and the socket's read and write-queue limits.
    private func sessionForTransfer(writing: Bool = false) throws(SocketError) -> (UInt64, Int, Int) {
        // The fields under the lock, the checks after it: a throwing closure under the lock
        // stays an outlined call on every read and write (bench/README.md, "Figures behind
        // the engine's comments").
        let (status, accepted, writeStreamClosed, session, readLimit, writeLimit) = core.readPublished {
            ($0.status, $0.acceptsReadsAndWrites, $0.writeStreamClosed, $0.session,
             $0.configuration.maximumReadLength, $0.configuration.maximumQueuedWriteBytes)
        }
        try checkSessionTakes("reads or writes", status: status, accepted: accepted,
                              listener: "a listening socket does not read or write")
        if writing && writeStreamClosed {
            throw SocketError(.badConfig, "the write stream is closed (closeWriteStream): no more writes")
        }
        return (session, readLimit, writeLimit)
    }

    /// Throws unless the published session takes `what` (reads and writes, startTLS): it is
    /// connecting or connected, and `disconnectAfter…` was not called in it.
    @inline(__always)
    private func checkSessionTakes(_ what: String, status: SocketStatus, accepted: Bool,
                                   listener: @autoclosure () -> String) throws(SocketError) {
        switch status {
        case .connecting, .connected:
            break
        case .disconnected:
            throw SocketError(.badConfig, "not connected: connect or accept first")
        case .accepting:
            throw SocketError(.badConfig, listener())
        }
        guard accepted else { throw SocketError(.badConfig, "no \(what) after disconnectAfterReading/Writing") }
    }

    /// Queues `operation` (a read, a write, a `perform`) for the core without waiting:
    /// inline on the loop thread (after the running callback if a teardown waits for it),
    /// else as a task. False if the loop has stopped.
    private func submit(_ operation: @escaping @Sendable (TCPSocketCore) -> Void) -> Bool {
        let core = self.core
        if eventLoop.inEventLoop {
            core.perform(touchesLentMemory: false, operation)
            return true
        }
        return eventLoop.execute { core.perform(touchesLentMemory: false, operation) }
    }

    // MARK: Delivery (called by the core on the loop thread; see CallbackRouter.swift)

    static var coreRaisesEventsInsideCallbacks: Bool { false }

    /// Hands an event to the callback queue (`route`); an accepted connection becomes its
    /// Socket first, with the listener's receiver and queue.
    func deliver(_ event: SocketEvent, from core: TCPSocketCore) {
        if case .didAccept(let childCore) = event {
            let (queue, receiver) = core.withStateLock {
                // A pin is the listener's own (it records the listener's choice of queue).
                ((routing.queue as? PinnedCallbackQueue)?.copy() ?? routing.queue, routing.receiver)
            }
            let child = Socket(core: childCore, receiver: receiver?.receiverForAcceptedSocket(), callbackQueue: queue)
            route(.didAcceptSocket(child))
            return
        }
        route(event)
    }

    func call(_ receiver: SocketEventReceiver, with event: SocketEvent) -> Double {
        receiver.receive(event, on: self)
    }

    @inline(__always)
    func finishDelivery(of event: SocketEvent, answer: Double?) {
        switch event {
        case .didAcceptSocket(let child):
            // Only now does the child start: none of its callbacks can precede didAccept,
            // whatever queues the listener and the child use.
            child.activateAccepted()
        case .didReceiveTrust(_, let question) where answer == nil:
            // No delegate to judge the peer: reject at once rather than wait for the timeout.
            answerTrust(question: question, accept: false)
        case .shouldTimeoutRead(_, _, _, let question) where !(answer ?? 0).isNaN:
            answerTimeout(ofRead: true, question: question, extension: answer ?? 0)
        case .shouldTimeoutWrite(_, _, _, let question) where !(answer ?? 0).isNaN:
            answerTimeout(ofRead: false, question: question, extension: answer ?? 0)
        default:
            break // a NaN answer: the receiver answers later, with `answerTimeout`
        }
    }

    func receiverChanged(to receiver: SocketEventReceiver?) {
        core.ownerInterests.store(receiver?.interests.rawValue ?? 0, ordering: .relaxed)
        routingChangedForSiblings()
    }

    /// A multi-loop listener's siblings follow its receiver and queue (only listeners look).
    private func routingChangedForSiblings() {
        guard core.readPublished({ $0.status == .accepting }) else { return }
        let (queue, receiver) = core.withStateLock { (routing.queue, routing.receiver) }
        MultiLoopListeners.routingChanged(of: self, receiver: receiver, queue: queue)
    }

    /// A receiver's later answer to the `shouldTimeoutRead`/`shouldTimeoutWrite` event that
    /// carried `question` (only the first answer to a question counts).
    func answerTimeout(ofRead read: Bool, question: UInt64, extension seconds: Double) {
        let core = self.core
        if read {
            _ = eventLoop.execute { core.resolveReadTimeout(extension: seconds, question: question) }
        } else {
            _ = eventLoop.execute { core.resolveWriteTimeout(extension: seconds, question: question) }
        }
    }

    /// The listener's hook for placing a new connection (on the listener's loop thread),
    /// under the gate like any callback: a release or delegate change waits for it.
    func eventLoopForAcceptedConnection(from address: SocketAddress) -> EventLoop? {
        withGate { receiver?.eventLoopForConnection(from: address, on: self) }
    }

    /// Starts an accepted connection's I/O on its loop.
    func activateAccepted() {
        let core = self.core
        if !eventLoop.executeInlineIfPossible({ core.activatePrepared(announce: false) }) {
            eventLoop.afterStopping { core.abandon() }
        }
    }
}
