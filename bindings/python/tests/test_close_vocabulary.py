# SPDX-License-Identifier: MIT
"""One close vocabulary for Socket and UdpSocket, that of asyncio's transports: close() (and
the end of a ``with`` block) closes for good once what was queued to send is sent; abort()
(and release(), the C API's word) closes for good at once; disconnect() ends what the socket
is doing and keeps it. Each behaviour is checked for both kinds against peers made with
Python's socket module."""
import select
import socket
import threading
import time
from typing import Any, Callable, List, Tuple

import pytest

import socketkit

from conftest import WAIT, pump

KINDS = ["tcp", "udp"]
PAYLOAD = b"queued before the close"
# Datagrams queued behind the resolution of their destination's name (off the loop): a
# hundred, so that many are certainly still queued when the test closes the socket at once.
DATAGRAMS = [b"datagram %d" % index for index in range(100)]


class Events:
    """A delegate of either kind that records the name of every callback it gets."""

    def __init__(self) -> None:
        self.names: List[str] = []
        self.condition = threading.Condition()

    def _record(self, name: str) -> None:
        with self.condition:
            self.names.append(name)
            self.condition.notify_all()

    def wait_for(self, name: str) -> bool:
        with self.condition:
            return self.condition.wait_for(lambda: name in self.names, WAIT)

    def socket_did_connect(self, sock, host, port):
        self._record("socket_did_connect")

    def socket_did_write(self, sock, tag):
        self._record("socket_did_write")

    def socket_did_disconnect(self, sock, error):
        self._record("socket_did_disconnect")

    def udp_socket_did_send(self, sock, tag):
        self._record("udp_socket_did_send")

    def udp_socket_did_close(self, sock, error):
        self._record("udp_socket_did_close")


class Peer:
    """The other end, from Python's socket module: a TCP listener or a bound UDP socket."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM if kind == "tcp" else socket.SOCK_DGRAM)
        if kind == "udp":  # room for every datagram a test sends before it reads them
            self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
        self.socket.bind(("127.0.0.1", 0))
        self.socket.settimeout(WAIT)
        if kind == "tcp":
            self.socket.listen()
        self.port = self.socket.getsockname()[1]

    def received(self) -> Any:
        """TCP: every byte until the connection ends; UDP: the next datagram."""
        if self.kind == "udp":
            return self.socket.recv(65536)
        connection, _ = self.socket.accept()
        with connection:
            connection.settimeout(WAIT)
            chunks = []
            while True:
                chunk = connection.recv(65536)
                if not chunk:
                    return b"".join(chunks)
                chunks.append(chunk)

    def datagrams(self, count: int) -> List[bytes]:
        return [self.socket.recv(65536) for _ in range(count)]

    def close(self) -> None:
        self.socket.close()


def send_datagrams(sock: socketkit.UdpSocket, port: int) -> None:
    for datagram in DATAGRAMS:
        sock.send_to_host(datagram, "localhost", port)


def start_sending(kind: str, events: Events, queue: Any, peer: Peer) -> Any:
    """A socket with what it sends queued behind a name still being resolved: PAYLOAD on a
    connection still being made, or DATAGRAMS."""
    if kind == "tcp":
        sock = socketkit.Socket(events, queue=queue)
        sock.connect_to_host("localhost", peer.port, timeout=WAIT)
        sock.write(PAYLOAD)
    else:
        sock = socketkit.UdpSocket(events, queue=queue)
        sock.ipv6_enabled = False  # "localhost" is 127.0.0.1 for the peer
        send_datagrams(sock, peer.port)
    return sock


def send_call(sock: Any) -> Callable[[], None]:
    if isinstance(sock, socketkit.UdpSocket):
        return lambda: sock.send_to_address(b"x", ("127.0.0.1", 9))
    return lambda: sock.write(b"x")


@pytest.mark.parametrize("how", ["close", "with"])
@pytest.mark.parametrize("kind", KINDS)
def test_close_sends_what_was_queued_then_closes_for_good(kind, how):
    peer = Peer(kind)
    host = socketkit.HostQueue()
    events = Events()
    sock = start_sending(kind, events, host, peer)
    if how == "close":
        sock.close()
    else:
        with sock:
            pass
    if kind == "tcp":
        assert peer.received() == PAYLOAD, "what was queued before the close is sent"
    else:
        assert peer.datagrams(len(DATAGRAMS)) == DATAGRAMS, "what was queued before the close is sent"
    with pytest.raises(socketkit.InvalidHandleError):
        send_call(sock)()
    with pytest.raises(socketkit.InvalidHandleError):
        sock.handle
    assert repr(sock) == f"<socketkit.{type(sock).__name__} closed>"
    sock.close()  # idempotent
    sock.abort()
    # Callbacks of what followed the close (the connection, the send, the close itself)
    # reach no delegate method: the host queue has nothing to run for it.
    host.drain()
    assert events.names == []
    host.close()
    peer.close()


@pytest.mark.parametrize("word", ["abort", "release"])
@pytest.mark.parametrize("kind", KINDS)
def test_abort_and_release_close_for_good_at_once(kind, word):
    peer = Peer(kind)
    host = socketkit.HostQueue()
    events = Events()
    sock = start_sending(kind, events, host, peer)
    getattr(sock, word)()
    with pytest.raises(socketkit.InvalidHandleError):
        send_call(sock)()
    assert repr(sock) == f"<socketkit.{type(sock).__name__} closed>"
    getattr(sock, word)()  # idempotent
    sock.close()
    host.drain()
    assert events.names == []
    host.close()
    peer.close()


@pytest.mark.parametrize("kind", KINDS)
def test_disconnect_ends_the_session_and_keeps_the_socket(kind):
    peer = Peer(kind)
    events = Events()
    if kind == "tcp":
        sock = socketkit.Socket(events, queue=None)
        for _ in range(2):
            sock.connect_to_address(("127.0.0.1", peer.port), timeout=WAIT)
            connection, _ = peer.socket.accept()
            assert events.wait_for("socket_did_connect")
            sock.disconnect()
            assert events.wait_for("socket_did_disconnect")
            assert connection.recv(10) == b""
            connection.close()
            events.names.clear()
    else:
        sock = socketkit.UdpSocket(events, queue=None)
        for disconnect in (sock.disconnect, sock.disconnect_after_sending, sock.close_after_sending):
            sock.bind_to_port(0, "127.0.0.1")
            sock.send_to_address(b"sent", ("127.0.0.1", peer.port))
            disconnect()
            assert events.wait_for("udp_socket_did_close")
            assert sock.is_closed and sock.local_port == 0
            events.names.clear()
        assert peer.received() == b"sent"
    sock.close()
    peer.close()


@pytest.mark.parametrize("word", ["close", "abort", "release"])
def test_a_udp_socket_with_a_filter_closes_at_once(word):
    """What abort() drops is what is still queued (here a datagram held by its send
    filter's verdict). close() does the same while a filter is set: a send filter decides
    what may leave, and no filter call starts once close() returns."""
    peer = Peer("udp")
    filter_queue = socketkit.HostQueue()
    calls: List[Tuple[bytes, Any, int]] = []
    sock = socketkit.UdpSocket(None, queue=None)
    sock.set_send_filter(lambda data, address, tag: calls.append((data, address, tag)) is None, queue=filter_queue)
    sock.send_to_address(PAYLOAD, ("127.0.0.1", peer.port))
    assert select.select([filter_queue.fileno()], [], [], WAIT)[0], "the datagram waits for its verdict"
    getattr(sock, word)()
    filter_queue.drain()
    assert calls == [], "the filter is not called once the socket is closed"
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as marker:
        marker.sendto(b"marker", ("127.0.0.1", peer.port))
    assert peer.received() == b"marker", "the held datagram was dropped"
    filter_queue.close()
    peer.close()


def test_closing_a_udp_socket_from_its_own_delegate_method_sends_what_was_queued():
    """close() from inside a delegate method on the loop thread: the delegate change it makes
    does not wait for the running method, and the datagrams queued before still leave."""
    peer = Peer("udp")
    closed = threading.Event()

    class CloseOnSend(Events):
        def udp_socket_did_send(self, sock, tag):
            send_datagrams(sock, peer.port)
            sock.close()
            closed.set()

    sock = socketkit.UdpSocket(CloseOnSend(), queue=None)
    sock.ipv6_enabled = False
    sock.send_to_address(b"first", ("127.0.0.1", peer.port))
    assert closed.wait(WAIT)
    assert peer.datagrams(1 + len(DATAGRAMS)) == [b"first"] + DATAGRAMS
    peer.close()


def test_a_closed_udp_socket_sends_without_its_host_queue_being_drained():
    """A UDP socket whose delegate methods run on a host queue: closed, it is released at
    once (SocketKit's lingering close, no marker datagram), its last datagrams leave without
    the queue being drained, and the callbacks it had waiting there reach nobody."""
    from socketkit._ffi import lib
    peer = Peer("udp")
    host = socketkit.HostQueue()
    events = Events()
    sock = socketkit.UdpSocket(events, queue=host)
    sock.ipv6_enabled = False
    sock.bind_to_port(0, "127.0.0.1")
    sock.send_to_address(b"one", ("127.0.0.1", peer.port))
    pump(host, lambda: "udp_socket_did_send" in events.names)
    handle = sock.handle
    send_datagrams(sock, peer.port)
    sock.close()
    assert lib.sk_udp_socket_is_closed(handle) == socketkit.errors.INVALID_HANDLE, "released by close()"
    assert peer.datagrams(1 + len(DATAGRAMS)) == [b"one"] + DATAGRAMS
    host.drain()
    assert events.names == ["udp_socket_did_send"]
    host.close()
    peer.close()


def receive_numbered(peer: socket.socket, count: int) -> int:
    """How many distinct 4-byte datagrams numbered below `count` come within WAIT."""
    seen = set()
    deadline = time.monotonic() + WAIT
    while len(seen) < count and time.monotonic() < deadline:
        if not select.select([peer], [], [], 0.1)[0]:
            continue
        number = int.from_bytes(peer.recv(64)[:4], "little")
        if number < count:
            seen.add(number)
    return len(seen)


@pytest.mark.parametrize("how", ["close", "close_after_sending+release", "close with a receive filter"])
def test_udp_close_still_sends_every_queued_datagram(how):
    """close() is close_after_sending() + release, SocketKit's lingering close: 200 datagrams
    queued, every tenth to "localhost" (resolved off the loop, holding the queue), all reach
    the peer after a close at once, with no delegate method run. A receive filter does not
    change that (only a send filter makes close() an abort)."""
    count = 200
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as peer:
        peer.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)  # loopback drops nothing then
        peer.bind(("127.0.0.1", 0))
        port = peer.getsockname()[1]
        events = Events()
        sock = socketkit.UdpSocket(events, queue=None)
        sock.ipv6_enabled = False  # "localhost" is 127.0.0.1
        if how == "close with a receive filter":
            sock.bind_to_port(0, "127.0.0.1")
            sock.set_receive_filter(lambda data, address: True)
            sock.begin_receiving()
        for number in range(count):
            datagram = number.to_bytes(4, "little")
            if number % 10 == 0:
                sock.send_to_host(datagram, "localhost", port, timeout=5)
            else:
                sock.send_to_address(datagram, ("127.0.0.1", port), timeout=5)
        if how != "close_after_sending+release":
            sock.close()
        else:
            sock.close_after_sending()
            sock.release()
        before = list(events.names)
        assert receive_numbered(peer, count) == count
        assert events.names == before, "a closed socket reports nothing"
