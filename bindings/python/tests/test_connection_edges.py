# SPDX-License-Identifier: MIT
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


# ---- the end of the peer's stream -----------------------------------------------------


class LoopHold:
    """Holds a socket's event loop (through perform) while the peer's bytes and its reset
    reach the kernel, so one readiness event carries them together. `then` runs on the loop
    once the kernel has the reset, before the loop goes on."""

    def __init__(self, sock, then=None):
        # A first round trip: what earlier calls gave the loop to do in its current
        # iteration (a read's first pass over the socket) has run before the hold begins.
        settled = threading.Event()
        sock.perform(lambda descriptors: settled.set())
        assert settled.wait(WAIT)
        self.held = threading.Event()
        self.release = threading.Event()
        self.hung_up = None

        def hold(descriptors):
            self.held.set()
            self.release.wait(WAIT)
            self.hung_up = wait_for_hang_up(descriptors.primary)
            if then is not None:
                then()

        sock.perform(hold)
        assert self.held.wait(WAIT)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release.set()


def test_an_orderly_close_on_an_idle_socket_is_reported_at_once(raw_peer):
    peer = raw_peer()
    peer.peer.shutdown(socket.SHUT_WR)  # no read is queued
    error = peer.recorder.disconnect_error()
    assert type(error) is socketkit.ClosedError, repr(error)
    assert peer.recorder.count("read") == 0


def test_without_auto_disconnect_an_idle_socket_reports_the_closed_read_stream_at_once(raw_peer):
    def half_duplex(sock):
        sock.auto_disconnect_on_closed_read_stream = False

    peer = raw_peer(configure=half_duplex)
    peer.peer.shutdown(socket.SHUT_WR)
    peer.recorder.expect("close_read_stream")
    assert peer.socket.is_connected
    peer.socket.write(b"still here")
    assert peer.receive_exactly(10) == b"still here"
    assert peer.recorder.count("disconnect") == 0


def test_bytes_before_an_orderly_close_are_read_before_it_is_reported(raw_peer):
    peer = raw_peer()
    peer.peer.sendall(b"last words")
    peer.peer.shutdown(socket.SHUT_WR)
    # Unread bytes hold the report back (they are never dropped)...
    assert not peer.recorder.wait_for(lambda events: any(e[0] == "disconnect" for e in events), timeout=0.3)
    # ...until reads have taken them: then the close, with no further read queued.
    peer.socket.read_to_length(4, tag=1)
    peer.socket.read_to_length(6, tag=2)
    error = peer.recorder.disconnect_error()
    assert type(error) is socketkit.ClosedError, repr(error)
    assert [event[1:] for event in peer.recorder.events if event[0] == "read"] == [(b"last", 1), (b" words", 2)]


def test_bytes_before_a_reset_are_delivered_before_the_error(raw_peer):
    peer = raw_peer()
    peer.socket.read_to_length(10, tag=1)
    with LoopHold(peer.socket) as hold:
        peer.peer.sendall(b"0123456789")
        reset(peer.peer)
    error = peer.recorder.disconnect_error()
    assert hold.hung_up
    assert [event[1:] for event in peer.recorder.events if event[0] == "read"] == [(b"0123456789", 1)]
    assert isinstance(error, socketkit.ConnectionResetError), repr(error)


def test_a_tls_alert_before_a_reset_is_reported_as_the_alert(certs):
    # A Python ssl server that speaks TLS 1.2 at most, a SocketKit client that wants 1.3:
    # the server answers with a protocol_version alert and resets.
    listener = socket.create_server(("127.0.0.1", 0))
    recorder = Recorder()
    client = socketkit.Socket(recorder)
    try:
        client.connect_to_host("127.0.0.1", listener.getsockname()[1], timeout=10)
        client.start_tls(certs.client(minimum_version="TLSv1.3"))
        listener.settimeout(WAIT)
        raw, _ = listener.accept()
        assert select.select([raw], [], [], WAIT)[0], "no ClientHello"
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.maximum_version = ssl.TLSVersion.TLSv1_2
        context.load_cert_chain(certs.path("server-chain.pem"), certs.path("server.key"))
        # Closed with a reset: ssl closes the socket itself when the handshake fails.
        raw.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        with LoopHold(client) as hold:
            with pytest.raises(ssl.SSLError):
                context.wrap_socket(raw, server_side=True)
        error = recorder.disconnect_error()
        assert hold.hung_up
        assert type(error) is socketkit.ProtocolVersionError, repr(error)
    finally:
        client.close()
        listener.close()


def test_a_write_that_meets_a_reset_first_still_lets_the_reads_have_their_bytes(raw_peer):
    peer = raw_peer()
    peer.socket.read_to_length(4, tag=1)
    sock = peer.socket
    with LoopHold(sock, then=lambda: sock.write(b"pong")) as hold:
        peer.peer.sendall(b"ping")
        reset(peer.peer)
    error = peer.recorder.disconnect_error()
    assert hold.hung_up
    assert [event[1:] for event in peer.recorder.events if event[0] == "read"] == [(b"ping", 1)]
    assert isinstance(error, socketkit.ConnectionResetError), repr(error)


def test_a_failed_send_ends_an_idle_connection_with_bytes_still_unread(raw_peer):
    """No read queued (a server that stopped reading, waiting for its writes to drain): a
    send that fails because the peer reset ends the connection, unread bytes and all, where
    it waited for a read for good (the hostile-peer report of issue 34)."""
    peer = raw_peer()
    sock = peer.socket
    with LoopHold(sock, then=lambda: sock.write(b"to a peer that is gone")) as hold:
        peer.peer.sendall(b"never read")
        reset(peer.peer)
    error = peer.recorder.disconnect_error()
    assert hold.hung_up
    assert [event for event in peer.recorder.events if event[0] == "read"] == []
    assert isinstance(error, (ConnectionResetError, BrokenPipeError)), repr(error)


# ---- writes queued before a close, while still connecting -----------------------------


class StalledListener:
    """A listener whose accept queue is full (backlog 0, one connection waiting): the kernel
    drops the next SYN, so a connect to it stays in progress until the queue has room and
    the SYN comes again (a second later)."""

    def __init__(self):
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(0)
        self.listener.settimeout(WAIT)
        self.port = self.listener.getsockname()[1]
        self.filler = socket.create_connection(("127.0.0.1", self.port))
        # Until the filler is in the queue: a SYN that came before would still get in.
        assert select.select([self.listener], [], [], WAIT)[0]

    def admit(self) -> socket.socket:
        """Makes room and returns the next connection, once its SYN has come again."""
        self.listener.accept()[0].close()
        self.filler.close()
        connection, _ = self.listener.accept()
        connection.settimeout(WAIT)
        return connection

    def close(self):
        self.filler.close()
        self.listener.close()


def receive_until_end(connection) -> bytes:
    chunks = []
    while True:
        chunk = connection.recv(1 << 16)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)


def test_close_while_connecting_still_sends_the_queued_writes():
    stalled = StalledListener()
    recorder = Recorder()
    sock = socketkit.Socket(recorder)
    try:
        sock.connect_to_host("127.0.0.1", stalled.port)
        payload = bytes(range(256)) * 1024
        sock.write(payload)
        assert not sock.is_connected  # the connect is still in progress
        sock.close()  # queued writes are still sent (as asyncio's transport.close())
        with stalled.admit() as peer:
            assert receive_until_end(peer) == payload
        # Closed: no delegate method runs (a watermark may have come before the close).
        assert recorder.count("connect") == 0 and recorder.count("disconnect") == 0
    finally:
        stalled.close()


def test_writes_queued_behind_start_tls_while_connecting_are_sent_after_a_close(certs):
    stalled = StalledListener()
    recorder = Recorder()
    sock = socketkit.Socket(recorder)
    try:
        sock.connect_to_host("127.0.0.1", stalled.port)
        sock.start_tls(certs.client(peer_name="localhost"))
        payload = bytes(range(256)) * 400
        sock.write(payload)
        assert not sock.is_connected
        sock.close()
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(certs.path("server-chain.pem"), certs.path("server.key"))
        with context.wrap_socket(stalled.admit(), server_side=True) as tls:
            assert receive_until_end(tls) == payload  # then close_notify
    finally:
        stalled.close()
