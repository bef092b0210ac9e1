import Duplex
import DuplexTesting
import Foundation
import Testing

@Test func ticksThenComplete() async throws {
    let graphQL = try ScriptedRoute.graphQL(
        "/graphql",
        script: GraphQLScript(operations: [
            GraphQLOperation(match: .queryContains("ticks"), next: [#"{"data":{"ticks":1}}"#, #"{"data":{"ticks":2}}"#])
        ]))
    try await withDuplexServer(routes: [graphQL]) { server in
        let url = server.webSocketURL("/graphql")
        let socket = WebSocket(request: WebSocketRequest(url: url, protocols: ["graphql-transport-ws"]))
        var messages = socket.messages.makeAsyncIterator()
        try await socket.connect()
        try await socket.send(#"{"type":"connection_init","payload":{"token":"t"}}"#)
        #expect(await messages.next()?.text == #"{"type":"connection_ack"}"#)
        try await socket.send(#"{"id":"1","type":"subscribe","payload":{"query":"subscription { ticks }"}}"#)
        #expect(await messages.next()?.text == #"{"id":"1","type":"next","payload":{"data":{"ticks":1}}}"#)
        #expect(await messages.next()?.text == #"{"id":"1","type":"next","payload":{"data":{"ticks":2}}}"#)
        #expect(await messages.next()?.text == #"{"id":"1","type":"complete"}"#)
        await socket.terminate()
    }
}

@Test func welcomeAckAndQuotes() async throws {
    let quotes = try ScriptedRoute.socketIO(
        "/socket.io/",
        script: SocketIOScript(
            onConnect: [.emit("welcome", #"{"server":"duplex"}"#)],
            onEvent: [SocketIORule(event: "subscribe", ack: [#""ok""#], do: [.emit("quote", #"{"n":1}"#)])]
        ))
    try await withDuplexServer(routes: [quotes]) { server in
        let socket = WebSocket(url: server.webSocketURL("/socket.io/?EIO=4&transport=websocket"))
        var messages = socket.messages.makeAsyncIterator()
        try await socket.connect()
        #expect(await messages.next()?.text?.hasPrefix(#"0{"sid":"#) == true)  // the open packet
        try await socket.send("40")  // connect to the namespace /
        #expect(await messages.next()?.text?.hasPrefix(#"40{"sid":"#) == true)
        #expect(await messages.next()?.text == #"42["welcome",{"server":"duplex"}]"#)
        try await socket.send(#"421["subscribe",{"symbol":"DPLX"}]"#)  // an event asking for ack 1
        #expect(await messages.next()?.text == #"431["ok"]"#)
        #expect(await messages.next()?.text == #"42["quote",{"n":1}]"#)
        await socket.terminate()
    }
}

@Test func pingWithheld() async throws {
    let broker = try ScriptedRoute.mqtt("/mqtt", script: MQTTScript(answerPings: false))
    try await withDuplexServer(routes: [broker]) { server in
        let socket = WebSocket(request: WebSocketRequest(url: server.webSocketURL("/mqtt"), protocols: ["mqtt"]))
        var messages = socket.messages.makeAsyncIterator()
        try await socket.connect()
        // CONNECT (MQTT 3.1.1, client "app", keep-alive 60) and PINGREQ, in one message.
        let connect: [UInt8] = [0x10, 15, 0, 4] + Array("MQTT".utf8) + [4, 2, 0, 60, 0, 3] + Array("app".utf8)
        try await socket.send(.data(Data(connect + [0xC0, 0])))
        #expect(await messages.next() == .data(Data([0x20, 2, 0, 0])))  // CONNACK, accepted
        let withheld = try await server.journal.first(within: .seconds(5)) { $0.kind == .error }
        #expect(withheld.data?.contains("PINGRESP withheld") == true)
        #expect(server.journal.entries.contains { $0.kind == .packet && $0.data == "PINGREQ" })
        await socket.terminate()
    }
}
