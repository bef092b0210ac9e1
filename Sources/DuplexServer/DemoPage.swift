import DuplexHost
import Foundation
import HTTPTypes
import Hummingbird
import NIOCore

/// The demo page at `/`: plain HTML and JavaScript from the package's resources (no build step,
/// no CDN, works offline). Chat in a room over the `duplex.chat.v1` subprotocol, with reconnects
/// that resume with `since` and `epoch`, live ticks over `EventSource`, and a status indicator
/// for each. A live view charts the server's metrics (`GET /metrics/live`): connections by route,
/// messages per second, faults; when the server runs with `--chaos`, it has a control for each
/// fault, scoped by route or room.
enum DemoPage {
    /// The page, read once; nil when the resource bundle is missing (a binary copied without it).
    static let html: ByteBuffer? = {
        guard let url = Bundle.module.url(forResource: "index", withExtension: "html"),
            let data = try? Data(contentsOf: url)
        else { return nil }
        return ByteBuffer(bytes: data)
    }()

    /// `GET /`: the page, or 500 saying the bundle is missing.
    static func response() -> Response {
        guard let html else {
            return Response.json(
                status: .internalServerError,
                #"{"error":"the demo page is not bundled: copy duplex_DuplexServer.resources next to the duplex-server binary"}"#
            )
        }
        var headers = HTTPFields()
        headers[.contentType] = "text/html; charset=utf-8"
        headers[.cacheControl] = "no-cache"
        return Response(status: .ok, headers: headers, body: .init(byteBuffer: html))
    }
}
