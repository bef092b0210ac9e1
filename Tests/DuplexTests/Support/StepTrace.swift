import NIOConcurrencyHelpers

/// A long test's progress, for its failure message: the step it waited on last and what the
/// client reported meanwhile, so that a timeout on a loaded CI machine says where it stopped.
final class StepTrace: Sendable {
    private let state = NIOLockedValueBox((step: "", seen: [String]()))

    /// The step entered last.
    var step: String { state.withLockedValue { $0.step } }
    /// The steps and the events seen, in order.
    var seen: [String] { state.withLockedValue { $0.seen } }

    func enter(_ step: String) {
        state.withLockedValue { $0.step = step; $0.seen.append("[\(step)]") }
    }

    func saw(_ value: some Sendable) {
        state.withLockedValue { $0.seen.append(String(describing: value)) }
    }
}
