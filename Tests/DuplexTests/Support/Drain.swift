/// Every element of `stream` until it ends, and the error it ended with, if any: for tests that
/// check both what a typed stream delivered and how it ended.
func drain<Element>(_ stream: AsyncThrowingStream<Element, any Error>) async -> (elements: [Element], error: (any Error)?) {
    var elements: [Element] = []
    do {
        for try await element in stream { elements.append(element) }
        return (elements, nil)
    } catch {
        return (elements, error)
    }
}
