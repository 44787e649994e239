# SPDX-License-Identifier: MIT
"""Text that reaches C as a NUL-terminated string is cut at a NUL inside it: C sees
"localhost" in "localhost\\0.evil.test". Every call that takes such text refuses it with a
ValueError (BadParamError, or TLSSettingsError for TLS settings) before ctypes passes it, as
Python's own socket and ssl modules do; and an empty TLS peer name, which would mean "no
host-name check", is refused too."""
import os
import socket

import pytest

import socketkit
from conftest import WAIT, Recorder

EVIL = "localhost\0.evil.test"


class TLSRecorder(Recorder):
    def socket_did_secure(self, sock):
        self._record("secure")


@pytest.fixture
def listener():
    """A Python listener on 127.0.0.1: what the truncated texts would have reached."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    yield server
    server.close()


def refused(call, error=socketkit.BadParamError):
    with pytest.raises(error) as caught:
        call()
    assert isinstance(caught.value, ValueError)
    assert "null character" in str(caught.value)


def test_socket_hosts_interfaces_and_paths(listener, tmp_path):
    port = listener.getsockname()[1]
    recorder = Recorder()
    sock = socketkit.Socket(recorder)
    try:
        refused(lambda: sock.connect_to_host("127.0.0.1\0.evil.test", port, timeout=5))
        refused(lambda: sock.connect_to_host("127.0.0.1", port, interface="127.0.0.1\0x", timeout=5))
        refused(lambda: sock.connect_to_address(("127.0.0.1", port), interface="lo\0x"))
        refused(lambda: sock.connect_to_unix_path(str(tmp_path / "a\0b")))
        refused(lambda: sock.connect_to_address(str(tmp_path / "a\0b")))
        refused(lambda: sock.accept_on_interface("127.0.0.1\0x", 0))
        refused(lambda: sock.accept_on_unix_path(str(tmp_path / "a\0b")))
        refused(lambda: socketkit.lookup_host(EVIL, 80))
        refused(lambda: socketkit.SerialQueue("queue\0name"))
        # Nothing was started: the socket still connects.
        sock.connect_to_host("127.0.0.1", port, timeout=5)
        recorder.expect("connect")
    finally:
        sock.close()


def test_a_raw_unix_address_with_a_nul_inside_is_refused_by_the_library(tmp_path):
    # Python's own check aside, the library refuses it too (it comes with its length).
    path = str(tmp_path / "s").encode()
    raw = socket.AF_UNIX.to_bytes(2, "little") + path + b"\0.evil\0"
    recorder = Recorder()
    sock = socketkit.Socket(recorder)
    error = socketkit._ffi.CError()
    status = socketkit._lib.sk_socket_connect_to_address(sock.handle, raw, len(raw), None, 5.0,
                                                          socketkit._ffi.ctypes.byref(error))
    try:
        assert status == socketkit.BadParamError.code
        assert b"NUL" in error.message
    finally:
        sock.close()


def test_udp_hosts_interfaces_and_groups():
    recorder = Recorder()
    sock = socketkit.UdpSocket(recorder)
    try:
        refused(lambda: sock.bind_to_interface("127.0.0.1\0x", 0))
        refused(lambda: sock.connect_to_host("127.0.0.1\0.evil.test", 9))
        refused(lambda: sock.send_to_host(b"x", "127.0.0.1\0.evil.test", 9))
        sock.bind_to_port(0)
        refused(lambda: sock.join_multicast_group("239.255.0.1\0x"))
        refused(lambda: sock.join_multicast_group("239.255.0.1", "lo\0x"))
        refused(lambda: sock.leave_multicast_group("239.255.0.1\0x"))
        refused(lambda: sock.join_multicast_source("232.1.2.3\0x", "127.0.0.1"))
        refused(lambda: sock.join_multicast_source("232.1.2.3", "127.0.0.1\0x"))
        refused(lambda: sock.leave_multicast_source("232.1.2.3", "127.0.0.1\0x"))
        refused(lambda: sock.send_ipv4_multicast_on_interface("127.0.0.1\0x"))
        refused(lambda: sock.send_ipv6_multicast_on_interface("lo\0x"))
    finally:
        sock.close()


@pytest.mark.parametrize("setting, value", [
    ("peer_name", EVIL),
    ("trust_file", "/etc/ssl/certs/ca-certificates.crt\0x"),
    ("trust_directory", "/etc/ssl/certs\0x"),
    ("certificate_chain_file", "chain.pem\0x"),
    ("private_key_file", "key.pem\0x"),
    ("private_key_password", "secret\0tail"),
    ("private_key_password", b"secret\0tail"),
    ("cipher_list", "HIGH\0:@SECLEVEL=0"),
    ("cipher_suites", "TLS_AES_128_GCM_SHA256\0"),
    ("key_log_file", "/tmp/keys\0.log"),
    ("alpn_protocols", ["h2\0x"]),
])
def test_tls_settings_text(certs, setting, value):
    options = {setting: value}
    if setting == "trust_directory":
        options["trust_file"] = None
    if setting in ("certificate_chain_file", "private_key_file"):
        options.setdefault("certificate_chain_file", certs.path("server-chain.pem"))
        options.setdefault("private_key_file", certs.path("server.key"))
    refused(lambda: certs.client(**options).check(), socketkit.TLSSettingsError)


@pytest.mark.parametrize("setting", ["trust_pem", "certificate_chain_pem", "private_key_pem"])
def test_tls_pem_text_is_checked_by_the_library(certs, setting):
    # PEM text goes to C with its length: the library sees the NUL and refuses it.
    source = {"trust_pem": "ca.pem", "certificate_chain_pem": "server-chain.pem", "private_key_pem": "server.key"}
    options = {"certificate_chain_file": certs.path("server-chain.pem"), "private_key_file": certs.path("server.key")}
    options.pop(setting.replace("_pem", "_file"), None)
    if setting == "trust_pem":
        options["trust_file"] = None
    options[setting] = certs.text(source[setting]) + "\0" + certs.text("other-ca.pem")
    with pytest.raises(socketkit.TLSSettingsError) as caught:
        certs.client(**options).check()
    assert "NUL" in str(caught.value)


def tls_pair(certs, server_variant="server", host="127.0.0.1"):
    server_recorder = TLSRecorder()
    accepted = []

    class Acceptor:
        def socket_did_accept(self, listener, connection):
            connection.delegate = server_recorder
            accepted.append(connection)
            connection.start_tls(certs.server(server_variant))

    listener = socketkit.Socket(Acceptor())
    listener.accept_on_interface("127.0.0.1", 0)
    client_recorder = TLSRecorder()
    client = socketkit.Socket(client_recorder)
    client.ipv6_enabled = False
    client.connect_to_host(host, listener.local_port, timeout=WAIT)
    client_recorder.expect("connect")
    return listener, client, client_recorder, accepted


def test_a_peer_name_with_a_nul_is_refused_not_truncated(certs):
    # Before: verified and sent as SNI as "localhost", so the handshake succeeded.
    listener, client, recorder, accepted = tls_pair(certs, host="localhost")
    try:
        refused(lambda: client.start_tls(certs.client(peer_name=EVIL)), socketkit.TLSSettingsError)
        assert not client.is_secure
    finally:
        for sock in [client, listener] + accepted:
            sock.abort()


def test_an_empty_peer_name_is_refused_not_an_absent_check(certs):
    # Before: no SNI and no host-name check: a certificate for another name passed.
    with pytest.raises(socketkit.TLSSettingsError) as caught:
        certs.client(peer_name="").check()
    assert "peer name" in str(caught.value)
    listener, client, recorder, accepted = tls_pair(certs, server_variant="wrong-host")
    try:
        with pytest.raises(socketkit.TLSSettingsError):
            client.start_tls(certs.client(peer_name=""))
        client.start_tls(certs.client())  # unset: the host given to connect is verified
        assert type(recorder.disconnect_error()) is socketkit.HostnameMismatchError
        assert recorder.count("secure") == 0
    finally:
        for sock in [client, listener] + accepted:
            sock.abort()


def test_a_client_over_a_unix_socket_needs_a_peer_name(certs, tmp_path):
    # No host to check the certificate's names against: before, the chain alone was
    # checked, so a certificate for any name passed.
    path = str(tmp_path / "tls.sock")
    accepted = []

    class Acceptor:
        def socket_did_accept(self, listener, connection):
            connection.delegate = TLSRecorder()
            accepted.append(connection)
            connection.start_tls(certs.server("wrong-host"))

    listener = socketkit.Socket(Acceptor())
    listener.accept_on_unix_path(path)
    try:
        for name, expected in [(None, socketkit.TLSSettingsError), ("localhost", socketkit.HostnameMismatchError)]:
            recorder = TLSRecorder()
            client = socketkit.Socket(recorder)
            client.connect_to_unix_path(path, timeout=WAIT)
            client.start_tls(certs.client(peer_name=name))
            assert type(recorder.disconnect_error()) is expected
            assert recorder.count("secure") == 0
            client.close()
    finally:
        listener.close()
        for connection in accepted:
            connection.abort()


def test_the_helper_keeps_plain_text_and_paths():
    from socketkit import _ffi

    assert _ffi.c_string(None, "x") is None
    assert _ffi.c_string("h\u00e9llo", "x") == "h\u00e9llo".encode()
    assert _ffi.c_string(b"bytes", "x") == b"bytes"
    assert _ffi.c_string(os.path.join("a", "b"), "x", path=True) == os.fsencode(os.path.join("a", "b"))
