# SPDX-License-Identifier: MIT
"""TLS through the binding: every setting, every failure code, manual trust (now, later, on
every kind of callback queue), STARTTLS both ways, bulk data, truncation, asyncio.

The certificates come from Tests/certs/make-test-certs.sh (the ``certs`` fixture). Both ends
are SocketKit sockets unless a test needs a peer that misbehaves, which is then made with
Python's socket or ssl module."""
import asyncio
import datetime
import errno
import hashlib
import os
import queue as queue_module
import select
import shutil
import socket
import ssl
import subprocess
import sys
import threading
import time

import pytest

import socketkit
from socketkit import aio
from conftest import WAIT, Recorder, StdlibTLSServer, pattern

UNSET = object()


class TLSRecorder(Recorder):
    """A Recorder that also records ("secure",). No trust method: manual trust rejects."""

    def socket_did_secure(self, sock):
        self._record("secure")


class TrustRecorder(TLSRecorder):
    """Records ("trust", trust) and answers with ``answer(sock, trust)`` (None: later)."""

    def __init__(self, answer=None):
        super().__init__()
        self.answer = answer

    def socket_did_receive_trust(self, sock, trust):
        self._record("trust", trust)
        return self.answer(sock, trust) if self.answer else None


class Pair:
    """A SocketKit client connected to a SocketKit listener's accepted socket (``server``),
    each with its own recorder; nothing started yet."""

    def __init__(self, host="127.0.0.1", client_recorder=None, server_recorder=None, queue=UNSET,
                 wait_for_connect=True):
        self.client_recorder = client_recorder or TLSRecorder()
        self.server_recorder = server_recorder or TLSRecorder()
        accepted = queue_module.Queue()
        server_recorder_ = self.server_recorder

        class Acceptor:
            def socket_did_accept(self, listener, new_socket):
                new_socket.delegate = server_recorder_
                accepted.put(new_socket)

        self.listener = socketkit.Socket(Acceptor())
        self.listener.accept_on_interface("127.0.0.1", 0)
        options = {} if queue is UNSET else {"queue": queue}
        self.client = socketkit.Socket(self.client_recorder, **options)
        self.client.ipv6_enabled = False  # "localhost" means 127.0.0.1, where the listener is
        self.client.connect_to_host(host, self.listener.local_port, timeout=10)
        self.server = accepted.get(timeout=WAIT)
        if wait_for_connect:  # not with a HostQueue nobody drains yet
            self.client_recorder.expect("connect")

    def close(self):
        for sock in (self.client, self.server, self.listener):
            sock.abort()


@pytest.fixture
def make_pair():
    made = []

    def make(**options):
        pair = Pair(**options)
        made.append(pair)
        return pair

    yield make
    for pair in made:
        pair.close()


@pytest.fixture
def secure_pair(make_pair, certs):
    """secure_pair(server=..., client=..., **Pair options): both ends started at once."""

    def make(server=None, client=None, **options):
        pair = make_pair(**options)
        pair.server.start_tls(server if server is not None else certs.server())
        pair.client.start_tls(client if client is not None else certs.client())
        return pair

    return make


@pytest.fixture
def client_failure(secure_pair):
    """The exception the client disconnected with (None for a clean close)."""

    def failure(server, client=None, **options):
        pair = secure_pair(server=server, client=client, **options)
        error = pair.client_recorder.disconnect_error()
        assert pair.client_recorder.count("secure") == 0, pair.client_recorder.events
        return error

    return failure


class RawListener:
    """A listener made with Python's socket module, for peers that misbehave."""

    def __init__(self):
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(WAIT)
        self.port = self.listener.getsockname()[1]

    def accept(self):
        connection, _ = self.listener.accept()
        connection.settimeout(WAIT)
        return connection

    def close(self):
        self.listener.close()


def receive_exactly(connection, count):
    data = b""
    while len(data) < count:
        chunk = connection.recv(count - len(data))
        assert chunk, f"closed after {len(data)} of {count} bytes"
        data += chunk
    return data


class HostPump:
    """Drains a HostQueue on a thread of the test's own (as a host program's loop would)."""

    def __init__(self):
        self.queue = socketkit.HostQueue()
        self.threads = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="host-pump", daemon=True)
        self._thread.start()

    def _run(self):
        self.threads.add(threading.get_ident())
        while not self._stop.is_set():
            if select.select([self.queue.fileno()], [], [], 0.05)[0]:
                self.queue.drain()

    def close(self):
        self._stop.set()
        self._thread.join(WAIT)
        self.queue.close()


def run(coroutine):
    return asyncio.run(asyncio.wait_for(coroutine, 60))


def sha256(data):
    return hashlib.sha256(data).hexdigest()


# ======================================================================================
# Settings and certificates (no connection)
# ======================================================================================

def test_good_settings_check(certs):
    assert certs.server().check() is not None
    certs.client().check()
    socketkit.TLSSettings().check()  # the system store
    socketkit.TLSSettings("server", certificate_chain_pem=certs.text("server-chain.pem"),
                          private_key_pem=certs.text("server-encrypted.key").encode(),
                          private_key_password="secret").check()
    certs.server(private_key_file=None, private_key_pem=certs.text("server.key")).check()


@pytest.mark.parametrize("case", [
    "missing trust file", "missing trust directory", "garbage trust pem", "missing chain", "missing key",
    "wrong password", "no password", "mismatched key", "server without identity", "chain without key",
    "unknown cipher", "unknown suite", "maximum below minimum", "require on a client", "rsa1024 at level 2",
    "sha1 at level 2", "empty alpn name",
])
def test_unusable_settings_raise_tls_settings_error(certs, case):
    settings = {
        "missing trust file": lambda: certs.client(trust_file="/nonexistent/ca.pem"),
        "missing trust directory": lambda: certs.client(trust_file=None, trust_directory="/nonexistent/dir"),
        "garbage trust pem": lambda: certs.client(trust_file=None, trust_pem="not a certificate"),
        "missing chain": lambda: socketkit.TLSSettings.server("/nonexistent/chain.pem", certs.path("server.key")),
        "missing key": lambda: socketkit.TLSSettings.server(certs.path("server-chain.pem"), "/nonexistent/key"),
        "wrong password": lambda: certs.server(private_key_file=certs.path("server-encrypted.key"),
                                               private_key_password="wrong"),
        "no password": lambda: certs.server(private_key_file=certs.path("server-encrypted.key")),
        "mismatched key": lambda: certs.server(private_key_file=certs.path("client.key")),
        "server without identity": lambda: socketkit.TLSSettings("server"),
        "chain without key": lambda: certs.client(certificate_chain_file=certs.path("client-chain.pem")),
        "unknown cipher": lambda: certs.client(cipher_list="NO-SUCH-CIPHER"),
        "unknown suite": lambda: certs.client(cipher_suites="TLS_NO_SUCH_SUITE"),
        "maximum below minimum": lambda: certs.client(minimum_version="TLSv1.3", maximum_version="TLSv1.2"),
        "require on a client": lambda: certs.client(verification="require"),
        "rsa1024 at level 2": lambda: certs.server("rsa1024"),
        "sha1 at level 2": lambda: certs.server("sha1"),
        "empty alpn name": lambda: certs.client(alpn_protocols=[""]),
    }[case]()
    with pytest.raises((socketkit.TLSSettingsError, socketkit.BadParamError)) as caught:
        settings.check()
    if case != "empty alpn name":  # a setter may refuse it (BadParamError) before the check
        assert type(caught.value) is socketkit.TLSSettingsError, caught.value
    assert caught.value.code in (socketkit.TLSSettingsError.code, socketkit.BadParamError.code)
    assert str(caught.value), "the message says why"
    assert isinstance(caught.value, ValueError)


def test_settings_are_validated_in_python_too(certs):
    with pytest.raises(socketkit.TLSSettingsError, match="one of"):
        certs.client(trust_pem=certs.text("ca.pem")).check()  # trust_file and trust_pem
    with pytest.raises(socketkit.TLSSettingsError, match="not both"):
        certs.server(certificate_chain_pem=certs.text("server-chain.pem")).check()
    with pytest.raises(socketkit.TLSSettingsError, match="unknown verification"):
        certs.client(verification="sometimes").check()
    with pytest.raises(socketkit.TLSSettingsError, match="unknown role"):
        socketkit.TLSSettings("referee").check()
    with pytest.raises(socketkit.TLSSettingsError, match="unknown maximum version"):
        certs.client(maximum_version="SSLv3").check()
    with pytest.raises(socketkit.TLSSettingsError, match="list of names"):
        certs.client(alpn_protocols="h2").check()
    with pytest.raises(socketkit.TLSSettingsError, match="not a number"):
        certs.client(handshake_timeout=float("nan")).check()


def test_enums_strings_and_stdlib_versions_are_accepted(certs):
    assert socketkit.TLSVersion.TLSv1_3 == ssl.TLSVersion.TLSv1_3 == 0x0304
    assert socketkit.TLSVersion.TLSv1_2.label == "TLSv1.2"
    for minimum, maximum in (("TLSv1.2", "TLSv1.3"), ("1.2", "tlsv1_3"), (socketkit.TLSVersion.TLSv1_2, None),
                             (ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3), (None, "TLSv1.2")):
        certs.client(minimum_version=minimum, maximum_version=maximum).check()
    for verification in ("default", "none", "peer", "require", socketkit.TLSVerification.REQUIRE):
        certs.server(verification=verification, trust_file=certs.path("ca.pem")).check()
    socketkit.TLSSettings(socketkit.TLSRole.SERVER, certificate_chain_file=certs.path("server-chain.pem"),
                          private_key_file=certs.path("server.key")).check()
    import pathlib
    socketkit.TLSSettings.server(pathlib.Path(certs.path("server-chain.pem")),
                                 pathlib.Path(certs.path("server.key"))).check()


def test_certificates_parse_and_print(certs):
    chain = socketkit.Certificate.from_pem(certs.text("server-chain.pem"))
    assert len(chain) == 2
    leaf, intermediate = chain
    assert "CN=localhost" in leaf.subject
    assert leaf.issuer == intermediate.subject
    assert "SocketKit Test Intermediate CA" in intermediate.subject
    assert "SocketKit Test Root CA" in intermediate.issuer
    now = datetime.datetime.now(datetime.timezone.utc)
    assert leaf.not_before < now < leaf.not_after
    assert leaf.not_before.tzinfo is not None
    assert leaf.der == ssl.PEM_cert_to_DER_cert(certs.text("server.pem"))
    assert leaf.pem.startswith("-----BEGIN CERTIFICATE-----\n") and leaf.pem.endswith("-----END CERTIFICATE-----\n")
    assert ssl.PEM_cert_to_DER_cert(leaf.pem) == leaf.der
    assert socketkit.Certificate(leaf.der) == leaf and hash(socketkit.Certificate(leaf.der)) == hash(leaf)
    assert socketkit.Certificate.from_pem(leaf.pem) == [leaf]
    with pytest.raises(socketkit.BadParamError):
        socketkit.Certificate(b"\x01\x02\x03")
    expired = socketkit.Certificate.from_pem(certs.text("expired-chain.pem"))[0]
    assert expired.not_after < now


def test_start_tls_refuses_at_once_and_only_the_first_call_counts(make_pair, certs):
    lonely = socketkit.Socket(TLSRecorder())
    with pytest.raises(socketkit.BadConfigError):
        lonely.start_tls(certs.client())
    assert not lonely.is_secure and lonely.tls_info is None
    lonely.close()
    with pytest.raises(TypeError):
        socketkit.Socket().start_tls({"role": "client"})

    pair = make_pair()
    with pytest.raises(socketkit.TLSSettingsError):
        pair.client.start_tls(certs.client(trust_file="/nonexistent/ca.pem"))
    with pytest.raises(socketkit.TLSSettingsError):
        pair.server.start_tls(certs.server(private_key_file=certs.path("server-encrypted.key"),
                                           private_key_password="wrong"))
    # Nothing was started: good settings still work, and a second start is refused.
    pair.server.start_tls(certs.server())
    pair.client.start_tls(certs.client())
    with pytest.raises(socketkit.BadConfigError):
        pair.client.start_tls(certs.client())
    pair.client_recorder.expect("secure")
    pair.server_recorder.expect("secure")
    assert pair.client.is_secure and pair.server.is_secure
    with pytest.raises(socketkit.BadConfigError):
        pair.server.start_tls(certs.server())
    pair.client.disconnect_after_writing()
    with pytest.raises(socketkit.Error):
        pair.client.start_tls(certs.client())


@pytest.mark.parametrize("from_its_callback", [True, False])
def test_a_new_session_starts_with_none_of_the_last_ones_tls(secure_pair, certs, from_its_callback):
    """A session begun after a secure one starts with none of its TLS: not secure, no TLS
    info, and start_tls counts again (the loop is the only writer of what the getters read,
    and a session's end and the next one's start share one reset). From inside a delegate
    method of the secure session (on the loop's thread) and from the test's thread."""
    pair = secure_pair(queue=None)
    pair.client_recorder.expect("secure")
    assert pair.client.is_secure
    plain = RawListener()
    seen = []
    done = threading.Event()

    def reconnect(sock):
        sock.disconnect()
        try:
            sock.connect_to_host("127.0.0.1", plain.port)
            seen.append((sock.is_secure, sock.tls_info))
            sock.start_tls(certs.client())
            seen.append("start_tls taken")
        except socketkit.Error as error:
            seen.append(repr(error))
        done.set()

    try:
        if from_its_callback:
            pair.client_recorder.on_read = lambda sock, data, tag: reconnect(sock)
            pair.client.read(tag=1)
            pair.server.write(b"x")
        else:
            reconnect(pair.client)
        assert done.wait(WAIT)
        assert seen == [(False, None), "start_tls taken"]
    finally:
        plain.close()


# ======================================================================================
# Handshakes and what they settled
# ======================================================================================

@pytest.mark.parametrize("queue_kind", ["serial", "loop", "host"])
def test_handshake_echo_and_info(secure_pair, certs, queue_kind):
    pump = HostPump() if queue_kind == "host" else None
    queue = {"serial": UNSET, "loop": None, "host": pump and pump.queue}[queue_kind]
    pair = None
    try:
        # Without resumption: contexts are shared between equal settings and sessions are
        # kept per host and port, so an earlier test's server on a port the system hands out
        # again would otherwise make this a resumed handshake (seen once in make test).
        pair = secure_pair(server=certs.server(alpn_protocols=["http/1.1", "h2"]),
                           client=certs.client(alpn_protocols=["h2", "http/1.1"], session_resumption=False),
                           queue=queue)
        pair.client_recorder.expect("secure")
        pair.server_recorder.expect("secure")
        pair.client.write(b"hello over TLS\n")
        pair.server.read_to_data(socketkit.LF, tag=5)
        assert pair.server_recorder.expect("read") == [("read", b"hello over TLS\n", 5)]
        pair.server.write(b"and back\n")
        pair.client.read_to_data(socketkit.LF, tag=6)
        assert pair.client_recorder.expect("read") == [("read", b"and back\n", 6)]

        info = pair.client.tls_info
        assert info.protocol_version == "TLSv1.3"
        assert info.cipher.startswith("TLS_")
        assert info.alpn_protocol == "http/1.1"  # the server's preference
        assert info.server_name is None  # an IP literal is never sent as SNI
        assert info.session_reused is False
        assert [c.subject for c in info.peer_certificates] == [
            c.subject for c in socketkit.Certificate.from_pem(certs.text("server-chain.pem"))]
        assert info.peer_certificates[0].der == ssl.PEM_cert_to_DER_cert(certs.text("server.pem"))
        server_info = pair.server.tls_info
        assert server_info.peer_certificates == []  # no client certificate asked for
        assert (server_info.cipher, server_info.protocol_version, server_info.alpn_protocol) == (
            info.cipher, info.protocol_version, info.alpn_protocol)
        assert pair.client_recorder.overlaps == 0 and pair.server_recorder.overlaps == 0
        if pump is not None:
            assert pair.client_recorder.threads == pump.threads
        # Secure callbacks precede the reads queued after them.
        kinds = [event[0] for event in pair.client_recorder.events]
        assert kinds.index("secure") < kinds.index("read")
    finally:
        if pump is not None:
            if pair is not None:
                pair.client.abort()
            pump.close()


def test_sni_and_peer_name(secure_pair, client_failure, certs):
    pair = secure_pair(host="localhost")
    pair.client_recorder.expect("secure")
    pair.server_recorder.expect("secure")
    assert pair.client.tls_info.server_name == "localhost"
    assert pair.server.tls_info.server_name == "localhost"

    # peer_name replaces the connect host: sent as SNI and verified.
    pair = secure_pair(client=certs.client(peer_name="localhost"))
    pair.client_recorder.expect("secure")
    pair.server_recorder.expect("secure")
    assert pair.server.tls_info.server_name == "localhost"
    error = client_failure(certs.server(), certs.client(peer_name="not-localhost.example"))
    assert type(error) is socketkit.HostnameMismatchError, repr(error)


@pytest.mark.parametrize("trust", ["file", "directory", "pem text", "pem bytes", "system", "other root"])
def test_trust_sources(secure_pair, client_failure, certs, tmp_path, trust):
    if trust == "directory":
        digest = subprocess.run(["openssl", "x509", "-hash", "-noout", "-in", certs.path("ca.pem")],
                                check=True, capture_output=True, text=True, timeout=30).stdout.strip()
        shutil.copy(certs.path("ca.pem"), tmp_path / f"{digest}.0")
        client = certs.client(trust_file=None, trust_directory=tmp_path)
    elif trust == "pem text":
        client = certs.client(trust_file=None, trust_pem=certs.text("ca.pem"))
    elif trust == "pem bytes":
        client = certs.client(trust_file=None, trust_pem=certs.text("ca.pem").encode())
    elif trust == "system":
        client = socketkit.TLSSettings()
    elif trust == "other root":
        client = certs.client(trust_file=certs.path("other-ca.pem"))
    else:
        client = certs.client()
    if trust in ("system", "other root"):
        error = client_failure(certs.server(), client)
        assert type(error) is socketkit.UnknownIssuerError, repr(error)
        assert error.errno != 0  # the X509_V_ERR_* result
    else:
        pair = secure_pair(client=client)
        pair.client_recorder.expect("secure")


@pytest.mark.parametrize("identity", ["files", "pem text", "encrypted file", "encrypted pem"])
def test_server_identity_sources(secure_pair, certs, identity):
    server = {
        "files": certs.server(),
        "pem text": socketkit.TLSSettings("server", certificate_chain_pem=certs.text("server-chain.pem"),
                                          private_key_pem=certs.text("server.key")),
        "encrypted file": certs.server(private_key_file=certs.path("server-encrypted.key"),
                                       private_key_password="secret"),
        "encrypted pem": socketkit.TLSSettings("server", certificate_chain_pem=certs.text("server-chain.pem"),
                                               private_key_pem=certs.text("server-encrypted.key"),
                                               private_key_password=b"secret"),
    }[identity]
    pair = secure_pair(server=server)
    pair.client_recorder.expect("secure")
    pair.server_recorder.expect("secure")
    assert len(pair.client.tls_info.peer_certificates) == 2


def test_verification_none_accepts_any_server(secure_pair, certs):
    pair = secure_pair(server=certs.server("self-signed"), client=certs.client(verification="none"))
    pair.client_recorder.expect("secure")
    assert "CN=localhost" in pair.client.tls_info.peer_certificates[0].subject
    pair = secure_pair(server=certs.server("expired"), client=socketkit.TLSSettings(verification="none"))
    pair.client_recorder.expect("secure")


def _client_identity(certs, name="client", **options):
    return certs.client(certificate_chain_file=certs.path(f"{name}-chain.pem"),
                        private_key_file=certs.path(f"{name}.key"), **options)


def test_server_verification_peer(secure_pair, certs):
    server = certs.server(verification="peer", trust_file=certs.path("ca.pem"))
    # A client without a certificate is let in ...
    pair = secure_pair(server=server)
    pair.client_recorder.expect("secure")
    pair.server_recorder.expect("secure")
    assert pair.server.tls_info.peer_certificates == []
    # ... one with a good certificate is seen ...
    pair = secure_pair(server=server, client=_client_identity(certs))
    pair.server_recorder.expect("secure")
    assert "SocketKit Test Client" in pair.server.tls_info.peer_certificates[0].subject
    # ... and one with a bad certificate is refused.
    pair = secure_pair(server=server, client=_client_identity(certs, "client-untrusted"))
    error = pair.server_recorder.disconnect_error()
    assert isinstance(error, (socketkit.SelfSignedCertificateError, socketkit.UnknownIssuerError)), repr(error)


def test_server_verification_require(secure_pair, certs):
    server = certs.server(verification="require", trust_file=certs.path("ca.pem"))
    # Without a certificate: refused. In TLS 1.3 the client's handshake is over before the
    # server judged it: the client learns it from the alert, which it reads at once (the
    # server closes after it), read queued or not.
    pair = secure_pair(server=server)
    server_error = pair.server_recorder.disconnect_error()
    assert type(server_error) is socketkit.ClientCertificateRequiredError, repr(server_error)
    client_error = pair.client_recorder.disconnect_error()
    assert type(client_error) is socketkit.ClientCertificateRequiredError, repr(client_error)
    # TLS 1.2: the client fails in its handshake.
    pair = secure_pair(server=server, client=certs.client(maximum_version="TLSv1.2"))
    assert isinstance(pair.client_recorder.disconnect_error(), socketkit.TLSError)
    assert type(pair.server_recorder.disconnect_error()) is socketkit.ClientCertificateRequiredError

    # With a trusted one, from files or PEM text: in, and the server sees it.
    for client in (_client_identity(certs),
                   certs.client(certificate_chain_pem=certs.text("client-chain.pem"),
                                private_key_pem=certs.text("client.key"))):
        pair = secure_pair(server=server, client=client)
        pair.server_recorder.expect("secure")
        pair.client_recorder.expect("secure")
        leaf = pair.server.tls_info.peer_certificates[0]
        assert "SocketKit Test Client" in leaf.subject
        assert leaf.der == ssl.PEM_cert_to_DER_cert(certs.text("client.pem"))

    # With an untrusted one: refused by the server.
    pair = secure_pair(server=server, client=_client_identity(certs, "client-untrusted"))
    error = pair.server_recorder.disconnect_error()
    assert isinstance(error, (socketkit.SelfSignedCertificateError, socketkit.UnknownIssuerError)), repr(error)


def test_protocol_versions(secure_pair, client_failure, certs):
    pair = secure_pair(client=certs.client(maximum_version="TLSv1.2"))
    pair.client_recorder.expect("secure")
    pair.server_recorder.expect("secure")
    assert pair.client.tls_info.protocol_version == "TLSv1.2"
    assert pair.server.tls_info.protocol_version == "TLSv1.2"
    pair = secure_pair(server=certs.server(minimum_version=ssl.TLSVersion.TLSv1_3),
                       client=certs.client(minimum_version="TLSv1.3", maximum_version="TLSv1.3"))
    pair.client_recorder.expect("secure")
    assert pair.client.tls_info.protocol_version == "TLSv1.3"
    # A TLS 1.3-only server and a client that stops at 1.2.
    pair = secure_pair(server=certs.server(minimum_version="TLSv1.3"), client=certs.client(maximum_version="1.2"))
    error = pair.client_recorder.disconnect_error()
    assert type(error) is socketkit.ProtocolVersionError, repr(error)
    error = pair.server_recorder.disconnect_error()
    assert type(error) is socketkit.ProtocolVersionError, repr(error)
    # And the other way round.
    error = client_failure(certs.server(maximum_version="TLSv1.2"), certs.client(minimum_version="TLSv1.3"))
    assert type(error) is socketkit.ProtocolVersionError, repr(error)


def test_cipher_list_and_suites(secure_pair, client_failure, certs):
    pair = secure_pair(client=certs.client(maximum_version="TLSv1.2", cipher_list="ECDHE-ECDSA-CHACHA20-POLY1305"))
    pair.client_recorder.expect("secure")
    pair.server_recorder.expect("secure")
    assert pair.client.tls_info.cipher == "ECDHE-ECDSA-CHACHA20-POLY1305"
    assert pair.server.tls_info.cipher == "ECDHE-ECDSA-CHACHA20-POLY1305"
    pair = secure_pair(server=certs.server(cipher_suites="TLS_AES_128_GCM_SHA256:TLS_CHACHA20_POLY1305_SHA256"),
                       client=certs.client(cipher_suites="TLS_CHACHA20_POLY1305_SHA256"))
    pair.client_recorder.expect("secure")
    assert pair.client.tls_info.cipher == "TLS_CHACHA20_POLY1305_SHA256"
    # Nothing in common.
    error = client_failure(certs.server(cipher_suites="TLS_AES_256_GCM_SHA384"),
                           certs.client(cipher_suites="TLS_CHACHA20_POLY1305_SHA256"))
    assert type(error) is socketkit.TLSFailedError, repr(error)
    error = client_failure(certs.server(maximum_version="TLSv1.2", cipher_list="ECDHE-ECDSA-AES256-GCM-SHA384"),
                           certs.client(cipher_list="ECDHE-ECDSA-CHACHA20-POLY1305", maximum_version="TLSv1.2"))
    assert type(error) is socketkit.TLSFailedError, repr(error)


@pytest.mark.parametrize("server_protocols, client_protocols, chosen", [
    (["http/1.1", "h2"], ["h2", "http/1.1"], "http/1.1"),
    (["h2"], ["h2", "http/1.1"], "h2"),
    ([], ["h2"], None),
    (["h2"], [], None),
    (["spdy/3"], ["h2"], None),  # no overlap: the handshake goes on without ALPN
])
def test_alpn(secure_pair, certs, server_protocols, client_protocols, chosen):
    pair = secure_pair(server=certs.server(alpn_protocols=server_protocols),
                       client=certs.client(alpn_protocols=client_protocols))
    pair.client_recorder.expect("secure")
    pair.server_recorder.expect("secure")
    assert pair.client.tls_info.alpn_protocol == chosen
    assert pair.server.tls_info.alpn_protocol == chosen


@pytest.mark.parametrize("version, resumption, expected", [
    ("TLSv1.2", True, [False, True]),
    ("TLSv1.3", True, [False, True]),
    ("TLSv1.3", False, [False, False]),
])
def test_session_resumption(certs, version, resumption, expected):
    servers = TLSRecorder()
    accepted = []

    class Acceptor:
        def socket_did_accept(self, listener, connection):
            connection.delegate = servers
            accepted.append(connection)
            connection.start_tls(certs.server())
            connection.write(b"hi")  # a TLS 1.3 server sends its ticket before this

    listener = socketkit.Socket(Acceptor())
    listener.accept_on_interface("127.0.0.1", 0)
    # A context of this test's own (contexts are shared between equal settings).
    settings = certs.client(maximum_version=version, session_resumption=resumption,
                            alpn_protocols=[f"resume-{version}-{resumption}-{os.getpid()}"])
    reused = []
    try:
        for _ in range(2):
            recorder = TLSRecorder()
            client = socketkit.Socket(recorder)
            client.connect_to_host("127.0.0.1", listener.local_port, timeout=10)
            client.start_tls(settings)
            client.read_to_length(2)
            assert recorder.expect_bytes(2) == b"hi"
            info = client.tls_info
            assert info.protocol_version == version
            reused.append(info.session_reused)
            client.disconnect()
            recorder.expect("disconnect")
            client.close()
    finally:
        listener.close()
        for connection in accepted:
            connection.abort()
    assert reused == expected


def test_handshake_timeout_on_either_side(certs):
    silent = RawListener()
    recorder = TLSRecorder()
    client = socketkit.Socket(recorder)
    try:
        client.connect_to_host("127.0.0.1", silent.port, timeout=10)
        started = time.monotonic()
        client.start_tls(certs.client(handshake_timeout=0.3))
        peer = silent.accept()  # never says a word
        error = recorder.disconnect_error()
        elapsed = time.monotonic() - started
        assert type(error) is socketkit.HandshakeTimeoutError, repr(error)
        assert isinstance(error, TimeoutError) and isinstance(error, socketkit.TLSError)
        assert 0.25 <= elapsed < 10, elapsed
        peer.close()
    finally:
        client.close()
        silent.close()

    # A server whose client never sends its hello.
    servers = TLSRecorder()
    accepted = []

    class Acceptor:
        def socket_did_accept(self, listener, connection):
            connection.delegate = servers
            accepted.append(connection)
            connection.start_tls(certs.server(handshake_timeout=0.3))

    listener = socketkit.Socket(Acceptor())
    listener.accept_on_interface("127.0.0.1", 0)
    mute = socket.create_connection(("127.0.0.1", listener.local_port), timeout=WAIT)
    try:
        assert type(servers.disconnect_error()) is socketkit.HandshakeTimeoutError
    finally:
        mute.close()
        listener.close()
        for connection in accepted:
            connection.abort()


def test_no_handshake_timeout(secure_pair, certs):
    pair = secure_pair(server=certs.server(handshake_timeout=-1), client=certs.client(handshake_timeout=120))
    pair.client_recorder.expect("secure")


@pytest.mark.parametrize("calls_before_the_end", [1, 2, 3, 4])
def test_tls_info_is_none_when_the_session_ends_between_its_c_calls(secure_pair, monkeypatch, calls_before_the_end):
    """tls_info takes several C calls (the info, then each certificate's size and bytes,
    then the info again); the session ends here after the given number of certificate
    calls, as a peer closing right after the handshake ends it while socket_did_secure runs.
    It used to raise BadConfigError."""
    from socketkit import _tls

    pair = secure_pair()
    pair.client_recorder.expect("secure")
    assert len(pair.client.tls_info.peer_certificates) == 2
    original = _tls.lib.sk_socket_copy_peer_certificate
    calls = []

    def copy(*arguments):
        status = original(*arguments)
        calls.append(status)
        if len(calls) == calls_before_the_end:
            pair.client.disconnect()
            pair.client_recorder.expect("disconnect")
        return status

    monkeypatch.setattr(_tls.lib, "sk_socket_copy_peer_certificate", copy)
    assert pair.client.tls_info is None
    assert len(calls) >= calls_before_the_end


def test_tls_info_while_sessions_end_under_it(certs):
    """The race itself, bounded: two threads read tls_info while the connection closes.
    Before, about one connection in fifty raised BadConfigError (within 3 s on 2 cores)."""
    accepted = []

    class Acceptor:
        def socket_did_accept(self, listener, connection):
            connection.delegate = TLSRecorder()
            accepted.append(connection)
            connection.start_tls(certs.server())

    listener = socketkit.Socket(Acceptor())
    listener.accept_on_interface("127.0.0.1", 0)
    failures = []
    connections = 0
    deadline = time.monotonic() + 3
    try:
        while time.monotonic() < deadline:
            connections += 1
            recorder = TLSRecorder()
            client = socketkit.Socket(recorder)
            client.connect_to_host("127.0.0.1", listener.local_port, timeout=WAIT)
            client.start_tls(certs.client())
            recorder.expect("secure")

            def read(client=client):
                try:
                    while client.tls_info is not None:
                        pass
                except Exception as error:  # noqa: BLE001 - any exception is the failure
                    failures.append(repr(error))

            readers = [threading.Thread(target=read) for _ in range(2)]
            for reader in readers:
                reader.start()
            client.disconnect()
            for reader in readers:
                reader.join(WAIT)
            client.close()
            while accepted:
                accepted.pop().close()
    finally:
        listener.close()
    assert failures == [], f"{len(failures)} failures in {connections} connections: {failures[:3]}"


def test_the_key_log_file_gets_the_secrets(secure_pair, certs, tmp_path):
    path = tmp_path / "keys.log"
    pair = secure_pair(client=certs.client(key_log_file=path))
    pair.client_recorder.expect("secure")
    lines = path.read_text().splitlines()
    labels = {line.split()[0] for line in lines}
    assert {"CLIENT_HANDSHAKE_TRAFFIC_SECRET", "SERVER_HANDSHAKE_TRAFFIC_SECRET", "CLIENT_TRAFFIC_SECRET_0",
            "SERVER_TRAFFIC_SECRET_0"} <= labels, lines
    assert all(len(line.split()) == 3 for line in lines)
    # TLS 1.2 logs the master secret.
    path12 = tmp_path / "keys12.log"
    pair = secure_pair(client=certs.client(key_log_file=str(path12), maximum_version="TLSv1.2"))
    pair.client_recorder.expect("secure")
    assert path12.read_text().startswith("CLIENT_RANDOM ")


@pytest.mark.parametrize("cipher_list", ["DEFAULT:@SECLEVEL=0", "HIGH:@SECLEVEL=1"])
def test_a_cipher_list_cannot_lower_the_security_level(certs, raw_peer, cipher_list):
    # It used to undo security level 2 silently: weak keys and SHA-1 passed again.
    settings = certs.client(cipher_list=cipher_list)
    with pytest.raises(socketkit.TLSSettingsError) as caught:
        settings.check()
    assert "security level" in caught.value.message
    pair = raw_peer()
    with pytest.raises(socketkit.TLSSettingsError):
        pair.socket.start_tls(settings)
    certs.client(cipher_list="DEFAULT:@SECLEVEL=2").check()
    certs.client(cipher_list="DEFAULT:@SECLEVEL=3").check()  # raising it is fine


def test_a_key_log_file_that_cannot_be_opened_is_a_settings_error(certs, raw_peer):
    # It once aborted the interpreter (the OpenSSL context was freed twice).
    settings = certs.client(key_log_file="/nonexistent/directory/keys.log")
    with pytest.raises(socketkit.TLSSettingsError) as caught:
        settings.check()
    assert caught.value.errno == errno.ENOENT and "key-log" in caught.value.message
    pair = raw_peer()
    with pytest.raises(socketkit.TLSSettingsError):
        pair.socket.start_tls(settings)
    assert not pair.socket.is_secure
    pair.socket.start_tls(certs.client())  # nothing was started


# ======================================================================================
# The negative certificate zoo
# ======================================================================================

ZOO = [
    ("expired", "127.0.0.1", socketkit.CertificateExpiredError),
    ("not-yet-valid", "127.0.0.1", socketkit.CertificateNotYetValidError),
    ("self-signed", "127.0.0.1", socketkit.SelfSignedCertificateError),
    ("untrusted", "127.0.0.1", socketkit.SelfSignedCertificateError),  # ends at a root we do not trust
    ("incomplete", "127.0.0.1", socketkit.UnknownIssuerError),  # the intermediate is missing
    ("wrong-host", "localhost", socketkit.HostnameMismatchError),
    ("wrong-host", "127.0.0.1", socketkit.HostnameMismatchError),
    ("cn-only", "localhost", socketkit.HostnameMismatchError),  # the CN is never taken for a name
    ("dns-ip", "127.0.0.1", socketkit.HostnameMismatchError),  # "127.0.0.1" as a DNS name is no IP
    ("non-ca-issuer", "127.0.0.1", socketkit.CertificateInvalidError),
    ("client-auth-only", "127.0.0.1", socketkit.CertificateInvalidError),  # wrong purpose
]


@pytest.mark.parametrize("variant, host, expected", ZOO, ids=[f"{v}@{h}" for v, h, _ in ZOO])
def test_a_client_refuses_a_bad_certificate(client_failure, certs, variant, host, expected):
    error = client_failure(certs.server(variant), host=host)
    assert type(error) is expected, f"{variant}: {error!r}"
    assert isinstance(error, socketkit.CertificateVerificationError)
    assert error.errno != 0, "os_error carries the X509_V_ERR_* result"
    assert "certificate" in error.message


@pytest.mark.parametrize("variant", ["rsa1024", "sha1"])
def test_weak_certificates_are_refused_at_security_level_two(certs, variant):
    # A SocketKit server will not even load them (see above): the server here is Python's
    # ssl module at security level 0.
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.set_ciphers("DEFAULT:@SECLEVEL=0")
    context.load_cert_chain(certs.path(f"{variant}-chain.pem"), certs.path(f"{variant}.key"))
    server = StdlibTLSServer(context)
    recorder = TLSRecorder()
    client = socketkit.Socket(recorder)
    try:
        client.connect_to_host("127.0.0.1", server.port, timeout=10)
        client.start_tls(certs.client())
        error = recorder.disconnect_error()
        assert type(error) is socketkit.CertificateInvalidError, f"{variant}: {error!r}"
        server.join()
        assert server.errors, "the server saw the client's alert"
    finally:
        client.close()
        server.close()


def test_good_certificates_pass_for_each_name_form(secure_pair, certs):
    for host in ("localhost", "127.0.0.1"):
        pair = secure_pair(host=host)
        pair.client_recorder.expect("secure")
    # dns-ip names "127.0.0.1" as a DNS name: no match for the IP, and none for "localhost".
    pair = secure_pair(server=certs.server("dns-ip"), host="localhost")
    assert type(pair.client_recorder.disconnect_error()) is socketkit.HostnameMismatchError


# ======================================================================================
# Manual trust evaluation
# ======================================================================================

@pytest.mark.parametrize("queue_kind", ["serial", "loop", "host"])
def test_manual_trust_yes_sees_the_chain_and_the_builtin_verdict(secure_pair, certs, queue_kind):
    pump = HostPump() if queue_kind == "host" else None
    queue = {"serial": UNSET, "loop": None, "host": pump and pump.queue}[queue_kind]
    pair = None
    try:
        client = TrustRecorder(lambda sock, trust: True)
        # The system store does not know the test root: built-in verification fails.
        pair = secure_pair(client=socketkit.TLSSettings(manual_trust_evaluation=True),
                           client_recorder=client, queue=queue)
        pair.client_recorder.expect("secure")
        trust = client.expect("trust")[0][1]
        assert [c.der for c in trust.chain] == [c.der for c in pair.client.tls_info.peer_certificates]
        assert len(trust.chain) == 2 and "CN=localhost" in trust.chain[0].subject
        assert type(trust.verification_error) is socketkit.UnknownIssuerError
        assert trust.peer_name == "127.0.0.1"
        assert trust.answered is True
        kinds = [event[0] for event in client.events]
        assert kinds == ["connect", "trust", "secure"]
    finally:
        if pump is not None:
            if pair is not None:
                pair.client.abort()
            pump.close()


def test_manual_trust_sees_a_clean_verdict_and_can_say_no(secure_pair, certs):
    client = TrustRecorder(lambda sock, trust: False)
    pair = secure_pair(client=certs.client(manual_trust_evaluation=True, peer_name="localhost"),
                       client_recorder=client)
    error = client.disconnect_error()
    assert type(error) is socketkit.PeerRejectedError, repr(error)
    trust = client.expect("trust")[0][1]
    assert trust.verification_error is None  # the test root is trusted here
    assert trust.peer_name == "localhost"
    assert client.count("secure") == 0 and not pair.client.is_secure


def test_manual_trust_answered_later_from_another_thread(secure_pair, certs):
    answered = threading.Event()

    def later(sock, trust):
        def answer():
            trust.answer(True)
            trust.answer(False)  # only the first answer counts
            answered.set()
        threading.Thread(target=answer).start()
        return None

    client = TrustRecorder(later)
    pair = secure_pair(client=socketkit.TLSSettings(manual_trust_evaluation=True), client_recorder=client)
    # Written after start_tls: waits for the answer, then goes out encrypted.
    pair.client.write(b"queued before the answer")
    pair.server.read_to_length(24)
    assert answered.wait(WAIT)
    client.expect("secure")
    assert pair.server_recorder.expect_bytes(24) == b"queued before the answer"
    assert client.expect("trust")[0][1].answered is True


def test_the_handshake_timeout_keeps_running_while_the_delegate_decides(secure_pair, certs):
    # The timeout bounds how long an unauthenticated peer holds a connection: no answer in
    # time ends it, and a late answer does nothing.
    client = TrustRecorder()  # answers later: here, never in time
    pair = secure_pair(client=certs.client(manual_trust_evaluation=True, handshake_timeout=0.5),
                       client_recorder=client)
    trust = client.expect("trust")[0][1]
    assert type(client.disconnect_error()) is socketkit.HandshakeTimeoutError
    trust.answer(True)
    assert not pair.client.is_secure
    assert client.count("secure") == 0


def test_manual_trust_with_a_host_queue_answered_after_the_poll(secure_pair, certs):
    """The SK_EVENT_TRUST record: the question outlives its poll, answered from the test
    thread once the delegate method returned None."""
    host = socketkit.HostQueue()
    client = TrustRecorder()  # answers later
    pair = secure_pair(client=socketkit.TLSSettings(manual_trust_evaluation=True), client_recorder=client,
                       queue=host, wait_for_connect=False)
    deadline = time.monotonic() + WAIT
    while client.count("trust") == 0:
        assert time.monotonic() < deadline, client.events
        if select.select([host.fileno()], [], [], 0.5)[0]:
            host.drain()
    trust = client.expect("trust")[0][1]
    assert trust.answered is None and not pair.client.is_secure
    trust.answer(True)
    while client.count("secure") == 0:
        assert time.monotonic() < deadline, client.events
        if select.select([host.fileno()], [], [], 0.5)[0]:
            host.drain()
    assert pair.client.is_secure
    pair.client.abort()
    host.close()


def test_manual_trust_without_the_method_or_with_one_that_raises_rejects(secure_pair, certs, monkeypatch):
    settings = certs.client(manual_trust_evaluation=True)
    pair = secure_pair(client=settings)  # TLSRecorder: no socket_did_receive_trust
    assert type(pair.client_recorder.disconnect_error()) is socketkit.PeerRejectedError

    reported = []
    monkeypatch.setattr(sys, "unraisablehook", reported.append)

    def explode(sock, trust):
        raise RuntimeError("cannot decide")

    client = TrustRecorder(explode)
    pair = secure_pair(client=settings, client_recorder=client)
    assert type(client.disconnect_error()) is socketkit.PeerRejectedError
    assert isinstance(reported[0].exc_value, RuntimeError)
    assert "socket_did_receive_trust" in reported[0].err_msg


def test_manual_trust_on_a_server_judges_client_certificates(secure_pair, certs):
    seen = []

    def judge(sock, trust):
        seen.append(trust)
        return bool(trust.chain) and "SocketKit Test Client" in trust.chain[0].subject

    server = TrustRecorder(judge)
    settings = certs.server(verification="peer", trust_file=certs.path("ca.pem"), manual_trust_evaluation=True)
    pair = secure_pair(server=settings, client=_client_identity(certs), server_recorder=server)
    server.expect("secure")
    assert seen[0].verification_error is None
    assert seen[0].chain[0].der == ssl.PEM_cert_to_DER_cert(certs.text("client.pem"))
    # No certificate at all: the server's judge says no.
    server = TrustRecorder(judge)
    pair = secure_pair(server=settings, server_recorder=server)
    assert type(server.disconnect_error()) is socketkit.PeerRejectedError
    assert server.expect("trust")[0][1].chain == []


# ======================================================================================
# STARTTLS, bulk data, endings
# ======================================================================================

@pytest.mark.parametrize("direction", ["connecting side is the TLS client", "accepting side is the TLS client"])
def test_starttls_is_a_marker_in_both_queues(make_pair, certs, direction):
    """A plaintext line each way, the upgrade queued right behind them without waiting,
    then encrypted lines."""
    pair = make_pair()
    asker, answerer = pair.client, pair.server
    asker_recorder, answerer_recorder = pair.client_recorder, pair.server_recorder
    if direction.startswith("connecting"):
        asker_settings, answerer_settings = certs.client(), certs.server()
    else:
        # The side that connected presents the certificate (it names 127.0.0.1 too).
        asker_settings, answerer_settings = certs.server(), certs.client()

    asker.write(b"STARTTLS\r\n")
    asker.read_to_data(socketkit.CRLF, tag=1)
    asker.start_tls(asker_settings)
    asker.write(b"secret\r\n")
    asker.read_to_data(socketkit.CRLF, tag=3)

    answerer.read_to_data(socketkit.CRLF, tag=1)
    answerer.write(b"GO AHEAD\r\n")
    answerer.start_tls(answerer_settings)
    answerer.read_to_data(socketkit.CRLF, tag=2)
    answerer.write(b"welcome\r\n")

    assert answerer_recorder.expect_bytes(18) == b"STARTTLS\r\nsecret\r\n"
    assert asker_recorder.expect_bytes(19) == b"GO AHEAD\r\nwelcome\r\n"
    order = [event[:3] if event[0] == "read" else event for event in asker_recorder.events
             if event[0] in ("read", "secure")]
    assert order == [("read", b"GO AHEAD\r\n", 1), ("secure",), ("read", b"welcome\r\n", 3)]
    assert asker.is_secure and answerer.is_secure


def test_a_mebibyte_each_way_arrives_intact(secure_pair):
    pair = secure_pair()
    up, down = pattern(1 << 20, seed=3), pattern(1 << 20, seed=7)
    pair.client.write(up)
    pair.server.write(down)
    pair.server.read_to_length(len(up))
    pair.client.read_to_length(len(down))
    assert sha256(pair.server_recorder.expect_bytes(len(up))) == sha256(up)
    assert sha256(pair.client_recorder.expect_bytes(len(down))) == sha256(down)
    assert pair.client_recorder.count("disconnect") == 0 and pair.server_recorder.count("disconnect") == 0


def test_an_orderly_close_sends_close_notify(secure_pair):
    pair = secure_pair()
    pair.client_recorder.expect("secure")
    pair.client.read_to_length(3)
    pair.server.write(b"bye")
    pair.server.disconnect_after_writing()
    assert pair.client_recorder.expect_bytes(3) == b"bye"
    # close_notify then FIN: not truncation (reported with no read queued: nothing unread
    # is left before it).
    error = pair.client_recorder.disconnect_error()
    assert type(error) is socketkit.ClosedError, repr(error)
    assert pair.server_recorder.disconnect_error() is None


def test_a_fin_without_close_notify_is_truncation(secure_pair):
    pair = secure_pair()
    pair.client_recorder.expect("secure")
    pair.server_recorder.expect("secure")
    pair.client.read_to_length(10)
    pair.server.write(b"12345")
    pair.server_recorder.expect("write")
    done = threading.Event()

    def half_close(descriptors):
        duplicate = socket.fromfd(descriptors.primary, socket.AF_INET, socket.SOCK_STREAM)
        duplicate.shutdown(socket.SHUT_WR)  # a FIN, no close_notify
        duplicate.close()
        done.set()

    pair.server.perform(half_close)
    assert done.wait(WAIT)
    error = pair.client_recorder.disconnect_error()
    assert type(error) is socketkit.TruncatedTLSError, repr(error)
    assert error is not None and not isinstance(error, socketkit.ClosedError)
    assert isinstance(error, ConnectionError)
    assert pair.client_recorder.count("read") == 0  # the short read is not delivered as complete


@pytest.mark.parametrize("reads_the_whole_hello", [False, True])
def test_a_server_that_closes_during_the_handshake(certs, reads_the_whole_hello):
    server = RawListener()
    recorder = TLSRecorder()
    client = socketkit.Socket(recorder)
    try:
        client.connect_to_host("127.0.0.1", server.port, timeout=10)
        client.start_tls(certs.client())
        peer = server.accept()
        header = receive_exactly(peer, 5)  # the ClientHello's record header
        assert header[0] == 22, header  # handshake
        if reads_the_whole_hello:
            receive_exactly(peer, header[3] << 8 | header[4])  # then a FIN
        # else: closing with unread bytes sends a reset
        peer.close()
        error = recorder.disconnect_error()
        assert type(error) is socketkit.TLSPeerClosedError, repr(error)
        assert isinstance(error, ConnectionError)
    finally:
        client.close()
        server.close()


@pytest.mark.parametrize("sends", [b"", b"\x16\x03\x01"])
def test_a_client_that_closes_during_the_handshake(certs, sends):
    servers = TLSRecorder()
    accepted = []

    class Acceptor:
        def socket_did_accept(self, listener, connection):
            connection.delegate = servers
            accepted.append(connection)
            connection.start_tls(certs.server())

    listener = socketkit.Socket(Acceptor())
    listener.accept_on_interface("127.0.0.1", 0)
    try:
        peer = socket.create_connection(("127.0.0.1", listener.local_port), timeout=WAIT)
        if sends:
            peer.sendall(sends)
        peer.shutdown(socket.SHUT_WR)
        error = servers.disconnect_error()
        assert type(error) is socketkit.TLSPeerClosedError, repr(error)
        peer.close()
    finally:
        listener.close()
        for connection in accepted:
            connection.abort()


def test_a_peer_that_does_not_speak_tls(certs):
    server = RawListener()
    recorder = TLSRecorder()
    client = socketkit.Socket(recorder)
    try:
        client.connect_to_host("127.0.0.1", server.port, timeout=10)
        client.start_tls(certs.client())
        peer = server.accept()
        receive_exactly(peer, 5)
        peer.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
        error = recorder.disconnect_error()
        assert type(error) is socketkit.TLSFailedError, repr(error)
        peer.close()
    finally:
        client.close()
        server.close()


# ======================================================================================
# asyncio
# ======================================================================================

def test_aio_tls_server_and_client(certs):
    async def main():
        async def echo(connection):
            assert connection.is_secure
            assert connection.tls_info.server_name == "localhost"
            while True:
                try:
                    line = await connection.read_to_data(b"\n")
                except socketkit.ClosedError:
                    return
                await connection.write(line.upper())

        async with await aio.start_server(echo, tls=certs.server(alpn_protocols=["echo/1"])) as server:
            sock = await aio.AsyncSocket.connect("localhost", server.port, timeout=5,
                                                 tls=certs.client(alpn_protocols=["echo/1"]))
            assert sock.is_secure
            assert sock.tls_info.alpn_protocol == "echo/1"
            for index in range(3):
                await sock.write(b"line %d\n" % index)
                assert await sock.read_to_data(b"\n") == b"LINE %d\n" % index
            big = pattern(300_000, seed=5) + b"\n"
            await sock.write(big)
            assert await sock.read_to_length(len(big)) == big.upper()
            await sock.close()
        aio.detach()

    run(main())


def test_aio_handshake_failures_raise_on_both_sides(certs):
    async def main():
        failure = asyncio.get_running_loop().create_future()

        async def never(connection):  # pragma: no cover - must not run
            raise AssertionError("the handler ran for a connection whose handshake failed")

        server = await aio.start_server(never, tls=certs.server("wrong-host"), on_tls_error=failure.set_result)
        with pytest.raises(socketkit.HostnameMismatchError):
            await aio.AsyncSocket.connect("localhost", server.port, timeout=5, tls=certs.client())
        # The client's alert reaches the server.
        assert isinstance(await failure, socketkit.TLSError)
        server.close()
        with pytest.raises(socketkit.TLSSettingsError):
            await aio.start_server(never, tls=socketkit.TLSSettings("server"))
        aio.detach()

    run(main())


@pytest.mark.parametrize("verdict", ["sync yes", "async yes", "async no", "async raises", "none"])
def test_aio_manual_trust(certs, verdict):
    async def main():
        async def hello(connection):
            await connection.write(b"hello\n")
            await connection.closed

        async def later(answer):
            await asyncio.sleep(0)
            if isinstance(answer, BaseException):
                raise answer
            return answer

        evaluate = {
            "sync yes": lambda trust: trust.verification_error is not None and len(trust.chain) == 2,
            "async yes": lambda trust: later(True),
            "async no": lambda trust: later(False),
            "async raises": lambda trust: later(KeyError("no opinion")),
            "none": None,
        }[verdict]
        async with await aio.start_server(hello, tls=certs.server(), on_tls_error=lambda error: None) as server:
            settings = socketkit.TLSSettings(manual_trust_evaluation=True)  # system roots: verification fails
            if verdict.endswith("yes"):
                sock = await aio.AsyncSocket.connect("127.0.0.1", server.port, timeout=5, tls=settings,
                                                     evaluate_trust=evaluate)
                assert await sock.read_to_data(b"\n") == b"hello\n"
                await sock.close()
            else:
                with pytest.raises(socketkit.PeerRejectedError) as caught:
                    await aio.AsyncSocket.connect("127.0.0.1", server.port, timeout=5, tls=settings,
                                                  evaluate_trust=evaluate)
                if verdict == "async raises":
                    assert isinstance(caught.value.__cause__, KeyError)
        aio.detach()

    run(main())


def test_aio_starttls_in_a_handler(certs):
    async def main():
        async def smtp_like(connection):
            assert await connection.read_to_data(b"\r\n") == b"STARTTLS\r\n"
            await connection.write(b"220 go ahead\r\n")
            info = await connection.start_tls(certs.server())
            assert info.protocol_version == "TLSv1.3"
            line = await connection.read_to_data(b"\r\n")
            await connection.write(b"250 " + line)

        async with await aio.start_server(smtp_like) as server:
            sock = await aio.AsyncSocket.connect("127.0.0.1", server.port, timeout=5)
            await sock.write(b"STARTTLS\r\n")
            assert await sock.read_to_data(b"\r\n") == b"220 go ahead\r\n"
            assert not sock.is_secure
            info = await sock.start_tls(certs.client())
            assert "CN=localhost" in info.peer_certificates[0].subject
            await sock.write(b"EHLO secret\r\n")
            assert await sock.read_to_data(b"\r\n") == b"250 EHLO secret\r\n"
            await sock.close()
        aio.detach()

    run(main())


def test_errors_another_library_left_on_the_loop_thread_do_not_fail_tls(secure_pair):
    # OpenSSL's SSL_get_error reads the thread's error queue: an error another library left
    # there (here a failed PEM parse, on the loop thread) would turn a read's "want more
    # ciphertext" into a failure unless the engine empties the queue before each call.
    import ctypes
    libcrypto = ctypes.CDLL("libcrypto.so.3")
    libcrypto.BIO_new_mem_buf.restype = ctypes.c_void_p
    libcrypto.BIO_new_mem_buf.argtypes = [ctypes.c_char_p, ctypes.c_int]
    libcrypto.PEM_read_bio_X509.restype = ctypes.c_void_p
    libcrypto.PEM_read_bio_X509.argtypes = [ctypes.c_void_p] * 4
    libcrypto.BIO_free.argtypes = [ctypes.c_void_p]
    libcrypto.ERR_peek_error.restype = ctypes.c_ulong
    pair = secure_pair()
    pair.client_recorder.expect("secure")
    pair.server_recorder.expect("secure")
    left = queue_module.Queue()

    def leave_an_error(descriptors):
        bio = libcrypto.BIO_new_mem_buf(b"not a certificate", -1)
        assert libcrypto.PEM_read_bio_X509(bio, None, None, None) is None
        libcrypto.BIO_free(bio)
        left.put(libcrypto.ERR_peek_error())

    for sock in (pair.client, pair.server):
        sock.perform(leave_an_error)
        assert left.get(timeout=WAIT) != 0
    pair.server.read_to_length(5)
    pair.client.read_to_length(5)
    pair.client.write(b"hello")
    pair.server.write(b"world")
    assert pair.server_recorder.expect_bytes(5) == b"hello"
    assert pair.client_recorder.expect_bytes(5) == b"world"
    assert pair.client_recorder.count("disconnect") == 0 and pair.server_recorder.count("disconnect") == 0
