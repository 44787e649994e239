# SPDX-License-Identifier: MIT
"""UDP interop with socat, a peer no one here wrote: socat as a client of a SocketKit echo
server, and SocketKit as a client of a socat echo server. (The Makefile installs socat.)"""
import shutil
import socket
import subprocess

import pytest

from conftest import WAIT
from test_udp import UdpRecorder, echo_server, udp  # noqa: F401  (udp is a fixture)

pytestmark = pytest.mark.skipif(shutil.which("socat") is None, reason="socat is not installed (make installs it)")


def test_socat_client_gets_its_datagrams_echoed(udp):  # noqa: F811
    server, log, port = echo_server(udp)
    # Each line on stdin is one datagram; socat prints what comes back and stops 1 s after
    # stdin ends (-t: how long it waits for the other direction).
    result = subprocess.run(["socat", "-t", "1", "-", f"UDP4:127.0.0.1:{port}"], input=b"hello from socat\n",
                            capture_output=True, timeout=WAIT)
    assert result.returncode == 0, result.stderr
    assert result.stdout == b"hello from socat\n"
    received = log.of("receive")
    assert [event[1] for event in received] == [b"hello from socat\n"]
    assert received[0][2][0] == "127.0.0.1"


def test_socketkit_client_of_a_socat_echo_server(udp):  # noqa: F811
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()  # socat takes the port (another process could in between: then this fails loudly)
    echo = subprocess.Popen(["socat", f"UDP4-LISTEN:{port},bind=127.0.0.1", "PIPE"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        log = UdpRecorder()
        client = udp(log)
        client.bind_to_port(0, "127.0.0.1")
        client.begin_receiving()
        # socat may not be listening yet: send until the first echo comes back (each send
        # waits for an answer up to 0.2 s; bounded overall).
        for attempt in range(int(WAIT / 0.2)):
            client.send_to_address(b"ping", ("127.0.0.1", port), tag=attempt)
            if log.wait_for(lambda events: any(e[0] == "receive" for e in events), timeout=0.2):
                break
        first = log.expect("receive")[0]
        assert first[1] == b"ping" and first[2][:2] == ("127.0.0.1", port)
        # Then datagrams of many sizes, one at a time (socat's PIPE is a byte stream: two
        # datagrams waiting in it at once could come back as one), each echoed intact.
        for index in range(1, 30):
            payload = bytes([index]) * (index * 97)
            client.send_to_address(payload, ("127.0.0.1", port), tag=100 + index)
            echoed = log.wait_for(lambda events: any(e[0] == "receive" and e[1] == payload for e in events))
            assert echoed, f"datagram {index} ({len(payload)} bytes) did not come back"
    finally:
        echo.terminate()
        echo.wait(timeout=WAIT)
