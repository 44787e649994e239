// SPDX-License-Identifier: MIT
import Synchronization

/// A socket's pending callbacks when they run off the loop: the loop posts, one job at a
/// time drains them on the callback queue. At most one drain job exists per socket, which
/// is what keeps a socket's callbacks ordered and never concurrent.
final class EventMailbox<Event>: @unchecked Sendable {
    private struct State {
        var events: [Event] = []
        var drainScheduled = false
        /// Run once the drain job finds nothing more to deliver (`notifyWhenDelivered`).
        var whenDelivered: [@Sendable () -> Void] = []
    }
    private let state = LockedValue(State())
    /// Read by the loop without the lock: only the loop sets it, only the drainer clears it.
    private let busy = Atomic<Bool>(false)

    /// True while a drain job is scheduled or running: new events must queue behind it even
    /// if the socket now runs callbacks on its loop.
    var isBusy: Bool { busy.load(ordering: .acquiring) }

    /// Queues an event; true when the caller must schedule a drain job.
    func post(_ event: Event) -> Bool {
        let unchecked = UncheckedSendable(event)
        let mustSchedule = state.withLock { state -> Bool in
            state.events.append(unchecked.value)
            guard !state.drainScheduled else { return false }
            state.drainScheduled = true
            busy.store(true, ordering: .releasing)
            return true
        }
        return mustSchedule
    }

    /// The drain job the owner enqueues each time `post` says so: made once, with the
    /// mailbox, instead of a closure (and its allocation) per scheduled drain. Set before
    /// the mailbox is shared.
    var drainJob: CallbackQueue.Job? = nil

    /// The drainer's buffer, swapped with the posted events: the two alternate, so a
    /// steady stream of events allocates no arrays. Only the (single) drainer touches it.
    private nonisolated(unsafe) var spare: [Event] = []

    /// Hands up to `limit` events, oldest first, to `deliver` (outside the lock) and
    /// returns how many. One drainer at a time (the single drain job).
    func drain(upTo limit: Int, _ deliver: (Event) -> Void) -> Int {
        var batch: [Event] = []
        swap(&batch, &spare)
        let handOver = UncheckedSendable(batch)
        batch = []
        var taken = state.withLock { state -> UncheckedSendable<[Event]> in
            var batch = handOver.value
            if limit >= state.events.count {
                swap(&batch, &state.events)  // the posted events out, the empty spare in
            } else {
                batch.append(contentsOf: state.events.prefix(limit))
                state.events.removeFirst(limit)
            }
            return UncheckedSendable(batch)
        }.value
        for event in taken {
            deliver(event)
        }
        let count = taken.count
        taken.removeAll(keepingCapacity: true)
        swap(&taken, &spare)
        return count
    }

    /// Ends a drain job; true when more events arrived and another job is needed. When none
    /// did, runs what `notifyWhenDelivered` left (on the drainer's thread, after the lock).
    func finishDrain() -> Bool {
        let (more, delivered) = state.withLock { state -> (Bool, [@Sendable () -> Void]) in
            guard state.events.isEmpty else { return (true, []) }
            state.drainScheduled = false
            busy.store(false, ordering: .releasing)
            var delivered: [@Sendable () -> Void] = []
            swap(&delivered, &state.whenDelivered)
            return (false, delivered)
        }
        for body in delivered { body() }
        return more
    }

    /// Runs `body` once every event posted so far has been delivered and its callback has
    /// returned (after the drain that finds the mailbox empty). False, with `body` not kept,
    /// when no event is waiting or being delivered: the callbacks have all run already.
    func notifyWhenDelivered(_ body: @escaping @Sendable () -> Void) -> Bool {
        state.withLock { state -> Bool in
            guard state.drainScheduled else { return false }
            state.whenDelivered.append(body)
            return true
        }
    }
}
