/// An incremental `text/event-stream` parser: bytes in, events out.
///
/// It implements the WHATWG HTML Standard, section 9.2.6 "Interpreting an event stream":
/// - lines end in CRLF, LF or CR, and a CRLF split across two chunks is one line end;
/// - one leading UTF-8 byte order mark is skipped, even when split across chunks;
/// - lines are split on bytes and each line is decoded as UTF-8 on its own, with invalid bytes
///   replaced by U+FFFD;
/// - a line starting with `:` is a comment; a line with no colon is a field with an empty value;
///   one space after the colon is removed;
/// - an `id` containing NUL is ignored, a `retry` that is not all ASCII digits is ignored;
/// - the last event id is committed when an event is dispatched (at the blank line), not when
///   the `id:` line arrives, and an empty `id` clears it;
/// - an event with an empty data buffer is not dispatched, and an event left unterminated at the
///   end of the stream is discarded.
///
/// Memory is bounded: a line or an event larger than ``Configuration/maxEventBytes`` throws
/// ``ServerSentEventError`` with code ``ServerSentEventError/Code/eventTooLarge``.
///
/// ```swift
/// var parser = ServerSentEventParser()
/// for try await chunk in body {
///     for event in try parser.parse(chunk) { print(event.data) }
/// }
/// parser.finish()   // end of stream: a partial event is dropped
/// ```
public struct ServerSentEventParser: Sendable {
    /// Parser limits.
    public struct Configuration: Sendable, Hashable {
        /// The largest line, and the largest data of one event, in bytes. Default 16 MiB.
        public var maxEventBytes: Int

        /// Creates a configuration; every argument has a default.
        public init(maxEventBytes: Int = 16 * 1024 * 1024) {
            self.maxEventBytes = maxEventBytes
        }
    }

    /// The limits in force.
    public let configuration: Configuration
    /// The last event id committed at dispatch; send it as `Last-Event-ID` when reconnecting,
    /// unless it is empty.
    public private(set) var lastEventID: String
    /// The reconnection time in milliseconds set by the last valid `retry:` field, if any.
    public private(set) var reconnectionTime: Int?

    private var line: [UInt8] = []
    private var data: [UInt8] = []
    private var eventType: String = ""
    private var idBuffer: String
    private var retryInEvent: Int?
    private var skipLeadingLF = false
    /// Bytes of a possible byte order mark seen at the start of the stream; nil once decided.
    private var bomPrefix: [UInt8]? = []

    private static let lf: UInt8 = 0x0A
    private static let cr: UInt8 = 0x0D
    private static let colon: UInt8 = 0x3A
    private static let space: UInt8 = 0x20
    private static let bom: [UInt8] = [0xEF, 0xBB, 0xBF]

    /// Creates a parser.
    /// - Parameters:
    ///   - lastEventID: the id to resume from, as read from an earlier stream.
    ///   - configuration: limits.
    public init(lastEventID: String = "", configuration: Configuration = .init()) {
        self.configuration = configuration
        self.lastEventID = lastEventID
        self.idBuffer = lastEventID
    }

    /// Parses the next chunk of the stream and returns the events it completes.
    /// - Throws: ``ServerSentEventError`` when a line or an event exceeds the limit; the parser
    ///   has then discarded the partial event, and the connection should be dropped.
    public mutating func parse(_ bytes: some Sequence<UInt8>) throws(ServerSentEventError) -> [ServerSentEvent] {
        var events: [ServerSentEvent] = []
        try parse(bytes) { events.append($0) }
        return events
    }

    /// Parses the next chunk of the stream, calling `onEvent` for each event it completes.
    /// - Throws: ``ServerSentEventError`` when a line or an event exceeds the limit.
    public mutating func parse(
        _ bytes: some Sequence<UInt8>,
        onEvent: (ServerSentEvent) -> Void
    ) throws(ServerSentEventError) {
        let result: Result<Void, ServerSentEventError>? = bytes.withContiguousStorageIfAvailable { buffer in
            Result { () throws(ServerSentEventError) in try self.parse(buffer: buffer, onEvent: onEvent) }
        }
        if let result {
            try result.get()
        } else {
            let array = Array(bytes)
            try array.withUnsafeBufferPointer { buffer throws(ServerSentEventError) in
                try self.parse(buffer: buffer, onEvent: onEvent)
            }
        }
    }

    /// Ends the stream: a partial line and an undispatched event are discarded (WHATWG: "If the
    /// file ends in the middle of an event, before the final empty line, the incomplete event is
    /// not dispatched."). The last event id and reconnection time are kept, and the parser is
    /// ready for a new stream, which may again start with a byte order mark.
    public mutating func finish() {
        line.removeAll(keepingCapacity: true)
        data.removeAll(keepingCapacity: true)
        eventType = ""
        retryInEvent = nil
        idBuffer = lastEventID
        skipLeadingLF = false
        bomPrefix = []
    }

    private mutating func parse(
        buffer: UnsafeBufferPointer<UInt8>,
        onEvent: (ServerSentEvent) -> Void
    ) throws(ServerSentEventError) {
        var index = 0
        let count = buffer.count
        if bomPrefix != nil {
            index = skipByteOrderMark(buffer)
            if bomPrefix != nil { return }  // still undecided: the chunk was a prefix of the BOM
        }
        if skipLeadingLF, index < count {
            skipLeadingLF = false
            if buffer[index] == Self.lf { index += 1 }
        }
        while index < count {
            var end = index
            while end < count, buffer[end] != Self.lf, buffer[end] != Self.cr { end += 1 }
            if end == count {
                try appendToLine(UnsafeBufferPointer(rebasing: buffer[index..<count]))
                return
            }
            if line.isEmpty {
                try process(line: UnsafeBufferPointer(rebasing: buffer[index..<end]), onEvent: onEvent)
            } else {
                try appendToLine(UnsafeBufferPointer(rebasing: buffer[index..<end]))
                let whole = line
                line.removeAll(keepingCapacity: true)
                try whole.withUnsafeBufferPointer { pointer throws(ServerSentEventError) in
                    try process(line: pointer, onEvent: onEvent)
                }
            }
            if buffer[end] == Self.cr {
                if end + 1 < count {
                    if buffer[end + 1] == Self.lf { end += 1 }
                } else {
                    skipLeadingLF = true
                }
            }
            index = end + 1
        }
    }

    /// Consumes a leading byte order mark; returns where parsing continues in `buffer`.
    private mutating func skipByteOrderMark(_ buffer: UnsafeBufferPointer<UInt8>) -> Int {
        guard var prefix = bomPrefix else { return 0 }
        var index = 0
        while index < buffer.count, prefix.count < 3, buffer[index] == Self.bom[prefix.count] {
            prefix.append(buffer[index])
            index += 1
        }
        if prefix.count == 3 {
            bomPrefix = nil
            return index
        }
        if index == buffer.count {
            bomPrefix = prefix  // all bytes so far match the BOM: wait for more
            return index
        }
        // Not a BOM: the bytes held back are ordinary stream bytes.
        bomPrefix = nil
        line.append(contentsOf: prefix)
        return index
    }

    private mutating func appendToLine(_ bytes: UnsafeBufferPointer<UInt8>) throws(ServerSentEventError) {
        guard line.count + bytes.count <= configuration.maxEventBytes else {
            finish()
            throw ServerSentEventError(.eventTooLarge, "a line is longer than \(configuration.maxEventBytes) bytes")
        }
        line.append(contentsOf: bytes)
    }

    private mutating func process(
        line: UnsafeBufferPointer<UInt8>,
        onEvent: (ServerSentEvent) -> Void
    ) throws(ServerSentEventError) {
        guard let first = line.first else {
            dispatch(onEvent: onEvent)
            return
        }
        if first == Self.colon { return }  // comment
        let field: UnsafeBufferPointer<UInt8>
        let value: UnsafeBufferPointer<UInt8>
        if let colon = line.firstIndex(of: Self.colon) {
            field = UnsafeBufferPointer(rebasing: line[..<colon])
            var valueStart = colon + 1
            if valueStart < line.count, line[valueStart] == Self.space { valueStart += 1 }
            value = UnsafeBufferPointer(rebasing: line[valueStart...])
        } else {
            field = line
            value = UnsafeBufferPointer(rebasing: line[line.count...])
        }
        switch Field(field) {
        case .data:
            guard data.count + value.count + 1 <= configuration.maxEventBytes else {
                finish()
                throw ServerSentEventError(.eventTooLarge, "an event's data is larger than \(configuration.maxEventBytes) bytes")
            }
            data.append(contentsOf: value)
            data.append(Self.lf)
        case .event:
            eventType = String(decoding: value, as: UTF8.self)
        case .id:
            if !value.contains(0) {
                idBuffer = String(decoding: value, as: UTF8.self)
            }
        case .retry:
            if !value.isEmpty, value.allSatisfy({ (0x30...0x39).contains($0) }) {
                var milliseconds = 0
                var overflow = false
                for digit in value where !overflow {
                    (milliseconds, overflow) = milliseconds.multipliedReportingOverflow(by: 10)
                    if !overflow { (milliseconds, overflow) = milliseconds.addingReportingOverflow(Int(digit - 0x30)) }
                }
                if !overflow {
                    reconnectionTime = milliseconds
                    retryInEvent = milliseconds
                }
            }
        case .other:
            break
        }
    }

    private mutating func dispatch(onEvent: (ServerSentEvent) -> Void) {
        lastEventID = idBuffer
        defer {
            data.removeAll(keepingCapacity: true)
            eventType = ""
            retryInEvent = nil
        }
        guard !data.isEmpty else { return }
        data.removeLast()  // the LF after the last data line
        onEvent(
            ServerSentEvent(
                id: lastEventID.isEmpty ? nil : lastEventID,
                event: eventType.isEmpty ? "message" : eventType,
                data: String(decoding: data, as: UTF8.self),
                retry: retryInEvent
            )
        )
    }

    private enum Field {
        case data, event, id, retry, other

        init(_ name: UnsafeBufferPointer<UInt8>) {
            switch name.count {
            case 2 where name[0] == 0x69 && name[1] == 0x64: self = .id
            case 4 where name.elementsEqual("data".utf8): self = .data
            case 5 where name.elementsEqual("event".utf8): self = .event
            case 5 where name.elementsEqual("retry".utf8): self = .retry
            default: self = .other
            }
        }
    }
}
