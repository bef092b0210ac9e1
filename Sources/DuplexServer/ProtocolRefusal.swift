import DuplexHost
import DuplexSchema
import HTTPTypes
import Hummingbird

/// A request refused before any upgrade or stream, with the protocol's error frame
/// (`{"type":"error","v":1,"code":…,"message":…}`): a chat join that fails validation, a tick
/// stream's bad interval, a room past the limit.
struct ProtocolRefusal: Error {
    var status: HTTPResponse.Status
    var error: ChatProtocolError

    var frameJSON: String {
        (try? ChatServerFrame.error(ChatErrorFrame(error)).jsonString()) ?? #"{"type":"error","v":1}"#
    }

    var response: Response {
        Response.json(status: status, frameJSON)
    }

    /// The same refusal, as a stream route answers it.
    var answer: StreamAnswer {
        .json(status, frameJSON)
    }
}
