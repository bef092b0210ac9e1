package import DuplexSchema
import Foundation

/// A cassette file that could not be loaded: unreadable, or not a cassette. Its description
/// names the file and says why (`cassette line 2: …`).
package enum CassetteFileError: Error, CustomStringConvertible {
    case unreadable(path: String, reason: String)
    case invalid(path: String, error: any Error)

    package var description: String {
        switch self {
        case .unreadable(let path, let reason): "cannot read \(path): \(reason)"
        case .invalid(let path, let error): "\(path): \(error)"
        }
    }
}

extension Cassette {
    /// The cassette in the JSON-lines file at `path`, as `duplex record` writes it.
    /// - Throws: ``CassetteFileError`` naming the file.
    package static func load(path: String) throws(CassetteFileError) -> Cassette {
        let text: String
        do {
            text = try String(contentsOfFile: path, encoding: .utf8)
        } catch {
            throw .unreadable(path: path, reason: error.localizedDescription)
        }
        do {
            return try Cassette(jsonLines: text)
        } catch {
            throw .invalid(path: path, error: error)
        }
    }
}
