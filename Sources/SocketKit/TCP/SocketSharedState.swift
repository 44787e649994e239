// SPDX-License-Identifier: MIT
import Synchronization

/// A socket's state as its user sees it: the session, its status and addresses, the
/// configuration, what TLS settled. The loop is its only writer (`publish`, under the core's
/// state lock); the loop reads it directly, and every other thread reads one consistent copy
/// (`snapshot`) without waiting for the loop, so getters cannot deadlock whatever thread
/// calls them. It lives in the socket's `TCPSocketCore`: one object per socket, and no
/// separately allocated mutex.
///
/// It may run ahead of the engine's own progress (`TCPSocketCore.phase`) for as long as a
/// callback of the socket runs: a disconnect or a new session asked for there is published
/// at once, and the teardown or start follows the callback (the re-entrancy rule).
struct SocketPublishedState: Sendable {
    /// Increments each time a session starts (connect, accept, adopt); operations carry
    /// the session they were issued in and the loop drops those of an ended session.
    var session: UInt64 = 0
    /// Inline (see CompactSocketAddress): a connection keeps both for its whole life.
    /// The one-byte fields fill the padding after each (memory per connection).
    private var storedLocalAddress: CompactSocketAddress? = nil
    var status = SocketStatus.disconnected
    /// False once `disconnectAfter…` was called in this session.
    var acceptsReadsAndWrites = true
    /// True once `closeWriteStream` was called in this session: reads go on, writes are
    /// refused.
    var writeStreamClosed = false
    private var storedPeerAddress: CompactSocketAddress? = nil
    var isUnixDomain = false
    /// A listener's addresses, an accepted connection's PROXY protocol details, or the
    /// target of a connection made through a proxy: never two of them, so one word holds
    /// any (memory per connection, `ConnectionFootprintTests`).
    private var roleDetails = RoleDetails.none
    var configuration: SocketConfiguration
    /// What the TLS handshake settled, once the connection is secure.
    var tls: TLSInfoBox? = nil

    private enum RoleDetails: Sendable {
        case none
        case listener([SocketAddress])
        case proxied(ProxiedConnection)
        case proxiedTarget(ProxiedTarget)
    }

    var listenerAddresses: [SocketAddress] {
        get { if case .listener(let addresses) = roleDetails { addresses } else { [] } }
        set { roleDetails = newValue.isEmpty ? .none : .listener(newValue) }
    }

    /// Set when a PROXY protocol header gave the addresses (peer: its source; local: its
    /// destination).
    var proxied: ProxiedConnection? {
        get { if case .proxied(let details) = roleDetails { details } else { nil } }
        set { roleDetails = newValue.map { .proxied($0) } ?? .none }
    }

    /// Through a proxy: the target as given to connect (`peerAddress` is the proxy's).
    var proxiedTarget: ProxiedTarget? {
        get { if case .proxiedTarget(let target) = roleDetails { target } else { nil } }
        set { roleDetails = newValue.map { .proxiedTarget($0) } ?? .none }
    }

    init(configuration: SocketConfiguration) {
        self.configuration = configuration
    }

    var localAddress: SocketAddress? {
        get { storedLocalAddress?.address }
        set { storedLocalAddress = newValue.map(CompactSocketAddress.init) }
    }

    var peerAddress: SocketAddress? {
        get { storedPeerAddress?.address }
        set { storedPeerAddress = newValue.map(CompactSocketAddress.init) }
    }

    /// Starts the next session with `status`.
    mutating func beginSession(_ status: SocketStatus) {
        session += 1
        reset(to: status)
    }

    /// What a session leaves behind: nothing of it is published any more.
    mutating func endSession() {
        reset(to: .disconnected)
    }

    private mutating func reset(to newStatus: SocketStatus) {
        status = newStatus
        acceptsReadsAndWrites = true
        writeStreamClosed = false
        tls = nil
        localAddress = nil
        peerAddress = nil
        roleDetails = .none
        isUnixDomain = false
    }
}

extension TCPSocketCore {
    /// The session reads and writes are queued in (loop thread; other threads: `snapshot`).
    @inline(__always)
    var session: UInt64 { publishedState.session }

    /// The socket's settings (loop thread; other threads: `snapshot`).
    @inline(__always)
    var configuration: SocketConfiguration { publishedState.configuration }

    /// The guard for reads into callers' buffers (revoked from birth once the handle was
    /// released). Any thread.
    var callerBuffers: CallerBufferGuard {
        withStateLock {
            if let existing = callerBufferGuard { return existing }
            let made = CallerBufferGuard(revoked: callerBuffersRevoked)
            callerBufferGuard = made
            return made
        }
    }

    /// Once this returns, the loop writes into no caller buffer of this socket. Any thread.
    func revokeCallerBuffers() {
        let existing = withStateLock { () -> CallerBufferGuard? in
            callerBuffersRevoked = true
            return callerBufferGuard
        }
        existing?.revoke()
    }
}

/// How far the current read or write has got.
public struct OperationProgress: Hashable, Sendable {
    /// The tag the operation was queued with.
    public let tag: Int
    public let bytesDone: Int
    /// The total for reads to a length and for writes; nil when the total is not known in
    /// advance (reads of available data or to a separator).
    public let totalBytes: Int?

    /// `bytesDone / totalBytes`, or 1.0 when the total is unknown (as GCDAsyncSocket does).
    public var fractionCompleted: Double {
        guard let totalBytes, totalBytes > 0 else { return 1.0 }
        return Double(bytesDone) / Double(totalBytes)
    }
}

/// A seqlock over (tag, done, total): the loop writes without locking, readers on other
/// threads retry until they see a consistent triple. "No operation" is a total of
/// `ProgressCell.inactive` (four words per cell, not five: memory per connection).
struct ProgressCell: ~Copyable {
    private static let inactive = Int.min
    private let sequence = Atomic<UInt>(0)
    private let tag = Atomic<Int>(0)
    private let done = Atomic<Int>(0)
    /// -1 when unknown, `inactive` when no operation is under way.
    private let total = Atomic<Int>(ProgressCell.inactive)

    init() {}

    /// Loop thread only.
    func publish(tag newTag: Int, done newDone: Int, total newTotal: Int?) {
        let start = sequence.load(ordering: .relaxed)
        sequence.store(start &+ 1, ordering: .relaxed)
        atomicMemoryFence(ordering: .releasing)
        tag.store(newTag, ordering: .relaxed)
        done.store(newDone, ordering: .relaxed)
        total.store(newTotal ?? -1, ordering: .relaxed)
        sequence.store(start &+ 2, ordering: .releasing)
    }

    /// Loop thread only.
    func update(done newDone: Int) {
        let start = sequence.load(ordering: .relaxed)
        sequence.store(start &+ 1, ordering: .relaxed)
        atomicMemoryFence(ordering: .releasing)
        done.store(newDone, ordering: .relaxed)
        sequence.store(start &+ 2, ordering: .releasing)
    }

    /// Loop thread only.
    func clear() {
        guard total.load(ordering: .relaxed) != ProgressCell.inactive else { return }
        let start = sequence.load(ordering: .relaxed)
        sequence.store(start &+ 1, ordering: .relaxed)
        atomicMemoryFence(ordering: .releasing)
        total.store(ProgressCell.inactive, ordering: .relaxed)
        sequence.store(start &+ 2, ordering: .releasing)
    }

    /// Any thread.
    func read() -> OperationProgress? {
        while true {
            let before = sequence.load(ordering: .acquiring)
            if before & 1 == 1 { continue }
            let currentTag = tag.load(ordering: .relaxed)
            let currentDone = done.load(ordering: .relaxed)
            let currentTotal = total.load(ordering: .relaxed)
            atomicMemoryFence(ordering: .acquiring)
            guard sequence.load(ordering: .relaxed) == before else { continue }
            guard currentTotal != ProgressCell.inactive else { return nil }
            return OperationProgress(tag: currentTag, bytesDone: currentDone,
                                     totalBytes: currentTotal >= 0 ? currentTotal : nil)
        }
    }
}

/// A progress cell on its own, for one that only some sockets need.
final class ProgressBox: Sendable {
    let cell = ProgressCell()
}

/// Guards copies into callers' read buffers. Releasing a socket revokes it: once that
/// returns, the loop no longer writes into memory the caller may free (a read in progress
/// on the loop thread finishes its copy first, or skips it).
final class CallerBufferGuard: @unchecked Sendable {
    private let revoked: LockedValue<Bool>

    init(revoked: Bool) { self.revoked = LockedValue(revoked) }

    /// Runs `copy` (into or out of the caller's buffer) unless revoked; false when it did
    /// not run.
    @discardableResult
    func access(_ copy: () -> Void) -> Bool {
        revoked.withLock { isRevoked in
            guard !isRevoked else { return false }
            copy()
            return true
        }
    }

    func revoke() {
        revoked.withLock { $0 = true }
    }
}
