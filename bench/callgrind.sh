#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# callgrind.sh - user-space instructions per operation of one echo server, under callgrind:
# deterministic, so it compares servers (and changes) where timed runs on a shared machine
# are too noisy. Kernel time is not counted: compare system calls with strace -c.
#
#   bench/callgrind.sh [--tls] MODE CONNS OUT -- SERVER COMMAND...
#   bench/callgrind.sh pingpong 64 /tmp/sk.cg -- .build/c-out/echo_server --raw
#
# MODE is a loadgen mode (pingpong, stream, udp, connect). The server gets --port/--udp-port
# (and --tls with bench/certs), counting starts once it listens and stops when the load
# does (loadgen --warmup 0), so start-up is not counted; with --tls the handshakes are
# (subtract a shorter run: DURATION=3 vs DURATION=9). Then: callgrind_annotate OUT.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
tls=()
client_tls=()
if [ "${1:-}" = "--tls" ]; then
    tls=(--tls "$here/certs/cert.pem" "$here/certs/key.pem")
    client_tls=(--tls)
    shift
fi
mode=$1 conns=$2 out=$3
shift 4
port=$((20000 + RANDOM % 20000))
log="$out.log"
valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file="$out" "$@" --port $port \
    --udp-port $((port + 1)) "${tls[@]}" > "$log" 2>&1 &
pid=$!
for _ in $(seq 1 600); do grep -q listening "$log" && break; sleep 0.1; done
callgrind_control -i on $pid > /dev/null 2>&1
target=$port
[ "$mode" = udp ] && target=$((port + 1))
result=$("$here/bin/loadgen" --mode "$mode" "${client_tls[@]}" --port $target --conns "$conns" \
    --duration "${DURATION:-4}" --warmup 0)
callgrind_control -i off $pid > /dev/null 2>&1
kill -TERM $pid
wait $pid || true
echo "$result"
total=$(grep "Collected :" "$log" | awk '{print $NF}')
ops=$(echo "$result" | grep -o 'total_ops=[0-9]*' | cut -d= -f2)
if [ "${ops:-0}" -gt 0 ]; then
    echo "instructions=$total operations=$ops per_operation=$((total / ops))"
else
    echo "instructions=$total (no operations counted: for stream, divide by the MB echoed)"
fi
