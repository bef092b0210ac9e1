import Duplex
import DuplexSchema
import DuplexServer
import DuplexTesting
import Foundation
import Testing

/// A Duplex client on a protocol preset's route, used as an app's client uses it: it connects
/// with the protocol's subprotocol, sends, and reads messages and the close in order.
struct PresetClient {
    let socket: WebSocket
    private var events: AsyncStream<WebSocketEvent>.AsyncIterator

    /// Connects to `path` of `server`, offering `protocols`, without reconnecting.
    static func connect(_ server: RunningDuplexServer, _ path: String, protocols: [String] = []) async throws -> PresetClient {
        var configuration = WebSocketConfiguration()
        configuration.reconnection = .none
        let socket = WebSocket(request: WebSocketRequest(url: server.webSocketURL(path), protocols: protocols), configuration: configuration)
        // The stream is made before connecting: nothing is missed.
        let client = PresetClient(socket: socket, events: socket.events.makeAsyncIterator())
        try await socket.connect()
        return client
    }

    private init(socket: WebSocket, events: AsyncStream<WebSocketEvent>.AsyncIterator) {
        self.socket = socket
        self.events = events
    }

    func send(_ text: String) async throws {
        try await socket.send(.string(text))
    }

    func send(_ data: Data) async throws {
        try await socket.send(.data(data))
    }

    /// The next message; fails when the connection ends first.
    mutating func message() async throws -> WebSocketMessage {
        while let event = await events.next() {
            switch event {
            case .message(let message): return message
            case .disconnected(let code, let reason):
                throw PresetClientError("the connection ended (\(code.map { "\($0.rawValue)" } ?? "no code") \(reason ?? "")) before a message")
            default: continue
            }
        }
        throw PresetClientError("the events ended before a message")
    }

    /// The next text message.
    mutating func text() async throws -> String {
        let message = try await message()
        guard case .string(let text) = message else { throw PresetClientError("a binary message, not text: \(message)") }
        return text
    }

    /// The next `count` text messages.
    mutating func texts(_ count: Int) async throws -> [String] {
        var texts: [String] = []
        for _ in 0..<count { texts.append(try await text()) }
        return texts
    }

    /// The next binary message.
    mutating func binary() async throws -> Data {
        let message = try await message()
        guard case .data(let data) = message else { throw PresetClientError("a text message, not binary: \(message)") }
        return data
    }

    /// How the connection ended, after any messages still to come (returned too).
    mutating func end() async throws -> (code: UInt16?, reason: String?, messages: [WebSocketMessage]) {
        var messages: [WebSocketMessage] = []
        while let event = await events.next() {
            switch event {
            case .message(let message): messages.append(message)
            case .disconnected(let code, let reason): return (code?.rawValue, reason, messages)
            default: continue
            }
        }
        throw PresetClientError("the events ended before the connection did")
    }
}

struct PresetClientError: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}
