import DuplexCallbacks
import Foundation

let ws = WebSocketCallbackAdapter(url: URL(string: "ws://127.0.0.1:8080/echo")!)
ws.onMessage { message in print(message) }
ws.onStateChange { state in print(state) }
ws.connect { result in ws.send(.string("hello")) { _ in } }
