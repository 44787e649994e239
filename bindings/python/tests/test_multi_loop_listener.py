# SPDX-License-Identifier: MIT
"""Socket.reuse_port (beside a Python socket with SO_REUSEPORT) and
Socket.accepts_on_every_loop (one accepting socket per loop of a LoopGroup)."""
import socket
import threading

import pytest

import socketkit
from conftest import WAIT, Recorder


def test_reuse_port_shares_a_port_with_a_python_listener():
    python_listener = socket.socket()
    python_listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    python_listener.bind(("127.0.0.1", 0))
    python_listener.listen(8)
    port = python_listener.getsockname()[1]
    listener = socketkit.Socket(Recorder())
    try:
        with pytest.raises(OSError):
            listener.accept_on_interface("127.0.0.1", port)
        listener.reuse_port = True
        assert listener.reuse_port
        listener.accept_on_interface("127.0.0.1", port)
        assert listener.local_port == port
    finally:
        listener.close()
        python_listener.close()


class Acceptances:
    def __init__(self):
        self.condition = threading.Condition()
        self.seen = []

    def socket_did_accept(self, listener, new_socket):
        with self.condition:
            self.seen.append((listener, threading.get_ident(), new_socket))
            self.condition.notify_all()

    def wait_for(self, count):
        with self.condition:
            assert self.condition.wait_for(lambda: len(self.seen) >= count, WAIT), len(self.seen)
            return list(self.seen)


def test_a_listener_on_every_loop_spreads_python_clients_over_both_loops():
    group = socketkit.LoopGroup(2)
    delegate = Acceptances()
    listener = socketkit.Socket(delegate, queue=None, loop_group=group)
    clients = []
    try:
        listener.accepts_on_every_loop = True
        listener.accept_on_interface("127.0.0.1", 0)
        port = listener.local_port
        clients = [socket.create_connection(("127.0.0.1", port), timeout=WAIT) for _ in range(32)]
        seen = delegate.wait_for(32)
        assert all(entry[0] is listener for entry in seen)
        assert len({entry[1] for entry in seen}) == 2  # both loops' threads (one: 2**-31)
        for _, _, accepted in seen:
            accepted.close()
        listener.close()
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", port), timeout=WAIT)
    finally:
        for client in clients:
            client.close()
        listener.close()
        group.close()
