# SPDX-License-Identifier: MIT
"""UDP sockets through Python, on real loopback sockets: round trips (IPv4, IPv6, empty
datagrams, tags in order), errors that fail one datagram, receive modes, filters, connect,
binding and reuse, multicast and broadcast, close and release, interop with Python's own
socket module, and every callback path (loop thread, serial queue, host queue records,
asyncio). No sleeps: waits are on conditions with deadlines."""
import asyncio
import errno
import gc
import os
import select
import socket
import sys
import threading
import weakref
from typing import Any, Callable, List, Optional, Tuple

import pytest

import socketkit
from socketkit import aio
from conftest import WAIT, descriptor_options, pattern, pump


class UdpRecorder:
    """Records delegate calls as tuples: ("send", tag), ("not_send", tag, error),
    ("receive", data, address, context), ("connect", address), ("not_connect", error),
    ("receive_error", error), ("close", error). Checks the contract as it goes: no two
    callbacks of one socket overlap, nothing follows did_close (until the socket is used
    again: `reopened()`)."""

    def __init__(self, echo: bool = False) -> None:
        self.events: List[Tuple[Any, ...]] = []
        self.condition = threading.Condition()
        self.threads = set()
        self.running = 0
        self.overlaps = 0
        self.after_close = 0
        self._closed = False
        self.echo = echo
        self.on_receive: Optional[Callable[[socketkit.UdpSocket, bytes, Any, Any], None]] = None

    def _record(self, *event: Any) -> None:
        with self.condition:
            self.threads.add(threading.get_ident())
            if self.running:
                self.overlaps += 1
            self.running += 1
        try:
            with self.condition:
                if self._closed:
                    self.after_close += 1
                if event[0] == "close":
                    self._closed = True
                self.events.append(event)
                self.condition.notify_all()
        finally:
            with self.condition:
                self.running -= 1

    def reopened(self) -> None:
        with self.condition:
            self._closed = False

    def wait_for(self, predicate: Callable[[List[Tuple[Any, ...]]], bool], timeout: float = WAIT) -> bool:
        with self.condition:
            return self.condition.wait_for(lambda: predicate(self.events), timeout)

    def of(self, kind: str) -> List[Tuple[Any, ...]]:
        with self.condition:
            return [event for event in self.events if event[0] == kind]

    def expect(self, kind: str, count: int = 1, timeout: float = WAIT) -> List[Tuple[Any, ...]]:
        assert self.wait_for(lambda events: sum(1 for e in events if e[0] == kind) >= count, timeout), \
            f"timed out waiting for {count} {kind!r} events; have {self.events}"
        return self.of(kind)

    # Delegate methods
    def udp_socket_did_connect(self, sock, address):
        self._record("connect", address)

    def udp_socket_did_not_connect(self, sock, error):
        self._record("not_connect", error)

    def udp_socket_did_send(self, sock, tag):
        self._record("send", tag)

    def udp_socket_did_not_send(self, sock, tag, error):
        self._record("not_send", tag, error)

    def udp_socket_did_receive(self, sock, data, address, context):
        assert isinstance(data, bytes)
        self._record("receive", data, address, context)
        if self.on_receive:
            self.on_receive(sock, data, address, context)
        if self.echo:
            sock.send_to_address(data, address)

    def udp_socket_did_receive_error(self, sock, error):
        self._record("receive_error", error)

    def udp_socket_did_close(self, sock, error):
        self._record("close", error)


@pytest.fixture
def udp():
    """Makes UdpSockets (loop-thread callbacks unless a queue is given) and releases them."""
    made: List[socketkit.UdpSocket] = []

    def make(delegate: Any = None, **options: Any) -> socketkit.UdpSocket:
        options.setdefault("queue", None)
        sock = socketkit.UdpSocket(delegate, **options)
        made.append(sock)
        return sock

    yield make
    for sock in made:
        sock.release()


def echo_server(udp, host: str = "127.0.0.1", **options: Any) -> Tuple[socketkit.UdpSocket, UdpRecorder, int]:
    log = UdpRecorder(echo=True)
    server = udp(log, **options)
    server.bind_to_port(0, host)
    server.begin_receiving()
    port = server.local_port
    assert port != 0
    return server, log, port


def raw_socket(family: int = socket.AF_INET, host: str = "127.0.0.1") -> socket.socket:
    raw = socket.socket(family, socket.SOCK_DGRAM)
    raw.bind((host, 0))
    raw.settimeout(WAIT)
    return raw


def peek(sock: socketkit.UdpSocket, family: int = socket.AF_INET) -> Optional[bytes]:
    """The next datagram waiting in the kernel for `sock` (not consumed), or None. Runs on
    the socket's loop thread, so it sees what SocketKit has not read."""
    done = threading.Event()
    found: List[Optional[bytes]] = []

    def look(descriptors: socketkit.Descriptors) -> None:
        fd = descriptors.ipv4 if family == socket.AF_INET else descriptors.ipv6
        copy = socket.socket(family, socket.SOCK_DGRAM, fileno=os.dup(fd))
        try:
            found.append(copy.recv(65536, socket.MSG_PEEK | socket.MSG_DONTWAIT))
        except BlockingIOError:
            found.append(None)
        finally:
            copy.close()
            done.set()

    sock.perform(look)
    assert done.wait(WAIT)
    return found[0]


def has_ipv6_loopback() -> bool:
    if not socket.has_ipv6:
        return False
    try:
        probe = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
        probe.bind(("::1", 0))
        probe.close()
        return True
    except OSError:
        return False


# --------------------------------------------------------------------------------------
# Round trips
# --------------------------------------------------------------------------------------

def test_round_trip_ipv4_with_tags_in_order_and_an_empty_datagram(udp):
    server, server_log, port = echo_server(udp)
    log = UdpRecorder()
    client = udp(log)
    assert client.is_closed and not client.is_connected and client.local_port == 0 and client.local_address is None
    client.connect_to_host("127.0.0.1", port)
    assert log.expect("connect")[0][1] == ("127.0.0.1", port)
    assert client.is_connected and client.connected_host == "127.0.0.1" and client.connected_port == port
    assert client.connected_address == ("127.0.0.1", port)
    assert client.local_host == "127.0.0.1" and client.local_port != 0 and client.is_ipv4
    client.begin_receiving()
    payloads = [pattern(index * 37, seed=index) for index in range(30)]  # the first is empty
    for tag, payload in enumerate(payloads):
        client.send(payload, timeout=5, tag=tag)
    assert [event[1] for event in log.expect("send", 30)] == list(range(30))
    echoes = log.expect("receive", 30)
    assert [event[1] for event in echoes] == payloads
    assert all(event[2] == ("127.0.0.1", port) and event[3] is None for event in echoes)
    assert server_log.of("receive")[0][1] == b""
    assert all(event[2] == ("127.0.0.1", client.local_port) for event in server_log.of("receive"))
    assert log.of("not_send") == [] and log.overlaps == 0 and server_log.overlaps == 0
    # Bytes-like objects of every kind.
    client.send(bytearray(b"ba"), tag=100)
    client.send(memoryview(b"xmvx")[1:3], tag=101)
    client.send(memoryview(bytearray(b"wr")), tag=102)
    assert [event[1] for event in log.expect("receive", 33)[30:]] == [b"ba", b"mv", b"wr"]


@pytest.mark.skipif(not has_ipv6_loopback(), reason="no IPv6 loopback")
def test_round_trip_ipv6(udp):
    server, server_log, _ = echo_server(udp, host="::1")
    port = server.local_port_ipv6
    assert server.local_address_ipv6 == ("::1", port) and server.local_host_ipv6 == "::1"
    assert server.local_address == ("::1", port)  # no IPv4 descriptor on ::1
    assert server.is_ipv6 and not server.is_ipv4 and server.local_port_ipv4 == 0
    log = UdpRecorder()
    client = udp(log)
    client.ipv4_enabled = False
    client.bind_to_address(("::1", 0))
    client.begin_receiving()
    client.send_to_address(b"", ("::1", port), tag=1)
    client.send_to_host(b"six", "::1", port, tag=2)
    assert [event[1] for event in log.expect("send", 2)] == [1, 2]
    echoes = log.expect("receive", 2)
    assert [event[1:3] for event in echoes] == [(b"", ("::1", port)), (b"six", ("::1", port))]
    assert server_log.of("receive")[1][2] == ("::1", client.local_port_ipv6)
    # A 4-tuple as Python's socket module gives for IPv6 is accepted too.
    client.send_to_address(b"4t", ("::1", port, 0, 0), tag=3)
    assert log.expect("receive", 3)[2][1] == b"4t"


def test_oversized_datagram_fails_alone_with_emsgsize(udp):
    server, server_log, port = echo_server(udp)
    log = UdpRecorder()
    client = udp(log)
    client.send_to_host(bytes(65508), "127.0.0.1", port, timeout=5, tag=1)  # > 65507: no IPv4 datagram
    failed = log.expect("not_send")[0]
    assert failed[1] == 1
    assert isinstance(failed[2], socketkit.SystemCallError) and isinstance(failed[2], OSError)
    assert failed[2].errno == errno.EMSGSIZE and failed[2].code == socketkit.errors.SYSTEM
    assert not client.is_closed and log.of("close") == []
    client.send_to_host(b"ok", "127.0.0.1", port, timeout=5, tag=2)
    assert log.expect("send")[0][1] == 2
    assert server_log.expect("receive")[0][1] == b"ok"
    # The largest IPv4 datagram goes through.
    client.send_to_host(pattern(65507), "127.0.0.1", port, tag=3)
    assert log.expect("send", 2)[1][1] == 3
    assert server_log.expect("receive", 2)[1][1] == pattern(65507)
    # Over 65535 bytes is refused at once.
    with pytest.raises(socketkit.BadParamError):
        client.send_to_host(bytes(65536), "127.0.0.1", port)


def test_unresolvable_host_and_missing_destination_fail_the_datagram(udp):
    log = UdpRecorder()
    sock = udp(log)
    sock.send_to_host(b"x", "no-such-host.invalid", 9, timeout=30, tag=7)
    sock.send(b"y", timeout=5, tag=8)  # not connected: no destination
    failures = log.expect("not_send", 2)
    assert failures[0][1] == 7 and isinstance(failures[0][2], socketkit.ResolutionError)
    assert failures[0][2].errno != 0 and failures[0][2].message
    assert failures[1][1] == 8 and isinstance(failures[1][2], socketkit.BadConfigError)
    with pytest.raises(socketkit.BadParamError):
        sock.send_to_host(b"x", "", 9)
    with pytest.raises(socketkit.BadParamError):
        sock.send_to_address(b"x", ("localhost", 9))  # names go through send_to_host
    with pytest.raises(socketkit.BadParamError):
        sock.send(b"x", timeout=float("nan"))
    with pytest.raises(socketkit.BadParamError):
        sock.send_to_host(b"x", "127.0.0.1", 70000)


def test_a_destination_of_an_unusable_family_is_other_error(udp):
    log = UdpRecorder()
    sock = udp(log)
    sock.ipv6_enabled = False
    sock.send_to_address(b"x", ("::1", 9), tag=7)
    failed = log.expect("not_send")[0]
    assert failed[1] == 7 and type(failed[2]) is socketkit.OtherError
    assert failed[2].code == socketkit.errors.OTHER and failed[2].errno == 0 and failed[2].message
    sock.connect_to_address(("::1", 9))
    refused = log.expect("not_connect")[0][1]
    assert type(refused) is socketkit.OtherError and refused.code == socketkit.errors.OTHER
    assert not sock.is_connected and not log.of("send") and not log.of("close")


def test_connect_failure_and_send_timeout_errors_are_typed(udp):
    log = UdpRecorder()
    sock = udp(log)
    sock.connect_to_host("no-such-host.invalid", 9)
    assert isinstance(log.expect("not_connect")[0][1], socketkit.ResolutionError)
    assert not sock.is_connected
    assert issubclass(socketkit.SendTimeoutError, socketkit.TimeoutError)
    assert isinstance(socketkit.errors.error_from_code(-13), socketkit.TruncatedError)


def test_a_send_waiting_for_its_filter_times_out_and_the_queue_goes_on(udp):
    """The timeout counts from the head of the queue: a datagram whose filter verdict does
    not come in time fails alone with SendTimeoutError, and the next one is sent."""
    raw = raw_socket()
    log = UdpRecorder()
    client, filter_queue, calls = held_send_queue_client(udp, log)
    client.send_to_address(b"late", raw.getsockname(), timeout=0.05, tag=1)
    client.send_to_address(b"next", raw.getsockname(), timeout=WAIT, tag=2)
    failed = log.expect("not_send")[0]
    assert failed[1] == 1 and type(failed[2]) is socketkit.SendTimeoutError
    assert failed[2].code == socketkit.errors.SEND_TIMEOUT and failed[2].errno == 0
    while 2 not in calls and wait_for_filter_call(filter_queue):
        filter_queue.drain()  # the late verdict for 1 (ignored), then the one for 2
    assert log.expect("send") == [("send", 2)]
    assert raw.recv(100) == b"next"
    assert [event[:2] for event in log.events] == [("not_send", 1), ("send", 2)]
    filter_queue.close()
    raw.close()


# --------------------------------------------------------------------------------------
# Receiving
# --------------------------------------------------------------------------------------

def test_receive_once_begin_receiving_and_pause(udp):
    log = UdpRecorder()
    server = udp(log)
    with pytest.raises(socketkit.BadConfigError):
        server.receive_once()  # no descriptors yet
    server.bind_to_port(0, "127.0.0.1")
    target = ("127.0.0.1", server.local_port)
    raw = raw_socket()
    server.receive_once()
    for index in range(3):
        raw.sendto(b"d%d" % index, target)
    assert log.expect("receive")[0][1] == b"d0"
    assert peek(server) == b"d1", "receive_once read one datagram only"
    assert len(log.of("receive")) == 1
    server.receive_once()
    assert log.expect("receive", 2)[1][1] == b"d1"
    server.begin_receiving()
    raw.sendto(b"d3", target)
    assert [event[1] for event in log.expect("receive", 4)] == [b"d0", b"d1", b"d2", b"d3"]
    server.pause_receiving()
    raw.sendto(b"d4", target)
    assert peek(server) == b"d4", "paused: the datagram waits in the kernel"
    assert len(log.of("receive")) == 4
    server.receive_once()
    assert log.expect("receive", 5)[4][1] == b"d4"
    assert all(event[2] == raw.getsockname() for event in log.of("receive"))
    raw.close()


def test_datagrams_over_the_receive_limit_are_reported_truncated(udp):
    log = UdpRecorder()
    server = udp(log)
    server.max_receive_sizes = (100, 200)
    assert server.max_receive_sizes == (100, 200)
    server.bind_to_port(0, "127.0.0.1")
    server.begin_receiving()
    raw = raw_socket()
    raw.sendto(bytes(101), ("127.0.0.1", server.local_port))
    raw.sendto(bytes(100), ("127.0.0.1", server.local_port))
    error = log.expect("receive_error")[0][1]
    assert isinstance(error, socketkit.TruncatedError) and error.code == -13
    assert log.expect("receive")[0][1] == bytes(100)
    assert not server.is_closed
    with pytest.raises(socketkit.BadParamError):
        server.max_receive_sizes = (0, 100)
    raw.close()


# --------------------------------------------------------------------------------------
# Filters
# --------------------------------------------------------------------------------------

@pytest.mark.parametrize("asynchronous", [True, False], ids=["async", "sync"])
def test_receive_filter_drops_and_attaches_a_context(udp, asynchronous, monkeypatch):
    unraisable = []
    monkeypatch.setattr(sys, "unraisablehook", unraisable.append)
    log = UdpRecorder()
    server = udp(log, queue=socketkit.SerialQueue("udp-filter-test"))
    server.bind_to_port(0, "127.0.0.1")
    seen = []
    filter_threads = set()

    class Marker:
        def __init__(self, value):
            self.value = value

    markers = weakref.WeakSet()

    def keep_even(data, address):
        filter_threads.add(threading.get_ident())
        seen.append((data, address))
        if data == b"\x05":
            raise RuntimeError("filter failure")
        if not data or data[0] % 2:
            return False
        if data[0] == 2:
            return True  # kept, no context
        marker = Marker(data[0])
        markers.add(marker)
        return True, marker

    server.set_receive_filter(keep_even, asynchronous=asynchronous)
    server.begin_receiving()
    raw = raw_socket()
    for value in [1, 2, 3, 4, 5, 6, 7, 8]:
        raw.sendto(bytes([value]), ("127.0.0.1", server.local_port))
    received = log.expect("receive", 3)
    assert [event[1] for event in received] == [b"\x02", b"\x04", b"\x06", b"\x08"][:len(received)]
    received = log.expect("receive", 4)
    assert [event[1] for event in received] == [b"\x02", b"\x04", b"\x06", b"\x08"]
    assert received[0][3] is None
    assert [event[3].value for event in received[1:]] == [4, 6, 8]
    assert [data for data, _ in seen] == [bytes([value]) for value in range(1, 9)]
    assert all(address == raw.getsockname() for _, address in seen)
    assert len(unraisable) == 1 and isinstance(unraisable[0].exc_value, RuntimeError)
    assert server._contexts == {}, "contexts are handed over and forgotten"
    del received
    log.events.clear()
    gc.collect()
    assert len(markers) == 0, "nothing keeps a delivered context alive"
    if not asynchronous:
        assert threading.get_ident() not in filter_threads
    # Removing the filter delivers everything again.
    server.set_receive_filter(None)
    raw.sendto(b"\x01", ("127.0.0.1", server.local_port))
    assert log.expect("receive")[0][1] == b"\x01"
    with pytest.raises(socketkit.BadParamError):
        server.set_receive_filter(keep_even, queue=socketkit.SerialQueue(), asynchronous=False)
    with pytest.raises(socketkit.BadParamError):
        server.set_receive_filter("not callable")
    raw.close()


def test_send_filter_drop_is_still_reported_sent(udp):
    raw = raw_socket()
    log = UdpRecorder()
    client = udp(log)
    calls = []

    def short_only(data, address, tag):
        calls.append((data, address, tag))
        return len(data) < 3

    client.set_send_filter(short_only)
    for tag, data in enumerate([b"a", b"long", b"b", b"longer", b"z"]):
        client.send_to_address(data, raw.getsockname(), tag=tag)
    assert [event[1] for event in log.expect("send", 5)] == [0, 1, 2, 3, 4]
    assert [raw.recv(100) for _ in range(3)] == [b"a", b"b", b"z"]
    assert calls == [(data, raw.getsockname(), tag) for tag, data in enumerate([b"a", b"long", b"b", b"longer", b"z"])]
    assert log.of("not_send") == []
    raw.close()


def test_connect_filters_out_other_senders(udp):
    peer = raw_socket()
    stranger = raw_socket()
    log = UdpRecorder()
    client = udp(log)
    client.connect_to_address(peer.getsockname())
    assert log.expect("connect")[0][1] == peer.getsockname()
    client.begin_receiving()
    local = ("127.0.0.1", client.local_port)
    stranger.sendto(b"from the stranger", local)
    peer.sendto(b"from the peer", local)
    received = log.expect("receive")
    assert [(event[1], event[2]) for event in received] == [(b"from the peer", peer.getsockname())]
    client.send(b"reply", tag=1)
    assert peer.recvfrom(100) == (b"reply", local)
    with pytest.raises(socketkit.BadConfigError):
        client.connect_to_address(stranger.getsockname())  # connected already
    client.send_to_address(b"elsewhere", stranger.getsockname(), tag=2)
    assert isinstance(log.expect("not_send")[0][2], socketkit.BadConfigError)
    peer.close()
    stranger.close()


# --------------------------------------------------------------------------------------
# Binding, reuse, multicast, broadcast
# --------------------------------------------------------------------------------------

def test_bind_on_a_port_in_use_raises_eaddrinuse(udp):
    holder = raw_socket()
    port = holder.getsockname()[1]
    sock = udp(UdpRecorder())
    with pytest.raises(socketkit.SystemCallError) as caught:
        sock.bind_to_port(port, "127.0.0.1")
    assert caught.value.errno == errno.EADDRINUSE and isinstance(caught.value, OSError)
    assert sock.is_closed
    with pytest.raises(socketkit.BadParamError):
        sock.bind_to_port(0, "no-such-interface0")
    sock.bind_to_port(0, "127.0.0.1")
    with pytest.raises(socketkit.BadConfigError):
        sock.bind_to_port(0, "127.0.0.1")  # bound twice
    other = udp(UdpRecorder())
    with pytest.raises(socketkit.SystemCallError) as caught:
        other.bind_to_address(("127.0.0.1", sock.local_port))
    assert caught.value.errno == errno.EADDRINUSE
    holder.close()


def test_two_sockets_with_reuse_port_bind_the_same_port(udp):
    log = UdpRecorder()
    first, second = udp(log), udp(log)
    first.enable_reuse_port(True)
    second.enable_reuse_port(True)
    first.bind_to_port(0, "127.0.0.1")
    port = first.local_port
    second.bind_to_port(port, "127.0.0.1")
    assert second.local_port == port
    with pytest.raises(socketkit.BadConfigError):
        second.enable_reuse_port(False)  # after bind
    first.begin_receiving()
    second.begin_receiving()
    senders = [raw_socket() for _ in range(16)]
    for index, sender in enumerate(senders):
        sender.sendto(b"%d" % index, ("127.0.0.1", port))
    received = log.expect("receive", 16)
    assert sorted(event[1] for event in received) == sorted(b"%d" % index for index in range(16))
    for sender in senders:
        sender.close()


def test_ipv4_multicast_on_loopback(udp):
    group = "239.255.42.98"
    log = UdpRecorder()
    receiver = udp(log)
    receiver.enable_reuse_port(True)
    receiver.bind_to_port(0)
    port = receiver.local_port_ipv4
    receiver.join_multicast_group(group, "lo")
    assert receiver.is_ipv6, "joining on IPv4 keeps the IPv6 descriptor"
    with pytest.raises(socketkit.BadParamError):
        receiver.join_multicast_group("not-an-ip", "lo")
    receiver.begin_receiving()
    sender_log = UdpRecorder()
    sender = udp(sender_log)
    sender.set_multicast_ttl(1)
    sender.set_multicast_loopback(True)
    sender.send_ipv4_multicast_on_interface("lo")
    sender.send_to_host(b"multicast", group, port, timeout=5, tag=1)
    assert sender_log.expect("send")[0][1] == 1
    received = log.expect("receive")[0]
    assert received[1] == b"multicast" and received[2][1] == sender.local_port_ipv4
    receiver.leave_multicast_group(group, "lo")
    with pytest.raises(socketkit.SystemCallError) as caught:
        receiver.leave_multicast_group(group, "lo")
    assert caught.value.errno == errno.EADDRNOTAVAIL
    with pytest.raises(socketkit.BadParamError):
        sender.set_multicast_ttl(256)


def multicast_options(sock: socketkit.UdpSocket) -> List[int]:
    """IPv4 TTL, IPv4 loop, IPv6 hops, IPv6 loop, read from the descriptors."""
    return descriptor_options(sock, ("ipv4", socket.IPPROTO_IP, socket.IP_MULTICAST_TTL),
                              ("ipv4", socket.IPPROTO_IP, socket.IP_MULTICAST_LOOP),
                              ("ipv6", socket.IPPROTO_IPV6, socket.IPV6_MULTICAST_HOPS),
                              ("ipv6", socket.IPPROTO_IPV6, socket.IPV6_MULTICAST_LOOP))


def test_multicast_ttl_and_loopback_reach_both_descriptors(udp):
    """The kernel's defaults are TTL / hop limit 1 and loopback on: the values set here
    differ, and are read back from the descriptors, set before they exist and after."""
    early = udp(UdpRecorder())
    early.set_multicast_ttl(7)
    early.set_multicast_loopback(False)
    early.bind_to_port(0)
    assert multicast_options(early) == [7, 0, 7, 0]
    late = udp(UdpRecorder())
    late.bind_to_port(0)
    assert multicast_options(late) == [1, 1, 1, 1]
    late.set_multicast_ttl(200)
    late.set_multicast_loopback(False)
    assert multicast_options(late) == [200, 0, 200, 0]
    late.set_multicast_ttl(0)
    late.set_multicast_loopback(True)
    assert multicast_options(late) == [0, 1, 0, 1]
    for bad in (256, -1):
        with pytest.raises(socketkit.BadParamError):
            late.set_multicast_ttl(bad)
    assert multicast_options(late) == [0, 1, 0, 1]


def test_broadcast_needs_enable_broadcast(udp):
    # lo's own broadcast address: the datagram never leaves this machine, and a socket bound
    # to the any address receives it.
    receiver = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    receiver.bind(("0.0.0.0", 0))
    receiver.settimeout(WAIT)
    everyone = ("127.255.255.255", receiver.getsockname()[1])
    log = UdpRecorder()
    sock = udp(log)
    sock.ipv6_enabled = False
    sock.bind_to_port(0)
    sock.send_to_address(b"refused", everyone, tag=3)
    failed = log.expect("not_send")[0]
    assert failed[1] == 3 and type(failed[2]) is socketkit.SystemCallError
    assert failed[2].errno == errno.EACCES
    assert not sock.is_closed
    sock.enable_broadcast(True)
    sock.send_to_address(b"everyone", everyone, tag=4)
    assert receiver.recv(100) == b"everyone"
    sock.enable_broadcast(False)
    sock.send_to_address(b"refused again", everyone, tag=5)
    assert log.expect("not_send", 2)[1][2].errno == errno.EACCES
    assert [event[:2] for event in log.events] == [("not_send", 3), ("send", 4), ("not_send", 5)]
    receiver.close()


def test_addresses_convert_as_the_library_does():
    from socketkit import _addresses
    for address in [("127.0.0.1", 9), ("0.0.0.0", 65535), ("::1", 53), ("::ffff:10.1.2.3", 1), ("fe80::1%lo", 5),
                    ("2001:db8::42", 40000)]:
        raw = _addresses.ip_sockaddr(address)
        assert _addresses.ip_address_from_sockaddr(raw) == _addresses.address_from_sockaddr(raw) == address
    assert _addresses.ip_address_from_sockaddr(_addresses.ip_sockaddr(("fe80::1", 5, 0, socket.if_nametoindex("lo")))) \
        == ("fe80::1%lo", 5)
    # The library's length rule: from the family's struct up to a sockaddr_storage.
    for address in [("192.0.2.1", 443), ("fd00::2", 8080)]:
        raw = _addresses.ip_sockaddr(address)
        padded = raw + bytes(128 - len(raw))
        assert _addresses.ip_address_from_sockaddr(padded) == _addresses.address_from_sockaddr(padded) == address
        assert _addresses.ip_address_from_sockaddr(padded + b"\0") is _addresses.address_from_sockaddr(padded + b"\0") is None
        assert _addresses.ip_address_from_sockaddr(raw[:-1]) is _addresses.address_from_sockaddr(raw[:-1]) is None
    for bad in [("localhost", 1), ("127.0.0.1",), "127.0.0.1:9", ("127.0.0.1", -1), (b"127.0.0.1", 9)]:
        with pytest.raises(socketkit.BadParamError):
            _addresses.ip_sockaddr(bad)


def test_datagram_addresses_with_high_bytes_reach_every_face(udp):
    """A peer at 127.129.250.201 (bytes of 128 and more; all of 127/8 is loopback) is seen
    as itself by did_receive (the C extension's path and ctypes'), the filters, did_connect
    and the address getters."""
    seen = []
    server, log, port = echo_server(udp, host="127.200.128.254")
    server.set_receive_filter(lambda data, address: seen.append(("receive filter", address)) or True)
    raw = raw_socket(host="127.129.250.201")
    raw.sendto(b"x", ("127.200.128.254", port))
    assert raw.recvfrom(10) == (b"x", ("127.200.128.254", port))
    assert log.expect("receive")[0][2] == raw.getsockname()
    assert seen == [("receive filter", raw.getsockname())]
    assert server.local_address == ("127.200.128.254", port) == (server.local_host, server.local_port)
    client_log = UdpRecorder()
    client = udp(client_log)
    client.bind_to_address(("127.129.250.201", 0))
    client.set_send_filter(lambda data, address, tag: seen.append(("send filter", address)) or True)
    client.connect_to_address(("127.200.128.254", port))
    assert client_log.expect("connect")[0][1] == ("127.200.128.254", port)
    assert client.connected_address == ("127.200.128.254", port)
    assert (client.connected_host, client.connected_port) == ("127.200.128.254", port)
    client.send(b"y")
    assert log.expect("receive", 2)[1][2] == client.local_address
    assert ("send filter", ("127.200.128.254", port)) in seen
    raw.close()


def test_a_udp_socket_needs_no_delegate(udp):
    """Unlike a TCP socket's connect and accept, nothing a UDP socket does needs a delegate
    (as in C and Swift): a send-only socket binds, connects and sends without one."""
    raw = raw_socket()
    sock = udp(None)
    sock.bind_to_port(0, "127.0.0.1")
    sock.send_to_address(b"one", raw.getsockname())
    assert raw.recvfrom(10) == (b"one", ("127.0.0.1", sock.local_port))
    sock.disconnect()
    sock.connect_to_address(raw.getsockname())
    sock.send(b"two")
    assert raw.recv(10) == b"two"
    raw.close()


def test_configuration_round_trips(udp):
    sock = udp(UdpRecorder())
    assert sock.ipv4_enabled and sock.ipv6_enabled
    assert sock.address_preference is socketkit.AddressPreference.NEUTRAL
    sock.address_preference = socketkit.AddressPreference.IPV6
    assert sock.address_preference == socketkit.AddressPreference.IPV6
    with pytest.raises(socketkit.BadParamError):
        sock.address_preference = 7
    assert sock.max_receive_sizes == (65535, 65535)
    assert sock.buffer_sizes == (0, 0)
    sock.buffer_sizes = (65536, 131072)
    assert sock.buffer_sizes == (65536, 131072)
    sock.ipv6_enabled = False
    assert not sock.ipv6_enabled and not sock.is_ipv6 and sock.is_ipv4
    assert repr(sock).startswith("<socketkit.UdpSocket idle")
    descriptors = []
    done = threading.Event()
    sock.bind_to_port(0, "127.0.0.1")
    sock.perform(lambda found: (descriptors.append(found), done.set()))
    assert done.wait(WAIT)
    assert descriptors[0].ipv4 >= 0 and descriptors[0].ipv6 == -1
    assert "bound to ('127.0.0.1'" in repr(sock)


# --------------------------------------------------------------------------------------
# Close and release
# --------------------------------------------------------------------------------------

def test_disconnect_reports_did_close_last_and_the_socket_is_reusable(udp):
    raw = raw_socket()
    log = UdpRecorder()
    sock = udp(log)
    sock.disconnect()  # no descriptors: nothing to report
    sock.bind_to_port(0, "127.0.0.1")
    sock.begin_receiving()
    raw.sendto(b"before", ("127.0.0.1", sock.local_port))
    log.expect("receive")
    for tag in range(5):
        sock.send_to_address(b"x", raw.getsockname(), tag=tag)
    log.expect("send", 5)
    sock.disconnect()
    assert log.expect("close")[0][1] is None
    assert log.events[-1] == ("close", None) and len(log.of("close")) == 1
    assert sock.is_closed and sock.local_port == 0 and sock.local_address is None
    # Used again: bound afresh, receiving, sending.
    log.reopened()
    sock.bind_to_port(0, "127.0.0.1")
    sock.begin_receiving()
    raw.sendto(b"after", ("127.0.0.1", sock.local_port))
    assert log.expect("receive", 2)[1][1] == b"after"
    # disconnect_after_sending: every queued datagram goes out first.
    for tag in range(10, 15):
        sock.send_to_address(b"q%d" % tag, raw.getsockname(), tag=tag)
    sock.disconnect_after_sending()
    events = log.expect("close", 2)
    assert events[1] == ("close", None)
    assert [event[1] for event in log.of("send")][-5:] == list(range(10, 15))
    assert log.events[-1] == ("close", None)
    assert log.overlaps == 0 and log.after_close == 0
    raw.close()


def held_send_queue_client(udp, log: UdpRecorder, destination: Any = None,
                           queued: int = 0) -> Tuple[socketkit.UdpSocket, socketkit.HostQueue, List[int]]:
    """A client whose send filter runs on a host queue: each datagram waits at the head of
    the send queue until the test drains its verdict, and what was sent behind it stays
    queued meanwhile. With `queued`, datagrams 0... (tags and bytes) are sent to
    `destination`, and the first one's filter call is pending on return. The list gets the
    tag of each filter call (drain counts events, and a filter call is not one)."""
    client = udp(log)
    filter_queue = socketkit.HostQueue()
    calls: List[int] = []
    client.set_send_filter(lambda data, address, tag: calls.append(tag) is None, queue=filter_queue)
    for tag in range(queued):
        client.send_to_address(bytes([tag]), destination, tag=tag)
    if queued:
        assert wait_for_filter_call(filter_queue), "datagram 0 waits for its verdict, the others behind it"
    return client, filter_queue, calls


def wait_for_filter_call(filter_queue: socketkit.HostQueue) -> bool:
    return bool(select.select([filter_queue.fileno()], [], [], WAIT)[0])


def test_disconnect_drops_queued_datagrams_without_callbacks(udp):
    raw = raw_socket()
    log = UdpRecorder()
    client, filter_queue, calls = held_send_queue_client(udp, log, raw.getsockname(), queued=5)
    client.disconnect()
    assert client.is_closed
    assert log.events == [("close", None)], "dropped without did_send or did_not_send"
    # The filter now says "send" for a datagram of the closed session: nothing goes out.
    filter_queue.drain()
    assert calls == [0]
    client.set_send_filter(None)  # runs on the loop after that verdict
    again = UdpRecorder()
    client.delegate = again
    client.send_to_address(b"marker", raw.getsockname(), tag=99)
    assert raw.recv(100) == b"marker", "the first datagram the peer ever saw"
    assert again.expect("send") == [("send", 99)]
    assert log.events == [("close", None)] and again.events == [("send", 99)]
    filter_queue.close()
    raw.close()


def test_disconnect_after_sending_sends_every_queued_datagram_and_those_queued_after_it(udp):
    raw = raw_socket()
    log = UdpRecorder()
    client, filter_queue, calls = held_send_queue_client(udp, log, raw.getsockname(), queued=5)
    client.disconnect_after_sending()
    client.send_to_address(bytes([5]), raw.getsockname(), tag=5)  # still accepted
    assert not client.is_closed and log.events == []
    while len(calls) < 6 and wait_for_filter_call(filter_queue):
        filter_queue.drain()
    assert calls == list(range(6)), "one verdict at a time, each once the previous datagram left"
    log.expect("close")
    assert log.events == [("send", tag) for tag in range(6)] + [("close", None)]
    assert [raw.recv(100) for _ in range(6)] == [bytes([tag]) for tag in range(6)]
    assert client.is_closed and log.overlaps == 0 and log.after_close == 0
    filter_queue.close()
    raw.close()


def test_operations_on_a_released_socket_raise(udp):
    log = UdpRecorder()
    sock = socketkit.UdpSocket(log, queue=None)
    sock.bind_to_port(0, "127.0.0.1")
    handle = sock.handle
    sock.release()
    sock.release()  # idempotent
    assert repr(sock) == "<socketkit.UdpSocket closed>"
    calls = [
        lambda: sock.send(b"x"), lambda: sock.send_to_host(b"x", "127.0.0.1", 9),
        lambda: sock.send_to_address(b"x", ("127.0.0.1", 9)), lambda: sock.bind_to_port(0),
        lambda: sock.bind_to_address(("127.0.0.1", 0)), lambda: sock.connect_to_host("127.0.0.1", 9),
        lambda: sock.connect_to_address(("127.0.0.1", 9)), sock.receive_once, sock.begin_receiving,
        sock.pause_receiving, sock.disconnect, sock.disconnect_after_sending, sock.close_after_sending,
        lambda: sock.set_send_filter(None),
        lambda: sock.set_receive_filter(lambda data, address: True), lambda: sock.join_multicast_group("239.1.1.1"),
        lambda: sock.leave_multicast_group("239.1.1.1"), lambda: sock.send_ipv4_multicast_on_interface("lo"),
        lambda: sock.send_ipv6_multicast_on_interface("lo"), lambda: sock.set_multicast_ttl(1),
        lambda: sock.set_multicast_loopback(True), sock.enable_broadcast, sock.enable_reuse_port,
        sock.enable_reuse_address, lambda: sock.perform(print), lambda: sock.is_closed, lambda: sock.is_connected,
        lambda: sock.is_ipv4, lambda: sock.is_ipv6, lambda: sock.local_port, lambda: sock.local_host,
        lambda: sock.local_address, lambda: sock.local_port_ipv6, lambda: sock.connected_host,
        lambda: sock.connected_port, lambda: sock.connected_address, lambda: sock.ipv4_enabled,
        lambda: sock.max_receive_sizes, lambda: sock.buffer_sizes, lambda: sock.address_preference,
        lambda: setattr(sock, "ipv6_enabled", False), lambda: setattr(sock, "delegate", log),
        lambda: setattr(sock, "queue", None),
    ]
    for call in calls:
        with pytest.raises(socketkit.InvalidHandleError):
            call()
    # The stale C handle is refused by the library itself (no crash).
    from socketkit._ffi import lib
    assert lib.sk_udp_socket_close(handle) == -11
    assert lib.sk_udp_socket_release(handle) == -11
    assert lib.sk_udp_socket_is_closed(handle) == -11
    assert log.of("close") == [], "a release closes without callbacks"


def test_release_from_callbacks_and_filters_and_by_the_collector(udp):
    raw = raw_socket()
    # From inside did_receive, on the loop thread.
    log = UdpRecorder()
    sock = socketkit.UdpSocket(log, queue=None)
    sock.bind_to_port(0, "127.0.0.1")
    sock.begin_receiving()
    released = threading.Event()
    log.on_receive = lambda s, data, address, context: (s.release(), released.set())
    raw.sendto(b"one", ("127.0.0.1", sock.local_port))
    log.expect("receive")
    assert released.wait(WAIT) and sock._handle is None
    # From inside a synchronous filter (SocketKit holds a lock there): the release finishes
    # on another thread once the filter returns.
    filtered = threading.Event()
    sock = socketkit.UdpSocket(UdpRecorder(), queue=None)
    sock.bind_to_port(0, "127.0.0.1")

    def release_me(data, address):
        sock.release()
        filtered.set()
        return True

    sock.set_receive_filter(release_me, asynchronous=False)
    sock.begin_receiving()
    handle = sock.handle
    raw.sendto(b"two", ("127.0.0.1", sock.local_port))
    assert filtered.wait(WAIT)
    for thread in threading.enumerate():  # started by the release, before it returned
        if thread.name == "socketkit-udp-release":
            thread.join(WAIT)
            assert not thread.is_alive(), "the deferred release never completed"
    from socketkit._ffi import lib
    assert lib.sk_udp_socket_is_closed(handle) == -11
    # A socket nobody holds is released by the collector.
    sock = socketkit.UdpSocket(UdpRecorder(), queue=None)
    sock.bind_to_port(0, "127.0.0.1")
    handle = sock.handle
    reference = weakref.ref(sock)
    del sock, release_me
    gc.collect()
    assert reference() is None
    assert lib.sk_udp_socket_is_closed(handle) == -11
    raw.close()


def test_release_in_did_receive_mid_batch_delivers_no_more_of_the_batch(udp):
    # Ten datagrams wait in the kernel before receiving starts, so one receive batch takes
    # them all; the first callback answers and releases the socket. The answer leaves when
    # the batch ends, so once it arrives the whole batch has been handled.
    raw = raw_socket()
    log = UdpRecorder()
    sock = socketkit.UdpSocket(log, queue=None)
    sock.bind_to_port(0, "127.0.0.1")
    for index in range(10):
        raw.sendto(bytes([index]), ("127.0.0.1", sock.local_port))

    def answer_and_release(s, data, address, context):
        s.send_to_address(data, address)
        s.release()

    log.on_receive = answer_and_release
    sock.begin_receiving()
    raw.settimeout(WAIT)
    assert raw.recvfrom(16)[0] == bytes([0])
    assert [event[1] for event in log.of("receive")] == [bytes([0])]
    raw.close()


def test_delegate_exceptions_go_to_unraisablehook(udp, monkeypatch):
    unraisable = []
    reported = threading.Event()
    monkeypatch.setattr(sys, "unraisablehook", lambda report: (unraisable.append(report), reported.set()))
    received = threading.Event()

    class Broken:
        def udp_socket_did_receive(self, sock, data, address, context):
            received.set()
            raise ValueError("delegate failure")

    sock = udp(Broken())
    sock.bind_to_port(0, "127.0.0.1")
    sock.begin_receiving()
    raw = raw_socket()
    raw.sendto(b"boom", ("127.0.0.1", sock.local_port))
    assert received.wait(WAIT) and reported.wait(WAIT)
    assert isinstance(unraisable[0].exc_value, ValueError)
    assert "udp_socket_did_receive" in unraisable[0].err_msg
    raw.close()


# --------------------------------------------------------------------------------------
# Interop and callback queues
# --------------------------------------------------------------------------------------

@pytest.mark.parametrize("family", [socket.AF_INET, socket.AF_INET6], ids=["ipv4", "ipv6"])
def test_interop_with_the_socket_module(udp, family):
    if family == socket.AF_INET6 and not has_ipv6_loopback():
        pytest.skip("no IPv6 loopback")
    host = "127.0.0.1" if family == socket.AF_INET else "::1"
    server, log, port = echo_server(udp, host=host)
    raw = raw_socket(family, host)
    for index in range(20):
        payload = pattern(index * 50, seed=index)
        raw.sendto(payload, (host, port))
        data, sender = raw.recvfrom(65536)
        assert data == payload and sender[:2] == (host, port)
    assert all(event[2] == raw.getsockname()[:2] for event in log.of("receive"))
    # SocketKit sends to the raw socket, which sees the server's port.
    server.send_to_address(b"hi", raw.getsockname(), tag=9)
    assert raw.recvfrom(100) == (b"hi", (host, port) if family == socket.AF_INET else (host, port, 0, 0))
    assert log.expect("send", 21)[-1][1] == 9
    raw.close()


def test_host_queue_runs_everything_on_the_draining_thread(udp):
    queue = socketkit.HostQueue()
    server_log = UdpRecorder(echo=True)
    server = udp(server_log, queue=queue)
    server.bind_to_port(0, "127.0.0.1")
    port = server.local_port
    server.begin_receiving()
    filter_threads = set()

    def tag_context(data, address):
        filter_threads.add(threading.get_ident())
        return (data != b"drop"), ("ctx", data)

    server.set_receive_filter(tag_context)  # asynchronous, on the socket's queue: runs during drains
    log = UdpRecorder()
    client = udp(log, queue=queue)
    client.connect_to_host("127.0.0.1", port)
    pump(queue, lambda: log.of("connect"))
    assert log.of("connect")[0][1] == ("127.0.0.1", port)
    client.begin_receiving()
    for tag, data in enumerate([b"", b"drop", b"three", pattern(3000)]):
        client.send(data, tag=tag)
    client.send_to_host(b"x", "127.0.0.1", port, tag=99)  # connected: no destination allowed
    server.send_to_host(b"x", "no-such-host.invalid", port, tag=98)
    pump(queue, lambda: len(log.of("receive")) == 3 and log.of("not_send") and server_log.of("not_send"))
    assert [event[1] for event in log.of("send")] == [0, 1, 2, 3]
    assert [event[1] for event in log.of("receive")] == [b"", b"three", pattern(3000)]
    assert [event[3] for event in server_log.of("receive")] == [("ctx", b""), ("ctx", b"three"),
                                                                 ("ctx", pattern(3000))]
    assert server_log.of("receive")[1][2] == ("127.0.0.1", client.local_port)
    not_sent = log.of("not_send")[0]
    assert not_sent[1] == 99 and isinstance(not_sent[2], socketkit.BadConfigError) and not_sent[2].message
    not_sent = server_log.of("not_send")[0]
    assert not_sent[1] == 98 and isinstance(not_sent[2], socketkit.ResolutionError) and not_sent[2].errno != 0
    assert server._contexts == {}
    client.disconnect()
    pump(queue, lambda: log.of("close"))
    assert log.events[-1] == ("close", None)
    me = threading.get_ident()
    assert log.threads == {me} and server_log.threads == {me} and filter_threads == {me}
    assert log.overlaps == 0 and server_log.overlaps == 0
    queue.close()


def test_serial_queue_runs_callbacks_on_its_thread_one_at_a_time(udp):
    queue = socketkit.SerialQueue("udp-serial-test")
    server, server_log, port = echo_server(udp, queue=queue)
    log = UdpRecorder()
    clients = [udp(log, queue=queue) for _ in range(4)]
    for client in clients:
        client.bind_to_port(0, "127.0.0.1")
        client.begin_receiving()
        for tag in range(25):
            client.send_to_address(b"%d" % tag, ("127.0.0.1", port), tag=tag)
    log.expect("send", 100)
    log.expect("receive", 100)
    threads = log.threads | server_log.threads
    assert len(threads) == 1 and threading.get_ident() not in threads
    assert log.overlaps == 0 and server_log.overlaps == 0
    queue.close()


def test_asyncio_udp_echo_on_the_loop_thread():
    async def main():
        loop = asyncio.get_running_loop()
        loop_thread = threading.get_ident()
        threads = set()
        echoes: "asyncio.Queue[Tuple[bytes, Any]]" = asyncio.Queue()
        sent: "asyncio.Queue[int]" = asyncio.Queue()

        class Server:
            def udp_socket_did_receive(self, sock, data, address, context):
                threads.add(threading.get_ident())
                sock.send_to_address(data.upper(), address)

        class Client:
            def udp_socket_did_receive(self, sock, data, address, context):
                threads.add(threading.get_ident())
                echoes.put_nowait((data, address))

            def udp_socket_did_send(self, sock, tag):
                threads.add(threading.get_ident())
                sent.put_nowait(tag)

        server = socketkit.UdpSocket(Server(), queue=aio.queue())
        server.bind_to_port(0, "127.0.0.1")
        server.begin_receiving()
        client = socketkit.UdpSocket(Client(), queue=aio.queue())
        client.bind_to_port(0, "127.0.0.1")
        client.begin_receiving()
        for tag in range(10):
            client.send_to_address(b"ping %d" % tag, ("127.0.0.1", server.local_port), tag=tag)
        assert [await sent.get() for _ in range(10)] == list(range(10))
        replies = [await echoes.get() for _ in range(10)]
        assert [data for data, _ in replies] == [b"PING %d" % tag for tag in range(10)]
        assert all(address == ("127.0.0.1", server.local_port) for _, address in replies)
        assert threads == {loop_thread}
        client.release()
        server.release()
        aio.detach()

    asyncio.run(asyncio.wait_for(main(), 30))


def test_async_udp_socket():
    async def main():
        server = await aio.AsyncUdpSocket.bind("127.0.0.1", 0)
        client = await aio.AsyncUdpSocket.connect("127.0.0.1", server.local_address[1])
        assert client.socket.is_connected
        await client.send(b"")
        await client.send(b"hello")
        first = await server.receive()
        second = await server.receive()
        assert first[0] == b"" and second[0] == b"hello" and first[1] == client.local_address
        await server.send_to(b"back", second[1])
        assert await client.receive() == (b"back", server.local_address)
        with pytest.raises(socketkit.SystemCallError):
            await client.send(bytes(65508))  # EMSGSIZE fails that datagram only
        await client.send(b"still open")
        assert (await server.receive())[0] == b"still open"
        # Backpressure: past the limit receiving pauses; datagrams wait in the kernel.
        server.max_queued = 4
        for index in range(12):
            await client.send(b"%d" % index)
        assert [(await server.receive())[0] for _ in range(12)] == [b"%d" % index for index in range(12)]
        with pytest.raises(socketkit.ResolutionError):
            await server.send_to_host(b"x", "no-such-host.invalid", 9)
        await client.close()
        with pytest.raises(socketkit.ClosedError):
            await client.receive()
        await server.close()
        aio.detach()

    asyncio.run(asyncio.wait_for(main(), 30))
