import DuplexHost
import NIOCore
import NIOWebSocket

/// The frames a server writes to break a message on purpose, for scripted routes and proxy routes
/// alike: a message in several frames, and a frame the client must reject.
extension EventLoopWebSocketHandler {
    /// Writes a message of `bytes` in `frames` frames of about equal size (never compressed),
    /// the first with `opcode`, the rest continuations; flushed with the read batch.
    func writeFragments(_ bytes: [UInt8], opcode: WebSocketOpcode, frames: Int, context: ChannelHandlerContext) {
        let count = max(1, min(frames, max(bytes.count, 1)))
        let size = (bytes.count + count - 1) / max(count, 1)
        for index in 0..<count {
            let slice = bytes[min(index * size, bytes.count)..<min((index + 1) * size, bytes.count)]
            writeUnchecked(
                fin: index == count - 1,
                opcode: index == 0 ? opcode : .continuation,
                payload: context.channel.allocator.buffer(bytes: slice),
                masked: false,
                context: context
            )
        }
    }

    /// Writes the frame `fault` names, which the client must reject (with
    /// ``FrameFault/expectedCloseCode``), and flushes it.
    func write(_ fault: FrameFault, context: ChannelHandlerContext) {
        let allocator = context.channel.allocator
        switch fault {
        case .invalidUTF8:
            writeUnchecked(fin: true, opcode: .text, payload: allocator.buffer(bytes: [0x68, 0x69, 0xC3, 0x28]), masked: false, context: context)
        case .reservedOpcode:
            writeUnchecked(
                fin: true, opcode: WebSocketOpcode(encodedWebSocketOpcode: 3)!, payload: allocator.buffer(string: "reserved"), masked: false,
                context: context)
        case .longControlFrame:
            writeUnchecked(fin: true, opcode: .ping, payload: allocator.buffer(repeating: 0x61, count: 126), masked: false, context: context)
        case .maskedFrame:
            writeUnchecked(fin: true, opcode: .text, payload: allocator.buffer(string: "masked"), masked: true, context: context)
        }
        flush(context: context)
    }
}
