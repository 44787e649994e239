#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""budgets.py - instruction budgets of SocketKit's hot paths, checked by `make test`.

    bench/budgets.py [--update] [--only NAME ...]

Each row runs one of SocketKit's echo servers under `valgrind --tool=callgrind` with
instrumentation off, lets this script's client warm the connection up, switches counting on
(`callgrind_control -i on`), makes a fixed number of 64-byte round trips, switches it off and
stops the server. Instructions per round trip are the server's user-space instructions
divided by the round trips: the same figure run after run, whatever else the machine does
(wall-clock time on these shared machines moves 10-30 % between runs; instructions do not).

A row fails when its figure is above its budget in bench/budgets.conf (each budget is set
5 % over the figure measured when it was last set: see bench/README.md). `--update` writes
new budgets from this run: only for a change that is meant to cost more (or that saved
something), with the reason in the commit message.

The rows are one connection (or one UDP client) at a time, so that every round trip takes
the same path through epoll, the engine and the callback: with many connections the number
of events per epoll_wait, and so the per-round-trip share of the loop, varies with timing.
"""
import argparse
import os
import re
import signal
import socket
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(HERE)
CONF = os.path.join(HERE, "budgets.conf")
MESSAGE = b"x" * 64
WARMUP_ROUND_TRIPS = 500
ROUND_TRIPS = 5000
START_TIMEOUT = 120.0  # seconds for a server to start under valgrind (Python imports asyncio)

# name: (command relative to the top of the checkout, transport)
ROWS = {
    "c-tcp-pingpong": ([".build/c-out/echo_server", "--raw"], "tcp"),
    "c-udp-echo": ([".build/c-out/echo_server", "--raw"], "udp"),
    "python-tcp-pingpong": ([".build/venv/bin/python", "bench/python-echo/sk_echo.py"], "tcp"),
}


def read_budgets():
    budgets = {}
    with open(CONF) as conf:
        for line in conf:
            line = line.split("#", 1)[0].strip()
            if line:
                name, budget = line.split()
                budgets[name] = int(budget)
    return budgets


def free_port(kind):
    with socket.socket(socket.AF_INET, kind) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def callgrind_control(pid, switch):
    subprocess.run(["callgrind_control", "-i", switch, str(pid)], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=60)


def round_trips(sock, count, udp):
    for _ in range(count):
        sock.sendall(MESSAGE) if not udp else sock.send(MESSAGE)
        received = 0
        while received < len(MESSAGE):
            chunk = sock.recv(65536)
            if not chunk:
                raise RuntimeError("the server closed the connection")
            received += len(chunk)


def measure(name, workdir):
    command, transport = ROWS[name]
    udp = transport == "udp"
    tcp_port = free_port(socket.SOCK_STREAM)
    arguments = [os.path.join(TOP, command[0])] + command[1:] + ["--port", str(tcp_port)]
    udp_port = None
    if udp:
        udp_port = free_port(socket.SOCK_DGRAM)
        arguments += ["--udp-port", str(udp_port)]
    out = os.path.join(workdir, f"{name}.callgrind")
    log_path = out + ".log"
    environment = dict(os.environ, PYTHONHASHSEED="0")
    with open(log_path, "w") as log:
        server = subprocess.Popen(
            ["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out}"] + arguments,
            stdout=log, stderr=subprocess.STDOUT, cwd=TOP, env=environment)
    try:
        deadline = time.monotonic() + START_TIMEOUT
        while "listening" not in open(log_path).read():
            if server.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{name}: the server did not start:\n" + open(log_path).read())
            time.sleep(0.1)  # polling a log file for start-up, not synchronising the measured work
        if udp:
            client = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            client.connect(("127.0.0.1", udp_port))
        else:
            client = socket.create_connection(("127.0.0.1", tcp_port))
            client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        client.settimeout(60)
        with client:
            round_trips(client, WARMUP_ROUND_TRIPS, udp)
            # The server is idle (in epoll_wait) from here until the first message below, and
            # again after the last echo: nothing but the measured round trips is counted.
            callgrind_control(server.pid, "on")
            round_trips(client, ROUND_TRIPS, udp)
            callgrind_control(server.pid, "off")
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
    collected = re.search(r"Collected : (\d+)", open(log_path).read())
    if not collected:
        raise RuntimeError(f"{name}: callgrind printed no total:\n" + open(log_path).read())
    return int(collected.group(1)) // ROUND_TRIPS


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--update", action="store_true", help="write budgets 5%% over this run's figures")
    parser.add_argument("--only", nargs="*", default=None, help="rows to run (default: all)")
    options = parser.parse_args()
    budgets = read_budgets()
    names = options.only or list(ROWS)
    workdir = os.path.join(TOP, ".build", "budgets")
    os.makedirs(workdir, exist_ok=True)
    failed = []
    figures = {}
    for name in names:
        figure = measure(name, workdir)
        figures[name] = figure
        budget = budgets.get(name)
        if budget is None:
            verdict = "no budget"
            failed.append(name)
        elif figure > budget:
            verdict = f"OVER BUDGET ({figure / budget:.3f}x)"
            failed.append(name)
        else:
            verdict = f"within budget ({figure / budget:.3f}x)"
        print(f"budget {name}: {figure} instructions per round trip, budget {budget}: {verdict}", flush=True)
    if options.update:
        lines = [line for line in open(CONF) if line.lstrip().startswith("#") or not line.strip()]
        for name in ROWS:
            budget = int(figures[name] * 1.05) if name in figures else budgets[name]
            lines.append(f"{name:<22} {budget}\n")
        with open(CONF, "w") as conf:
            conf.writelines(lines)
        print(f"wrote {CONF}")
        return 0
    if failed:
        print("instruction budgets exceeded (or missing): " + ", ".join(failed), file=sys.stderr)
        print("A change that costs more on purpose sets new budgets with bench/budgets.py --update "
              "and says why in its commit message.", file=sys.stderr)
        return 1
    print("instruction budgets: every row within its budget")
    return 0


if __name__ == "__main__":
    sys.exit(main())
