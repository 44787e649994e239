# SPDX-License-Identifier: MIT
"""PKCS#12 identities (issue 33, item 3): a SocketKit server whose identity is a PKCS#12
file or its bytes, verified by Python's ssl module and by openssl s_client; a SocketKit
client whose certificate is PKCS#12, accepted by a Python ssl server that requires one;
every unusable identity a TLSSettingsError naming the cause.

Everything listens on 127.0.0.1 with a port the system picks; every wait has a deadline."""
import socket
import ssl

import pytest

import socketkit
from conftest import WAIT, Recorder, StdlibTLSServer
from test_tls_interop import listeners, need, processes, socketkit_client, stdlib_client_context  # noqa: F401


def leaf_and_intermediate(certs):
    return [ssl.PEM_cert_to_DER_cert(certs.text(name)) for name in ("server.pem", "intermediate.pem")]


@pytest.mark.parametrize("form", ["file", "data", "3des", "no password"])
def test_python_ssl_client_verifies_a_socketkit_server_with_a_pkcs12_identity(listeners, certs, form):  # noqa: F811
    if form == "file":
        settings = socketkit.TLSSettings.server(pkcs12_file=certs.path("server.p12"), pkcs12_password="secret")
    elif form == "data":
        data = (certs.directory / "server.p12").read_bytes()
        settings = socketkit.TLSSettings.server(pkcs12_data=data, pkcs12_password=b"secret")
    elif form == "3des":
        settings = socketkit.TLSSettings.server(pkcs12_file=certs.path("server-3des.p12"), pkcs12_password="secret")
    else:
        settings = socketkit.TLSSettings.server(pkcs12_file=certs.path("server-nopass.p12"))
    listener = listeners(lambda connection: (connection.start_tls(settings), connection.write(b"hello\n")))
    context = stdlib_client_context(certs)  # verifies the chain and the name
    with socket.create_connection(("127.0.0.1", listener.port), timeout=WAIT) as raw:
        with context.wrap_socket(raw, server_hostname="localhost") as tls:
            buffer = b""
            while not buffer.endswith(b"\n"):
                buffer += tls.recv(64)
            assert buffer == b"hello\n"
            assert tls.getpeercert(binary_form=True) == leaf_and_intermediate(certs)[0]
            listener.recorder.expect("secure")
            if hasattr(tls, "get_verified_chain"):  # Python 3.13
                assert [bytes(c) for c in tls.get_verified_chain()][:2] == leaf_and_intermediate(certs)


def test_openssl_s_client_verifies_a_socketkit_server_with_a_pkcs12_identity(processes, listeners, certs):  # noqa: F811
    need("openssl")
    settings = socketkit.TLSSettings.server(pkcs12_file=certs.path("server.p12"), pkcs12_password="secret")
    listener = listeners(lambda connection: (connection.start_tls(settings), connection.write(b"hello\n")))
    client = processes(["openssl", "s_client", "-connect", f"127.0.0.1:{listener.port}", "-servername", "localhost",
                        "-verify_hostname", "localhost", "-CAfile", certs.path("ca.pem"), "-verify_return_error"])
    client.wait_for(r"hello")
    listener.recorder.expect("secure")
    client.close_stdin()
    assert client.wait() == 0, client.output
    assert client.wait_for(r"Verify return code: (\d+)").group(1) == "0"
    client.wait_for(r"Verified peername: localhost")


def test_a_pkcs12_client_certificate_is_accepted_by_a_python_ssl_server_requiring_one(certs):
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(certs.path("server-chain.pem"), certs.path("server.key"))
    context.verify_mode = ssl.CERT_REQUIRED
    context.load_verify_locations(certs.path("ca.pem"))
    seen = {}

    def handler(tls):
        seen["peer"] = tls.getpeercert()
        tls.sendall(b"welcome\n")
        tls.unwrap()

    server = StdlibTLSServer(context, handler)
    settings = certs.client(pkcs12_data=(certs.directory / "client.p12").read_bytes(), pkcs12_password="secret")
    client, recorder = socketkit_client(server.port, settings)
    try:
        client.read_to_data(socketkit.LF)
        assert recorder.expect("read")[0][1] == b"welcome\n"
        server.join()
        assert not server.errors, server.errors
        assert seen["peer"]["subject"] == ((("commonName", "SocketKit Test Client"),),), seen["peer"]
    finally:
        client.close()
        server.close()


def test_unusable_pkcs12_identities_raise_with_the_reason(certs, tmp_path):
    def refused(expected, **options):
        with pytest.raises(socketkit.TLSSettingsError) as caught:
            socketkit.TLSSettings.server(**options).check()
        assert expected in str(caught.value), str(caught.value)
        return caught.value

    p12 = certs.path("server.p12")
    refused("wrong password", pkcs12_file=p12, pkcs12_password="wrong")
    refused("wrong password", pkcs12_file=p12)
    refused("not PKCS#12", pkcs12_data=b"not a PKCS#12 file", pkcs12_password="secret")
    data = (certs.directory / "server.p12").read_bytes()
    refused("PKCS#12 data", pkcs12_data=data[: len(data) // 2], pkcs12_password="secret")
    missing = refused("no-such.p12", pkcs12_file=str(tmp_path / "no-such.p12"), pkcs12_password="secret")
    assert missing.errno == 2  # ENOENT
    refused("legacy provider", pkcs12_file=certs.path("server-legacy.p12"), pkcs12_password="secret")
    refused("no private key", pkcs12_file=certs.path("certs-only.p12"), pkcs12_password="secret")
    refused("not both", certificate_chain_file=certs.path("server-chain.pem"),
            private_key_file=certs.path("server.key"), pkcs12_file=p12, pkcs12_password="secret")
    refused("not both", pkcs12_file=p12, pkcs12_data=data)
    refused("empty", pkcs12_data=b"")
    refused("null", pkcs12_file=p12, pkcs12_password="sec\0ret")
    refused("bytes", pkcs12_data="server.p12")  # type: ignore[arg-type]
    socketkit.TLSSettings.server(pkcs12_file=p12, pkcs12_password="secret").check()


def test_start_tls_with_a_wrong_pkcs12_password_raises(listeners, certs):  # noqa: F811
    listener = listeners(lambda connection: None)
    client = socketkit.Socket(Recorder())
    try:
        client.connect_to_host("127.0.0.1", listener.port, timeout=10)
        with pytest.raises(socketkit.TLSSettingsError, match="wrong password"):
            client.start_tls(certs.client(pkcs12_file=certs.path("client.p12"), pkcs12_password="wrong"))
    finally:
        client.close()


def test_a_pkcs12_file_renamed_over_is_served_to_the_next_client(listeners, certs, tmp_path):  # noqa: F811
    path = tmp_path / "identity.p12"

    def install(name):
        (tmp_path / "new.p12").write_bytes((certs.directory / name).read_bytes())
        (tmp_path / "new.p12").rename(path)

    install("server.p12")
    settings = socketkit.TLSSettings.server(pkcs12_file=str(path), pkcs12_password="secret")
    listener = listeners(lambda connection: (connection.start_tls(settings), connection.write(b"hi\n")))
    context = stdlib_client_context(certs, check_hostname=False)

    def subject():
        with socket.create_connection(("127.0.0.1", listener.port), timeout=WAIT) as raw:
            with context.wrap_socket(raw, server_hostname="peer.test") as tls:
                return tls.getpeercert()["subject"]

    assert subject() == ((("commonName", "localhost"),),)
    install("wrong-host.p12")
    assert subject() == ((("commonName", "wrong.example"),),)
