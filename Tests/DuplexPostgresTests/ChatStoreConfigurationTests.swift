import DuplexPostgres
import DuplexServer
import Testing

/// What a store configuration says of itself and how it compares: a password never shows.
@Suite("ChatStoreConfiguration")
struct ChatStoreConfigurationTests {
    @Test("a PostgreSQL store describes itself by its URL without the password; equal settings compare equal, others not")
    func descriptionAndEquality() throws {
        let store = try ChatStoreConfiguration(parsing: "postgres://duplex:s3cret@127.0.0.1:5432/rooms")
        #expect(store.description == "postgres postgres://duplex:***@127.0.0.1:5432/rooms")
        #expect(!store.description.contains("s3cret"))
        #expect(store.postgres?.password == "s3cret")
        let same = try ChatStoreConfiguration(parsing: "postgres://duplex:s3cret@127.0.0.1:5432/rooms")
        let other = try ChatStoreConfiguration(parsing: "postgres://duplex:s3cret@127.0.0.1:5432/other")
        let memory = try ChatStoreConfiguration(parsing: "memory")
        #expect(store == same)
        #expect(store != other)
        #expect(store != .memory)
        #expect(memory == .memory)
        #expect(memory.description == "memory")
    }
}
