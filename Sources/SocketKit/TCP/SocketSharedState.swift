import Synchronization

/// The part of a socket's state that any thread may read without waiting for its loop:
/// the status, addresses and configuration (changed only on transitions). It lives in the
/// socket's `TCPSocketCore`, guarded by the core's `stateLock`, beside the queued-write byte
/// count and the progress of the current read and write (atomics the loop updates as it
/// goes): one object per socket instead of three, and no separately allocated mutex.
///
/// Getters never hop onto the loop, so they cannot deadlock whatever thread calls them,
/// including another loop's thread or a callback that holds a lock of its own.
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
    private var storedPeerAddress: CompactSocketAddress? = nil
    var isUnixDomain = false
    var callerBuffersRevoked = false
    /// `startTLS` was called in this session (only the first call counts).
    var tlsRequested = false
    var listenerAddresses: [SocketAddress] = []
    var configuration: SocketConfiguration
    /// Made on the first read into a caller's buffer (most sockets never need one).
    var callerBuffers: CallerBufferGuard? = nil
    /// What the TLS handshake settled, once the connection is secure.
    var tls: TLSInfoBox? = nil

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
}

extension TCPSocketCore {
    /// This core's address: where a thread waiting for `stateLock` sleeps (ParkingLot).
    @inline(__always)
    var lockKey: UInt { parkingKey(of: self) }

    /// Runs `body` with the state lock held: the lock of the published state, and of the
    /// owning `Socket`'s routing (delegate, queue, user data). Never around user code.
    @inline(__always)
    func withStateLock<Result>(_ body: () throws -> Result) rethrows -> Result {
        let key = lockKey
        stateLock.lock(key: key)
        defer { stateLock.unlock(key: key) }
        return try body()
    }

    @inline(__always)
    func withPublished<Result, Failure: Error>(
        _ body: (inout SocketPublishedState) throws(Failure) -> Result
    ) throws(Failure) -> Result {
        let key = lockKey
        stateLock.lock(key: key)
        defer { stateLock.unlock(key: key) }
        return try body(&publishedState)
    }

    /// The guard for reads into callers' buffers (revoked from birth once the handle was
    /// released).
    var callerBuffers: CallerBufferGuard {
        withPublished { published in
            if let existing = published.callerBuffers { return existing }
            let made = CallerBufferGuard(revoked: published.callerBuffersRevoked)
            published.callerBuffers = made
            return made
        }
    }

    /// Once this returns, the loop writes into no caller buffer of this socket.
    func revokeCallerBuffers() {
        let existing = withPublished { published -> CallerBufferGuard? in
            published.callerBuffersRevoked = true
            return published.callerBuffers
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

    /// Runs `copy` unless revoked; false when it did not run.
    @discardableResult
    func write(_ copy: () -> Void) -> Bool {
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
