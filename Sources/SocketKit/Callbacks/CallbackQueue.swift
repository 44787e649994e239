// SPDX-License-Identifier: MIT
import Glibc
import Synchronization
import SocketKitC

/// Where a socket's delegate callbacks run. Whatever the queue, the callbacks of one socket
/// never overlap and arrive in the order the socket produced them, and `socketDidDisconnect`
/// is the last one of a connection.
///
/// - `CallbackQueue.eventLoop`: on the socket's own event loop thread. Fastest (no hand-off,
///   read data is not copied), but a callback that blocks stalls every socket on that loop.
/// - `SerialCallbackQueue`: one thread of its own, shared by as many sockets as you like; the
///   equivalent of a GCD serial delegate queue.
/// - `HostCallbackQueue`: callbacks wait until the host calls `drain()`; its
///   `fileDescriptor` is readable while callbacks are pending, so asyncio, GLib or any poll
///   loop can run SocketKit callbacks on its own thread.
public class CallbackQueue: @unchecked Sendable {
    /// Callbacks run on the socket's event loop thread.
    public static let eventLoop: CallbackQueue = CallbackQueue(runsOnEventLoop: true)

    /// True for `CallbackQueue.eventLoop`.
    let runsOnEventLoop: Bool

    init(runsOnEventLoop: Bool) {
        self.runsOnEventLoop = runsOnEventLoop
    }

    /// A unit of work: runs at most `budget` callbacks and returns how many it ran.
    typealias Job = @Sendable (_ budget: Int) -> Int

    /// Hands a job to the queue. `loop` is the socket's loop, used by `.eventLoop`.
    func enqueue(_ job: @escaping Job, loop: EventLoop) {
        // A stopping loop refuses other threads' tasks (a drain job handed over by the queue
        // the socket used before): its callbacks, the socket's last ones among them, run
        // here once the loop is done, instead of being lost.
        if !loop.execute({ _ = job(Int.max) }) {
            loop.afterStopping { _ = job(Int.max) }
        }
    }
}

/// A callback queue with its own thread. Create one and share it between sockets; the thread
/// ends once the queue is released and its pending callbacks have run.
public final class SerialCallbackQueue: CallbackQueue, @unchecked Sendable {
    private final class Worker: @unchecked Sendable {
        let lock = ConditionLock()
        var jobs: [Job] = []
        var stopping = false

        func run() {
            var batch: [Job] = []
            while true {
                lock.lock()
                while jobs.isEmpty && !stopping { lock.wait() }
                if jobs.isEmpty && stopping {
                    lock.unlock()
                    return
                }
                swap(&batch, &jobs)
                lock.unlock()
                for job in batch { _ = job(Int.max) }
                batch.removeAll(keepingCapacity: true)
            }
        }
    }

    private let worker = Worker()
    /// The thread's name, as given at creation.
    public let name: String

    /// Starts the queue's thread. Throws `.system` if no thread can be created, `.badParam`
    /// for a name with a NUL character.
    public init(name: String = "socketkit-callbacks") throws(SocketError) {
        self.name = try name.checkedForC("the queue name")
        super.init(runsOnEventLoop: false)
        let worker = self.worker
        try PosixThread.spawnDetached(name: name) { worker.run() }
    }

    deinit {
        worker.lock.withLock {
            worker.stopping = true
            worker.lock.signal()
        }
    }

    override func enqueue(_ job: @escaping Job, loop: EventLoop) {
        worker.lock.withLock {
            worker.jobs.append(job)
            if worker.jobs.count == 1 { worker.lock.signal() }
        }
    }
}

/// A callback queue the host drives: callbacks wait until `drain` runs them on the caller's
/// thread. `fileDescriptor` is readable exactly while callbacks are pending; watch it with
/// your own poll loop (asyncio's `add_reader`, GLib's `g_unix_fd_add`, `poll(2)`).
public final class HostCallbackQueue: CallbackQueue, @unchecked Sendable {
    private struct State {
        var jobs: [Job] = []
        var head = 0
        var draining = false
    }
    private let state = LockedValue(State())
    private let eventFD: Int32

    /// Creates the queue and its descriptor. Throws `.system` if no descriptor is left.
    public init() throws(SocketError) {
        let descriptor = eventfd(0, Int32(EFD_NONBLOCK | EFD_CLOEXEC))
        guard descriptor >= 0 else { throw SocketError.lastSystemError("eventfd") }
        eventFD = descriptor
        super.init(runsOnEventLoop: false)
    }

    deinit {
        close(eventFD)
    }

    /// Readable while callbacks are pending. Owned by the queue: do not close it.
    public var fileDescriptor: Int32 { eventFD }

    /// True while callbacks are waiting (what the descriptor's readability says).
    public var hasPendingCallbacks: Bool { state.withLock { $0.jobs.count > $0.head } }

    override func enqueue(_ job: @escaping Job, loop: EventLoop) {
        state.withLock { state in
            state.jobs.append(job)
            if state.jobs.count - state.head == 1 { signalPending() }
        }
    }

    /// Runs up to `maxCallbacks` pending callbacks on the calling thread, in order, and
    /// returns how many ran. Callbacks queued while draining run in the same call (up to the
    /// limit). Only one thread drains at a time: a concurrent or nested call returns 0.
    @discardableResult
    public func drain(maxCallbacks: Int = Int.max) -> Int {
        exclusively { runCallbacks(maxCallbacks: maxCallbacks) } ?? 0
    }

    /// State a draining front end keeps with the queue (the C API's event records); only
    /// touched inside `exclusively`.
    var drainAttachment: AnyObject? = nil

    /// Runs `body` as the queue's only drainer, or returns nil if another call drains.
    func exclusively<Result>(_ body: () -> Result) -> Result? {
        let claimed = state.withLock { state -> Bool in
            guard !state.draining else { return false }
            state.draining = true
            return true
        }
        guard claimed else { return nil }
        defer { state.withLock { $0.draining = false } }
        return body()
    }

    /// The drain loop; call inside `exclusively`.
    func runCallbacks(maxCallbacks: Int) -> Int {
        var ran = 0
        while ran < maxCallbacks {
            let job = state.withLock { state -> Job? in
                guard state.head < state.jobs.count else { return nil }
                let job = state.jobs[state.head]
                state.head += 1
                if state.head == state.jobs.count {
                    state.jobs.removeAll(keepingCapacity: true)
                    state.head = 0
                    clearPending()
                }
                return job
            }
            guard let job else { break }
            ran += job(maxCallbacks - ran)
        }
        return ran
    }

    private func signalPending() {
        var one: UInt64 = 1
        _ = write(eventFD, &one, 8)
    }

    private func clearPending() {
        var counter: UInt64 = 0
        _ = read(eventFD, &counter, 8)
    }
}
