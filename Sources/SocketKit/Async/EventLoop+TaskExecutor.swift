// SPDX-License-Identifier: MIT
/// An event loop runs tasks that prefer it (SE-0417's task executor preference):
///
/// ```swift
/// group.addTask(executorPreference: connection.eventLoop) { try await handle(connection) }
/// ```
///
/// A task that prefers its connection's loop runs its nonisolated async code on that loop's
/// thread, between the loop's I/O: a read's bytes resume it without a hand-over to another
/// thread, and its writes go to the kernel at once (`Socket.write`'s fast path on the loop).
/// That is what makes an `AsyncSocket` server cost about what a delegate one does
/// (bench/README.md, "The async echo"). The price is the delegate's on `.eventLoop`: code
/// that blocks the thread (a lock held long, a synchronous wait, heavy computation) stalls
/// every socket of that loop; hand such work to another task.
///
/// Not a `SerialExecutor` (for actors) as well: one `enqueue` would serve both roles, and a
/// task's job run as if isolated to the loop makes the nonisolated calls after it hop away
/// and back (a trial took about twice the instructions per round trip of the echo).
extension EventLoop: TaskExecutor {
    public func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        let executor = asUnownedTaskExecutor()
        // A job must run somewhere: a loop that stopped (or is stopping and refuses other
        // threads' work) hands it to the global executor, where the task goes on and sees
        // its sockets closed.
        if !execute({ job.runSynchronously(on: executor) }) {
            globalConcurrentExecutor.enqueue(job)
        }
    }
}
