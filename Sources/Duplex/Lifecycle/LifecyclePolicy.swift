import DuplexSchema

/// What a client does after it lost a connection or an attempt failed.
enum Retry: Equatable, Sendable {
    /// Nothing: the loss is final (a refused join, a 204 from an SSE server, a TLS failure).
    case never
    /// The strategy's next delay; `suggested` is the server's wish (SSE `retry:`), clamped to
    /// the strategy's bounds.
    case policy(suggested: Duration? = nil)
    /// A wait the server imposed (`Retry-After`), clamped to the strategy's bounds.
    case after(Duration)
}

/// What makes a client's connection lifecycle its own: ``WebSocket``, ``ReconnectingWebSocket``,
/// ``ServerSentEventManager`` and ``ChatClient`` each run one ``ConnectionLifecycle`` with a
/// policy of their own. A policy is a pure value: unit-tested without I/O.
protocol LifecyclePolicy: Sendable {
    /// Why a connection ended, as the client reports it.
    associatedtype Loss: Sendable & Equatable
    /// What is queued while no connection is open.
    associatedtype Outgoing: Sendable & Equatable

    /// The delays between attempts, and when to give up.
    var strategy: ReconnectionStrategy { get }
    /// The most sends kept while no connection is open; 0 refuses every send then.
    var maxQueued: Int { get }
    /// True: `connect()` waits through failed attempts, with the strategy's delays, until one
    /// opens or the strategy gives up (SSE, ``ReconnectingWebSocket``). False: the first failed
    /// attempt fails `connect()` (``WebSocket``); later losses are retried all the same.
    var connectRetries: Bool { get }
    /// True: a connection proves itself when it opens, and the backoff starts over (WebSocket).
    /// False: only when ``ConnectionLifecycle/proved(generation:)`` says so (SSE: once an event
    /// arrived, so a server that accepts and drops at once is backed off from).
    var provedOnOpen: Bool { get }

    /// Whether, and when, to try again after `loss`. `proved`: the lost connection had proved
    /// itself (a failed attempt never has).
    func retry(after loss: Loss, proved: Bool) -> Retry

    /// Whether the lifecycle, ended by `loss` (no attempt follows), is over for good: its
    /// streams finish and `connect()` is refused with the loss, as after `terminate()` but for
    /// the loss's reason (an SSE stream that finished, or a request that is not sent twice).
    func isFinal(_ loss: Loss) -> Bool

    /// Why `loss` happened, as a metric's `cause` label: an error's code, or one of a few words.
    static func metricsCause(of loss: Loss) -> String
}

extension LifecyclePolicy {
    /// No loss is final: `connect()` can always start over.
    func isFinal(_ loss: Loss) -> Bool { false }
}
