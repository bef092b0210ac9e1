#!/usr/bin/env bash
# Chat through several duplex-server nodes on PostgreSQL, next to the in-memory store on one node:
# delivery latency (p50, p99) at 100 and 1,000 members, and messages a second per room and in total.
#
#   Benchmarks/chat_nodes.sh .build-release/release/duplex-server [runs]
#
# Environment: BEFORE=BINARY also runs an earlier build on PostgreSQL in the same rounds ("postgres
# (before)"); SECONDS_PER_CASE (10) sets each throughput case's length; QUICK=1 runs only the
# throughput cases with 1 and 30 rooms. SERVER_CPUS (0) and LOAD_CPUS (1) are the CPU lists
# (taskset -c) for PostgreSQL and the servers, and for the load generator: "0,1" for both lets
# them share the machine's two cores.
#
# Starts a throwaway PostgreSQL cluster with its default durability settings (fsync and
# synchronous_commit on), as the postgres user when run as root. The cluster and the servers run
# on CPU 0, the load generator (Benchmarks/chat_load.js, Node `ws`) on CPU 1 (unless SERVER_CPUS
# and LOAD_CPUS say otherwise). Each case runs
# `runs` times (default 3), the cases interleaved; prints the median of each figure as a
# Markdown table, and the raw JSON lines to chat_nodes.jsonl.
set -euo pipefail
bin=${1:?usage: chat_nodes.sh DUPLEX_SERVER_BINARY [runs]}
runs=${2:-3}
here=$(cd "$(dirname "$0")" && pwd)
pg_bin=${DUPLEX_PG_BIN:-$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)}
work=$(mktemp -d /tmp/duplex-bench-XXXXXX)
as_pg() { if [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
[ "$(id -u)" -eq 0 ] && chown postgres "$work"
pids=()
cleanup() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    as_pg "$pg_bin/pg_ctl" -D "$work/data" -m fast -w stop >/dev/null 2>&1 || true
    rm -rf "$work"
}
trap cleanup EXIT

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
as_pg "$pg_bin/initdb" -D "$work/data" -A trust -U duplex >/dev/null
server_cpus=${SERVER_CPUS:-0}
load_cpus=${LOAD_CPUS:-1}
as_pg taskset -c "$server_cpus" "$pg_bin/pg_ctl" -D "$work/data" -l "$work/pg.log" -w \
    -o "-p $port -k $work -c listen_addresses=127.0.0.1 -c max_connections=100" start >/dev/null
psql() { "$pg_bin/psql" -h 127.0.0.1 -p "$port" -U duplex -At "$@"; }

start_node() { # store, binary; sets node_port
    local out="$work/node-$RANDOM$RANDOM"
    taskset -c "$server_cpus" "$2" --port 0 --store "$1" --log-level error --max-connections 20000 >"$out.out" 2>"$out.log" &
    pids+=($!)
    for _ in $(seq 1 100); do
        node_port=$(sed -n 's/^duplex-server listening on http:\/\/127.0.0.1:\([0-9]*\)$/\1/p' "$out.out")
        [ -n "$node_port" ] && return
        sleep 0.1
    done
    echo "a node did not start: $(cat "$out.log")" >&2
    exit 1
}
stop_nodes() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; done
    pids=()
}

# A case: its name, its store (postgres or memory), how many nodes, and chat_load.js's mode and
# arguments after NODES.
run_case() {
    local name=$1 store=$2 nodes=$3; shift 3
    local urls="" url
    local node_bin=$bin
    case "$store" in
    postgres*)
        local db="b$RANDOM$RANDOM"
        psql -d postgres -c "CREATE DATABASE $db" >/dev/null
        # "postgres, synchronous_commit off": a commit does not wait for its WAL flush.
        [ "$store" = "postgres, synchronous_commit off" ] && psql -d postgres -c "ALTER DATABASE $db SET synchronous_commit = off" >/dev/null
        [ "$store" = "postgres (before)" ] && node_bin=$BEFORE
        url="postgres://duplex@127.0.0.1:$port/$db"
        ;;
    *)
        url=memory
        ;;
    esac
    for i in $(seq 1 "$nodes"); do
        start_node "$url" "$node_bin"
        urls="${urls:+$urls,}ws://127.0.0.1:$node_port"
    done
    local result
    local mode=$1; shift
    result=$(taskset -c "$load_cpus" node "$here/chat_load.js" "$mode" "$urls" "$@")
    echo "{\"case\": \"$name\", \"store\": \"$store\", \"result\": $result}" | tee -a chat_nodes.jsonl
    stop_nodes
}

: >chat_nodes.jsonl
seconds=${SECONDS_PER_CASE:-10}
stores=(postgres "postgres, synchronous_commit off")
[ -n "${BEFORE:-}" ] && stores+=("postgres (before)")
for run in $(seq 1 "$runs"); do
    echo "== run $run of $runs" >&2
    # latency: MEMBERS SENDERS RATE SECONDS; throughput: ROOMS MEMBERS_PER_ROOM SENDERS_PER_ROOM WINDOW SECONDS
    if [ -z "${QUICK:-}" ]; then
        for members in 100 1000; do
            run_case "latency, $members members" postgres 3 latency "$members" 10 1 10
            run_case "latency, $members members" memory 1 latency "$members" 10 1 10
        done
    fi
    for rooms in 1 3 30; do
        [ -n "${QUICK:-}" ] && [ "$rooms" = 3 ] && continue
        for window in 8 64; do
            for store in "${stores[@]}"; do
                run_case "throughput, $rooms room$([ "$rooms" = 1 ] || echo s), $window in flight" "$store" 3 throughput "$rooms" 30 3 "$window" "$seconds"
            done
            run_case "throughput, $rooms room$([ "$rooms" = 1 ] || echo s), $window in flight" memory 1 throughput "$rooms" 30 3 "$window" "$seconds"
        done
    done
done

python3 - <<'EOF'
import json, statistics
rows = [json.loads(line) for line in open("chat_nodes.jsonl")]
cases = {}
for row in rows:
    cases.setdefault((row["case"], row["store"]), []).append(row["result"])
def med(values):
    values = [v for v in values if v is not None]
    return round(statistics.median(values), 2) if values else "–"
print("| case | store | nodes | p50 ms (cross-node) | p99 ms (cross-node) | p50 ms (all) | p99 ms (all) | msgs/s per room | msgs/s total | lost or duplicated |")
print("|---|---|---|---|---|---|---|---|---|---|")
for (case, store), results in cases.items():
    nodes = results[0]["nodes"]
    if results[0]["mode"] == "latency":
        bad = sum(r["members_short"] + r["duplicates"] + (r["expected_deliveries"] - r["deliveries"]) for r in results)
        print(f"| {case} | {store} | {nodes} | {med([r['cross_node_p50_ms'] for r in results])} | {med([r['cross_node_p99_ms'] for r in results])} | "
              f"{med([r['all_p50_ms'] for r in results])} | {med([r['all_p99_ms'] for r in results])} | – | – | {bad} |")
    else:
        per_room = med([statistics.mean(r["messages_per_second_per_room"].values()) for r in results])
        print(f"| {case} | {store} | {nodes} | – | – | – | – | {per_room} | {med([r['messages_per_second_total'] for r in results])} | – |")
# A member the server closed during a throughput run (its outbound queue full, or 1013 when the
# store failed) stops sending: that run's rate counts fewer senders.
for (case, store), results in cases.items():
    closed = [r.get("closed_by_server") for r in results if r.get("closed_by_server")]
    if closed:
        print(f"\nwarning: {case}, {store}: members closed by the server during the run, by close code: {closed}")
EOF
