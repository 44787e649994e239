#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The soak: 1,000 connections of random-size messages against SocketKit's echo servers.

    bench/soak.py [--minutes M] [--connections N] [--servers c,swift,python] [--report PATH]

Runs, one server after the other, the C example (bindings/c/examples/echo_server.c --raw),
the Swift bench server (bench/swift-echo) and the Python bench server
(bench/python-echo/sk_echo.py), each for M / 3 minutes under bench/soak_client.c: N
connections, each sending messages of 1 byte to 64 KiB and checking every byte of the echo,
one in fifty connections closed and replaced after a message (so descriptors and
per-connection memory come and go). The server's resident memory (VmRSS) and open
descriptors are sampled twice a second.

A server fails the soak when
  - the client saw a wrong byte, an error (reset, early close, refused connect) or a
    connection that made no progress for 10 s, or moved no bytes at all;
  - its resident memory after the warm-up (the first quarter of the run, at least 10 s)
    ever exceeds the warm-up's peak by more than RSS_GROWTH_FRACTION plus RSS_GROWTH_BYTES;
  - it holds more descriptors than before the load once the clients have gone (waited for
    up to 10 s): a descriptor leak;
  - it exits.
The report (a Markdown table) goes to --report (default .build/soak/soak-report.md).
"""
import argparse
import os
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
BUILD = os.path.join(ROOT, ".build")

# After the warm-up a server's memory may grow by this much over the warm-up's peak.
RSS_GROWTH_FRACTION = 0.25
RSS_GROWTH_BYTES = 24 * 1024 * 1024

SERVERS = {
    "c": [os.path.join(BUILD, "c-out", "echo_server"), "--raw"],
    "swift": [os.path.join(BUILD, "release", "socketkit-echo")],
    "python": [os.path.join(BUILD, "venv", "bin", "python"), os.path.join(HERE, "python-echo", "sk_echo.py")],
}


def build_client():
    output = os.path.join(BUILD, "soak", "soak_client")
    source = os.path.join(HERE, "soak_client.c")
    os.makedirs(os.path.dirname(output), exist_ok=True)
    if not os.path.exists(output) or os.path.getmtime(output) < os.path.getmtime(source):
        subprocess.run(["cc", "-O2", "-Wall", "-Wextra", "-Werror", "-o", output, source], check=True)
    return output


def resident(pid):
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def descriptors(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


def soak_one(name, client, seconds, connections):
    command = SERVERS[name]
    if not os.path.exists(command[0]):
        return {"name": name, "verdict": f"FAIL: {command[0]} is not built"}
    server = subprocess.Popen(command + ["--port", "0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    result = {"name": name}
    try:
        line = server.stdout.readline()
        if not line.startswith("listening on "):
            return {"name": name, "verdict": f"FAIL: the server said {line!r}"}
        port = int(line.split()[-1])
        fds_before = descriptors(server.pid)
        samples = []   # (seconds since start, rss, fds)
        stop = threading.Event()
        began = time.monotonic()

        def sample():
            while not stop.is_set():
                try:
                    samples.append((time.monotonic() - began, resident(server.pid), descriptors(server.pid)))
                except OSError:
                    return
                stop.wait(0.5)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        run = subprocess.run([client, "--port", str(port), "--connections", str(connections), "--seconds",
                              f"{seconds:.1f}", "--seed", "34"], capture_output=True, text=True,
                             timeout=seconds + 120)
        stop.set()
        sampler.join()
        final = [line for line in run.stdout.splitlines() if line.startswith("RESULT ")]
        fields = dict(item.split("=") for item in final[-1].split()[1:]) if final else {}
        result.update({key: int(value) for key, value in fields.items()})
        result["seconds"] = seconds
        # Descriptors once the clients have gone: back to where they were.
        deadline = time.monotonic() + 10
        fds_after = descriptors(server.pid)
        while fds_after > fds_before and time.monotonic() < deadline:
            time.sleep(0.2)
            fds_after = descriptors(server.pid)
        warm_up = max(10.0, seconds / 4)
        warm = [rss for at, rss, _ in samples if at <= warm_up] or [0]
        after = [rss for at, rss, _ in samples if at > warm_up] or [0]
        result.update({"fds_before": fds_before, "fds_peak": max((fds for _, _, fds in samples), default=0),
                       "fds_after": fds_after, "rss_warm": max(warm), "rss_peak_after": max(after),
                       "rss_final": resident(server.pid)})
        bound = result["rss_warm"] * (1 + RSS_GROWTH_FRACTION) + RSS_GROWTH_BYTES
        problems = []
        if run.returncode != 0 or not final:
            problems.append(f"client: exit {run.returncode}; {run.stderr.strip()[-400:]}")
        if result.get("bytes", 0) == 0:
            problems.append("no bytes moved")
        if result["rss_peak_after"] > bound:
            problems.append(f"memory grew after the warm-up: {result['rss_peak_after'] / 2**20:.1f} MiB, bound "
                            f"{bound / 2**20:.1f} MiB")
        if fds_after > fds_before:
            problems.append(f"{fds_after - fds_before} descriptors more than before the load")
        if server.poll() is not None:
            problems.append(f"the server exited ({server.returncode}): {server.stderr.read()[-400:]}")
        result["verdict"] = "ok" if not problems else "FAIL: " + "; ".join(problems)
        return result
    finally:
        server.terminate()
        try:
            server.wait(20)
        except subprocess.TimeoutExpired:
            server.kill()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--minutes", type=float, default=10)
    parser.add_argument("--connections", type=int, default=1000)
    parser.add_argument("--servers", default="c,swift,python")
    parser.add_argument("--report", default=os.path.join(BUILD, "soak", "soak-report.md"))
    args = parser.parse_args()
    client = build_client()
    names = args.servers.split(",")
    seconds = args.minutes * 60 / len(names)
    results = []
    for name in names:
        print(f"soak {name}: {args.connections} connections for {seconds:.0f} s ...", flush=True)
        result = soak_one(name, client, seconds, args.connections)
        results.append(result)
        print(f"soak {name}: {result['verdict']}", flush=True)
    MiB = 2 ** 20
    lines = [f"# Soak ({time.strftime('%Y-%m-%d %H:%M')}): {args.connections} connections, messages of 1 B to 64 KiB, "
             f"every byte checked, {seconds:.0f} s per server",
             "",
             f"Memory bound after the warm-up: the warm-up's peak + {RSS_GROWTH_FRACTION:.0%} + "
             f"{RSS_GROWTH_BYTES // MiB} MiB.",
             "",
             "| server | bytes echoed | MB/s | messages | reconnects | mismatches | errors | stalled | RSS warm-up / peak after / end (MiB) | descriptors before / peak / after | verdict |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        if "bytes" not in r:
            lines.append(f"| {r['name']} | | | | | | | | | | {r['verdict']} |")
            continue
        lines.append(f"| {r['name']} | {r['bytes']:,} | {r['bytes'] / r['seconds'] / 1e6:.1f} | {r['messages']:,} | "
                     f"{r['reconnects']:,} | {r['mismatches']} | {r['errors']} | {r['stalled']} | "
                     f"{r['rss_warm'] / MiB:.1f} / {r['rss_peak_after'] / MiB:.1f} / {r['rss_final'] / MiB:.1f} | "
                     f"{r['fds_before']} / {r['fds_peak']} / {r['fds_after']} | {r['verdict']} |")
    os.makedirs(os.path.dirname(args.report), exist_ok=True)
    with open(args.report, "w") as file:
        file.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    print(f"report: {args.report}")
    return 0 if all(r["verdict"] == "ok" for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
