import HTTPTypes
import Hummingbird
import Logging
import NIOEmbedded
import Testing

@testable import DuplexHost

/// The one matcher: `*` as one segment, the precedence, and the same answers as Hummingbird's
/// router on generated patterns and paths.
@Suite("RoutePattern")
struct RoutePatternTests {
    @Test("* matches exactly one segment, anywhere: /feed/* serves /feed/x, not /feed or /feed/a/b; /feed/*/deep serves /feed/x/deep")
    func wildcard() {
        let feed = RoutePattern("/feed/*")
        #expect(feed.match("/feed/x") == [:])
        #expect(feed.match("/feed/abc") == [:])
        #expect(feed.match("/feed/a/b") == nil)
        #expect(feed.match("/feed") == nil)
        let deep = RoutePattern("/feed/*/deep")
        #expect(deep.match("/feed/x/deep") == [:])
        #expect(deep.match("/feed/x/shallow") == nil)
        #expect(deep.description == "/feed/*/deep")
        #expect(RoutePattern("/*/:id").match("/users/7") == ["id": "7"])
    }

    @Test("precedence: a literal over a :capture over * over **, at the first segment where they differ")
    func precedence() {
        #expect(RoutePattern("/feed/x").isMoreSpecific(than: RoutePattern("/feed/:name")))
        #expect(RoutePattern("/feed/:name").isMoreSpecific(than: RoutePattern("/feed/*")))
        #expect(RoutePattern("/feed/*").isMoreSpecific(than: RoutePattern("/feed/**")))
        #expect(!RoutePattern("/feed/*").isMoreSpecific(than: RoutePattern("/feed/:name")))
        var table = RouteTable()
        table.add(["/feed/**", "/feed/*", "/feed/:name", "/feed/x"].map { pattern in .get(pattern) { _, _ in Response(status: .ok) } })
        #expect(table.plain(.get, "/feed/x")?.route.pattern.description == "/feed/x")
        #expect(table.plain(.get, "/feed/y")?.route.pattern.description == "/feed/:name")
        #expect(table.plain(.get, "/feed/y")?.captures == ["name": "y"])
        #expect(table.plain(.get, "/feed/y/z")?.route.pattern.description == "/feed/**")
        #expect(table.plain(.post, "/feed/x") == nil, "another method")
    }

    /// A small deterministic generator (SplitMix64), so a failure names a case that comes back.
    struct Generator {
        var state: UInt64
        mutating func next(_ bound: Int) -> Int {
            state &+= 0x9E37_79B9_7F4A_7C15
            var z = state
            z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
            z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
            return Int((z ^ (z >> 31)) % UInt64(bound))
        }
    }

    /// Patterns of one to three segments (a literal, and a capture or `*`), some ending in
    /// `**`. A set has captures or `*`, not both: Hummingbird's router refuses a capture and a
    /// `*` in the same place (a fatal error), where the table takes the capture first.
    static func patterns(_ generator: inout Generator) -> [String] {
        var patterns: Set<String> = []
        let count = 2 + generator.next(4)
        let wildcards = generator.next(2) == 0
        while patterns.count < count {
            let length = 1 + generator.next(3)
            var segments = (0..<length).map { index in ["a", "b", wildcards ? "*" : ":p\(index)"][generator.next(3)] }
            if generator.next(4) == 0 { segments.append("**") }
            let pattern = "/" + segments.joined(separator: "/")
            if !patterns.contains(where: { Self.hummingbirdRefuses(pattern, $0) }) { patterns.insert(pattern) }
        }
        return patterns.sorted()
    }

    /// Whether Hummingbird refuses the two in one router: after the same segments, two kinds
    /// of non-literal segment in the same place (a capture or `*`, and `**`).
    static func hummingbirdRefuses(_ one: String, _ other: String) -> Bool {
        let mine = one.split(separator: "/")
        let theirs = other.split(separator: "/")
        for (a, b) in zip(mine, theirs) {
            if a == b { continue }
            let literal: (Substring) -> Bool = { !$0.hasPrefix(":") && $0 != "*" && $0 != "**" }
            return !literal(a) && !literal(b)
        }
        return false
    }

    /// Every path of up to four segments from a, b and c.
    static let paths: [String] = {
        var paths = ["/"]
        var level = [""]
        for _ in 1...4 {
            level = level.flatMap { prefix in ["a", "b", "c"].map { prefix + "/" + $0 } }
            paths += level
        }
        return paths
    }()

    @Test(
        "on generated patterns and paths, wherever Hummingbird's router finds a route the table picks the same, with the same captures; where it gives up (no backtracking), the table finds one"
    )
    func sameAsHummingbird() async throws {
        var generator = Generator(state: 61)
        var compared = 0
        var answered = 0
        var backtracked = 0
        var disagreements: [String] = []
        for _ in 0..<60 {
            let patterns = Self.patterns(&generator)
            var table = RouteTable()
            let router = Router(context: BasicRequestContext.self)
            for pattern in patterns {
                table.add([.get(pattern) { _, _ in Response(status: .ok) }])
                router.get(RouterPath(pattern)) { _, context -> Response in
                    var headers = HTTPFields()
                    headers[HTTPField.Name("x-pattern")!] = pattern
                    // The pattern's own captures: Hummingbird's parameters can keep one from a
                    // branch it tried and left.
                    let names = pattern.split(separator: "/").filter { $0.hasPrefix(":") }.map { $0.dropFirst() }
                    let captures = context.parameters.filter { names.contains($0.key) }
                        .map { "\($0.key)=\($0.value)" }.sorted().joined(separator: ",")
                    headers[HTTPField.Name("x-captures")!] = captures
                    return Response(status: .ok, headers: headers)
                }
            }
            let responder = router.buildResponder()
            for path in Self.paths {
                let request = Request(
                    head: HTTPRequest(method: .get, scheme: "http", authority: "localhost", path: path), body: .init(buffer: .init()))
                let context = BasicRequestContext(source: ApplicationRequestContextSource(channel: EmbeddedChannel(), logger: Logger(label: "test")))
                let theirs: String?
                do {
                    let response = try await responder.respond(to: request, context: context)
                    theirs = response.headers[HTTPField.Name("x-pattern")!].map { "\($0) \(response.headers[HTTPField.Name("x-captures")!] ?? "")" }
                } catch {
                    theirs = nil
                }
                let ours = table.plain(.get, path).map { found in
                    found.route.pattern.description + " " + found.captures.map { "\($0.key)=\($0.value)" }.sorted().joined(separator: ",")
                }
                compared += 1
                if theirs != nil { answered += 1 }
                if theirs == nil, ours != nil {
                    // Hummingbird took a literal that led nowhere and did not go back.
                    backtracked += 1
                } else if ours != theirs {
                    disagreements.append("\(patterns) \(path): ours \(ours ?? "404"), Hummingbird's \(theirs ?? "404")")
                }
            }
        }
        #expect(compared > 5000)
        #expect(answered > 1000, "Hummingbird found a route for \(answered) of \(compared)")
        #expect(backtracked > 0, "the generated cases include paths only backtracking finds")
        #expect(disagreements.isEmpty, "\(disagreements.count) of \(compared):\n\(disagreements.prefix(10).joined(separator: "\n"))")
    }
}
