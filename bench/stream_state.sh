#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# stream_state.sh - which steady state a stream echo lands in: the server's reads, writes and
# sleeps per MB, and its CPU per MB, over one 3 s stream (server pinned to CPU 0, load
# generator to CPU 1, as run.sh does). See README.md ("two steady states").
#
#   bench/stream_state.sh NAME SERVER COMMAND...
#   bench/stream_state.sh sk-c ../.build/c-out/echo_server --raw     (paths relative to bench/)
#
# reads/writes count read(2)/write(2)-family calls (/proc/PID/io syscr/syscw: recv and send
# are not counted), sleeps are voluntary context switches of all the server's threads.
set -u
cd "$(dirname "$0")"
name=$1
shift
port=${PORT:-25330}
taskset -c "${SERVER_CPU:-0}" "$@" --port "$port" --udp-port $((port + 1)) > /dev/null 2>&1 &
pid=$!
for _ in $(seq 1 100); do (exec 3<> "/dev/tcp/127.0.0.1/$port") 2> /dev/null && break; sleep 0.1; done
snapshot() {
    awk '/^syscr|^syscw/ {printf "%s ", $2}' "/proc/$pid/io"
    cat /proc/"$pid"/task/*/status | awk '/^voluntary_ctxt_switches/ {s += $2} END {printf "%d ", s}'
    awk '{print $14 + $15}' "/proc/$pid/stat"
}
before=$(snapshot)
result=$(taskset -c "${LOADGEN_CPU:-1}" bin/loadgen --mode stream --port "$port" --conns 1 --duration 3 --warmup 0)
after=$(snapshot)
kill -TERM $pid
wait $pid 2> /dev/null
mbps=$(echo "$result" | grep -o 'mbps=[0-9.]*' | cut -d= -f2)
echo "$before $after $mbps $(getconf CLK_TCK)" | awk -v name="$name" '{
    mb = $9 * 3
    printf "%-10s %6.0f MB/s  reads/MB %5.1f  writes/MB %5.1f  sleeps/MB %5.1f  server core-ms/MB %.3f\n",
        name, $9, ($5 - $1) / mb, ($6 - $2) / mb, ($7 - $3) / mb, ($8 - $4) * 1000 / $10 / mb }'
