import Duplex
import Foundation

struct Prompt: Encodable { var model: String; var prompt: String; var stream = true }
struct Chunk: Decodable, Sendable { var text: String }

let apiKey = ProcessInfo.processInfo.environment["API_KEY"] ?? ""
let request = try SSERequest(
    url: URL(string: "https://api.example.com/v1/completions")!,
    json: Prompt(model: "small", prompt: "Say hi"),  // any Encodable, sent as JSON
    additionalHeaders: ["Authorization": "Bearer \(apiKey)"],
    terminalEvent: .done  // data: [DONE]
)
let sse = ServerSentEventManager(request: request)
let chunks = sse.events(decoding: Chunk.self)  // ask before connecting: it starts now
do {
    try await sse.connect()
    for try await chunk in chunks { print(chunk.text, terminator: "") }
} catch let error as SSEError where error.code == .badStatus {
    // 429, 401, 400...: the API's own error, and when to try again
    print(error.status ?? 0, error.response?.retryAfter ?? "-", error.response?.text ?? "")
}
