import Foundation

/// The target libFuzzer runs, chosen by `DUPLEX_FUZZ_TARGET` (read once).
let selectedTarget: FuzzTarget? = {
    guard let name = ProcessInfo.processInfo.environment["DUPLEX_FUZZ_TARGET"] else { return nil }
    return fuzzTargets.first { $0.name == name }
}()

/// libFuzzer's entry point (with `swift build --sanitize=fuzzer -Xswiftc -DFUZZING`).
@_cdecl("LLVMFuzzerTestOneInput")
public func duplexFuzzOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    guard let target = selectedTarget else {
        let names = fuzzTargets.map(\.name).joined(separator: ", ")
        FileHandle.standardError.write(Data("duplex-fuzz: set DUPLEX_FUZZ_TARGET to one of: \(names)\n".utf8))
        exit(2)
    }
    let bytes = data.map { Array(UnsafeBufferPointer(start: $0, count: size)) } ?? []
    target.run(bytes)
    return 0
}

#if !FUZZING
/// Without libFuzzer, `duplex-fuzz TARGET PATH...` replays files (or every file in folders)
/// through a target: how CI and the regression tests run the checked-in corpora and crashes.
@main
struct DuplexFuzzReplay {
    static func main() {
        var arguments = Array(CommandLine.arguments.dropFirst())
        if arguments.first == "--list" || arguments.isEmpty {
            if fuzzTargets.isEmpty { print("duplex-fuzz: build in debug (the targets use testable imports)") }
            for target in fuzzTargets { print("\(target.name): \(target.properties)") }
            exit(arguments.isEmpty ? 2 : 0)
        }
        let name = arguments.removeFirst()
        guard let target = fuzzTargets.first(where: { $0.name == name }) else {
            FileHandle.standardError.write(Data("duplex-fuzz: no target \(name); --list lists them\n".utf8))
            exit(2)
        }
        var files: [URL] = []
        for path in arguments {
            let url = URL(fileURLWithPath: path)
            var isDirectory: ObjCBool = false
            guard FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory) else {
                FileHandle.standardError.write(Data("duplex-fuzz: \(path) does not exist\n".utf8))
                exit(2)
            }
            if isDirectory.boolValue {
                let names = (try? FileManager.default.contentsOfDirectory(atPath: path)) ?? []
                files += names.sorted().map { url.appendingPathComponent($0) }
            } else {
                files.append(url)
            }
        }
        for file in files {
            guard let data = FileManager.default.contents(atPath: file.path) else { continue }
            target.run(Array(data))
        }
        print("duplex-fuzz: \(name): \(files.count) inputs replayed, every property held")
    }
}
#endif
