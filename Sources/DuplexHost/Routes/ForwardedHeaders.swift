package import HTTPTypes
/// The header fields a route that forwards a request (a proxy route, the recorder) passes to
/// the upstream: all but the ones that belong to the hop between the client and this server.
package enum ForwardedHeaders {
    /// Fields of one hop, lowercased: not forwarded. `Host` is the upstream's; the WebSocket
    /// handshake's own fields are made anew for the upstream (the offered subprotocols go with
    /// its request); `Last-Event-ID` is passed by the SSE client that asks the upstream.
    package static let hopByHop: Set<String> = [
        "host", "connection", "upgrade", "content-length", "transfer-encoding", "keep-alive", "te", "trailer",
        "proxy-connection", "proxy-authorization", "proxy-authenticate",
        "sec-websocket-key", "sec-websocket-version", "sec-websocket-extensions", "sec-websocket-protocol",
        "last-event-id", "accept-encoding",
    ]

    /// The fields forwarded upstream, a repeated name's values joined with `, `.
    package static func forwarded(_ headers: [(name: String, value: String)]) -> [String: String] {
        var forwarded: [String: String] = [:]
        for (name, value) in headers where !hopByHop.contains(name.lowercased()) {
            forwarded[name] = forwarded[name].map { $0 + ", " + value } ?? value
        }
        return forwarded
    }

    /// Fields of an upstream's answer that the server writing it to the client sets itself.
    static let written: Set<String> = ["content-length", "transfer-encoding", "content-encoding", "date", "server"]

    /// The fields of an upstream's refusal passed on to the client: all, in order, but the hop's
    /// own and those the server writes itself.
    package static func relayed(_ headers: [(name: String, value: String)]) -> HTTPFields {
        var fields = HTTPFields()
        for (name, value) in headers where !hopByHop.contains(name.lowercased()) && !written.contains(name.lowercased()) {
            if let field = HTTPField.Name(name) { fields.append(HTTPField(name: field, value: value)) }
        }
        return fields
    }
}
