#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""run_examples.py - every C example, run as a user runs it, against real peers
(`make -C bindings/c examples-test`, part of `make test`).

    run_examples.py --bin OUT --prefix PREFIX --readme README.md --certs-script SCRIPT --smtp-server SCRIPT

- echo_server with line_client and queued_client as its clients;
- starttls_client against Tests/peers/smtp_server.py (Python's ssl on the server side);
- two multicast_chat processes on the loopback interface, each hearing the other;
- the C program of README.md's "C" section, compiled exactly as it says
  (`cc echo.c $(pkg-config --cflags --libs socketkit)`, with warnings as errors), refused by
  the loader without LD_LIBRARY_PATH (what the README explains), then run with it, and
  built again with an rpath and run without it.

Every wait has a deadline; every process started is stopped. Prints "N passed, N failed".
"""
import argparse
import os
import re
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "Tests", "peers"))
from processes import DEADLINE, Process  # noqa: E402


def run(command, **options):
    return subprocess.run(command, capture_output=True, text=True, timeout=DEADLINE, **options)


def expect(condition, message):
    if not condition:
        raise AssertionError(message)


def echo_server_and_its_clients(arguments):
    server = Process([f"{arguments.bin}/echo_server"])
    try:
        port = int(re.fullmatch(r"listening on (\d+)", server.line()).group(1))
        lines = run([f"{arguments.bin}/line_client", "127.0.0.1", str(port)], input="hello from C\nsecond line\n")
        expect(lines.returncode == 0 and lines.stdout.splitlines() == ["hello from C", "second line"],
               f"line_client: {lines.returncode} {lines.stdout!r} {lines.stderr!r}")
        queued = run([f"{arguments.bin}/queued_client", "127.0.0.1", str(port), "3"])
        expect(queued.returncode == 0 and "reply 2: request 2" in queued.stdout,
               f"queued_client: {queued.returncode} {queued.stdout!r} {queued.stderr!r}")
        expect(server.stop() == 0, f"echo_server exited with {server.process.returncode}: {server.errors}")
    finally:
        server.kill()


def starttls_client(arguments, certs):
    server = Process([sys.executable, arguments.smtp_server, f"{certs}/server-chain.pem", f"{certs}/server.key"])
    try:
        port = int(re.fullmatch(r"listening on (\d+)", server.line()).group(1))
        client = run([f"{arguments.bin}/starttls_client", "127.0.0.1", str(port), f"{certs}/ca.pem", "localhost"])
        dialogue = client.stdout.splitlines()
        expect(client.returncode == 0, f"starttls_client: {client.returncode}\n{client.stdout}{client.stderr}")
        expect(dialogue[-1].startswith("S: 221") and any(line.startswith("-- TLS: TLSv1.") for line in dialogue),
               f"starttls_client's dialogue: {dialogue}")
        expect(server.finish() == 0, f"the SMTP server saw another dialogue:\n{server.errors}")
    finally:
        server.kill()


def free_udp_port():
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def multicast_chat(arguments):
    port = str(free_udp_port())
    group = "239.255.42.43"
    chats = {name: Process([f"{arguments.bin}/multicast_chat", name, port, group, "lo"], stdin=True)
             for name in ("ann", "bob")}
    try:
        for name, chat in chats.items():
            expect(chat.line() == f"joined {group}:{port} on lo as {name}", f"{name}: {chat.lines}")
        chats["ann"].write("hello from ann\n")
        expect(chats["bob"].line() == "ann: hello from ann", f"bob heard {chats['bob'].lines}")
        chats["bob"].write("hi ann\n")
        expect(chats["ann"].line() == "bob: hi ann", f"ann heard {chats['ann'].lines}")
        for name, chat in chats.items():
            expect(chat.finish() == 0, f"{name} exited with {chat.process.returncode}: {chat.errors}")
        # Neither printed its own line (each hears itself through multicast loopback).
        expect(chats["ann"].lines[1:] == ["bob: hi ann"] and chats["bob"].lines[1:] == ["ann: hello from ann"],
               f"ann: {chats['ann'].lines}, bob: {chats['bob'].lines}")
    finally:
        for chat in chats.values():
            chat.kill()


def readme_program(arguments, work):
    text = open(arguments.readme, encoding="utf-8").read()
    section = text[text.index("\n## C\n"):]
    source = re.search(r"```c\n(.*?)```", section, re.DOTALL).group(1)
    path = os.path.join(work, "echo.c")
    with open(path, "w") as file:
        file.write(source)
    environment = dict(os.environ, PKG_CONFIG_PATH=f"{arguments.prefix}/lib/pkgconfig")
    environment.pop("LD_LIBRARY_PATH", None)
    flags = run(["pkg-config", "--cflags", "--libs", "socketkit"], env=environment).stdout.split()
    libdir = run(["pkg-config", "--variable=libdir", "socketkit"], env=environment).stdout.strip()
    program = os.path.join(work, "echo")
    built = run(["cc", "-Wall", "-Wextra", "-Werror", path] + flags + ["-o", program], env=environment)
    expect(built.returncode == 0, f"README's program does not build:\n{built.stderr}")

    # Without LD_LIBRARY_PATH the loader does not look in the prefix (as the README says).
    refused = run([program, "0"], env=environment)
    expect(refused.returncode != 0 and "error while loading shared libraries: libsocketkit.so." in refused.stderr,
           f"README's program started without LD_LIBRARY_PATH: {refused.returncode} {refused.stderr!r}")

    with_rpath = program + "-rpath"
    built = run(["cc", "-Wall", "-Wextra", "-Werror", path] + flags + [f"-Wl,-rpath,{libdir}", "-o", with_rpath],
                env=environment)
    expect(built.returncode == 0, f"README's program does not build with an rpath:\n{built.stderr}")
    for command, variables in (([program, "0"], {"LD_LIBRARY_PATH": libdir}), ([with_rpath, "0"], {})):
        server = Process(command, dict(environment, **variables))
        try:
            port = int(re.fullmatch(r"echoing lines on 127\.0\.0\.1 port (\d+)", server.line()).group(1))
            with socket.create_connection(("127.0.0.1", port), timeout=DEADLINE) as client:
                client.sendall(b"hello\nworld\n")
                received = b""
                while received.count(b"\n") < 2:
                    chunk = client.recv(1024)
                    expect(chunk, f"README's program closed the connection after {received!r}")
                    received += chunk
                expect(received == b"hello\nworld\n", f"README's program echoed {received!r}")
            expect(server.stop() == 0, f"README's program exited with {server.process.returncode}: {server.errors}")
        finally:
            server.kill()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bin", required=True)
    parser.add_argument("--prefix", required=True)
    parser.add_argument("--readme", required=True)
    parser.add_argument("--certs-script", required=True)
    parser.add_argument("--smtp-server", required=True)
    arguments = parser.parse_args()
    passed = failed = 0
    with tempfile.TemporaryDirectory(prefix="socketkit-examples-") as work:
        certs = os.path.join(work, "certs")
        made = run(["sh", arguments.certs_script, certs])
        expect(made.returncode == 0, f"make-test-certs.sh: {made.stderr}")
        for name, test in (("echo_server, line_client, queued_client", lambda: echo_server_and_its_clients(arguments)),
                           ("starttls_client", lambda: starttls_client(arguments, certs)),
                           ("multicast_chat", lambda: multicast_chat(arguments)),
                           ("README.md's C program", lambda: readme_program(arguments, work))):
            started = time.monotonic()
            try:
                test()
            except (AssertionError, OSError, subprocess.SubprocessError) as error:
                failed += 1
                print(f"FAIL {name}: {error}")
            else:
                passed += 1
                print(f"PASS {name} ({time.monotonic() - started:.1f} s)")
    print(f"{passed} passed, {failed} failed")
    return 1 if failed or not passed else 0


if __name__ == "__main__":
    sys.exit(main())
