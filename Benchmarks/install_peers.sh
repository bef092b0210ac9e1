#!/bin/bash
# Installs what the benchmark peers need, only what is missing: from Debian, node-ws (Node `ws`),
# golang-go and golang-github-gorilla-websocket-dev (gorilla/websocket), libuv1 (for socketify);
# from PyPI, socketify (uWebSockets), picows and uvloop, and websockets. Fails loudly when
# something cannot be installed. Benchmarks/server_echo.sh and client_peers.sh run it first.
set -euo pipefail
debs=()
[ -f /usr/share/nodejs/ws/index.js ] || debs+=(node-ws)
command -v go >/dev/null || debs+=(golang-go)
[ -d /usr/share/gocode/src/github.com/gorilla/websocket ] || debs+=(golang-github-gorilla-websocket-dev)
ldconfig -p | grep -q 'libuv\.so\.1' || debs+=(libuv1)
if [ ${#debs[@]} -gt 0 ]; then
  echo "installing from Debian: ${debs[*]}" >&2
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${debs[@]}" >/dev/null
fi
pips=()
for module in socketify picows uvloop websockets; do
  python3 -c "import $module" 2>/dev/null || pips+=("$module")
done
if [ ${#pips[@]} -gt 0 ]; then
  echo "installing from PyPI: ${pips[*]}" >&2
  python3 -m pip install --quiet "${pips[@]}"
fi
for module in socketify picows uvloop websockets; do
  python3 -c "import $module" || { echo "the Python package $module could not be installed" >&2; exit 1; }
done
