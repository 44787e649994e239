# SPDX-License-Identifier: MIT
"""Happy Eyeballs v2 through the Python binding: Socket.resolution_delay, and names that go
through the resolver family by family (the engine's own tests stub the resolver)."""
import socket

import pytest

import socketkit
from conftest import WAIT, Recorder


def loopback_name():
    """This machine's name when it resolves to IPv4 loopback only (as /etc/hosts usually
    makes it): an A answer and an AAAA failure, each on its own."""
    name = socket.gethostname()
    try:
        found = {entry[4][0] for entry in socket.getaddrinfo(name, 80, type=socket.SOCK_STREAM)}
    except OSError:
        return None
    return name if found == {"127.0.0.1"} else None


def test_resolution_delay_round_trips_and_takes_no_negative_or_nan():
    sock = socketkit.Socket(Recorder())
    try:
        assert sock.resolution_delay == pytest.approx(0.05)
        sock.resolution_delay = 0.25
        assert sock.resolution_delay == 0.25
        for bad in (-1.0, float("nan")):
            sock.resolution_delay = bad
            assert sock.resolution_delay == 0
    finally:
        sock.close()


@pytest.mark.parametrize("prefer_ipv4", [True, False])
def test_a_name_answered_by_one_family_connects(prefer_ipv4):
    name = loopback_name()
    if name is None:
        pytest.skip("this machine's name does not resolve to 127.0.0.1 alone")
    with socket.create_server(("127.0.0.1", 0)) as server:
        recorder = Recorder()
        sock = socketkit.Socket(recorder)
        try:
            sock.ipv4_preferred_over_ipv6 = prefer_ipv4
            sock.connect_to_host(name, server.getsockname()[1], timeout=WAIT)
            server.settimeout(WAIT)
            peer, _ = server.accept()
            peer.close()
            assert recorder.expect("connect")[0][1] == "127.0.0.1"
        finally:
            sock.close()


def test_a_name_no_family_answers_is_one_resolution_error():
    recorder = Recorder()
    sock = socketkit.Socket(recorder)
    try:
        sock.connect_to_host("no-such-host.invalid", 80, timeout=WAIT)
        assert isinstance(recorder.disconnect_error(), socketkit.ResolutionError)
        assert recorder.count("disconnect") == 1
    finally:
        sock.close()
