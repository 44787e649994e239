# SPDX-License-Identifier: MIT
"""TLS interoperability with peers nobody here wrote: openssl s_server and s_client, Python's
ssl module (as client and as server), and curl against a small SocketKit HTTPS responder.

Everything listens on 127.0.0.1 with a port the system picks; every wait has a deadline and
waits on process output or on events (no sleeps)."""
import hashlib
import os
import queue as queue_module
import re
import select
import shutil
import socket
import ssl
import struct
import subprocess
import threading
import time

import pytest

import socketkit
from conftest import WAIT, Recorder, StdlibTLSServer, pattern


def need(tool):
    if shutil.which(tool) is None:
        pytest.skip(f"{tool} is not installed (the Makefile installs it: make tools)")


class TLSRecorder(Recorder):
    tls_info = None

    def socket_did_secure(self, sock):
        # Kept: the session may have ended (and its info with it) by the time a test looks.
        self.tls_info = sock.tls_info
        self._record("secure")


class Process:
    """A subprocess whose output (stdout and stderr together) a thread collects line by
    line, so a test can wait for a line with a deadline."""

    def __init__(self, arguments):
        self.arguments = arguments
        self.process = subprocess.Popen(arguments, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        stderr=subprocess.STDOUT)
        self.lines = []
        self.condition = threading.Condition()
        self.ended = False
        self.thread = threading.Thread(target=self._collect, name=f"output of {arguments[0]}", daemon=True)
        self.thread.start()

    def _collect(self):
        for raw in iter(self.process.stdout.readline, b""):
            with self.condition:
                self.lines.append(raw.decode("utf-8", "replace").rstrip("\r\n"))
                self.condition.notify_all()
        with self.condition:
            self.ended = True
            self.condition.notify_all()

    @property
    def output(self):
        with self.condition:
            return "\n".join(self.lines)

    def wait_for(self, expression, timeout=WAIT):
        """The first match of `expression` in an output line, waiting for it."""
        pattern_ = re.compile(expression)
        deadline = time.monotonic() + timeout
        with self.condition:
            while True:
                for line in self.lines:
                    match = pattern_.search(line)
                    if match:
                        return match
                remaining = deadline - time.monotonic()
                if self.ended or remaining <= 0:
                    raise AssertionError(f"{self.arguments[0]}: no line matching {expression!r} "
                                         f"({'exited' if self.ended else 'timed out'}); output:\n{self.output}")
                self.condition.wait(remaining)

    def send(self, text):
        self.process.stdin.write(text.encode())
        self.process.stdin.flush()

    def close_stdin(self):
        try:
            self.process.stdin.close()
        except OSError:
            pass

    def wait(self, timeout=WAIT):
        """The exit status, once the output was read to its end."""
        status = self.process.wait(timeout)
        self.thread.join(timeout)
        return status

    def kill(self):
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(WAIT)
        self.close_stdin()
        self.thread.join(WAIT)


@pytest.fixture
def processes():
    started = []

    def start(arguments):
        process = Process(arguments)
        started.append(process)
        return process

    yield start
    for process in started:
        process.kill()


class Listener:
    """A SocketKit listener on 127.0.0.1 whose accepted sockets share one recorder and run
    ``on_accept(connection)``."""

    def __init__(self, on_accept):
        self.recorder = TLSRecorder()
        self.accepted = queue_module.Queue()
        self.connections = []
        outer = self

        class Acceptor:
            def socket_did_accept(self, listener, connection):
                connection.delegate = outer.recorder
                outer.connections.append(connection)
                on_accept(connection)
                outer.accepted.put(connection)

        self.socket = socketkit.Socket(Acceptor())
        self.socket.accept_on_interface("127.0.0.1", 0)
        self.port = self.socket.local_port

    def next_connection(self):
        return self.accepted.get(timeout=WAIT)

    def close(self):
        self.socket.close()
        for connection in self.connections:
            connection.abort()


@pytest.fixture
def listeners():
    made = []

    def make(on_accept):
        listener = Listener(on_accept)
        made.append(listener)
        return listener

    yield make
    for listener in made:
        listener.close()


def socketkit_client(port, settings, host="localhost", **options):
    recorder = TLSRecorder()
    client = socketkit.Socket(recorder, **options)
    client.ipv6_enabled = False  # the peers listen on 127.0.0.1
    client.connect_to_host(host, port, timeout=10)
    client.start_tls(settings)
    return client, recorder


def s_server(processes, certs, *options, variant="server"):
    """openssl s_server for one connection; returns (process, port)."""
    need("openssl")
    if variant == "server":
        identity = ["-cert", certs.path("server.pem"), "-cert_chain", certs.path("intermediate.pem"),
                    "-key", certs.path("server.key")]
    else:
        identity = ["-cert", certs.path(f"{variant}-chain.pem"), "-key", certs.path(f"{variant}.key")]
    process = processes(["openssl", "s_server", "-accept", "127.0.0.1:0", "-naccept", "1", *identity, *options])
    port = int(process.wait_for(r"^ACCEPT 127\.0\.0\.1:(\d+)").group(1))
    return process, port


# ======================================================================================
# openssl s_server with a SocketKit client
# ======================================================================================

@pytest.mark.parametrize("version", ["TLSv1.2", "TLSv1.3"])
def test_socketkit_client_against_openssl_s_server(processes, certs, version):
    flag = {"TLSv1.2": "-tls1_2", "TLSv1.3": "-tls1_3"}[version]
    server, port = s_server(processes, certs, flag, "-alpn", "http/1.1")
    client, recorder = socketkit_client(port, certs.client(alpn_protocols=["h2", "http/1.1"]))
    try:
        recorder.expect("secure")
        info = client.tls_info
        assert info.protocol_version == version
        assert info.alpn_protocol == "http/1.1"
        assert info.server_name == "localhost"
        assert len(info.peer_certificates) == 2
        client.write(b"hello from socketkit\n")
        server.wait_for(r"^hello from socketkit$")
        client.read_to_data(socketkit.LF)
        server.send("hello from openssl\n")
        assert recorder.expect("read")[0][1] == b"hello from openssl\n"
        server.wait_for(rf"^CIPHER is {re.escape(info.cipher)}$")
        client.disconnect()  # close_notify
        assert recorder.disconnect_error() is None
        server.wait_for(r"^CONNECTION CLOSED$")
        assert server.wait() == 0
    finally:
        client.close()


def test_openssl_s_server_asking_to_renegotiate_is_refused(processes, certs):
    # SocketKit never renegotiates: it answers the server's HelloRequest with a
    # no_renegotiation alert, and this server, insisting, ends the connection.
    server, port = s_server(processes, certs, "-tls1_2")
    client, recorder = socketkit_client(port, certs.client())
    try:
        recorder.expect("secure")
        client.read()
        server.wait_for(r"^CIPHER is ")
        server.send("r\n")  # s_server: SSL_renegotiate
        assert type(recorder.disconnect_error()) is socketkit.TLSFailedError
        server.wait_for(r"no renegotiation")
        assert recorder.count("read") == 0
    finally:
        client.close()


@pytest.mark.parametrize("version", ["TLSv1.2", "TLSv1.3"])
def test_openssl_s_server_requiring_a_client_certificate(processes, certs, version):
    flag = {"TLSv1.2": "-tls1_2", "TLSv1.3": "-tls1_3"}[version]
    server, port = s_server(processes, certs, flag, "-Verify", "2", "-CAfile", certs.path("ca.pem"),
                            "-verify_return_error")
    settings = certs.client(certificate_chain_file=certs.path("client-chain.pem"),
                            private_key_file=certs.path("client.key"))
    client, recorder = socketkit_client(port, settings)
    try:
        recorder.expect("secure")
        client.write(b"authenticated\n")
        server.wait_for(r"^authenticated$")
        server.wait_for(r"subject=.*SocketKit Test Client")
        server.wait_for(r"verify return:1")
        client.disconnect()
        server.wait()
    finally:
        client.close()


@pytest.mark.parametrize("version", ["TLSv1.2", "TLSv1.3"])
def test_openssl_s_server_refuses_a_client_without_a_certificate(processes, certs, version):
    flag = {"TLSv1.2": "-tls1_2", "TLSv1.3": "-tls1_3"}[version]
    server, port = s_server(processes, certs, flag, "-Verify", "2", "-CAfile", certs.path("ca.pem"),
                            "-verify_return_error")
    client, recorder = socketkit_client(port, certs.client())
    try:
        try:
            client.read()  # TLS 1.3: the client hears of it when it next reads
        except socketkit.BadConfigError:
            pass  # the refusal already ended the session (TLS 1.2's comes in the handshake)
        error = recorder.disconnect_error()
        if version == "TLSv1.3":
            assert type(error) is socketkit.ClientCertificateRequiredError, repr(error)
        else:  # s_server answers with a handshake_failure alert
            assert isinstance(error, (socketkit.TLSFailedError, socketkit.ClientCertificateRequiredError)), repr(error)
        server.wait()
    finally:
        client.close()


@pytest.mark.parametrize("variant", ["rsa1024", "sha1"])
def test_weak_certificates_from_openssl_s_server_are_refused(processes, certs, variant):
    server, port = s_server(processes, certs, "-cipher", "DEFAULT:@SECLEVEL=0", variant=variant)
    client, recorder = socketkit_client(port, certs.client())
    try:
        error = recorder.disconnect_error()
        assert type(error) is socketkit.CertificateInvalidError, f"{variant}: {error!r}"
        server.wait()
    finally:
        client.close()


def test_openssl_s_server_www_page_and_its_close_notify(processes, certs):
    server, port = s_server(processes, certs, "-www")
    client, recorder = socketkit_client(port, certs.client())
    def read_on(sock, data, tag):  # read to the end
        try:
            sock.read(timeout=WAIT)
        except socketkit.BadConfigError:
            pass  # the page and its close_notify were in: the session ended before this ran

    recorder.on_read = read_on
    try:
        client.write(b"GET / HTTP/1.0\r\n\r\n")
        client.read(timeout=WAIT)
        # The page ends with close_notify: a clean end, never truncation.
        error = recorder.disconnect_error()
        assert type(error) is socketkit.ClosedError, repr(error)
        page = recorder.data()
        assert page.startswith(b"HTTP/1.0 200 ok\r\n"), page[:100]
        assert page.rstrip().endswith(b"</HTML>"), page[-100:]
        server.wait()
    finally:
        client.close()


# ======================================================================================
# openssl s_client against a SocketKit server
# ======================================================================================

@pytest.mark.parametrize("version", ["TLSv1.2", "TLSv1.3"])
def test_openssl_s_client_against_a_socketkit_server(processes, listeners, certs, version):
    need("openssl")

    def serve(connection):
        connection.start_tls(certs.server(alpn_protocols=["http/1.1"]))
        connection.write(b"hello from socketkit\n")
        connection.read_to_data(socketkit.LF)

    listener = listeners(serve)
    flag = {"TLSv1.2": "-tls1_2", "TLSv1.3": "-tls1_3"}[version]
    client = processes(["openssl", "s_client", "-connect", f"127.0.0.1:{listener.port}", "-servername", "localhost",
                        "-verify_hostname", "localhost", "-CAfile", certs.path("ca.pem"), "-verify_return_error",
                        "-alpn", "http/1.1", flag])
    client.wait_for(r"hello from socketkit")
    connection = listener.next_connection()
    listener.recorder.expect("secure")
    info = connection.tls_info
    client.send("hello from s_client\n")
    assert listener.recorder.expect("read")[0][1] == b"hello from s_client\n"
    connection.read()
    client.close_stdin()  # s_client sends close_notify and leaves
    assert client.wait() == 0, client.output
    error = listener.recorder.disconnect_error()
    assert type(error) is socketkit.ClosedError, repr(error)
    # What s_client printed (its output is complete once it exited: stdout is buffered).
    assert client.wait_for(r"Verify return code: (\d+)").group(1) == "0"
    client.wait_for(r"Verified peername: localhost")
    client.wait_for(rf"^\s*Protocol\s*:\s*{re.escape(version)}$")
    cipher = client.wait_for(r"^\s*Cipher\s*:\s*(\S+)$").group(1)
    client.wait_for(r"ALPN protocol: http/1\.1")
    assert (info.protocol_version, info.cipher, info.server_name, info.alpn_protocol) == (
        version, cipher, "localhost", "http/1.1")


def test_openssl_s_client_with_a_certificate_for_a_server_that_requires_one(processes, listeners, certs):
    need("openssl")
    settings = certs.server(verification="require", trust_file=certs.path("ca.pem"))
    listener = listeners(lambda connection: (connection.start_tls(settings), connection.write(b"welcome\n")))
    client = processes(["openssl", "s_client", "-connect", f"127.0.0.1:{listener.port}", "-servername", "localhost",
                        "-CAfile", certs.path("ca.pem"), "-verify_return_error",
                        "-cert", certs.path("client.pem"), "-key", certs.path("client.key")])
    client.wait_for(r"welcome")  # (maybe in the middle of a line: stdout and stderr interleave)
    connection = listener.next_connection()
    listener.recorder.expect("secure")
    leaf = connection.tls_info.peer_certificates[0]
    assert "SocketKit Test Client" in leaf.subject
    assert leaf.der == ssl.PEM_cert_to_DER_cert(certs.text("client.pem"))
    client.close_stdin()
    client.wait()


def test_openssl_s_client_without_a_certificate_is_refused(processes, listeners, certs):
    need("openssl")
    settings = certs.server(verification="require", trust_file=certs.path("ca.pem"))
    listener = listeners(lambda connection: (connection.start_tls(settings), connection.read()))
    client = processes(["openssl", "s_client", "-connect", f"127.0.0.1:{listener.port}", "-servername", "localhost",
                        "-CAfile", certs.path("ca.pem")])
    error = listener.recorder.disconnect_error()
    assert type(error) is socketkit.ClientCertificateRequiredError, repr(error)
    client.wait_for(r"alert certificate required|alert handshake failure|certificate required")
    client.close_stdin()
    client.wait()


# ======================================================================================
# Python's ssl module
# ======================================================================================

def stdlib_client_context(certs, **options):
    context = ssl.create_default_context(cafile=certs.path("ca.pem"))
    for name, value in options.items():
        setattr(context, name, value)
    return context


@pytest.mark.parametrize("version", [ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3])
def test_python_ssl_client_against_a_socketkit_server(listeners, certs, version):
    def serve(connection):
        connection.start_tls(certs.server(alpn_protocols=["h2", "http/1.1"]))
        connection.write(b"hello\n")
        connection.read_to_length(1 << 20)

    listener = listeners(serve)
    context = stdlib_client_context(certs, maximum_version=version)
    context.set_alpn_protocols(["http/1.1"])
    with socket.create_connection(("127.0.0.1", listener.port), timeout=WAIT) as raw:
        with context.wrap_socket(raw, server_hostname="localhost") as tls:
            assert tls.version() == version.name.replace("_", ".")
            assert tls.selected_alpn_protocol() == "http/1.1"
            buffer = b""
            while not buffer.endswith(b"\n"):
                buffer += tls.recv(64)
            assert buffer == b"hello\n"
            upload = pattern(1 << 20, seed=11)
            tls.sendall(upload)
            connection = listener.next_connection()
            received = listener.recorder.expect_bytes(len(upload))
            assert hashlib.sha256(received).digest() == hashlib.sha256(upload).digest()
            info = connection.tls_info
            assert info.protocol_version == tls.version()
            assert info.cipher == tls.cipher()[0]
            assert info.server_name == "localhost"
            connection.read()
            try:
                # close_notify, then waits for SocketKit's (RFC 8446 6.1, RFC 5246 7.2.1)
                tls.unwrap()
            finally:
                error = listener.recorder.disconnect_error()
                assert type(error) is socketkit.ClosedError, repr(error)


def test_a_certificate_renamed_over_on_disk_is_served_to_the_next_python_ssl_client(listeners, certs, tmp_path):
    # One settings value for every connection, naming files that certbot-style renewal
    # replaces: write the new file beside the old one, rename it over.
    chain, key = tmp_path / "chain.pem", tmp_path / "key.pem"

    def install(variant, rename=True):
        for name, path in ((f"{variant}-chain.pem", chain), (f"{variant}.key", key)):
            target = path.with_suffix(".new") if rename else path
            target.write_text(certs.text(name))
            if rename:
                target.rename(path)

    def leaf(variant):  # the chain file's first certificate
        end = "-----END CERTIFICATE-----"
        return ssl.PEM_cert_to_DER_cert(certs.text(f"{variant}-chain.pem").split(end)[0] + end + "\n")

    install("server", rename=False)
    settings = socketkit.TLSSettings.server(certificate_chain_file=str(chain), private_key_file=str(key))
    listener = listeners(lambda connection: (connection.start_tls(settings), connection.read_to_data(b"\n")))
    context = stdlib_client_context(certs, check_hostname=False)  # the chain is verified, the name is ours

    def connect():
        raw = socket.create_connection(("127.0.0.1", listener.port), timeout=WAIT)
        return context.wrap_socket(raw, server_hostname="peer.test")

    with connect() as before:
        first = before.getpeercert()
        assert before.getpeercert(binary_form=True) == leaf("server")
        assert ("commonName", "localhost") in first["subject"][0]
        listener.recorder.expect("secure")

        install("wrong-host")
        with connect() as after:
            seen = after.getpeercert()
            assert after.getpeercert(binary_form=True) == leaf("wrong-host"), seen
            assert ("commonName", "wrong.example") in seen["subject"][0]
            assert seen["serialNumber"] != first["serialNumber"]
            listener.recorder.expect("secure", 2)

        # The connection made before kept its context: it still works, on its certificate.
        before.sendall(b"still here\n")
        listener.recorder.expect("read")
        assert listener.recorder.data() == b"still here\n"
        connection = listener.connections[0]
        assert connection.tls_info is not None
        connection.write(b"yes\n")
        assert before.recv(16) == b"yes\n"
        assert before.getpeercert(binary_form=True) == leaf("server")


def test_server_names_choose_the_certificate_each_python_ssl_client_asks_for(listeners, certs):
    settings = certs.server(server_names={"Wrong.Example": certs.server("wrong-host"),
                                          "*.example.test": certs.server("dns-ip")})
    listener = listeners(lambda connection: connection.start_tls(settings))
    context = stdlib_client_context(certs, check_hostname=False)  # the names are checked below

    served = []

    def common_name(server_hostname):
        with socket.create_connection(("127.0.0.1", listener.port), timeout=WAIT) as raw:
            with context.wrap_socket(raw, server_hostname=server_hostname) as tls:
                subject = dict(pair[0] for pair in tls.getpeercert()["subject"])
                served.append(server_hostname)
                listener.recorder.expect("secure", len(served))
                assert listener.recorder.tls_info.server_name == server_hostname  # what the server saw
                return subject["commonName"]

    assert common_name("wrong.example") == "wrong.example"
    assert common_name("WRONG.EXAMPLE") == "wrong.example"
    assert common_name("localhost") == "localhost"
    assert common_name("a.example.test") == "dns-ip.invalid"
    assert common_name("a.b.example.test") == "localhost"  # one label only
    assert common_name("unknown.example") == "localhost"  # unknown: the default
    assert common_name(None) == "localhost"  # no SNI: the default


def test_bad_server_names_raise(certs):
    named = certs.server("wrong-host")
    for bad in ("not a name", "*.com", "x\0.example"):
        with pytest.raises(socketkit.TLSSettingsError):
            certs.server(server_names={bad: named}).check()
    with pytest.raises(socketkit.BadParamError):
        certs.server(server_names={"": named}).check()
    with pytest.raises(socketkit.TLSSettingsError):
        certs.server(server_names={"a.example": certs.client()}).check()
    with pytest.raises(socketkit.TLSSettingsError):
        certs.client(server_names={"a.example": named}).check()
    with pytest.raises(socketkit.TLSSettingsError):
        certs.server(server_names={"a.example": "wrong-host.pem"}).check()  # type: ignore[dict-item]
    with pytest.raises(socketkit.TLSSettingsError):
        certs.server(server_names=[("a.example", named)]).check()
    certs.server(server_names={"a.example": named}).check()


def test_a_python_ssl_client_that_drops_tcp_without_close_notify_is_truncation(listeners, certs):
    listener = listeners(lambda connection: (connection.start_tls(certs.server()), connection.read_to_length(100)))
    context = stdlib_client_context(certs)
    raw = socket.create_connection(("127.0.0.1", listener.port), timeout=WAIT)
    tls = context.wrap_socket(raw, server_hostname="localhost")
    tls.sendall(b"only part of it")
    listener.recorder.expect("secure")
    # Close the TCP connection under the TLS layer: a FIN without close_notify.
    raw_descriptor = socket.socket(fileno=tls.detach())
    raw_descriptor.shutdown(socket.SHUT_WR)
    error = listener.recorder.disconnect_error()
    assert type(error) is socketkit.TruncatedTLSError, repr(error)
    assert listener.recorder.count("read") == 0
    raw_descriptor.close()


def test_records_that_arrived_before_a_truncation_are_read_at_once_then_the_error(listeners, certs):
    # Three full records and a FIN without close_notify wait in the kernel before the read
    # is queued: one read gets every byte of the three (the engine decrypts all that
    # arrived, not one record per read), and the truncation is reported after it, with no
    # further read queued (nothing unread is left before it).
    connections = queue_module.Queue()
    listener = listeners(lambda connection: (connection.start_tls(certs.server()), connections.put(connection)))
    context = stdlib_client_context(certs)
    raw = socket.create_connection(("127.0.0.1", listener.port), timeout=WAIT)
    tls = context.wrap_socket(raw, server_hostname="localhost")
    listener.recorder.expect("secure")
    upload = pattern(3 * 16384, seed=5)
    tls.sendall(upload)  # on loopback, in the server's receive queue when this returns
    raw_descriptor = socket.socket(fileno=tls.detach())
    raw_descriptor.shutdown(socket.SHUT_WR)
    connection = connections.get(timeout=WAIT)
    # Until the FIN, and so every record before it, is in the server's receive queue.
    arrived = threading.Event()

    def wait_for_the_fin(descriptors):
        poller = select.poll()
        poller.register(descriptors.primary, select.POLLRDHUP)
        if poller.poll(WAIT * 1000):
            arrived.set()

    connection.perform(wait_for_the_fin)
    assert arrived.wait(WAIT)
    connection.read()  # whatever is available
    error = listener.recorder.disconnect_error()
    assert type(error) is socketkit.TruncatedTLSError, repr(error)
    reads = listener.recorder.expect("read")
    assert [len(event[1]) for event in reads] == [len(upload)]
    assert reads[0][1] == upload
    raw_descriptor.close()


def test_python_ssl_starttls_client_against_a_socketkit_server(listeners, certs):
    def serve(connection):
        connection.read_to_data(socketkit.CRLF, tag=1)
        connection.write(b"220 ready\r\n")
        connection.start_tls(certs.server())
        connection.read_to_data(socketkit.CRLF, tag=2)
        connection.write(b"250 secret received\r\n")
        connection.read(tag=3)

    listener = listeners(serve)
    with socket.create_connection(("127.0.0.1", listener.port), timeout=WAIT) as raw:
        raw.sendall(b"STARTTLS\r\n")
        reply = b""
        while not reply.endswith(b"\r\n"):
            reply += raw.recv(1)  # byte by byte: not a byte of the handshake is taken
        assert reply == b"220 ready\r\n"
        with stdlib_client_context(certs).wrap_socket(raw, server_hostname="localhost") as tls:
            tls.sendall(b"secret\r\n")
            answer = b""
            while not answer.endswith(b"\r\n"):
                answer += tls.recv(64)
            assert answer == b"250 secret received\r\n"
            reads = listener.recorder.expect("read", 2)
            assert [read[1:] for read in reads] == [(b"STARTTLS\r\n", 1), (b"secret\r\n", 2)]
            tls.unwrap()  # close_notify both ways
    assert type(listener.recorder.disconnect_error()) is socketkit.ClosedError


@pytest.mark.parametrize("version", [ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3])
@pytest.mark.parametrize("mutual", [False, True])
def test_socketkit_client_against_a_python_ssl_server(certs, version, mutual):
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.maximum_version = version
    context.load_cert_chain(certs.path("server-chain.pem"), certs.path("server.key"))
    context.set_alpn_protocols(["h2"])
    if mutual:
        context.verify_mode = ssl.CERT_REQUIRED
        context.load_verify_locations(certs.path("ca.pem"))
    download = pattern(1 << 20, seed=13)

    seen = {}

    def handler(tls):
        line = b""
        while not line.endswith(b"\n"):
            line += tls.recv(64)
        tls.sendall(line.upper() + download)
        seen.update(line=line, peer=tls.getpeercert(), version=tls.version())
        tls.unwrap()  # close_notify, then waits for the client's (RFC 8446 6.1, RFC 5246 7.2.1)

    server = StdlibTLSServer(context, handler)
    settings = certs.client(alpn_protocols=["h2"])
    if mutual:
        settings = certs.client(alpn_protocols=["h2"], certificate_chain_file=certs.path("client-chain.pem"),
                                private_key_file=certs.path("client.key"))
    # Callbacks on the loop: socket_did_secure sees the session's info before the session
    # can end (the server's close_notify ends it at once once the download is read).
    client, recorder = socketkit_client(server.port, settings, queue=None)
    try:
        client.write(b"ping\n")
        client.read_to_data(socketkit.LF, tag=1)
        client.read_to_length(len(download), tag=2)
        reads = recorder.expect("read", 2)
        assert reads[0][1:] == (b"PING\n", 1)
        assert hashlib.sha256(reads[1][1]).digest() == hashlib.sha256(download).digest()
        info = recorder.tls_info
        assert info.protocol_version == version.name.replace("_", ".")
        assert info.alpn_protocol == "h2"
        # The server's close_notify (reported with no read queued: nothing unread is left).
        assert type(recorder.disconnect_error()) is socketkit.ClosedError
        server.join()
        assert seen["line"] == b"ping\n" and seen["version"] == info.protocol_version
        if mutual:
            assert seen["peer"]["subject"] == ((("commonName", "SocketKit Test Client"),),), seen["peer"]
        else:
            assert not seen["peer"]
        # The server's unwrap() got the client's close_notify in reply.
        assert not server.errors, server.errors
    finally:
        client.close()
        server.close()


def test_a_python_ssl_server_that_drops_tcp_is_truncation(certs):
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(certs.path("server-chain.pem"), certs.path("server.key"))

    def handler(tls):
        tls.sendall(b"12345")
        socket.socket(fileno=tls.detach()).shutdown(socket.SHUT_RDWR)  # no close_notify

    server = StdlibTLSServer(context, handler)
    client, recorder = socketkit_client(server.port, certs.client())
    try:
        client.read_to_length(10)
        error = recorder.disconnect_error()
        assert type(error) is socketkit.TruncatedTLSError, repr(error)
        server.join()
    finally:
        client.close()
        server.close()


# ======================================================================================
# curl against a SocketKit HTTPS responder
# ======================================================================================

BODY = b"<h1>Hello from SocketKit over TLS</h1>\n"


class HttpsResponder:
    """Reads a request to its blank line, writes a fixed HTTP/1.1 response, disconnects once
    it is written."""

    def __init__(self, listeners, settings):
        self.requests = queue_module.Queue()
        outer = self

        class Connection(TLSRecorder):
            def socket_did_read(self, sock, data, tag):
                super().socket_did_read(sock, data, tag)
                outer.requests.put(bytes(data))
                sock.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: %d\r\n"
                           b"Connection: close\r\n\r\n%s" % (len(BODY), BODY))
                sock.disconnect_after_writing()

        def serve(connection):
            # On the loop thread, the response and disconnect_after_writing happen in one
            # turn of the loop: from a serial queue, a client that has the whole response
            # may close before the disconnect arrives, and an idle socket reports the peer's
            # close at once (ClosedError), as GCDAsyncSocket does.
            connection.queue = None
            connection.delegate = self.recorder
            connection.start_tls(settings)
            connection.read_to_data(b"\r\n\r\n", max_length=65536, timeout=WAIT)

        self.recorder = Connection()
        self.listener = listeners(serve)
        self.port = self.listener.port


@pytest.mark.parametrize("options, version", [([], "TLSv1.3"), (["--tlsv1.2", "--tls-max", "1.2"], "TLSv1.2")])
def test_curl_fetches_a_page_from_a_socketkit_https_responder(processes, listeners, certs, options, version):
    need("curl")
    responder = HttpsResponder(listeners, certs.server(alpn_protocols=["http/1.1"]))
    url = f"https://localhost:{responder.port}/"
    curl = processes(["curl", "--silent", "--show-error", "--verbose", "--max-time", "20",
                      "--cacert", certs.path("ca.pem"), *options, url])
    assert curl.wait() == 0, curl.output
    assert BODY.decode().strip() in curl.output
    curl.wait_for(rf"SSL connection using {re.escape(version)}")
    curl.wait_for(r"ALPN.*http/1\.1")
    curl.wait_for(r"SSL certificate verify ok")
    request = responder.requests.get(timeout=WAIT)
    assert request.startswith(b"GET / HTTP/1.1\r\n"), request
    assert f"Host: localhost:{responder.port}\r\n".encode() in request
    assert responder.recorder.disconnect_error() is None  # everything written, then closed


def test_curl_without_the_test_root_refuses_and_the_server_hears_why(processes, listeners, certs):
    need("curl")
    responder = HttpsResponder(listeners, certs.server())
    curl = processes(["curl", "--silent", "--show-error", "--max-time", "20",
                      "--capath", "/nonexistent", "--cacert", certs.path("other-ca.pem"),
                      f"https://localhost:{responder.port}/"])
    assert curl.wait() == 60, curl.output  # CURLE_PEER_FAILED_VERIFICATION
    error = responder.recorder.disconnect_error()
    # The client's unknown_ca alert (TLSFailedError); or, when curl closed with bytes of our
    # flight unread, a reset that can overtake the alert (TLSPeerClosedError, ECONNRESET).
    assert type(error) in (socketkit.TLSFailedError, socketkit.TLSPeerClosedError), repr(error)
    assert responder.requests.empty()


# ======================================================================================
# Handshake flights and Nagle: the first echo must not wait for a delayed ACK
# ======================================================================================

# Checked by what the kernel counted rather than by the clock (a loaded machine moves
# times, not segments): with no-delay off, the side under test sends the segments with data
# that coalescing gives, and one more when the last flight and what follows leave apart.

#: offsetof(struct tcp_info, tcpi_data_segs_out) in linux/tcp.h (Linux 4.6); the kernel
#: only ever appends to that layout.
TCPI_DATA_SEGS_OUT = 156


def data_segments_sent(sock):
    """The segments with data `sock` has sent, as the kernel counted them (TCP_INFO)."""
    counted = []
    done = threading.Event()

    def read(descriptors):
        try:
            raw = socket.socket(fileno=os.dup(descriptors.primary))
            try:
                info = raw.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 232)
                counted.append(struct.unpack_from("I", info, TCPI_DATA_SEGS_OUT)[0])
            finally:
                raw.close()
        finally:
            done.set()

    sock.perform(read)
    assert done.wait(WAIT) and counted, "TCP_INFO could not be read"
    return counted[0]


def test_a_socketkit_client_sends_its_finished_and_first_write_together(certs):
    """No-delay off. The client's last flight (Finished) and the write queued behind
    start_tls leave in one send. Sent apart, against a server that has nothing to answer
    the Finished with (here Python's ssl with no session tickets; a TLS 1.2 resumption
    too), the write waited under Nagle for the server's delayed ACK: ~44 ms instead of ~2.
    The client sends its ClientHello, then the Finished with the write: two segments with
    data; sent apart, three."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(certs.path("server-chain.pem"), certs.path("server.key"))
    context.num_tickets = 0

    def echo_then_wait_for_the_close(tls):
        tls.sendall(tls.recv(100))
        try:
            tls.recv(100)  # the connection stays up until the client has counted
        except OSError:
            pass

    server = StdlibTLSServer(context, echo_then_wait_for_the_close, connections=3)
    try:
        for _ in range(3):
            recorder = TLSRecorder()
            client = socketkit.Socket(recorder)
            client.no_delay = False
            client.connect_to_host("127.0.0.1", server.port, timeout=WAIT)
            settings = certs.client(session_resumption=False)

            def start(descriptors, client=client, settings=settings):
                # One turn of the client's loop: the write is in the queue before the
                # handshake can finish (the premise), however the scheduler treats this
                # thread.
                client.start_tls(settings)
                client.write(b"ping\n")
                client.read_to_data(socketkit.LF)

            client.perform(start)
            assert recorder.expect("read")[0][1] == b"ping\n"
            try:
                assert data_segments_sent(client) == 2
            finally:
                client.close()
    finally:
        server.close()
    assert not server.errors, server.errors


def coalescing_client(port, certs):
    """Python's ssl over memory BIOs, as browsers send it: the Finished and the first
    request in one write. Returns the connection, open, once the echo came back."""
    context = ssl.create_default_context(cafile=certs.path("ca.pem"))
    raw = socket.create_connection(("127.0.0.1", port), timeout=WAIT)
    try:
        incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        tls = context.wrap_bio(incoming, outgoing, server_hostname="localhost")
        while True:
            try:
                tls.do_handshake()
                break
            except ssl.SSLWantReadError:
                if outgoing.pending:
                    raw.sendall(outgoing.read())
                incoming.write(raw.recv(65536))
        tls.write(b"ping\n")
        raw.sendall(outgoing.read())  # Finished + the request: one send
        echoed = b""
        while echoed != b"ping\n":
            try:
                echoed += tls.read(100)
            except ssl.SSLWantReadError:
                data = raw.recv(65536)
                assert data, f"closed after {echoed!r}"
                incoming.write(data)
        return raw
    except BaseException:
        raw.close()
        raise


def test_a_socketkit_server_sends_its_session_tickets_with_its_first_answer(certs):
    """No-delay off, callbacks on the loop thread (as the C echo example). The client sends
    its Finished and a request together; the server's session tickets (its last flight) and
    the echo written by did_read leave in one send. Sent apart, the echo waited under Nagle
    for the client's delayed ACK of the tickets: ~44 ms instead of ~2."""

    class Echo:
        def socket_did_read(self, sock, data, tag):
            sock.write(bytes(data))

    connections = []

    class Acceptor:
        def socket_did_accept(self, listener, connection):
            connection.delegate = Echo()
            connections.append(connection)
            connection.start_tls(certs.server())
            connection.read_to_data(socketkit.LF)

    listener = socketkit.Socket(Acceptor(), queue=None)
    listener.no_delay = False  # the accepted sockets take it: the side under test
    listener.accept_on_interface("127.0.0.1", 0)
    try:
        for index in range(3):
            with coalescing_client(listener.local_port, certs):
                # The server's flight, then its tickets with the echo; apart, three.
                assert data_segments_sent(connections[index]) == 2
    finally:
        listener.close()
        for connection in connections:
            connection.abort()
