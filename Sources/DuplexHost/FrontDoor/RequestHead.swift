import Foundation

/// A request head as ``ConnectionGuard`` reads it: the request line, the header fields, and
/// what they say about framing and a WebSocket upgrade.
struct RequestHead {
    /// The head's bytes, as received (forwarded unchanged to the HTTP decoder).
    let bytes: [UInt8]
    private(set) var method = ""
    private(set) var target = ""
    private(set) var version = ""
    /// Whether the request line has a method, a target and an HTTP version.
    private(set) var isWellFormed = false
    /// The header fields, names lowercased, in order.
    private(set) var fields: [(name: String, value: String)] = []

    init(bytes: [UInt8]) {
        self.bytes = bytes
        var lines = bytes.split(separator: 0x0A, omittingEmptySubsequences: false).map { line -> Substring in
            let text = String(decoding: line.last == 0x0D ? line.dropLast() : line[...], as: UTF8.self)
            return Substring(text)
        }
        // Skip blank lines before the request line (RFC 9112 section 2.2).
        while let first = lines.first, first.isEmpty { lines.removeFirst() }
        guard let requestLine = lines.first else { return }
        let parts = requestLine.split(separator: " ", omittingEmptySubsequences: true)
        if parts.count == 3, parts[2].hasPrefix("HTTP/") {
            method = String(parts[0])
            target = String(parts[1])
            version = String(parts[2])
            isWellFormed = true
        }
        for line in lines.dropFirst() where !line.isEmpty {
            guard let colon = line.firstIndex(of: ":") else { continue }
            fields.append(
                (
                    line[..<colon].trimmingCharacters(in: .whitespaces).lowercased(),
                    line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
                ))
        }
    }

    /// The version as the answer names it: the request line's when it looks like one
    /// (`HTTP/2.0`), else a description (it is the peer's text).
    var versionShown: String {
        let shaped = version.count == 8 && version.hasPrefix("HTTP/") && version.dropFirst(5).allSatisfy { $0.isASCII && ($0.isNumber || $0 == ".") }
        return shaped ? version : "this HTTP version"
    }

    /// What the HTTP decoder gets: the head as received, but a request to upgrade to `h2c`
    /// (HTTP/2 over cleartext, RFC 7540 section 3.2, which RFC 9113 dropped) loses its `Upgrade`
    /// and `HTTP2-Settings` fields, and its `Connection` field the tokens naming them, and is
    /// served as HTTP/1.1, as the RFC lets a server do.
    var forwardedBytes: [UInt8] {
        guard !asksForWebSocket, tokens("upgrade").contains("h2c") else { return bytes }
        var kept: [UInt8] = []
        for line in bytes.split(separator: 0x0A, omittingEmptySubsequences: false).dropLast() {
            let name = String(decoding: line.prefix { $0 != UInt8(ascii: ":") }, as: UTF8.self).trimmingCharacters(in: .whitespaces).lowercased()
            switch name {
            case "upgrade", "http2-settings":
                continue
            case "connection":
                let value = String(decoding: line.drop { $0 != UInt8(ascii: ":") }.dropFirst(), as: UTF8.self)
                let others = value.split(separator: ",").map { $0.trimmingCharacters(in: .whitespacesAndNewlines) }
                    .filter { !["upgrade", "http2-settings"].contains($0.lowercased()) }
                if others.isEmpty { continue }
                kept += Array("Connection: \(others.joined(separator: ", "))\r\n".utf8)
            default:
                kept += line
                kept.append(0x0A)
            }
        }
        return kept
    }

    /// The target's path, without its query.
    var path: String {
        String(target.prefix { $0 != "?" })
    }

    /// Every value of a field, in order.
    func values(_ name: String) -> [String] {
        fields.filter { $0.name == name }.map(\.value)
    }

    /// The comma-separated tokens of a field's values, lowercased.
    func tokens(_ name: String) -> [String] {
        values(name).flatMap { $0.split(separator: ",") }.map { $0.trimmingCharacters(in: .whitespaces).lowercased() }
    }

    /// Whether the request asks to upgrade to WebSocket (`Upgrade: websocket`).
    var asksForWebSocket: Bool {
        tokens("upgrade").contains("websocket")
    }

    /// Whether the body is chunked, so that its length is not known from the head.
    var isChunked: Bool {
        !values("transfer-encoding").isEmpty
    }

    /// The body's length from `Content-Length`; 0 when absent or not a plain number (the HTTP
    /// decoder then rejects the request).
    var contentLength: Int {
        guard let text = values("content-length").first, text.utf8.allSatisfy({ (0x30...0x39).contains($0) }), text.utf8.count <= 18 else { return 0 }
        return Int(text) ?? 0
    }

    /// Why a WebSocket upgrade request breaks RFC 6455 section 4.1, or nil when it does not.
    var webSocketHandshakeFailure: ConnectionGuard.Failure? {
        func bad(_ message: String) -> ConnectionGuard.Failure {
            ConnectionGuard.Failure(status: 400, reason: "Bad Request", message: message, headers: [("Sec-WebSocket-Version", "13")])
        }
        guard method == "GET" else {
            // The method is the peer's: only its letters go into the JSON answer.
            return bad("a WebSocket handshake must be a GET request, not \(String(method.filter { $0.isASCII && $0.isLetter }.prefix(16)))")
        }
        guard version == "HTTP/1.1" else { return bad("a WebSocket handshake must be HTTP/1.1") }
        guard tokens("connection").contains("upgrade") else { return bad("a WebSocket handshake must send Connection: Upgrade") }
        let versions = tokens("sec-websocket-version")
        guard versions == ["13"] else {
            return ConnectionGuard.Failure(
                status: 426,
                reason: "Upgrade Required",
                message: versions.isEmpty
                    ? "Sec-WebSocket-Version is missing; this server speaks version 13" : "this server speaks WebSocket version 13 only",
                headers: [("Sec-WebSocket-Version", "13")]
            )
        }
        let keys = values("sec-websocket-key")
        guard keys.count == 1, let key = keys.first, Data(base64Encoded: key)?.count == 16 else {
            return bad(keys.isEmpty ? "Sec-WebSocket-Key is missing" : "Sec-WebSocket-Key must be one base64 value of 16 bytes")
        }
        return nil
    }
}
