#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# bench.sh - everything `make bench` measures, written to docs/PERFORMANCE.md.
#
#   bench/bench.sh [-r REPS] [-d SECONDS] [-o DIR]
#
# 1. run.sh: every server (servers.conf) x the TCP, UDP and TLS scenarios, REPS repetitions, server on
#    CPU 0 and load generator on CPU 1, fresh server per run;
# 2. alloc_bench.py: heap allocations per echoed message and per connection;
# 3. report.py: medians, ratios, the targets of issue 7 -> docs/PERFORMANCE.md.
# Build first (the top-level `make bench` does: library, C examples, Python venv with
# uvloop, bench/Makefile).
set -eu
cd "$(dirname "$0")"
REPS=3
DURATION=3
OUT="results/$(date +%Y%m%d-%H%M%S)"
while getopts "r:d:o:h" o; do
    case $o in
    r) REPS=$OPTARG ;;
    d) DURATION=$OPTARG ;;
    o) OUT=$OPTARG ;;
    *) sed -n '2,12p' "$0"; exit 2 ;;
    esac
done
SERVERS="c-epoll libuv nio asyncio uvloop sk-c sk-swift sk-py"
SCENARIOS="pp1 pp64 pp1000 stream1 connect idlemax udp1 udp16 tls-pp64 tls-stream1m tls-connect tls-idle10k"
for tool in bin/loadgen bin/echo_epoll bin/echo_uv bin/count_alloc.so nio-echo/.build/release/nio-echo \
    ../.build/c-out/echo_server ../.build/release/socketkit-echo ../.build/venv/bin/python; do
    [ -x "$tool" ] || { echo "bench.sh: $tool is missing: run 'make bench' from the top level" >&2; exit 1; }
done
mkdir -p "$OUT"
echo "bench.sh: $REPS repetition(s) of [$SCENARIOS] x [$SERVERS], ${DURATION}s each; results in bench/$OUT"
./run.sh -r "$REPS" -d "$DURATION" -w 1 -s "$SERVERS" -c "$SCENARIOS" -o "$OUT"
echo "bench.sh: allocation counts"
PYTHONMALLOC=malloc python3 alloc_bench.py --servers "c-epoll libuv nio asyncio uvloop sk-c sk-swift sk-py" \
    --out "$OUT/raw.txt" || echo "bench.sh: some allocation counts failed (see the report)" >&2
python3 report.py "$OUT/raw.txt" > ../docs/PERFORMANCE.md
echo "bench.sh: wrote docs/PERFORMANCE.md (raw data: bench/$OUT/raw.txt)"
