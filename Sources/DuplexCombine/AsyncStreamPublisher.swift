#if canImport(Combine)
public import Combine
#else
public import OpenCombine
#endif
import NIOConcurrencyHelpers

/// A publisher over an `AsyncStream`: each subscriber gets its own stream (made when it
/// subscribes), and receives elements as its demand allows. It never fails, and finishes when
/// the stream does.
public struct AsyncStreamPublisher<Output: Sendable>: Publisher, Sendable {
    public typealias Failure = Never

    private let makeStream: @Sendable () -> AsyncStream<Output>

    /// Creates a publisher; `makeStream` runs once per subscriber.
    public init(_ makeStream: @escaping @Sendable () -> AsyncStream<Output>) {
        self.makeStream = makeStream
    }

    public func receive<S: Subscriber>(subscriber: S) where S.Input == Output, S.Failure == Never {
        let subscription = StreamSubscription(stream: makeStream(), subscriber: AnySubscriber(subscriber))
        subscriber.receive(subscription: subscription)
    }
}

/// Feeds one subscriber from one stream, on a task, honouring its demand.
private final class StreamSubscription<Output: Sendable>: Subscription, @unchecked Sendable {
    // @unchecked: `state` is a lock; the subscriber is called from the feeding task only.
    private struct State {
        var demand: Subscribers.Demand = .none
        var waiter: CheckedContinuation<Void, Never>?
        var task: Task<Void, Never>?
        var cancelled = false
    }

    private let state = NIOLockedValueBox(State())
    private let stream: AsyncStream<Output>
    private let subscriber: AnySubscriber<Output, Never>

    init(stream: AsyncStream<Output>, subscriber: AnySubscriber<Output, Never>) {
        self.stream = stream
        self.subscriber = subscriber
    }

    func request(_ demand: Subscribers.Demand) {
        let (waiter, start) = state.withLockedValue { state -> (CheckedContinuation<Void, Never>?, Bool) in
            guard !state.cancelled else { return (nil, false) }
            state.demand += demand
            defer { state.waiter = nil }
            return (state.waiter, state.task == nil)
        }
        waiter?.resume()
        if start {
            // Ends when the stream does, or when the subscription is cancelled (it cancels it).
            let task = Task { await self.feed() }
            state.withLockedValue { $0.task = task }
        }
    }

    func cancel() {
        let (task, waiter) = state.withLockedValue { state in
            state.cancelled = true
            defer { state.waiter = nil }
            return (state.task, state.waiter)
        }
        waiter?.resume()
        task?.cancel()
    }

    private func feed() async {
        for await element in stream {
            guard await waitForDemand() else { return }
            let more = subscriber.receive(element)
            state.withLockedValue { $0.demand += more }
        }
        if !state.withLockedValue({ $0.cancelled }) {
            subscriber.receive(completion: .finished)
        }
    }

    /// Takes one unit of demand, waiting for it; false when cancelled.
    private func waitForDemand() async -> Bool {
        while true {
            let ready: Bool? = state.withLockedValue { state in
                if state.cancelled { return false }
                if state.demand > 0 {
                    state.demand -= 1
                    return true
                }
                return nil
            }
            if let ready { return ready }
            await withCheckedContinuation { continuation in
                let resumeNow = state.withLockedValue { state -> Bool in
                    if state.cancelled || state.demand > 0 { return true }
                    state.waiter = continuation
                    return false
                }
                if resumeNow { continuation.resume() }
            }
        }
    }
}
