#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Write docs/PERFORMANCE.md from a bench.sh run (RUN lines from run.sh, ALLOC lines from
alloc_bench.py): medians, ratios to the C epoll server, and issue 7's targets.

    python3 report.py results/<run>/raw.txt > ../docs/PERFORMANCE.md
"""
import os
import platform
import statistics
import subprocess
import sys
from collections import defaultdict

from summarize import HEADLINE, num, parse

REFERENCE = "c-epoll"
PEERS = ["c-epoll", "libuv", "nio", "asyncio", "uvloop"]
OURS = ["sk-c", "sk-swift", "sk-py"]
LABELS = {
    "c-epoll": "C epoll", "libuv": "libuv", "nio": "SwiftNIO", "asyncio": "asyncio", "uvloop": "uvloop",
    "sk-c": "**SocketKit C**", "sk-swift": "**SocketKit Swift**", "sk-py": "**SocketKit Python**",
}
SCENARIO_TEXT = {
    "pp1": "64 B ping-pong, 1 connection",
    "pp64": "64 B ping-pong, 64 connections",
    "pp1000": "64 B ping-pong, 1,000 connections",
    "stream1": "stream of 64 KiB writes, 1 connection",
    "connect": "connect / 64 B echo / close, 16 at a time",
    "idlemax": "idle connections held (one echo each)",
    "udp1": "64 B UDP ping-pong, 1 client",
    "udp16": "64 B UDP ping-pong, 16 clients",
    "tls-pp64": "TLS 64 B ping-pong, 64 connections",
    "tls-stream1m": "TLS stream of 1 MiB writes, 1 connection",
    "tls-connect": "TLS connect (full handshake) / echo / close",
    "tls-idle10k": "idle TLS connections (10,000)",
}


def fmt(value, digits=None):
    if value is None:
        return "n/a"
    if digits is not None:
        return f"{value:,.{digits}f}"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


class Data:
    def __init__(self, path):
        self.path = path
        self.runs = parse([path])
        self.by = defaultdict(list)
        for run in self.runs:
            self.by[(run.get("scenario"), run.get("server"))].append(run)
        self.allocs = {}
        self.header = []
        for line in open(path):
            if line.startswith("ALLOC "):
                fields = dict(t.split("=", 1) for t in line.split()[1:] if "=" in t)
                self.allocs[fields["server"]] = fields
            elif line.startswith("# "):
                self.header.append(line[2:].strip())
        self.servers = [s for s in PEERS + OURS if any(k[1] == s for k in self.by)]
        self.scenarios = [s for s in SCENARIO_TEXT if any(k[0] == s for k in self.by)]

    def values(self, scenario, server, key):
        values = [num(r.get(key)) for r in self.by.get((scenario, server), [])]
        return [v for v in values if v is not None]

    def median(self, scenario, server, key):
        values = self.values(scenario, server, key)
        return statistics.median(values) if values else None

    def headline_key(self, scenario):
        mode = next((r.get("mode") for (sc, _), runs in self.by.items() if sc == scenario for r in runs), None)
        return HEADLINE.get(mode, (None, None, None))

    def cost(self, scenario, server):
        """Median over runs of server core-microseconds per operation (per MB for streams)."""
        values = [v for v in (self.run_cost(r, scenario) for r in self.by.get((scenario, server), [])) if v is not None]
        return statistics.median(values) if values else None

    def idle_bytes(self, server, scenario="idlemax"):
        values = []
        for run in self.by.get((scenario, server), []):
            before, holding, count = num(run.get("rss0_kb")), num(run.get("rss_hold_kb")), num(run.get("established"))
            if before is not None and holding is not None and count:
                values.append((holding - before) * 1024 / count)
        return statistics.median(values) if values else None

    def idle_count(self, server, scenario="idlemax"):
        values = self.values(scenario, server, "established")
        return int(statistics.median(values)) if values else None

    def spread(self, scenario, server, key):
        values = self.values(scenario, server, key)
        if not values or not statistics.median(values):
            return None
        return (max(values) - min(values)) / statistics.median(values)

    def run_cost(self, run, scenario):
        rate, core = num(run.get(self.headline_key(scenario)[0])), num(run.get("srv_core"))
        return core * 1e6 / rate if rate and core is not None else None

    def paired(self, scenario, server, reference, metric):
        """Per-repetition ratios server / reference, each from the two runs of the same
        repetition (minutes apart, where medians over the whole run pair runs up to an hour
        apart): metric is a RUN key or "cost" (server CPU per operation)."""
        def value(run):
            return self.run_cost(run, scenario) if metric == "cost" else num(run.get(metric))
        mine = {r.get("rep"): value(r) for r in self.by.get((scenario, server), [])}
        theirs = {r.get("rep"): value(r) for r in self.by.get((scenario, reference), [])}
        return [mine[k] / theirs[k] for k in mine if mine[k] is not None and theirs.get(k)]

    def saturated(self, scenario, server):
        loads = self.values(scenario, server, "lg_core")
        return bool(loads) and statistics.median(loads) >= 0.96


def ratio(value, reference):
    if value is None or not reference:
        return None
    return value / reference


def cell(value, reference=None, star=False, digits=None):
    if value is None:
        return "n/a"
    text = fmt(value, digits)
    r = ratio(value, reference)
    if r is not None:
        text += f" ({r:.2f}x)"
    return text + (" \\*" if star else "")


def versions():
    def run(command):
        try:
            return subprocess.run(command, capture_output=True, text=True, timeout=30).stdout.strip()
        except OSError:
            return ""
    swift = run(["swift", "--version"]).splitlines()
    dpkg = lambda package: run(["dpkg-query", "-W", "-f", "${Version}", package]) or "?"
    return {
        "swift": swift[0] if swift else "?",
        "python": platform.python_version(),
        "libuv": dpkg("libuv1-dev"),
        "openssl": run(["openssl", "version"]) or "?",
        "uvloop": run([os.path.join(os.path.dirname(__file__), "..", ".build", "venv", "bin", "python"), "-c",
                       "import uvloop; print(uvloop.__version__)"]) or "?",
    }


def main():
    data = Data(sys.argv[1])
    out = []
    w = out.append
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    v = versions()
    header = next((h for h in data.header if "reps=" in h), "")
    limits = next((h for h in data.header if h.startswith("limits:")), "")
    w("# SocketKit performance")
    w("")
    w("Written by `make bench` (bench/bench.sh, bench/report.py) from `bench/%s`." % os.path.relpath(data.path, os.path.dirname(os.path.abspath(__file__))))
    w("Re-run it on your machine: the figures below are only comparable within one run.")
    w("")
    w("## Machine and method")
    w("")
    w(f"- Run: {header}")
    w(f"- Machine: {os.cpu_count()} CPUs, {cpu}, {platform.system()} {platform.release()}")
    w(f"- Toolchain: {v['swift']}; Python {v['python']}, uvloop {v['uvloop']}; libuv {v['libuv']}; {v['openssl']}")
    if limits:
        w(f"- {limits[0].upper() + limits[1:]}")
    w("- Every server is a fresh process per run, pinned to CPU 0 with one event-loop thread; the")
    w("  load generator (`bench/loadgen.c`, one epoll thread) is pinned to CPU 1; loopback 127.0.0.1.")
    w("- **Server CPU per operation** = busy fraction of CPU 0 (from `/proc/stat`, kernel work")
    w("  included) x 10^6 / rate. It compares servers even when the load generator's core is the")
    w("  one that saturates (marked \\* below: the throughput is then a lower bound).")
    w("- Medians over the repetitions; spreads are in the last section.")
    w("- SocketKit's servers: C = `bindings/c/examples/echo_server.c --raw` (callbacks on the loop")
    w("  thread); Swift = `bench/swift-echo`; Python = `bench/python-echo/sk_echo.py` (asyncio runs")
    w("  SocketKit's loop itself, `aio.loop_group()`, and delegate methods run straight from it,")
    w("  `queue=None`: one thread, as asyncio's own transports; the binding's C extension on).")
    w("- Idle connections: `idlemax` holds 100,000 connections where the descriptor limit allows it,")
    w("  otherwise as many as it does (see Limits above; the server and the load generator each hold")
    w("  one descriptor per connection).")
    w("")

    servers = data.servers
    w("## 1. Server CPU per operation (core-µs; per MB for stream), ratio to C epoll — lower is better")
    w("")
    w("| scenario | " + " | ".join(LABELS[s] for s in servers) + " |")
    w("|---|" + "---|" * len(servers))
    for scenario in data.scenarios:
        if "idle" in scenario:
            continue
        reference = data.cost(scenario, REFERENCE)
        w(f"| {SCENARIO_TEXT[scenario]} | " + " | ".join(
            cell(data.cost(scenario, s), None if s == REFERENCE else reference) for s in servers) + " |")
    w("")
    w("## 2. Throughput, ratio to C epoll — higher is better")
    w("")
    w("| scenario | metric | " + " | ".join(LABELS[s] for s in servers) + " |")
    w("|---|---|" + "---|" * len(servers))
    for scenario in data.scenarios:
        key, unit, _ = data.headline_key(scenario)
        if key is None or "idle" in scenario:
            continue
        reference = data.median(scenario, REFERENCE, key)
        w(f"| {SCENARIO_TEXT[scenario]} | {unit} | " + " | ".join(
            cell(data.median(scenario, s, key), None if s == REFERENCE else reference, data.saturated(scenario, s))
            for s in servers) + " |")
    w("")
    w("## 3. Latency: median of each run's p50 / p99 (µs)")
    w("")
    w("| scenario | " + " | ".join(LABELS[s] for s in servers) + " |")
    w("|---|" + "---|" * len(servers))
    for scenario in data.scenarios:
        if not data.values(scenario, REFERENCE, "p99_us"):
            continue
        cells = []
        for s in servers:
            p50, p99 = data.median(scenario, s, "p50_us"), data.median(scenario, s, "p99_us")
            cells.append("n/a" if p50 is None else f"{fmt(p50)} / {fmt(p99)}")
        w(f"| {SCENARIO_TEXT[scenario]} | " + " | ".join(cells) + " |")
    w("")
    if "idlemax" in data.scenarios or "tls-idle10k" in data.scenarios:
        w("## 4. Memory per idle connection (server RSS growth while holding them / connections)")
        w("")
        w("| | " + " | ".join(LABELS[s] for s in servers) + " |")
        w("|---|" + "---|" * len(servers))
        w("| bytes per connection | " + " | ".join(fmt(data.idle_bytes(s), 0) for s in servers) + " |")
        w("| connections held | " + " | ".join(fmt(data.idle_count(s), 0) for s in servers) + " |")
        w("| peak RSS (VmHWM, KiB) | " + " | ".join(fmt(data.median("idlemax", s, "hwm_kb"), 0) for s in servers) + " |")
        if "tls-idle10k" in data.scenarios:
            w("| TLS: bytes per connection | " + " | ".join(fmt(data.idle_bytes(s, "tls-idle10k"), 0) for s in servers) + " |")
        w("")
    if data.allocs:
        names = [s for s in PEERS + OURS if s in data.allocs]
        w("## 5. Heap allocations (interposed malloc; Python servers with PYTHONMALLOC=malloc)")
        w("")
        w("| | " + " | ".join(LABELS[s] for s in names) + " |")
        w("|---|" + "---|" * len(names))
        rows = [("per echoed 64 B message (64 connections)", "per_message", 2),
                ("  of which not freed again (live)", "live_per_message", 2),
                ("bytes allocated per message", "bytes_per_message", 0),
                ("per connection (accept, one echo, close)", "per_connection", 1),
                ("  of which not freed again (live)", "live_per_connection", 2),
                ("bytes allocated per connection", "bytes_per_connection", 0)]
        for text, key, digits in rows:
            cells = []
            for s in names:
                fields = data.allocs[s]
                cells.append("failed" if "FAILED" in fields else fmt(num(fields.get(key)), digits))
            w(f"| {text} | " + " | ".join(cells) + " |")
        w("")

    # Issue 7's targets.
    w("## 6. Targets (issue 7)")
    w("")
    w("Each ratio is taken twice: of the medians over the repetitions (as in the tables above), and")
    w("per repetition, between the two servers' runs of the same repetition (run one after the")
    w("other, so they share the machine's state of the moment), then the median of those with their")
    w("range and how many repetitions meet the target. The verdict follows the per-repetition median.")
    w("")
    w("| target | ratio of medians | per repetition: median (range) | repetitions meeting it | met |")
    w("|---|---|---|---|---|")

    def target(text, server, reference, scenario, metric, limit, higher=False):
        if metric == "cost":
            whole = ratio(data.cost(scenario, server), data.cost(scenario, reference))
        else:
            whole = ratio(data.median(scenario, server, metric), data.median(scenario, reference, metric))
        pairs = data.paired(scenario, server, reference, metric)
        if whole is None or not pairs:
            w(f"| {text} | not measured | | | — |")
            return
        meets = lambda value: value >= limit if higher else value <= limit
        middle = statistics.median(pairs)
        w(f"| {text} | {whole:.2f}x | {middle:.2f}x ({min(pairs):.2f}–{max(pairs):.2f}x) | "
          f"{sum(map(meets, pairs))} of {len(pairs)} | {'yes' if meets(middle) else '**no**'} |")

    def absolute(text, value, limit, unit):
        if value is None:
            w(f"| {text} | not measured | | | — |")
            return
        w(f"| {text} | {fmt(value, 0)} {unit} | | | {'yes' if value <= limit else '**no**'} |")

    for scenario in ("pp64", "pp1000"):
        target(f"C API, {SCENARIO_TEXT[scenario]}: CPU per round trip ≤ 1.15x C epoll",
               "sk-c", REFERENCE, scenario, "cost", 1.15)
        target(f"Python, {SCENARIO_TEXT[scenario]}: CPU per round trip ≤ 1.0x uvloop",
               "sk-py", "uvloop", scenario, "cost", 1.0)
    target("C API, 1 connection: p99 latency ≤ 1.1x C epoll", "sk-c", REFERENCE, "pp1", "p99_us", 1.1)
    target("Python, 1 connection: p99 latency ≤ 1.2x C epoll", "sk-py", REFERENCE, "pp1", "p99_us", 1.2)
    target("C API, stream: throughput ≥ 1.2x C epoll", "sk-c", REFERENCE, "stream1", "mbps", 1.2, higher=True)
    target("Python, stream: throughput ≥ 1.0x asyncio", "sk-py", "asyncio", "stream1", "mbps", 1.0, higher=True)
    absolute("C API, idle connection: ≤ 512 B", data.idle_bytes("sk-c"), 512, "B")
    absolute("Python, idle connection: ≤ 1,200 B", data.idle_bytes("sk-py"), 1200, "B")
    sk_c_alloc = data.allocs.get("sk-c", {})
    absolute("C API: allocations per echoed message = 0", num(sk_c_alloc.get("per_message")), 0.01, "allocations")
    absolute("C API: allocations per connection ≤ 100", num(sk_c_alloc.get("per_connection")), 100, "allocations")
    target("C API, UDP ping-pong, 16 clients: CPU per round trip ≤ 1.0x C epoll", "sk-c", REFERENCE, "udp16", "cost", 1.0)
    target("Python, UDP ping-pong, 16 clients: CPU per round trip ≤ 1.0x uvloop", "sk-py", "uvloop", "udp16", "cost", 1.0)
    absolute("C API, idle TLS connection: ≤ 8 KB", data.idle_bytes("sk-c", "tls-idle10k"), 8192, "B")
    absolute("Python, idle TLS connection: ≤ 10 KB", data.idle_bytes("sk-py", "tls-idle10k"), 10240, "B")
    target("C API, TLS ping-pong, 64 connections: CPU per round trip ≤ 1.05x C epoll + OpenSSL",
           "sk-c", REFERENCE, "tls-pp64", "cost", 1.05)
    target("Python, TLS ping-pong, 64 connections: CPU per round trip ≤ 1.0x uvloop",
           "sk-py", "uvloop", "tls-pp64", "cost", 1.0)
    target("C API, TLS stream: CPU per MB ≤ 0.9x SwiftNIO", "sk-c", "nio", "tls-stream1m", "cost", 0.9)
    target("Python, TLS stream: CPU per MB ≤ 1.0x asyncio", "sk-py", "asyncio", "tls-stream1m", "cost", 1.0)
    target("C API, TLS connect: CPU per handshake ≤ 1.0x C epoll + OpenSSL",
           "sk-c", REFERENCE, "tls-connect", "cost", 1.0)
    w("")
    w("## 7. Noise: (max − min) / median of the throughput over the repetitions")
    w("")
    w("| scenario | " + " | ".join(LABELS[s] for s in servers) + " |")
    w("|---|" + "---|" * len(servers))
    for scenario in data.scenarios:
        key = data.headline_key(scenario)[0]
        if key is None or "idle" in scenario:
            continue
        cells = []
        for s in servers:
            spread = data.spread(scenario, s, key)
            cells.append("n/a" if spread is None else f"{spread * 100:.0f}% (n={len(data.values(scenario, s, key))})")
        w(f"| {SCENARIO_TEXT[scenario]} | " + " | ".join(cells) + " |")
    failures = [r for r in data.runs if r.get("FAILED") or num(r.get("errors")) or num(r.get("timeouts"))]
    if failures:
        w("")
        w("Runs with errors, timeouts or failures:")
        for r in failures:
            w(f"- {r.get('server')} {r.get('scenario')} rep {r.get('rep')}: errors={r.get('errors')} "
              f"timeouts={r.get('timeouts')} failed={r.get('FAILED', '-')}")
    print("\n".join(out))


if __name__ == "__main__":
    main()
