// SPDX-License-Identifier: MIT
import Glibc
import Synchronization

/// An event a front end routes.
protocol RoutedEvent {
    /// The same event with no borrowed memory, for delivery after the current loop step.
    func owned() -> Self
}

/// Where a socket's callbacks go. Guarded by the core's state lock; changed by any thread,
/// read by the delivering one.
struct CallbackRouting<Receiver> {
    /// Where callbacks run now.
    var queue: CallbackQueue
    /// The Swift delegate's adapter, or the C API's table of function pointers.
    var receiver: Receiver?
    /// The user's; never touched by SocketKit.
    var userData: AnyObject? = nil
}

/// The queue of a socket whose receiver needs its callbacks on one queue whatever
/// `callbackQueue` says (a main-actor delegate's adapter works only on the main actor): it
/// runs them on `pinned` and keeps the queue the user chose (`behind`, guarded by the
/// socket's state lock), which applies again once a receiver that does not pin is set.
/// Kept in `CallbackRouting.queue` itself, so that no socket grows by a field for it.
final class PinnedCallbackQueue: CallbackQueue, @unchecked Sendable {
    let pinned: CallbackQueue
    var behind: CallbackQueue

    init(_ pinned: CallbackQueue, behind: CallbackQueue) {
        self.pinned = pinned
        self.behind = behind
        super.init(runsOnEventLoop: pinned.runsOnEventLoop)
    }

    override func enqueue(_ job: @escaping Job, loop: EventLoop) {
        pinned.enqueue(job, loop: loop)
    }

    /// Another one like it, for a connection accepted by a socket that has it.
    func copy() -> PinnedCallbackQueue { PinnedCallbackQueue(pinned, behind: behind) }
}

/// The part of a front end's routing that threads touch without a lock, inline in the
/// socket (no allocation of its own).
struct CallbackRouter: ~Copyable {
    /// Held while a callback of the socket runs (see `InlineCallbackGate`).
    let gate = InlineCallbackGate()
    /// Bumped, under the state lock, whenever the receiver or the callback queue changes: a
    /// batch that took the receiver once (`directReceiver`) sees the change at its next event.
    let version = Atomic<UInt32>(0)

    init() {}
}

// MARK: Routing

extension SocketFront {
    /// Where a thread waiting for this socket's gate sleeps (ParkingLot).
    @inline(__always)
    var gateKey: UInt { parkingKey(of: self) }

    /// The thread running one of this socket's callbacks (WaitGraph).
    var waitedThread: UInt { router.gate.holderThread }

    /// Runs `body` with the callback gate held (see `InlineCallbackGate`): directly when this
    /// thread already holds it, without it when waiting would deadlock.
    func withGate<Result>(_ body: () throws -> Result) rethrows -> Result {
        try router.gate.withEntry(key: gateKey, holder: self, body)
    }

    var receiver: Receiver? { core.withStateLock { routing.receiver } }

    /// Sets the receiver (and the queue, unless nil) synchronously: once this returns, no
    /// callback reaches the previous receiver (a callback running on another thread is waited
    /// for; from inside a callback of this socket it takes effect at once; when that wait
    /// would deadlock, it is not made, and the running callback may still be finishing).
    ///
    /// `pinnedQueue`: the queue this receiver's callbacks must run on, whatever the socket's
    /// `callbackQueue` (a main-actor delegate's adapter only works on the main actor). While
    /// it is set, setting `callbackQueue` records the user's choice for later and the pinned
    /// queue stays (`PinnedCallbackQueue`).
    func setReceiver(_ receiver: Receiver?, callbackQueue: CallbackQueue?) {
        setReceiver(receiver, callbackQueue: callbackQueue, pinnedQueue: nil)
    }

    func setReceiver(_ receiver: Receiver?, callbackQueue: CallbackQueue?, pinnedQueue: CallbackQueue?) {
        withGate {
            core.withStateLock {
                let chosen = callbackQueue ?? (routing.queue as? PinnedCallbackQueue)?.behind ?? routing.queue
                routing.receiver = receiver
                routing.queue = pinnedQueue.map { PinnedCallbackQueue($0, behind: chosen) } ?? chosen
                router.version.add(1, ordering: .relaxed)
            }
            receiverChanged(to: receiver)
        }
    }

    /// Where callbacks run. A change keeps callbacks in order: those already queued on the
    /// old queue run there first. While a receiver pins the queue, a change waits behind the
    /// pin (see `setReceiver`).
    var routedQueue: CallbackQueue {
        get {
            core.withStateLock {
                let queue = routing.queue
                return (queue as? PinnedCallbackQueue)?.pinned ?? queue
            }
        }
        set {
            core.withStateLock {
                if let pin = routing.queue as? PinnedCallbackQueue {
                    pin.behind = newValue
                    return
                }
                routing.queue = newValue
                router.version.add(1, ordering: .relaxed)
            }
        }
    }

    var routedUserData: AnyObject? {
        get { core.withStateLock { routing.userData } }
        set { core.withStateLock { routing.userData = newValue } }
    }
}

// MARK: Delivery (called by the core on the loop thread)

extension SocketFront {
    /// Hands an event to the callback queue. On `.eventLoop` it runs now (borrowed bytes
    /// stay borrowed); otherwise it goes to the socket's mailbox, which one job at a time
    /// drains on the queue, so callbacks never overlap and keep their order, even across a
    /// change of queue. The common case (callbacks on the loop, none waiting) copies nothing
    /// and takes the state lock once: the gate first, then the queue and the receiver.
    @inline(__always)
    func route(_ event: Event) {
        let mayRunNow = !(mailbox?.isBusy ?? false)
            && !(Self.coreRaisesEventsInsideCallbacks && router.gate.isHeldByCurrentThread)
        if mayRunNow {
            // The gate is free or briefly held (a callback running elsewhere means a busy
            // mailbox); the receiver is read with it held, so a receiver replaced meanwhile
            // (`setReceiver` holds the gate while it does) is never called afterwards.
            let key = gateKey
            router.gate.enter(key: key)
            var onLoop = false
            let answer = callReceiver(with: event, key: key) {
                onLoop = routing.queue.runsOnEventLoop
                return onLoop ? routing.receiver : nil
            }
            if onLoop {
                finishDelivery(of: event, answer: answer)
                return
            }
        }
        post(event.owned())
    }

    /// Delivers `event` now, on this thread (a drain job's).
    private func deliverNow(_ event: Event) {
        let key = gateKey
        router.gate.enter(key: key)
        finishDelivery(of: event, answer: callReceiver(with: event, key: key) { routing.receiver })
    }

    /// With the gate held: calls the receiver that `take` reads under the state lock (if
    /// any), then leaves the gate. What the receiver answered; nil without one.
    @inline(__always)
    private func callReceiver(with event: Event, key: UInt, _ take: () -> Receiver?) -> Answer? {
        defer { router.gate.leave(key: key) }
        // Bound with `if let` from the lock's result and not used after the call: passed on,
        // or with `.map`, the receiver was retained and released again around it.
        if let receiver = core.withStateLock(take) {
            return call(receiver, with: event)
        }
        return nil
    }

    /// Loop thread: runs `body` (on the delivering thread) once every event handed to
    /// another queue so far has been delivered and its callback has returned. False, with
    /// `body` not kept, when none is waiting or running: the callbacks have all run.
    func notifyWhenCallbacksHaveRun(_ body: @escaping @Sendable () -> Void) -> Bool {
        mailbox?.notifyWhenDelivered(body) ?? false
    }

    private func post(_ event: Event) {
        let box: EventMailbox<Event>
        if let existing = mailbox {
            box = existing
        } else {
            box = EventMailbox()
            // Made once, with the mailbox: no closure (and allocation) per scheduled drain.
            box.drainJob = { [weak self] budget in self?.drainMailbox(budget: budget) ?? 0 }
            mailbox = box
        }
        if box.post(event), let job = box.drainJob {
            routedQueue.enqueue(job, loop: eventLoop)
        }
    }

    /// One drain job: delivers up to `budget` events, then goes to the back of the
    /// (possibly new) queue if more are waiting, to be fair to other sockets sharing it.
    private func drainMailbox(budget: Int) -> Int {
        guard let box = mailbox else { return 0 }
        let count = box.drain(upTo: max(1, budget)) { deliverNow($0) }
        if box.finishDrain(), let job = box.drainJob {
            routedQueue.enqueue(job, loop: eventLoop)
        }
        return count
    }

    // MARK: Direct delivery of a batch

    /// The receiver a batch of events may be handed to directly (`deliverDirectly`), and the
    /// routing version it belongs to: the callbacks run on the loop, none is waiting or
    /// running, and there is a receiver. nil: each event takes `route`. Taken once per batch,
    /// not per event. Loop thread only.
    func directReceiver() -> (receiver: Receiver, version: UInt32)? {
        guard !(mailbox?.isBusy ?? false), !router.gate.isHeldByCurrentThread else { return nil }
        return core.withStateLock {
            guard routing.queue.runsOnEventLoop, let receiver = routing.receiver else { return nil }
            return (receiver, router.version.load(ordering: .relaxed))
        }
    }

    /// Runs `call` (which hands one event to the receiver from `directReceiver`) as a
    /// callback, as `route` would; false, with nothing done, when the routing has changed
    /// since `version` (the caller asks `directReceiver` again) or an event waits for
    /// delivery (this one must follow it). Loop thread only.
    @inline(__always)
    func deliverDirectly(version: UInt32, _ call: () -> Void) -> Bool {
        guard !(mailbox?.isBusy ?? false) else { return false }
        let key = gateKey
        router.gate.enter(key: key)
        // Read with the gate held: a receiver replaced from another thread (`setReceiver`
        // holds the gate while it does) is seen here, and the old one is not called.
        guard router.version.load(ordering: .relaxed) == version else {
            router.gate.leave(key: key)
            return false
        }
        call()
        router.gate.leave(key: key)
        return true
    }
}

extension SocketFront where Answer == Void {
    func finishDelivery(of event: Event, answer: Void?) {}
}
