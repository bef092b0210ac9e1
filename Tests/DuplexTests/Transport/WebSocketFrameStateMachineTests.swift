import DuplexSchema
import Foundation
import NIOCore
import NIOWebSocket
import Testing

@testable import Duplex

/// The frame-level protocol, with no I/O.
@Suite("WebSocketFrameStateMachine")
struct WebSocketFrameStateMachineTests {
    func frame(_ opcode: WebSocketOpcode, _ bytes: [UInt8], fin: Bool = true, masked: Bool = false, rsv1: Bool = false) -> WebSocketFrame {
        WebSocketFrame(fin: fin, rsv1: rsv1, opcode: opcode, maskKey: masked ? .random() : nil, data: ByteBuffer(bytes: bytes))
    }

    func text(_ string: String, fin: Bool = true) -> WebSocketFrame { frame(.text, Array(string.utf8), fin: fin) }

    func failureCode(_ action: WebSocketFrameStateMachine.Action) -> WebSocketCloseCode? {
        if case .failConnection(let code, _, _, _) = action { return code }
        return nil
    }

    @Test("text and binary messages are delivered")
    func deliversMessages() {
        var machine = WebSocketFrameStateMachine(maxMessageBytes: 100)
        #expect(machine.received(text("héllo")) == .deliver(.string("héllo")))
        #expect(machine.received(frame(.binary, [0, 1, 255])) == .deliver(.data(Data([0, 1, 255]))))
    }

    @Test("messages the server sent before answering our close are still delivered")
    func deliversAfterCloseSent() {
        var machine = WebSocketFrameStateMachine(maxMessageBytes: 100)
        #expect(machine.close(code: .normalClosure, reason: "") == .sendClose(.normalClosure, reason: ""))
        #expect(machine.received(text("in flight")) == .deliver(.string("in flight")))
        #expect(machine.received(frame(.binary, [1], fin: false)) == .none)
        #expect(machine.received(frame(.continuation, [2])) == .deliver(.data(Data([1, 2]))))
    }

    @Test("fragments are reassembled, with control frames allowed between them")
    func reassembly() {
        var machine = WebSocketFrameStateMachine(maxMessageBytes: 100)
        #expect(machine.received(text("hel", fin: false)) == .none)
        #expect(machine.received(frame(.ping, [7])) == .sendPong(ByteBuffer(bytes: [7])))
        #expect(machine.received(frame(.continuation, Array("l".utf8), fin: false)) == .none)
        #expect(machine.received(frame(.continuation, Array("o".utf8))) == .deliver(.string("hello")))
    }

    @Test("a UTF-8 sequence split across fragments is valid; invalid UTF-8 fails with 1007")
    func utf8() {
        var machine = WebSocketFrameStateMachine(maxMessageBytes: 100)
        let bytes = Array("é".utf8)
        #expect(machine.received(frame(.text, [bytes[0]], fin: false)) == .none)
        #expect(machine.received(frame(.continuation, [bytes[1]])) == .deliver(.string("é")))
        #expect(failureCode(machine.received(frame(.text, [0xC3, 0x28]))) == .invalidFramePayloadData)
    }

    @Test("messages over the limit fail with 1009, whole or fragmented")
    func sizeLimit() {
        var whole = WebSocketFrameStateMachine(maxMessageBytes: 4)
        #expect(failureCode(whole.received(frame(.binary, [1, 2, 3, 4, 5]))) == .messageTooBig)
        var fragmented = WebSocketFrameStateMachine(maxMessageBytes: 4)
        #expect(fragmented.received(frame(.binary, [1, 2, 3], fin: false)) == .none)
        #expect(failureCode(fragmented.received(frame(.continuation, [4, 5]))) == .messageTooBig)
        #expect(fragmented.state == .closed)
    }

    @Test("protocol violations fail with 1002")
    func violations() {
        let cases: [(String, [WebSocketFrame])] = [
            ("masked server frame", [frame(.text, [65], masked: true)]),
            ("reserved bit", [frame(.text, [65], rsv1: true)]),
            ("fragmented control frame", [frame(.ping, [1], fin: false)]),
            ("control frame over 125 bytes", [frame(.ping, Array(repeating: 1, count: 126))]),
            ("orphan continuation", [frame(.continuation, [1])]),
            ("new message inside a fragmented one", [text("a", fin: false), text("b")]),
            ("reserved opcode", [frame(WebSocketOpcode(encodedWebSocketOpcode: 0x3)!, [1])]),
            ("1-byte close payload", [frame(.connectionClose, [3])]),
            ("close code that may not be sent", [frame(.connectionClose, [0x03, 0xED])]),  // 1005
        ]
        for (name, frames) in cases {
            var machine = WebSocketFrameStateMachine(maxMessageBytes: 1000)
            var last = WebSocketFrameStateMachine.Action.none
            for frame in frames { last = machine.received(frame) }
            #expect(failureCode(last) == .protocolError, "\(name)")
        }
    }

    @Test("a close from the server is answered with its code; the reported code and reason are the server's")
    func serverInitiatedClose() {
        var machine = WebSocketFrameStateMachine(maxMessageBytes: 100)
        let action = machine.received(frame(.connectionClose, [0x03, 0xE9] + Array("bye".utf8)))
        #expect(action == .replyToClose(reply: .goingAway, peerCode: .goingAway, reason: "bye"))
        #expect(!machine.canSend)
        #expect(machine.received(text("late")) == .none, "nothing is delivered after the close")
        var empty = WebSocketFrameStateMachine(maxMessageBytes: 100)
        #expect(empty.received(frame(.connectionClose, [])) == .replyToClose(reply: nil, peerCode: .noStatusReceived, reason: ""))
    }

    @Test("a close the client starts completes when the server answers; a second close does nothing")
    func clientInitiatedClose() {
        var machine = WebSocketFrameStateMachine(maxMessageBytes: 100)
        #expect(machine.close(code: .normalClosure, reason: "done") == .sendClose(.normalClosure, reason: "done"))
        #expect(machine.close(code: .normalClosure, reason: "again") == .none)
        #expect(!machine.canSend)
        #expect(machine.received(text("in flight")) == .deliver(.string("in flight")), "data sent before the answer is kept")
        #expect(machine.received(frame(.connectionClose, [0x03, 0xE8])) == .closeHandshakeDone(peerCode: .normalClosure, reason: ""))
    }

    @Test("a violation after our close frame does not send a second one")
    func failureAfterOurClose() {
        var machine = WebSocketFrameStateMachine(maxMessageBytes: 100)
        _ = machine.close(code: .normalClosure, reason: "")
        guard case .failConnection(_, _, _, let sendCloseFrame) = machine.received(frame(.text, [1], masked: true)) else {
            Issue.record("expected a failure")
            return
        }
        #expect(!sendCloseFrame)
    }

    @Test("pings are answered with the same payload; pongs are reported")
    func pingPong() {
        var machine = WebSocketFrameStateMachine(maxMessageBytes: 100)
        #expect(machine.received(frame(.ping, [1, 2, 3])) == .sendPong(ByteBuffer(bytes: [1, 2, 3])))
        #expect(machine.received(frame(.pong, [9])) == .pongReceived([9]))
    }
}
