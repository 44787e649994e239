#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# profile.sh - where both cores' time goes, kernel included, during one load of one echo
# server: perf sampling of the cpu-clock software event (this machine's virtual CPUs expose
# no hardware counters, but the software clock samples kernel and user code alike; run as
# root or with kernel.perf_event_paranoid <= 0 for kernel symbols).
#
#   bench/profile.sh MODE CONNS OUT -- SERVER COMMAND...       (paths relative to bench/)
#   bench/profile.sh stream 1 /tmp/sk-stream -- ../.build/c-out/echo_server --raw
#   bench/profile.sh udp 16 /tmp/epoll-udp -- bin/echo_epoll
#
# The server runs on CPU ${SERVER_CPU:-0} and the load generator on CPU ${LOADGEN_CPU:-1}, as
# in run.sh; samples are taken for ${SECONDS_SAMPLED:-3} s after 1 s of load. Prints, per
# core, the share of samples in the kernel, in each user-space object and idle (the
# hypervisor's halt), then the top symbols. OUT.data keeps the samples (with call graphs:
# perf report -i OUT.data --cpu 1 --no-children -G). Kernel time inside interrupt-disabled
# sections is reported where interrupts come back on (_raw_spin_unlock_irqrestore,
# handle_softirqs): read those as "network stack", not as lock cost.
set -eu
here="$(cd "$(dirname "$0")" && pwd)"
mode=$1 conns=$2 out=$3
shift 4
command -v perf > /dev/null || { echo "profile.sh: perf is not installed (apt-get install linux-perf)"; exit 1; }
cd "$here"
port=$((20000 + RANDOM % 20000))
server_cpu=${SERVER_CPU:-0} loadgen_cpu=${LOADGEN_CPU:-1}
taskset -c "$server_cpu" "$@" --port $port --udp-port $((port + 1)) > "$out.log" 2>&1 &
pid=$!
trap 'kill -TERM $pid 2> /dev/null || true' EXIT
for _ in $(seq 1 100); do (exec 3<> "/dev/tcp/127.0.0.1/$port") 2> /dev/null && break; sleep 0.1; done
target=$port
[ "$mode" = udp ] && target=$((port + 1))
sampled=${SECONDS_SAMPLED:-3}
taskset -c "$loadgen_cpu" bin/loadgen --mode "$mode" --port $target --conns "$conns" \
    --duration $((sampled + 2)) --warmup 0 > "$out.loadgen" &
load=$!
sleep 1
perf record -q -g -a -C "$server_cpu,$loadgen_cpu" -e cpu-clock -F 4000 -o "$out.data" -- sleep "$sampled" 2> /dev/null
wait $load
grep -o 'rps=[0-9.]*\|mbps=[0-9.]*' "$out.loadgen" | head -1
for cpu in "$server_cpu" "$loadgen_cpu"; do
    [ "$cpu" = "$server_cpu" ] && role=server || role=loadgen
    echo "== CPU $cpu ($role): share of samples by object"
    perf report -i "$out.data" --cpu "$cpu" --no-children -g none --sort dso --stdio 2> /dev/null \
        | grep -v '^#' | grep -v '^$' | head -6
    idle=$(perf report -i "$out.data" --cpu "$cpu" --no-children -g none --sort sym --stdio 2> /dev/null \
        | awk '/pv_native_safe_halt|default_idle|intel_idle|poll_idle/ {gsub(/%/, "", $1); s += $1} END {printf "%.1f", s}')
    echo "   idle: $idle%"
    echo "== CPU $cpu ($role): top symbols"
    perf report -i "$out.data" --cpu "$cpu" --no-children -g none --sort comm,sym --stdio 2> /dev/null \
        | grep -v '^#' | grep -v '^$' | head -"${TOP:-15}" | cut -c1-120
done
