#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# run.sh - run the echo-server benchmark side by side (SocketKit and its peers).
#
#   ./run.sh [-r REPS] [-d SECONDS] [-w WARMUP] [-s "server ..."] [-c "scenario ..."] [-o DIR]
#
# Each (rep, scenario, server) run starts a FRESH server pinned to CPU $SERVER_CPU
# (taskset), waits for its TCP port, runs bin/loadgen pinned to CPU $LOADGEN_CPU,
# samples the server's CPU time (/proc/PID/stat) and memory (/proc/PID/status),
# then stops the server by its own PID (TERM, then KILL after 3 s).
# Loops are ordered rep > scenario > server so drift hits every server alike.
# Raw lines go to $OUT/raw.txt, the median table to $OUT/summary.md.
#
# Servers come from servers.conf, or $SERVERS_CONF (NAME CAPS COMMAND); the harness appends
#   --port $PORT --udp-port $UDP_PORT   [--tls certs/cert.pem certs/key.pem]
set -u
cd "$(dirname "$0")"

REPS=3
DURATION=5
WARMUP=1
SERVERS=""
SCENARIOS="pp1 pp64 pp1000 stream1 connect udp1 udp16 idle10k tls-pp1 tls-pp64 tls-stream1 tls-connect tls-idle10k"
OUT="results/$(date +%Y%m%d-%H%M%S)"
PORT=${PORT:-25100}
UDP_PORT=${UDP_PORT:-25101}
SERVER_CPU=${SERVER_CPU:-0}
LOADGEN_CPU=${LOADGEN_CPU:-1}
HOST=${HOST:-127.0.0.1}
CONNECT_CONC=${CONNECT_CONC:-16}
IDLE_CONNS=${IDLE_CONNS:-10000}

while getopts "r:d:w:s:c:o:h" o; do
    case $o in
    r) REPS=$OPTARG ;;
    d) DURATION=$OPTARG ;;
    w) WARMUP=$OPTARG ;;
    s) SERVERS=$OPTARG ;;
    c) SCENARIOS=$OPTARG ;;
    o) OUT=$OPTARG ;;
    *) sed -n '2,16p' "$0"; exit 2 ;;
    esac
done

[ -x bin/loadgen ] || { echo "build first: make" >&2; exit 1; }
[ -f certs/cert.pem ] || { echo "missing certs/cert.pem: make certs/cert.pem" >&2; exit 1; }
ulimit -n 110000 2>/dev/null || ulimit -n "$(ulimit -Hn)"
# idlemax: 100,000 idle connections, or as many as the descriptor limit allows (the server
# and the load generator each hold one descriptor per connection)
IDLE_MAX=${IDLE_MAX:-$(( $(ulimit -n) - 200 < 100000 ? $(ulimit -n) - 200 : 100000 ))}
IDLE_SOURCES=$(( (IDLE_MAX + 24999) / 25000 )) # ~28,000 ephemeral ports per source address
if [ "$(ulimit -n)" -lt $((IDLE_CONNS + 100)) ]; then
    echo "warning: ulimit -n $(ulimit -n) is too small for $IDLE_CONNS idle connections" >&2
fi
mkdir -p "$OUT"
RAW="$OUT/raw.txt"
CLK_TCK=$(getconf CLK_TCK)

declare -A CAPS CMD
ORDER=()
while read -r name caps cmd; do
    case "$name" in ''|\#*) continue ;; esac
    CAPS[$name]=$caps
    CMD[$name]=$cmd
    ORDER+=("$name")
done < "${SERVERS_CONF:-servers.conf}"
[ -n "$SERVERS" ] || SERVERS="${ORDER[*]}"

now() { date +%s.%N; }
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat" 2>/dev/null || echo 0; }
# "busy total" jiffies of one CPU from /proc/stat (busy = user+nice+system+irq+softirq+steal);
# the server is alone on its CPU, so this is the server's cost including kernel work
core_jiffies() { awk -v c="cpu$1" '$1 == c {b = $2 + $3 + $4 + $7 + $8 + $9; print b, b + $5 + $6}' /proc/stat; }
status_kb() { awk -v k="$2:" '$1 == k {print $2}' "/proc/$1/status" 2>/dev/null || echo 0; }

SPID=""
start_server() { # name tls(0/1)
    local name=$1 tls=$2 args="--port $PORT --udp-port $UDP_PORT"
    [ "$tls" = 1 ] && args="$args --tls certs/cert.pem certs/key.pem"
    [ "$HOST" = 127.0.0.1 ] || args="$args --host $HOST" # e.g. HOST=::1 for IPv6
    # shellcheck disable=SC2086
    taskset -c "$SERVER_CPU" ${CMD[$name]} $args >>"$OUT/server-$name.log" 2>&1 &
    SPID=$!
    for _ in $(seq 1 200); do # up to 20 s
        if ! kill -0 "$SPID" 2>/dev/null; then echo "server $name died at start" >&2; SPID=""; return 1; fi
        if timeout 1 bash -c "exec 3<>/dev/tcp/$HOST/$PORT" 2>/dev/null; then sleep 0.2; return 0; fi
        sleep 0.1
    done
    echo "server $name did not open port $PORT" >&2
    stop_server
    return 1
}

stop_server() {
    [ -n "$SPID" ] || return 0
    kill -TERM "$SPID" 2>/dev/null
    for _ in $(seq 1 30); do kill -0 "$SPID" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$SPID" 2>/dev/null && kill -KILL "$SPID" 2>/dev/null
    wait "$SPID" 2>/dev/null
    SPID=""
    sleep "${SETTLE:-0.7}" # let the kernel finish tearing down the previous run
}

LG_LIMIT=$(awk -v d="$DURATION" -v w="$WARMUP" 'BEGIN{print int(d + w + 150)}')
loadgen() { timeout "$LG_LIMIT" taskset -c "$LOADGEN_CPU" bin/loadgen --host "$HOST" --duration "$DURATION" --warmup "$WARMUP" "$@"; }

run_one() { # rep scenario server
    local rep=$1 sc=$2 name=$3 tls=0 base=${sc#tls-} lgargs extra="" res
    [ "$base" != "$sc" ] && tls=1
    local need=tcp
    [[ $base == udp* ]] && need=udp
    [ "$tls" = 1 ] && need=tls
    case ",${CAPS[$name]}," in *,$need,*) ;; *) return 0 ;; esac # server lacks it: skip
    case $base in
    pp1) lgargs="--mode pingpong --port $PORT --conns 1" ;;
    pp64) lgargs="--mode pingpong --port $PORT --conns 64" ;;
    pp1000) lgargs="--mode pingpong --port $PORT --conns 1000" ;;
    stream1) lgargs="--mode stream --port $PORT --conns 1" ;;
    stream1m) lgargs="--mode stream --port $PORT --conns 1 --chunk 1048576" ;;
    connect) lgargs="--mode connect --port $PORT --conc $CONNECT_CONC" ;;
    udp1) lgargs="--mode udp --port $UDP_PORT --conns 1" ;;
    udp16) lgargs="--mode udp --port $UDP_PORT --conns 16" ;;
    idle10k) lgargs="--mode idle --port $PORT --conns $IDLE_CONNS --hold 2 --conc 64" ;;
    idlemax) lgargs="--mode idle --port $PORT --conns $IDLE_MAX --sources $IDLE_SOURCES --hold 2 --conc 64 --timeout 120" ;;
    *) echo "unknown scenario $sc" >&2; return 0 ;;
    esac
    [ "$tls" = 1 ] && lgargs="$lgargs --tls"
    start_server "$name" "$tls" || { echo "RUN server=$name scenario=$sc rep=$rep FAILED=start" >>"$RAW"; return 0; }
    local rss0 c0 t0 c1 t1 rss_hold=0
    rss0=$(status_kb "$SPID" VmRSS)
    local s0 l0 s1 l1
    s0=$(core_jiffies "$SERVER_CPU"); l0=$(core_jiffies "$LOADGEN_CPU")
    c0=$(cpu_ticks "$SPID"); t0=$(now)
    if [[ $base == idle* ]]; then
        local tmp="$OUT/.idle.out"
        : >"$tmp" # exists before the wait below first reads it
        # shellcheck disable=SC2086
        loadgen $lgargs --label "$name" >"$tmp" 2>>"$OUT/loadgen.err" &
        local lg=$!
        for _ in $(seq 1 600); do grep -q IDLE_READY "$tmp" && break; kill -0 $lg 2>/dev/null || break; sleep 0.1; done
        sleep 0.5
        rss_hold=$(status_kb "$SPID" VmRSS)
        wait $lg
        res=$(grep '^RESULT' "$tmp")
        rm -f "$tmp"
    else
        # shellcheck disable=SC2086
        res=$(loadgen $lgargs --label "$name" 2>>"$OUT/loadgen.err" | grep '^RESULT')
    fi
    c1=$(cpu_ticks "$SPID"); t1=$(now)
    s1=$(core_jiffies "$SERVER_CPU"); l1=$(core_jiffies "$LOADGEN_CPU")
    local hwm srv_proc srv_core lg_core
    hwm=$(status_kb "$SPID" VmHWM)
    # srv_proc: server process utime+stime per wall second (all its threads)
    srv_proc=$(awk -v a="$c0" -v b="$c1" -v t0="$t0" -v t1="$t1" -v hz="$CLK_TCK" 'BEGIN{printf "%.2f", (b-a)/hz/(t1-t0)}')
    # srv_core / lg_core: busy fraction of the server's / loadgen's CPU incl. softirq
    srv_core=$(echo "$s0 $s1" | awk '{d = $4 - $2; printf "%.2f", (d > 0 ? ($3 - $1) / d : 0)}')
    lg_core=$(echo "$l0 $l1" | awk '{d = $4 - $2; printf "%.2f", (d > 0 ? ($3 - $1) / d : 0)}')
    if [[ $base == idle* ]]; then
        extra=" rss0_kb=$rss0 rss_hold_kb=$rss_hold hwm_kb=$hwm"
    else
        extra=" srv_proc=$srv_proc srv_core=$srv_core lg_core=$lg_core hwm_kb=$hwm"
    fi
    stop_server
    [ -n "$res" ] || res="RESULT FAILED=loadgen"
    echo "RUN server=$name scenario=$sc rep=$rep ${res#RESULT }$extra" | tee -a "$RAW"
}

trap 'stop_server; exit 130' INT TERM
{
    echo "# $(date -u +%FT%TZ) reps=$REPS duration=$DURATION warmup=$WARMUP servers=[$SERVERS]"
    echo "# limits: descriptors $(ulimit -n), idlemax connections $IDLE_MAX over $IDLE_SOURCES source addresses"
    echo "# host: $(nproc) cpus, $(uname -srm), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
} >>"$RAW"
for rep in $(seq 1 "$REPS"); do
    for sc in $SCENARIOS; do
        for name in $SERVERS; do
            run_one "$rep" "$sc" "$name"
        done
    done
done
python3 summarize.py "$RAW" | tee "$OUT/summary.md"
echo "raw: $RAW"
