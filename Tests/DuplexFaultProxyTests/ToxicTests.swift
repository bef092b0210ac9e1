import DuplexFaultProxy
import Testing

/// The toxics as values: read from the fields the control endpoint and scenarios give, described,
/// and the seeded generator behind every random choice.
@Suite("Toxic")
struct ToxicTests {
    @Test("the new toxics read from fields, as the control endpoint and scenarios give them, and say what they are")
    func newToxicFields() throws {
        #expect(try FaultProxy.Toxic(fields: ["type": "path-switch"]) == .pathSwitch)
        #expect(try FaultProxy.Toxic(fields: ["type": "path-switch"]).description == "path-switch")
        #expect(try FaultProxy.Toxic(fields: ["type": "suspend", "ms": "250", "connections": "2"]).description == "suspend 250 ms (connection 2)")
        #expect(try FaultProxy.Toxic(fields: ["type": "blackhole", "connections": "new"]) == .blackhole.connections(.openedLater))
        #expect(try FaultProxy.Toxic(fields: ["type": "path-switch", "connections": "all"]).description == "path-switch (every connection)")
        #expect(throws: FaultProxy.InvalidToxic.self) { try FaultProxy.Toxic(fields: ["type": "suspend"]) }
        #expect(throws: FaultProxy.InvalidToxic.self) { try FaultProxy.Toxic(fields: ["type": "blackhole", "connections": "0"]) }
    }

    @Test("link profiles read from fields and say their figures; every named profile is found by its name, as docs/scenarios.md lists them")
    func linkProfileFields() throws {
        #expect(try FaultProxy.Toxic(fields: ["type": "profile", "name": "3g"]) == .profile(.threeG))
        #expect(FaultProxy.Toxic.profile(.threeG).description == "profile 3g (down 780 kbit/s 100 ms, up 330 kbit/s 100 ms)")
        #expect(
            FaultProxy.Toxic.profile(.veryBadNetwork).description
                == "profile very-bad-network (down 1000 kbit/s 500 ms 10 % loss, up 1000 kbit/s 500 ms 10 % loss)")
        #expect(throws: FaultProxy.InvalidToxic.self) { try FaultProxy.Toxic(fields: ["type": "profile", "name": "5g"]) }
        #expect(throws: FaultProxy.InvalidToxic.self) { try FaultProxy.Toxic(fields: ["type": "profile"]) }
        #expect(FaultProxy.LinkProfile.all.map(\.name) == ["3g", "edge", "lte", "dsl", "wifi", "lossy-wifi", "very-bad-network", "100-loss"])
        #expect(FaultProxy.LinkProfile.all.allSatisfy { FaultProxy.LinkProfile(name: $0.name) == $0 })
    }

    @Test("a profile of your own with an absurd bandwidth saturates instead of trapping; a negative one is the floor, 1 byte a second")
    func absurdFigures() {
        #expect(FaultProxy.LinkProfile.Link(kilobitsPerSecond: .max, delay: .zero).bytesPerSecond == .max)
        #expect(FaultProxy.LinkProfile.Link(kilobitsPerSecond: -5, delay: .zero).bytesPerSecond == 1)
        #expect(FaultProxy.LinkProfile.Link(kilobitsPerSecond: 8, delay: .zero).bytesPerSecond == 1_000)
    }

    @Test("SplitMix64: the published sequence for seed 0, and streams that differ from each other and repeat for the same seed")
    func generator() {
        var zero = SeededGenerator(seed: 0)
        #expect([zero.next(), zero.next(), zero.next()] == [0xE220_A839_7B1D_CDAF, 0x6E78_9E6A_A1B9_65F4, 0x06C4_5D18_8009_454F])
        func draws(_ generator: SeededGenerator) -> [UInt64] {
            var generator = generator
            return (0..<8).map { _ in generator.next() }
        }
        #expect(draws(SeededGenerator(seed: 42, stream: 3, 0)) == draws(SeededGenerator(seed: 42, stream: 3, 0)))
        #expect(draws(SeededGenerator(seed: 42, stream: 3, 0)) != draws(SeededGenerator(seed: 42, stream: 3, 1)))
        #expect(draws(SeededGenerator(seed: 42, stream: 3, 0)) != draws(SeededGenerator(seed: 43, stream: 3, 0)))
    }
}
