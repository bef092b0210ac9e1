import Testing

@testable import DuplexSchema

/// Where a text first breaks JSON's grammar, as the script and scenario errors name it.
@Suite("JSON syntax errors")
struct JSONSyntaxErrorTests {
    @Test(
        "each break is placed at its line and column, with what was expected",
        arguments: [
            ("{\"a\": 1,\n \"b\" 2}", 2, 6, #"expected ":" after a member name (got "2")"#),
            ("[1, 2", 1, 6, #"expected "," or "]" (got the end of the text)"#),
            ("{\"a\": \"x\ny\"}", 1, 9, "a control character in a string: write it escaped (\\n, \\t, \\u00XX)"),
            ("{\"a\": \"open}", 1, 7, "a string that is never closed"),
            ("[tru]", 1, 2, "expected true"),
            ("[1.]", 1, 4, #"expected a digit after the decimal point (got "]")"#),
            ("{} {}", 1, 4, "more after the end of the JSON value"),
            ("{\"é\": ü}", 1, 7, #"expected a value (got "ü")"#),
            ("", 1, 1, "expected a value (got the end of the text)"),
        ])
    func placed(_ text: String, _ line: Int, _ column: Int, _ reason: String) throws {
        let error = try #require(JSONSyntaxError.locate(in: Array(text.utf8)))
        #expect(error.line == line)
        #expect(error.column == column)
        #expect(error.reason == reason)
    }

    @Test("valid JSON has no error; a long line is cut to the text around the place")
    func validAndExcerpt() throws {
        #expect(JSONSyntaxError.locate(in: Array(#"{"a": [1, -2.5e3, true, false, null, "\u00e9\n"], "b": {}}"#.utf8)) == nil)
        let long = "[" + String(repeating: "1, ", count: 40) + "x" + String(repeating: ", 1", count: 40) + "]"
        let error = try #require(JSONSyntaxError.locate(in: Array(long.utf8)))
        #expect(error.column == 122)
        #expect(error.excerpt == "…" + String(repeating: "1, ", count: 10) + "x" + String(repeating: ", 1", count: 9) + ", " + "…")
    }
}
