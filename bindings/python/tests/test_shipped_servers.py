# SPDX-License-Identifier: MIT
"""The echo servers SocketKit ships (the C example bench uses, the Swift and Python bench
servers) apply backpressure as users should copy it: a client that sends but never reads
its echo is soon not read from any more, so its sends stall in TCP, and the server's memory
stays small (the C example once grew to 7 GB in 20 s with five such clients)."""
import os
import pathlib
import socket
import subprocess
import sys
import time

import pytest

from conftest import WAIT, pattern

REPOSITORY = pathlib.Path(__file__).resolve().parents[3]
SERVERS = {
    "c-example": [str(REPOSITORY / ".build" / "c-out" / "echo_server"), "--raw"],
    "swift-bench": [str(REPOSITORY / ".build" / "release" / "socketkit-echo")],
    "python-bench": [sys.executable, str(REPOSITORY / "bench" / "python-echo" / "sk_echo.py")],
}
# Far more than every kernel buffer on the way holds (client and server, both directions).
SEND_LIMIT = 256 * 1024 * 1024


def resident_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


@pytest.fixture(params=sorted(SERVERS))
def server(request):
    command = SERVERS[request.param]
    if not os.path.exists(command[0]):
        pytest.skip(f"{command[0]} is not built (make c-test / make library build it)")
    process = subprocess.Popen(command + ["--port", "0"], stdout=subprocess.PIPE, text=True)
    try:
        line = process.stdout.readline()
        assert line.startswith("listening on "), f"{request.param}: {line!r}"
        yield process, int(line.split()[-1])
    finally:
        process.terminate()
        process.wait(WAIT)


def test_a_client_that_never_reads_its_echo_is_stopped_by_backpressure(server):
    process, port = server
    with socket.create_connection(("127.0.0.1", port), timeout=WAIT) as client:
        # The echo works as before while the client keeps up.
        client.sendall(b"hello")
        received = b""
        while len(received) < 5:
            received += client.recv(5 - len(received))
        assert received == b"hello"
        # Then it only sends: once every buffer on the way is full and the server stopped
        # reading, a send waits, here for a second.
        baseline = resident_bytes(process.pid)
        client.settimeout(1.0)
        chunk = pattern(1 << 20)
        sent = 0
        deadline = time.monotonic() + WAIT
        try:
            while sent < SEND_LIMIT and time.monotonic() < deadline:
                sent += client.send(chunk)
        except socket.timeout:
            pass
        assert sent < SEND_LIMIT, "the server kept reading from a client that does not read"
        grown = resident_bytes(process.pid) - baseline
        assert grown < 64 * 1024 * 1024, f"the server grew by {grown} bytes"
