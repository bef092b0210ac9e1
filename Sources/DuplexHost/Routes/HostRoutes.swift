package import HTTPTypes
package import Hummingbird
import NIOCore

extension Response {
    /// A JSON answer: `body` with `Content-Type: application/json; charset=utf-8`.
    package static func json(status: HTTPResponse.Status, _ body: String) -> Response {
        var headers = HTTPFields()
        headers[.contentType] = "application/json; charset=utf-8"
        return Response(status: status, headers: headers, body: .init(byteBuffer: ByteBuffer(string: body)))
    }
}

extension RouteTable.Route {
    /// Where ``ConnectionGuard`` sends a refused request that follows others on a keep-alive
    /// connection, so that its answer comes after theirs.
    package static let refusedPath = "/.duplex-refused"

    /// The route that answers a refused request ``ConnectionGuard`` queued behind others: its
    /// status, with a JSON `error` saying why, and `Connection: close`.
    package static let refused = RouteTable.Route.get("\(refusedPath)/:status") { _, context in
        let status = context.parameters.get("status").flatMap { Int($0) } ?? 400
        let known: [Int: String] = [
            408: "the request head did not arrive within the request head timeout",
            414: "the request line is too long",
            431: "the request head is too large or has too many fields",
        ]
        var response = Response.json(
            status: .init(code: (400..<600).contains(status) ? status : 400), #"{"error":"\#(known[status] ?? "the request was refused")"}"#)
        response.headers[.connection] = "close"
        return response
    }
}
