import DuplexChat
import PostgresNIO

/// `duplex_append_batch` as a prepared statement: each connection parses and plans it once,
/// not once per batch (``PostgresChatStore/commit(_:)``). One row per message of the batch:
/// its 1-based index, its seq (nil when its room is missing), and whether it was a duplicate.
struct AppendBatchStatement: PostgresPreparedStatement {
    static let name = "duplex_append_batch_v\(PostgresChatSchema.version)"
    static let sql = "SELECT o_index, o_seq, o_duplicate FROM duplex_append_batch($1, $2, $3, $4, $5, $6, $7)"
    typealias Row = (Int, Int?, Bool)

    var rooms: [String]
    var prefixes: [String]
    var suffixes: [String]
    var tokenKeys: [String]
    var nameKeys: [String]
    var byName: [Bool]
    var keep: Int

    init(_ batch: [PostgresSayBatcher.Item], keep: Int) {
        rooms = batch.map(\.room)
        prefixes = batch.map(\.prefix)
        suffixes = batch.map(\.suffix)
        tokenKeys = batch.map(\.tokenKey)
        nameKeys = batch.map(\.nameKey)
        byName = batch.map(\.matchByName)
        self.keep = keep
    }

    func makeBindings() throws -> PostgresBindings {
        var bindings = PostgresBindings(capacity: 7)
        bindings.append(rooms)
        bindings.append(prefixes)
        bindings.append(suffixes)
        bindings.append(tokenKeys)
        bindings.append(nameKeys)
        bindings.append(byName)
        bindings.append(keep)
        return bindings
    }

    func decodeRow(_ row: PostgresRow) throws -> Row {
        try row.decode(Row.self)
    }
}
