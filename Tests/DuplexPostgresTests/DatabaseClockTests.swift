import Testing

@testable import DuplexPostgres

/// The apply lag of PostgreSQL notifications, from the database's clock they carry.
@Suite("DatabaseClock")
struct DatabaseClockTests {
    @Test("a notification's clock gives a lag from 0 to a day, whatever it says: hostile values neither trap nor go negative")
    func lagIsBounded() {
        let clock = DatabaseClock()
        let now = DatabaseClock.localMicroseconds()
        let lag = clock.lag(sinceDatabaseMicroseconds: now - 250_000)
        #expect(lag >= .milliseconds(250) && lag < .seconds(60), "\(lag)")
        #expect(clock.lag(sinceDatabaseMicroseconds: now + 10_000_000) == .zero, "from the future: 0")
        #expect(clock.lag(sinceDatabaseMicroseconds: .max) == .zero)
        #expect(clock.lag(sinceDatabaseMicroseconds: .min) == .zero, "overflows: 0")
        #expect(clock.lag(sinceDatabaseMicroseconds: 0) == .seconds(86_400), "1970: at most a day")
    }
}
