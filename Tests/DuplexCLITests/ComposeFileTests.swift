import ArgumentParser
import DuplexPostgres
import DuplexServer
@testable import duplex
@testable import duplex_server
import Foundation
import Testing
import Yams

/// No Docker engine runs where the tests do, so the compose file is checked here: its services,
/// ports and commands must match what the CLIs really accept.
@Suite("docker-compose.yml and Dockerfile")
struct ComposeFileTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    struct Service {
        var name: String
        var fields: [String: Any]

        /// The command line the container runs: entrypoint, then command.
        var argv: [String] {
            Self.list(fields["entrypoint"]) + Self.list(fields["command"])
        }

        static func list(_ value: Any?) -> [String] {
            switch value {
            case let items as [Any]: items.map { "\($0)" }
            case let text as String: text.split(separator: " ").map(String.init)
            default: []
            }
        }
    }

    func services() throws -> [String: Service] {
        let text = try String(contentsOf: Self.root.appendingPathComponent("docker-compose.yml"), encoding: .utf8)
        let document = try #require(try Yams.load(yaml: text) as? [String: Any])
        let services = try #require(document["services"] as? [String: Any])
        var result: [String: Service] = [:]
        for (name, value) in services {
            result[name] = Service(name: name, fields: try #require(value as? [String: Any], "service \(name)"))
        }
        return result
    }

    @Test("the server service runs duplex-server with flags it accepts, on every interface, and publishes its port")
    func server() throws {
        let server = try #require(try services()["server"])
        let argv = server.argv
        #expect(argv.first == "duplex-server")
        let command = try DuplexServerCommand.parse(Array(argv.dropFirst()))
        #expect(command.host == "0.0.0.0", "inside a container the server must listen on every interface")
        let ports = Service.list(server.fields["ports"])
        #expect(ports.contains("\(command.port):\(command.port)"), "ports \(ports) must publish --port \(command.port)")
    }

    @Test("the cluster profile: PostgreSQL, and two duplex-server nodes whose --store names it, on ports of their own")
    func cluster() throws {
        let services = try services()
        let postgres = try #require(services["postgres"])
        let environment = try #require(postgres.fields["environment"] as? [String: Any])
        #expect(Service.list(postgres.fields["profiles"]) == ["cluster"])
        let nodes = services.values.filter { $0.argv.first == "duplex-server" && $0.name != "server" }
        #expect(Set(nodes.map(\.name)) == ["node1", "node2"])
        var published: Set<String> = []
        for node in nodes {
            let command = try DuplexServerCommand.parse(Array(node.argv.dropFirst()))
            let configuration = try command.storeConfiguration
            guard let store = configuration.postgres else {
                Issue.record("\(node.name) has no postgres store")
                continue
            }
            #expect(store.host == "postgres" && store.port == 5432, "\(node.name)")
            #expect(store.username == "\(environment["POSTGRES_USER"] ?? "")" && store.password == "\(environment["POSTGRES_PASSWORD"] ?? "")")
            #expect(store.database == "\(environment["POSTGRES_DB"] ?? "")")
            #expect(command.host == "0.0.0.0")
            #expect(Service.list(node.fields["profiles"]) == ["cluster"])
            let dependsOn = try #require(node.fields["depends_on"] as? [String: Any])
            #expect(dependsOn["postgres"] != nil, "\(node.name) waits for the database")
            let ports = Service.list(node.fields["ports"])
            #expect(ports.count == 1 && ports[0].hasSuffix(":\(command.port)"), "\(node.name): \(ports)")
            published.formUnion(ports.map { String($0.split(separator: ":")[0]) })
        }
        #expect(published.count == 2, "each node on a port of its own")
    }

    @Test("every client service runs a duplex subcommand with flags it accepts, against the server service's port")
    func clients() throws {
        let services = try services()
        let server = try #require(services["server"])
        let serverPort = try DuplexServerCommand.parse(Array(server.argv.dropFirst())).port
        let clients = services.values.filter { $0.argv.first == "duplex" }
        #expect(!clients.isEmpty)
        for client in clients {
            let argv = client.argv
            #expect(argv.first == "duplex", "\(client.name)")
            // Parses exactly as the binary would; a flag the CLI lacks throws here.
            let parsed = try DuplexCommand.parseAsRoot(Array(argv.dropFirst()))
            let urls = argv.filter { $0.contains("://") }
            #expect(urls.count == 1, "\(client.name)")
            for url in urls {
                let components = try #require(URLComponents(string: url))
                #expect(components.host == "server" && components.port == serverPort, "\(client.name): \(url)")
            }
            #expect(Service.list(client.fields["depends_on"]).contains("server"), "\(client.name)")
            if let chat = parsed as? ChatCommand {
                #expect(client.fields["stdin_open"] as? Bool == true && client.fields["tty"] as? Bool == true, "chat needs a terminal")
                #expect(chat.url.hasPrefix("ws://server:"))
            }
        }
        // The README's `docker compose run --rm chat --name alice` replaces the command: it must parse too.
        let chat = try #require(services["chat"])
        _ = try DuplexCommand.parseAsRoot(Array(Service.list(chat.fields["entrypoint"]).dropFirst()) + ["--name", "alice"])
    }

    @Test("the Dockerfile builds both binaries from a Swift 6 image, ships them in a slim image, and runs the server on the published port")
    func dockerfile() throws {
        let text = try String(contentsOf: Self.root.appendingPathComponent("Dockerfile"), encoding: .utf8)
        let froms = text.split(separator: "\n").filter { $0.hasPrefix("FROM ") }
        #expect(froms.count == 2)
        #expect(froms.first?.contains("swift:6.") == true)
        #expect(froms.last?.contains("swift") == false, "the runtime image needs no toolchain")
        #expect(text.contains("--product duplex-server") && text.contains("--product duplex "))
        let serverPort = try DuplexServerCommand.parse(Array(try #require(try services()["server"]).argv.dropFirst())).port
        #expect(text.contains("EXPOSE \(serverPort)"))
        let cmd = try #require(text.split(separator: "\n").last { $0.hasPrefix("CMD ") })
        let argv = try #require(try JSONSerialization.jsonObject(with: Data(cmd.dropFirst(4).utf8)) as? [String])
        #expect(argv.first == "duplex-server")
        #expect(try DuplexServerCommand.parse(Array(argv.dropFirst())).port == serverPort)
    }
}
