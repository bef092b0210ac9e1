public import Foundation

/// A typed JSON channel over a WebSocket: send `Sending` values, receive `Receiving` values.
///
/// ```swift
/// let channel = WebSocketCodableChannel<ChatClientFrame, ChatServerFrame>(socket: socket)
/// try await channel.connect()
/// try await channel.sendMessage(.say(ChatSay(clientMessageID: "1", text: "hi")))
/// for try await frame in channel.receive() { print(frame) }
/// ```
///
/// A frame that does not decode as `Receiving` is reported, never skipped silently: ``receive()``
/// throws ``WebSocketError`` with code ``WebSocketError/Code/decodingFailed`` (which ends that
/// stream), and ``receiveResults()`` yields it as a failure and goes on.
public final class WebSocketCodableChannel<Sending: Encodable & Sendable, Receiving: Decodable & Sendable>: Sendable {
    /// The socket underneath.
    public let socket: any WebSocketProtocol
    private let makeEncoder: @Sendable () -> JSONEncoder
    private let makeDecoder: @Sendable () -> JSONDecoder

    /// Creates a channel over `socket`, with encoder and decoder factories (each call gets its own).
    public init(
        socket: any WebSocketProtocol,
        encoder: @escaping @Sendable () -> JSONEncoder = { JSONEncoder() },
        decoder: @escaping @Sendable () -> JSONDecoder = { JSONDecoder() }
    ) {
        self.socket = socket
        self.makeEncoder = encoder
        self.makeDecoder = decoder
    }

    /// Connects the socket.
    public func connect() async throws {
        try await socket.connect()
    }

    /// Disconnects the socket with 1000.
    public func disconnect() async {
        await socket.disconnect()
    }

    /// Encodes `message` as JSON and sends it as a text message.
    public func sendMessage(_ message: Sending) async throws {
        try await socket.send(try .json(message, encoder: makeEncoder()))
    }

    /// The messages from now on, decoded. It throws at the first message that does not decode,
    /// and finishes when the socket terminates. Pulled, so it is as lossless as
    /// ``WebSocket/messages``: a slow reader holds the socket back, nothing is buffered here.
    public func receive() -> AsyncThrowingStream<Receiving, any Error> {
        let results = MessageIterator(socket.messages.makeAsyncIterator(), decoder: makeDecoder())
        return AsyncThrowingStream {
            try await results.next()?.get()
        }
    }

    /// The messages from now on, each decoded or with the error that stopped it.
    public func receiveResults() -> AsyncStream<Result<Receiving, WebSocketError>> {
        let results = MessageIterator(socket.messages.makeAsyncIterator(), decoder: makeDecoder())
        return AsyncStream {
            await results.next()
        }
    }

    /// One reader's position in the socket's messages, decoding as it goes. Only the stream that
    /// owns it calls `next()`, one call at a time.
    private final class MessageIterator: @unchecked Sendable {
        private var iterator: AsyncStream<WebSocketMessage>.Iterator
        private let decoder: JSONDecoder

        init(_ iterator: AsyncStream<WebSocketMessage>.Iterator, decoder: JSONDecoder) {
            self.iterator = iterator
            self.decoder = decoder
        }

        func next() async -> Result<Receiving, WebSocketError>? {
            guard let message = await iterator.next() else { return nil }
            do {
                return .success(try message.decode(Receiving.self, decoder: decoder))
            } catch {
                let preview = String(decoding: message.data.prefix(80), as: UTF8.self)
                return .failure(WebSocketError(.decodingFailed, "a message did not decode as \(Receiving.self): \(error) (message: \(preview))"))
            }
        }
    }
}
