#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# multiloop.sh - a listener on every loop against one loop: the 64-byte ping-pong over 64
# connections (run.sh's pp64; -c for others), side by side in one run, as ratios to one loop.
#
#   bench/multiloop.sh [-r REPS] [-d SECONDS] [-c "scenario ..."]
#
# Servers: multiloop.conf (one loop; two loops handing each connection over; two loops
# each accepting its own). The server may use CPUs $SERVER_CPU (default 0,1: both cores of
# the machines this was written on) and the load generator $LOADGEN_CPU (default 0,1 too):
# with two cores, a second loop shares its core with the load generator, which the figures
# then show. Needs the release programs (make programs) for socketkit-echo.
set -u
cd "$(dirname "$0")"
REPS=3
DURATION=5
SCENARIOS=pp64
while getopts "r:d:c:h" o; do
    case $o in
    r) REPS=$OPTARG ;;
    d) DURATION=$OPTARG ;;
    c) SCENARIOS=$OPTARG ;;
    *) sed -n '2,12p' "$0"; exit 2 ;;
    esac
done
make -s bin/loadgen certs/cert.pem >/dev/null || exit 1
[ -x ../.build/release/socketkit-echo ] || { echo "build first: make programs" >&2; exit 1; }
OUT="results/multiloop-$(date +%Y%m%d-%H%M%S)"
SERVERS="sk-1-loop sk-2-loops-handoff sk-2-loops-every"
SERVERS_CONF=multiloop.conf SERVER_CPU=${SERVER_CPU:-0,1} LOADGEN_CPU=${LOADGEN_CPU:-0,1} \
    ./run.sh -r "$REPS" -d "$DURATION" -s "$SERVERS" -c "$SCENARIOS" -o "$OUT" >/dev/null || exit 1
python3 summarize.py "$OUT/raw.txt" --ref sk-1-loop | tee "$OUT/summary.md"
echo "raw: $OUT/raw.txt"
