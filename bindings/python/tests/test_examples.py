# SPDX-License-Identifier: MIT
"""Every Python example, run as a user runs it (a process of its own), against real peers:
the echo server with the line client, echo_demo.py, the STARTTLS client against
Tests/peers/smtp_server.py (Python's ssl on the server side), two multicast chats on the
loopback interface. Every wait has a deadline; every process started is stopped."""
import pathlib
import re
import socket
import subprocess
import sys

import pytest

from conftest import REPOSITORY

sys.path.insert(0, str(REPOSITORY / "Tests" / "peers"))
from processes import DEADLINE, Process  # noqa: E402

EXAMPLES = pathlib.Path(__file__).resolve().parent.parent / "examples"
SMTP_SERVER = REPOSITORY / "Tests" / "peers" / "smtp_server.py"


@pytest.fixture
def started():
    examples = []

    def start(*arguments, program=None, stdin=False):
        command = [sys.executable] + ([str(EXAMPLES / program)] if program else []) + list(arguments)
        example = Process(command, stdin=stdin)
        examples.append(example)
        return example

    yield start
    for example in examples:
        example.kill()


def run(program, *arguments, stdin=""):
    return subprocess.run([sys.executable, str(EXAMPLES / program)] + list(arguments), input=stdin,
                          capture_output=True, text=True, timeout=DEADLINE)


def test_echo_server_and_line_client(started):
    server = started("0", program="echo_server.py")
    port = re.fullmatch(r"listening on (\d+)", server.line()).group(1)
    client = run("line_client.py", "127.0.0.1", port, stdin="hello from Python\nsecond line\n")
    assert client.returncode == 0, client.stderr
    assert client.stdout.splitlines() == ["hello from Python", "second line"]
    assert server.stop() == 0 and server.errors == ""


def test_echo_demo():
    demo = run("echo_demo.py")
    assert demo.returncode == 0, demo.stderr
    assert demo.stdout.splitlines()[-1] == "python demo: ok"


def test_starttls_client(started, certs):
    server = started(str(SMTP_SERVER), certs.path("server-chain.pem"), certs.path("server.key"))
    port = re.fullmatch(r"listening on (\d+)", server.line()).group(1)
    client = run("starttls_client.py", "127.0.0.1", port, certs.path("ca.pem"), "localhost")
    assert client.returncode == 0, client.stdout + client.stderr
    dialogue = client.stdout.splitlines()
    assert any(line.startswith("-- TLS: TLSv1.") for line in dialogue), dialogue
    assert dialogue[-1].startswith("S: 221"), dialogue
    assert server.finish() == 0, server.errors  # the server saw EHLO, STARTTLS, EHLO over TLS, QUIT


def test_multicast_chat(started):
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port = str(probe.getsockname()[1])
    group = "239.255.42.44"
    ann = started("ann", port, group, "lo", program="multicast_chat.py", stdin=True)
    bob = started("bob", port, group, "lo", program="multicast_chat.py", stdin=True)
    assert ann.line() == f"joined {group}:{port} on lo as ann"
    assert bob.line() == f"joined {group}:{port} on lo as bob"
    ann.write("hello from ann\n")
    assert bob.line() == "ann: hello from ann"
    bob.write("hi ann\n")
    assert ann.line() == "bob: hi ann"
    assert ann.finish() == 0 and bob.finish() == 0
    # Neither printed its own line (each hears itself through multicast loopback).
    assert ann.lines[1:] == ["bob: hi ann"] and bob.lines[1:] == ["ann: hello from ann"]
