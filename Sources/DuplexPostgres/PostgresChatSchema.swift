import PostgresNIO

/// The tables and functions of the PostgreSQL room store, created on start by whichever server
/// gets there first (under an advisory lock, so that servers starting together do not race),
/// idempotently: every statement is `IF NOT EXISTS` or `OR REPLACE`.
///
/// - `duplex_rooms`: one row per room: its epoch (made once, kept for good) and latest seq. The
///   row's lock orders every change to the room, so seqs are gap-free and commit in order.
/// - `duplex_events`: the kept history, the newest `keep` events of each room.
/// - `duplex_dedupe`: the idempotency keys of the messages still in history.
/// - `duplex_members`: the members present, on which server; names are unique per room.
/// - `duplex_nodes`: the servers and the last renewal of their lease.
///
/// `duplex_append` numbers and records an event in one round trip, and notifies every server on
/// the channel `duplex_events` with `@MICROS\nROOM\tSEQ\tCAUSE\tTYPE[\tJSON]`: the database's
/// clock when it sent the notification (microseconds since 1970, for the apply lag; version 3),
/// then the event (the JSON when it fits in a notification). `duplex_append_batch` does the same
/// for a batch of messages, of any rooms, in one transaction (group commit, version 2), one line
/// per event after the clock. `duplex_leave` removes a member and records its `left` event.
enum PostgresChatSchema {
    /// The notification channel.
    static let channel = "duplex_events"

    /// The first line of every notification: `@` and the database's clock in microseconds.
    static let clockLine = "'@' || (extract(epoch FROM clock_timestamp()) * 1000000)::bigint || E'\\n'"

    /// The history kept, trimmed after a call added `added` events to `room`, of the events that
    /// left its window then: `kept` is the newest seq that left (the room's latest seq less
    /// `p_keep`). A bounded range, so the index entries earlier trims left behind, until a vacuum,
    /// are not walked again on every call, which made each call slower than the last (0.5 ms to
    /// 1.9 ms for one message after 17,000). Everything older goes too, about once every 1,024
    /// events (after the kept length shrank, say). Both functions that add events trim with it, so
    /// each event is removed by the call that pushed it out of the window.
    static func trimHistory(room: String, kept: String, added: String) -> String {
        """
        IF (\(kept) + p_keep) / 1024 <> (\(kept) + p_keep - \(added)) / 1024 THEN
            DELETE FROM duplex_events e WHERE e.room = \(room) AND e.seq <= \(kept);
            DELETE FROM duplex_dedupe d WHERE d.room = \(room) AND d.seq <= \(kept);
        ELSE
            DELETE FROM duplex_events e WHERE e.room = \(room) AND e.seq > \(kept) - \(added) AND e.seq <= \(kept);
            DELETE FROM duplex_dedupe d WHERE d.room = \(room) AND d.seq > \(kept) - \(added) AND d.seq <= \(kept);
        END IF;
        """
    }

    /// The schema version this code writes; recorded in `duplex_schema`.
    static let version = 3

    /// The key of the advisory lock held while migrating.
    static let migrationLock = 0x6475_706C_6578  // "duplex"

    /// The statements, in order.
    static let statements: [PostgresQuery] = [
        """
        CREATE TABLE IF NOT EXISTS duplex_schema (version integer NOT NULL)
        """,
        """
        CREATE TABLE IF NOT EXISTS duplex_rooms (
            room text PRIMARY KEY,
            epoch text NOT NULL,
            latest_seq bigint NOT NULL DEFAULT 0,
            created_at timestamptz NOT NULL DEFAULT now()
        )
        """,
        """
        CREATE TABLE IF NOT EXISTS duplex_events (
            room text NOT NULL,
            seq bigint NOT NULL,
            type text NOT NULL,
            json text NOT NULL,
            cause text,
            PRIMARY KEY (room, seq)
        )
        """,
        """
        CREATE TABLE IF NOT EXISTS duplex_dedupe (
            room text NOT NULL,
            key text NOT NULL,
            seq bigint NOT NULL,
            PRIMARY KEY (room, key)
        )
        """,
        "CREATE INDEX IF NOT EXISTS duplex_dedupe_by_seq ON duplex_dedupe (room, seq)",
        """
        CREATE TABLE IF NOT EXISTS duplex_nodes (
            node text PRIMARY KEY,
            started_at timestamptz NOT NULL DEFAULT now(),
            last_seen timestamptz NOT NULL DEFAULT now()
        )
        """,
        """
        CREATE TABLE IF NOT EXISTS duplex_members (
            session text PRIMARY KEY,
            room text NOT NULL,
            name text NOT NULL,
            token text NOT NULL,
            node text NOT NULL,
            joined_at timestamptz NOT NULL DEFAULT now(),
            UNIQUE (room, name)
        )
        """,
        "CREATE INDEX IF NOT EXISTS duplex_members_by_node ON duplex_members (node)",
        """
        CREATE OR REPLACE FUNCTION duplex_append(
            p_room text, p_type text, p_prefix text, p_suffix text,
            p_lookup text[], p_keys text[], p_cause text, p_keep bigint,
            OUT o_seq bigint, OUT o_duplicate boolean
        ) LANGUAGE plpgsql
        -- Every statement below finds its rows by key: one plan serves every call.
        SET plan_cache_mode = force_generic_plan AS $$
        DECLARE
            v_json text;
            v_payload text;
            v_kept bigint;
        BEGIN
            PERFORM 1 FROM duplex_rooms r WHERE r.room = p_room FOR UPDATE;
            IF NOT FOUND THEN
                RAISE EXCEPTION 'duplex: no room %', p_room;
            END IF;
            IF cardinality(p_lookup) > 0 THEN
                SELECT d.seq INTO o_seq FROM duplex_dedupe d
                    WHERE d.room = p_room AND d.key = ANY (p_lookup) ORDER BY d.seq LIMIT 1;
                IF FOUND THEN
                    o_duplicate := true;
                    RETURN;
                END IF;
            END IF;
            UPDATE duplex_rooms r SET latest_seq = r.latest_seq + 1 WHERE r.room = p_room
                RETURNING r.latest_seq INTO o_seq;
            o_duplicate := false;
            v_json := p_prefix || o_seq || p_suffix;
            INSERT INTO duplex_events (room, seq, type, json, cause) VALUES (p_room, o_seq, p_type, v_json, p_cause);
            IF cardinality(p_keys) > 0 THEN
                INSERT INTO duplex_dedupe (room, key, seq) SELECT p_room, k, o_seq FROM unnest(p_keys) AS k
                    ON CONFLICT (room, key) DO UPDATE SET seq = EXCLUDED.seq;
            END IF;
            v_kept := o_seq - p_keep;
            \(unescaped: trimHistory(room: "p_room", kept: "v_kept", added: "1"))
            v_payload := p_room || E'\\t' || o_seq || E'\\t' || coalesce(p_cause, '') || E'\\t' || p_type;
            IF octet_length(v_payload) + octet_length(v_json) < 7900 THEN
                v_payload := v_payload || E'\\t' || v_json;
            END IF;
            PERFORM pg_notify('duplex_events', \(unescaped: clockLine) || v_payload);
        END
        $$
        """,
        """
        CREATE OR REPLACE FUNCTION duplex_append_batch(
            p_rooms text[], p_prefixes text[], p_suffixes text[],
            p_token_keys text[], p_name_keys text[], p_by_name boolean[], p_keep bigint
        ) RETURNS TABLE (o_index integer, o_seq bigint, o_duplicate boolean) LANGUAGE plpgsql
        -- Every statement below finds its rows by key, so a plan made once serves every call:
        -- left to choose, PostgreSQL planned the trim's range deletes anew on every batch.
        SET plan_cache_mode = force_generic_plan AS $$
        DECLARE
            v_count integer := coalesce(array_length(p_rooms, 1), 0);
            v_found bigint[] := '{}';
            v_rooms text[] := '{}';
            v_added integer[] := '{}';
            v_next bigint[] := '{}';
            v_at integer;
            v_seq bigint;
            v_json text;
            v_line text;
            v_chunk text := '';
        BEGIN
            -- Every room of the batch, locked in one order: batches of several servers cannot
            -- deadlock, and each room's seqs commit in order.
            PERFORM 1 FROM duplex_rooms r WHERE r.room = ANY (p_rooms) ORDER BY r.room FOR UPDATE;
            -- Recorded before (by its token's key, or its name's): the original seq. Repeats
            -- within one batch are resolved by the server before it sends it. The others are
            -- counted per room (v_rooms, in order of appearance, and v_added).
            FOR i IN 1 .. v_count LOOP
                SELECT d.seq INTO v_seq FROM duplex_dedupe d WHERE d.room = p_rooms[i] AND d.key = p_token_keys[i];
                IF NOT FOUND AND p_by_name[i] THEN
                    SELECT d.seq INTO v_seq FROM duplex_dedupe d WHERE d.room = p_rooms[i] AND d.key = p_name_keys[i];
                END IF;
                v_found[i] := v_seq;
                CONTINUE WHEN v_seq IS NOT NULL;
                v_at := array_position(v_rooms, p_rooms[i]);
                IF v_at IS NULL THEN
                    v_rooms := v_rooms || p_rooms[i];
                    v_added := v_added || 1;
                ELSE
                    v_added[v_at] := v_added[v_at] + 1;
                END IF;
            END LOOP;
            -- Each room takes the seqs of its new messages at once: one new row version per
            -- room and batch. A room that is gone (a wiped or restored database) gets none.
            FOR k IN 1 .. coalesce(array_length(v_rooms, 1), 0) LOOP
                UPDATE duplex_rooms r SET latest_seq = r.latest_seq + v_added[k] WHERE r.room = v_rooms[k]
                    RETURNING r.latest_seq INTO v_seq;
                v_next[k] := v_seq - v_added[k] + 1;
            END LOOP;
            FOR i IN 1 .. v_count LOOP
                o_index := i;
                IF v_found[i] IS NOT NULL THEN
                    o_seq := v_found[i];
                    o_duplicate := true;
                    RETURN NEXT;
                    CONTINUE;
                END IF;
                o_duplicate := false;
                v_at := array_position(v_rooms, p_rooms[i]);
                o_seq := v_next[v_at];
                IF o_seq IS NULL THEN
                    RETURN NEXT;
                    CONTINUE;
                END IF;
                v_next[v_at] := o_seq + 1;
                v_json := p_prefixes[i] || o_seq || p_suffixes[i];
                INSERT INTO duplex_events (room, seq, type, json, cause) VALUES (p_rooms[i], o_seq, 'message', v_json, NULL);
                INSERT INTO duplex_dedupe (room, key, seq) VALUES (p_rooms[i], p_token_keys[i], o_seq), (p_rooms[i], p_name_keys[i], o_seq)
                    ON CONFLICT (room, key) DO UPDATE SET seq = EXCLUDED.seq;
                -- The fan-out: one line per event, as few notifications as fit in 7,900 bytes.
                v_line := p_rooms[i] || E'\\t' || o_seq || E'\\t' || E'\\t' || 'message';
                IF octet_length(v_line) + octet_length(v_json) < 7850 THEN
                    v_line := v_line || E'\\t' || v_json;
                END IF;
                IF v_chunk <> '' AND octet_length(v_chunk) + octet_length(v_line) + 1 > 7900 THEN
                    PERFORM pg_notify('duplex_events', \(unescaped: clockLine) || v_chunk);
                    v_chunk := '';
                END IF;
                v_chunk := CASE WHEN v_chunk = '' THEN v_line ELSE v_chunk || E'\\n' || v_line END;
                RETURN NEXT;
            END LOOP;
            IF v_chunk <> '' THEN
                PERFORM pg_notify('duplex_events', \(unescaped: clockLine) || v_chunk);
            END IF;
            -- The history kept: each room of the batch trimmed once (trimHistory).
            FOR k IN 1 .. coalesce(array_length(v_rooms, 1), 0) LOOP
                CONTINUE WHEN v_next[k] IS NULL;
                v_seq := v_next[k] - 1 - p_keep;
                \(unescaped: trimHistory(room: "v_rooms[k]", kept: "v_seq", added: "v_added[k]"))
            END LOOP;
        END
        $$
        """,
        """
        CREATE OR REPLACE FUNCTION duplex_leave(
            p_room text, p_session text, p_prefix text, p_suffix text, p_cause text, p_keep bigint
        ) RETURNS bigint LANGUAGE plpgsql AS $$
        DECLARE
            v_seq bigint;
        BEGIN
            PERFORM 1 FROM duplex_rooms r WHERE r.room = p_room FOR UPDATE;
            DELETE FROM duplex_members m WHERE m.session = p_session AND m.room = p_room;
            IF NOT FOUND THEN
                RETURN NULL;
            END IF;
            SELECT a.o_seq INTO v_seq FROM duplex_append(p_room, 'left', p_prefix, p_suffix, '{}', '{}', p_cause, p_keep) a;
            RETURN v_seq;
        END
        $$
        """,
    ]

    /// A database whose schema a newer server wrote: this server's functions would replace that
    /// server's, so it does not start.
    struct NewerSchema: Error, CustomStringConvertible {
        var found: Int
        var description: String {
            "the database holds schema version \(found), newer than this server's \(PostgresChatSchema.version): upgrade this server (every server on one database runs the same version)"
        }
    }

    /// Creates or updates the schema, under the migration lock, in one transaction.
    /// - Throws: ``NewerSchema`` when a newer server already migrated the database: nothing is
    ///   changed then.
    static func migrate(_ connection: PostgresConnection, logger: Logger) async throws {
        try await connection.execute("SELECT pg_advisory_xact_lock(\(migrationLock))", logger: logger)
        // Before anything is replaced: the functions a newer server created must stay.
        try await connection.execute(statements[0], logger: logger)
        let found = try await connection.query("SELECT coalesce(max(version), 0) FROM duplex_schema", logger: logger)
        for try await (value) in found.decode(Int.self) where value > version {
            throw NewerSchema(found: value)
        }
        for statement in statements {
            try await connection.execute(statement, logger: logger)
        }
        let rows = try await connection.query("SELECT count(*) FROM duplex_schema", logger: logger)
        var count = 0
        for try await (value) in rows.decode(Int.self) { count = value }
        if count == 0 {
            try await connection.execute("INSERT INTO duplex_schema (version) VALUES (\(version))", logger: logger)
        } else {
            try await connection.execute("UPDATE duplex_schema SET version = greatest(version, \(version))", logger: logger)
        }
    }
}
