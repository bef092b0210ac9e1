#!/usr/bin/env bash
# Builds duplex-fuzz with libFuzzer and AddressSanitizer and runs each target on its corpus.
#
#   Tests/Fuzz/run.sh [SECONDS_PER_TARGET] [TARGET...]
#
# Every target by default, 30 s each. The checked-in corpus (Tests/Fuzz/Corpus/TARGET) is only
# read: libFuzzer's new inputs go to .build-fuzz/corpus/TARGET. A crash stops the run and leaves
# its input in .build-fuzz/crashes/; replay it with
#   swift build --product duplex-fuzz && .build/debug/duplex-fuzz TARGET FILE
# and keep it as a regression input in Tests/Fuzz/Corpus/TARGET/.
# FUZZ_MERGE=1 merges what a run found into the checked-in corpus (libFuzzer -merge=1).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
seconds="${1:-30}"
shift || true
scratch="$root/.build-fuzz"
cd "$root"

# `--sanitize=fuzzer --sanitize=address` passes two -sanitize= flags to swiftc, and the second
# replaces the first: the Swift code would get no coverage instrumentation. One flag with both.
echo "fuzz: building duplex-fuzz with -sanitize=fuzzer,address (debug: the targets use testable imports)"
swift build --scratch-path "$scratch" --product duplex-fuzz --sanitize=fuzzer -Xswiftc -sanitize=fuzzer,address -Xswiftc -DFUZZING 2>&1 | grep -E "error|warning: .*Tests/Fuzz|Compiling duplex_fuzz|Build complete" || true
binary="$(swift build --scratch-path "$scratch" --show-bin-path)/duplex-fuzz"
[ -x "$binary" ] || { echo "fuzz: the build failed" >&2; exit 1; }

targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
    targets=($(ls "$here/Corpus"))
fi
mkdir -p "$scratch/crashes"
status=0
for target in "${targets[@]}"; do
    [ -d "$here/Corpus/$target" ] || { echo "fuzz: no corpus for $target in $here/Corpus" >&2; exit 1; }
    work="$scratch/corpus/$target"
    mkdir -p "$work"
    log="$scratch/$target.log"
    echo "fuzz: $target for $seconds s"
    # -rss_limit_mb: memory bounded per input; -timeout: an input that takes over 10 s is a hang.
    # The Swift runtime's own backtracer would read the crashed stack under ASan: off.
    if ! SWIFT_BACKTRACE=enable=no DUPLEX_FUZZ_TARGET="$target" "$binary" "$work" "$here/Corpus/$target" \
        -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=16384 \
        -artifact_prefix="$scratch/crashes/$target-" -print_final_stats=1 >"$log" 2>&1; then
        echo "fuzz: $target FAILED; the log's end:" >&2
        grep -v '^0x' "$log" | tail -40 >&2
        status=1
        continue
    fi
    runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo "?")
    cov=$(grep -E '^#[0-9]+' "$log" | tail -1 | grep -o 'cov: [0-9]*' || echo "cov: ?")
    ft=$(grep -E '^#[0-9]+' "$log" | tail -1 | grep -o 'ft: [0-9]*' || echo "ft: ?")
    corpus=$(ls "$work" | wc -l)
    echo "fuzz: $target ok: $runs executions, $cov edges, $ft features, $corpus inputs found"
    if [ "${FUZZ_MERGE:-0}" = "1" ]; then
        SWIFT_BACKTRACE=enable=no DUPLEX_FUZZ_TARGET="$target" "$binary" -merge=1 "$here/Corpus/$target" "$work" >>"$log" 2>&1
    fi
done
exit $status
