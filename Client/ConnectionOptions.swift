import ArgumentParser
import Duplex
import DuplexSchema
import Foundation

/// The options every client subcommand shares: headers, TLS trust and the connect timeout.
struct ConnectionOptions: ParsableArguments {
    @Option(name: [.customShort("H"), .customLong("header")], help: ArgumentHelp("An extra request header; repeatable.", valueName: "Name: value"))
    var headers: [String] = []

    @Flag(help: "Accept any TLS certificate, unverified (for testing only).")
    var insecure = false

    @Option(help: ArgumentHelp("Trust the CA certificate(s) in this PEM file for wss:// and https://.", valueName: "file"))
    var ca: String?

    @Option(
        name: .customLong("pinnedpubkey"),
        help: ArgumentHelp(
            "Also require the server's public key to be one of these (curl's spelling: sha256//BASE64[;sha256//BASE64...]); wss:// and https://.",
            valueName: "pins"))
    var pinnedPublicKey: String?

    @Option(
        help: ArgumentHelp(
            "Connect through this proxy: http://[user:password@]host[:port] (a CONNECT tunnel) or socks5://host[:port]. Default: the environment's https_proxy, http_proxy, all_proxy and no_proxy, as curl reads them.",
            valueName: "url"))
    var proxy: String?

    @Option(
        help: ArgumentHelp(
            "Present the client certificate (and any intermediates) in this PEM file when the server asks for one (mutual TLS); needs --key.",
            valueName: "file"))
    var cert: String?

    @Option(help: ArgumentHelp("The private key of --cert, PEM.", valueName: "file"))
    var key: String?

    @Option(help: ArgumentHelp("Seconds to wait for the connection and its handshake.", valueName: "seconds"))
    var connectTimeout: Double = 10

    @Option(
        help: ArgumentHelp(
            "HTTP/1.1 (1.1), HTTP/2 only (2; for WebSockets RFC 8441; wss:// and https:// only), or HTTP/2 when the server offers it (auto). Default: 1.1 for WebSockets, auto for SSE.",
            valueName: "version"))
    var http: String?

    /// `--http` as the library spells it; nil when not given (or not valid, which validate() refuses).
    var httpVersion: HTTPVersionPreference? {
        switch http {
        case "1.1": .http1
        case "2": .http2
        case "auto": .automatic
        default: nil
        }
    }

    func validate() throws {
        guard connectTimeout > 0, connectTimeout <= 86_400 else { throw ValidationError("--connect-timeout must be from 0 to 86400 seconds") }
        guard !(insecure && ca != nil) else { throw ValidationError("--insecure and --ca exclude each other") }
        guard http == nil || httpVersion != nil else { throw ValidationError("--http must be 1.1, 2 or auto") }
        guard (cert == nil) == (key == nil) else { throw ValidationError("--cert and --key go together") }
        if let proxy {
            do {
                _ = try Proxy(url: proxy)
            } catch let error as WebSocketError {
                throw ValidationError("--proxy: \(error.message)")
            }
        }
        guard !(insecure && pinnedPublicKey != nil) else {
            throw ValidationError("--pinnedpubkey adds to verification, which --insecure turns off: use --ca with it")
        }
        _ = try headerFields()
    }

    /// `-H` values as a dictionary.
    func headerFields() throws -> [String: String] {
        var fields: [String: String] = [:]
        for header in headers {
            guard let colon = header.firstIndex(of: ":") else {
                throw ValidationError("-H \"\(header)\" is not \"Name: value\"")
            }
            let name = header[..<colon].trimmingCharacters(in: .whitespaces)
            let value = header[header.index(after: colon)...].trimmingCharacters(in: .whitespaces)
            guard !name.isEmpty, name.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || "!#$%&'*+-.^_`|~".contains($0)) }) else {
                throw ValidationError("-H \"\(header)\": \"\(name)\" is not a valid header name")
            }
            guard !value.contains(where: { $0 == "\r" || $0 == "\n" }) else {
                throw ValidationError("-H \"\(header)\": a value must not contain line breaks")
            }
            fields[name] = value
        }
        return fields
    }

    /// The TLS trust the options ask for.
    func tlsTrust() throws -> TLSTrust {
        let pins = pinnedPublicKey.map { [$0] } ?? []
        if insecure { return .insecureAcceptAnyCertificate }
        if let ca {
            do {
                return try TLSTrust.certificateAuthority(pemFile: ca).pinning(publicKeySHA256: pins)
            } catch {
                throw Failure(.tls, "cannot read the CA file \(ca): \(error)")
            }
        }
        return TLSTrust.systemRoots.pinning(publicKeySHA256: pins)
    }

    /// `configuration` with the options' TLS trust, client certificate, proxy and HTTP version.
    func secured(_ configuration: WebSocketConfiguration) throws -> WebSocketConfiguration {
        var configuration = configuration
        configuration.httpVersion = httpVersion ?? configuration.httpVersion
        configuration.tlsTrust = try tlsTrust()
        configuration.tlsIdentity = try tlsIdentity()
        configuration.proxy = try proxySetting()
        return configuration
    }

    /// `configuration` with the options' TLS trust, client certificate, proxy and HTTP version.
    func secured(_ configuration: SSEConfiguration) throws -> SSEConfiguration {
        var configuration = configuration
        configuration.httpVersion = httpVersion ?? configuration.httpVersion
        configuration.tlsTrust = try tlsTrust()
        configuration.tlsIdentity = try tlsIdentity()
        configuration.proxy = try proxySetting()
        return configuration
    }

    /// `--proxy`, else the environment's proxy variables.
    func proxySetting() throws -> Proxy {
        guard let proxy else { return .environment }
        do {
            return try Proxy(url: proxy)
        } catch let error as WebSocketError {
            throw Failure(.badURL, "--proxy: \(error.message)")
        }
    }

    /// The client certificate the options name, if any.
    func tlsIdentity() throws -> TLSIdentity? {
        guard let cert, let key else { return nil }
        do {
            return try .pemFiles(certificateChain: cert, privateKey: key)
        } catch {
            throw Failure(.tls, "cannot read the client certificate \(cert) or its key \(key): \(error.localizedDescription)")
        }
    }

    var connectDuration: Duration { .milliseconds(Int64(connectTimeout * 1000)) }
}
