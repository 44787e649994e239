#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Heap allocations per echoed message and per connection, counted by an interposed allocator.

    python3 alloc_bench.py [--servers "sk-c sk-swift c-epoll libuv nio"] [--out FILE]

Each server from servers.conf runs under LD_PRELOAD=bin/count_alloc.so, pinned like in
run.sh. The counters live in a shared file read between load-generator runs:

  per message:    two 64-connection ping-pong runs of 1 s and 3 s; the difference of their
                  allocation counts divided by the difference of their round trips (the
                  64 connection set-ups, the same in both runs, cancel out)
  per connection: a 2 s run of 16 concurrent connect / 64-byte echo / close loops,
                  allocations divided by connections

"live" is allocations minus frees over the same window (it grows if something leaks).
Prints one "ALLOC server=NAME key=value ..." line per server (and appends it to --out).
"""
import argparse
import os
import shlex
import socket
import struct
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
PORT = int(os.environ.get("PORT", "25100"))
UDP_PORT = int(os.environ.get("UDP_PORT", "25101"))
SERVER_CPU = os.environ.get("SERVER_CPU", "0")
LOADGEN_CPU = os.environ.get("LOADGEN_CPU", "1")


def servers():
    table = {}
    with open(os.path.join(HERE, "servers.conf")) as conf:
        for line in conf:
            if not line.strip() or line.startswith("#"):
                continue
            name, _caps, command = line.split(None, 2)
            table[name] = shlex.split(command)
    return table


class Counters:
    def __init__(self, path):
        self.path = path

    def read(self):
        time.sleep(0.5)  # let the server finish closing the previous run's connections
        with open(self.path, "rb") as f:
            allocations, reallocations, frees, size = struct.unpack("<4Q", f.read(32))
        return {"allocations": allocations, "reallocations": reallocations, "frees": frees, "bytes": size}


def wait_for_port(process, deadline=20.0):
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        if process.poll() is not None:
            raise RuntimeError("server exited at start")
        try:
            socket.create_connection(("127.0.0.1", PORT), timeout=1).close()
            return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError("server did not open its port")


def loadgen(*args):
    command = ["taskset", "-c", LOADGEN_CPU, os.path.join(HERE, "bin", "loadgen"), "--port", str(PORT),
               "--warmup", "0", *args]
    output = subprocess.run(command, check=True, capture_output=True, text=True, timeout=120).stdout
    line = next(l for l in output.splitlines() if l.startswith("RESULT"))
    fields = dict(token.split("=", 1) for token in line.split()[1:] if "=" in token)
    if int(fields.get("errors", "0")):
        raise RuntimeError(f"load generator reported errors: {line}")
    return int(fields["total_ops"])


def delta(after, before):
    return {key: after[key] - before[key] for key in after}


def measure(name, command):
    with tempfile.TemporaryDirectory() as directory:
        counter_file = os.path.join(directory, "counters")
        env = dict(os.environ, LD_PRELOAD=os.path.join(HERE, "bin", "count_alloc.so"), COUNT_ALLOC_FILE=counter_file)
        process = subprocess.Popen(["taskset", "-c", SERVER_CPU, *command, "--port", str(PORT),
                                    "--udp-port", str(UDP_PORT)], cwd=HERE, env=env,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            wait_for_port(process)
            counters = Counters(counter_file)
            loadgen("--mode", "pingpong", "--conns", "64", "--duration", "1")  # warm up
            a = counters.read()
            ops1 = loadgen("--mode", "pingpong", "--conns", "64", "--duration", "1")
            b = counters.read()
            ops2 = loadgen("--mode", "pingpong", "--conns", "64", "--duration", "3")
            c = counters.read()
            short, long = delta(b, a), delta(c, b)
            per_message = (long["allocations"] - short["allocations"]) / (ops2 - ops1)
            live_message = ((long["allocations"] - long["frees"]) - (short["allocations"] - short["frees"])) / (ops2 - ops1)
            bytes_message = (long["bytes"] - short["bytes"]) / (ops2 - ops1)

            loadgen("--mode", "connect", "--conc", "16", "--duration", "1")  # warm up
            d = counters.read()
            connections = loadgen("--mode", "connect", "--conc", "16", "--duration", "2")
            e = counters.read()
            window = delta(e, d)
            per_connection = window["allocations"] / connections
            live_connection = (window["allocations"] - window["frees"]) / connections
            bytes_connection = window["bytes"] / connections
        finally:
            process.terminate()
            try:
                process.wait(timeout=3)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
    return (f"ALLOC server={name} per_message={round(per_message, 3) + 0.0:.3f} live_per_message={round(live_message, 3) + 0.0:.3f} "
            f"bytes_per_message={round(bytes_message, 1) + 0.0:.1f} messages={ops2 - ops1} "
            f"per_connection={per_connection:.1f} live_per_connection={live_connection:.2f} "
            f"bytes_per_connection={bytes_connection:.0f} connections={connections}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--servers", default="sk-c sk-swift c-epoll libuv nio")
    parser.add_argument("--out")
    options = parser.parse_args()
    table = servers()
    status = 0
    for name in options.servers.split():
        if name not in table:
            print(f"alloc_bench: unknown server {name}", file=sys.stderr)
            status = 1
            continue
        try:
            line = measure(name, table[name])
        except Exception as error:  # report and go on with the next server
            line = f"ALLOC server={name} FAILED={type(error).__name__}:{str(error).replace(' ', '_')[:120]}"
            status = 1
        print(line, flush=True)
        if options.out:
            with open(options.out, "a") as out:
                out.write(line + "\n")
        time.sleep(0.7)  # let the kernel tear the previous server's sockets down
    return status


if __name__ == "__main__":
    sys.exit(main())
