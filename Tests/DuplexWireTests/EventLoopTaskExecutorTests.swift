import NIOCore
import NIOPosix
import Testing

@testable import DuplexWire

@Suite("withJobs(on:)")
struct EventLoopTaskExecutorTests {
    @Test("the body runs on the loop, and comes back to it after each wait: on a promise the loop completes, and on one another loop completes")
    func jobsOnTheLoop() async throws {
        // The shared group: at least one loop per core, so two distinct loops on any machine
        // this runs on (two or more cores), else the second wait stays on the same loop.
        let group = MultiThreadedEventLoopGroup.singleton
        let loop = group.next()
        var other = group.next()
        for _ in 0..<8 where other === loop { other = group.next() }
        let elsewhere = other
        let seen = try await withJobs(on: loop) { () async throws -> [Bool] in
            var seen = [loop.inEventLoop]
            _ = try await loop.submit { 1 }.get()
            seen.append(loop.inEventLoop)
            _ = try await elsewhere.submit { 2 }.get()
            seen.append(loop.inEventLoop)
            return seen
        }
        #expect(seen == [true, true, true])
        // Outside, the task is on the global executor again.
        #expect(!loop.inEventLoop)
    }

    @Test("an error thrown in the body reaches the caller")
    func throwsThrough() async {
        struct Refused: Error {}
        let loop = MultiThreadedEventLoopGroup.singleton.next()
        await #expect(throws: Refused.self) {
            try await withJobs(on: loop) { () async throws -> Int in throw Refused() }
        }
    }
}
