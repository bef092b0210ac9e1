#!/usr/bin/env python3
"""Compares an Autobahn|Testsuite report with the expected results checked in beside it.

    compare.py INDEX_JSON AGENT EXPECTED_JSON [CASE_PATTERNS] [--write]

INDEX_JSON is the suite's `index.json`; EXPECTED_JSON maps each case to the behaviour expected of
it ({"1.1.1": {"behavior": "OK", "behaviorClose": "OK"}, ...}). Prints one row per case group
(OK, NON-STRICT, INFORMATIONAL, UNIMPLEMENTED, FAILED) as a Markdown table, then every case whose
behaviour changed. Exits 1 when a case did worse than expected, or when an expected case that the
patterns select is missing from the report. A case that did better is reported, and passes: check
in the better result with --write, which rewrites EXPECTED_JSON from this report (for the cases
the patterns select, keeping the rest).
"""
import fnmatch
import json
import sys

# Worse behaviours rank higher. INFORMATIONAL is the suite's "no verdict" (7.1.6, 7.13.x): it
# ranks with OK.
RANK = {"OK": 0, "INFORMATIONAL": 0, "NON-STRICT": 1, "UNIMPLEMENTED": 2, "WRONG CODE": 2, "UNCLEAN": 2, "FAILED BY CLIENT": 3, "FAILED": 3}
COLUMNS = ["OK", "NON-STRICT", "INFORMATIONAL", "UNIMPLEMENTED", "FAILED"]


def case_key(case):
    return tuple(int(part) for part in case.split("."))


def rank(behavior):
    return RANK.get(behavior, 3)


def main(argv):
    args = [a for a in argv[1:] if not a.startswith("--")]
    write = "--write" in argv
    if len(args) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    index_path, agent, expected_path = args[:3]
    patterns = (args[3] if len(args) > 3 else "*").split(",")
    with open(index_path) as f:
        index = json.load(f)
    if agent not in index:
        print(f"autobahn: no results for agent {agent!r} in {index_path} (agents: {', '.join(index)})", file=sys.stderr)
        return 1
    results = {case: {"behavior": r["behavior"], "behaviorClose": r["behaviorClose"]} for case, r in index[agent].items()}
    try:
        with open(expected_path) as f:
            expected = json.load(f)
    except FileNotFoundError:
        expected = {}

    def selected(case):
        return any(fnmatch.fnmatchcase(case, p) for p in patterns)

    # The table, by group.
    groups = {}
    for case, r in results.items():
        counts = groups.setdefault(case.split(".")[0], dict.fromkeys(COLUMNS, 0))
        column = r["behavior"] if r["behavior"] in COLUMNS else "FAILED"
        counts[column] += 1
    print(f"\n{agent}: {len(results)} cases")
    print("| group | " + " | ".join(COLUMNS) + " |")
    print("|---|" + "---|" * len(COLUMNS))
    totals = dict.fromkeys(COLUMNS, 0)
    for group in sorted(groups, key=int):
        print(f"| {group} | " + " | ".join(str(groups[group][c]) for c in COLUMNS) + " |")
        for c in COLUMNS:
            totals[c] += groups[group][c]
    print("| all | " + " | ".join(str(totals[c]) for c in COLUMNS) + " |")
    odd = sorted((c for c, r in results.items() if r["behavior"] not in ("OK",)), key=case_key)
    if odd:
        print("not OK: " + ", ".join(f"{c} {results[c]['behavior']}" for c in odd))

    if write:
        kept = {c: v for c, v in expected.items() if not selected(c)}
        kept.update({c: r for c, r in results.items() if selected(c)})
        rows = [f"{json.dumps(case)}: {json.dumps(kept[case], sort_keys=True)}" for case in sorted(kept, key=case_key)]
        with open(expected_path, "w") as f:
            f.write("{\n" + ",\n".join(rows) + "\n}\n")
        print(f"wrote {expected_path} ({len(kept)} cases)")
        return 0

    worse, better = [], []
    for case in sorted((c for c in expected if selected(c)), key=case_key):
        want = expected[case]
        got = results.get(case)
        if got is None:
            worse.append(f"{case}: expected {want['behavior']}, missing from the report")
            continue
        for field in ("behavior", "behaviorClose"):
            if rank(got[field]) > rank(want[field]):
                worse.append(f"{case}: {field} {got[field]}, expected {want[field]}")
            elif rank(got[field]) < rank(want[field]):
                better.append(f"{case}: {field} {got[field]}, expected {want[field]}")
    unexpected = sorted((c for c in results if c not in expected), key=case_key)
    for case in unexpected:
        if rank(results[case]["behavior"]) > 0:
            worse.append(f"{case}: {results[case]['behavior']}, and not in {expected_path}")
    for line in better:
        print(f"better than expected (check it in with --write): {line}")
    if worse:
        for line in worse:
            print(f"WORSE: {line}", file=sys.stderr)
        print(f"autobahn: {agent}: {len(worse)} case(s) worse than {expected_path}", file=sys.stderr)
        return 1
    print(f"autobahn: {agent}: every case as expected or better")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
