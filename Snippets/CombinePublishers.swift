import DuplexCombine
import Foundation
#if canImport(Combine)
import Combine
#else
import OpenCombine
#endif

var cancellables = Set<AnyCancellable>()
let publisher = WebSocketPublisherAdapter(url: URL(string: "ws://127.0.0.1:8080/echo")!)
publisher.messages.sink { message in print(message) }.store(in: &cancellables)
publisher.connect().flatMap { publisher.send(.string("hello")) }
    .sink(receiveCompletion: { print($0) }, receiveValue: {}).store(in: &cancellables)
