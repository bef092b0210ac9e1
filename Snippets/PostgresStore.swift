import DuplexPostgres  // the library "DuplexPostgres": only what asks for it links PostgresNIO
import DuplexServer

var configuration = DuplexServerConfiguration()
configuration.store = .postgres(try PostgresStoreConfiguration(url: "postgres://duplex@127.0.0.1:5432/test"))
