public import Foundation

/// Seed 001's entry point, kept so its code compiles: `URLSessionWebSocketTransport.connect(to:)`
/// returns a ``WebSocket`` that is already connecting.
///
/// Duplex's sockets run on SwiftNIO everywhere (Foundation's WebSocket task does not work on
/// Linux); write `WebSocket(request:configuration:)` and `connect()` instead.
public enum URLSessionWebSocketTransport {
    /// A socket for `url` that starts connecting at once; a failure shows in its `events` as
    /// ``WebSocketEvent/error(_:)``, and its `state` as ``WebSocketState/disconnected(_:)``.
    @available(*, deprecated, message: "use WebSocket(request: WebSocketRequest(url:protocols:additionalHeaders:)), then connect()")
    public static func connect(to url: URL, headers: [String: String] = [:], protocols: [String] = []) -> WebSocket {
        start(url: url, headers: headers, protocols: protocols, settings: WebSocketConfiguration())
    }

    #if canImport(Darwin)
    /// A socket for `url` that starts connecting at once, with `timeoutIntervalForRequest` (as
    /// the connect timeout) and `httpAdditionalHeaders` (under `headers`) from `configuration`.
    /// Apple platforms only: on Linux, `URLSessionConfiguration` lives in FoundationNetworking,
    /// which Duplex does not link.
    @available(*, deprecated, message: "use WebSocket(request:configuration:) with WebSocketConfiguration(connectTimeout:), then connect()")
    public static func connect(
        to url: URL,
        headers: [String: String] = [:],
        protocols: [String] = [],
        configuration: URLSessionConfiguration
    ) -> WebSocket {
        var allHeaders: [String: String] = [:]
        for (name, value) in configuration.httpAdditionalHeaders ?? [:] {
            if let name = name as? String { allHeaders[name] = "\(value)" }
        }
        allHeaders.merge(headers) { _, new in new }
        var settings = WebSocketConfiguration()
        if configuration.timeoutIntervalForRequest > 0 {
            settings.connectTimeout = DelayArithmetic.duration(seconds: configuration.timeoutIntervalForRequest)
        }
        return start(url: url, headers: allHeaders, protocols: protocols, settings: settings)
    }
    #endif

    private static func start(url: URL, headers: [String: String], protocols: [String], settings: WebSocketConfiguration) -> WebSocket {
        let socket = WebSocket(
            request: WebSocketRequest(url: url, protocols: protocols, additionalHeaders: headers),
            configuration: settings
        )
        // Seed 000's API returns a socket that is already connecting: ends when the attempt does.
        Task { [weak socket] in try? await socket?.connect() }
        return socket
    }
}
