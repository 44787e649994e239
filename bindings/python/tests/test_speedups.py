# SPDX-License-Identifier: MIT
"""The binding's C hot paths (socketkit/_speedups*.c) against the ctypes ones.

`make test` runs the whole suite twice: once with the extension (SOCKETKIT_EXPECT_SPEEDUPS=1:
it must have loaded) and once without (SOCKETKIT_NO_SPEEDUPS=1). These tests drive exactly
the paths the extension replaces (HostQueue.drain's read and datagram records, Socket.read
and write, UdpSocket.send_to_address) with the arguments it handles and the ones it hands
back to Python, so both runs check the same behaviour.
"""
import ctypes
import os
import pathlib
import re
import socket
import sys
import threading

import pytest

import socketkit
from socketkit import _hotpaths, _native

from conftest import WAIT, pattern, pump


def test_the_extension_is_used_exactly_when_expected():
    if os.environ.get("SOCKETKIT_NO_SPEEDUPS"):
        assert socketkit.SPEEDUPS is False
        assert socketkit.Socket.write is _hotpaths.SocketIOPython.write
        assert socketkit.UdpSocket.send_to_address is _hotpaths.UdpSocketIOPython.send_to_address
    elif os.environ.get("SOCKETKIT_EXPECT_SPEEDUPS"):
        assert socketkit.SPEEDUPS is True, "socketkit._speedups did not load (is it built? make python-test)"
        assert type(socketkit.Socket.write).__name__ == "method_descriptor"
        assert type(socketkit.UdpSocket.send_to_address).__name__ == "method_descriptor"
    else:
        pytest.skip("neither SOCKETKIT_EXPECT_SPEEDUPS nor SOCKETKIT_NO_SPEEDUPS is set")


def test_the_extension_uses_only_cpythons_public_api():
    """Names with a leading underscore (_PyThreadState_UncheckedGet, _PyObject_GetMethod)
    and the fields of CPython's structures (a thread state's gilstate_counter) are
    internals that change between releases: the extension keeps to the documented API.
    Every file of it is read: all are named _speedups*.c or _speedups*.h (setup.py)."""
    package = pathlib.Path(socketkit.__file__).parent
    paths = sorted(package.glob("_speedups*.[ch]"))
    built = set(re.findall(r"socketkit/(\w+\.[ch])\b", (package.parent / "setup.py").read_text()))
    assert "_speedups.c" in built and built <= {path.name for path in paths}, built
    for path in paths:
        code = re.sub(r"/\*.*?\*/", "", path.read_text(), flags=re.S)  # comments may name what is avoided
        assert re.findall(r"\b_Py\w+", code) == [], path.name
        assert re.findall(r"->\s*(?:gilstate_counter|interp|cframe|frame|thread_id)\b", code) == [], path.name


@pytest.fixture
def host_pair(raw_peer):
    host = socketkit.HostQueue()
    pair = raw_peer()
    pair.socket.queue = host
    yield pair, host
    pair.socket.close()
    host.close()


def test_writes_of_every_kind_and_argument_form_arrive_whole_and_in_order(host_pair):
    pair, host = host_pair
    big = pattern(200_000, seed=3)  # bytes over the no-copy threshold: lent, not copied
    pieces = [b"plain", bytearray(b"mutable"), memoryview(b"view"), b"-", memoryview(bytearray(b"rw")), big,
              pattern(1000, seed=1)]
    for empty in (b"", bytearray(), memoryview(b"")):
        with pytest.raises(socketkit.BadParamError):
            pair.socket.write(empty)
    pair.socket.write(pieces[0])
    pair.socket.write(pieces[1], tag=11)
    pair.socket.write(pieces[2], -1, 12)
    pair.socket.write(pieces[3])
    pair.socket.write(data=pieces[4], timeout=5.0, tag=13)
    pair.socket.write(pieces[5], 10.0)
    pair.socket.write(pieces[6])
    expected = b"".join(bytes(piece) for piece in pieces)
    assert pair.receive_exactly(len(expected)) == expected
    pump(host, lambda: pair.recorder.count("write") >= 7)
    assert [event[1] for event in pair.recorder.events if event[0] == "write"] == [0, 11, 12, 0, 13, 0, 0]


def test_reads_with_and_without_arguments_through_a_host_queue(host_pair):
    pair, host = host_pair
    pair.socket.read()
    pair.peer.sendall(b"first")
    pump(host, lambda: pair.recorder.count("read") == 1)
    assert pair.recorder.events[-1] == ("read", b"first", 0)
    pair.socket.read(3, tag=7)
    pair.peer.sendall(b"abcdef")
    pump(host, lambda: pair.recorder.count("read") == 2)
    assert pair.recorder.events[-1] == ("read", b"abc", 7)
    pair.socket.read(max_length=0, timeout=-1, tag=8)
    pump(host, lambda: pair.recorder.count("read") == 3)
    assert pair.recorder.events[-1] == ("read", b"def", 8)
    # A read into a buffer of the program's: the record points into it (the pinned path).
    buffer = bytearray(16)
    seen = []
    pair.recorder.on_read = lambda sock, data, tag: seen.append(data)
    pair.socket.read_into(buffer, offset=4, tag=9)
    pair.peer.sendall(b"xyz")
    pump(host, lambda: pair.recorder.count("read") == 4)
    assert isinstance(seen[0], memoryview) and bytes(seen[0]) == b"xyz" and buffer[4:7] == b"xyz"
    assert pair.recorder.events[-1] == ("read", b"xyz", 9)


def test_closed_sockets_refuse_reads_and_writes_with_invalid_handle(raw_peer):
    pair = raw_peer()
    pair.socket.close()
    with pytest.raises(socketkit.InvalidHandleError):
        pair.socket.write(b"late")
    with pytest.raises(socketkit.InvalidHandleError):
        pair.socket.write(bytearray(b"late"), tag=1)
    with pytest.raises(socketkit.InvalidHandleError):
        pair.socket.read()
    with pytest.raises(socketkit.InvalidHandleError):
        pair.socket.read(5)
    with pytest.raises(TypeError):
        pair.socket.write()  # the Python implementation reports the missing argument


def test_a_write_after_the_peer_left_fails_with_the_documented_error(host_pair):
    pair, host = host_pair
    pair.socket.read()
    pair.peer.close()
    pump(host, lambda: pair.recorder.count("disconnect") == 1)
    with pytest.raises(socketkit.BadConfigError) as raised:
        pair.socket.write(b"to nobody")
    assert "not connected" in raised.value.message  # the engine's message came through


class Raising:
    def __init__(self):
        self.reads = []
        self.second = threading.Event()

    def socket_did_read(self, sock, data, tag):
        self.reads.append(bytes(data))
        if len(self.reads) == 2:
            self.second.set()
        if data == b"boom":
            raise RuntimeError("delegate failed")


def test_a_delegate_exception_in_a_drained_read_goes_to_the_unraisable_hook(raw_peer, monkeypatch):
    reported = []
    monkeypatch.setattr(sys, "unraisablehook", reported.append)
    host = socketkit.HostQueue()
    pair = raw_peer()
    delegate = Raising()
    pair.socket.delegate = delegate
    pair.socket.queue = host
    pair.socket.read_to_length(4)
    pair.socket.read_to_length(2)
    pair.peer.sendall(b"boomok")
    pump(host, lambda: len(delegate.reads) == 2)
    assert delegate.reads == [b"boom", b"ok"]  # the batch went on after the exception
    assert len(reported) == 1
    assert reported[0].err_msg == "Exception ignored in socketkit delegate method socket_did_read"
    assert isinstance(reported[0].exc_value, RuntimeError) and reported[0].exc_type is RuntimeError
    assert reported[0].exc_traceback is not None and reported[0].object is delegate
    pair.socket.close()
    host.close()


def test_a_delegate_without_the_method_loses_nothing_else(raw_peer):
    class WritesOnly:
        def __init__(self):
            self.writes = []

        def socket_did_write(self, sock, tag):
            self.writes.append(tag)

    host = socketkit.HostQueue()
    pair = raw_peer()
    delegate = WritesOnly()
    pair.socket.delegate = delegate
    pair.socket.queue = host
    pair.socket.read()
    pair.socket.write(b"out", tag=5)
    pair.peer.sendall(b"in")
    assert pair.receive_exactly(3) == b"out"
    pump(host, lambda: delegate.writes == [5])
    pair.socket.close()
    host.close()


class UdpLog:
    def __init__(self, echo=False):
        self.received = []
        self.sent = []
        self.not_sent = []
        self.echo = echo

    def udp_socket_did_receive(self, sock, data, address, context):
        self.received.append((data, address, context))
        if self.echo:
            sock.send_to_address(data, address)

    def udp_socket_did_send(self, sock, tag):
        self.sent.append(tag)

    def udp_socket_did_not_send(self, sock, tag, error):
        self.not_sent.append((tag, error))


def test_datagrams_through_a_host_queue_with_every_argument_form():
    host = socketkit.HostQueue()
    server_log = UdpLog(echo=True)
    server = socketkit.UdpSocket(server_log, queue=host)
    server.bind_to_port(0, "127.0.0.1")
    server.begin_receiving()
    log = UdpLog()
    client = socketkit.UdpSocket(log, queue=host)
    client.bind_to_port(0, "127.0.0.1")
    client.begin_receiving()
    target = ("127.0.0.1", server.local_port)
    payloads = [b"one", b"", bytearray(b"three"), memoryview(b"four"), pattern(5000, seed=2)]
    client.send_to_address(payloads[0], target)
    client.send_to_address(payloads[1], target, tag=1)
    client.send_to_address(payloads[2], target, 5.0, 2)
    client.send_to_address(data=payloads[3], address=target, tag=3)
    client.send_to_address(payloads[4], ("127.0.0.1", server.local_port))  # an equal tuple, not the same one
    pump(host, lambda: len(log.received) == 5)
    assert [data for data, _, _ in log.received] == [bytes(payload) for payload in payloads]
    assert all(address == target and context is None for _, address, context in log.received)
    assert [address for _, address, _ in server_log.received] == [("127.0.0.1", client.local_port)] * 5
    pump(host, lambda: len(log.sent) == 5)
    assert log.sent == [0, 1, 2, 3, 0]
    with pytest.raises(socketkit.BadParamError):
        client.send_to_address(b"x", ["127.0.0.1", server.local_port])  # unhashable: not an address
    with pytest.raises(socketkit.BadParamError):
        client.send_to_address(b"x", ("not an address", 9))
    client.release()
    with pytest.raises(socketkit.InvalidHandleError):
        client.send_to_address(b"x", target)
    server.close()
    host.close()


def test_a_receive_filter_context_and_a_raising_receive_through_a_host_queue(monkeypatch):
    reported = []
    monkeypatch.setattr(sys, "unraisablehook", reported.append)
    host = socketkit.HostQueue()

    class Raises(UdpLog):
        def udp_socket_did_receive(self, sock, data, address, context):
            super().udp_socket_did_receive(sock, data, address, context)
            if data == b"boom":
                raise ValueError("receive failed")

    server_log = Raises()
    server = socketkit.UdpSocket(server_log, queue=host)
    server.bind_to_port(0, "127.0.0.1")
    server.begin_receiving()
    peer = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    peer.bind(("127.0.0.1", 0))
    peer.sendto(b"boom", ("127.0.0.1", server.local_port))
    peer.sendto(b"after", ("127.0.0.1", server.local_port))
    pump(host, lambda: len(server_log.received) == 2)
    assert [data for data, _, _ in server_log.received] == [b"boom", b"after"]
    assert server_log.received[0][1] == ("127.0.0.1", peer.getsockname()[1])
    assert len(reported) == 1 and isinstance(reported[0].exc_value, ValueError)
    assert reported[0].err_msg == "Exception ignored in socketkit delegate method udp_socket_did_receive"
    server.set_receive_filter(lambda data, address: (True, {"length": len(data)}))
    peer.sendto(b"with context", ("127.0.0.1", server.local_port))
    pump(host, lambda: len(server_log.received) == 3)
    assert server_log.received[2][0] == b"with context" and server_log.received[2][2] == {"length": 12}
    peer.close()
    server.close()
    host.close()


def test_run_once_of_a_closed_driven_group_raises():
    group = socketkit.LoopGroup.driven()
    assert group.run_once() in (True, False)
    handle = group.handle
    group.close()
    with pytest.raises(socketkit.InvalidHandleError):
        group.run_once()
    if _native.speedups is not None:
        with pytest.raises(socketkit.InvalidHandleError):
            _native.speedups.run_once(handle)  # a stale handle: an error, not a crash


def test_the_handle_slot_accepts_what_the_binding_stores(raw_peer):
    pair = raw_peer()
    sock = pair.socket
    original = sock._c_handle
    value = original.value if isinstance(original, ctypes.c_void_p) else original
    for form in (ctypes.c_void_p(value), value):
        sock._c_handle = form
        sock.write(b"ok")
    assert pair.receive_exactly(4) == b"okok"
    sock._c_handle = None
    with pytest.raises(socketkit.InvalidHandleError):
        sock.write(b"closed")
    sock._c_handle = original


@pytest.mark.parametrize("queue_kind", ["serial", "loop"])
def test_a_delegate_exception_in_a_read_callback_goes_to_the_unraisable_hook(raw_peer, monkeypatch, queue_kind):
    """Reads on SocketKit's threads come through the C callback (or the ctypes one): an
    exception there is reported, and the next read still arrives."""
    reported = []
    monkeypatch.setattr(sys, "unraisablehook", reported.append)
    pair = raw_peer()
    delegate = Raising()
    serial = socketkit.SerialQueue("speedups-test") if queue_kind == "serial" else None
    pair.socket.queue = serial
    pair.socket.delegate = delegate
    pair.socket.read_to_length(4)
    pair.socket.read_to_length(2)
    pair.peer.sendall(b"boomok")
    assert delegate.second.wait(WAIT), delegate.reads  # the first read's exception was reported before
    assert delegate.reads == [b"boom", b"ok"]
    assert reported[0].err_msg == "Exception ignored in socketkit delegate method socket_did_read"
    assert isinstance(reported[0].exc_value, RuntimeError) and reported[0].object is delegate
    pair.socket.close()
    if serial is not None:
        serial.close()


def test_echoes_from_callbacks_on_the_loop_thread_across_loop_groups():
    """Delegate methods on SocketKit's loop threads (queue None) write to their own socket
    and to a socket of another loop group: inside a C callback the binding keeps the GIL
    around SocketKit's calls, which must never wait for another thread."""
    other_group = socketkit.LoopGroup(1)
    mirror_listener = socket.socket()
    mirror_listener.bind(("127.0.0.1", 0))
    mirror_listener.listen(1)
    mirror_log = []

    class Mirror:
        def socket_did_connect(self, sock, host, port):
            mirror_log.append("connect")

    mirror = socketkit.Socket(Mirror(), queue=None, loop_group=other_group)
    mirror.connect_to_host("127.0.0.1", mirror_listener.getsockname()[1], timeout=5)
    mirror_listener.settimeout(WAIT)
    mirror_peer, _ = mirror_listener.accept()
    mirror_peer.settimeout(WAIT)

    class Echo:
        def __init__(self):
            self.connections = []

        def socket_did_accept(self, listener, connection):
            self.connections.append(connection)
            connection.read()

        def socket_did_read(self, sock, data, tag):
            # The echo goes last: it lets the test go on (and eventually close everything).
            sock.read()
            mirror.write(data)  # a socket on another loop thread
            sock.write(data)

    echo = Echo()
    listener = socketkit.Socket(echo, queue=None)
    listener.accept_on_interface("127.0.0.1", 0)
    clients = [socket.create_connection(("127.0.0.1", listener.local_port), timeout=WAIT) for _ in range(4)]
    sent = b""
    for round_trip in range(50):
        for index, client in enumerate(clients):
            message = f"{round_trip}:{index};".encode()
            client.sendall(message)
            received = b""
            while len(received) < len(message):
                chunk = client.recv(len(message) - len(received))
                assert chunk
                received += chunk
            assert received == message
            sent += message
    mirrored = b""
    while len(mirrored) < len(sent):
        chunk = mirror_peer.recv(65536)
        assert chunk
        mirrored += chunk
    assert mirrored == sent
    for client in clients:
        client.close()
    listener.close()
    for connection in echo.connections:
        connection.close()
    mirror.close()
    mirror_peer.close()
    mirror_listener.close()
    other_group.close()


_DEFAULT_HOOK_SCRIPT = r"""
import select, socket, sys, threading
import socketkit

second = threading.Event()

class Delegate:
    def socket_did_read(self, sock, data, tag):
        if data == b"boom":
            raise RuntimeError("boom from the delegate")
        second.set()

listener = socket.socket()
listener.bind(("127.0.0.1", 0))
listener.listen(1)
host = socketkit.HostQueue() if sys.argv[1] == "host" else None
sock = socketkit.Socket(Delegate(), **({"queue": host} if host is not None else {}))
sock.connect_to_host("127.0.0.1", listener.getsockname()[1], timeout=5)
peer, _ = listener.accept()
sock.read_to_length(4)
sock.read_to_length(2)
peer.sendall(b"boomok")
while not second.wait(0 if host is not None else 20):
    assert host is not None, "the second read never came"
    select.select([host.fileno()], [], [], 20)
    host.drain()
print("done", socketkit.SPEEDUPS)
"""


@pytest.mark.parametrize("queue_kind", ["serial", "host"])
def test_with_pythons_own_unraisable_hook_a_delegate_exception_is_printed(queue_kind):
    """sys.__unraisablehook__ refuses anything but its own argument type: the binding prints
    the report the way it does, instead of losing the exception to a TypeError."""
    import subprocess
    result = subprocess.run([sys.executable, "-c", _DEFAULT_HOOK_SCRIPT, queue_kind], capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("done"), result.stdout
    assert "Exception ignored in socketkit delegate method socket_did_read: <" in result.stderr
    assert "RuntimeError: boom from the delegate" in result.stderr and "Traceback" in result.stderr
    assert "TypeError" not in result.stderr, result.stderr


@pytest.mark.parametrize("queue_kind", ["serial", "host"])
def test_a_delegate_method_set_to_none_is_not_called(raw_peer, monkeypatch, queue_kind):
    reported = []
    monkeypatch.setattr(sys, "unraisablehook", reported.append)

    class Quiet:
        socket_did_read = None

        def __init__(self):
            self.ended = threading.Event()

        def socket_did_disconnect(self, sock, error):
            self.ended.set()

    host = socketkit.HostQueue() if queue_kind == "host" else None
    pair = raw_peer()
    delegate = Quiet()
    pair.socket.delegate = delegate
    if host is not None:
        pair.socket.queue = host
    pair.socket.read()
    pair.socket.read()  # pending at the end of the stream: the socket disconnects
    pair.peer.sendall(b"ignored")
    pair.peer.shutdown(socket.SHUT_WR)  # did_disconnect comes last: after the read's (absent) method
    if host is not None:
        pump(host, delegate.ended.is_set)
    else:
        assert delegate.ended.wait(WAIT)
    assert reported == []
    pair.socket.close()
    if host is not None:
        host.close()


class _Reads(list):
    """The reads a delegate saw, with a wait for the next one (delegates may run on another
    thread)."""

    def __init__(self):
        super().__init__()
        self.changed = threading.Condition()

    def append(self, item):
        with self.changed:
            super().append(item)
            self.changed.notify_all()

    def wait_for(self, count):
        with self.changed:
            assert self.changed.wait_for(lambda: len(self) >= count, WAIT), list(self)


class _CallableReader:
    def __init__(self, reads):
        self.reads = reads

    def __call__(self, sock, data, tag):
        self.reads.append(("callable", bytes(data)))


def _class_method_reader():
    class Delegate:
        def __init__(self):
            self.reads = _Reads()

        def socket_did_read(self, sock, data, tag):
            self.reads.append(("class", bytes(data)))

    return Delegate()


def _instance_attribute_reader():
    delegate = _class_method_reader()
    delegate.socket_did_read = lambda sock, data, tag: delegate.reads.append(("instance", bytes(data)))
    return delegate


def _getattr_reader():
    class Delegate:
        def __init__(self):
            self.reads = _Reads()

        def __getattr__(self, name):
            if name != "socket_did_read":
                raise AttributeError(name)
            return lambda sock, data, tag: self.reads.append(("getattr", bytes(data)))

    return Delegate()


def _static_method_reader():
    reads = _Reads()

    class Delegate:
        @staticmethod
        def socket_did_read(sock, data, tag):
            reads.append(("static", bytes(data)))

    delegate = Delegate()
    delegate.reads = reads
    return delegate


def _callable_attribute_reader():
    class Delegate:
        pass

    delegate = Delegate()
    delegate.reads = _Reads()
    delegate.socket_did_read = _CallableReader(delegate.reads)
    return delegate


_READERS = {"class": _class_method_reader, "instance": _instance_attribute_reader, "getattr": _getattr_reader,
            "static": _static_method_reader, "callable": _callable_attribute_reader}


@pytest.mark.parametrize("queue_kind", ["serial", "loop", "host"])
@pytest.mark.parametrize("form", sorted(_READERS))
def test_every_form_of_delegate_method_gets_each_read_with_its_own_arguments(raw_peer, queue_kind, form):
    """The C path calls a class's function without making a bound method (as CPython's own
    method calls do); every other way to provide the method still gets (sock, data, tag),
    and a method replaced on the class between two reads is the one the second read calls."""
    host = socketkit.HostQueue() if queue_kind == "host" else None
    serial = socketkit.SerialQueue("speedups-forms") if queue_kind == "serial" else None
    pair = raw_peer()
    delegate = _READERS[form]()
    pair.socket.queue = host if host is not None else serial
    pair.socket.delegate = delegate
    reads = delegate.reads

    def wait_for(count):
        if host is not None:
            pump(host, lambda: len(reads) >= count)
        else:
            reads.wait_for(count)
        assert len(reads) == count, reads

    pair.socket.read_to_length(3, tag=7)
    pair.peer.sendall(b"one")
    wait_for(1)
    assert reads == [(form, b"one")]
    if form == "class":
        def replaced(self, sock, data, tag):
            assert sock is pair.socket and tag == 8
            self.reads.append(("replaced", bytes(data)))

        type(delegate).socket_did_read = replaced
        pair.socket.read_to_length(3, tag=8)
        pair.peer.sendall(b"two")
        wait_for(2)
        assert reads[1] == ("replaced", b"two")
    pair.socket.close()
    if host is not None:
        host.close()


def test_a_read_drained_after_its_socket_closed_reaches_no_delegate(raw_peer):
    """A record queued on a host queue for a socket that is then closed is dropped when the
    queue drains (close: no delegate method runs after it returns), even though the same
    handle's reads were delivered a moment before (the C path caches handle lookups)."""
    import select

    host = socketkit.HostQueue()
    pair = raw_peer()
    reads = []

    class Delegate:
        def socket_did_read(self, sock, data, tag):
            reads.append(bytes(data))

    pair.socket.queue = host
    pair.socket.delegate = Delegate()
    pair.socket.read_to_length(3)
    pair.peer.sendall(b"one")
    pump(host, lambda: reads == [b"one"])
    pair.socket.read_to_length(3)
    pair.peer.sendall(b"two")
    readable, _, _ = select.select([host.fileno()], [], [], WAIT)
    assert readable, "the second read's record never reached the host queue"
    pair.socket.close()
    host.drain()
    assert reads == [b"one"]
    # A new socket (a new handle) on the same queue gets its own reads.
    second = raw_peer()
    second.socket.queue = host
    second.socket.delegate = Delegate()
    second.socket.read_to_length(5)
    second.peer.sendall(b"three")
    pump(host, lambda: len(reads) == 2)
    assert reads == [b"one", b"three"]
    second.socket.close()
    host.close()


_EXIT_WHILE_WRITING_SCRIPT = r"""
import socket
import socketkit

listener = socket.socket()
listener.bind(("127.0.0.1", 0))
listener.listen(1)
sockets = []
for index in range(4):
    sock = socketkit.Socket(object())  # a delegate with no methods: connecting needs one
    sock.connect_to_host("127.0.0.1", listener.getsockname()[1], timeout=5)
    peer, _ = listener.accept()  # never reads: the lent bytes stay queued
    sock.write(bytes(8 << 20))  # lent to SocketKit (no copy) until written or dropped
    sock.read()
    sockets.append((sock, peer))
sockets[0][0].close()  # graceful: still writing when the interpreter finishes
print("exiting", socketkit.SPEEDUPS, flush=True)
"""


def test_the_interpreter_exits_cleanly_while_lent_writes_are_pending():
    """At exit SocketKit drops the queued writes on its own threads: their releases (and any
    late callback) must not enter a finishing interpreter (a crash or a hang)."""
    import subprocess
    for _ in range(3):
        result = subprocess.run([sys.executable, "-c", _EXIT_WHILE_WRITING_SCRIPT], capture_output=True, text=True,
                                timeout=60)
        assert result.returncode == 0, result.stderr
        assert result.stdout.startswith("exiting"), result.stdout
        assert "Traceback" not in result.stderr and "Fatal" not in result.stderr, result.stderr


# A peer in a process of its own that reads slowly: a little from each connection in turn.
_SLOW_PEER_SCRIPT = r"""
import selectors, socket, sys, time
listener = socket.socket()
listener.bind(("127.0.0.1", 0))
listener.listen(128)
print(listener.getsockname()[1], flush=True)
selector = selectors.DefaultSelector()
selector.register(listener, selectors.EVENT_READ)
connections = 0
while True:
    events = selector.select(10)
    if not events:
        break
    for key, _ in events:
        if key.fileobj is listener:
            connection, _ = listener.accept()
            selector.register(connection, selectors.EVENT_READ)
            connections += 1
            continue
        try:
            data = key.fileobj.recv(1 << 14)
        except OSError:
            data = b""
        if not data:
            selector.unregister(key.fileobj)
            key.fileobj.close()
            connections -= 1
            if connections == 0:
                sys.exit(0)
    time.sleep(0.005)
"""

_EXIT_WHILE_WRITES_COMPLETE_SCRIPT = r"""
import subprocess, sys
import socketkit

# The slow peer (argv[1]) keeps SocketKit's loop threads completing writes, and dropping
# the bytes each held, while this interpreter finalizes.
peer = subprocess.Popen([sys.executable, "-c", sys.argv[1]], stdout=subprocess.PIPE,
                        stderr=subprocess.DEVNULL, text=True)
port = int(peer.stdout.readline())
# Freed last as the interpreter finalizes (with the sys module, after socketkit's own
# modules): a program whose last objects take a while to free.
sys.socketkit_test_ballast = list(range(1 << 40, (1 << 40) + 3_000_000))
group = socketkit.LoopGroup(64)  # a loop thread per connection
payload = bytes(64 * 1024)  # large: lent to SocketKit where the binding lends
for _ in range(64):
    sock = socketkit.Socket(object(), queue=None, loop_group=group)
    sock.buffer_sizes = (1 << 16, 0)  # a small send buffer: the writes complete one by one
    sock.connect_to_host("127.0.0.1", port, timeout=5)
    for _ in range(8):
        sock.write(payload)
    sock.close()  # graceful: SocketKit goes on writing after the interpreter has finished
"""


def test_the_interpreter_exits_cleanly_while_large_writes_complete():
    """Large writes still completing as the interpreter finalizes: SocketKit's threads then
    drop the bytes of each, and must not call into the interpreter, nor into memory it has
    freed (the ctypes path lent such bytes with a ctypes release callback, which SocketKit
    called after ctypes had freed it: a crash in most runs). Many runs, four at a time."""
    import subprocess
    from concurrent.futures import ThreadPoolExecutor

    def run(_):
        return subprocess.run([sys.executable, "-c", _EXIT_WHILE_WRITES_COMPLETE_SCRIPT, _SLOW_PEER_SCRIPT],
                              capture_output=True, text=True, timeout=120)

    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(run, range(24)))
    failed = [(result.returncode, result.stderr[-500:]) for result in results if result.returncode != 0]
    assert failed == [], f"{len(failed)} of {len(results)} exits failed: {failed[:3]}"
    for result in results:
        assert "Traceback" not in result.stderr and "Fatal" not in result.stderr, result.stderr


def test_bytes_from_16_kib_are_lent_by_the_extension_and_copied_by_ctypes(raw_peer):
    """A write queued behind others keeps its bytes until sent: the C extension lends bytes
    objects from 16 KiB (a reference, no copy), the ctypes path copies them. Either way the
    bytes arrive intact and a lent object is released once written."""
    pair = raw_peer()
    ahead = bytes(32 << 20)  # more than the kernel's buffers hold while the peer does not read
    chunk = pattern(32 * 1024, seed=5)
    unlent = sys.getrefcount(chunk)
    pair.socket.write(ahead)
    pair.socket.write(chunk)  # default arguments: the extension's path when it is loaded
    assert sys.getrefcount(chunk) == unlent + (1 if socketkit.SPEEDUPS else 0)
    received = bytearray()
    while len(received) < len(ahead) + len(chunk):
        piece = pair.peer.recv(1 << 20)
        assert piece, f"peer closed after {len(received)} bytes"
        received += piece
    assert received[len(ahead):] == chunk and not any(received[:len(ahead)])
    pair.recorder.expect("write", 2)
    assert pair.recorder.wait_for(lambda events: sys.getrefcount(chunk) == unlent), "the lent bytes are released"


def test_a_delegate_that_refers_back_to_its_socket_is_collected_with_it():
    """With the extension the delegate sits in a C field of the socket: the cycle socket ->
    delegate -> socket must still be found by the garbage collector, which closes the
    connection (and the UDP socket)."""
    import gc
    import weakref

    connected = threading.Event()

    class Owner:
        def __init__(self):
            self.sock = None

        def socket_did_connect(self, sock, host, port):
            connected.set()

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    owner = Owner()
    owner.sock = socketkit.Socket(owner)
    owner.sock.connect_to_host("127.0.0.1", listener.getsockname()[1], timeout=5)
    listener.settimeout(WAIT)
    peer, _ = listener.accept()
    assert connected.wait(WAIT)
    assert owner.sock._delegate is owner
    udp_owner = Owner()
    udp_owner.sock = socketkit.UdpSocket(udp_owner)
    udp_owner.sock.bind_to_port(0, "127.0.0.1")
    assert udp_owner.sock._delegate is udp_owner
    gone = [weakref.ref(owner), weakref.ref(owner.sock), weakref.ref(udp_owner), weakref.ref(udp_owner.sock)]
    del owner, udp_owner
    gc.collect()
    assert [ref() for ref in gone] == [None] * 4
    peer.settimeout(WAIT)
    assert peer.recv(10) == b""
    peer.close()
    listener.close()
