package import DuplexSchema

/// The permessage-deflate handshake (RFC 7692 section 7), both ends of it: the client's offer
/// and its check of the server's answer, and the server's answer to an offer. Pure string work.
package enum PerMessageDeflateNegotiation {
    /// Why the client refuses the server's answer.
    package struct Refusal: Error, Equatable {
        /// What is wrong with the answer, as a sentence's end: "names more than …".
        package var reason: String
    }

    // MARK: The client

    /// The `Sec-WebSocket-Extensions` value the client offers.
    package static func offer(_ settings: PerMessageDeflate) -> String {
        var offer = "permessage-deflate; client_max_window_bits"
        if settings.maxWindowBits < 15 { offer += "=\(settings.maxWindowBits)" }
        if let bits = settings.peerMaxWindowBits, bits < 15 { offer += "; server_max_window_bits=\(bits)" }
        if settings.noContextTakeover { offer += "; client_no_context_takeover" }
        if settings.peerNoContextTakeover { offer += "; server_no_context_takeover" }
        return offer
    }

    /// Checks the server's `Sec-WebSocket-Extensions` answer to ``offer(_:)``, and returns the
    /// agreement as the client sees it.
    /// - Throws: ``Refusal`` for an answer the offer does not allow: another extension, an
    ///   unknown or repeated parameter, a window out of range or larger than asked.
    package static func accept(_ answer: String, offered settings: PerMessageDeflate) throws(Refusal) -> DeflateAgreement {
        let extensions = answer.split(separator: ",", omittingEmptySubsequences: false)
        guard extensions.count == 1 else { throw Refusal(reason: "names more than the one extension offered") }
        let parameters: [Parameter]
        do {
            parameters = try Self.parameters(of: extensions[0])
        } catch {
            throw Refusal(reason: error.reason)
        }
        // Seen from the client: it sends with the client window, receives the server's.
        var agreement = DeflateAgreement(
            sendWindowBits: settings.maxWindowBits, sendNoContextTakeover: settings.noContextTakeover, minimumBytes: settings.minimumBytes)
        for parameter in parameters {
            switch parameter {
            case .serverNoContextTakeover:
                agreement.receiveNoContextTakeover = true
            case .clientNoContextTakeover:
                agreement.sendNoContextTakeover = true
            case .serverMaxWindowBits(let bits):
                guard let bits else { throw Refusal(reason: "has a server_max_window_bits out of 8...15") }
                if let asked = settings.peerMaxWindowBits, bits > asked {
                    throw Refusal(reason: "uses a larger server window than the \(asked) bits asked")
                }
                agreement.receiveWindowBits = bits
            case .clientMaxWindowBits(let bits):
                guard let bits else { throw Refusal(reason: "has a client_max_window_bits out of 8...15") }
                // zlib cannot compress with an 8-bit window (it uses 9): decline rather than
                // send what the server could not inflate.
                guard bits >= 9 else { throw Refusal(reason: "asks for an 8-bit client window, which zlib cannot make") }
                agreement.sendWindowBits = min(agreement.sendWindowBits, bits)
            }
        }
        if settings.peerNoContextTakeover, !agreement.receiveNoContextTakeover {
            throw Refusal(reason: "does not accept server_no_context_takeover, which was asked")
        }
        return agreement
    }

    // MARK: The server

    /// The server's answer to a client's `Sec-WebSocket-Extensions` offers (`offers`, every value
    /// of the header, each a comma-separated list): the first permessage-deflate offer that is
    /// well formed is taken (RFC 7692 section 5: a server declines an offer with an unknown,
    /// repeated or out-of-range parameter), with `settings` for the server's own side. Nil when
    /// no offer can be taken: the connection goes on uncompressed.
    package static func answer(offers: [String], settings: PerMessageDeflate) -> (answer: String, agreement: DeflateAgreement)? {
        for offer in offers.flatMap({ $0.split(separator: ",") }) {
            guard let parameters = try? Self.parameters(of: offer) else { continue }
            var requestedServerWindow: Int?
            var clientWindowOffered = false
            var clientWindow = 15
            var agreement = DeflateAgreement(
                sendWindowBits: settings.maxWindowBits,
                sendNoContextTakeover: settings.noContextTakeover,
                receiveNoContextTakeover: settings.peerNoContextTakeover,
                minimumBytes: settings.minimumBytes
            )
            var acceptable = true
            for parameter in parameters {
                switch parameter {
                case .serverNoContextTakeover: agreement.sendNoContextTakeover = true
                case .clientNoContextTakeover: agreement.receiveNoContextTakeover = true
                case .serverMaxWindowBits(let bits):
                    // The value is required (section 7.1.2.1).
                    guard let bits else { acceptable = false; break }
                    requestedServerWindow = bits
                case .clientMaxWindowBits(let bits):
                    clientWindowOffered = true
                    clientWindow = bits ?? 15
                }
            }
            guard acceptable else { continue }
            if let requestedServerWindow { agreement.sendWindowBits = min(agreement.sendWindowBits, requestedServerWindow) }
            // The server may cap the client's window only when the client offered to be capped.
            if clientWindowOffered { clientWindow = min(clientWindow, settings.peerMaxWindowBits ?? 15) }
            agreement.receiveWindowBits = clientWindow
            var answer = "permessage-deflate"
            if requestedServerWindow != nil || agreement.sendWindowBits < 15 { answer += "; server_max_window_bits=\(agreement.sendWindowBits)" }
            if agreement.sendNoContextTakeover { answer += "; server_no_context_takeover" }
            if clientWindowOffered, clientWindow < 15 { answer += "; client_max_window_bits=\(clientWindow)" }
            if agreement.receiveNoContextTakeover { answer += "; client_no_context_takeover" }
            return (answer, agreement)
        }
        return nil
    }

    // MARK: Parsing

    private enum Parameter: Equatable {
        case serverNoContextTakeover
        case clientNoContextTakeover
        /// nil: the parameter came with no value.
        case serverMaxWindowBits(Int?)
        case clientMaxWindowBits(Int?)
    }

    /// The parameters of one permessage-deflate offer or answer, each at most once, with values
    /// (quoted or not) only where allowed and windows of 8 to 15 bits.
    private static func parameters(of element: Substring) throws(Refusal) -> [Parameter] {
        var parts = element.split(separator: ";", omittingEmptySubsequences: false).map { $0.trimmed }
        guard parts.removeFirst().lowercased() == "permessage-deflate" else { throw Refusal(reason: "names an extension that was not offered") }
        var seen: Set<String> = []
        var parameters: [Parameter] = []
        for part in parts {
            let pair = part.split(separator: "=", maxSplits: 1).map { $0.trimmed }
            let name = pair.first?.lowercased() ?? ""
            var value = pair.count == 2 ? pair[1] : nil
            if let quoted = value, quoted.count >= 2, quoted.hasPrefix("\""), quoted.hasSuffix("\"") { value = String(quoted.dropFirst().dropLast()) }
            guard seen.insert(name).inserted else { throw Refusal(reason: "repeats \(name)") }
            let bits = value.flatMap { Int($0) }.flatMap { (8...15).contains($0) ? $0 : nil }
            switch name {
            case "server_no_context_takeover", "client_no_context_takeover":
                guard value == nil else { throw Refusal(reason: "gives \(name) a value") }
                parameters.append(name == "server_no_context_takeover" ? .serverNoContextTakeover : .clientNoContextTakeover)
            case "server_max_window_bits", "client_max_window_bits":
                guard value == nil || bits != nil else { throw Refusal(reason: "has a \(name) out of 8...15") }
                parameters.append(name == "server_max_window_bits" ? .serverMaxWindowBits(bits) : .clientMaxWindowBits(bits))
            default:
                throw Refusal(reason: "has the unknown parameter \(name.prefix(40).debugDescription)")
            }
        }
        return parameters
    }
}

extension Substring {
    fileprivate var trimmed: String {
        String(drop { $0 == " " || $0 == "\t" }.reversed().drop { $0 == " " || $0 == "\t" }.reversed())
    }
}
