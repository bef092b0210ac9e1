import Duplex
import DuplexHost
import DuplexSchema
public import Foundation

/// Proxy routes in a script file: the `proxy` object, and a rules file of its own.
extension ScriptFile {
    /// The rules of a proxy for `upstream` from a file of its own (`duplex intercept --rules
    /// FILE`): an object with `toUpstream` and `toClient`, lists of rules, and `refuse`, as a
    /// script's `proxy` object has them (docs/scripts.md).
    /// - Throws: ``ScriptError`` with the place in the file and the reason.
    public static func proxyRules(from data: Data, upstream: URL) throws(ScriptError) -> ProxyScript {
        let root: JSONValue
        do {
            root = try JSONDecoder().decode(JSONValue.self, from: data)
        } catch {
            throw ScriptError(path: "", Self.notJSON(data, error))
        }
        let members = try Reader(root, at: "").object(keys: ["toUpstream", "toClient", "refuse"])
        var script = ProxyScript(upstream: upstream)
        try readRules(members, into: &script)
        return script
    }

    static func proxy(_ value: Reader) throws(ScriptError) -> ProxyScript {
        let members = try value.object(keys: [
            "upstream", "toUpstream", "toClient", "refuse", "caFile", "insecure", "pins", "certFile", "keyFile", "httpVersion",
        ])
        guard let upstreamValue = members["upstream"] else {
            throw value.error(#"a proxy needs "upstream", a ws://, wss://, http:// or https:// URL"#)
        }
        let text = try upstreamValue.string()
        guard let upstream = URL(string: text) else { throw upstreamValue.error("not a URL: \(text.debugDescription)") }
        var script = ProxyScript(upstream: upstream)
        do {
            try script.validate()
        } catch {
            throw upstreamValue.error(error.reason)
        }
        try readRules(members, into: &script)
        do {
            try script.validate()
        } catch {
            throw ScriptError(path: value.at.isEmpty ? error.path : "\(value.at).\(error.path)", error.reason)
        }
        if let caFile = members["caFile"] {
            do {
                script.tlsTrust = try .certificateAuthority(pemFile: try caFile.string())
            } catch let error as ScriptError {
                throw error
            } catch {
                throw caFile.error("cannot read the CA file: \(error)")
            }
        }
        if let insecure = members["insecure"], try insecure.bool() {
            guard members["caFile"] == nil else { throw insecure.error(#""insecure" and "caFile" do not go together"#) }
            script.tlsTrust = .insecureAcceptAnyCertificate
        }
        try readIdentity(members, into: &script)
        if let version = members["httpVersion"] {
            switch try version.string() {
            case "1.1": script.httpVersion = .http1
            case "2": script.httpVersion = .http2
            case "automatic": script.httpVersion = .automatic
            case let other: throw version.error(#"must be "1.1", "2" or "automatic" (got \#(other.debugDescription))"#)
            }
        }
        return script
    }

    /// A proxy's `pins` (the upstream's public keys, as `duplex ws --pin` takes them) and its
    /// client certificate (`certFile` and `keyFile`, PEM, together).
    private static func readIdentity(_ members: [String: Reader], into script: inout ProxyScript) throws(ScriptError) {
        if let pinsValue = members["pins"] {
            let pins = try pinsValue.array().map { item throws(ScriptError) -> String in
                let pin = try item.string()
                let digest = pin.hasPrefix("sha256//") ? String(pin.dropFirst("sha256//".count)) : pin
                guard Data(base64Encoded: digest)?.count == 32 else {
                    throw item.error("a pin is the base64 SHA-256 of the upstream's public key (44 characters, sha256// in front optional)")
                }
                return digest
            }
            guard !pins.isEmpty else { throw pinsValue.error("give at least one pin, or leave out \"pins\"") }
            script.tlsTrust = script.tlsTrust.pinning(publicKeySHA256: pins)
        }
        switch (members["certFile"], members["keyFile"]) {
        case (nil, nil):
            break
        case (let certFile?, let keyFile?):
            let (chain, key) = (try certFile.string(), try keyFile.string())
            guard let certificate = try? String(contentsOfFile: chain, encoding: .utf8) else {
                throw certFile.error("cannot read the certificate file \(chain.debugDescription)")
            }
            guard let privateKey = try? String(contentsOfFile: key, encoding: .utf8) else {
                throw keyFile.error("cannot read the key file \(key.debugDescription)")
            }
            script.tlsIdentity = .pem(certificateChain: certificate, privateKey: privateKey)
        case (let certFile?, nil):
            throw certFile.error(#""certFile" goes with "keyFile", the certificate's private key"#)
        case (nil, let keyFile?):
            throw keyFile.error(#""keyFile" goes with "certFile", the client certificate"#)
        }
    }

    /// A proxy's `toUpstream`, `toClient` and `refuse`.
    private static func readRules(_ members: [String: Reader], into script: inout ProxyScript) throws(ScriptError) {
        script.toUpstream = try members["toUpstream"]?.array().map { item throws(ScriptError) in try proxyRule(item) } ?? []
        script.toClient = try members["toClient"]?.array().map { item throws(ScriptError) in try proxyRule(item) } ?? []
        script.refuse = try members["refuse"].map { value throws(ScriptError) in try refusal(value) }
    }

    private static func proxyRule(_ value: Reader) throws(ScriptError) -> ProxyRule {
        let members = try value.object(keys: ["match", "do"])
        guard let match = members["match"] else { throw value.error(#"a rule needs "match""#) }
        guard let actions = members["do"] else { throw value.error(#"a rule needs "do", a list of actions"#) }
        return ProxyRule(match: try self.match(match), do: try actions.array().map { item throws(ScriptError) in try proxyAction(item) })
    }

    /// The keys of a proxy rule's actions (docs/scripts.md's table lists each).
    package static let proxyActionKeys = [
        "delayMs", "replace", "set", "send", "sendJSON", "reply", "forward", "duplicate", "close", "drop", "fragment", "fault", "answerPings", "cut",
        "hang",
    ]

    private static func proxyAction(_ value: Reader) throws(ScriptError) -> ProxyAction {
        let members = try value.object(keys: proxyActionKeys + ["reason"])
        let named = proxyActionKeys.filter { members[$0] != nil }
        guard named.count == 1, let key = named.first, let argument = members[key] else {
            throw value.error(
                "an action has exactly one of \(proxyActionKeys.joined(separator: ", ")) (got \(named.isEmpty ? "none" : named.joined(separator: ", ")))"
            )
        }
        if let reason = members["reason"], key != "close" { throw reason.error(#""reason" goes with "close""#) }
        switch key {
        case "delayMs":
            return .delay(.milliseconds(try argument.integer(in: 0...86_400_000)))
        case "replace":
            return .replace(try argument.string())
        case "set":
            guard case .object(let fields) = argument.value, !fields.isEmpty else {
                throw argument.error("must be an object with the members to set (got \(argument.value.kind))")
            }
            return ProxyAction(step: .set(fields))
        case "send":
            return .send(try argument.string())
        case "sendJSON":
            return .send(argument.value.jsonText)
        case "reply":
            return .reply(try argument.string())
        case "forward":
            return .forward(try argument.bool())
        case "duplicate":
            guard try argument.bool() else { throw argument.error(#""duplicate" is true"#) }
            return .duplicate
        case "close":
            let (code, reason) = try closeCode(argument, reason: members["reason"])
            return .close(code: code, reason: reason)
        case "fragment":
            return .fragment(frames: try argument.integer(in: 1...1024))
        case "fault":
            return .fault(try frameFault(argument))
        case "answerPings":
            return .answerPings(try argument.bool())
        default:
            guard try argument.bool() else { throw argument.error(#""\#(key)" is true"#) }
            return key == "drop" ? .drop : key == "cut" ? .cut : .hang
        }
    }
}
