// SPDX-License-Identifier: MIT
import Glibc

/// TCP keep-alive probing: after `idle` seconds without traffic, probe every `interval`
/// seconds and give up after `count` unanswered probes.
public struct KeepAlive: Hashable, Sendable {
    public var idle: Int
    public var interval: Int
    public var count: Int

    public init(idle: Int = 60, interval: Int = 10, count: Int = 6) {
        self.idle = idle
        self.interval = interval
        self.count = count
    }

    var isValid: Bool {
        (1...32767).contains(idle) && (1...32767).contains(interval) && (1...127).contains(count)
    }
}

/// Per-socket settings. Read by the engine when a session starts (connect, accept, adopt);
/// the TCP options are also applied at once to a connected socket.
///
/// Copy-on-write: a socket's handle, its core and every connection a listener accepted share
/// one storage until one of them changes a setting, so a connection costs a pointer here
/// instead of a hundred bytes (copies are made on the thread that owns each copy).
struct SocketConfiguration: Sendable {
    struct Values: Sendable {
        var isIPv4Enabled = true
        var isIPv6Enabled = true
        var isIPv4PreferredOverIPv6 = true
        var alternateAddressDelay = 0.3
        /// RFC 8305 §3's resolution delay (`Socket.resolutionDelay`).
        var resolutionDelay = 0.05
        var autoDisconnectOnClosedReadStream = true
        var maximumReadLength = 16 * 1024 * 1024
        var writeHighWatermark = 64 * 1024
        var writeLowWatermark = 32 * 1024
        /// 0: no limit. On by default (see `Socket.maximumQueuedWriteBytes`).
        var maximumQueuedWriteBytes = 64 * 1024 * 1024
        var tcpOptions = TCPOptions()
        /// TCP Fast Open: TCP_FASTOPEN_CONNECT on connects, TCP_FASTOPEN on listeners.
        var fastOpen = false
        /// SO_REUSEPORT on TCP listeners.
        var reusePort = false
        /// Unix-domain reads keep descriptors the peer passes (SCM_RIGHTS).
        var receivesDescriptors = false
        /// IP listeners open one SO_REUSEPORT socket per loop of the group (`MultiLoopListeners`).
        var acceptsOnEveryLoop = false
        /// The PROXY protocol header accepted connections begin with (`Socket.proxyProtocol`).
        var proxyProtocol = ProxyProtocolMode.none
        /// Seconds an accepted connection may take to send it.
        var proxyHeaderTimeout = TCPSocketCore.defaultProxyHeaderTimeout
        /// Set on every descriptor SocketKit makes for the socket, before bind, connect and
        /// listen (`Socket.setSocketOption`).
        var socketOptions: [SocketOption] = []
        /// Connects go through it (`Socket.setProxy`).
        var proxy: ProxySettings? = nil
    }

    private final class Storage: @unchecked Sendable {
        var values: Values
        init(_ values: Values) { self.values = values }
    }

    private var storage: Storage

    init() { storage = Storage(Values()) }

    private var values: Values {
        get { storage.values }
        set {
            if !isKnownUniquelyReferenced(&storage) { storage = Storage(newValue) } else { storage.values = newValue }
        }
    }

    var isIPv4Enabled: Bool {
        get { storage.values.isIPv4Enabled }
        set { values.isIPv4Enabled = newValue }
    }
    var isIPv6Enabled: Bool {
        get { storage.values.isIPv6Enabled }
        set { values.isIPv6Enabled = newValue }
    }
    var isIPv4PreferredOverIPv6: Bool {
        get { storage.values.isIPv4PreferredOverIPv6 }
        set { values.isIPv4PreferredOverIPv6 = newValue }
    }
    var alternateAddressDelay: Double {
        get { storage.values.alternateAddressDelay }
        set { values.alternateAddressDelay = newValue }
    }
    var resolutionDelay: Double {
        get { storage.values.resolutionDelay }
        set { values.resolutionDelay = newValue }
    }
    var autoDisconnectOnClosedReadStream: Bool {
        get { storage.values.autoDisconnectOnClosedReadStream }
        set { values.autoDisconnectOnClosedReadStream = newValue }
    }
    var maximumReadLength: Int {
        get { storage.values.maximumReadLength }
        set { values.maximumReadLength = newValue }
    }
    var writeHighWatermark: Int {
        get { storage.values.writeHighWatermark }
        set { values.writeHighWatermark = newValue }
    }
    var writeLowWatermark: Int {
        get { storage.values.writeLowWatermark }
        set { values.writeLowWatermark = newValue }
    }
    var maximumQueuedWriteBytes: Int {
        get { storage.values.maximumQueuedWriteBytes }
        set { values.maximumQueuedWriteBytes = newValue }
    }
    var tcpOptions: TCPOptions {
        get { storage.values.tcpOptions }
        set { values.tcpOptions = newValue }
    }
    var fastOpen: Bool {
        get { storage.values.fastOpen }
        set { values.fastOpen = newValue }
    }
    var reusePort: Bool {
        get { storage.values.reusePort }
        set { values.reusePort = newValue }
    }
    var receivesDescriptors: Bool {
        get { storage.values.receivesDescriptors }
        set { values.receivesDescriptors = newValue }
    }
    var acceptsOnEveryLoop: Bool {
        get { storage.values.acceptsOnEveryLoop }
        set { values.acceptsOnEveryLoop = newValue }
    }
    var proxyProtocol: ProxyProtocolMode {
        get { storage.values.proxyProtocol }
        set { values.proxyProtocol = newValue }
    }
    var proxyHeaderTimeout: Double {
        get { storage.values.proxyHeaderTimeout }
        set { values.proxyHeaderTimeout = newValue }
    }
    var socketOptions: [SocketOption] {
        get { storage.values.socketOptions }
        set { values.socketOptions = newValue }
    }
    var proxy: ProxySettings? {
        get { storage.values.proxy }
        set { values.proxy = newValue }
    }
}

/// A socket option (`setsockopt(2)`'s level, name and value) that SocketKit sets on every
/// descriptor it makes for a socket, right after `socket(2)`: before a listener binds and
/// listens, before a connection attempt binds and connects (`Socket.setSocketOption`).
public struct SocketOption: Hashable, Sendable {
    public let level: Int32
    public let name: Int32
    /// The bytes handed to `setsockopt` (an `int` option: its four bytes, native order).
    public let value: [UInt8]

    /// The longest value taken (the kernel's own options are far shorter).
    public static let maximumValueLength = 1024

    /// An option with raw bytes. Throws `.badParam` for an empty value or one longer than
    /// `maximumValueLength`.
    public init(level: Int32, name: Int32, value: [UInt8]) throws(SocketError) {
        guard !value.isEmpty, value.count <= SocketOption.maximumValueLength else {
            throw SocketError(.badParam, "a socket option's value takes 1...\(SocketOption.maximumValueLength) bytes")
        }
        self.level = level
        self.name = name
        self.value = value
    }

    /// An `int` option, as most are.
    public init(level: Int32, name: Int32, value: Int32) {
        self.level = level
        self.name = name
        self.value = withUnsafeBytes(of: value) { Array($0) }
    }

    /// Sets it on `fd`; the error names the option.
    func apply(to fd: Int32) throws(SocketError) {
        let result = value.withUnsafeBytes { setsockopt(fd, level, name, $0.baseAddress, socklen_t($0.count)) }
        guard result == 0 else { throw SocketError.lastSystemError("setsockopt(level \(level), option \(name))") }
    }
}

/// TCP options, applied whenever a connection is established and when changed while
/// connected. Zero buffer sizes leave the kernel's defaults.
struct TCPOptions: Sendable, Equatable {
    /// On by default, as asyncio, Go and curl do (see `Socket.noDelay`).
    var noDelay = true
    var keepAlive: KeepAlive? = nil
    var sendBufferSize = 0
    var receiveBufferSize = 0
    /// TCP_USER_TIMEOUT in milliseconds; 0 leaves the kernel's (`Socket.userTimeout`).
    var userTimeoutMilliseconds: UInt32 = 0
}

/// Where a socket is in its life, as callers on any thread see it.
enum SocketStatus: Sendable {
    case disconnected
    case connecting
    case connected
    case accepting
}
