package import NIOCore

/// Runs a task's jobs on one event loop. A task that prefers it writes to that loop's channels
/// inline, and resumes on the loop that completed its promise, without waking another thread:
/// a few round trips to a channel on the loop cost no hop between threads each.
@available(macOS 15, iOS 18, tvOS 18, watchOS 11, *)
package final class EventLoopTaskExecutor: TaskExecutor {
    /// The loop the jobs run on.
    package let eventLoop: any EventLoop

    package init(_ eventLoop: any EventLoop) {
        self.eventLoop = eventLoop
    }

    package func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        eventLoop.execute { job.runSynchronously(on: self.asUnownedTaskExecutor()) }
    }
}

/// Runs `body` with its jobs on `eventLoop` (``EventLoopTaskExecutor``) where the platform has
/// task executors, else where it would run anyway.
package func withJobs<T: Sendable, Failure: Error>(
    on eventLoop: any EventLoop,
    _ body: () async throws(Failure) -> T
) async throws(Failure) -> T {
    if #available(macOS 15, iOS 18, tvOS 18, watchOS 11, *) {
        return try await withTaskExecutorPreference(EventLoopTaskExecutor(eventLoop), operation: body)
    }
    return try await body()
}
