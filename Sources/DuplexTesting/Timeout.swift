import Duplex
import DuplexWire

/// A test step took longer than its limit.
public struct TimeoutError: Error, CustomStringConvertible {
    /// The limit that passed.
    public var limit: Duration
    public var description: String { "timed out after \(limit)" }
}

/// Runs `body`, cancelling it and throwing ``TimeoutError`` if it takes longer than `limit`:
/// wait on the event itself, with a limit, so a broken build fails fast instead of hanging.
///
/// ```swift
/// let first = try await withTimeout(.seconds(5)) {
///     for await message in socket.messages { return message }
///     return nil
/// }
/// ```
public func withTimeout<T: Sendable>(
    _ limit: Duration = .seconds(15),
    _ body: @escaping @Sendable () async throws -> T
) async throws -> T {
    try await withDeadline(limit, orThrow: { TimeoutError(limit: limit) }, body)
}

extension AsyncSequence where Self: Sendable, Element: Sendable {
    /// The first element that matches, waiting at most `limit`.
    ///
    /// On a timeout the iteration is cancelled, and cancelling the iteration of an `AsyncStream`
    /// ends that stream for good: later waits on the same stream then end at once. To wait for
    /// something that may take several tries, iterate once inside one ``withTimeout(_:_:)``.
    /// - Throws: ``TimeoutError`` when none arrives in time, or ``StreamEndedError`` when the
    ///   sequence ends first.
    public func first(
        within limit: Duration,
        where match: @escaping @Sendable (Element) -> Bool = { _ in true }
    ) async throws -> Element {
        try await withTimeout(limit) {
            for try await element in self where match(element) { return element }
            throw StreamEndedError()
        }
    }
}

/// A sequence ended before the element a test waited for.
public struct StreamEndedError: Error, CustomStringConvertible {
    public init() {}
    public var description: String { "the stream ended first" }
}
