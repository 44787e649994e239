// SPDX-License-Identifier: MIT
import Glibc
import SocketKitC
import Synchronization

/// The state machine of one TCP or Unix-domain socket, after GCDAsyncSocket: a read queue,
/// a write queue, a prebuffer, timers with extension, disconnect-after flags, Happy Eyeballs
/// connects and listeners. It lives on one event loop and is touched only there.
///
/// Re-entrancy rule: user code of a socket (its callbacks, a `perform` body, the listener's
/// loop hook) runs only inside `callout`. While it runs (`inCallout`), whatever would tear
/// the session down waits in `deferredOperations` until it returns, so the engine never
/// frees memory a callback is looking at (a read's bytes borrow the loop's buffer or the
/// prebuffer). `closeSession` itself enforces this, whoever calls it: a public call made from
/// a callback, or an engine path it runs inline. Reads and writes queued from a callback
/// just join their queues. After every `emit`, the engine re-checks that its session is
/// still alive.
///
/// One writer: the loop's thread is the only one that changes this state, the published
/// part (`publishedState`: session, status, addresses, configuration) included. Public calls
/// are requests that run here (`Socket` waits for those that promise an effect on return).
final class TCPSocketCore: SocketCore, EventLoopHandler, EndOfIterationWork, @unchecked Sendable {
    enum Phase {
        /// `proxying`: connected to the proxy, its handshake under way (the session is
        /// still `.connecting` for everyone else: TCPSocketCore+Proxy.swift).
        case idle, resolving, connecting, proxying, connected, accepting
    }

    // Field order matters here: Swift lays stored properties out in declaration order, so
    // the one-byte flags are grouped to fill the padding after `registration` and
    // `currentRead` (memory per connection).

    let loop: EventLoop
    /// The user-facing Socket (see `owner`).
    private var ownerReference = OwnerReference<Socket>()

    // The connection.
    var registration: RegistrationID? = nil
    var phase = Phase.idle
    var isUnixDomain = false
    /// Edge-triggered readiness: true until a read or write would block.
    var readable = false
    var fd: Int32 = -1
    var writable = false
    /// A read returned 0: the peer will send nothing more.
    var readEOF = false
    /// The peer's stream has ended (epoll reported its FIN, a reset or an error, or a send
    /// failed): a short read does not mean "drained", and the end itself is still to be
    /// read, after the bytes that came before it.
    var peerHalfClosed = false
    var readStreamClosedReported = false
    var disconnectAfterReads = false
    var disconnectAfterWrites = false
    var readTimeoutPending = false
    var currentReadStarted = false
    /// `pumpReads` is running its loop: a read queued now (by a callback it made) is picked
    /// up by that loop, so queueing it schedules no second pump. (Declared here, it fits
    /// the padding before `prebuffer`.)
    var pumpingReads = false
    /// The descriptor came from the user (`Socket(adopting:)`): its options are unknown and
    /// it may have duplicates, so closing it also removes it from epoll explicitly.
    var adoptedDescriptor = false

    // Reads.
    var prebuffer = ByteQueue()
    /// The front read: under way once `currentReadStarted`, otherwise the next to start.
    var currentRead: ReadRequest? = nil
    // Writes and callouts: flags (in the padding after `currentRead`).
    var aboveHighWatermark = false
    var headWriteStarted = false
    var writeTimeoutPending = false
    var inCallout = false
    var runningDeferredOperations = false
    var isScheduledForEndOfIteration = false
    var readPumpScheduled = false
    /// Our half-close (`closeWriteStream`), once asked for in this session.
    var writeStreamEnd: WriteStreamEnd? = nil
    /// A connected Unix-domain socket whose configuration asks for passed descriptors:
    /// reads use `recvmsg` and keep what SCM_RIGHTS brings (`readKeepingDescriptors`).
    var receivesDescriptors = false


    /// Bytes of accepted writes not yet taken by the kernel, including writes on their way
    /// to the loop (see `reserveQueuedWriteBytes`).
    var queuedWriteBytes: Int { publishedQueuedWriteBytes.load(ordering: .relaxed) }

    /// Timers and timeout questions, made by the first read or write with a timeout (or
    /// TLS trust question): a socket that uses none never carries them.
    final class TimeoutState {
        var readTimer: LoopTimer? = nil
        var writeTimer: LoopTimer? = nil
        /// Bounds a released socket's last writes (`ownerReleased`).
        var lingerTimer: LoopTimer? = nil
        /// `TCPSocketCore.lingerSeconds` (tests shorten it).
        var lingerDuration = TCPSocketCore.lingerSeconds
        /// Each timeout question gets a number never used before by this socket, so an
        /// answer (possibly late: event records) can only ever answer its own question.
        var questions: UInt64 = 0
        var readQuestion: UInt64 = 0
        var writeQuestion: UInt64 = 0
    }

    /// What most connections never need, behind one pointer (memory per connection): the
    /// TLS state, timers, connecting and accepting state, and the callout backlog. Made on
    /// first use and kept for the core's life.
    final class OutOfLineState {
        var tls: TLSState? = nil
        var timeouts: TimeoutState? = nil
        var connecting: ConnectingState? = nil
        var accepting: AcceptingState? = nil
        /// Events raised during a callout, in order: the first in `firstDeferredEvent` (the
        /// usual case, e.g. `didWrite` of a write made in `didRead`, then needs no array),
        /// the rest in `deferredEvents`.
        var firstDeferredEvent: SocketEvent? = nil
        var deferredEvents: [SocketEvent] = []
        var deferredOperations: [(TCPSocketCore) -> Void] = []
        /// A send failed for good: the error the session ends with, once the bytes that
        /// arrived before the failure have been read (see `sendFailed`).
        var sendFailure: SocketError? = nil
        /// A released socket's core sending its last writes (`ownerReleased`) keeps itself
        /// alive until its session ends: while it resolves or connects, nothing else holds it
        /// (its connection attempts and timers hold it unowned).
        var lingeringCore: TCPSocketCore? = nil
        var readQueue = FIFO<ReadRequest>()
        var writeQueue = FIFO<WriteRequest>()
        /// What few connections ever have, behind one word of this object.
        final class Rare {
            var unstartedSession: UnstartedSession? = nil
            var unixExtras: UnixExtras? = nil
            var specialWrites = 0
        }
        private var rare: Rare? = nil

        /// Queued writes that need a system call of their own (passing descriptors, a file
        /// region): while there are some, a flush looks for them (`sendQueuedWritesOneByOne`).
        var specialWrites: Int {
            get { rare?.specialWrites ?? 0 }
            set { if rare != nil || newValue != 0 { rareState.specialWrites = newValue } }
        }

        /// A session begun from a callback whose start waits for it (`beginSession`).
        var unstartedSession: UnstartedSession? {
            get { rare?.unstartedSession }
            set { if rare != nil || newValue != nil { rareState.unstartedSession = newValue } }
        }
        /// Descriptors passed over a Unix-domain connection, both ways.
        var unixExtras: UnixExtras? {
            get { rare?.unixExtras }
            set { if rare != nil || newValue != nil { rareState.unixExtras = newValue } }
        }

        private var rareState: Rare {
            if let rare { return rare }
            let made = Rare()
            rare = made
            return made
        }

        func deferEvent(_ event: SocketEvent) {
            if firstDeferredEvent == nil && deferredEvents.isEmpty {
                firstDeferredEvent = event
            } else {
                deferredEvents.append(event)
            }
        }

        func takeDeferredEvent() -> SocketEvent? {
            if let event = firstDeferredEvent {
                firstDeferredEvent = nil
                return event
            }
            return deferredEvents.isEmpty ? nil : deferredEvents.removeFirst()
        }
    }

    /// The reads after `currentRead` (one read at a time never needs the queue: see
    /// `enqueueRead`).
    var readQueue: FIFO<ReadRequest> {
        _read {
            if let state = outOfLineState { yield state.readQueue } else { yield FIFO() }
        }
        _modify { yield &outOfLine.readQueue }
    }

    /// The queued writes; the front one is the current write. A write the kernel takes at
    /// once never enters it (see `writeImmediately`).
    var writeQueue: FIFO<WriteRequest> {
        _read {
            if let state = outOfLineState { yield state.writeQueue } else { yield FIFO() }
        }
        _modify { yield &outOfLine.writeQueue }
    }

    private var outOfLineState: OutOfLineState? = nil

    // The hot path's checks: unlike the accessors above (whose yield retains and releases
    // the out-of-line state, twice per echoed message), these only load through it.
    var hasQueuedReads: Bool { outOfLineState.map { !$0.readQueue.isEmpty } ?? false }
    var hasQueuedWrites: Bool { outOfLineState.map { !$0.writeQueue.isEmpty } ?? false }
    var hasTLS: Bool { outOfLineState?.tls != nil }
    /// See `sendFailed`.
    var sendFailure: SocketError? { outOfLineState?.sendFailure }
    /// See `UnixExtras` (nil until descriptors are passed either way).
    var existingUnixExtras: UnixExtras? { outOfLineState?.unixExtras }
    /// See `OutOfLineState.specialWrites`.
    var specialQueuedWrites: Int {
        get { outOfLineState?.specialWrites ?? 0 }
        set { if outOfLineState != nil || newValue != 0 { outOfLine.specialWrites = newValue } }
    }

    var outOfLine: OutOfLineState {
        if let state = outOfLineState { return state }
        let state = OutOfLineState()
        outOfLineState = state
        return state
    }

    /// From `startTLS` on (see TCPSocketCore+TLS.swift).
    var tls: TLSState? {
        get { outOfLineState?.tls }
        set { if outOfLineState != nil || newValue != nil { outOfLine.tls = newValue } }
    }

    private var timeoutState: TimeoutState? {
        get { outOfLineState?.timeouts }
        set { if outOfLineState != nil || newValue != nil { outOfLine.timeouts = newValue } }
    }

    private var timeouts: TimeoutState {
        if let state = timeoutState { return state }
        let state = TimeoutState()
        timeoutState = state
        return state
    }

    var readTimer: LoopTimer? {
        get { timeoutState?.readTimer }
        set { if timeoutState != nil || newValue != nil { timeouts.readTimer = newValue } }
    }
    var writeTimer: LoopTimer? {
        get { timeoutState?.writeTimer }
        set { if timeoutState != nil || newValue != nil { timeouts.writeTimer = newValue } }
    }
    var lingerTimer: LoopTimer? {
        get { timeoutState?.lingerTimer }
        set { if timeoutState != nil || newValue != nil { timeouts.lingerTimer = newValue } }
    }
    var lingerDuration: Double {
        get { timeoutState?.lingerDuration ?? TCPSocketCore.lingerSeconds }
        set { timeouts.lingerDuration = newValue }
    }
    var timeoutQuestions: UInt64 {
        get { timeoutState?.questions ?? 0 }
        set { if timeoutState != nil || newValue != 0 { timeouts.questions = newValue } }
    }
    var readTimeoutQuestion: UInt64 {
        get { timeoutState?.readQuestion ?? 0 }
        set { if timeoutState != nil || newValue != 0 { timeouts.readQuestion = newValue } }
    }
    var writeTimeoutQuestion: UInt64 {
        get { timeoutState?.writeQuestion ?? 0 }
        set { if timeoutState != nil || newValue != 0 { timeouts.writeQuestion = newValue } }
    }

    // Connecting and accepting: state only a connecting socket or a listener has, kept out
    // of line so that an accepted connection does not carry it (memory per connection).
    final class ConnectingState {
        var connectTimer: LoopTimer? = nil
        var attemptTimer: LoopTimer? = nil
        /// The name's lookups still to answer: one per enabled family (Happy Eyeballs v2).
        var resolutions: [AddressResolver.Request] = []
        /// The loop's record of a socket waiting for `resolutions`, which has no descriptor
        /// yet: without it a stopping loop would not know to end its session.
        var resolvingRegistration: RegistrationID? = nil
        /// The other family's addresses, answered first and held for the resolution delay
        /// in case the preferred family's come too (RFC 8305 §3).
        var heldAddresses: [SocketAddress] = []
        var resolutionDelayTimer: LoopTimer? = nil
        /// The first family's lookup failure, reported if no family gives an address.
        var resolutionError: SocketError? = nil
        var connectAddresses: [SocketAddress] = []
        var nextConnectAddress = 0
        var connectAttempts: [ConnectionAttempt] = []
        var lastAttemptError: SocketError? = nil
        var localEndpoints: Interfaces.Endpoints? = nil
        /// The host name given to connect: a TLS client's default peer name (through a
        /// proxy: the target's, not the proxy's).
        var host: String? = nil
        /// The proxy's handshake, from the race's start to the proxy's yes.
        var proxy: ProxyHandshake? = nil
        /// Handshake bytes the kernel did not take yet.
        var proxyOutbound: [UInt8] = []
    }

    final class AcceptingState {
        var listeners: [ListenerEndpoint] = []
        var unixListenerFile: UnixSocketFile? = nil
        var acceptPaused = false
        var acceptBackoff: UInt64 = 0
        var acceptFailureReported = false
        var acceptTimer: LoopTimer? = nil
        /// Accepted connections whose PROXY protocol header is still arriving.
        var proxyHeaderReaders: [ProxyHeaderReader] = []
        /// One of the listeners of a multi-loop listener (`MultiLoopListeners`): what it
        /// accepts stays on this loop, and the new-connection hook is not asked.
        var keepsAcceptedConnectionsOnItsLoop = false
        /// The primary of a multi-loop listener: its siblings end with its session.
        var spreadsOverLoops = false
    }

    var connectingState: ConnectingState? {
        get { outOfLineState?.connecting }
        set { if outOfLineState != nil || newValue != nil { outOfLine.connecting = newValue } }
    }
    private var acceptingState: AcceptingState? {
        get { outOfLineState?.accepting }
        set { if outOfLineState != nil || newValue != nil { outOfLine.accepting = newValue } }
    }

    // Setting a default value where there is no state yet leaves it absent (teardown
    // resets these on every socket).
    var connecting: ConnectingState {
        if let state = connectingState { return state }
        let state = ConnectingState()
        connectingState = state
        return state
    }

    /// A session waiting for a name's answer is known to the loop (see
    /// `ConnectingState.resolvingRegistration`) until the answer comes or the session ends.
    func startWaitingForResolution() {
        connecting.resolvingRegistration = loop.registerWithoutDescriptor(handler: self)
    }

    func stopWaitingForResolution() {
        guard let id = connectingState?.resolvingRegistration else { return }
        loop.deregister(id, fd: -1, removeFromEpoll: false)
        connectingState?.resolvingRegistration = nil
    }

    private var accepting: AcceptingState {
        if let state = acceptingState { return state }
        let state = AcceptingState()
        acceptingState = state
        return state
    }

    var connectTimer: LoopTimer? {
        get { connectingState?.connectTimer }
        set { if connectingState != nil || !(newValue == nil) { connecting.connectTimer = newValue } }
    }
    var attemptTimer: LoopTimer? {
        get { connectingState?.attemptTimer }
        set { if connectingState != nil || !(newValue == nil) { connecting.attemptTimer = newValue } }
    }
    var resolutions: [AddressResolver.Request] {
        get { connectingState?.resolutions ?? [] }
        set { if connectingState != nil || !newValue.isEmpty { connecting.resolutions = newValue } }
    }
    var heldAddresses: [SocketAddress] {
        get { connectingState?.heldAddresses ?? [] }
        set { if connectingState != nil || !newValue.isEmpty { connecting.heldAddresses = newValue } }
    }
    var resolutionDelayTimer: LoopTimer? {
        get { connectingState?.resolutionDelayTimer }
        set { if connectingState != nil || newValue != nil { connecting.resolutionDelayTimer = newValue } }
    }
    var resolutionError: SocketError? {
        get { connectingState?.resolutionError }
        set { if connectingState != nil || newValue != nil { connecting.resolutionError = newValue } }
    }
    var connectAddresses: [SocketAddress] {
        get { connectingState?.connectAddresses ?? [] }
        set { if connectingState != nil || !(newValue.isEmpty) { connecting.connectAddresses = newValue } }
    }
    var nextConnectAddress: Int {
        get { connectingState?.nextConnectAddress ?? 0 }
        set { if connectingState != nil || !(newValue == 0) { connecting.nextConnectAddress = newValue } }
    }
    var connectAttempts: [ConnectionAttempt] {
        get { connectingState?.connectAttempts ?? [] }
        set { if connectingState != nil || !(newValue.isEmpty) { connecting.connectAttempts = newValue } }
    }
    var lastAttemptError: SocketError? {
        get { connectingState?.lastAttemptError }
        set { if connectingState != nil || !(newValue == nil) { connecting.lastAttemptError = newValue } }
    }
    var localEndpoints: Interfaces.Endpoints? {
        get { connectingState?.localEndpoints }
        set { if connectingState != nil || !(newValue == nil) { connecting.localEndpoints = newValue } }
    }
    var connectHost: String? {
        get { connectingState?.host }
        set { if connectingState != nil || !(newValue == nil) { connecting.host = newValue } }
    }
    var listeners: [ListenerEndpoint] {
        get { acceptingState?.listeners ?? [] }
        set { if acceptingState != nil || !(newValue.isEmpty) { accepting.listeners = newValue } }
    }
    var unixListenerFile: UnixSocketFile? {
        get { acceptingState?.unixListenerFile }
        set { if acceptingState != nil || newValue != nil { accepting.unixListenerFile = newValue } }
    }
    var acceptPaused: Bool {
        get { acceptingState?.acceptPaused ?? false }
        set { if acceptingState != nil || !(!newValue) { accepting.acceptPaused = newValue } }
    }
    var acceptBackoff: UInt64 {
        get { acceptingState?.acceptBackoff ?? 0 }
        set { if acceptingState != nil || !(newValue == 0) { accepting.acceptBackoff = newValue } }
    }
    var acceptFailureReported: Bool {
        get { acceptingState?.acceptFailureReported ?? false }
        set { if acceptingState != nil || !(!newValue) { accepting.acceptFailureReported = newValue } }
    }
    /// See `AcceptingState.keepsAcceptedConnectionsOnItsLoop`.
    var keepsAcceptedConnectionsOnItsLoop: Bool { acceptingState?.keepsAcceptedConnectionsOnItsLoop ?? false }

    /// Makes this listening session one of a multi-loop listener's (`spreading`: its primary).
    func keepAcceptedConnectionsOnThisLoop(spreading: Bool) {
        accepting.keepsAcceptedConnectionsOnItsLoop = true
        accepting.spreadsOverLoops = spreading
    }

    var proxyHeaderReaders: [ProxyHeaderReader] {
        get { acceptingState?.proxyHeaderReaders ?? [] }
        set { if acceptingState != nil || !newValue.isEmpty { accepting.proxyHeaderReaders = newValue } }
    }

    var acceptTimer: LoopTimer? {
        get { acceptingState?.acceptTimer }
        set { if acceptingState != nil || !(newValue == nil) { accepting.acceptTimer = newValue } }
    }

    // Shared with other threads (SocketSharedState.swift): everything else is loop-only.
    /// Guards `publishedState`, the owner's routing and the caller-buffer guard.
    let stateLock = InlineLock()
    // Loop-only flags, in the padding after the lock.
    var writeFlushScheduled = false
    var acceptContinuationScheduled = false
    /// Set by the C API's release (guarded by `stateLock`): a caller-buffer guard made
    /// afterwards is revoked from birth.
    nonisolated(unsafe) var callerBuffersRevoked = false
    /// Written by the loop only, under `stateLock` (`publish`).
    nonisolated(unsafe) var publishedState: SocketPublishedState
    /// Made on the first read into a caller's buffer, by the calling thread (most sockets
    /// never need one). Guarded by `stateLock`.
    nonisolated(unsafe) var callerBufferGuard: CallerBufferGuard? = nil
    let publishedQueuedWriteBytes = Atomic<Int>(0)
    /// The session in which `startTLS` was called: the calling thread claims it, so that
    /// only the first call of a session counts, however close the second follows (the
    /// marker is queued like a read or a write, and the loop learns of it later).
    let tlsClaim = Atomic<UInt64>(0)
    let readProgress = ProgressCell()
    /// Made by the first write that has to wait in the queue (a write the kernel takes at
    /// once never shows progress), so most connections never carry one.
    let writeProgressBox = AtomicLazyReference<ProgressBox>()


    static let connectionEvents = EPOLLIN.rawValue | EPOLLOUT.rawValue | EPOLLRDHUP.rawValue | EPOLLET.rawValue
    static let listenerEvents = EPOLLIN.rawValue | EPOLLET.rawValue

    init(loop: EventLoop, configuration: SocketConfiguration) {
        self.loop = loop
        publishedState = SocketPublishedState(configuration: configuration)
    }

    deinit {
        // Normally closed by `ownerReleased`; this covers a loop that stopped first.
        if fd >= 0 { close(fd) }
        for attempt in connectAttempts { attempt.closeDescriptor() }
        for listener in listeners { close(listener.fd) }
    }

    // MARK: The owner

    /// The user-facing handle, strongly held for the caller's use; nil once the user released
    /// it (its deinit has begun; the core then closes).
    ///
    /// Not a weak reference (see `OwnerReference`).
    var owner: Socket? { ownerReference.load() }

    /// Called once, by the Socket's initializer.
    func attach(owner: Socket) { ownerReference.attach(owner) }

    /// The owner's receiver's interests (SocketEventInterests), readable by the loop without
    /// a lock or a reference to the owner; 0 once the owner is released.
    let ownerInterests = Atomic<UInt32>(0)

    // MARK: Operations from the public API

    /// True when an operation that does not tear the session down may run right now on the
    /// loop thread (the caller checked it is on the loop).
    var acceptsInlineOperation: Bool {
        !(inCallout && hasDeferredOperations)
    }

    /// Runs `operation` now, or after the running callback of this socket if it may free or
    /// move memory that callback borrows (a teardown of the session, a change to the unread
    /// bytes), or if such an operation is already waiting (order is kept). True when it
    /// waits.
    @discardableResult
    func perform(touchesLentMemory: Bool, _ operation: @escaping (TCPSocketCore) -> Void) -> Bool {
        if (inCallout || runningDeferredOperations) && (touchesLentMemory || hasDeferredOperations) {
            outOfLine.deferredOperations.append(operation)
            return true
        }
        operation(self)
        return false
    }

    /// Operations wait for the running callback (see `perform`).
    @inline(__always)
    var hasDeferredOperations: Bool {
        guard let backlog = outOfLineState else { return false }
        return !backlog.deferredOperations.isEmpty
    }

    private func runDeferredOperations() {
        guard !runningDeferredOperations else { return }
        runningDeferredOperations = true
        while !inCallout, let backlog = outOfLineState, !backlog.deferredOperations.isEmpty {
            let operation = backlog.deferredOperations.removeFirst()
            operation(self)
        }
        runningDeferredOperations = false
    }

    // MARK: Emitting events

    /// Hands `event` to the user (through `Socket`, which picks the callback queue).
    /// Events raised while a callback of this socket runs are delivered right after it.
    func emit(_ event: SocketEvent) {
        guard let owner else {
            discard(event)
            return
        }
        if inCallout {
            outOfLine.deferEvent(event.owned())
            return
        }
        callout(owner) { owner.deliver(event, from: self) }
    }

    /// Runs user code of this socket (`body`): events raised meanwhile are delivered to
    /// `owner` after it, and teardowns wait until it returns (the re-entrancy rule). Inside
    /// another callout of this socket, `body` is part of that one.
    @inline(__always)
    func callout(_ owner: Socket?, _ body: () -> Void) {
        if inCallout {
            body()
            return
        }
        inCallout = true
        body()
        while let event = outOfLineState?.takeDeferredEvent() {
            if let owner { owner.deliver(event, from: self) } else { discard(event) }
        }
        inCallout = false
        if hasDeferredOperations {
            runDeferredOperations()
        }
    }

    /// Nobody is listening any more (the handle was released): accepted children close,
    /// and timeouts and trust questions end the session instead of waiting for an answer
    /// that never comes (a released socket may still be connecting and securing its last
    /// writes, see `ownerReleased`).
    private func discard(_ event: SocketEvent) {
        switch event {
        case .didAccept(let child):
            // Never activated: it runs on this thread until it is, so closing here is safe.
            child.abandon()
        case .shouldTimeoutRead(_, _, _, let question):
            loop.execute { [self] in resolveReadTimeout(extension: 0, question: question) }
        case .shouldTimeoutWrite(_, _, _, let question):
            loop.execute { [self] in resolveWriteTimeout(extension: 0, question: question) }
        case .didReceiveTrust(_, let question):
            loop.execute { [self] in resolveTrust(accept: false, question: question) }
        default:
            break
        }
    }

    /// Whether the owner wants optional events of this kind (false once released).
    @inline(__always)
    func ownerWants(_ interest: SocketEventInterests) -> Bool {
        ownerInterests.load(ordering: .relaxed) & interest.rawValue != 0
    }

    // MARK: End of iteration

    func scheduleReadPump() {
        readPumpScheduled = true
        loop.scheduleEndOfIterationWork(self)
    }

    func scheduleWriteFlush() {
        writeFlushScheduled = true
        loop.scheduleEndOfIterationWork(self)
    }

    func runEndOfIterationWork() {
        if writeFlushScheduled {
            writeFlushScheduled = false
            flushWrites()
        }
        if readPumpScheduled {
            readPumpScheduled = false
            pumpReads()
        }
        if acceptContinuationScheduled {
            acceptContinuationScheduled = false
            acceptOnAllListeners()
        }
    }

    // MARK: Readiness

    func handleEvents(_ events: UInt32) {
        guard phase == .connected, fd >= 0 else {
            if phase == .proxying { proxyHandleEvents(events) }
            return
        }
        // The peer's FIN, or a reset or error: what arrived before it is still in the kernel,
        // and the end (EOF, or the error from recv) comes after it, so it is read like data
        // (`pumpReads`). Taking the error with SO_ERROR here would report it first and lose
        // those bytes (and a TLS alert that explains the reset).
        if events & (EPOLLRDHUP.rawValue | EPOLLHUP.rawValue | EPOLLERR.rawValue) != 0 {
            peerHalfClosed = true
            readable = true
        }
        if events & EPOLLIN.rawValue != 0 { readable = true }
        if events & EPOLLOUT.rawValue != 0 { writable = true }
        if writable && (hasQueuedWrites || hasTLS) {
            flushWrites()
        }
        if phase == .connected {
            pumpReads()
        }
    }

    func eventLoopWillStop() {
        closeSession(SocketError(.badConfig, "the event loop stopped"))
    }

    // MARK: Timers

    /// Arms `timer` (created on first use) for `deadline`; `action` runs on expiry.
    /// The timer holds the core `unowned`: a weak reference would give the core a side table
    /// and slow every retain and release of it. Safe because every timer is cancelled in
    /// `closeSession`, and a core with a scheduled timer is alive (a session is running).
    func arm(_ timer: inout LoopTimer?, deadline: UInt64, _ action: @escaping (TCPSocketCore) -> Void) {
        if timer == nil {
            timer = LoopTimer { [unowned self] in action(self) }
        }
        loop.schedule(timer!, deadline: deadline)
    }

    func cancel(_ timer: LoopTimer?) {
        if let timer, timer.isScheduled { loop.cancel(timer) }
    }

    // MARK: Ending a session

    /// How long a released socket may keep sending what `disconnectAfterWriting` queued
    /// (connecting first, if it still was); a released UDP socket's queued datagrams after
    /// `closeAfterSending` have the same bound.
    static let lingerSeconds = 120.0

    /// The user released the handle: close without telling anyone. If the user asked to
    /// disconnect after writing and writes are still queued, they are sent first, like a
    /// transport's graceful close, for at most `lingerSeconds` (and within the connect
    /// timeout): a socket still resolving or connecting goes on connecting for them. Queued
    /// reads are dropped, except those ahead of a TLS marker not yet passed: the handshake,
    /// and so the writes queued behind it, waits for them.
    func ownerReleased() {
        let sessionActive = phase == .resolving || phase == .connecting || phase == .proxying || (phase == .connected && fd >= 0)
        if sessionActive && disconnectAfterWrites && !queuedWritesDone {
            let readsAheadOfTLS = tls?.stage == .waiting ? tls!.readsBefore : 0
            if readsAheadOfTLS == 0 {
                currentRead = nil
                currentReadStarted = false
                cancel(readTimer)
            }
            outOfLineState?.readQueue.keepFirst(readsAheadOfTLS - (currentRead == nil ? 0 : 1))
            disconnectAfterReads = false
            arm(&lingerTimer, deadline: deadline(afterSeconds: lingerDuration)) {
                $0.closeSession(nil, notify: false)
            }
            outOfLine.lingeringCore = self
            return
        }
        closeSession(nil, notify: false)
        // A child that was never activated still owns its descriptor.
        if fd >= 0 {
            close(fd)
            fd = -1
        }
    }

    /// Ends the session the engine runs: cancels timers, connect attempts and resolution,
    /// closes the descriptors, drops queued reads and writes without callbacks (as upstream),
    /// publishes "disconnected" (unless the user has begun a newer session meanwhile) and,
    /// when `notify`, emits `didDisconnect` as the session's last event. `graceful` (the
    /// disconnect-after variants) sends FIN after the queued bytes and discards unread input
    /// first, so the kernel does not answer our own data with a reset. `ended`: the session
    /// this call ends (default: the current one).
    ///
    /// Inside a callout it only queues itself (the re-entrancy rule): the running callback
    /// may be looking at this session's bytes, which the teardown frees. Queued operations
    /// run in order, so a teardown queued for a session always runs before the start of a
    /// newer one. A listening session lends its callbacks no memory that the teardown frees,
    /// so it ends at once, also from inside one of its callbacks: `Socket.disconnect` of a
    /// listener returns with its descriptors closed (its didDisconnect still waits for the
    /// callback, as every event raised in a callout does).
    func closeSession(_ error: SocketError?, notify: Bool = true, graceful: Bool = false, reset: Bool = false,
                      of ended: UInt64? = nil) {
        guard phase != .idle else { return }
        let endedSession = ended ?? session
        if inCallout && phase != .accepting {
            outOfLine.deferredOperations.append { core in
                core.closeSession(error, notify: notify, graceful: graceful, reset: reset, of: endedSession)
            }
            return
        }
        if let error, EngineLog.wants(.info) { logSessionEnd(error) }
        // A lingering core lets go of itself, but not before this call is over.
        let lingering = outOfLineState?.lingeringCore
        outOfLineState?.lingeringCore = nil
        defer { withExtendedLifetime(lingering) {} }

        cancel(readTimer)
        cancel(writeTimer)
        cancel(lingerTimer)
        cancel(connectTimer)
        cancel(attemptTimer)
        cancel(acceptTimer)
        for request in resolutions { request.cancel() }
        resolutions = []
        cancel(resolutionDelayTimer)
        heldAddresses = []
        resolutionError = nil
        stopWaitingForResolution()
        for attempt in connectAttempts { attempt.close() }
        connectAttempts.removeAll()
        connectAddresses.removeAll()
        lastAttemptError = nil
        localEndpoints = nil
        if let connecting = connectingState, connecting.proxy != nil {
            connecting.proxy = nil
            connecting.proxyOutbound = []
        }

        // Orderly: our own close, or the peer's close_notify (SocketKit reports `.closed` only
        // after one), which TLS says to answer with ours (RFC 5246 7.2.1, RFC 8446 6.1).
        endTLS(orderly: !reset && (error == nil || error?.code == .closed))
        if fd >= 0 {
            if reset {
                // close() with a zero linger time sends RST and drops what is unsent.
                var linger = Glibc.linger(l_onoff: 1, l_linger: 0)
                _ = setsockopt(fd, SOL_SOCKET, SO_LINGER, &linger, socklen_t(MemoryLayout<Glibc.linger>.size))
            } else if graceful {
                shutDownGracefully()
            }
            // A descriptor SocketKit made has no duplicates: close() takes it out of epoll.
            if let registration { loop.deregister(registration, fd: fd, removeFromEpoll: adoptedDescriptor) }
            close(fd)
            fd = -1
            registration = nil
            adoptedDescriptor = false
        }
        closeListeners()
        if let accepting = acceptingState, accepting.keepsAcceptedConnectionsOnItsLoop {
            if accepting.spreadsOverLoops { MultiLoopListeners.stopSiblings(of: self) }
            accepting.keepsAcceptedConnectionsOnItsLoop = false
            accepting.spreadsOverLoops = false
        }

        outOfLineState?.readQueue.removeAll()
        currentRead = nil
        currentReadStarted = false
        prebuffer.removeAll()
        if let backlog = outOfLineState {
            // Only what this queue counted: writes on their way to the loop count too.
            releaseQueuedWriteBytes(backlog.writeQueue.reduce(0) { $0 + $1.remaining })
            backlog.writeQueue.removeAll()
        }
        aboveHighWatermark = false
        headWriteStarted = false
        readTimeoutPending = false
        writeTimeoutPending = false
        readable = false
        writable = false
        readEOF = false
        peerHalfClosed = false
        outOfLineState?.sendFailure = nil
        writeStreamEnd = nil
        receivesDescriptors = false
        outOfLineState?.specialWrites = 0
        readStreamClosedReported = false
        disconnectAfterReads = false
        disconnectAfterWrites = false
        acceptPaused = false
        acceptBackoff = 0
        acceptFailureReported = false
        phase = .idle

        readProgress.clear()
        writeProgressBox.load()?.cell.clear()
        if publishedState.session == endedSession && publishedState.status != .disconnected {
            publish { $0.endSession() }
        }
        if notify {
            emit(.didDisconnect(error))
        }
    }

    /// The log's record of a session that ended with `error`, made while what it was (a
    /// peer, a host being connected to, listeners) is still known.
    @inline(never)
    private func logSessionEnd(_ error: SocketError) {
        let what: String
        if let peer = publishedState.peerAddress {
            what = "the connection with \(peer)"
        } else if let host = connectHost {
            what = "connecting to \(host)"
        } else if !listeners.isEmpty {
            what = "the listener on \(listeners.map { "\($0.address)" }.joined(separator: ", "))"
        } else {
            what = "a connection"
        }
        let subsystem: LogSubsystem = error.code.isTLS ? .tls : .connection
        EngineLog.log(error.sessionEndLogLevel, subsystem, "\(what) ended: \(error)")
    }

    private func shutDownGracefully() {
        _ = shutdown(fd, Int32(SHUT_WR))
        // Discard input that arrived and nobody read: closing with unread data makes the
        // kernel send RST, which can destroy our own unsent tail at the peer. Not into the
        // loop's read buffer: a running callback of another socket may be looking at it.
        let scratch = loop.discardBuffer
        for _ in 0..<16 {
            let count = recv(fd, scratch.baseAddress, scratch.count, Int32(MSG_DONTWAIT))
            if count <= 0 { break }
        }
    }

    /// A TLS marker not yet passed counts as a queued read and write.
    private var tlsMarkerPassed: Bool { !hasTLS || tls!.stage == .secure }

    /// Every queued write has reached the kernel.
    var queuedWritesDone: Bool { !hasQueuedWrites && tlsMarkerPassed && !tlsHasOutbound }

    /// The "disconnect after reading/writing" checks, run whenever a queue may have drained
    /// (and the half-close's: `closeWriteStreamIfDue`).
    func closeIfDisconnectAfterIsDue() {
        if writeStreamEnd != nil { closeWriteStreamIfDue() }
        guard phase == .connected, disconnectAfterReads || disconnectAfterWrites else { return }
        let readsDone = currentRead == nil && !hasQueuedReads && tlsMarkerPassed
        let writesDone = queuedWritesDone
        if disconnectAfterReads && disconnectAfterWrites {
            if readsDone && writesDone { closeSession(nil, graceful: true) }
        } else if disconnectAfterReads {
            if readsDone { closeSession(nil, graceful: true) }
        } else if writesDone {
            closeSession(nil, graceful: true)
        }
    }

    /// Our half-close, once every write queued before it has reached the kernel: under TLS
    /// our close_notify first (OpenSSL goes on reading after it: a TLS 1.3 peer may keep
    /// sending), then FIN once that has left.
    func closeWriteStreamIfDue() {
        guard phase == .connected, let end = writeStreamEnd, end != .done else { return }
        if end == .requested {
            guard queuedWritesDone else { return }
            if let tls, let session = tls.session, tls.stage == .secure {
                writeStreamEnd = .closeNotifySent
                session.shutdown()
                guard sendTLSOutput() else { return }
            }
        }
        guard !tlsHasOutbound else { return } // the rest of the close_notify: on EPOLLOUT
        writeStreamEnd = .done
        _ = shutdown(fd, Int32(SHUT_WR))
    }

    func setDisconnectAfter(reading: Bool, writing: Bool, session: UInt64) {
        guard session == self.session, phase != .idle, phase != .accepting else { return }
        if reading { disconnectAfterReads = true }
        if writing { disconnectAfterWrites = true }
        closeIfDisconnectAfterIsDue()
    }

    // MARK: Sessions: the loop side of Socket's calls

    /// Begins a session of `status` in the published state, which `setUp` may complete (its
    /// addresses), so that the caller's next call (a read, a write) sees it; then starts it
    /// (`start`): now, or after the running callback when the session before it is still
    /// being torn down (the re-entrancy rule), in order with what waits there. A session
    /// ended from that callback before it started does not start: `unused` releases what
    /// the call made for it, at once (`requestDisconnect`: a listener's descriptors are
    /// closed when its disconnect returns), and its didDisconnect is its only event.
    /// `requireFamilies`: fails unless IPv4 or IPv6 is enabled.
    func beginSession(_ status: SocketStatus, requireFamilies: Bool = false,
                      setUp: (inout SocketPublishedState) -> Void = { _ in },
                      start: @escaping (TCPSocketCore) -> Void, unused: @escaping () -> Void = {}) throws(SocketError) {
        try checkSessionMayBegin(requireFamilies: requireFamilies)
        publish { published in
            published.beginSession(status)
            setUp(&published)
        }
        let begun = session
        let waits = perform(touchesLentMemory: phase != .idle) { core in
            let release = core.takeUnstartedSession(begun)
            guard core.session == begun, core.publishedState.status != .disconnected else {
                release?()
                core.emit(.didDisconnect(nil))
                return
            }
            // What is left of the session before it (queued teardowns run first, so normally
            // nothing) ends here, without touching what is published for this one.
            if core.phase != .idle { core.closeSession(nil, of: begun &- 1) }
            // Descriptors the last connection passed and nobody took were its own.
            core.closeHeldDescriptors()
            start(core)
        }
        if waits { outOfLine.unstartedSession = UnstartedSession(session: begun, release: unused) }
    }

    /// A session begun from a callback, not started yet, and how to release at once what its
    /// call made (a listener's descriptors, an adopted one) when it ends before it starts.
    final class UnstartedSession {
        let session: UInt64
        let release: () -> Void

        init(session: UInt64, release: @escaping () -> Void) {
            self.session = session
            self.release = release
        }
    }

    /// Where our half-close stands (`closeWriteStream`).
    enum WriteStreamEnd {
        /// Waiting for the writes queued before it.
        case requested
        /// Under TLS: our close_notify is queued; FIN once it has left.
        case closeNotifySent
        /// FIN sent: the peer reads to the end of our stream.
        case done
    }

    /// What to release of `session` if it has not started (see `beginSession`), taken.
    private func takeUnstartedSession(_ session: UInt64) -> (() -> Void)? {
        guard let unstarted = outOfLineState?.unstartedSession, unstarted.session == session else { return nil }
        outOfLineState?.unstartedSession = nil
        return unstarted.release
    }

    /// Throws unless a session may begin: the socket is disconnected (and, with
    /// `requireFamilies`, IPv4 or IPv6 is enabled).
    func checkSessionMayBegin(requireFamilies: Bool) throws(SocketError) {
        guard publishedState.status == .disconnected else {
            throw SocketError(.badConfig, "the socket is already connected, connecting or accepting")
        }
        if requireFamilies && !configuration.isIPv4Enabled && !configuration.isIPv6Enabled {
            throw SocketError(.badConfig, "both IPv4 and IPv6 are disabled")
        }
    }

    /// The loop side of `Socket.disconnect()` (of a listener only, with `listenerOnly`): the
    /// session ends in the published state at once, also from inside one of its callbacks,
    /// and its teardown follows the callback (a listener's does not wait: see `closeSession`).
    /// With `reset`, the connection ends abortively: RST instead of FIN (`SO_LINGER` 0), no
    /// TLS close_notify, queued writes dropped.
    func requestDisconnect(listenerOnly: Bool, reset: Bool = false) {
        let status = publishedState.status
        guard status != .disconnected, status == .accepting || !listenerOnly else { return }
        let ended = session
        publish { $0.endSession() }
        takeUnstartedSession(ended)?()
        perform(touchesLentMemory: status != .accepting) { $0.closeSession(nil, reset: reset, of: ended) }
    }

    /// The loop side of `Socket.closeWriteStream`: no writes are taken from now on; FIN (under
    /// TLS, close_notify and then FIN) follows the last queued one, and reading goes on.
    func requestCloseWriteStream() {
        guard publishedState.status == .connecting || publishedState.status == .connected,
              !publishedState.writeStreamClosed else { return }
        publish { $0.writeStreamClosed = true }
        let current = session
        perform(touchesLentMemory: false) { core in
            guard current == core.session, core.phase != .idle, core.phase != .accepting else { return }
            core.writeStreamEnd = .requested
            core.closeWriteStreamIfDue()
        }
    }

    /// The loop side of `Socket.disconnectAfter…`: no reads or writes are taken from now on.
    func requestDisconnectAfter(reading: Bool, writing: Bool) {
        guard publishedState.status == .connecting || publishedState.status == .connected else { return }
        publish { $0.acceptsReadsAndWrites = false }
        let current = session
        perform(touchesLentMemory: true) { $0.setDisconnectAfter(reading: reading, writing: writing, session: current) }
    }

    // MARK: Options

    /// Applies the TCP options to the connected descriptor (Unix sockets take the buffer
    /// sizes only). Errors are ignored: the values were validated when set.
    /// `initial`: a connection just made or accepted by SocketKit, whose keep-alive and user
    /// timeout are off (new sockets start so, and accepted ones inherit the listener's): no
    /// call to turn them off.
    func applyTCPOptions(initial: Bool = false) {
        guard fd >= 0 else { return }
        let options = configuration.tcpOptions
        if !isUnixDomain {
            _ = try? SystemCalls.setOption(fd, Int32(IPPROTO_TCP), TCP_NODELAY, options.noDelay ? 1 : 0, "TCP_NODELAY")
            if let keepAlive = options.keepAlive {
                _ = try? SystemCalls.setOption(fd, SOL_SOCKET, SO_KEEPALIVE, 1, "SO_KEEPALIVE")
                _ = try? SystemCalls.setOption(fd, Int32(IPPROTO_TCP), TCP_KEEPIDLE, Int32(keepAlive.idle), "TCP_KEEPIDLE")
                _ = try? SystemCalls.setOption(fd, Int32(IPPROTO_TCP), TCP_KEEPINTVL, Int32(keepAlive.interval), "TCP_KEEPINTVL")
                _ = try? SystemCalls.setOption(fd, Int32(IPPROTO_TCP), TCP_KEEPCNT, Int32(keepAlive.count), "TCP_KEEPCNT")
            } else if !initial || adoptedDescriptor {
                _ = try? SystemCalls.setOption(fd, SOL_SOCKET, SO_KEEPALIVE, 0, "SO_KEEPALIVE")
            }
            if options.userTimeoutMilliseconds > 0 || !initial || adoptedDescriptor {
                _ = try? SystemCalls.setOption(fd, Int32(IPPROTO_TCP), TCP_USER_TIMEOUT,
                                               Int32(options.userTimeoutMilliseconds), "TCP_USER_TIMEOUT")
            }
        }
        if options.sendBufferSize > 0 {
            _ = try? SystemCalls.setOption(fd, SOL_SOCKET, SO_SNDBUF, Int32(clamping: options.sendBufferSize), "SO_SNDBUF")
        }
        if options.receiveBufferSize > 0 {
            _ = try? SystemCalls.setOption(fd, SOL_SOCKET, SO_RCVBUF, Int32(clamping: options.receiveBufferSize), "SO_RCVBUF")
        }
    }

    /// The loop side of `Socket`'s setters: the TCP options apply at once to a connection.
    func configure(_ change: (inout SocketConfiguration) -> Void) {
        let previousOptions = configuration.tcpOptions
        publish { change(&$0.configuration) }
        guard phase == .connected else { return }
        updateReceivesDescriptors()
        if configuration.tcpOptions != previousOptions { applyTCPOptions() }
        checkWatermarks()
    }

    /// The descriptors, for `Socket.perform`.
    var descriptors: SocketDescriptors {
        var result = SocketDescriptors()
        if fd >= 0 {
            result.primary = fd
            switch SystemCalls.socketFamily(fd) {
            case AF_INET: result.ipv4 = fd
            case AF_INET6: result.ipv6 = fd
            case AF_UNIX: result.unix = fd
            default: break
            }
        }
        for listener in listeners {
            switch listener.address.family {
            case .ipv4: result.ipv4 = listener.fd
            case .ipv6: result.ipv6 = listener.fd
            case .unix: result.unix = listener.fd
            }
        }
        if result.primary < 0 { result.primary = result.ipv4 >= 0 ? result.ipv4 : (result.ipv6 >= 0 ? result.ipv6 : result.unix) }
        return result
    }
}

/// The descriptors of a socket, as `Socket.perform` shows them (-1 where there is none).
/// A listener may have an IPv4 and an IPv6 descriptor; a connection has one.
public struct SocketDescriptors: Sendable {
    /// The connection's descriptor, or the listener's IPv4 one if any, else its IPv6 one.
    public var primary: Int32 = -1
    public var ipv4: Int32 = -1
    public var ipv6: Int32 = -1
    public var unix: Int32 = -1
}
