#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// Writes to stdout and stderr without Foundation's `FileHandle.write`, which traps on a
/// closed pipe. A closed stdout (`duplex listen … | head -3`) ends the process quietly with
/// status 0, as Unix tools do; a closed stderr is ignored.
enum StandardStreams {
    /// Makes a write to a closed pipe fail with EPIPE instead of killing the process, so that
    /// ``out(_:)`` can exit cleanly. Call once at start.
    static func ignoreBrokenPipeSignal() {
        signal(SIGPIPE, SIG_IGN)
    }

    /// Writes `text` to stdout; exits 0 if stdout is closed.
    static func out(_ text: String) {
        if !write(Array(text.utf8), to: STDOUT_FILENO) { exit(0) }
    }

    /// Writes `bytes` to stdout; exits 0 if stdout is closed.
    static func out(bytes: [UInt8]) {
        if !write(bytes, to: STDOUT_FILENO) { exit(0) }
    }

    /// Writes `text` to stderr; a closed stderr is ignored.
    static func err(_ text: String) {
        _ = write(Array(text.utf8), to: STDERR_FILENO)
    }

    /// Writes all of `bytes`; false when the descriptor is closed or broken.
    private static func write(_ bytes: [UInt8], to descriptor: CInt) -> Bool {
        var offset = 0
        while offset < bytes.count {
            let written = bytes.withUnsafeBytes { buffer in
                #if canImport(Darwin)
                Darwin.write(descriptor, buffer.baseAddress! + offset, buffer.count - offset)
                #else
                Glibc.write(descriptor, buffer.baseAddress! + offset, buffer.count - offset)
                #endif
            }
            if written < 0 {
                if errno == EINTR || errno == EAGAIN { continue }
                return false
            }
            offset += written
        }
        return true
    }
}

/// Renders text that came from the network so that it cannot act on a terminal: no control
/// character, escape sequence or bidirectional override reaches the screen as itself.
///
/// - LF, CR and tab become `\n`, `\r` and `\t`, so a message cannot forge a line of its own.
/// - ESC becomes `^[` and the other C0 controls caret notation (`^G`); DEL becomes `^?`.
/// - C1 controls (U+0080 to U+009F, among them the one-byte CSI) become U+FFFD.
/// - Bidirectional controls (U+202A to U+202E, U+2066 to U+2069, U+200E, U+200F, U+061C) are shown
///   as `<U+202E>`, so text cannot reorder itself on screen.
enum UntrustedText {
    static func visible(_ text: String) -> String {
        guard text.unicodeScalars.contains(where: needsEscape) else { return text }
        var shown = ""
        shown.reserveCapacity(text.utf8.count)
        for scalar in text.unicodeScalars {
            switch scalar.value {
            case 0x0A: shown += "\\n"
            case 0x0D: shown += "\\r"
            case 0x09: shown += "\\t"
            case 0x1B: shown += "^["
            case 0x00..<0x20: shown += "^" + String(Character(Unicode.Scalar(UInt8(scalar.value + 0x40))))
            case 0x7F: shown += "^?"
            case 0x80...0x9F: shown += "\u{FFFD}"
            case 0x200E, 0x200F, 0x061C, 0x202A...0x202E, 0x2066...0x2069:
                shown += "<U+" + String(scalar.value, radix: 16, uppercase: true) + ">"
            default: shown.unicodeScalars.append(scalar)
            }
        }
        return shown
    }

    private static func needsEscape(_ scalar: Unicode.Scalar) -> Bool {
        switch scalar.value {
        case 0x00..<0x20, 0x7F...0x9F, 0x200E, 0x200F, 0x061C, 0x202A...0x202E, 0x2066...0x2069: true
        default: false
        }
    }
}
