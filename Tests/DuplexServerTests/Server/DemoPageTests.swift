import DuplexServer
import DuplexTesting
import NIOHTTP1
import Testing

@Suite("the demo page at /")
struct DemoPageTests {
    @Test("GET / serves the bundled page: HTML, no CDN, the chat subprotocol and EventSource in it")
    func page() async throws {
        try await withTimeout(.seconds(20)) {
            try await withDuplexServer { server in
                let (status, type, body) = try await TestHTTPResponse.get(port: server.port, "/") { response in
                    (response.status, response.headers.first(name: "Content-Type"), try await response.readBody())
                }
                #expect(status == 200)
                #expect(type == "text/html; charset=utf-8")
                #expect(body.hasPrefix("<!doctype html>"))
                #expect(body.contains(#"new WebSocket(chatURL(c), ["duplex.chat.v1"])"#))
                #expect(body.contains("new EventSource("))
                #expect(!body.contains("http://") && !body.contains("https://"), "no external resources: it works offline")
            }
        }
    }
}
