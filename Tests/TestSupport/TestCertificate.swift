import Foundation
package import NIOSSL

/// A self-signed certificate for `localhost` and 127.0.0.1, made by the `openssl` command for
/// this test run, and a TLS server context that presents it.
package struct TestCertificate {
    package let certificatePEM: String
    package let serverContext: NIOSSLContext

    package struct OpenSSLFailed: Error, CustomStringConvertible {
        package var status: Int32

        package init(status: Int32) { self.status = status }
        package var description: String { "openssl exited with \(status); is the openssl command installed?" }
    }

    /// Makes one. `openssl` runs as a child process, awaited off the cooperative pool.
    package static func make() async throws -> TestCertificate {
        try await onThread { try makeBlocking() }
    }

    private static func makeBlocking() throws -> TestCertificate {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("duplex-tls-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let key = directory.appendingPathComponent("key.pem").path
        let certificate = directory.appendingPathComponent("cert.pem").path
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = [
            "openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
            "-keyout", key, "-out", certificate, "-days", "1", "-subj", "/CN=localhost",
            "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1",
        ]
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try process.run()
        process.waitUntilExit()
        guard process.terminationStatus == 0 else { throw OpenSSLFailed(status: process.terminationStatus) }
        let pem = try String(contentsOfFile: certificate, encoding: .utf8)
        let configuration = TLSConfiguration.makeServerConfiguration(
            certificateChain: try NIOSSLCertificate.fromPEMFile(certificate).map { .certificate($0) },
            privateKey: .privateKey(try NIOSSLPrivateKey(file: key, format: .pem))
        )
        return TestCertificate(certificatePEM: pem, serverContext: try NIOSSLContext(configuration: configuration))
    }
}
