import Duplex
import Foundation

let sse = ServerSentEventManager(
    url: URL(string: "http://127.0.0.1:8080/events")!,
    retryPolicy: RetryPolicy(enabled: true, maxAttempts: nil, initialDelay: 1, maxDelay: 60, backoffMultiplier: 2)
)
let events = sse.events
try await sse.connect()
for await event in events {
    print(event.id ?? "-", event.event ?? "message", event.data, event.retry ?? 0)
}
await sse.disconnect()   // event and state streams stay open; connect() resumes with Last-Event-ID
await sse.terminate()    // ends every stream, for good
