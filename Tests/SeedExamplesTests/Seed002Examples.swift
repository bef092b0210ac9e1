// Seed 002 (a Codable WebSocket service over URLSessionWebSocketTask). Its examples are
// application code on Foundation's task; what carries over to Duplex is the service's shape.
// The seed's protocol is declared here verbatim, and Duplex's `WebSocketCodableChannel`
// conforms to it with no code: a service written against the seed's protocol can use Duplex's
// channel. `WebSocketProtocol` and `MockWebSocket` play the role of the seed's session factory
// protocol (test without sockets), and `onPingFailed` is the seed's ping-failed callback.
import Duplex
import DuplexTesting
import Foundation
import Testing

internal protocol WebSocketCodableServiceProtocol: Sendable {
    associatedtype Receiving: Decodable & Sendable
    associatedtype Sending: Encodable & Sendable

    func connect() async throws
    func disconnect() async
    func sendMessage(_ message: Sending) async throws
    func receive() -> AsyncThrowingStream<Receiving, Error>
}

extension WebSocketCodableChannel: WebSocketCodableServiceProtocol {}

enum Seed002 {
    struct Note: Codable, Sendable, Equatable {
        let text: String
    }

    /// Code written against the seed's protocol, unchanged whatever implements it.
    static func roundTrip<Service: WebSocketCodableServiceProtocol>(_ service: Service, _ message: Service.Sending) async throws -> Service.Receiving? {
        try await service.connect()
        let received = service.receive()
        try await service.sendMessage(message)
        for try await value in received { return value }
        return nil
    }
}

@Suite("Seed 002: the Codable service's shape")
struct Seed002Tests {
    @Test("WebSocketCodableChannel serves code written against the seed's protocol, over /echo")
    func codableService() async throws {
        try await withDuplexServer { server in
            try await withTimeout(.seconds(20)) {
                let socket = WebSocket(url: server.webSocketURL("/echo"), configuration: .init(ping: PingConfig(pingInterval: .seconds(3), maxPingFailures: 1)))
                socket.onPingFailed = { error in print("ping failed: \(error)") }
                let service = WebSocketCodableChannel<Seed002.Note, Seed002.Note>(socket: socket)
                let echoed = try await Seed002.roundTrip(service, Seed002.Note(text: "hi"))
                #expect(echoed == Seed002.Note(text: "hi"))
                await service.disconnect()
                #expect(socket.state == .disconnected)
            }
        }
    }
}
