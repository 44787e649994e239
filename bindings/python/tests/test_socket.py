# SPDX-License-Identifier: MIT
"""The Socket class over real loopback connections; the peer is Python's socket module."""
import errno
import gc
import os
import socket
import subprocess
import sys
import tempfile
import threading

import pytest

import socketkit
from conftest import WAIT, Recorder, descriptor_options, pattern, pump


def test_connect_write_read_with_a_stdlib_peer(raw_peer):
    pair = raw_peer()
    assert pair.recorder.events[0] == ("connect", "127.0.0.1", pair.port)
    assert pair.socket.is_connected and not pair.socket.is_disconnected
    assert pair.socket.connected_host == "127.0.0.1"
    assert pair.socket.connected_port == pair.port
    assert pair.socket.connected_address == ("127.0.0.1", pair.port)
    assert pair.socket.local_port == pair.peer.getpeername()[1]
    assert pair.socket.is_ipv4 and not pair.socket.is_ipv6 and not pair.socket.is_unix

    pair.socket.write(b"hello ", tag=1)
    pair.socket.write(bytearray(b"from "), tag=2)
    pair.socket.write(memoryview(b"socketkit"), tag=3)
    assert pair.receive_exactly(20) == b"hello from socketkit"
    assert [event[1] for event in pair.recorder.expect("write", 3)] == [1, 2, 3]

    pair.socket.read_to_data(socketkit.CRLF, tag=10)
    pair.socket.read_to_length(4, tag=11)
    pair.socket.read(tag=12)
    pair.peer.sendall(b"GET /\r\nbodyrest")
    reads = pair.recorder.expect("read", 3)
    assert reads == [("read", b"GET /\r\n", 10), ("read", b"body", 11), ("read", b"rest", 12)]


def test_every_read_variant_and_caller_buffers(raw_peer):
    pair = raw_peer()
    buffer = bytearray(b"\xee" * 32)
    view = memoryview(buffer)
    pair.socket.read_to_length_into(4, buffer, offset=2, tag=1)
    pair.socket.read_to_data_into(b"!", view, offset=10, tag=2)
    pair.socket.read_into(buffer, offset=20, max_length=3, tag=3)
    pair.socket.read(max_length=2, tag=4)
    pair.socket.read_to_data(socketkit.LF, max_length=16, tag=5)
    pair.peer.sendall(b"abcdhey!XYZ12line\n")
    reads = pair.recorder.expect("read", 5)
    assert [read[1:] for read in reads] == [(b"abcd", 1), (b"hey!", 2), (b"XYZ", 3), (b"12", 4), (b"line\n", 5)]
    assert buffer[2:6] == b"abcd" and buffer[10:14] == b"hey!" and buffer[20:23] == b"XYZ"
    assert buffer[:2] == b"\xee\xee" and buffer[6:10] == b"\xee" * 4 and buffer[23] == 0xEE


def test_read_to_data_into_honours_an_explicit_maximum_below_the_room(raw_peer):
    pair = raw_peer()
    buffer = bytearray(b"\xee" * 32)
    pair.socket.read_to_data_into(socketkit.LF, buffer, offset=2, max_length=5, tag=1)
    pair.peer.sendall(b"abc\n")
    assert [read[1:] for read in pair.recorder.expect("read")] == [(b"abc\n", 1)]
    assert buffer[2:6] == b"abc\n"
    # Five bytes without the separator end the read there, although 22 more would fit.
    pair.socket.read_to_data_into(socketkit.LF, buffer, offset=10, max_length=5, tag=2)
    pair.peer.sendall(b"0123456789\n")
    assert type(pair.recorder.disconnect_error()) is socketkit.ReadMaxedOutError
    assert pair.recorder.count("read") == 1
    assert buffer[10:15] == b"01234" and buffer[15] == 0xEE, "nothing is written past the maximum"


def test_reads_into_a_buffer_deliver_a_view_of_it(raw_peer):
    views = []
    pair = raw_peer()
    pair.recorder.on_read = lambda sock, data, tag: views.append(data)
    buffer = bytearray(8)
    pair.socket.read_to_length_into(5, buffer, offset=3)
    pair.peer.sendall(b"12345")
    pair.recorder.expect("read")
    assert isinstance(views[0], memoryview)
    assert views[0].obj is buffer and bytes(views[0]) == b"12345"


def test_invalid_arguments_raise_and_leave_the_connection_alone(raw_peer):
    pair = raw_peer()
    sock = pair.socket
    with pytest.raises(socketkit.BadParamError):
        sock.read_to_length(0)
    with pytest.raises(socketkit.BadParamError):
        sock.read_to_data(b"")
    with pytest.raises(socketkit.BadParamError):
        sock.read_to_data(b"\r\n", max_length=1)
    with pytest.raises(ValueError):  # BadParamError is a ValueError
        sock.read(max_length=-1)
    with pytest.raises(socketkit.BadParamError):
        sock.write(b"")
    with pytest.raises(socketkit.BadParamError):
        sock.read_into(b"read-only bytes")
    with pytest.raises(socketkit.BadParamError):
        sock.read_into(bytearray(4), offset=4)
    with pytest.raises(socketkit.BadParamError):
        sock.read_to_length_into(5, bytearray(4))
    with pytest.raises(socketkit.BadParamError):
        sock.read(timeout=float("nan"))
    with pytest.raises(socketkit.BadParamError):
        sock.connect_to_host("127.0.0.1", 70000)
    assert sock.is_connected


def test_calls_on_a_disconnected_socket_raise_bad_config(recorder):
    sock = socketkit.Socket(recorder)
    with pytest.raises(socketkit.BadConfigError):
        sock.read()
    with pytest.raises(socketkit.BadConfigError):
        sock.write(b"x")
    assert sock.is_disconnected
    assert sock.connected_host is None and sock.connected_port == 0 and sock.connected_address is None
    sock.close()


def test_a_closed_socket_raises_instead_of_crashing(recorder):
    sock = socketkit.Socket(recorder)
    sock.close()
    sock.close()  # idempotent
    for call in (lambda: sock.read(), lambda: sock.write(b"x"), lambda: sock.is_connected,
                 lambda: sock.connect_to_host("127.0.0.1", 1), lambda: sock.disconnect()):
        with pytest.raises(socketkit.InvalidHandleError):
            call()
    assert "closed" in repr(sock)


def test_context_manager_closes(raw_peer):
    pair = raw_peer()
    with pair.socket as sock:
        sock.write(b"bye")
    assert pair.receive_exactly(3) == b"bye"
    assert pair.receive_all() == b""


def test_dropping_the_last_reference_closes_the_connection():
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    recorder = Recorder()
    sock = socketkit.Socket(recorder)
    sock.connect_to_host("127.0.0.1", listener.getsockname()[1], timeout=5)
    listener.settimeout(WAIT)
    peer, _ = listener.accept()
    recorder.expect("connect")
    del sock
    gc.collect()
    peer.settimeout(WAIT)
    assert peer.recv(10) == b""
    peer.close()
    listener.close()


def test_connection_refused_is_a_connection_refused_error(recorder):
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    sock = socketkit.Socket(recorder)
    sock.connect_to_host("127.0.0.1", port, timeout=5)
    error = recorder.disconnect_error()
    assert isinstance(error, socketkit.ConnectionRefusedError)
    assert isinstance(error, ConnectionRefusedError)  # the built-in too
    assert isinstance(error, socketkit.SystemCallError)
    assert error.errno == errno.ECONNREFUSED and error.code == -9
    assert recorder.events == [("disconnect", error)]
    sock.close()


def test_a_name_that_does_not_resolve_is_a_resolution_error(recorder):
    sock = socketkit.Socket(recorder)
    sock.connect_to_host("no-such-host.invalid", 80, timeout=15)
    error = recorder.disconnect_error()
    assert isinstance(error, socketkit.ResolutionError) and error.errno != 0
    with pytest.raises(socketkit.ResolutionError):
        socketkit.lookup_host("no-such-host.invalid", 1)
    sock.close()


def test_a_port_in_use_raises_at_once(recorder):
    first = socketkit.Socket(recorder)
    first.accept_on_interface("127.0.0.1", 0)
    second = socketkit.Socket(recorder)
    with pytest.raises(socketkit.SystemCallError) as raised:
        second.accept_on_interface("127.0.0.1", first.local_port)
    assert raised.value.errno == errno.EADDRINUSE
    assert isinstance(raised.value, OSError)
    with pytest.raises(socketkit.BadParamError):
        second.accept_on_interface("no-such-if0", 0)
    first.close()
    second.close()


def test_timeouts_ask_the_delegate_then_disconnect(raw_peer):
    pair = raw_peer()
    pair.recorder.read_extensions = [0.1]
    pair.socket.read_to_length(10, timeout=0.1, tag=7)
    pair.peer.sendall(b"abc")
    error = pair.recorder.disconnect_error()
    assert isinstance(error, socketkit.ReadTimeoutError) and isinstance(error, TimeoutError)
    asked = pair.recorder.expect("read_timeout", 2)
    assert asked[0][1] == 7 and abs(asked[0][2] - 0.1) < 1e-9 and abs(asked[1][2] - 0.2) < 1e-9
    assert asked[1][3] == 3


def test_eof_mid_read_is_a_closed_error(raw_peer):
    pair = raw_peer()
    pair.peer.sendall(b"one\ntw")
    pair.peer.shutdown(socket.SHUT_WR)
    pair.socket.read_to_data(socketkit.LF, tag=1)
    pair.socket.read_to_data(socketkit.LF, tag=2)
    error = pair.recorder.disconnect_error()
    assert isinstance(error, socketkit.ClosedError) and isinstance(error, ConnectionError)
    assert pair.recorder.expect("read") == [("read", b"one\n", 1)]


def test_disconnect_after_writing_delivers_everything(raw_peer):
    pair = raw_peer()
    payload = pattern(4 * 1024 * 1024, seed=9)
    for offset in range(0, len(payload), 100_000):
        pair.socket.write(payload[offset:offset + 100_000])
    pair.socket.disconnect_after_writing()
    with pytest.raises(socketkit.BadConfigError):
        pair.socket.write(b"late")
    assert pair.receive_all() == payload
    assert pair.recorder.disconnect_error() is None


def test_progress_queued_bytes_and_watermarks(raw_peer):
    pair = raw_peer()
    assert pair.socket.read_progress is None and pair.socket.write_progress is None
    pair.socket.read_to_length(100, tag=42)
    pair.peer.sendall(b"0123456789")
    pair.recorder.expect("read_partial")
    assert pair.socket.read_progress == socketkit.Progress(tag=42, done=10, total=100)
    pair.socket.write_watermarks = (64 * 1024, 1024 * 1024)
    assert pair.socket.write_watermarks == (64 * 1024, 1024 * 1024)
    chunk = bytes(256 * 1024)
    written = 0
    while not pair.recorder.count("high_watermark") and written < 200 * len(chunk):
        pair.socket.write(chunk)
        written += len(chunk)
        pair.recorder.wait_for(lambda events: any(e[0] == "high_watermark" for e in events), timeout=0.005)
    pair.recorder.expect("high_watermark")
    assert pair.socket.queued_write_bytes > 0
    progress = pair.socket.write_progress
    assert progress is not None and progress.total == len(chunk)
    assert len(pair.receive_exactly(written)) == written
    pair.recorder.expect("low_watermark")
    pair.recorder.wait_for(lambda events: sum(1 for e in events if e[0] == "write") * len(chunk) >= written)
    assert pair.socket.queued_write_bytes == 0


def test_half_close_keeps_writing_open(raw_peer):
    def half_duplex(sock):
        sock.auto_disconnect_on_closed_read_stream = False

    pair = raw_peer(configure=half_duplex)
    assert pair.socket.auto_disconnect_on_closed_read_stream is False
    pair.peer.shutdown(socket.SHUT_WR)
    pair.socket.read()
    pair.recorder.expect("close_read_stream")
    pair.socket.write(b"still here")
    assert pair.receive_exactly(10) == b"still here"


def test_options_reach_the_descriptor(raw_peer):
    """Set before connecting: applied on connect; changed while connected: at once (read
    back from the descriptor on the loop thread, not from the getters)."""
    def configure(sock: socketkit.Socket) -> None:
        sock.no_delay = True
        sock.keep_alive = socketkit.KeepAlive(idle=30, interval=5, count=3)
    pair = raw_peer(configure=configure)
    tcp = socket.IPPROTO_TCP
    no_delay = ("primary", tcp, socket.TCP_NODELAY)
    keep_alive = [("primary", socket.SOL_SOCKET, socket.SO_KEEPALIVE), ("primary", tcp, socket.TCP_KEEPIDLE),
                  ("primary", tcp, socket.TCP_KEEPINTVL), ("primary", tcp, socket.TCP_KEEPCNT)]
    assert descriptor_options(pair.socket, no_delay, *keep_alive) == [1, 1, 30, 5, 3]
    pair.socket.no_delay = False
    pair.socket.keep_alive = socketkit.KeepAlive(idle=77, interval=7, count=2)
    assert descriptor_options(pair.socket, no_delay, *keep_alive) == [0, 1, 77, 7, 2]
    pair.socket.keep_alive = None
    assert descriptor_options(pair.socket, keep_alive[0]) == [0]


def test_configuration_round_trips(recorder):
    sock = socketkit.Socket(recorder)
    assert sock.ipv4_enabled and sock.ipv6_enabled and sock.ipv4_preferred_over_ipv6
    sock.ipv6_enabled = False
    sock.ipv4_preferred_over_ipv6 = False
    assert not sock.ipv6_enabled and not sock.ipv4_preferred_over_ipv6
    sock.alternate_address_delay = 0.25
    assert sock.alternate_address_delay == 0.25
    sock.maximum_read_length = 1000
    assert sock.maximum_read_length == 1000
    sock.no_delay = True
    assert sock.no_delay
    assert sock.keep_alive is None
    sock.keep_alive = socketkit.KeepAlive(idle=30, interval=5, count=3)
    assert sock.keep_alive == socketkit.KeepAlive(30, 5, 3)
    with pytest.raises(socketkit.BadParamError):
        sock.keep_alive = socketkit.KeepAlive(idle=0)
    sock.keep_alive = None
    assert sock.keep_alive is None
    sock.buffer_sizes = (65536, 32768)
    assert sock.buffer_sizes == (65536, 32768)
    with pytest.raises(socketkit.BadParamError):
        sock.buffer_sizes = (-1, 0)
    with pytest.raises(socketkit.BadParamError):
        sock.write_watermarks = (10, 5)
    sock.ipv4_enabled = False
    with pytest.raises(socketkit.BadConfigError):
        sock.connect_to_host("localhost", 1)
    sock.close()


@pytest.mark.parametrize("no_delay", [None, False, True])
def test_no_delay_and_its_default_reach_the_descriptor(raw_peer, no_delay):
    """no_delay (None: the default, on, as asyncio sets it) reaches the descriptor, set
    from the loop thread."""
    seen = []
    done = threading.Event()

    def check(descriptors):
        probe = socket.socket(fileno=os.dup(descriptors.primary))
        seen.append(probe.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
        seen.append(threading.current_thread() is not threading.main_thread())
        probe.close()
        done.set()

    configure = None if no_delay is None else (lambda sock: setattr(sock, "no_delay", no_delay))
    pair = raw_peer(configure=configure)
    expected = no_delay is not False
    assert pair.socket.no_delay is expected
    pair.socket.perform(check)
    assert done.wait(WAIT)
    assert seen == [int(expected), True]


def test_listener_accepts_and_accepted_sockets_inherit_the_delegate(recorder):
    def serve(listener, connection):
        connection.read_to_data(socketkit.LF)

    recorder.on_accept = serve
    recorder.on_read = lambda sock, data, tag: sock.write(bytes(data).upper())
    listener = socketkit.Socket(recorder)
    listener.accept_on_port(0)
    assert listener.is_accepting and listener.is_ipv4 and listener.is_ipv6
    for family, host in ((socket.AF_INET, "127.0.0.1"), (socket.AF_INET6, "::1")):
        client = socket.socket(family)
        client.settimeout(WAIT)
        client.connect((host, listener.local_port))
        client.sendall(b"shout\n")
        assert client.recv(16) == b"SHOUT\n"
        # Before the client closes: its close ends the accepted connection at once.
        assert recorder.accepted[-1].is_ipv6 == (family == socket.AF_INET6)
        client.close()
    assert len(recorder.accepted) == 2
    listener.close()
    for connection in recorder.accepted:
        connection.close()


def test_an_accepted_socket_nobody_keeps_is_closed():
    class Forgetful:
        def socket_did_accept(self, listener, new_socket):
            pass  # not kept

    forgetful = Forgetful()
    listener = socketkit.Socket(forgetful)
    listener.accept_on_interface("127.0.0.1", 0)
    client = socket.create_connection(("127.0.0.1", listener.local_port), timeout=WAIT)
    assert client.recv(10) == b""
    client.close()
    listener.close()


def test_ipv6_and_raw_addresses(recorder):
    listener = socketkit.Socket(Recorder())
    listener.accept_on_interface("::1", 0)
    assert listener.local_address == ("::1", listener.local_port)
    sock = socketkit.Socket(recorder)
    sock.connect_to_address(("::1", listener.local_port), timeout=5)
    assert recorder.expect("connect")[0] == ("connect", "::1", listener.local_port)
    assert sock.is_ipv6
    sock.close()
    listener.close()


def test_a_host_with_no_address_of_an_enabled_family_is_other_error(recorder):
    """As upstream ("IPv4 has been disabled and DNS lookup found no IPv6 address")."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    sock = socketkit.Socket(recorder)
    sock.ipv4_enabled = False
    sock.connect_to_host("127.0.0.1", listener.getsockname()[1], timeout=5)
    error = recorder.disconnect_error()
    assert type(error) is socketkit.OtherError and error.code == socketkit.errors.OTHER
    assert error.errno == 0 and error.message
    assert recorder.events == [("disconnect", error)] and sock.is_disconnected
    sock.close()
    listener.close()


def test_connect_to_an_address_via_an_interface(recorder):
    """127.0.0.2 is on lo, but is not the address the kernel picks on its own."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    listener.settimeout(WAIT)
    sock = socketkit.Socket(recorder)
    sock.connect_to_address(listener.getsockname(), interface="127.0.0.2", timeout=5)
    server, peer_address = listener.accept()
    recorder.expect("connect")
    assert peer_address == ("127.0.0.2", sock.local_port)
    assert sock.local_host == "127.0.0.2"
    sock.close()
    server.close()
    # An interface without an address of the target's family ends the attempt.
    mismatched_log = Recorder()
    mismatched = socketkit.Socket(mismatched_log)
    mismatched.connect_to_address(("::1", listener.getsockname()[1]), interface="127.0.0.2", timeout=5)
    assert type(mismatched_log.disconnect_error()) is socketkit.BadParamError
    with pytest.raises(socketkit.BadParamError):
        mismatched.connect_to_address(listener.getsockname(), interface="no-such-if0")
    mismatched.close()
    listener.close()


def test_unix_domain_sockets(recorder):
    path = tempfile.mktemp(prefix="sk-py-", suffix=".sock", dir="/tmp")
    server = Recorder()
    server.on_accept = lambda listener, connection: connection.read_to_length(5)
    server.on_read = lambda sock, data, tag: sock.write(data)
    listener = socketkit.Socket(server)
    listener.accept_on_unix_path(path)
    assert listener.is_unix and os.path.exists(path)
    sock = socketkit.Socket(recorder)
    sock.connect_to_unix_path(path, timeout=5)
    assert recorder.expect("connect")[0] == ("connect", path, 0)
    assert sock.connected_unix_path == path and sock.connected_address == path
    sock.write(b"hello")
    sock.read_to_length(5)
    assert recorder.expect_bytes(5) == b"hello"
    # Upstream's socketFD is -1 for Unix-domain sockets; here `unix` and `primary` hold it.
    for each in (listener, sock, server.accepted[0]):
        seen = []
        done = threading.Event()
        each.perform(lambda descriptors: (seen.append(descriptors), done.set()))
        assert done.wait(WAIT)
        found = seen[0]
        assert found.unix >= 0 and found.primary == found.unix and found.ipv4 == found.ipv6 == -1, found
        with socket.socket(fileno=os.dup(found.unix)) as probe:
            assert probe.family == socket.AF_UNIX
    sock.close()
    listener.disconnect()
    # The listener's and the accepted connection's (its client's close: reported at once).
    server.expect("disconnect", 2)
    assert not os.path.exists(path)
    listener.close()
    for connection in server.accepted:
        connection.close()


def test_adopting_a_connected_descriptor(recorder):
    left, right = socket.socketpair()
    sock = socketkit.Socket.from_fd(left.detach(), recorder)
    recorder.expect("connect")
    assert sock.is_connected and sock.is_unix
    sock.write(b"abc")
    right.settimeout(WAIT)
    assert right.recv(3) == b"abc"
    unconnected = socket.socket()
    with pytest.raises(socketkit.SystemCallError) as raised:
        socketkit.Socket.from_fd(unconnected.fileno(), Recorder())
    assert raised.value.errno == errno.ENOTCONN
    assert unconnected.getsockopt(socket.SOL_SOCKET, socket.SO_TYPE) == socket.SOCK_STREAM, "the caller keeps it"
    unconnected.close()
    with pytest.raises(socketkit.SystemCallError) as raised:
        socketkit.Socket.from_fd(1000000, Recorder())  # no such descriptor
    assert raised.value.errno == errno.EBADF
    sock.close()
    right.close()


def test_connect_and_accept_without_a_delegate_are_bad_config(raw_peer, tmp_path):
    """As in C and Swift: no delegate, no connection (its events would go nowhere)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    port = listener.getsockname()[1]
    sock = socketkit.Socket(None)
    attempts = [lambda: sock.connect_to_host("127.0.0.1", port, timeout=5),
                lambda: sock.connect_to_address(("127.0.0.1", port), timeout=5),
                lambda: sock.connect_to_unix_path(str(tmp_path / "none.sock"), timeout=5),
                lambda: sock.accept_on_port(0),
                lambda: sock.accept_on_interface("127.0.0.1", 0),
                lambda: sock.accept_on_unix_path(str(tmp_path / "listener.sock"))]
    for attempt in attempts:
        with pytest.raises(socketkit.BadConfigError, match="delegate"):
            attempt()
        assert sock.is_disconnected
    # A delegate set later makes it usable; taking it away again makes it refuse again.
    recorder = Recorder()
    sock.delegate = recorder
    sock.connect_to_host("127.0.0.1", port, timeout=5)
    listener.settimeout(WAIT)
    peer, _ = listener.accept()
    assert recorder.expect("connect")[0][1:] == ("127.0.0.1", port)
    sock.disconnect()
    recorder.expect("disconnect")
    sock.delegate = None
    with pytest.raises(socketkit.BadConfigError):
        sock.connect_to_host("127.0.0.1", port, timeout=5)
    # Adopting a connected descriptor needs no delegate (it reports nothing but its end).
    left, right = socket.socketpair()
    adopted = socketkit.Socket.from_fd(left.detach(), None)
    assert adopted.is_connected and adopted.is_unix
    for item in (adopted, sock, peer, right, listener):
        item.close()


def test_lookup_host():
    assert socketkit.lookup_host("localhost", 80) == [("127.0.0.1", 80), ("::1", 80)]
    assert socketkit.lookup_host("::1", 5) == [("::1", 5)]


@pytest.mark.parametrize("name", ["no-such-host.invalid", "INVALID", "a.b.Invalid."])
def test_names_under_invalid_fail_at_once(name):
    """RFC 6761: names under .invalid never resolve, and the nameserver is not asked (with
    none reachable it would answer EAI_AGAIN, after its retries)."""
    with pytest.raises(socket.gaierror) as raised:
        socketkit.lookup_host(name, 80)
    assert raised.value.errno == socket.EAI_NONAME
    assert "RFC 6761" in str(raised.value)


@pytest.mark.parametrize("port", [0, 127, 128, 443, 8080, 32768, 65535])
@pytest.mark.parametrize("host", ["127.0.0.1", "192.0.2.1", "255.255.255.255", "fd00::2", "ff02::fb", "::1"])
def test_lookup_host_gives_every_port_and_address_back(host, port):
    """Bytes of 128 and more (443 is 0x01BB, 192.0.2.1 starts with 0xC0) come back as
    they went in, not as a ValueError about signed bytes."""
    assert socketkit.lookup_host(host, port) == [(host, port)]
    assert socketkit.lookup_host("localhost", port) == [("127.0.0.1", port), ("::1", port)]


# Loopback addresses with bytes of 128 and more: all of 127/8 is loopback on Linux.
HIGH_SERVER, HIGH_CLIENT = "127.200.128.254", "127.129.250.201"


def test_addresses_with_high_bytes_survive_every_conversion(recorder):
    """Connected, local and listener addresses whose bytes are 128 or more read back as
    the kernel has them, through the C getters and the sockaddr decoding."""
    listener = socketkit.Socket(recorder)
    listener.accept_on_interface(HIGH_SERVER, 0)
    port = listener.local_port
    assert listener.local_address == (HIGH_SERVER, port)
    client = socket.socket()
    client.settimeout(WAIT)
    client.bind((HIGH_CLIENT, 0))
    client.connect((HIGH_SERVER, port))
    recorder.expect("accept")
    accepted = recorder.accepted[0]
    assert accepted.connected_address == client.getsockname()
    assert (accepted.connected_host, accepted.connected_port) == client.getsockname()
    assert accepted.local_address == (HIGH_SERVER, port) == (accepted.local_host, accepted.local_port)
    peer = Recorder()
    outgoing = socketkit.Socket(peer)
    outgoing.connect_to_address((HIGH_SERVER, port), interface=HIGH_CLIENT, timeout=WAIT)
    assert peer.expect("connect")[0][1:] == (HIGH_SERVER, port)
    assert outgoing.connected_address == (HIGH_SERVER, port)
    assert outgoing.local_host == HIGH_CLIENT
    for sock in [outgoing, listener, *recorder.accepted]:
        sock.close()
    client.close()


def test_exceptions_in_delegate_methods_go_to_the_unraisable_hook(raw_peer, monkeypatch):
    reported = []
    caught = threading.Event()

    def hook(unraisable):
        reported.append(unraisable)
        caught.set()

    monkeypatch.setattr(sys, "unraisablehook", hook)
    pair = raw_peer()

    def explode(sock, data, tag):
        raise RuntimeError("boom")

    pair.recorder.on_read = explode
    pair.socket.read()
    pair.peer.sendall(b"x")
    assert caught.wait(WAIT)
    assert isinstance(reported[0].exc_value, RuntimeError)
    assert "socket_did_read" in reported[0].err_msg
    # The socket carries on.
    pair.recorder.on_read = None
    pair.socket.read()
    pair.peer.sendall(b"y")
    pair.recorder.expect("read", 2)


def test_delegate_changes_take_effect_synchronously(raw_peer):
    pair = raw_peer()
    replacement = Recorder()
    pair.socket.delegate = replacement
    assert pair.socket.delegate is replacement
    pair.socket.read_to_length(2)
    pair.peer.sendall(b"ok")
    assert replacement.expect("read") == [("read", b"ok", 0)]
    assert pair.recorder.count("read") == 0
    pair.socket.delegate = None
    pair.socket.read()
    pair.peer.sendall(b"z")
    pair.socket.disconnect_after_reading()
    assert pair.receive_all() == b""


def test_queues_serial_host_and_event_loop(raw_peer):
    host = socketkit.HostQueue()
    pair = raw_peer()
    pair.socket.queue = host
    assert pair.socket.queue is host
    pair.socket.read_to_length(3)
    pair.peer.sendall(b"abc")
    import select
    assert select.select([host.fileno()], [], [], WAIT)[0]
    assert pair.recorder.count("read") == 0
    assert host.drain() == 1
    assert pair.recorder.events[-1] == ("read", b"abc", 0)
    assert threading.get_ident() in pair.recorder.threads
    assert not select.select([host.fileno()], [], [], 0)[0]

    pair.socket.queue = None  # SocketKit's loop thread
    pair.socket.read_to_length(1)
    pair.peer.sendall(b"d")
    pair.recorder.expect("read", 2)

    serial = socketkit.SerialQueue("py-test")
    pair.socket.queue = serial
    pair.socket.read_to_length(1)
    pair.peer.sendall(b"e")
    pair.recorder.expect("read", 3)
    assert pair.recorder.overlaps == 0
    serial.close()
    host.close()


def test_a_host_queue_hands_over_batches_in_order_and_answers_timeouts(raw_peer):
    """HostQueue.drain moves events in batches (sk_callback_queue_poll_events): 300 reads that
    complete at once arrive in order with their bytes (each batch's memory lives until the
    next poll), and timeout questions are answered through the records."""
    import select
    host = socketkit.HostQueue()
    pair = raw_peer()
    pair.socket.queue = host

    def drain_until(predicate):
        while not pair.recorder.wait_for(predicate, timeout=0):
            assert select.select([host.fileno()], [], [], WAIT)[0], f"nothing arrived; have {pair.recorder.events}"
            handled = host.drain()
            assert 0 <= handled

    for tag in range(300):
        pair.socket.read_to_length(1, tag=tag)
    payload = pattern(300, seed=5)
    pair.peer.sendall(payload)
    drain_until(lambda events: sum(1 for e in events if e[0] == "read") == 300)
    reads = [event for event in pair.recorder.events if event[0] == "read"]
    assert [event[2] for event in reads] == list(range(300))
    assert b"".join(event[1] for event in reads) == payload

    pair.recorder.read_extensions = [0.1]
    pair.socket.read_to_length(5, timeout=0.1, tag=9)
    drain_until(lambda events: events[-1][0] == "disconnect")
    timeouts = [event for event in pair.recorder.events if event[0] == "read_timeout"]
    assert [(tag, round(elapsed, 3)) for _, tag, elapsed, _ in timeouts] == [(9, 0.1), (9, 0.2)]
    assert isinstance(pair.recorder.events[-1][1], socketkit.ReadTimeoutError)
    assert pair.recorder.overlaps == 0 and pair.recorder.after_disconnect == 0
    assert threading.get_ident() in pair.recorder.threads
    host.close()


def test_one_drainer_at_a_time_an_empty_drain_and_a_closed_queue(raw_peer):
    """drain() of an empty queue returns 0 and leaves nothing pending; drain() from a delegate
    method that a drain runs returns 0 (one drainer at a time) and the outer drain goes on to
    the next event; and the queue drains normally afterwards (the one-drainer token is given
    back). A closed queue's drain raises InvalidHandleError."""
    import select
    host = socketkit.HostQueue()
    assert host.drain() == 0
    assert not select.select([host.fileno()], [], [], 0)[0]
    pair = raw_peer()
    pair.socket.queue = host
    nested = []
    pair.recorder.on_read = lambda sock, data, tag: nested.append(host.drain())
    pair.socket.read_to_length(1, tag=1)
    pair.socket.read_to_length(1, tag=2)
    pair.peer.sendall(b"ab")
    pump(host, lambda: pair.recorder.count("read") == 2)
    assert nested == [0, 0]
    assert [event for event in pair.recorder.events if event[0] == "read"] == [("read", b"a", 1), ("read", b"b", 2)]
    pair.recorder.on_read = None
    pair.socket.read_to_length(1, tag=3)
    pair.peer.sendall(b"c")
    pump(host, lambda: pair.recorder.count("read") == 3)
    assert pair.recorder.events[-1] == ("read", b"c", 3)
    assert host.drain() == 0
    pair.socket.queue = None
    host.close()
    for _ in range(2):  # the failure gave the token back: it raises again, not "busy" (0)
        with pytest.raises(socketkit.InvalidHandleError):
            host.drain()


def test_loop_groups(recorder):
    with socketkit.LoopGroup(2) as group:
        assert group.loop_count == 2
        sock = socketkit.Socket(recorder, loop_group=group)
        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        sock.connect_to_host("127.0.0.1", listener.getsockname()[1], timeout=5)
        recorder.expect("connect")
    # Closing the group ends its sockets' connections.
    assert isinstance(recorder.disconnect_error(), socketkit.BadConfigError)
    sock.close()
    listener.close()
    with pytest.raises(socketkit.BadParamError):
        socketkit.LoopGroup(0)


def test_default_group_follows_the_cpu_affinity_mask():
    # Under `taskset -c N` the default group has one loop, not one per online CPU (a
    # benchmark server pinned to one core used to get two loop threads fighting for it).
    cpus = sorted(os.sched_getaffinity(0))
    code = ("import os, sys; os.sched_setaffinity(0, {%d}); import socketkit; "
            "sys.stdout.write(str(socketkit.LoopGroup.default_loop_count()))" % cpus[0])
    pinned = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert pinned.returncode == 0, pinned.stderr
    assert pinned.stdout == "1"
    assert socketkit.LoopGroup.default_loop_count() == len(cpus)


def test_many_sockets_from_many_threads(recorder):
    listener_recorder = Recorder()
    listener_recorder.on_accept = lambda listener, connection: connection.read()

    def echo(sock, data, tag):
        try:
            sock.write(bytes(data))
            sock.read()
        except socketkit.InvalidHandleError:
            pass  # closed below while this callback ran: its client already had every byte
        except socketkit.BadConfigError:
            pass  # the client closed: the session ended on the loop while this ran on the queue

    listener_recorder.on_read = echo
    listener = socketkit.Socket(listener_recorder)
    listener.accept_on_interface("127.0.0.1", 0)
    errors = []

    def client(index):
        try:
            with socket.create_connection(("127.0.0.1", listener.local_port), timeout=WAIT) as conn:
                payload = pattern(50_000, seed=index)
                conn.sendall(payload)
                received = b""
                while len(received) < len(payload):
                    received += conn.recv(65536)
                assert received == payload
        except BaseException as error:  # noqa: BLE001 - reported below
            errors.append(error)

    threads = [threading.Thread(target=client, args=(index,)) for index in range(20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WAIT)
    assert errors == []
    listener.close()
    for connection in listener_recorder.accepted:
        connection.close()


def test_a_handle_released_inside_its_own_callback_is_refused_afterwards():
    """The engine's C API takes a call made from inside a socket's own callback past its
    handle table (the socket is known to be alive there); a handle released inside that
    callback must still be refused by every call after the release."""
    from socketkit._ffi import lib
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    listener.settimeout(WAIT)
    outcome = {}
    done = threading.Event()

    class ReleasesItself:
        def socket_did_read(self, sock, data, tag):
            handle = sock.handle
            outcome["before"] = lib.sk_socket_write(handle, b"echo:" + bytes(data), 5 + len(data), -1.0, 0, None)
            sock.close()  # queued writes still go out; the handle is released
            outcome["write"] = lib.sk_socket_write(handle, b"late", 4, -1.0, 0, None)
            outcome["read"] = lib.sk_socket_read(handle, 0, -1.0, 1, None)
            outcome["release"] = lib.sk_socket_release(handle)
            done.set()

    sock = socketkit.Socket(ReleasesItself(), queue=None)  # on the loop thread, through the C delegate
    sock.connect_to_host("127.0.0.1", listener.getsockname()[1], timeout=10)
    peer, _ = listener.accept()
    peer.settimeout(WAIT)
    sock.read()
    peer.sendall(b"hi")
    assert done.wait(WAIT)
    assert outcome == {"before": 0, "write": -11, "read": -11, "release": -11}
    received = b""
    while True:
        chunk = peer.recv(64)
        if not chunk:
            break
        received += chunk
    assert received == b"echo:hi"
    peer.close()
    listener.close()

