package import Foundation

/// A directory of its own under the temporary directory, for the files a test hands a command.
package struct ScratchFiles {
    package let directory: URL

    package init(_ prefix: String) throws {
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("\(prefix)-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    }

    /// Writes `text` to the file `name` and returns its path.
    package func write(_ name: String, _ text: String) throws -> String {
        let url = directory.appendingPathComponent(name)
        try Data(text.utf8).write(to: url)
        return url.path
    }

    package func remove() {
        try? FileManager.default.removeItem(at: directory)
    }
}
