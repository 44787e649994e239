# SPDX-License-Identifier: MIT
"""Revocation by CRL files (issue 33, item 4): a SocketKit client with CRLs refuses an
openssl s_server presenting a revoked certificate; a SocketKit server with CRLs refuses a
Python ssl client whose certificate is revoked; unusable CRL files raise.

Everything listens on 127.0.0.1 with a port the system picks; every wait has a deadline."""
import socket
import ssl

import pytest

import socketkit
from conftest import WAIT
from test_tls_interop import listeners, need, processes, s_server, socketkit_client  # noqa: F401

REVOKED = 23  # X509_V_ERR_CERT_REVOKED
UNABLE_TO_GET_CRL = 3  # X509_V_ERR_UNABLE_TO_GET_CRL


def test_a_socketkit_client_with_crls_refuses_a_revoked_openssl_s_server(processes, certs):  # noqa: F811
    _, port = s_server(processes, certs, "-cert_chain", certs.path("intermediate.pem"), variant="revoked")
    client, recorder = socketkit_client(port, certs.client(crl_files=[certs.path("crls.pem")]))
    try:
        error = recorder.disconnect_error()
        assert type(error) is socketkit.CertificateInvalidError, repr(error)
        assert error.errno == REVOKED and "certificate revoked" in str(error), repr(error)
    finally:
        client.close()


@pytest.mark.parametrize("crls, whole_chain, expected", [
    (["crls.pem"], True, None),
    (["ca.crl.der", "intermediate.crl.pem"], True, None),
    (["intermediate.crl.pem"], True, UNABLE_TO_GET_CRL),  # the root's CRL is missing: fail closed
    (["intermediate.crl.pem"], False, None),  # the leaf only
])
def test_a_socketkit_client_with_crls_against_a_good_openssl_s_server(processes, certs, crls, whole_chain,  # noqa: F811
                                                                        expected):
    _, port = s_server(processes, certs)
    settings = certs.client(crl_files=[certs.path(name) for name in crls], crl_check_whole_chain=whole_chain)
    client, recorder = socketkit_client(port, settings)
    try:
        if expected is None:
            recorder.expect("secure")
        else:
            error = recorder.disconnect_error()
            assert type(error) is socketkit.CertificateInvalidError and error.errno == expected, repr(error)
    finally:
        client.close()


@pytest.mark.parametrize("variant", ["client", "client-revoked"])
def test_a_socketkit_server_with_crls_and_a_python_ssl_client(listeners, certs, variant):  # noqa: F811
    settings = certs.server(verification="require", trust_file=certs.path("ca.pem"),
                            crl_files=[certs.path("ca.crl.pem")])
    listener = listeners(lambda connection: (connection.start_tls(settings), connection.write(b"welcome\n")))
    context = ssl.create_default_context(cafile=certs.path("ca.pem"))
    context.load_cert_chain(certs.path(f"{variant}-chain.pem"), certs.path(f"{variant}.key"))
    with socket.create_connection(("127.0.0.1", listener.port), timeout=WAIT) as raw:
        with context.wrap_socket(raw, server_hostname="localhost") as tls:
            if variant == "client":
                assert tls.recv(64) == b"welcome\n"
                listener.recorder.expect("secure")
                return
            # TLS 1.3: the client's handshake is done before the server judged its
            # certificate; the refusal comes as an alert on the first read.
            with pytest.raises((ssl.SSLError, ConnectionError)):
                tls.recv(64)
    error = listener.recorder.disconnect_error()
    assert type(error) is socketkit.CertificateInvalidError and error.errno == REVOKED, repr(error)


def test_unusable_crl_files_raise(certs, tmp_path):
    for path in [str(tmp_path / "no-such.crl"), certs.path("ca.pem"), certs.path("server.p12"), str(tmp_path)]:
        with pytest.raises(socketkit.TLSSettingsError):
            certs.client(crl_files=[path]).check()
    with pytest.raises(socketkit.TLSSettingsError, match="list of paths"):
        certs.client(crl_files=certs.path("crls.pem")).check()  # type: ignore[arg-type]
    certs.client(crl_files=[certs.path("crls.pem")]).check()
    named = certs.server("wrong-host", crl_files=[certs.path("crls.pem")])
    with pytest.raises(socketkit.TLSSettingsError, match="default settings only"):
        certs.server(server_names={"wrong.example": named}).check()
