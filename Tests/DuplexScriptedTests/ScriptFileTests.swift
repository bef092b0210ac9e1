import Duplex
import DuplexScripted
import Foundation
import Testing

/// Script files: every action and fault of `docs/scripts.md` reads into its value, and a wrong
/// file is refused with the place and the reason.
@Suite("Script files")
struct ScriptFileTests {
    func routes(_ json: String) throws(ScriptError) -> [ScriptedRoute] {
        try ScriptFile.routes(from: Data(json.utf8))
    }

    func error(_ json: String) -> String? {
        do {
            _ = try routes(json)
            return nil
        } catch {
            return error.description
        }
    }

    @Test("docs/examples/feed.json reads into a WebSocket and an SSE route")
    func example() throws {
        let file = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("../../docs/examples/feed.json").path
        let routes = try ScriptFile.load(path: file)
        #expect(routes.map(\.description) == ["WebSocket /feed", "SSE GET /orders"])
    }

    @Test("docs/examples/proxy.json reads into a proxy route with rules both ways")
    func proxyExample() throws {
        let file = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("../../docs/examples/proxy.json").path
        let routes = try ScriptFile.load(path: file)
        #expect(routes.map(\.description) == ["WebSocket /quotes, proxied to ws://127.0.0.1:8765/quotes"])
        #expect(routes.first?.proxyScript?.toClient.count == 2)
        #expect(routes.first?.proxyScript?.toUpstream.count == 4)
    }

    @Test("docs/examples' preset files read into a graphql-transport-ws, a Socket.IO and an MQTT route")
    func presetExamples() throws {
        let folder = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("../../docs/examples")
        let routes = try ["graphql-ws.json", "socketio.json", "mqtt.json"].flatMap { name in
            try ScriptFile.load(path: folder.appendingPathComponent(name).path)
        }
        #expect(
            routes.map(\.description) == [
                "WebSocket /graphql (graphql-transport-ws)", "WebSocket /socket.io/ (socket.io)", "WebSocket /mqtt (mqtt)",
            ])
        #expect(routes.map(\.preset) == ["graphql-transport-ws", "socket.io", "mqtt"])
    }

    @Test("a preset reads its keys and the faults every scripted WebSocket route takes")
    func presetKeys() throws {
        let json = #"""
            {"routes": [
              {"path": "/g", "graphql": {"acknowledge": false, "initTimeoutMs": 100, "ackPayload": {"v": 1}, "pingEveryMs": 50,
                "refuseInit": {"close": 4403, "reason": "no"}, "faults": {"dropAfterSending": 2},
                "operations": [{"match": {"operationName": "A", "variables": {"id": 1}}, "close": 4500, "reason": "x"}]}},
              {"path": "/s", "socketio": {"namespaces": ["/", "/a"], "pingIntervalMs": 10, "pingTimeoutMs": 20, "pings": false,
                "ignorePongs": true, "refuseConnect": "no", "dropAfterEvents": 3, "faults": {"duplicateSends": true},
                "onConnect": [{"emit": "e", "args": [1, "two"], "expectAck": true}, {"delayMs": 5}, {"disconnect": true}, {"close": true}, {"drop": true}],
                "onEvent": [{"ack": [], "do": []}]}},
              {"path": "/m", "mqtt": {"connack": 135, "answerPings": false, "acknowledgePublishes": false, "maxPacketBytes": 64,
                "faults": {"delaySendsMs": 5},
                "onSubscribe": [{"topic": "a/+", "do": [{"publish": "a/b", "payloadBase64": "AAE=", "qos": 1, "retain": true},
                  {"dropMidPacket": true}, {"disconnect": true}, {"drop": true}]}]}}
            ]}
            """#
        let routes = try routes(json)
        #expect(routes.map(\.preset) == ["graphql-transport-ws", "socket.io", "mqtt"])
    }

    @Test("a proxy route reads its upstream, its rules per direction with every action, and its refusal")
    func proxy() throws {
        let json = #"""
            {"routes": [{"path": "/p", "proxy": {
              "upstream": "wss://api.example.com/feed",
              "insecure": true,
              "refuse": {"status": 429, "headers": {"Retry-After": "1"}, "times": 2},
              "toUpstream": [
                {"match": {"json": {"type": "order"}}, "do": [{"set": {"price": 0}}]},
                {"match": {"text": "ping"}, "do": [{"reply": "pong"}, {"forward": false}]},
                {"match": {"contains": "x", "nth": 2}, "do": [{"send": "a"}, {"sendJSON": {"b": 1}}, {"duplicate": true}, {"delayMs": 5}]}
              ],
              "toClient": [
                {"match": {"nth": 3}, "do": [{"replace": "r"}]},
                {"match": {"nth": 4}, "do": [{"fragment": 3}, {"fault": "maskedFrame"}, {"answerPings": false}]},
                {"match": {"any": true}, "do": [{"close": 4001, "reason": "bye"}, {"drop": true}]}
              ]
            }}]}
            """#
        let route = try #require(try routes(json).first)
        #expect(route.description == "WebSocket /p, proxied to wss://api.example.com/feed")
        let sse = try routes(#"{"routes": [{"path": "/s", "method": "post", "proxy": {"upstream": "https://api.example.com/v1/stream"}}]}"#)
        #expect(sse.map(\.description) == ["SSE POST /s, proxied to https://api.example.com/v1/stream"])
        let script = try #require(route.proxyScript)
        #expect(script.tlsTrust == .insecureAcceptAnyCertificate)
        #expect(script.refuse == ScriptRefusal(status: 429, headers: ["Retry-After": "1"], times: 2))
        #expect(
            script.toUpstream == [
                ProxyRule(match: try .json(#"{"type":"order"}"#), do: [try .set(#"{"price":0}"#)]),
                ProxyRule(match: .text("ping"), do: [.reply("pong"), .forward(false)]),
                ProxyRule(
                    match: MessageMatch.contains("x").and(.nth(2)), do: [.send("a"), .send(#"{"b":1}"#), .duplicate, .delay(.milliseconds(5))]),
            ])
        #expect(
            script.toClient == [
                ProxyRule(match: .nth(3), do: [.replace("r")]),
                ProxyRule(match: .nth(4), do: [.fragment(frames: 3), .fault(.maskedFrame), .answerPings(false)]),
                ProxyRule(match: .any, do: [.close(code: 4001, reason: "bye"), .drop]),
            ])
        let faults = try routes(
            #"{"routes": [{"path": "/s", "proxy": {"upstream": "http://h/s", "toClient": [{"match": {"nth": 2}, "do": [{"cut": true}]}, {"match": {"nth": 3}, "do": [{"hang": true}]}]}}]}"#
        )
        #expect(try #require(faults.first?.proxyScript).toClient.map(\.actions) == [[.cut], [.hang]])
        let overHTTP2 = try routes(#"{"routes": [{"path": "/p", "proxy": {"upstream": "wss://h/x", "httpVersion": "2"}}]}"#)
        #expect(overHTTP2.first?.proxyScript?.httpVersion == .http2)
        #expect(script.httpVersion == nil)
    }

    @Test("every action, match, fault and ending of docs/scripts.md is accepted")
    func everything() throws {
        let json = """
            {"routes": [
              {"path": "/all", "websocket": {
                "subprotocols": ["a.v1", "b.v1"],
                "onConnect": [
                  {"send": "hi"}, {"sendBinary": "AAEC"}, {"sendJSON": {"type": "hello", "n": 1, "ok": true, "list": [1, null]}},
                  {"delayMs": 10}, {"ping": "p"}, {"answerPings": false}, {"pongs": true}, {"fragment": "abcdef", "frames": 3},
                  {"fault": "invalidUTF8"}, {"fault": "reservedOpcode"}, {"fault": "longControlFrame"}, {"fault": "maskedFrame"},
                  {"close": 4001, "reason": "bye"}, {"drop": true}
                ],
                "onMessage": [
                  {"match": {"text": "a"}, "do": []}, {"match": {"contains": "b"}, "do": []},
                  {"match": {"json": {"type": "ping", "nested": {"k": 1}}}, "do": []}, {"match": {"nth": 2}, "do": []},
                  {"match": {"any": true}, "do": [{"send": "x"}]}
                ],
                "answerPings": false,
                "faults": {"delaySendsMs": 5, "reorderSends": true, "duplicateSends": true, "fragmentSends": 2, "dropAfterSending": 9},
                "refuse": {"status": 429, "headers": {"Retry-After": "1"}, "body": "{}", "times": 2}
              }},
              {"path": "/s", "method": "post", "sse": {
                "events": [{"id": "1", "event": "e", "data": "d", "retry": 100}, {"comment": "c"}, {"raw": "data: hal"}],
                "everyMs": 0, "then": "comments", "retryMs": 500, "refuse": {"status": 503}
              }}
            ]}
            """
        let routes = try routes(json)
        #expect(routes.map(\.description) == ["WebSocket /all", "SSE POST /s"])
        let script = try #require(routes[0].webSocketScript)
        #expect(script.subprotocols == ["a.v1", "b.v1"])
        #expect(
            script.onConnect == [
                .send("hi"), .sendBinary(Data([0, 1, 2])), .send(#"{"list":[1,null],"n":1,"ok":true,"type":"hello"}"#),
                .delay(.milliseconds(10)), .ping("p"), .answerPings(false), .answerPings(true), .fragment("abcdef", frames: 3),
                .fault(.invalidUTF8), .fault(.reservedOpcode), .fault(.longControlFrame), .fault(.maskedFrame),
                .close(code: 4001, reason: "bye"), .drop,
            ])
        #expect(script.onMessage.map(\.match) == [.text("a"), .contains("b"), try .json(#"{"type":"ping","nested":{"k":1}}"#), .nth(2), .any])
        #expect(script.onMessage.last?.actions == [.send("x")])
        #expect(!script.answerPings)
        #expect(
            script.faults
                == WebSocketFaults(delaySends: .milliseconds(5), reorderSends: true, duplicateSends: true, fragmentSends: 2, dropAfterSending: 9))
        #expect(script.refuse == ScriptRefusal(status: 429, headers: ["Retry-After": "1"], body: "{}", times: 2))
        let sse = try #require(routes[1].sseScript)
        #expect(
            sse.events == [SSEScriptEvent(id: "1", event: "e", data: "d", retry: 100), .comment("c"), .raw("data: hal")])
        #expect(sse.then == .comments)
        #expect(sse.retryMilliseconds == 500)
    }

    @Test(
        "a wrong script is refused with the place and the reason",
        arguments: [
            (
                #"{"routes":[{"path":"/f","websocket":{"onMessage":[{"match":{"jsn":{}},"do":[]}]}}]}"#,
                #"routes[0].websocket.onMessage[0].match: unknown key "jsn" (known: any, contains, json, nth, text)"#
            ),
            (#"{"routes":[{"path":"/f"}]}"#, #"routes[0]: a route needs one of "websocket", "sse", "proxy", "graphql", "socketio", "mqtt""#),
            (
                #"{"routes":[{"path":"/p","proxy":{"upstream":"ftp://127.0.0.1:1/x"}}]}"#,
                #"routes[0].proxy.upstream: must be a ws://, wss://, http:// or https:// URL with a host (got "ftp://127.0.0.1:1/x")"#
            ),
            (#"{"routes":[{"path":"/p","proxy":{}}]}"#, #"routes[0].proxy: a proxy needs "upstream", a ws://, wss://, http:// or https:// URL"#),
            (
                #"{"routes":[{"path":"/p","proxy":{"upstream":"http://h/x","toUpstream":[{"match":{"any":true},"do":[{"forward":false}]}]}}]}"#,
                "routes[0].proxy.toUpstream: an SSE proxy (an http:// or https:// upstream) has no toUpstream"
            ),
            (
                #"{"routes":[{"path":"/p","proxy":{"upstream":"http://h/x","toClient":[{"match":{"any":true},"do":[{"reply":"x"}]}]}}]}"#,
                "routes[0].proxy.toClient[0].do[0]: an SSE proxy cannot reply"
            ),
            (
                #"{"routes":[{"path":"/p","method":"POST","proxy":{"upstream":"ws://h/x"}}]}"#,
                "routes[0].method: a WebSocket proxy route's method is GET"
            ),
            (
                #"{"routes":[{"path":"/p","proxy":{"upstream":"ws://h/x","toClient":[{"match":{"nth":1},"do":[{"forward":false,"drop":true}]}]}}]}"#,
                "routes[0].proxy.toClient[0].do[0]: an action has exactly one of delayMs, replace, set, send, sendJSON, reply, forward, duplicate, close, drop, fragment, fault, answerPings, cut, hang (got forward, drop)"
            ),
            (
                #"{"routes":[{"path":"/p","proxy":{"upstream":"ws://h/x","toUpstream":[{"match":{"any":true},"do":[{"set":[1]}]}]}}]}"#,
                "routes[0].proxy.toUpstream[0].do[0].set: must be an object with the members to set (got an array)"
            ),
            (
                #"{"routes":[{"path":"/p","proxy":{"upstream":"ws://h/x","toClient":[{"match":{"nth":1},"do":[{"fault":"oops"}]}]}}]}"#,
                #"routes[0].proxy.toClient[0].do[0].fault: unknown fault "oops""#
            ),
            (
                #"{"routes":[{"path":"/p","proxy":{"upstream":"wss://h/x","httpVersion":"3"}}]}"#,
                #"routes[0].proxy.httpVersion: must be "1.1", "2" or "automatic" (got "3")"#
            ),
            (
                #"{"routes":[{"path":"/p","proxy":{"upstream":"ws://h/x","toUpstream":[{"match":{"nth":1},"do":[{"fragment":2}]}]}}]}"#,
                "routes[0].proxy.toUpstream[0].do[0]: fragment applies toward the client: a toClient rule"
            ),
            (
                #"{"routes":[{"path":"/p","proxy":{"upstream":"ws://h/x","toClient":[{"match":{"nth":1},"do":[{"hang":true}]}]}}]}"#,
                "routes[0].proxy.toClient[0].do[0]: hang applies to an SSE proxy's events (an http:// or https:// upstream)"
            ),
            (
                #"{"routes":[{"path":"/s","proxy":{"upstream":"http://h/x","toClient":[{"match":{"nth":1},"do":[{"answerPings":false}]}]}}]}"#,
                "routes[0].proxy.toClient[0].do[0]: answerPings applies to a WebSocket proxy (a ws:// or wss:// upstream)"
            ),
            (
                #"{"routes":[{"path":"/s","proxy":{"upstream":"http://h/x","toClient":[{"match":{"nth":1},"do":[{"cut":false}]}]}}]}"#,
                #"routes[0].proxy.toClient[0].do[0].cut: "cut" is true"#
            ),
            (#"{"routes":[{"path":"/p","proxy":{"upstream":"ws://h/x","toServer":[]}}]}"#, #"routes[0].proxy: unknown key "toServer""#),
            (
                #"{"routes":[{"path":"/p","proxy":{"upstream":"ws://h/x"},"websocket":{}}]}"#,
                #"routes[0]: a route has one of "websocket", "sse", "proxy", "graphql", "socketio", "mqtt" (got websocket, proxy)"#
            ),
            (#"{"routes":[{"websocket":{}}]}"#, #"routes[0]: a route needs a "path""#),
            (#"{"routes":[{"path":"f","websocket":{}}]}"#, #"routes[0].path: a path starts with / (got "f")"#),
            (
                #"{"routes":[{"path":"/f","websocket":{},"sse":{}}]}"#,
                #"routes[0]: a route has one of "websocket", "sse", "proxy", "graphql", "socketio", "mqtt" (got websocket, sse)"#
            ),
            (
                #"{"routes":[{"path":"/g","graphql":{"operations":[{"next":[1]}]}}]}"#,
                #"routes[0].graphql.operations[0].next[0]: a "next" payload is an object"#
            ),
            (
                #"{"routes":[{"path":"/g","graphql":{"operations":[{"then":"later"}]}}]}"#,
                #"routes[0].graphql.operations[0].then: unknown ending "later""#
            ),
            (
                #"{"routes":[{"path":"/g","graphql":{"operations":[{"error":[{"message":"x"}],"then":"never"}]}}]}"#,
                #"routes[0].graphql.operations[0]: an operation ends one way"#
            ),
            (#"{"routes":[{"path":"/g","graphql":{"refuseInit":{"close":1005}}}]}"#, #"routes[0].graphql.refuseInit.close: 1005 cannot be sent"#),
            (#"{"routes":[{"path":"/s","socketio":{"namespaces":["admin"]}}]}"#, #"routes[0].socketio.namespaces[0]: a namespace starts with /"#),
            (
                #"{"routes":[{"path":"/s","socketio":{"onConnect":[{"emit":"x","data":1,"args":[]}]}}]}"#,
                #"routes[0].socketio.onConnect[0]: an emit has "data" (one argument) or "args", not both"#
            ),
            (#"{"routes":[{"path":"/s","socketio":{"onEvent":[{"ack":"ok"}]}}]}"#, #"routes[0].socketio.onEvent[0].ack: must be an array"#),
            (
                #"{"routes":[{"path":"/m","mqtt":{"onSubscribe":[{"topic":"a/#/b","do":[]}]}}]}"#,
                #"routes[0].mqtt.onSubscribe[0].topic: not a topic filter"#
            ),
            (
                #"{"routes":[{"path":"/m","mqtt":{"onSubscribe":[{"topic":"t","do":[{"publish":"a/+"}]}]}}]}"#,
                #"routes[0].mqtt.onSubscribe[0].do[0].topic: a topic name is not empty and has no + or #"#
            ),
            (
                #"{"routes":[{"path":"/m","mqtt":{"onSubscribe":[{"topic":"t","do":[{"publish":"t","qos":2}]}]}}]}"#,
                #"routes[0].mqtt.onSubscribe[0].do[0].qos: must be a whole number from 0 to 1"#
            ),
            (
                #"{"routes":[{"path":"/m","mqtt":{"onSubscribe":[{"topic":"t","do":[{"drop":true,"qos":1}]}]}}]}"#,
                #"routes[0].mqtt.onSubscribe[0].do[0].qos: "qos" goes with "publish""#
            ),
            (#"{"routes":[{"path":"/m","method":"POST","mqtt":{}}]}"#, #"routes[0].method: a WebSocket route's method is GET"#),
            (#"{"routes":[{"path":"/f","method":"POST","websocket":{}}]}"#, #"routes[0].method: a WebSocket route's method is GET"#),
            (
                #"{"routes":[{"path":"/f","websocket":{"onConnect":[{"close":1005}]}}]}"#,
                "routes[0].websocket.onConnect[0].close: 1005 cannot be sent in a close frame (RFC 6455 section 7.4)"
            ),
            (
                #"{"routes":[{"path":"/f","websocket":{"onConnect":[{"send":"a","drop":true}]}}]}"#,
                "routes[0].websocket.onConnect[0]: an action has exactly one of send, sendBinary, sendJSON, delayMs, close, drop, ping, answerPings, fragment, fault (got send, drop)"
            ),
            (
                #"{"routes":[{"path":"/f","websocket":{"onConnect":[{"fault":"loud"}]}}]}"#,
                #"routes[0].websocket.onConnect[0].fault: unknown fault "loud" (known: invalidUTF8, reservedOpcode, longControlFrame, maskedFrame)"#
            ),
            (
                #"{"routes":[{"path":"/f","websocket":{"onConnect":[{"sendBinary":"%%"}]}}]}"#,
                "routes[0].websocket.onConnect[0].sendBinary: must be base64"
            ),
            (
                #"{"routes":[{"path":"/f","websocket":{"onConnect":[{"delayMs":1.5}]}}]}"#,
                "routes[0].websocket.onConnect[0].delayMs: must be a whole number from 0 to 86400000 (got 1.5)"
            ),
            (
                #"{"routes":[{"path":"/f","websocket":{"answerPings":"no"}}]}"#,
                #"routes[0].websocket.answerPings: must be true or false (got a string, "no")"#
            ),
            (
                #"{"routes":[{"path":"/f","websocket":{"answerPings":false,"pongs":false}}]}"#,
                #"routes[0].websocket.pongs: "pongs" is the former name of "answerPings": give one"#
            ),
            (
                #"{"routes":[{"path":"/f","websocket":{"refuse":{"status":200}}}]}"#,
                "routes[0].websocket.refuse.status: must be a whole number from 400 to 599 (got 200)"
            ),
            (
                #"{"routes":[{"path":"/f","sse":{"then":"later"}}]}"#,
                #"routes[0].sse.then: unknown ending "later" (known: end, drop, hang, comments)"#
            ),
            (
                #"{"routes":[{"path":"/f","sse":{"events":[{"comment":"c","data":"d"}]}}]}"#,
                #"routes[0].sse.events[0]: "comment" stands alone in an event"#
            ),
            (#"{"routes":[{"path":"/f","sse":{"events":[{"id":"a\nb"}]}}]}"#, "routes[0].sse.events[0].id: an event's id is one line"),
            (#"{"route":[]}"#, #"unknown key "route" (known: routes)"#),
            (#"[1]"#, "must be an object (got an array)"),
            ("{", "not JSON at line 1, column 2: expected a member name in double quotes (got the end of the text)"),
            (
                "{\n  \"routes\": [\n    {\"path\": \"/x\", \"websocket\": {\"onConnect\": [{\"send\": hi}]}}\n  ]\n}",
                #"not JSON at line 3, column 57: expected a value (got "h"): …ket": {"onConnect": [{"send": hi}]}}"#
            ),
        ])
    func refused(_ json: String, _ expected: String) {
        let said = error(json)
        #expect(said?.hasPrefix(expected) == true, "said: \(said ?? "nothing")")
    }

    @Test("a proxy's pins and client certificate are read; wrong ones are refused with their place")
    func proxyIdentity() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("duplex-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let (certificate, key) = (directory.appendingPathComponent("client.pem").path, directory.appendingPathComponent("client-key.pem").path)
        try "CERTIFICATE".write(toFile: certificate, atomically: true, encoding: .utf8)
        try "KEY".write(toFile: key, atomically: true, encoding: .utf8)
        let pin = Data(repeating: 7, count: 32).base64EncodedString()
        let proxy = { (members: String) in #"{"routes": [{"path": "/p", "proxy": {"upstream": "wss://h/x", "insecure": true, \#(members)}}]}"# }
        let script = try #require(
            try routes(proxy(#""pins": ["sha256//\#(pin)"], "certFile": "\#(certificate)", "keyFile": "\#(key)""#)).first?.proxyScript)
        #expect(script.tlsTrust == TLSTrust.insecureAcceptAnyCertificate.pinning(publicKeySHA256: [pin]))
        #expect(script.tlsIdentity == .pem(certificateChain: "CERTIFICATE", privateKey: "KEY"))
        for (members, expected) in [
            (#""pins": ["abc"]"#, "routes[0].proxy.pins[0]: a pin is the base64 SHA-256"),
            (#""pins": []"#, "routes[0].proxy.pins: give at least one pin"),
            (#""certFile": "\#(certificate)""#, #"routes[0].proxy.certFile: "certFile" goes with "keyFile""#),
            (#""keyFile": "\#(key)""#, #"routes[0].proxy.keyFile: "keyFile" goes with "certFile""#),
            (#""certFile": "/nonexistent.pem", "keyFile": "\#(key)""#, "routes[0].proxy.certFile: cannot read the certificate file"),
        ] {
            let said = error(proxy(members))
            #expect(said?.hasPrefix(expected) == true, "said: \(said ?? "nothing")")
        }
    }

    @Test("docs/scripts.md's table of proxy actions names every action a proxy rule takes, and no other")
    func proxyActionsDocumented() throws {
        let file = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("../../docs/scripts.md")
        let docs = try String(contentsOf: file, encoding: .utf8)
        let section = try #require(
            docs.components(separatedBy: "### `proxy`").dropFirst().first?.components(separatedBy: "### Protocol presets").first)
        var documented = Set<String>()
        for line in section.split(separator: "\n") where line.hasPrefix("| `{\"") {
            let cell = line.split(separator: "|").first ?? ""
            for match in cell.matches(of: /`\{"(\w+)"/) { documented.insert(String(match.1)) }
        }
        #expect(documented == Set(ScriptFile.proxyActionKeys))
    }

    @Test("docs/scripts.md's protocol presets section names every key a preset's script takes")
    func presetKeysDocumented() throws {
        let file = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("../../docs/scripts.md")
        let docs = try String(contentsOf: file, encoding: .utf8)
        let section = try #require(
            docs.components(separatedBy: "### Protocol presets").dropFirst().first?.components(separatedBy: "### Errors").first)
        let missing = ScriptFile.presetScriptKeys.filter { !section.contains("`\($0)`") && !section.contains("\"\($0)\"") }
        #expect(missing.isEmpty, "not in docs/scripts.md: \(missing.sorted())")
    }

    @Test("a file that cannot be read is named")
    func unreadable() {
        #expect(throws: ScriptError.self) { try ScriptFile.load(path: "/nonexistent/script.json") }
        do {
            _ = try ScriptFile.load(path: "/nonexistent/script.json")
        } catch {
            #expect(error.description.contains("/nonexistent/script.json"))
        }
    }
}
