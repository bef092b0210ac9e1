import ArgumentParser
import Duplex
import DuplexSchema
import Foundation
import Logging

/// A failure the CLI reports as one line on stderr, with a documented exit status.
struct Failure: Error {
    /// The exit statuses, as `duplex --help` documents them.
    enum Status: Int32, CaseIterable {
        case failed = 1
        case timeout = 2
        case badURL = 3
        case unreachable = 4
        case tls = 5
        case refused = 6
        case connectionLost = 7
        case handshake = 8
        case proxy = 9

        var meaning: String {
            switch self {
            case .failed: "failed: an echo reply differed, or a close with an error code"
            case .timeout: "timed out waiting for a reply"
            case .badURL: "malformed URL, address, request header or method"
            case .unreachable: "host unreachable: refused, unresolvable, or no answer in time"
            case .tls: "TLS failure: handshake, or an untrusted certificate"
            case .refused: "refused: HTTP 4xx/5xx to the handshake, or a refused chat join"
            case .connectionLost: "connection lost: no close frame, ping timeout, protocol error"
            case .handshake: "bad handshake: a wrong Sec-WebSocket-Accept, an extension or subprotocol not offered, a malformed or oversized response"
            case .proxy: "proxy failure: the proxy refused the tunnel (407, 403, 502, ...) or could not be reached"
            }
        }
    }

    var status: Status
    var message: String

    init(_ status: Status, _ message: String) {
        self.status = status
        self.message = message
    }

    /// The failure for an error from the libraries.
    init(_ error: any Error) {
        switch error {
        case let failure as Failure:
            self = failure
        case let error as WebSocketError:
            self.init(Self.status(for: error.code), error.message)
        case let error as SSEError:
            self.init(Self.status(for: error.code), error.message)
        case let error as ChatProtocolError:
            self.init(.refused, "the server refused the join: \(error.code.rawValue): \(error.reason)")
        default:
            self.init(.failed, "\(error)")
        }
    }

    static func status(for code: WebSocketError.Code) -> Status {
        switch code {
        case .invalidURL, .invalidHeader: .badURL
        case .connectionFailed, .connectTimeout: .unreachable
        case .tlsFailed: .tls
        case .proxyFailed: .proxy
        case .upgradeRejected: .refused
        case .handshakeFailed, .unexpectedExtension, .unexpectedSubprotocol: .handshake
        case .protocolViolation, .connectionLost, .pingFailed, .messageTooBig: .connectionLost
        default: .failed
        }
    }

    static func status(for code: SSEError.Code) -> Status {
        switch code {
        case .invalidURL, .invalidHeader, .invalidRequest: .badURL
        case .connectionFailed: .unreachable
        case .tlsFailed: .tls
        case .proxyFailed: .proxy
        case .badStatus, .badContentType: .refused
        case .readTimeout, .eventTooLarge, .retriesExhausted: .connectionLost
        default: .failed
        }
    }

    /// The `--help` text listing the exit statuses.
    static var exitStatusHelp: String {
        "Exit status:\n  0   success\n"
            + Status.allCases.map { "  \($0.rawValue)   \($0.meaning)" }.joined(separator: "\n")
            + "\n  64  usage: a bad option or argument"
            + "\n\nSet DUPLEX_LOG_LEVEL=debug (or info, warning) to see the libraries' logs on stderr."
    }
}

/// Runs a command's body; a failure becomes one line on stderr and its exit status.
///
/// The libraries' logs go to stderr at the level `DUPLEX_LOG_LEVEL` names (default `error`).
func reportingFailures(_ body: () async throws -> Void) async throws {
    StandardStreams.ignoreBrokenPipeSignal()
    let level = ProcessInfo.processInfo.environment["DUPLEX_LOG_LEVEL"].flatMap(Logger.Level.init(rawValue:)) ?? .error
    LoggingSystem.bootstrap { label in
        var handler = StreamLogHandler.standardError(label: label)
        handler.logLevel = level
        return handler
    }
    do {
        try await body()
    } catch let error as ExitCode {
        throw error
    } catch {
        let failure = Failure(error)
        StandardStreams.err("duplex: \(UntrustedText.visible(failure.message))\n")
        throw ExitCode(failure.status.rawValue)
    }
}

/// Parses a URL argument: one of `schemes`, with a host.
/// - Parameter shown: how the error names the schemes, when not just listed.
func parseURL(_ text: String, schemes: Set<String>, shown: String? = nil) throws -> URL {
    guard let url = URL(string: text), let scheme = url.scheme?.lowercased(), let host = url.host, !host.isEmpty else {
        throw Failure(.badURL, "malformed URL \"\(text)\": expected \(schemes.sorted().map { "\($0)://HOST[:PORT]/PATH" }.joined(separator: " or "))")
    }
    guard schemes.contains(scheme) else {
        throw Failure(.badURL, "malformed URL \"\(text)\": the scheme must be \(shown ?? schemes.sorted().joined(separator: " or ")), not \(scheme)")
    }
    return url
}

/// Parses a WebSocket URL argument. Like websocat, it takes `http://` as `ws://` and `https://`
/// as `wss://`, since a WebSocket handshake is an HTTP request.
func parseWebSocketURL(_ text: String) throws -> URL {
    let url = try parseURL(text, schemes: ["ws", "wss", "http", "https"], shown: "ws or wss (http and https are taken as ws and wss)")
    guard var parts = URLComponents(url: url, resolvingAgainstBaseURL: false) else { return url }
    switch parts.scheme?.lowercased() {
    case "http": parts.scheme = "ws"
    case "https": parts.scheme = "wss"
    default: return url
    }
    return parts.url ?? url
}

/// Parses `HOST:PORT` (`[::1]:PORT` for IPv6).
func parseAddress(_ text: String, option: String) throws -> (host: String, port: Int) {
    var host = Substring(text)
    guard let colon = host.lastIndex(of: ":") else {
        throw Failure(.badURL, "\(option) \"\(text)\" is not HOST:PORT")
    }
    let portText = host[host.index(after: colon)...]
    host = host[..<colon]
    if host.hasPrefix("["), host.hasSuffix("]") { host = host.dropFirst().dropLast() }
    guard !host.isEmpty, let port = Int(portText), (0...65535).contains(port) else {
        throw Failure(.badURL, "\(option) \"\(text)\" is not HOST:PORT with a port from 0 to 65535")
    }
    return (String(host), port)
}

/// Writes to stderr.
func printError(_ line: String) {
    StandardStreams.err(line + "\n")
}

/// Writes to stdout, unbuffered.
func printOut(_ line: String) {
    StandardStreams.out(line + "\n")
}
