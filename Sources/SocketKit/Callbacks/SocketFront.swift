// SPDX-License-Identifier: MIT
import Glibc
import Synchronization

/// The engine half of a socket (`TCPSocketCore`, `UDPSocketCore`): it lives on `loop`, whose
/// thread is the only writer of its state. `stateLock` guards what other threads may touch:
/// the snapshot the loop publishes, and its front end's routing.
protocol SocketCore: AnyObject {
    /// What the loop publishes for other threads (see `publish`).
    associatedtype Published

    var loop: EventLoop { get }
    var stateLock: InlineLock { get }
    /// Written only by the loop, under `stateLock` (`publish`); the loop reads it directly,
    /// other threads through `snapshot`.
    var publishedState: Published { get set }

    /// The user let go of the front end: close (after a last flush where the kind allows).
    /// Runs on the loop.
    func ownerReleased()
    /// The user let go of the front end after the loop stopped: free what is left without
    /// touching the loop (see `SocketFront.releaseCore`).
    func abandon()
}

extension SocketCore {
    /// Where a thread waiting for `stateLock` sleeps (ParkingLot): the core's address.
    @inline(__always)
    var lockKey: UInt { parkingKey(of: self) }

    /// Runs `body` with the state lock held. Never around user code.
    @inline(__always)
    func withStateLock<Result>(_ body: () throws -> Result) rethrows -> Result {
        let key = lockKey
        stateLock.lock(key: key)
        defer { stateLock.unlock(key: key) }
        return try body()
    }

    /// The loop's write of the published state (loop thread only).
    @inline(__always)
    func publish<Result>(_ change: (inout Published) -> Result) -> Result {
        let key = lockKey
        stateLock.lock(key: key)
        defer { stateLock.unlock(key: key) }
        return change(&publishedState)
    }

    /// Reads the published state under the lock: for any thread, and never waits for the loop.
    @inline(__always)
    func readPublished<Result>(_ body: (Published) -> Result) -> Result {
        let key = lockKey
        stateLock.lock(key: key)
        defer { stateLock.unlock(key: key) }
        return body(publishedState)
    }

    /// One consistent copy of the published state (see `readPublished`).
    var snapshot: Published { readPublished { $0 } }
}

/// The user-facing half of a socket: `Socket` and `UdpSocket` share this one implementation
/// of what makes a front end, as libuv's handles share `UV_HANDLE_FIELDS`: each declares the
/// fields (`router`, `routing`, `mailbox`) and how its receiver is called; the routing of
/// events to the receiver on the callback queue, the callback gate, the mailbox and its
/// drain, the calling convention of public calls (requests to the loop) and the hand-over of
/// the core at release are written once, in extensions of this protocol (CallbackRouter.swift
/// and below).
protocol SocketFront: AnyObject, Sendable, WaitGraph.Target {
    associatedtype Core: SocketCore
    associatedtype Event: RoutedEvent
    /// The Swift delegate's adapter, or the C API's table of function pointers.
    associatedtype Receiver
    /// What the receiver returns for an event (TCP: a timeout extension; UDP: nothing).
    associatedtype Answer

    var core: Core { get }
    var eventLoop: EventLoop { get }
    /// The words other threads touch without the routing lock.
    var router: CallbackRouter { get }
    /// Guarded by the core's state lock.
    var routing: CallbackRouting<Receiver> { get set }
    /// Made on the first event that waits for a queue (a socket whose callbacks run on its
    /// loop never needs one). Set on the loop thread before any drain job exists; a drain
    /// job reads it after the queue handed it over (the queue's lock orders the two).
    var mailbox: EventMailbox<Event>? { get set }

    /// True when the core may raise an event while one of this socket's callbacks runs on
    /// the loop's thread (UDP: a send made in a callback fails at once): the event then waits
    /// in the mailbox for a job after the callback, so that callbacks never nest. TCP's core
    /// defers such events itself (`TCPSocketCore.callout`).
    static var coreRaisesEventsInsideCallbacks: Bool { get }

    /// Calls `receiver` with `event`; the callback gate is held.
    func call(_ receiver: Receiver, with event: Event) -> Answer
    /// After a delivery, once the gate is left: `answer` is nil when there was no receiver.
    func finishDelivery(of event: Event, answer: Answer?)
    /// The receiver changed (the gate held): tell the core what the new one wants.
    func receiverChanged(to receiver: Receiver?)
}

// MARK: Public calls: requests to the loop

extension SocketFront {
    /// The calling convention of a call that changes the socket's state: `body` runs on the
    /// loop (the only writer of that state) and the caller waits for its outcome, so its
    /// effect is visible on return: inline on the loop's thread, otherwise as a task the
    /// caller waits for (`EventLoop.runWaiting`). Throws `.badConfig` when the loop has
    /// stopped, and `.badConfig` with `EDEADLK` when the wait would deadlock (this thread
    /// runs a callback that the loop's thread is waiting for through a loop of its own: see
    /// `WaitGraph`); the call then has no effect.
    func onLoop<Result>(_ body: @escaping (Core) throws(SocketError) -> Result) throws(SocketError) -> Result {
        if let error = eventLoop.startupError { throw error }
        let outcome = LoopOutcome<Result>()
        let core = UncheckedSendable(self.core)
        let work = UncheckedSendable(body)
        switch eventLoop.runWaiting({
            do throws(SocketError) { outcome.result = try work.value(core.value) } catch { outcome.error = error }
        }) {
        case .ran:
            if let error = outcome.error { throw error }
            return outcome.result!
        case .refused:
            throw SocketError(.badConfig, "the socket's event loop has stopped")
        case .wouldDeadlock:
            throw SocketError(.badConfig, osError: EDEADLK,
                              "the socket's event loop is waiting for this thread: waiting for it would deadlock")
        }
    }

    /// `onLoop` for the calls that return nothing (disconnect, close, settings): when waiting
    /// would deadlock, the call is queued for the loop instead and takes effect when the loop
    /// gets to it; on a loop that is stopping it returns once the loop has closed its sockets.
    func onLoopOrQueued(_ body: @escaping (Core) -> Void) {
        let core = UncheckedSendable(self.core)
        let work = UncheckedSendable(body)
        let run: @Sendable () -> Void = { work.value(core.value) }
        switch eventLoop.runWaiting(run) {
        case .ran:
            break
        case .wouldDeadlock:
            _ = eventLoop.execute(run)
        case .refused:
            eventLoop.afterStopping {}
        }
    }

    /// The front end is going away (its deinit): the core closes on its loop, or, when the
    /// loop has stopped, lets go of what is left once the loop's thread is done with it.
    func releaseCore() {
        let core = UncheckedSendable(self.core)
        if !eventLoop.execute({ core.value.ownerReleased() }) {
            eventLoop.afterStopping { core.value.abandon() }
        }
    }
}

/// What a call run on the loop (`onLoop`) hands back to the thread waiting for it.
private final class LoopOutcome<Result>: @unchecked Sendable {
    var result: Result? = nil
    var error: SocketError? = nil
}

/// Moves a value that is not `Sendable` onto the socket's loop; the engine's confinement
/// rules (only the loop touches it afterwards) make that safe.
struct UncheckedSendable<Value>: @unchecked Sendable {
    let value: Value
    init(_ value: Value) { self.value = value }
}
