#!/usr/bin/env bash
# Chat fan-out on one server: duplex-server (memory store) next to a Node `ws` broadcast server
# (Benchmarks/node_chat_server.js), under the same load from Benchmarks/chat_load.c (C, epoll: it
# spends less CPU per delivery than the servers do, so it is not what is measured; CHAT_LOAD=node
# uses the earlier Node generator, Benchmarks/chat_load.js, which spends more): SENDERS members
# each say 1 message a second for 10 s in a room of MEMBERS.
#
#   Benchmarks/chat_fanout.sh .build-release/release/duplex-server [runs]
#
# Server on CPU 0, load generator on CPU 1. Reports, per server and room size, the medians over
# `runs` (default 3) interleaved runs of delivery latency p50/p99 and the server's CPU time
# (user + system, from /proc): per message delivered in the steady phase (after every member
# joined), per join in the join phase (each join announces the member to the room), and in all
# per message delivered; the generator's own CPU per delivery in the steady phase; and checks
# every delivery.
# DUPLEX_SERVER_FLAGS adds flags to duplex-server (default: --event-loops 1, one event loop for
# the one core it is pinned to, as Node has one thread). CHAT_FANOUT_MEMBERS sets the room sizes
# (default "100 1000"). SERVERS picks the servers (default "duplex node"; "duplex=PATH" runs
# another duplex-server build, to compare two in the same rounds).
set -euo pipefail
bin=${1:?usage: chat_fanout.sh DUPLEX_SERVER_BINARY [runs]}
runs=${2:-3}
here=$(cd "$(dirname "$0")" && pwd)
out=$(mktemp -d /tmp/duplex-fanout-XXXXXX)
server=""
trap '[ -n "$server" ] && kill "$server" 2>/dev/null; rm -rf "$out"' EXIT
gcc -O2 -o "$out/chat_load" "$here/chat_load.c"

cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

run() { # name members senders
    local name=$1 members=$2 senders=$3 port
    if [ "${name%%=*}" = duplex ]; then
        local binary=$bin
        [ "$name" != duplex ] && binary=${name#duplex=}
        # shellcheck disable=SC2086
        taskset -c 0 "$binary" --port 0 --log-level error --no-compression ${DUPLEX_SERVER_FLAGS---event-loops 1} >"$out/server.out" 2>&1 &
    else
        taskset -c 0 node "$here/node_chat_server.js" 0 >"$out/server.out" 2>&1 &
    fi
    server=$!
    for _ in $(seq 1 100); do
        port=$(grep -oE '(listening on (http://127.0.0.1:)?)[0-9]+' "$out/server.out" | grep -oE '[0-9]+$' || true)
        [ -n "$port" ] && break
        sleep 0.1
    done
    local before after result
    before=$(cpu_ticks "$server")
    if [ "${CHAT_LOAD:-c}" = node ]; then
        result=$(SERVER_PIDS=$server taskset -c 1 node "$here/chat_load.js" latency "ws://127.0.0.1:$port" "$members" "$senders" 1 10)
    else
        result=$(SERVER_PIDS=$server taskset -c 1 "$out/chat_load" "$port" "$members" "$senders" 1 10)
    fi
    after=$(cpu_ticks "$server")
    kill "$server"; wait "$server" 2>/dev/null || true; server=""
    echo "{\"server\": \"$name\", \"members\": $members, \"cpu_seconds\": $(awk -v a="$after" -v b="$before" -v hz="$(getconf CLK_TCK)" 'BEGIN { print (a - b) / hz }'), \"result\": $result}" | tee -a "$out/results.jsonl" >&2
}

for _ in $(seq 1 "$runs"); do
    for members in ${CHAT_FANOUT_MEMBERS:-100 1000}; do
        for name in ${SERVERS:-duplex node}; do run "$name" "$members" 10; done
    done
done

python3 - "$out/results.jsonl" <<'EOF'
import json, statistics, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
groups = {}
for row in rows:
    groups.setdefault((row["members"], row["server"]), []).append(row)
print("| members | server | p50 ms | p99 ms | steady CPU µs per delivery | join CPU µs per join | all CPU µs per delivery | generator CPU µs per delivery | lost or duplicated |")
print("|---|---|---|---|---|---|---|---|---|")
for (members, server), rs in sorted(groups.items()):
    med = lambda key: round(statistics.median(r["result"][key] for r in rs), 2)
    per = lambda f: statistics.median(f(r) for r in rs)
    steady = per(lambda r: r["result"]["server_cpu_steady_s"] * 1e6 / max(r["result"]["deliveries"], 1))
    join = per(lambda r: r["result"]["server_cpu_join_s"] * 1e6 / r["members"])
    cpu = per(lambda r: r["cpu_seconds"] * 1e6 / max(r["result"]["deliveries"], 1))
    load = per(lambda r: r["result"].get("load_cpu_steady_s", 0) * 1e6 / max(r["result"]["deliveries"], 1))
    bad = sum(r["result"]["members_short"] + r["result"]["duplicates"] + r["result"]["expected_deliveries"] - r["result"]["deliveries"] for r in rs)
    print(f"| {members} | {server} | {med('all_p50_ms')} | {med('all_p99_ms')} | {steady:.1f} | {join:.0f} | {cpu:.1f} | {load:.1f} | {bad} |")
EOF
