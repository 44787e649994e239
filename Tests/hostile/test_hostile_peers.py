# SPDX-License-Identifier: MIT
"""Hostile peers against the echo servers SocketKit ships: the C example
(bindings/c/examples/echo_server.c), the Swift bench server (bench/swift-echo) and the Python
bench server (bench/python-echo/sk_echo.py), each in a process of its own, over loopback.

Each test attacks a server for a few seconds while a probe, a client of good will connected
before the attack, sends a line every 50 ms and must get its echo within PROBE_LATENCY; a
new connection (a TLS handshake on a TLS server) must be served within the same bound once
the attack is on, and again after it. Nothing may leak: once the attackers have gone the
server holds no more descriptors than before (waited for up to LEAK_WAIT), and its memory
stays bounded where the attack is about memory. Run by `make hostile-test` (part of
`make test`), with the development virtualenv's pytest:

    .build/venv/bin/python -m pytest Tests/hostile -q

The attacks: slowloris (a byte a second, lines never finished), clients that never read
while the server writes, floods of half-open and idle connections, resets in the middle of
the server's writes, TLS clients that never send a ClientHello, garbage to a TLS server,
and descriptor exhaustion (the server under `prlimit --nofile=64`, 200 clients at once).
"""
import os
import pathlib
import random
import selectors
import socket
import ssl
import struct
import subprocess
import threading
import time

import pytest

REPOSITORY = pathlib.Path(__file__).resolve().parents[2]
BUILD = REPOSITORY / ".build"
PYTHON = BUILD / "venv" / "bin" / "python"
SERVERS = {
    "c": [str(BUILD / "c-out" / "echo_server")],
    "swift": [str(BUILD / "release" / "socketkit-echo")],
    "python": [str(PYTHON), str(REPOSITORY / "bench" / "python-echo" / "sk_echo.py")],
}
# What a good client may wait for its echo (or a new connection for its first echo, TLS
# handshake included) while the server is under attack.
PROBE_LATENCY = 1.0
# How long a server may take to let go of the descriptors of clients that have gone.
LEAK_WAIT = 10.0
# Every wait in these tests ends by then.
WAIT = 30.0


@pytest.fixture(scope="session")
def certificates(tmp_path_factory):
    directory = tmp_path_factory.mktemp("certs")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                    "-days", "30", "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1",
                    "-keyout", str(directory / "key.pem"), "-out", str(directory / "cert.pem")],
                   check=True, capture_output=True)
    return directory / "cert.pem", directory / "key.pem"


class Server:
    """A shipped echo server in a process of its own."""

    def __init__(self, name, extra=(), prefix=(), tls=None, lines=False):
        command = SERVERS[name]
        if not os.path.exists(command[0]):
            pytest.fail(f"{command[0]} is not built (make hostile-test builds it)")
        arguments = list(prefix) + command + ["--port", "0"] + list(extra)
        if name == "c" and not lines:
            arguments.append("--raw")   # every byte echoed as it arrives, as the other two do
        if tls:
            arguments += ["--tls", str(tls[0]), str(tls[1])]
        self.name = name
        self.tls = tls
        self.process = subprocess.Popen(arguments, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = self.process.stdout.readline()
        assert line.startswith("listening on "), f"{name}: {line!r} {self.process.stderr.read()}"
        self.port = int(line.split()[-1])
        # Anything else it prints (accept back-off) must not fill a pipe and block it.
        threading.Thread(target=self.process.stdout.read, daemon=True).start()
        threading.Thread(target=self.process.stderr.read, daemon=True).start()

    def descriptors(self):
        return len(os.listdir(f"/proc/{self.process.pid}/fd"))

    def resident(self):
        with open(f"/proc/{self.process.pid}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        raise AssertionError("no VmRSS")

    def connect(self, timeout=WAIT):
        raw = socket.create_connection(("127.0.0.1", self.port), timeout=timeout)
        if not self.tls:
            return raw
        context = ssl.create_default_context(cafile=str(self.tls[0]))
        return context.wrap_socket(raw, server_hostname="localhost")

    def assert_alive(self):
        assert self.process.poll() is None, f"{self.name} exited: {self.process.returncode}"

    def wait_for_descriptors(self, at_most, seconds=LEAK_WAIT):
        """Waits until the server holds at most `at_most` descriptors; fails after `seconds`."""
        deadline = time.monotonic() + seconds
        while self.descriptors() > at_most and time.monotonic() < deadline:
            time.sleep(0.1)
        assert self.descriptors() <= at_most, (
            f"{self.name} holds {self.descriptors()} descriptors {seconds:.0f} s after the attackers left "
            f"(before: {at_most})")

    def stop(self):
        self.process.terminate()
        try:
            self.process.wait(WAIT)
        except subprocess.TimeoutExpired:
            self.process.kill()
            raise


def echo_once(connection, payload):
    connection.sendall(payload)
    received = b""
    while len(received) < len(payload):
        chunk = connection.recv(len(payload) - len(received))
        assert chunk, "the server closed the probe's connection"
        received += chunk
    assert received == payload


class Probe:
    """A client of good will: connected before the attack, a line every 50 ms, each echo timed."""

    def __init__(self, server):
        self.server = server
        self.connection = server.connect()
        self.connection.settimeout(WAIT)
        echo_once(self.connection, b"probe hello\n")
        self.worst = 0.0
        self.rounds = 0
        self.failure = None
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        try:
            while not self.stopping.is_set():
                began = time.monotonic()
                echo_once(self.connection, b"probe %d\n" % self.rounds)
                self.worst = max(self.worst, time.monotonic() - began)
                self.rounds += 1
                self.stopping.wait(0.05)
        except Exception as error:  # reported by finish()
            self.failure = error

    def fresh(self):
        """A new connection (a TLS handshake on a TLS server) and one echo, within the bound."""
        began = time.monotonic()
        with self.server.connect(timeout=WAIT) as connection:
            echo_once(connection, b"fresh\n")
        elapsed = time.monotonic() - began
        assert elapsed < PROBE_LATENCY, f"a new client waited {elapsed:.2f} s for its first echo"

    def finish(self):
        self.stopping.set()
        self.thread.join(WAIT)
        self.connection.close()
        assert self.failure is None, f"the probe was not served: {self.failure!r}"
        assert self.rounds > 0, "the probe made no round trip"
        assert self.worst < PROBE_LATENCY, f"the probe waited {self.worst:.2f} s for an echo (bound {PROBE_LATENCY} s)"


def attack(server, attacker, seconds=4.0, fresh_during=True, leak_check=True):
    """Runs `attacker(started, stop)` in a thread for `seconds` while the probe runs (the
    attacker sets `started` once its connections are in place, and ends when `stop` is set);
    returns what it returned."""
    baseline = server.descriptors()
    probe = Probe(server)
    started, stop = threading.Event(), threading.Event()
    outcome = {}

    def run():
        try:
            outcome["result"] = attacker(started, stop)
        except Exception as error:
            outcome["error"] = error
        finally:
            started.set()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    assert started.wait(WAIT), "the attack did not get under way"
    if fresh_during:
        probe.fresh()
    thread.join(seconds)
    stop.set()
    thread.join(WAIT)
    assert "error" not in outcome, f"the attacker failed: {outcome['error']!r}"
    probe.finish()
    probe.fresh()
    server.assert_alive()
    if leak_check:
        server.wait_for_descriptors(baseline)
    return outcome.get("result")


def selectors_wait(sockets, write, stop, seconds=0.05):
    """Waits until one of `sockets` is readable (or writable, with `write`), briefly."""
    with selectors.DefaultSelector() as selector:
        for connection in sockets:
            selector.register(connection, selectors.EVENT_READ | (selectors.EVENT_WRITE if write else 0))
        selector.select(seconds)


def close_all(sockets, reset=False):
    for connection in sockets:
        try:
            if reset:
                connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            connection.close()
        except OSError:
            pass


@pytest.fixture(params=sorted(SERVERS))
def name(request):
    return request.param


def slowloris(server, byte):
    """50 clients, each sending a byte a second."""
    def run(started, stop):
        clients = [socket.create_connection(("127.0.0.1", server.port), timeout=WAIT) for _ in range(50)]
        started.set()
        try:
            while not stop.wait(1.0):
                for client in clients:
                    client.send(byte)
        finally:
            close_all(clients)
    return run


def test_slowloris_a_byte_a_second(name):
    server = Server(name)
    try:
        attack(server, slowloris(server, b"x"))
    finally:
        server.stop()


def test_slowloris_against_a_line_server():
    """The C example reading lines: 50 partial lines held, never finished."""
    server = Server("c", lines=True)
    try:
        attack(server, slowloris(server, b"y"))
    finally:
        server.stop()


def never_reading_clients(server, count, reset):
    """`count` clients that send as fast as they can and never read; closed (or reset) when the
    attack ends. Returns the server's peak resident memory meanwhile."""
    def run(started, stop):
        clients = [socket.create_connection(("127.0.0.1", server.port), timeout=WAIT) for _ in range(count)]
        for client in clients:
            client.setblocking(False)
        started.set()
        block = os.urandom(65536)
        peak = 0
        try:
            while not stop.is_set():
                progressed = False
                for client in clients:
                    try:
                        client.send(block)
                        progressed = True
                    except BlockingIOError:
                        pass
                peak = max(peak, server.resident())
                if not progressed:
                    selectors_wait(clients, write=True, stop=stop)
        finally:
            close_all(clients, reset=reset)
        return peak
    return run


def test_clients_that_never_read_while_the_server_writes(name):
    """Five clients send as fast as they can and never read: backpressure keeps the server's
    memory within 48 MiB of where it started, and it serves the probe meanwhile."""
    server = Server(name)
    try:
        before = server.resident()
        # Their descriptors: see the next test.
        peak = attack(server, never_reading_clients(server, 5, reset=True), seconds=5.0, leak_check=False)
        assert peak - before < 48 * 2**20, f"the server grew by {(peak - before) / 2**20:.0f} MiB"
    finally:
        server.stop()


def test_a_client_that_never_read_and_reset_is_let_go(name):
    """Three clients send as fast as they can, never read, and reset: the server, which stopped
    reading them at its write queue's high watermark, lets go of them (their descriptors come
    back). The engine waited for a read of the bytes still unread, and the server for its
    write queue to drain, which a failed connection never does: both waited for good."""
    server = Server(name)
    try:
        baseline = server.descriptors()
        attack(server, never_reading_clients(server, 3, reset=True), seconds=2.0, leak_check=False)
        server.wait_for_descriptors(baseline, seconds=3.0)
    finally:
        server.stop()


def test_a_flood_of_idle_and_half_closed_connections(name):
    """500 connections that say nothing and 200 that send a line and half-close without ever
    reading; the probe is served, and every descriptor comes back once they go."""
    server = Server(name)
    try:
        def flood(started, stop):
            idle, half = [], []
            try:
                for _ in range(500):
                    idle.append(socket.create_connection(("127.0.0.1", server.port), timeout=WAIT))
                for _ in range(200):
                    client = socket.create_connection(("127.0.0.1", server.port), timeout=WAIT)
                    client.sendall(b"half\n")
                    client.shutdown(socket.SHUT_WR)
                    half.append(client)
                started.set()
                stop.wait(WAIT)
            finally:
                close_all(idle)
                close_all(half, reset=True)
        attack(server, flood, seconds=4.0)
    finally:
        server.stop()


def test_resets_in_the_middle_of_the_servers_writes(name):
    """Clients send a mebibyte, read a little of the echo, and reset while the server is still
    writing the rest; 100 of them, one after the other."""
    server = Server(name)
    try:
        def resets(started, stop):
            rounds = 0
            block = os.urandom(1 << 20)
            started.set()
            while not stop.is_set() and rounds < 100:
                client = socket.create_connection(("127.0.0.1", server.port), timeout=WAIT)
                client.setblocking(False)
                sent = 0
                received = 0
                deadline = time.monotonic() + WAIT
                while received < 4096 and time.monotonic() < deadline:
                    if sent < len(block):
                        try:
                            sent += client.send(block[sent:sent + 65536])
                        except BlockingIOError:
                            pass
                    try:
                        chunk = client.recv(65536)
                        assert chunk, "the server closed a client that was sending"
                        received += len(chunk)
                    except BlockingIOError:
                        selectors_wait([client], write=sent < len(block), stop=stop)
                close_all([client], reset=True)
                rounds += 1
            return rounds
        rounds = attack(server, resets, seconds=4.0)
        assert rounds > 0
    finally:
        server.stop()


def test_tls_clients_that_never_send_a_client_hello(name, certificates):
    """100 TLS clients connect and say nothing. The probe (TLS) is served; with a 2 s
    handshake timeout (the C example's --handshake-timeout) each of them is dropped in time."""
    timeout = 2.0
    extra = ["--handshake-timeout", str(timeout)] if name == "c" else []
    server = Server(name, extra=extra, tls=certificates)
    try:
        def silent(started, stop):
            clients = [socket.create_connection(("127.0.0.1", server.port), timeout=WAIT) for _ in range(100)]
            began = time.monotonic()
            started.set()
            try:
                if name == "c":
                    for client in clients:
                        client.settimeout(max(0.1, began + timeout + 3.0 - time.monotonic()))
                        try:
                            assert client.recv(1) == b"", "the server sent something to a silent client"
                        except ConnectionResetError:
                            pass
                    elapsed = time.monotonic() - began
                    assert elapsed < timeout + 3.0, f"silent clients were held {elapsed:.1f} s"
                stop.wait(WAIT)
            except socket.timeout:
                raise AssertionError(f"a silent client was still connected {timeout + 3.0:.0f} s after it connected")
            finally:
                close_all(clients)
        attack(server, silent, seconds=timeout + 3.5)
    finally:
        server.stop()


def test_garbage_to_a_tls_server(name, certificates):
    """Clients send random bytes, an HTTP request or a truncated ClientHello to a TLS server:
    each is closed within two seconds, and the probe is served meanwhile."""
    server = Server(name, tls=certificates)
    try:
        def garbage(started, stop):
            started.set()
            generator = random.Random(34)
            hello = client_hello()
            payloads = [b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n", hello[:len(hello) // 2] + bytes(200),
                        b"\x16\x03\x01\xff\xff" + bytes(300), b"\x17\x03\x03\x00\x10" + bytes(16)]
            rounds = 0
            while not stop.is_set() and rounds < 200:
                payload = payloads[rounds % len(payloads)] if rounds % 2 else bytes(
                    generator.randrange(256) for _ in range(generator.randrange(1, 2000)))
                client = socket.create_connection(("127.0.0.1", server.port), timeout=WAIT)
                try:
                    client.sendall(payload)
                    client.settimeout(2.0)
                    try:
                        while client.recv(65536):
                            pass
                    except ConnectionResetError:
                        pass
                    except socket.timeout:
                        # Waiting for the rest of a record or of a handshake: the handshake
                        # timeout ends it. Only a complete record of garbage must end it at once.
                        pass
                finally:
                    close_all([client])
                rounds += 1
            return rounds
        assert attack(server, garbage, seconds=4.0) > 0
    finally:
        server.stop()


def client_hello():
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    connection = context.wrap_bio(incoming, outgoing, server_hostname="localhost")
    try:
        connection.do_handshake()
    except ssl.SSLWantReadError:
        pass
    return outgoing.read()


def test_descriptor_exhaustion_under_prlimit_64_with_200_clients(name):
    """The server may hold 64 descriptors; 200 clients connect at once, each wanting one echo.
    The server backs off while it has none to spare, serves the probe meanwhile, and every
    client gets its echo in the end; then the descriptors are back."""
    server = Server(name, prefix=["prlimit", "--nofile=64"])
    try:
        def storm(started, stop):
            started.set()
            done = 0
            failures = []

            everyone_connected = threading.Barrier(200, timeout=WAIT)

            def one(index):
                nonlocal done
                try:
                    with socket.create_connection(("127.0.0.1", server.port), timeout=WAIT) as client:
                        # All 200 in the server's backlog at once, then each holds its
                        # connection a while after its echo: the server runs out of descriptors.
                        everyone_connected.wait()
                        client.settimeout(WAIT)
                        echo_once(client, b"client %d\n" % index)
                        stop.wait(0.3)
                    done += 1
                except Exception as error:
                    failures.append(repr(error))

            peak = [0]
            sampling = threading.Event()

            def sample():
                while not sampling.is_set():
                    peak[0] = max(peak[0], server.descriptors())
                    sampling.wait(0.01)

            sampler = threading.Thread(target=sample, daemon=True)
            sampler.start()

            threads = [threading.Thread(target=one, args=(index,), daemon=True) for index in range(200)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(WAIT)
            sampling.set()
            sampler.join(WAIT)
            assert not failures, f"{len(failures)} of 200 clients failed: {failures[:3]}"
            assert done == 200
            # It did run out: it held (nearly) all the descriptors it may have.
            assert peak[0] >= 60, f"the server held at most {peak[0]} descriptors: no exhaustion"
            return done
        # A new client may wait for a descriptor (the back-off retries every 50 ms to 1 s):
        # the fresh probe comes after the storm.
        attack(server, storm, seconds=WAIT, fresh_during=False)
    finally:
        server.stop()
