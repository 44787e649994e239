// SPDX-License-Identifier: MIT
import Glibc
import Synchronization
import SocketKitC

/// One event loop: one thread, one epoll instance, an eventfd for wake-ups from other
/// threads, a timer heap. Every socket lives on exactly one loop for its whole life, and all
/// of its state is touched only on this thread; public calls from other threads arrive as
/// tasks through `execute`.
///
/// Which calls wait (the rule `Socket` and `UdpSocket` share): the loop is the only writer
/// of its sockets' state, and a call that changes that state is a request the loop runs
/// and the caller waits for when made on another thread, so that its effect is visible on
/// return: `Socket`'s connects, accepts, adoption, disconnects and setters, and
/// `UdpSocket`'s calls other than sends, `perform` and getters (`SocketFront.onLoop`): a
/// read queued right after `connect` is taken, `accept` returns listening, a listener's
/// `disconnect()` returns with its descriptors closed, `bind` returns bound. Reads, writes,
/// `startTLS`, sends and `perform` are queued without waiting; getters read what the loop
/// last published. Setting a delegate waits for a callback running on another thread;
/// `EventLoopGroup.shutdown()` joins the loops' threads. None of these waits can deadlock:
/// a call never waits for a thread that is, directly or through other waiting threads,
/// waiting for the caller (`WaitGraph`). In such a cycle a wait for a running callback gives
/// way (it goes on without waiting; that callback may still be finishing); only when every
/// wait of the cycle is for a loop (two loops' callbacks calling each other's sockets at the
/// same moment) does the call that would close it not wait: it throws `.badConfig` with
/// `EDEADLK` and has no effect, or, when it returns nothing (a disconnect, a close, a
/// setter), is queued.
///
/// Cost: one thread, three descriptors (four when driven), a 256 KiB read buffer shared by
/// all of its sockets (a socket owns no read buffer while idle) and a 64 KiB discard buffer.
public final class EventLoop: @unchecked Sendable {
    /// Position of this loop in its group.
    public let index: Int
    /// The group this loop belongs to (accepted sockets are spread over its loops).
    public private(set) weak var group: EventLoopGroup?


    /// Set when the loop could not be created (no descriptors left): every use fails with it.
    let startupError: SocketError?

    /// A loop with no thread of its own: the thread that created it runs it, one iteration
    /// at a time (`runOnce`), when `backendDescriptor` is readable (see `EventLoopGroup.driven()`).
    let isDriven: Bool
    /// True while a driven loop runs an iteration (loop thread only).
    private var iterating = false
    /// Set once a driven loop has stopped for good (any thread may read it).
    private let drivenFinished = Atomic<Bool>(false)

    private let epollFD: Int32
    private let wakeupFD: Int32
    /// A driven loop's timer: armed for the earliest deadline, so that the host's poll wakes
    /// for timers too (a threaded loop passes the deadline to epoll_wait instead).
    private var timerFD: Int32 = -1
    private var armedDeadline: UInt64 = 0
    private let threadIdentity = Atomic<UInt>(0)
    private var thread: pthread_t?

    private struct PendingTasks {
        var tasks: [@Sendable () -> Void] = []
        var wakeupArmed = false
        var stopRequested = false
        /// The loop took its last batch of tasks (the first after the stop request): from
        /// here on only its own thread may queue tasks (see `execute`).
        var closing = false
        /// Nobody may queue tasks any more: the loop has run its last one.
        var stopped = false

        /// Whether a task may be queued now, by the loop's own thread or by another.
        func accepts(fromLoopThread: Bool) -> Bool {
            !stopped && (fromLoopThread || !closing)
        }
    }
    private let pending = LockedValue(PendingTasks())
    /// Signalled once the loop thread has closed everything and will touch nothing more.
    private let finished = ConditionLock()
    private var hasFinished = false

    // Loop-confined state.
    private var handlers: [EventLoopHandler?] = []
    private var generations: [UInt32] = []
    private var freeSlots: [Int] = []
    private var timers = TimerHeap()
    private var endOfIterationWork: [EndOfIterationWork] = []
    private var runningTasks: [@Sendable () -> Void] = []
    private let events: UnsafeMutablePointer<epoll_event>
    private let eventCapacity = 256

    /// Scratch buffer for reads: every socket on this loop reads into it and hands out views
    /// of it, so reads allocate nothing. Valid until the next read on this loop.
    let readBuffer: UnsafeMutableRawBufferPointer
    /// Where input nobody will read is discarded (graceful closes), and scratch for work
    /// that empties it again before anything else runs (TLS ciphertext on its way between
    /// the kernel and OpenSSL): never `readBuffer`, which a running callback may be looking at.
    let discardBuffer: UnsafeMutableRawBufferPointer

    /// UDP sockets' system-call memory, made when the first one needs it (loop thread only).
    var udpScratch: UDPScratch {
        if let made = udpScratchIfMade { return made }
        let made = UDPScratch()
        udpScratchIfMade = made
        return made
    }
    private(set) var udpScratchIfMade: UDPScratch? = nil

    private static let wakeupToken = UInt64.max
    private static let timerToken = UInt64.max - 1
    /// 256 KiB, as asyncio and uvloop read: a stream echoed in 64 KiB pieces keeps the
    /// peer's core busier per MB (C epoll itself speeds up the same way with bigger reads),
    /// and small messages do not notice the size. Measurements, including earlier ones that
    /// found the opposite: bench/README.md, "Reads of 256 KiB"; measure again before
    /// changing it.
    static let readBufferSize = 256 * 1024

    init(index: Int, group: EventLoopGroup?, driven: Bool = false) {
        self.index = index
        self.group = group
        isDriven = driven
        events = .allocate(capacity: eventCapacity)
        readBuffer = .allocate(byteCount: EventLoop.readBufferSize, alignment: 16)
        discardBuffer = .allocate(byteCount: 64 * 1024, alignment: 16)

        var failure: SocketError? = nil
        let epoll = epoll_create1(Int32(EPOLL_CLOEXEC))
        if epoll < 0 { failure = .lastSystemError("epoll_create1") }
        let wakeup = epoll >= 0 ? eventfd(0, Int32(EFD_NONBLOCK | EFD_CLOEXEC)) : -1
        if epoll >= 0 && wakeup < 0 { failure = .lastSystemError("eventfd") }
        if failure == nil {
            var event = epoll_event()
            event.events = EPOLLIN.rawValue
            event.data.u64 = EventLoop.wakeupToken
            if epoll_ctl(epoll, EPOLL_CTL_ADD, wakeup, &event) != 0 { failure = .lastSystemError("epoll_ctl") }
        }
        var timer: Int32 = -1
        if failure == nil && driven {
            timer = timerfd_create(CLOCK_MONOTONIC, Int32(TFD_NONBLOCK | TFD_CLOEXEC))
            if timer < 0 { failure = .lastSystemError("timerfd_create") }
            if failure == nil {
                var event = epoll_event()
                event.events = EPOLLIN.rawValue
                event.data.u64 = EventLoop.timerToken
                if epoll_ctl(epoll, EPOLL_CTL_ADD, timer, &event) != 0 { failure = .lastSystemError("epoll_ctl") }
            }
        }
        epollFD = epoll
        wakeupFD = wakeup
        timerFD = timer
        startupError = failure
        if failure != nil {
            pending.withLock { $0.stopped = true }
            hasFinished = true
            closeDescriptors()
            return
        }
        if driven {
            // The creating thread is the loop thread from now on: calls it makes run inline.
            threadIdentity.store(currentThreadIdentity(), ordering: .releasing)
            return
        }
        do {
            thread = try PosixThread.spawn(name: "socketkit-loop-\(index)") { [self] in run() }
        } catch {
            pending.withLock { $0.stopped = true }
            hasFinished = true
            closeDescriptors()
        }
    }

    deinit {
        // Closed only here, not when the loop stops: a thread that decided to wake the loop
        // writes to it after letting go of the task lock, and by then the loop may have
        // stopped. While that thread is inside `execute` (or `requestStop`) it holds this
        // object, so the descriptor is still ours and cannot have been reused for anything
        // else; the bytes it writes go to an eventfd nobody reads.
        if wakeupFD >= 0 { close(wakeupFD) }
        events.deallocate()
        readBuffer.deallocate()
        discardBuffer.deallocate()
        udpScratchIfMade?.deallocate()
    }

    /// True when called on this loop's thread.
    public var inEventLoop: Bool {
        threadIdentity.load(ordering: .relaxed) == currentThreadIdentity()
    }

    /// Runs `task` on the loop's thread, after the tasks already queued. Returns false (and
    /// drops the task) when the loop never started, has stopped, or is stopping: the first
    /// batch of tasks the loop takes after a stop request is its last, and from then on
    /// tasks from other threads are refused, so that callers that keep queueing cannot hold
    /// the stop off. The loop still runs what its own thread queues while it closes its
    /// sockets.
    @discardableResult
    public func execute(_ task: @escaping @Sendable () -> Void) -> Bool {
        let loopThread = inEventLoop
        // On a driven loop between iterations nobody would look at the tasks: wake the host.
        let onLoop = loopThread && (!isDriven || iterating)
        let (accepted, mustWake) = pending.withLock { state -> (Bool, Bool) in
            guard state.accepts(fromLoopThread: loopThread) else { return (false, false) }
            state.tasks.append(task)
            if onLoop || state.wakeupArmed { return (true, false) }
            state.wakeupArmed = true
            return (true, true)
        }
        if mustWake { wake() }
        return accepted
    }

    /// Runs `task` now when called on the loop's thread, otherwise like `execute`.
    @discardableResult
    func executeInlineIfPossible(_ task: @escaping @Sendable () -> Void) -> Bool {
        if inEventLoop {
            task()
            return true
        }
        return execute(task)
    }

    /// What `runWaiting` did.
    enum WaitedRun {
        /// `body` has run.
        case ran
        /// The loop is stopping or has stopped (see `execute`): `body` will not run.
        case refused
        /// Waiting would deadlock: nothing was queued.
        case wouldDeadlock
    }

    /// Runs `body` on the loop and returns once it has run: at once on the loop's thread,
    /// otherwise as a task the caller waits for (for calls that return their effect). The
    /// wait is one of `WaitGraph`'s: it is not started when the loop's thread is, through
    /// others, waiting for the caller and none of those waits can give way.
    func runWaiting(_ body: @escaping @Sendable () -> Void) -> WaitedRun {
        if inEventLoop {
            body()
            return .ran
        }
        let me = currentThreadIdentity()
        guard WaitGraph.register(me, waitingFor: self, wakeKey: 0) != nil else { return .wouldDeadlock }
        defer { WaitGraph.unregister(me) }
        let done = Completion()
        guard execute({ body(); done.signal() }) else { return .refused }
        done.wait()
        return .ran
    }

    /// Whether `execute` would accept a task from the calling thread now.
    var isAcceptingTasks: Bool {
        let loopThread = inEventLoop
        return pending.withLock { $0.accepts(fromLoopThread: loopThread) }
    }

    private func wake() {
        var one: UInt64 = 1
        _ = write(wakeupFD, &one, 8)
    }

    /// Makes a driven loop's descriptor readable (once until the next iteration).
    private func wakeDrivenHost() {
        let mustWake = pending.withLock { state -> Bool in
            guard !state.wakeupArmed, !state.stopped else { return false }
            state.wakeupArmed = true
            return true
        }
        if mustWake { wake() }
    }

    // MARK: Registration (loop thread only)

    /// Registers `fd` for `events` (epoll bits). Edge-triggered registrations are the norm:
    /// sockets register once for input and output and never modify the registration.
    func register(fd: Int32, events: UInt32, handler: EventLoopHandler) throws(SocketError) -> RegistrationID {
        assertInEventLoop()
        let slot = takeSlot()
        let id = RegistrationID(slot: slot, generation: generations[slot])
        var event = epoll_event()
        event.events = events
        event.data.u64 = id.token
        guard epoll_ctl(epollFD, EPOLL_CTL_ADD, fd, &event) == 0 else {
            let error = SocketError.lastSystemError("epoll_ctl(ADD)")
            freeSlots.append(slot)
            throw error
        }
        handlers[slot] = handler
        return id
    }

    /// Registers a handler with no descriptor yet (a socket waiting for a name's answer):
    /// a stopping loop tells it too (`eventLoopWillStop`), as it tells those it polls.
    /// Removed with `deregister(_:fd:removeFromEpoll:)`, `removeFromEpoll` false.
    func registerWithoutDescriptor(handler: EventLoopHandler) -> RegistrationID {
        assertInEventLoop()
        let slot = takeSlot()
        handlers[slot] = handler
        return RegistrationID(slot: slot, generation: generations[slot])
    }

    private func takeSlot() -> Int {
        if let reused = freeSlots.popLast() { return reused }
        handlers.append(nil)
        generations.append(0)
        return handlers.count - 1
    }

    func modify(_ id: RegistrationID, fd: Int32, events: UInt32) throws(SocketError) {
        assertInEventLoop()
        var event = epoll_event()
        event.events = events
        event.data.u64 = id.token
        guard epoll_ctl(epollFD, EPOLL_CTL_MOD, fd, &event) == 0 else {
            throw SocketError.lastSystemError("epoll_ctl(MOD)")
        }
    }

    /// Hands an existing registration to another handler (the winning Happy Eyeballs attempt
    /// becomes the connection) without a system call.
    func replaceHandler(_ id: RegistrationID, with handler: EventLoopHandler) {
        assertInEventLoop()
        guard id.slot < handlers.count, generations[id.slot] == id.generation else { return }
        handlers[id.slot] = handler
    }

    /// Removes the registration. The caller closes the descriptor afterwards. Without
    /// `removeFromEpoll` the caller promises the close is the descriptor's last reference
    /// (epoll then drops it by itself; an event already queued for it carries a stale token).
    func deregister(_ id: RegistrationID, fd: Int32, removeFromEpoll: Bool = true) {
        assertInEventLoop()
        guard id.slot < handlers.count, generations[id.slot] == id.generation else { return }
        if removeFromEpoll { _ = epoll_ctl(epollFD, EPOLL_CTL_DEL, fd, nil) }
        handlers[id.slot] = nil
        generations[id.slot] &+= 1
        freeSlots.append(id.slot)
    }

    // MARK: Timers (loop thread only)

    func schedule(_ timer: LoopTimer, deadline: UInt64) {
        assertInEventLoop()
        timers.schedule(timer, deadline: deadline)
        // Armed by the host between iterations (a connect with a timeout from asyncio): the
        // timer descriptor must know now, not after the next iteration.
        if isDriven && !iterating { armDrivenTimer() }
    }

    func cancel(_ timer: LoopTimer) {
        assertInEventLoop()
        timers.remove(timer)
    }

    // MARK: End-of-iteration work (loop thread only)

    func scheduleEndOfIterationWork(_ work: EndOfIterationWork) {
        assertInEventLoop()
        guard !work.isScheduledForEndOfIteration else { return }
        work.isScheduledForEndOfIteration = true
        endOfIterationWork.append(work)
        // Queued by the host between iterations (a read from a drained callback): the host
        // must come back.
        if isDriven && !iterating { wakeDrivenHost() }
    }

    func assertInEventLoop() {
        assert(inEventLoop, "SocketKit: loop-confined state touched off its event loop thread")
    }

    // MARK: The loop

    private func run() {
        threadIdentity.store(currentThreadIdentity(), ordering: .releasing)
        while !runIteration(timeout: nextTimeoutMilliseconds()) {}
        shutDownHandlers()
    }

    /// One iteration: ready descriptors, expired timers, tasks, end-of-iteration work.
    /// Returns true when the loop must stop.
    private func runIteration(timeout: Int32) -> Bool {
        if timeout != 0 { ThreadWaitHook.threadWillWait() }
        let count = skc_epoll_wait(epollFD, events, Int32(eventCapacity), timeout)
        // Only timers due when the poll returned fire in this iteration. One armed later in
        // it (a zero timeout set by a callback) waits for the next poll, so that what
        // completed at once (a Unix-domain connect, bytes already queued) is seen first:
        // a zero timeout means the same wherever the call was made.
        let polledAt = timers.isEmpty ? 0 : monotonicNanoseconds()
        if count > 0 {
            for position in 0..<Int(count) {
                dispatch(events[position])
            }
        }
        runExpiredTimers(dueBy: polledAt)
        if runTasks() { return true }
        runEndOfIterationWork()
        return false
    }

    /// The descriptor a host watches for a driven loop: readable when descriptors are
    /// ready, a timer is due or work was queued (its epoll instance).
    var backendDescriptor: Int32 { epollFD }

    /// Runs one iteration of a driven loop without waiting; only on the thread that created
    /// it, and not from inside an iteration (a callback). Returns true when work is left
    /// that a new iteration should do at once (call again before polling: work queued during
    /// an iteration does not make the descriptor readable), false when the loop is idle or
    /// has stopped.
    func runOnce() throws(SocketError) -> Bool {
        guard isDriven else { throw SocketError(.badConfig, "the loop runs on a thread of its own") }
        if drivenFinished.load(ordering: .acquiring) { return false }
        guard inEventLoop else {
            throw SocketError(.badConfig, "a driven loop runs only on the thread that created its group")
        }
        guard !iterating else { throw SocketError(.badConfig, "the loop is already running an iteration") }
        iterating = true
        let stop = runIteration(timeout: 0)
        iterating = false
        if stop {
            shutDownHandlers()
            return false
        }
        armDrivenTimer()
        if !endOfIterationWork.isEmpty { return true }
        return pending.withLock { !$0.tasks.isEmpty || $0.stopRequested }
    }

    /// Arms the timer descriptor for the earliest deadline (a system call only when the
    /// earliest deadline changed).
    private func armDrivenTimer() {
        let earliest = timers.earliestDeadline ?? 0
        guard earliest != armedDeadline else { return }
        armedDeadline = earliest
        var setting = itimerspec()
        if earliest > 0 {
            // An absolute time on CLOCK_MONOTONIC, the clock of `monotonicNanoseconds`; 0 would
            // disarm it, so a deadline already past becomes 1 ns.
            let when = max(earliest, 1)
            setting.it_value.tv_sec = Int(when / 1_000_000_000)
            setting.it_value.tv_nsec = Int(when % 1_000_000_000)
        }
        _ = timerfd_settime(timerFD, Int32(TFD_TIMER_ABSTIME), &setting, nil)
    }

    /// Stops a driven loop from its own thread, now (from a callback: in the next iteration):
    /// queued tasks run, every socket closes and reports, and the loop touches nothing more.
    func stopDriven() {
        guard isDriven, inEventLoop, !drivenFinished.load(ordering: .acquiring) else { return }
        guard !iterating else {
            // From a callback: the iteration running it cannot be cut short. The stop is
            // pending, so runOnce reports work, and the host's next iteration finishes it.
            requestStop()
            return
        }
        requestStop()
        iterating = true
        while !runIteration(timeout: 0) {}
        iterating = false
        shutDownHandlers()
    }

    private func nextTimeoutMilliseconds() -> Int32 {
        if !endOfIterationWork.isEmpty { return 0 }
        let hasTasks = pending.withLock { state -> Bool in
            !state.tasks.isEmpty || state.stopRequested
        }
        if hasTasks { return 0 }
        guard let earliest = timers.earliestDeadline else { return -1 }
        let now = monotonicNanoseconds()
        guard earliest > now else { return 0 }
        let milliseconds = (earliest - now + 999_999) / 1_000_000
        return Int32(min(milliseconds, UInt64(Int32.max)))
    }

    private func dispatch(_ event: epoll_event) {
        let token = event.data.u64
        if token == EventLoop.wakeupToken {
            var counter: UInt64 = 0
            _ = read(wakeupFD, &counter, 8)
            return
        }
        if token == EventLoop.timerToken {
            var expirations: UInt64 = 0
            _ = read(timerFD, &expirations, 8)
            armedDeadline = 0 // fired: armed again after the iteration if a timer remains
            return
        }
        let slot = Int(token & 0xffff_ffff)
        let generation = UInt32(truncatingIfNeeded: token >> 32)
        guard slot < handlers.count, generations[slot] == generation, let handler = handlers[slot] else { return }
        handler.handleEvents(event.events)
    }

    private func runExpiredTimers(dueBy polledAt: UInt64) {
        while let timer = timers.popExpired(now: polledAt) {
            timer.action()
        }
    }

    /// Runs the queued tasks. Returns true when the loop must stop: the batch taken after a
    /// stop was requested is the last one (it holds everything other threads queued before
    /// the request, and they can queue nothing after it), so the stop takes bounded time.
    private func runTasks() -> Bool {
        let stop = pending.withLock { state -> Bool in
            swap(&state.tasks, &runningTasks)
            state.wakeupArmed = false
            if state.stopRequested { state.closing = true }
            return state.stopRequested
        }
        for task in runningTasks { task() }
        runningTasks.removeAll(keepingCapacity: true)
        return stop
    }

    /// The last tasks, queued by the loop's own thread while it stopped (callbacks of the
    /// closing sockets, for instance); then no task is accepted any more.
    private func runRemainingTasks() {
        while true {
            let done = pending.withLock { state -> Bool in
                swap(&state.tasks, &runningTasks)
                if runningTasks.isEmpty { state.stopped = true }
                return state.stopped
            }
            if done { return }
            for task in runningTasks { task() }
            runningTasks.removeAll(keepingCapacity: true)
        }
    }

    private func runEndOfIterationWork() {
        guard !endOfIterationWork.isEmpty else { return }
        var batch: [EndOfIterationWork] = []
        swap(&batch, &endOfIterationWork)
        for work in batch {
            work.isScheduledForEndOfIteration = false
            work.runEndOfIterationWork()
        }
        if endOfIterationWork.isEmpty {
            // Keep the storage for the next iteration.
            batch.removeAll(keepingCapacity: true)
            swap(&batch, &endOfIterationWork)
        }
    }

    private func shutDownHandlers() {
        // Other threads' tasks are refused since the last batch; every registered descriptor
        // is closed and its owner reports the end, then what that queued on this thread runs.
        for slot in handlers.indices {
            if let handler = handlers[slot] {
                handler.eventLoopWillStop()
            }
        }
        runRemainingTasks()
        handlers.removeAll()
        timers.removeAll()
        endOfIterationWork.removeAll()
        closeDescriptors()
        finished.withLock {
            hasFinished = true
            finished.broadcast()
        }
        if isDriven {
            // The host thread is no longer this loop's thread: its calls on the loop's sockets
            // now fail ("the event loop has stopped") instead of running on a dead loop.
            drivenFinished.store(true, ordering: .releasing)
            threadIdentity.store(0, ordering: .releasing)
        }
    }

    /// True once a driven loop has stopped for good (any thread).
    var hasStoppedDriven: Bool { drivenFinished.load(ordering: .acquiring) }

    /// Runs `body` once this loop has stopped for good: at once on the loop thread itself,
    /// otherwise after waiting for the loop thread to finish its shutdown, so `body` never
    /// races with it. Only for a loop that refused a task (it is stopping or never started).
    func afterStopping(_ body: () -> Void) {
        if inEventLoop {
            body()
            return
        }
        // A wait for the loop's thread, as `runWaiting`'s: a callback the stopping loop runs
        // may wait for a callback gate this thread holds, and must see this wait to give way.
        let me = currentThreadIdentity()
        let registered = WaitGraph.register(me, waitingFor: self, wakeKey: 0) != nil
        finished.withLock {
            while !hasFinished { finished.wait() }
        }
        if registered { WaitGraph.unregister(me) }
        body()
    }

    /// The descriptors only the loop thread uses (the eventfd stays until deinit).
    private func closeDescriptors() {
        if timerFD >= 0 { close(timerFD) }
        if epollFD >= 0 { close(epollFD) }
    }

    // MARK: Stopping (group only)

    func requestStop() {
        let mustWake = pending.withLock { state -> Bool in
            guard !state.stopped, !state.stopRequested else { return false }
            state.stopRequested = true
            return true
        }
        if mustWake { wake() }
    }

    func joinThread() {
        if let thread { PosixThread.join(thread) }
        thread = nil
    }
}

extension EventLoop: WaitGraph.Target {
    /// The loop's thread: a caller of `runWaiting` waits for it (0 before it started and
    /// after it stopped).
    var waitedThread: UInt { threadIdentity.load(ordering: .acquiring) }
}

/// A one-shot signal that a task has run, for the thread waiting for it.
private final class Completion: @unchecked Sendable {
    private let lock = ConditionLock()
    private var done = false

    func signal() {
        lock.withLock {
            done = true
            lock.signal()
        }
    }

    func wait() {
        lock.withLock {
            while !done { lock.wait() }
        }
    }
}
