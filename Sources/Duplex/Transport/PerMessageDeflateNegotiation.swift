import DuplexSchema

/// The client's side of the permessage-deflate handshake (RFC 7692 section 7): the offer it
/// sends, and the check of the server's answer. Pure string work, unit-tested on its own.
struct PerMessageDeflateNegotiation: Equatable {
    /// What both sides agreed.
    struct Agreement: Equatable {
        /// The window the client compresses with.
        var clientWindowBits: Int
        /// Whether the client starts every message afresh.
        var clientNoContextTakeover: Bool
        /// Whether the server starts every message afresh (the client's inflater may then too).
        var serverNoContextTakeover: Bool
        /// Messages smaller than this are sent uncompressed.
        var minimumBytes: Int
    }

    /// The `Sec-WebSocket-Extensions` value the client offers.
    static func offer(_ settings: PerMessageDeflate) -> String {
        var offer = "permessage-deflate; client_max_window_bits"
        if settings.maxWindowBits < 15 { offer += "=\(settings.maxWindowBits)" }
        if let bits = settings.peerMaxWindowBits, bits < 15 { offer += "; server_max_window_bits=\(bits)" }
        if settings.noContextTakeover { offer += "; client_no_context_takeover" }
        if settings.peerNoContextTakeover { offer += "; server_no_context_takeover" }
        return offer
    }

    /// Checks the server's `Sec-WebSocket-Extensions` answer to ``offer(_:)``.
    /// - Throws: ``WebSocketError`` (``WebSocketError/Code/unexpectedExtension``) for an answer
    ///   the offer does not allow: another extension, an unknown or repeated parameter, a window
    ///   out of range or larger than asked.
    static func accept(_ answer: String, offered settings: PerMessageDeflate) throws(WebSocketError) -> Agreement {
        func refuse(_ why: String) -> WebSocketError {
            WebSocketError(.unexpectedExtension, "the server's permessage-deflate answer \(answer.prefix(100).debugDescription) \(why)")
        }
        let extensions = answer.split(separator: ",", omittingEmptySubsequences: false)
        guard extensions.count == 1 else { throw refuse("names more than the one extension offered") }
        var parts = extensions[0].split(separator: ";", omittingEmptySubsequences: false).map { $0.trimmed }
        guard parts.removeFirst().lowercased() == "permessage-deflate" else { throw refuse("names an extension that was not offered") }
        var agreement = Agreement(
            clientWindowBits: settings.maxWindowBits,
            clientNoContextTakeover: settings.noContextTakeover,
            serverNoContextTakeover: false,
            minimumBytes: settings.minimumBytes
        )
        var seen: Set<String> = []
        for part in parts {
            let pair = part.split(separator: "=", maxSplits: 1).map { $0.trimmed }
            let name = pair[0].lowercased()
            var value = pair.count == 2 ? pair[1] : nil
            if let quoted = value, quoted.count >= 2, quoted.hasPrefix("\""), quoted.hasSuffix("\"") { value = String(quoted.dropFirst().dropLast()) }
            guard seen.insert(name).inserted else { throw refuse("repeats \(name)") }
            switch name {
            case "server_no_context_takeover", "client_no_context_takeover":
                guard value == nil else { throw refuse("gives \(name) a value") }
                if name == "server_no_context_takeover" { agreement.serverNoContextTakeover = true } else { agreement.clientNoContextTakeover = true }
            case "server_max_window_bits":
                guard let bits = value.flatMap({ Int($0) }), (8...15).contains(bits) else { throw refuse("has a server_max_window_bits out of 8...15") }
                if let asked = settings.peerMaxWindowBits, bits > asked { throw refuse("uses a larger server window than the \(asked) bits asked") }
            case "client_max_window_bits":
                guard let bits = value.flatMap({ Int($0) }), (8...15).contains(bits) else { throw refuse("has a client_max_window_bits out of 8...15") }
                // zlib cannot compress with an 8-bit window (it uses 9): decline rather than
                // send what the server could not inflate.
                guard bits >= 9 else { throw refuse("asks for an 8-bit client window, which zlib cannot make") }
                agreement.clientWindowBits = min(agreement.clientWindowBits, bits)
            default:
                throw refuse("has the unknown parameter \(name.prefix(40).debugDescription)")
            }
        }
        if settings.peerNoContextTakeover, !agreement.serverNoContextTakeover {
            throw refuse("does not accept server_no_context_takeover, which was asked")
        }
        return agreement
    }
}

extension Substring {
    fileprivate var trimmed: String {
        String(drop { $0 == " " || $0 == "\t" }.reversed().drop { $0 == " " || $0 == "\t" }.reversed())
    }
}
