#!/usr/bin/env bash
# Memory per connection of duplex-server at N connections (default 10,000), for each kind of
# connection, with Benchmarks/server_rss.py: medians of `runs` (default 3) interleaved runs.
#
#   Benchmarks/server_memory.sh .build-release/release/duplex-server [runs] [connections]
#
# Needs Python's websockets. Every connection is to 127.0.0.1. Prints a Markdown table.
set -euo pipefail
bin=${1:?usage: server_memory.sh DUPLEX_SERVER_BINARY [runs] [connections]}
runs=${2:-3}
count=${3:-10000}
here=$(cd "$(dirname "$0")" && pwd)
out=$(mktemp /tmp/duplex-memory-XXXXXX)
trap 'rm -f "$out"' EXIT

# name | environment | server flags
cases=(
  "WebSocket /echo, no compression offered, silent|DUPLEX_RSS_DEFLATE=0 DUPLEX_RSS_SILENT=1|"
  "WebSocket /echo, no compression offered, after one message|DUPLEX_RSS_DEFLATE=0|"
  "WebSocket /echo, compression negotiated, silent|DUPLEX_RSS_SILENT=1|"
  "WebSocket /echo, compression negotiated, after one 1-byte message|DUPLEX_RSS_MESSAGE_BYTES=1|"
  "WebSocket /echo, compression negotiated, after one 1,000-byte message each way|DUPLEX_RSS_MESSAGE_BYTES=1000|"
  "WebSocket /echo, compression negotiated, after one 8 KiB message each way (windows full)|DUPLEX_RSS_MESSAGE_BYTES=8192|"
  "the same, --compression-window-bits 10|DUPLEX_RSS_MESSAGE_BYTES=8192|--compression-window-bits 10"
  "chat member (rooms of 100, compression negotiated), after its welcome|DUPLEX_RSS_KIND=chat|"
  "room SSE subscriber, silent stream|DUPLEX_RSS_KIND=sse|"
  "silent TCP connection, no request head yet|DUPLEX_RSS_KIND=tcp|"
)

for run in $(seq 1 "$runs"); do
  for entry in "${cases[@]}"; do
    IFS='|' read -r name environment flags <<<"$entry"
    # shellcheck disable=SC2086
    figure=$(env $environment python3 "$here/server_rss.py" "$bin" "$count" $flags | grep -oE 'per connection: [0-9.]+' | grep -oE '[0-9.]+$')
    echo "$name|$figure" | tee -a "$out" >&2
  done
done

python3 - "$out" "$count" <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    name, figure = line.rstrip("\n").rsplit("|", 1)
    rows.setdefault(name, []).append(float(figure))
print(f"| at {int(sys.argv[2]):,} connections | KiB per connection (median) | runs |")
print("|---|---|---|")
for name, figures in rows.items():
    print(f"| {name} | {statistics.median(figures):.1f} | {' / '.join(f'{f:.1f}' for f in figures)} |")
PY
