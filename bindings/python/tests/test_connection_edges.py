"""Nothing is lost around the edges of a connection: a callback's data stays valid whatever
it does, bytes (and TLS alerts) that arrived before a reset are delivered before the reset,
an orderly close by the peer is reported on an idle socket at once, and writes queued
before a close are sent even when the close comes while still connecting.

The peers are Python's own socket and ssl modules; every wait has a deadline."""
import select
import socket
import ssl
import struct
import threading

import pytest

import socketkit
from conftest import WAIT, Recorder


def reset(sock: socket.socket) -> None:
    """Closes with a reset (SO_LINGER 0) instead of a FIN."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


def wait_for_hang_up(descriptor: int) -> bool:
    """Waits (bounded) until the kernel has the peer's reset or close for `descriptor`."""
    poller = select.poll()
    poller.register(descriptor, 0)
    for _ in range(int(WAIT * 10)):
        for _, revents in poller.poll(100):
            if revents & (select.POLLHUP | select.POLLERR):
                return True
    return False


def stdlib_client_context(certs):
    return ssl.create_default_context(cafile=certs.path("ca.pem"))


def test_a_tls_echo_from_did_read_survives_a_peer_reset(certs):
    # Callbacks on the loop thread (queue=None), where a read's bytes are lent, not copied.
    # The second read is served from the prebuffer after the peer reset; echoing it makes
    # the TLS send fail inside write(): the session must end after the callback, not in it.
    ready_to_reset = threading.Event()
    reset_done = threading.Event()
    outcome = {}

    class Echo(Recorder):
        def socket_did_accept(self, listener, connection):
            self.accepted.append(connection)
            connection.start_tls(certs.server())
            connection.read_to_length(4, tag=1)
            connection.read_to_length(4, tag=2)

        def socket_did_read(self, sock, data, tag):
            self._record("read", bytes(data), tag)
            if tag == 1:
                ready_to_reset.set()
                outcome["reset"] = reset_done.wait(WAIT)
                sock.perform(lambda descriptors: outcome.update(hung_up=wait_for_hang_up(descriptors.primary)))
                return
            sock.write(data)
            outcome["connected_after_echo"] = sock.is_connected

    echo = Echo()
    listener = socketkit.Socket(echo, queue=None)
    try:
        listener.accept_on_interface("127.0.0.1", 0)
        raw = socket.create_connection(("127.0.0.1", listener.local_port), timeout=WAIT)
        tls = stdlib_client_context(certs).wrap_socket(raw, server_hostname="localhost")
        tls.sendall(b"pingpong")  # one record: "pong" waits in the prebuffer
        assert ready_to_reset.wait(WAIT)
        reset(socket.socket(fileno=tls.detach()))
        reset_done.set()
        error = echo.disconnect_error()
        assert outcome == {"reset": True, "hung_up": True, "connected_after_echo": True}
        assert isinstance(error, socketkit.ConnectionResetError), repr(error)
        assert [event[1:] for event in echo.events if event[0] == "read"] == [(b"ping", 1), (b"pong", 2)]
        assert echo.after_disconnect == 0
    finally:
        listener.close()
        for connection in echo.accepted:
            connection.abort()
