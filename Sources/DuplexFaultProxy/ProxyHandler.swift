import NIOCore

/// Reads one side of a link and forwards through the toxics to the other side.
final class ProxyHandler: ChannelInboundHandler {
    typealias InboundIn = ByteBuffer

    let link: ProxyLink
    let direction: FaultProxy.Direction

    init(link: ProxyLink, direction: FaultProxy.Direction) {
        self.link = link
        self.direction = direction
    }

    func handlerAdded(context: ChannelHandlerContext) {
        // reads are manual (autoRead off), and start once the channel is active
        if context.channel.isActive { context.read() }
    }

    func channelActive(context: ChannelHandlerContext) {
        context.read()
        context.fireChannelActive()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        link.forward(unwrapInboundIn(data), direction: direction)
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        context.read()
    }

    func channelInactive(context: ChannelHandlerContext) {
        link.senderClosed(direction)
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        link.close()
    }
}
