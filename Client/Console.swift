#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif
import Foundation
import NIOConcurrencyHelpers

/// The terminal side of the interactive commands: reads what the user types, line by line, and
/// prints incoming lines without garbling it.
///
/// On a terminal, the console puts it in raw mode and edits the input line itself, so a line
/// printed while the user types appears above the input line, which is then redrawn. Keys:
/// Enter sends, Backspace, Ctrl-U (clear), Ctrl-W (delete a word), Ctrl-L (redraw); Ctrl-C, and
/// Ctrl-D on an empty line, end the input. Anything else (a pipe, a file) is read and printed
/// plainly, line by line.
final class Console: Sendable {
    /// Whether stdin is a terminal, edited in raw mode.
    let isInteractive: Bool
    /// Whether printed lines have their control characters made visible (see ``UntrustedText``).
    /// Always on a terminal; elsewhere only when asked for.
    let escapesControls: Bool
    private let prompt: String
    private let state = NIOLockedValueBox(EditorState())

    private struct EditorState {
        var input: [UInt8] = []
        /// Bytes of an escape sequence being skipped (arrow keys and such).
        var escape: [UInt8]?
        var pending: [UInt8] = []
    }

    /// - Parameters:
    ///   - prompt: shown before the input line on a terminal.
    ///   - interactive: whether to edit the input line; by default, when stdin and stdout are terminals.
    ///   - escapeControls: make control characters visible even when stdout is not a terminal
    ///     (for text from other people, whose newlines could forge lines).
    init(prompt: String, interactive: Bool? = nil, escapeControls: Bool = false) {
        self.isInteractive = interactive ?? (isatty(STDIN_FILENO) == 1 && isatty(STDOUT_FILENO) == 1)
        self.escapesControls = escapeControls || isatty(STDOUT_FILENO) == 1
        self.prompt = prompt
    }

    /// The lines the user enters; finishes at the end of input (EOF, Ctrl-D, Ctrl-C).
    func lines() -> AsyncStream<String> {
        let (stream, continuation) = AsyncStream.makeStream(of: String.self)
        if isInteractive {
            TerminalMode.enterRaw()
            redraw()
        }
        let thread = Thread { [self] in
            var buffer = [UInt8](repeating: 0, count: 4096)
            while true {
                let count = read(STDIN_FILENO, &buffer, buffer.count)
                if count < 0, errno == EINTR { continue }
                guard count > 0 else { break }
                let chunk = Array(buffer[0..<count])
                let (lines, ended) = isInteractive ? edit(chunk) : split(chunk)
                for line in lines { continuation.yield(line) }
                if ended {
                    continuation.finish()
                    return
                }
            }
            if !isInteractive {
                let rest = state.withLockedValue { state in
                    defer { state.pending = [] }
                    return state.pending
                }
                if !rest.isEmpty { continuation.yield(String(decoding: rest, as: UTF8.self)) }
            }
            continuation.finish()
        }
        thread.start()
        return stream
    }

    /// Prints a line; on a terminal, above the line being typed.
    func print(_ line: String) {
        let line = escapesControls ? UntrustedText.visible(line) : line
        state.withLockedValue { state in
            if isInteractive {
                Self.write("\r\u{1B}[2K" + line + "\r\n" + prompt + visible(state.input))
            } else {
                Self.write(line + "\n")
            }
        }
    }

    /// Prints a line on stderr (above the input line on a terminal), control characters made visible.
    func printError(_ line: String) {
        let line = UntrustedText.visible(line)
        state.withLockedValue { state in
            if isInteractive {
                Self.write("\r\u{1B}[2K")
                StandardStreams.err(line + "\r\n")
                Self.write(prompt + visible(state.input))
            } else {
                StandardStreams.err(line + "\n")
            }
        }
    }

    /// Restores the terminal and leaves the cursor on a fresh line.
    func close() {
        guard isInteractive else { return }
        state.withLockedValue { _ in Self.write("\r\u{1B}[2K") }
        TerminalMode.restore()
    }

    // MARK: Input

    /// Splits piped input into lines (LF or CRLF).
    private func split(_ chunk: [UInt8]) -> (lines: [String], ended: Bool) {
        state.withLockedValue { state in
            state.pending += chunk
            var lines: [String] = []
            while let newline = state.pending.firstIndex(of: UInt8(ascii: "\n")) {
                var line = Array(state.pending[..<newline])
                if line.last == UInt8(ascii: "\r") { line.removeLast() }
                lines.append(String(decoding: line, as: UTF8.self))
                state.pending.removeSubrange(...newline)
            }
            return (lines, false)
        }
    }

    /// Applies typed bytes to the input line; returns the lines entered.
    private func edit(_ chunk: [UInt8]) -> (lines: [String], ended: Bool) {
        state.withLockedValue { state in
            var lines: [String] = []
            for byte in chunk {
                if var escape = state.escape {
                    escape.append(byte)
                    // ESC [ params final, or ESC O x: skip it whole.
                    let done =
                        (escape.count == 1 && byte != UInt8(ascii: "[") && byte != UInt8(ascii: "O"))
                        || (escape.count >= 2 && (0x40...0x7E).contains(byte))
                    state.escape = done ? nil : escape
                    continue
                }
                switch byte {
                case 0x0D, 0x0A:
                    let line = String(decoding: state.input, as: UTF8.self)
                    state.input = []
                    Self.write("\r\u{1B}[2K" + prompt)
                    lines.append(line)
                case 0x7F, 0x08:
                    if !state.input.isEmpty {
                        var text = String(decoding: state.input, as: UTF8.self)
                        text.removeLast()
                        state.input = Array(text.utf8)
                    }
                case 0x15:
                    state.input = []
                case 0x17:
                    var text = String(decoding: state.input, as: UTF8.self)
                    while text.last == " " { text.removeLast() }
                    while let last = text.last, last != " " { _ = last; text.removeLast() }
                    state.input = Array(text.utf8)
                case 0x03:
                    return (lines, true)
                case 0x04:
                    if state.input.isEmpty { return (lines, true) }
                case 0x1B:
                    state.escape = []
                case 0x0C:
                    Self.write("\u{1B}[2J\u{1B}[H")
                case ..<0x20:
                    break
                default:
                    state.input.append(byte)
                }
            }
            Self.write("\r\u{1B}[2K" + prompt + visible(state.input))
            return (lines, false)
        }
    }

    private func redraw() {
        state.withLockedValue { state in Self.write("\r\u{1B}[2K" + prompt + visible(state.input)) }
    }

    /// The end of the input that fits on one terminal line after the prompt.
    private func visible(_ input: [UInt8]) -> String {
        let text = String(decoding: input, as: UTF8.self)
        let room = max(TerminalMode.columns() - prompt.count - 1, 8)
        return text.count <= room ? text : String(text.suffix(room))
    }

    private static func write(_ text: String) {
        StandardStreams.out(text)
    }
}

/// The terminal's mode: raw while a console edits the input line, restored at exit.
enum TerminalMode {
    private static let saved = NIOLockedValueBox<termios?>(nil)

    static func enterRaw() {
        var original = termios()
        guard tcgetattr(STDIN_FILENO, &original) == 0 else { return }
        saved.withLockedValue { $0 = original }
        var raw = original
        // No line buffering, no echo, no signals from Ctrl-C (the console reads it as a key).
        raw.c_lflag &= ~tcflag_t(ICANON | ECHO | ISIG | IEXTEN)
        tcsetattr(STDIN_FILENO, TCSAFLUSH, &raw)
        atexit { TerminalMode.restore() }
    }

    static func restore() {
        guard var original = saved.withLockedValue({ $0 }) else { return }
        tcsetattr(STDIN_FILENO, TCSAFLUSH, &original)
    }

    static func columns() -> Int {
        var size = winsize()
        guard ioctl(STDOUT_FILENO, UInt(TIOCGWINSZ), &size) == 0, size.ws_col > 0 else { return 80 }
        return Int(size.ws_col)
    }
}
