// swift-tools-version:6.2
import PackageDescription

let swiftSettings: [SwiftSetting] = [
    .enableUpcomingFeature("ExistentialAny"),
    .enableUpcomingFeature("MemberImportVisibility"),
    .enableUpcomingFeature("InternalImportsByDefault"),
]

// CI sets DUPLEX_TYPECHECK_URLSESSION=1 to compile the client's URLSession transport on Linux too
// (it is Apple-only at run time), so that a change that breaks it fails there.
let clientSettings = swiftSettings + (Context.environment["DUPLEX_TYPECHECK_URLSESSION"] == "1" ? [.define("DUPLEX_TYPECHECK_URLSESSION")] : [])

let package = Package(
    name: "duplex",
    platforms: [.macOS(.v14), .iOS(.v17), .tvOS(.v17)],
    products: [
        .library(name: "DuplexSchema", targets: ["DuplexSchema"]),
        .library(name: "Duplex", targets: ["Duplex"]),
        .library(name: "DuplexCallbacks", targets: ["DuplexCallbacks"]),
        .library(name: "DuplexCombine", targets: ["DuplexCombine"]),
        .library(name: "DuplexServer", targets: ["DuplexServer"]),
        .library(name: "DuplexPostgres", targets: ["DuplexPostgres"]),
        .library(name: "DuplexTesting", targets: ["DuplexTesting"]),
        .executable(name: "duplex-server", targets: ["duplex-server"]),
        .executable(name: "duplex", targets: ["duplex"]),
    ],
    dependencies: [
        // Without its default traits, which bring swift-configuration (47 files) into every
        // build of a package that uses Duplex; hummingbird-websocket asks for none either.
        .package(url: "https://github.com/hummingbird-project/hummingbird.git", from: "2.28.1", traits: []),
        .package(url: "https://github.com/hummingbird-project/hummingbird-websocket.git", from: "2.8.1"),
        .package(url: "https://github.com/apple/swift-nio.git", from: "2.101.2"),
        // The server's HTTP/1.1 and WebSocket upgrade pipeline (HTTP types over NIOHTTP1).
        .package(url: "https://github.com/apple/swift-nio-extras.git", from: "1.35.2"),
        .package(url: "https://github.com/apple/swift-log.git", from: "1.16.2"),
        .package(url: "https://github.com/apple/swift-collections.git", from: "1.6.0"),
        // A stall's flag, set by the thread that asks and read by the event loop (a dependency
        // of swift-nio already).
        .package(url: "https://github.com/apple/swift-atomics.git", from: "1.3.0"),
        .package(url: "https://github.com/apple/swift-argument-parser.git", from: "1.8.2"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle.git", from: "2.13.0"),
        .package(url: "https://github.com/apple/swift-http-types.git", from: "1.8.0"),
        .package(url: "https://github.com/apple/swift-nio-ssl.git", from: "2.37.6"),
        // HTTP/2 on the server's TLS listeners: SSE and every HTTP route, and WebSockets through
        // extended CONNECT (RFC 8441).
        .package(url: "https://github.com/apple/swift-nio-http2.git", from: "1.46.0"),
        // The server's TLS certificates made at start (--tls-self-signed, the TLS faults).
        .package(url: "https://github.com/apple/swift-certificates.git", from: "1.21.1"),
        .package(url: "https://github.com/apple/swift-crypto.git", "3.12.3"..<"5.0.0"),
        .package(url: "https://github.com/apple/swift-asn1.git", from: "1.7.4"),
        .package(url: "https://github.com/OpenCombine/OpenCombine.git", from: "0.14.0"),
        // Tests only: an independent zlib to check DuplexWire's permessage-deflate against.
        .package(url: "https://github.com/adam-fowler/compress-nio.git", from: "1.5.0"),
        // The PostgreSQL room store (`duplex-server --store postgres://…`).
        .package(url: "https://github.com/vapor/postgres-nio.git", from: "1.33.2"),
        // The server's `GET /metrics`: counters through swift-metrics, exposed by swift-prometheus.
        .package(url: "https://github.com/apple/swift-metrics.git", from: "2.13.0"),
        .package(url: "https://github.com/swift-server/swift-prometheus.git", from: "2.4.1"),
        // Spans for WebSocket connections and SSE streams (already a dependency of Hummingbird).
        .package(url: "https://github.com/apple/swift-distributed-tracing.git", from: "1.7.3"),
        // A client's W3C `traceparent`, parsed into the server's log metadata.
        .package(url: "https://github.com/swift-otel/swift-w3c-trace-context.git", from: "1.0.0"),
        // Tests only: to parse docker-compose.yml.
        .package(url: "https://github.com/jpsim/Yams.git", from: "6.2.2"),
        // `swift package generate-documentation`: the DocC catalogs of Duplex, DuplexServer,
        // DuplexRecordReplay and DuplexTesting (CI builds them with warnings as errors).
        .package(url: "https://github.com/swiftlang/swift-docc-plugin.git", from: "1.5.0"),
    ],
    targets: [
        // zlib, as DuplexWire's permessage-deflate calls it (dictionaries included, which
        // compress-nio does not expose).
        .target(
            name: "CDuplexZlib",
            linkerSettings: [.linkedLibrary("z")]
        ),
        // The wire schema shared by server and clients: Foundation only.
        .target(
            name: "DuplexSchema",
            swiftSettings: swiftSettings
        ),
        // The WebSocket protocol engine both ends run (RFC 6455 and 7692 as a state machine,
        // zlib with bounded inflate): the client and the server each only carry out its actions.
        .target(
            name: "DuplexWire",
            dependencies: [
                "DuplexSchema",
                "CDuplexZlib",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOWebSocket", package: "swift-nio"),
                // A WebSocket over an HTTP/2 stream (RFC 8441) reads and writes HTTP parts.
                .product(name: "NIOHTTPTypes", package: "swift-nio-extras"),
            ],
            swiftSettings: swiftSettings
        ),
        // The client library: WebSocket and SSE over SwiftNIO.
        .target(
            name: "Duplex",
            dependencies: [
                "DuplexSchema",
                "DuplexWire",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOWebSocket", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "NIOTLS", package: "swift-nio"),
                // WebSockets over HTTP/2 (RFC 8441), sharing one connection per origin.
                .product(name: "NIOHTTP2", package: "swift-nio-http2"),
                .product(name: "NIOHTTPTypes", package: "swift-nio-extras"),
                .product(name: "NIOHTTPTypesHTTP2", package: "swift-nio-extras"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
                // Proxies: the CONNECT handler and SOCKS5.
                .product(name: "NIOExtras", package: "swift-nio-extras"),
                .product(name: "NIOSOCKS", package: "swift-nio-extras"),
                // SHA-256 for public-key pins.
                .product(name: "Crypto", package: "swift-crypto"),
                // The client's metrics (a no-op unless the application bootstraps a backend).
                .product(name: "CoreMetrics", package: "swift-metrics"),
            ],
            swiftSettings: clientSettings
        ),
        // Closure-based adapters over the client library.
        .target(
            name: "DuplexCallbacks",
            dependencies: ["Duplex", "DuplexSchema"],
            swiftSettings: swiftSettings
        ),
        // Combine publishers over the client library (OpenCombine where Combine is missing).
        .target(
            name: "DuplexCombine",
            dependencies: [
                "Duplex",
                "DuplexSchema",
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "OpenCombine", package: "OpenCombine", condition: .when(platforms: [.linux, .windows, .android, .wasi])),
            ],
            swiftSettings: swiftSettings
        ),
        // The host every route is served on: the front door (connection limits, request heads,
        // TLS, HTTP/2), the route table, WebSockets and SSE streams on the connection's event
        // loop with their bounded writers, the connection registry and the server's metrics. It
        // knows no chat and no database.
        .target(
            name: "DuplexHost",
            dependencies: [
                "DuplexSchema",
                "DuplexWire",
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HummingbirdCore", package: "hummingbird"),
                .product(name: "HummingbirdWebSocket", package: "hummingbird-websocket"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "DequeModule", package: "swift-collections"),
                .product(name: "Atomics", package: "swift-atomics"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "CoreMetrics", package: "swift-metrics"),
                .product(name: "W3CTraceContext", package: "swift-w3c-trace-context"),
                .product(name: "Tracing", package: "swift-distributed-tracing"),
                .product(name: "Instrumentation", package: "swift-distributed-tracing"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOWebSocket", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOHTTPTypes", package: "swift-nio-extras"),
                .product(name: "NIOHTTPTypesHTTP1", package: "swift-nio-extras"),
                .product(name: "NIOHTTPTypesHTTP2", package: "swift-nio-extras"),
                .product(name: "NIOHTTP2", package: "swift-nio-http2"),
                .product(name: "NIOTLS", package: "swift-nio"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
            ],
            swiftSettings: swiftSettings
        ),
        // Record and replay on the host: a recording server's routes (every request forwarded
        // with the client library and written to a cassette) and a replaying one's. The `duplex`
        // CLI serves them with no chat server; DuplexServer re-exports them.
        .target(
            name: "DuplexRecordReplay",
            dependencies: [
                "DuplexHost",
                "Duplex",
                // The proxy routes that `duplex intercept` serves beside the recorder's server.
                "DuplexScripted",
                "DuplexSchema",
                "DuplexWire",
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HummingbirdWebSocket", package: "hummingbird-websocket"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "DequeModule", package: "swift-collections"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOWebSocket", package: "swift-nio"),
            ],
            swiftSettings: swiftSettings
        ),
        // Chat rooms on the host: the room ledger and the rooms that deliver its events, the
        // members' service, the store interface and the memory store. It knows no server: the
        // server (DuplexServer) routes to it, and the PostgreSQL store implements its interface.
        .target(
            name: "DuplexChat",
            dependencies: [
                "DuplexHost",
                "DuplexSchema",
                "DuplexWire",
                .product(name: "HTTPTypes", package: "swift-http-types"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "DequeModule", package: "swift-collections"),
                .product(name: "OrderedCollections", package: "swift-collections"),
                .product(name: "CoreMetrics", package: "swift-metrics"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOWebSocket", package: "swift-nio"),
            ],
            swiftSettings: swiftSettings
        ),
        // Routes of the user's own protocol (`ScriptedRoute`, scripts, the journal): a route set
        // on the host, which the server adds to its table. Its proxy routes reach the user's real
        // backend with the Duplex client.
        .target(
            name: "DuplexScripted",
            dependencies: [
                "DuplexHost",
                "Duplex",
                "DuplexSchema",
                "DuplexWire",
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
                .product(name: "DequeModule", package: "swift-collections"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOWebSocket", package: "swift-nio"),
            ],
            swiftSettings: swiftSettings
        ),
        // The loopback server (echo, chat rooms, SSE, the demo page) as a library.
        .target(
            name: "DuplexServer",
            dependencies: [
                "DuplexHost",
                "DuplexChat",
                "DuplexRecordReplay",
                "DuplexScripted",
                "DuplexSchema",
                "DuplexWire",
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HummingbirdCore", package: "hummingbird"),
                .product(name: "HummingbirdWebSocket", package: "hummingbird-websocket"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "DequeModule", package: "swift-collections"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "X509", package: "swift-certificates"),
                .product(name: "Crypto", package: "swift-crypto"),
                // RSA, for the weak-key TLS fault's 1,024-bit key.
                .product(name: "_CryptoExtras", package: "swift-crypto"),
                .product(name: "SwiftASN1", package: "swift-asn1"),
                .product(name: "OrderedCollections", package: "swift-collections"),
                .product(name: "CoreMetrics", package: "swift-metrics"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "W3CTraceContext", package: "swift-w3c-trace-context"),
                .product(name: "Tracing", package: "swift-distributed-tracing"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOWebSocket", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOHTTPTypes", package: "swift-nio-extras"),
                .product(name: "NIOHTTPTypesHTTP1", package: "swift-nio-extras"),
                .product(name: "NIOHTTPTypesHTTP2", package: "swift-nio-extras"),
                .product(name: "NIOHTTP2", package: "swift-nio-http2"),
                .product(name: "NIOTLS", package: "swift-nio"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
            ],
            resources: [.copy("Resources/index.html")],
            swiftSettings: swiftSettings
        ),
        // The PostgreSQL room store (`duplex-server --store postgres://…`), in a library of its own
        // so that a server without it, and every user of DuplexTesting, links no PostgresNIO.
        .target(
            name: "DuplexPostgres",
            dependencies: [
                "DuplexChat",
                "DuplexSchema",
                "DuplexWire",
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
            ],
            swiftSettings: swiftSettings
        ),
        // The testbed's TCP fault proxy, in a target of its own so that the `duplex` CLI uses it
        // without linking the server. `import DuplexTesting` brings it too.
        .target(
            name: "DuplexFaultProxy",
            dependencies: [
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
            ],
            swiftSettings: swiftSettings
        ),
        // Helpers users import in their own tests.
        .target(
            name: "DuplexTesting",
            dependencies: [
                "DuplexFaultProxy",
                "Duplex",
                "DuplexSchema",
                "DuplexServer",
                "DuplexWire",
                // A simulated network's servers run scripted routes in the host's own WebSocket
                // handler, on a channel and an event loop of the network's clock.
                "DuplexHost",
                "DuplexScripted",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOWebSocket", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                // The test clock's queue of sleeps and events, and its executor's jobs.
                .product(name: "HeapModule", package: "swift-collections"),
                .product(name: "DequeModule", package: "swift-collections"),
            ],
            swiftSettings: swiftSettings
        ),
        .executableTarget(
            name: "duplex-server",
            dependencies: [
                "DuplexServer",
                "DuplexRecordReplay",
                "DuplexPostgres",
                "DuplexSchema",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "UnixSignals", package: "swift-service-lifecycle"),
                .product(name: "NIOCore", package: "swift-nio"),
            ],
            path: "Server",
            swiftSettings: swiftSettings
        ),
        // The `duplex` command-line client: chat, echo, ws, listen, proxy, and record and replay
        // (served on the host, with no chat server).
        .executableTarget(
            name: "duplex",
            dependencies: [
                "Duplex",
                "DuplexSchema",
                "DuplexFaultProxy",
                "DuplexRecordReplay",
                "DuplexScripted",
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "UnixSignals", package: "swift-service-lifecycle"),
                .product(name: "Logging", package: "swift-log"),
            ],
            path: "Client",
            swiftSettings: swiftSettings
        ),
        // Autobahn|Testsuite's fuzzing server drives the client through this (Tests/Autobahn/run.sh).
        .executableTarget(
            name: "autobahn-client",
            dependencies: ["Duplex", "DuplexSchema"],
            path: "Tests/Autobahn/AutobahnClient",
            swiftSettings: swiftSettings
        ),
        // Fuzz targets for libFuzzer (Tests/Fuzz/run.sh builds them with --sanitize=fuzzer); a
        // plain debug build replays the checked-in corpora through the same checks.
        .executableTarget(
            name: "duplex-fuzz",
            dependencies: [
                "DuplexHost",
                "DuplexChat",
                "Duplex",
                "DuplexSchema",
                "DuplexServer",
                "DuplexWire",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOEmbedded", package: "swift-nio"),
                .product(name: "NIOWebSocket", package: "swift-nio"),
            ],
            path: "Tests/Fuzz/DuplexFuzz",
            swiftSettings: swiftSettings
        ),
        // The benchmarks are a package of their own: Benchmarks/Package.swift.
        .testTarget(
            name: "DuplexTests",
            dependencies: [
                "DuplexHost",
                "Duplex",
                // Built for the tests that run the binaries as child processes.
                "duplex",
                "duplex-server",
                // Its corpora are replayed by FuzzCorpusTests.
                "duplex-fuzz",
                "DuplexCallbacks",
                "DuplexCombine",
                "DuplexSchema",
                "DuplexServer",
                "DuplexTesting",
                "TestSupport",
                .product(name: "NIOCore", package: "swift-nio"),
                // The client's handlers on embedded channels, on virtual time.
                .product(name: "NIOEmbedded", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOWebSocket", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "Logging", package: "swift-log"),
                // A test backend for the client's metrics, and one of the tests' own.
                .product(name: "MetricsTestKit", package: "swift-metrics"),
                .product(name: "CoreMetrics", package: "swift-metrics"),
                // The DuplexServer article's example runs the server in a ServiceGroup.
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            swiftSettings: swiftSettings
        ),
        // The seeds' own usage examples, compiled with only the import changed, and run against
        // the in-process server. Warnings are expected here: they are the seeds' deprecated
        // spellings (each names its replacement) and their redundant `try`/`await`.
        .testTarget(
            name: "SeedExamplesTests",
            dependencies: [
                "Duplex",
                "DuplexCallbacks",
                "DuplexCombine",
                "DuplexSchema",
                "DuplexServer",
                "DuplexTesting",
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "OpenCombine", package: "OpenCombine", condition: .when(platforms: [.linux, .windows, .android, .wasi])),
            ]
            // No upcoming-feature settings: the seeds are plain Swift 6 user code.
        ),
        .testTarget(
            name: "DuplexSchemaTests",
            dependencies: ["DuplexSchema"],
            swiftSettings: swiftSettings
        ),
        // The protocol engine on its own: every RFC 6455 rule, for both roles.
        .testTarget(
            name: "DuplexWireTests",
            dependencies: [
                "DuplexWire",
                "DuplexSchema",
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOWebSocket", package: "swift-nio"),
            ],
            swiftSettings: swiftSettings
        ),
        // The fault proxy's values and its chaos client, without a server.
        .testTarget(
            name: "DuplexFaultProxyTests",
            dependencies: [
                "DuplexFaultProxy",
                // withDeadline, the one timeout race.
                "DuplexWire",
                // The proxy between the real client and the real server.
                "Duplex",
                "DuplexSchema",
                "DuplexServer",
                "DuplexTesting",
                "TestSupport",
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
            ],
            swiftSettings: swiftSettings
        ),
        // Helpers the test targets share: a built program run as a child process, a throwaway
        // PostgreSQL cluster, a port that refuses connections, scripted WebSocket and HTTP peers, a
        // certificate made by openssl.
        .target(
            name: "TestSupport",
            dependencies: [
                "Duplex",
                "DuplexTesting",
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOWebSocket", package: "swift-nio"),
            ],
            path: "Tests/TestSupport",
            swiftSettings: swiftSettings
        ),
        // The `duplex` and `duplex-server` programs, run as a user runs them, and the compose file's
        // commands parsed with their own argument parsers.
        .testTarget(
            name: "DuplexCLITests",
            dependencies: [
                "duplex",
                "duplex-server",
                "Duplex",
                "DuplexSchema",
                "DuplexServer",
                "DuplexPostgres",
                "DuplexTesting",
                "TestSupport",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Yams", package: "Yams"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
            ],
            swiftSettings: swiftSettings
        ),
        // The PostgreSQL store: its helpers (the seq template, the batcher, the database clock,
        // the configuration it parses) and, on a throwaway cluster, several duplex-server
        // processes sharing rooms (PostgresStoreTests).
        .testTarget(
            name: "DuplexPostgresTests",
            dependencies: [
                "DuplexPostgres",
                "DuplexChat",
                "DuplexServer",
                "DuplexSchema",
                "DuplexTesting",
                "Duplex",
                "TestSupport",
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
            ],
            swiftSettings: swiftSettings
        ),
        // Record and replay's own rules: how a replay matches a client's message and which
        // session a connection gets. (Recording and replaying through a server is checked in
        // DuplexServerTests, which runs them as users do.)
        .testTarget(
            name: "DuplexRecordReplayTests",
            dependencies: ["DuplexRecordReplay", "DuplexSchema"],
            swiftSettings: swiftSettings
        ),
        // Scripted routes on their own: script files and the journal.
        .testTarget(
            name: "DuplexScriptedTests",
            dependencies: [
                "DuplexScripted",
                // TLSTrust, which a proxy route's upstream takes
                "Duplex",
                // withTimeout
                "DuplexTesting",
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
            ],
            swiftSettings: swiftSettings
        ),
        // The host on its own: the route table, the writers, the frames, the TLS write
        // coalescing, on embedded channels.
        .testTarget(
            name: "DuplexHostTests",
            dependencies: [
                "DuplexHost",
                "DuplexSchema",
                "DuplexWire",
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
                // The server's counters, into a test backend.
                .product(name: "MetricsTestKit", package: "swift-metrics"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOEmbedded", package: "swift-nio"),
                .product(name: "NIOWebSocket", package: "swift-nio"),
            ],
            swiftSettings: swiftSettings
        ),
        // Chat on its own: the room ledger's rules, the rooms' delivery and fan-out, a replica's
        // apply, gap and restart, without a server.
        .testTarget(
            name: "DuplexChatTests",
            dependencies: [
                "DuplexChat",
                "DuplexHost",
                "DuplexSchema",
                "DuplexTesting",
                .product(name: "DequeModule", package: "swift-collections"),
                .product(name: "OrderedCollections", package: "swift-collections"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOEmbedded", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOWebSocket", package: "swift-nio"),
            ],
            swiftSettings: swiftSettings
        ),
        // Every Swift snippet of README, docs/ and the DocC articles, as shown (imports included),
        // in a file of its own or inside one: `SnippetsTests` checks that each is here, and the
        // target builds them (and runs the ones that are tests) with the products a user adds.
        .testTarget(
            name: "DuplexSnippetTests",
            dependencies: [
                "Duplex",
                "DuplexCallbacks",
                "DuplexCombine",
                "DuplexServer",
                "DuplexPostgres",
                "DuplexTesting",
                "DuplexSchema",
                // `onThread`: the manifest check's `swift package` runs off the cooperative pool.
                "TestSupport",
            ],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "DuplexServerTests",
            dependencies: [
                // The client, for the tests that drive the server as users do, and the helpers
                // the test targets share (scripted peers, the duplex-server program).
                "Duplex",
                "TestSupport",
                // Run as a child process by ServerProcessTests.
                "duplex-server",
                "DuplexHost",
                "DuplexChat",
                "DuplexServer",
                "DuplexWire",
                "DuplexTesting",
                "DuplexSchema",
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOEmbedded", package: "swift-nio"),
                .product(name: "NIOWebSocket", package: "swift-nio"),
                .product(name: "CompressNIO", package: "compress-nio"),
                .product(name: "Logging", package: "swift-log"),
                // An HTTP/2 client over TLS for the server's h2 tests.
                .product(name: "NIOHTTP2", package: "swift-nio-http2"),
                .product(name: "NIOHTTPTypes", package: "swift-nio-extras"),
                .product(name: "NIOHTTPTypesHTTP2", package: "swift-nio-extras"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "NIOTLS", package: "swift-nio"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
                // A test tracer for the connections' spans.
                .product(name: "InMemoryTracing", package: "swift-distributed-tracing"),
            ],
            swiftSettings: swiftSettings
        ),
    ]
)
