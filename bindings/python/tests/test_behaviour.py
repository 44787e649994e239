# SPDX-License-Identifier: MIT
"""More of the contract through Python: timeouts of every kind, maximum lengths, partial
progress, queueing before the connection, callback order, inline callbacks, the loop hook
and descriptor exhaustion."""
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading

import pytest

import socketkit
from conftest import WAIT, Recorder, pattern


def test_connect_timeout_when_the_peer_never_answers(recorder):
    blackhole = socket.socket()
    blackhole.bind(("127.0.0.1", 0))
    blackhole.listen(0)
    port = blackhole.getsockname()[1]
    fillers = []
    for _ in range(4):
        filler = socket.socket()
        filler.setblocking(False)
        filler.connect_ex(("127.0.0.1", port))
        fillers.append(filler)
    sock = socketkit.Socket(recorder)
    sock.connect_to_host("127.0.0.1", port, timeout=0.3)
    error = recorder.disconnect_error()
    assert isinstance(error, socketkit.ConnectTimeoutError) and isinstance(error, TimeoutError)
    sock.close()
    for filler in fillers:
        filler.close()
    blackhole.close()


def test_a_zero_connect_timeout_fails_unless_the_connect_completes_at_once():
    """timeout=0: connected by the time the loop next polls, or ConnectTimeoutError."""
    # A name is resolved off the loop: the timeout comes first, never the resolver's answer.
    resolving = Recorder()
    unresolved = socketkit.Socket(resolving)
    unresolved.connect_to_host("no-such-host.invalid", 80, timeout=0)
    error = resolving.disconnect_error()
    assert type(error) is socketkit.ConnectTimeoutError and resolving.events == [("disconnect", error)]
    unresolved.close()
    # A Unix-domain connect completes in connect(2) itself; also when started from a
    # callback on the loop thread, whose iteration has already polled.
    path = tempfile.mktemp(prefix="sk-py-zero-", suffix=".sock", dir="/tmp")
    listener = socketkit.Socket(Recorder())
    listener.accept_on_unix_path(path)
    client_log = Recorder()
    client = socketkit.Socket(client_log)
    client.connect_to_unix_path(path, timeout=0)
    assert client_log.expect("connect")[0] == ("connect", path, 0)
    assert client_log.count("disconnect") == 0
    client.close()
    with socketkit.LoopGroup(1) as group:
        inner_log, trigger_log = Recorder(), Recorder()
        inner = socketkit.Socket(inner_log, queue=None, loop_group=group)
        trigger = socketkit.Socket(trigger_log, queue=None, loop_group=group)
        trigger_log.socket_did_connect = lambda sock, host, port: inner.connect_to_unix_path(path, timeout=0)
        raw = socket.socket()
        raw.bind(("127.0.0.1", 0))
        raw.listen(1)
        trigger.connect_to_host("127.0.0.1", raw.getsockname()[1], timeout=5)
        assert inner_log.expect("connect")[0] == ("connect", path, 0)
        assert inner_log.count("disconnect") == 0
        inner.close()
        trigger.close()
        raw.close()
    listener.close()


def test_write_timeout_against_a_peer_that_never_reads(raw_peer):
    pair = raw_peer()
    pair.socket.write(bytes(64 * 1024 * 1024), timeout=0.3, tag=9)
    error = pair.recorder.disconnect_error()
    assert isinstance(error, socketkit.WriteTimeoutError)
    asked = pair.recorder.expect("write_timeout")
    assert asked[0][1] == 9 and asked[0][3] > 0
    assert pair.recorder.count("write_partial") >= 1


def test_a_separator_past_the_maximum_is_read_maxed_out(raw_peer):
    pair = raw_peer()
    pair.socket.read_to_data(socketkit.CRLF, max_length=8)
    pair.peer.sendall(b"123456789\r\n")
    assert isinstance(pair.recorder.disconnect_error(), socketkit.ReadMaxedOutError)


def test_the_maximum_read_length_caps_reads_to_a_length_and_is_never_zero(raw_peer):
    """read_to_length above maximum_read_length is refused (a length from the peer is an
    allocation the peer controls); at the limit it is taken, and a read into the caller's
    buffer is bounded by the buffer alone. A maximum of 0 is refused: it used to become 1,
    and every separator read then failed after one byte."""
    pair = raw_peer()
    pair.socket.maximum_read_length = 100
    with pytest.raises(socketkit.BadParamError, match="maximumReadLength"):
        pair.socket.read_to_length(101)
    for bad in (0, -1):
        with pytest.raises(socketkit.BadParamError):
            pair.socket.maximum_read_length = bad
    assert pair.socket.maximum_read_length == 100
    pair.socket.read_to_length(100, tag=1)
    room = bytearray(150)
    pair.socket.read_to_length_into(150, room, tag=2)
    pair.socket.read_to_data(socketkit.LF, tag=3)
    payload = pattern(250, seed=3).replace(b"\n", b"n") + b"123456789\n"
    pair.peer.sendall(payload)
    reads = pair.recorder.expect("read", 3)
    assert [(len(event[1]), event[2]) for event in reads] == [(100, 1), (150, 2), (10, 3)]
    assert bytes(room) == payload[100:250] and reads[2][1] == b"123456789\n"
    assert pair.socket.is_connected


def test_infinite_timeouts_and_extensions_never_expire(raw_peer):
    """math.inf is no timeout, as a negative one (sys.float_info.max, beyond the clock, the
    same); an extension of math.inf keeps the read for good (it used to end the connection
    with ReadTimeoutError). NaN is refused."""
    import math
    pair = raw_peer()
    with pytest.raises(socketkit.BadParamError):
        pair.socket.read_to_length(1, timeout=math.nan)
    with pytest.raises(socketkit.BadParamError):
        pair.socket.write(b"x", timeout=math.nan)
    pair.socket.read_to_length(2, timeout=math.inf, tag=1)
    pair.socket.read_to_length(2, timeout=sys.float_info.max, tag=2)
    pair.socket.write(b"ok", timeout=math.inf, tag=3)
    pair.peer.sendall(b"wxyz")
    assert pair.receive_exactly(2) == b"ok"
    pair.recorder.expect("read", 2)
    pair.recorder.read_extensions.append(math.inf)
    pair.socket.read_to_length(3, timeout=0.05, tag=4)
    assert pair.recorder.expect("read_timeout")[0][1:3] == (4, 0.05)
    assert not pair.recorder.wait_for(lambda events: any(event[0] == "disconnect" for event in events), timeout=0.2)
    pair.peer.sendall(b"end")
    assert pair.recorder.expect("read", 3)[2][1:] == (b"end", 4)
    assert pair.socket.is_connected


def test_large_bytes_arrive_intact_and_lent_ones_are_released(raw_peer):
    """Large bytes objects: lent to SocketKit by the C extension's write (default arguments),
    copied otherwise. Either way they arrive intact, and SocketKit keeps no reference once
    done with them."""
    import sys
    pair = raw_peer()
    payload = pattern(3 * 1024 * 1024, seed=4)
    unlent = sys.getrefcount(payload)
    pair.socket.write(payload, tag=1)
    pair.socket.write(bytearray(payload[:1000]), tag=2)
    pair.socket.write(payload)  # the C extension's path (default arguments)
    assert pair.receive_exactly(2 * len(payload) + 1000) == payload + payload[:1000] + payload
    assert [event[1] for event in pair.recorder.expect("write", 3)] == [1, 2, 0]
    assert pair.recorder.wait_for(lambda events: sys.getrefcount(payload) == unlent), "the lent bytes are released"


def test_reads_and_writes_queued_before_the_connection_and_callback_order(recorder):
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    sock = socketkit.Socket(recorder)
    sock.connect_to_host("127.0.0.1", listener.getsockname()[1], timeout=5)
    for tag in range(3):
        sock.write(f"request {tag}\n".encode(), tag=100 + tag)
        sock.read_to_data(socketkit.LF, tag=tag)
    listener.settimeout(WAIT)
    peer, _ = listener.accept()
    peer.settimeout(WAIT)
    received = b""
    while len(received) < 30:
        received += peer.recv(64)
    assert received == b"request 0\nrequest 1\nrequest 2\n"
    peer.sendall(b"reply 0\nreply 1\nreply 2\n")
    recorder.expect("read", 3)
    sock.disconnect_after_reading_and_writing()
    assert recorder.disconnect_error() is None
    kinds = [event[0] for event in recorder.events]
    assert kinds[0] == "connect" and kinds[-1] == "disconnect"
    assert [event[1] for event in recorder.events if event[0] == "write"] == [100, 101, 102]
    assert [event[2] for event in recorder.events if event[0] == "read"] == [0, 1, 2]
    assert recorder.overlaps == 0 and recorder.after_disconnect == 0
    sock.close()
    peer.close()
    listener.close()


def test_inline_callbacks_on_the_event_loop_thread_may_call_the_socket(recorder):
    server = Recorder()
    server.on_accept = lambda listener, connection: connection.read()
    server.on_read = lambda sock, data, tag: (sock.write(bytes(data)), sock.read())
    listener = socketkit.Socket(server, queue=None)
    listener.accept_on_interface("127.0.0.1", 0)
    client = socket.create_connection(("127.0.0.1", listener.local_port), timeout=WAIT)
    for index in range(50):
        message = f"message {index}".encode()
        client.sendall(message)
        received = b""
        while len(received) < len(message):
            received += client.recv(64)
        assert received == message
    assert threading.get_ident() not in server.threads
    client.close()
    # Closing the server's socket while its callback still runs on the loop thread would make
    # that callback's next call raise InvalidHandleError: wait until the connection is done.
    server.expect("disconnect")
    listener.close()
    for connection in server.accepted:
        connection.close()


def test_the_new_loop_hook_places_accepted_sockets():
    class Placer(Recorder):
        def socket_new_loop_for_connection(self, listener, address):
            self.addresses = getattr(self, "addresses", []) + [address]
            return 1

    placer = Placer()
    placer.on_accept = lambda listener, connection: connection.read()
    with socketkit.LoopGroup(2) as group:
        listener = socketkit.Socket(placer, queue=None, loop_group=group)
        listener.accept_on_interface("127.0.0.1", 0)
        clients = [socket.create_connection(("127.0.0.1", listener.local_port), timeout=WAIT) for _ in range(3)]
        for client in clients:
            client.sendall(b"x")
        placer.expect("read", 3)
        reads = [event for event in placer.events if event[0] == "read"]
        assert len(reads) == 3
        assert len({thread for thread in placer.threads}) >= 1
        assert all(address[0] == "127.0.0.1" for address in placer.addresses)
        for client in clients:
            client.close()
        listener.close()
        for connection in placer.accepted:
            connection.close()


def test_a_listener_out_of_descriptors_pauses_and_recovers():
    # The descriptor limit is process-wide: run the listener in a child interpreter.
    script = textwrap.dedent(f"""
        import resource, socket, sys, threading
        sys.path.insert(0, {repr(str(__import__('pathlib').Path(socketkit.__file__).parents[1]))})
        import socketkit
        paused = threading.Event(); served = threading.Semaphore(0)
        class Server:
            def __init__(self): self.kept = []
            def socket_did_accept(self, listener, connection):
                self.kept.append(connection); connection.read()
            def socket_did_read(self, sock, data, tag):
                served.release()
            def socket_did_pause_accepting(self, sock, error):
                print("paused", error.errno, type(error).__name__, flush=True); paused.set()
        server = Server()
        listener = socketkit.Socket(server)
        listener.accept_on_interface("127.0.0.1", 0)
        clients = [socket.socket() for _ in range(12)]
        probe = socket.socket(); highest = probe.fileno(); probe.close()
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (highest + 3, hard))
        for client in clients:
            client.connect(("127.0.0.1", listener.local_port)); client.sendall(b"x")
        assert paused.wait(20), "no pause"
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        for _ in clients:
            assert served.acquire(timeout=20), "not every client was served"
        print("recovered", len(server.kept), flush=True)
        listener.close()
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.split()
    assert lines[:3] == ["paused", str(__import__("errno").EMFILE), "SystemCallError"]
    assert lines[3:] == ["recovered", "12"]


def test_a_late_disconnect_of_the_previous_session_keeps_the_new_sessions_buffer(raw_peer):
    # Callbacks wait in a host queue we drain by hand, so the old session's did_disconnect
    # is delivered after the new session's read_into was issued.
    import select
    host = socketkit.HostQueue()
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(4)
    port = listener.getsockname()[1]
    recorder = Recorder()
    sock = socketkit.Socket(recorder, queue=host)
    sock.connect_to_host("127.0.0.1", port, timeout=5)
    listener.settimeout(WAIT)
    first_peer, _ = listener.accept()
    sock.disconnect()
    sock.connect_to_host("127.0.0.1", port, timeout=5)
    second_peer, _ = listener.accept()
    buffer = bytearray(5)
    sock.read_to_length_into(5, buffer)
    while recorder.count("disconnect") < 1:
        assert select.select([host.fileno()], [], [], WAIT)[0]
        host.drain(1)
    assert len(sock._pending_buffers) == 1, "the new session's buffer stays pinned"
    second_peer.sendall(b"HELLO")
    while recorder.count("read") < 1:
        assert select.select([host.fileno()], [], [], WAIT)[0]
        host.drain()
    assert bytes(buffer) == b"HELLO"
    sock.abort()
    for peer in (first_peer, second_peer, listener):
        peer.close()
    host.close()


def test_abort_drops_queued_writes():
    import asyncio
    from socketkit import aio

    async def main():
        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        connection = await aio.AsyncSocket.connect("127.0.0.1", listener.getsockname()[1], timeout=5)
        peer, _ = listener.accept()
        pending = asyncio.ensure_future(connection.write(bytes(64 * 1024 * 1024)))
        await asyncio.sleep(0)  # let the write be queued
        connection.abort()
        with pytest.raises(socketkit.ClosedError):
            await pending
        peer.settimeout(WAIT)
        received = 0
        while True:
            try:
                chunk = peer.recv(1 << 20)
            except ConnectionResetError:
                break
            if not chunk:
                break
            received += len(chunk)
        assert received < 64 * 1024 * 1024, "abort must not send the queued write"
        peer.close()
        listener.close()

    asyncio.run(asyncio.wait_for(main(), 30))


def test_connect_via_an_interface_and_user_data(recorder):
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    local = socket.socket()
    local.bind(("127.0.0.1", 0))
    local_port = local.getsockname()[1]
    local.close()
    sock = socketkit.Socket(recorder)
    sock.user_data = {"name": "client"}
    sock.connect_to_host("127.0.0.1", listener.getsockname()[1], interface=f"lo:{local_port}", timeout=5)
    recorder.expect("connect")
    assert sock.local_port == local_port and sock.local_host == "127.0.0.1"
    assert sock.user_data == {"name": "client"}
    with pytest.raises(socketkit.BadParamError):
        socketkit.Socket(Recorder()).connect_to_host("127.0.0.1", 1, interface="no-such-if0")
    sock.close()
    listener.close()
