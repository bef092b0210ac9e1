import Foundation
import Testing
import TestSupport

@testable import Duplex

/// The RSA key size read from a SubjectPublicKeyInfo, which decides the weak-key refusal.
@Suite("RSA key size from a SubjectPublicKeyInfo")
struct KeyStrengthTests {
    /// A public key made by the openssl command, as SubjectPublicKeyInfo DER.
    static func spki(_ algorithmOptions: [String]) async throws -> [UInt8] {
        try await onThread {
            let directory = FileManager.default.temporaryDirectory.appendingPathComponent("duplex-spki-\(UUID().uuidString)")
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
            defer { try? FileManager.default.removeItem(at: directory) }
            let key = directory.appendingPathComponent("key.pem").path
            let der = directory.appendingPathComponent("key.der").path
            for arguments in [["genpkey"] + algorithmOptions + ["-out", key], ["pkey", "-in", key, "-pubout", "-outform", "der", "-out", der]] {
                let process = Process()
                process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
                process.arguments = ["openssl"] + arguments
                process.standardError = FileHandle.nullDevice
                try process.run()
                process.waitUntilExit()
                guard process.terminationStatus == 0 else { throw TestCertificate.OpenSSLFailed(status: process.terminationStatus) }
            }
            return Array(try Data(contentsOf: URL(fileURLWithPath: der)))
        }
    }

    @Test("1,024 and 2,048-bit RSA keys are measured; an EC key is not RSA; junk is nil")
    func sizes() async throws {
        #expect(DERCertificateNames.rsaModulusBits(spki: try await Self.spki(["-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:1024"])) == 1024)
        #expect(DERCertificateNames.rsaModulusBits(spki: try await Self.spki(["-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048"])) == 2048)
        #expect(
            DERCertificateNames.rsaModulusBits(spki: try await Self.spki(["-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:prime256v1"])) == nil)
        #expect(DERCertificateNames.rsaModulusBits(spki: [0x30, 0x82, 0xFF]) == nil)
        #expect(DERCertificateNames.rsaModulusBits(spki: []) == nil)
    }
}
