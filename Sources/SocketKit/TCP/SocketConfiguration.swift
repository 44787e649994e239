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
struct SocketConfiguration: Sendable {
    var isIPv4Enabled = true
    var isIPv6Enabled = true
    var isIPv4PreferredOverIPv6 = true
    var alternateAddressDelay = 0.3
    var autoDisconnectOnClosedReadStream = true
    var maximumReadLength = 16 * 1024 * 1024
    var writeHighWatermark = 64 * 1024
    var writeLowWatermark = 32 * 1024
    var tcpOptions = TCPOptions()
}

/// TCP options, applied whenever a connection is established and when changed while
/// connected. Zero buffer sizes leave the kernel's defaults.
struct TCPOptions: Sendable, Equatable {
    var noDelay = false
    var keepAlive: KeepAlive? = nil
    var sendBufferSize = 0
    var receiveBufferSize = 0
}

/// Where a socket is in its life, as callers on any thread see it.
enum SocketStatus: Sendable {
    case disconnected
    case connecting
    case connected
    case accepting
}
