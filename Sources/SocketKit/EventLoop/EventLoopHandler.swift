// SPDX-License-Identifier: MIT
/// Something registered with an event loop for readiness events on one file descriptor.
/// Every method runs on the loop's thread.
protocol EventLoopHandler: AnyObject {
    /// Readiness for the descriptor, as epoll event bits.
    func handleEvents(_ events: UInt32)
    /// The loop is stopping: release the descriptor and report the end to the user.
    func eventLoopWillStop()
}

/// Work that runs once at the end of the current loop iteration: flushing queued writes and
/// continuing reads. Everything that a burst of events, tasks and callbacks queued goes out
/// together, so queued writes leave in one `writev` and nothing runs re-entrantly inside a
/// user callback.
protocol EndOfIterationWork: AnyObject {
    /// Maintained by the loop; true while the object is on the list.
    var isScheduledForEndOfIteration: Bool { get set }
    func runEndOfIterationWork()
}

/// Identifies one registration with a loop; stale identifiers are ignored (the generation
/// changes whenever a slot is reused, so an event for a descriptor closed earlier in the
/// same epoll batch cannot reach the next owner of its slot).
struct RegistrationID: Equatable {
    let slot: Int
    let generation: UInt32

    var token: UInt64 { UInt64(generation) << 32 | UInt64(slot) }
}

/// A registration with no descriptor (`EventLoop.registerWithoutDescriptor`): tells its
/// owner that the loop is stopping, for state the loop would otherwise not know of (a UDP
/// socket whose datagram waits for a name's answer, before it has a descriptor).
final class LoopStopObserver: EventLoopHandler {
    private let stopping: () -> Void

    init(_ stopping: @escaping () -> Void) {
        self.stopping = stopping
    }

    func handleEvents(_ events: UInt32) {}
    func eventLoopWillStop() { stopping() }
}
