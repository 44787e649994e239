# SPDX-License-Identifier: MIT
"""Shared helpers: a delegate that records every callback (and lets a test wait for what it
expects, with a deadline, no sleeps), and peers made with Python's own socket module."""
import os
import select
import socket
import threading
import time
from typing import Any, Callable, List, Optional, Tuple

import pytest

import socketkit

WAIT = 20.0


def pump(queue: socketkit.HostQueue, predicate: Callable[[], bool], timeout: float = WAIT) -> None:
    """Drains a host queue on this thread until `predicate()` holds (fails after `timeout`)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        left = deadline - time.monotonic()
        assert left > 0, "timed out draining the host queue"
        select.select([queue.fileno()], [], [], min(left, 0.5))
        queue.drain()


class Recorder:
    """Records delegate calls as tuples: ("connect", host, port), ("read", bytes, tag), ...
    Checks the contract as it goes: no two callbacks overlap, nothing follows disconnect."""

    def __init__(self) -> None:
        self.events: List[Tuple[Any, ...]] = []
        self.condition = threading.Condition()
        self.accepted: List[socketkit.Socket] = []
        self.threads = set()
        self.running = 0
        self.overlaps = 0
        self.after_disconnect = 0
        self._disconnected = False
        self.read_extensions: List[float] = []
        self.on_read: Optional[Callable[[socketkit.Socket, Any, int], None]] = None
        self.on_accept: Optional[Callable[[socketkit.Socket, socketkit.Socket], None]] = None

    def _record(self, *event: Any) -> None:
        with self.condition:
            self.threads.add(threading.get_ident())
            if self.running:
                self.overlaps += 1
            if event[0] in ("connect", "accept"):
                self._disconnected = False
            elif self._disconnected:
                self.after_disconnect += 1
            if event[0] == "disconnect":
                self._disconnected = True
            self.events.append(event)
            self.condition.notify_all()

    def wait_for(self, predicate: Callable[[List[Tuple[Any, ...]]], bool], timeout: float = WAIT) -> bool:
        with self.condition:
            return self.condition.wait_for(lambda: predicate(self.events), timeout)

    def count(self, kind: str) -> int:
        with self.condition:
            return sum(1 for event in self.events if event[0] == kind)

    def expect(self, kind: str, count: int = 1, timeout: float = WAIT) -> List[Tuple[Any, ...]]:
        assert self.wait_for(lambda events: sum(1 for e in events if e[0] == kind) >= count, timeout), \
            f"timed out waiting for {count} {kind!r} events; have {self.events}"
        with self.condition:
            return [event for event in self.events if event[0] == kind]

    def data(self) -> bytes:
        with self.condition:
            return b"".join(event[1] for event in self.events if event[0] == "read")

    def expect_bytes(self, count: int) -> bytes:
        assert self.wait_for(lambda events: sum(len(e[1]) for e in events if e[0] == "read") >= count), \
            f"timed out waiting for {count} bytes; have {self.data()!r}"
        return self.data()

    def disconnect_error(self) -> Optional[socketkit.Error]:
        return self.expect("disconnect")[0][1]

    # Delegate methods
    def socket_did_accept(self, listener, new_socket):
        self.accepted.append(new_socket)
        if self.on_accept:
            self.on_accept(listener, new_socket)
        self._record("accept", new_socket)

    def socket_did_connect(self, sock, host, port):
        self._record("connect", host, port)

    def socket_did_read(self, sock, data, tag):
        self._record("read", bytes(data), tag)
        if self.on_read:
            self.on_read(sock, data, tag)

    def socket_did_read_partial(self, sock, length, tag):
        self._record("read_partial", length, tag)

    def socket_should_timeout_read(self, sock, tag, elapsed, done):
        self._record("read_timeout", tag, elapsed, done)
        return self.read_extensions.pop(0) if self.read_extensions else 0.0

    def socket_did_write(self, sock, tag):
        self._record("write", tag)

    def socket_did_write_partial(self, sock, length, tag):
        self._record("write_partial", length, tag)

    def socket_should_timeout_write(self, sock, tag, elapsed, done):
        self._record("write_timeout", tag, elapsed, done)
        return 0.0

    def socket_did_close_read_stream(self, sock):
        self._record("close_read_stream")

    def socket_did_reach_high_watermark(self, sock, queued):
        self._record("high_watermark", queued)

    def socket_did_drain_to_low_watermark(self, sock, queued):
        self._record("low_watermark", queued)

    def socket_did_pause_accepting(self, sock, error):
        self._record("pause_accepting", error)

    def socket_did_cancel_read(self, sock, tag, unread_bytes):
        self._record("cancel_read", tag, unread_bytes)

    def socket_did_disconnect(self, sock, error):
        self._record("disconnect", error)


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()


class RawPeer:
    """A SocketKit client connected to a listener made with Python's socket module."""

    def __init__(self, family=socket.AF_INET, host="127.0.0.1", configure=None):
        self.listener = socket.socket(family, socket.SOCK_STREAM)
        self.listener.bind((host, 0))
        self.listener.listen(8)
        self.port = self.listener.getsockname()[1]
        self.recorder = Recorder()
        self.socket = socketkit.Socket(self.recorder)
        if configure:
            configure(self.socket)
        self.socket.connect_to_host(host, self.port, timeout=10)
        self.listener.settimeout(WAIT)
        self.peer, _ = self.listener.accept()
        self.peer.settimeout(WAIT)
        self.recorder.expect("connect")

    def receive_exactly(self, count: int) -> bytes:
        data = b""
        while len(data) < count:
            chunk = self.peer.recv(count - len(data))
            assert chunk, f"peer closed after {len(data)} of {count} bytes"
            data += chunk
        return data

    def receive_all(self) -> bytes:
        chunks = []
        while True:
            chunk = self.peer.recv(65536)
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)

    def close(self):
        self.socket.close()
        self.peer.close()
        self.listener.close()


@pytest.fixture
def raw_peer():
    peers = []

    def make(**options) -> RawPeer:
        peer = RawPeer(**options)
        peers.append(peer)
        return peer

    yield make
    for peer in peers:
        peer.close()


def descriptor_options(sock: Any, *options: Tuple[str, int, int]) -> List[int]:
    """Integer options of a Socket's or UdpSocket's descriptors, read with getsockopt on its
    loop thread (perform): each option is (a Descriptors attribute, level, name)."""
    done = threading.Event()
    found: List[int] = []

    def read(descriptors: socketkit.Descriptors) -> None:
        try:
            assert threading.current_thread() is not threading.main_thread()
            for attribute, level, name in options:
                with socket.socket(fileno=os.dup(getattr(descriptors, attribute))) as probe:
                    found.append(probe.getsockopt(level, name))
        finally:
            done.set()

    sock.perform(read)
    assert done.wait(WAIT)
    return found


def pattern(count: int, seed: int = 0) -> bytes:
    block = bytes((index * 31 + seed) % 251 for index in range(min(count, 65521)))
    return (block * (count // len(block) + 1))[:count] if count else b""


# ---- TLS ------------------------------------------------------------------------------

REPOSITORY = __import__("pathlib").Path(__file__).resolve().parents[3]
MAKE_TEST_CERTS = REPOSITORY / "Tests" / "certs" / "make-test-certs.sh"


class Certs:
    """The throwaway PKI of Tests/certs/make-test-certs.sh (see the README it writes)."""

    def __init__(self, directory) -> None:
        self.directory = directory

    def path(self, name: str) -> str:
        return str(self.directory / name)

    def text(self, name: str) -> str:
        return (self.directory / name).read_text()

    def server(self, variant: str = "server", **options: Any) -> socketkit.TLSSettings:
        """A server presenting VARIANT-chain.pem / VARIANT.key."""
        options.setdefault("certificate_chain_file", self.path(f"{variant}-chain.pem"))
        options.setdefault("private_key_file", self.path(f"{variant}.key"))
        return socketkit.TLSSettings(role="server", **options)

    def client(self, **options: Any) -> socketkit.TLSSettings:
        """A client trusting only the test root (ca.pem)."""
        options.setdefault("trust_file", self.path("ca.pem"))
        return socketkit.TLSSettings.client(**options)


@pytest.fixture(scope="session")
def certs(tmp_path_factory) -> Certs:
    """Made once per session by Tests/certs/make-test-certs.sh."""
    import shutil
    import subprocess

    if shutil.which("openssl") is None:
        pytest.skip("the openssl command is missing (make-test-certs.sh needs it; the Makefile installs it)")
    if not MAKE_TEST_CERTS.exists():
        pytest.fail(f"{MAKE_TEST_CERTS} is missing")
    directory = tmp_path_factory.getbasetemp() / "socketkit-test-certs"
    result = subprocess.run(["sh", str(MAKE_TEST_CERTS), str(directory)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, f"make-test-certs.sh failed:\n{result.stdout}{result.stderr}"
    assert (directory / "DONE").exists()
    return Certs(directory)


class StdlibTLSServer:
    """A TLS server made with Python's ssl module: accepts `connections` connections one at
    a time in a thread, runs ``handler(tls_socket)`` after each handshake and keeps what it
    returns in ``results``; exceptions (a failed handshake, ...) go to ``errors``."""

    def __init__(self, context, handler=None, connections: int = 1, host: str = "127.0.0.1") -> None:
        self.context = context
        self.handler = handler
        self.connections = connections
        self.closing = False
        self.listener = socket.create_server((host, 0))
        self.listener.settimeout(WAIT)
        self.port = self.listener.getsockname()[1]
        self.results: List[Any] = []
        self.errors: List[BaseException] = []
        self.finished = threading.Event()
        self.thread = threading.Thread(target=self._run, name="stdlib-tls-server", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            for _ in range(self.connections):
                try:
                    raw, _ = self.listener.accept()
                except OSError as error:
                    if not self.closing:  # woken by close(): not the server's error
                        self.errors.append(error)
                    return
                raw.settimeout(WAIT)
                try:
                    with self.context.wrap_socket(raw, server_side=True) as tls:
                        self.results.append(self.handler(tls) if self.handler else None)
                except Exception as error:  # noqa: BLE001 - kept for the test to look at
                    self.errors.append(error)
                finally:
                    raw.close()
        finally:
            self.finished.set()

    def join(self) -> None:
        assert self.finished.wait(WAIT), "the stdlib TLS server did not finish"

    def close(self) -> None:
        # A shutdown wakes an accept() blocked in the thread (close() alone does not, and
        # the join would wait out WAIT when fewer connections came than allowed).
        self.closing = True
        try:
            self.listener.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.listener.close()
        self.thread.join(WAIT)
