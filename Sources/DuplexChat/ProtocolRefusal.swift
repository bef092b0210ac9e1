package import DuplexHost
package import DuplexSchema
package import HTTPTypes

/// A request refused before any upgrade or stream, with the protocol's error frame
/// (`{"type":"error","v":1,"code":…,"message":…}`): a chat join that fails validation, a tick
/// stream's bad interval, a room past the limit.
package struct ProtocolRefusal: Error {
    package var status: HTTPResponse.Status
    package var error: ChatProtocolError

    /// A refusal with `status` and the protocol `error` its frame carries.
    package init(status: HTTPResponse.Status, error: ChatProtocolError) {
        self.status = status
        self.error = error
    }

    /// The error frame the refusal answers with, as JSON.
    package var frameJSON: String {
        (try? ChatServerFrame.error(ChatErrorFrame(error)).jsonString()) ?? #"{"type":"error","v":1}"#
    }

    /// The same refusal, as a stream route answers it.
    package var answer: StreamAnswer {
        .json(status, frameJSON)
    }
}
