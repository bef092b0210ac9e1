// swift-tools-version:6.2
// The benchmarks' own package: the Swift executables the suites run (Benchmarks/README.md), and
// the dependencies only they need (swift-websocket's WSClient, a bare Hummingbird server), so that
// a package depending on Duplex resolves none of them. Duplex itself is the package one folder up.
import PackageDescription

// A path dependency's identity is its folder's name (`duplex` in a clone named so, `main` in
// another): read it from where this package is.
let duplexPackage = String(Context.packageDirectory.split(separator: "/").dropLast().last ?? "duplex")

let swiftSettings: [SwiftSetting] = [
    .enableUpcomingFeature("ExistentialAny"),
    .enableUpcomingFeature("MemberImportVisibility"),
    .enableUpcomingFeature("InternalImportsByDefault"),
]

let package = Package(
    name: "duplex-benchmarks",
    platforms: [.macOS(.v14)],
    dependencies: [
        .package(path: ".."),
        .package(url: "https://github.com/hummingbird-project/hummingbird.git", from: "2.28.1", traits: []),
        .package(url: "https://github.com/hummingbird-project/hummingbird-websocket.git", from: "2.8.1"),
        // swift-websocket's WSClient, a peer of the Duplex client.
        .package(url: "https://github.com/hummingbird-project/swift-websocket.git", from: "1.6.2"),
        .package(url: "https://github.com/apple/swift-nio.git", from: "2.101.2"),
        .package(url: "https://github.com/apple/swift-log.git", from: "1.16.2"),
        // ordo-one's package-benchmark, for the micro-benchmarks (`swift package benchmark`).
        .package(url: "https://github.com/ordo-one/benchmark.git", from: "1.38.1", traits: ["MallocInterposer"]),
    ],
    targets: [
        // Micro-benchmarks of the wire schema's public code paths (package-benchmark finds its
        // targets under Benchmarks/ in the package's folder, hence Benchmarks/Benchmarks/).
        .executableTarget(
            name: "SchemaBenchmarks",
            dependencies: [
                .product(name: "Benchmark", package: "benchmark"),
                .product(name: "DuplexSchema", package: duplexPackage),
            ],
            path: "Benchmarks/SchemaBenchmarks",
            swiftSettings: swiftSettings,
            plugins: [.plugin(name: "BenchmarkPlugin", package: "benchmark")]
        ),
        .executableTarget(
            name: "client-echo-benchmark",
            dependencies: [
                .product(name: "Duplex", package: duplexPackage),
                .product(name: "DuplexServer", package: duplexPackage),
                .product(name: "DuplexTesting", package: duplexPackage),
            ],
            path: "ClientEchoBenchmark",
            swiftSettings: swiftSettings
        ),
        .executableTarget(
            name: "simulated-time-benchmark",
            dependencies: [
                .product(name: "Duplex", package: duplexPackage),
                .product(name: "DuplexTesting", package: duplexPackage),
                .product(name: "Logging", package: "swift-log"),
            ],
            path: "SimulatedTimeBenchmark",
            swiftSettings: swiftSettings
        ),
        .executableTarget(
            name: "client-peers-benchmark",
            dependencies: [
                .product(name: "Duplex", package: duplexPackage),
                .product(name: "WSClient", package: "swift-websocket"),
                .product(name: "Logging", package: "swift-log"),
            ],
            path: "ClientPeersBenchmark",
            swiftSettings: swiftSettings
        ),
        .executableTarget(
            name: "hummingbird-echo-server",
            dependencies: [
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HummingbirdWebSocket", package: "hummingbird-websocket"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
            ],
            path: "HummingbirdEchoServer",
            swiftSettings: swiftSettings
        ),
        .executableTarget(
            name: "http2-benchmark",
            dependencies: [
                .product(name: "Duplex", package: duplexPackage),
                .product(name: "DuplexSchema", package: duplexPackage),
            ],
            path: "HTTP2Benchmark",
            swiftSettings: swiftSettings
        ),
        .executableTarget(
            name: "sse-benchmark",
            dependencies: [
                .product(name: "Duplex", package: duplexPackage),
                .product(name: "DuplexSchema", package: duplexPackage),
                .product(name: "DuplexServer", package: duplexPackage),
                .product(name: "DuplexTesting", package: duplexPackage),
            ],
            path: "SSEBenchmark",
            swiftSettings: swiftSettings
        ),
    ]
)
