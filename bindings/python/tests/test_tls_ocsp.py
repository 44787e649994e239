# SPDX-License-Identifier: MIT
"""OCSP stapling (issue 33, item 4): a SocketKit client asking for a staple from openssl
s_server -status_file (good, revoked, unverifiable, garbage, none), a SocketKit server
stapling its response file for openssl s_client -status, and unusable files. The responses
come from openssl ocsp in Tests/certs/make-test-certs.sh.

Everything listens on 127.0.0.1 with a port the system picks; every wait has a deadline."""
import os

import pytest

import socketkit
from test_tls_interop import listeners, need, processes, s_server, socketkit_client  # noqa: F401

REVOKED = 23  # X509_V_ERR_CERT_REVOKED
VERIFY_NEEDED = 73  # X509_V_ERR_OCSP_VERIFY_NEEDED
VERIFY_FAILED = 74  # X509_V_ERR_OCSP_VERIFY_FAILED
CERT_UNKNOWN = 75  # X509_V_ERR_OCSP_CERT_UNKNOWN


def staple_server(processes, certs, staple, *options, variant="server"):  # noqa: F811
    status = ["-status_file", certs.path(staple)] if staple else []
    chain = ["-cert_chain", certs.path("intermediate.pem")] if variant != "server" else []
    return s_server(processes, certs, *chain, *status, *options, variant=variant)


@pytest.mark.parametrize("version", ["-tls1_2", "-tls1_3"])
def test_a_good_staple_from_openssl_passes_and_is_shown(processes, certs, version):  # noqa: F811
    _, port = staple_server(processes, certs, "server-ocsp-good.der", version)
    client, recorder = socketkit_client(port, certs.client(request_ocsp_staple=True, require_ocsp_staple=True))
    try:
        recorder.expect("secure")
        with open(certs.path("server-ocsp-good.der"), "rb") as file:
            assert recorder.tls_info.ocsp_response == file.read()
    finally:
        client.close()


def test_no_staple_is_shown_when_none_was_asked_for(processes, certs):  # noqa: F811
    _, port = staple_server(processes, certs, "server-ocsp-good.der")
    client, recorder = socketkit_client(port, certs.client())
    try:
        recorder.expect("secure")
        assert recorder.tls_info.ocsp_response is None
    finally:
        client.close()


@pytest.mark.parametrize("version", ["-tls1_2", "-tls1_3"])
def test_a_revoked_staple_fails_the_handshake(processes, certs, version):  # noqa: F811
    _, port = staple_server(processes, certs, "revoked-ocsp.der", version, variant="revoked")
    client, recorder = socketkit_client(port, certs.client(request_ocsp_staple=True))
    try:
        error = recorder.disconnect_error()
        assert type(error) is socketkit.CertificateInvalidError, repr(error)
        assert error.errno == REVOKED and "OCSP: certificate revoked" in str(error), repr(error)
    finally:
        client.close()


@pytest.mark.parametrize("staple, require, expected", [
    ("server-ocsp-untrusted.der", False, VERIFY_FAILED),  # signed by a root we do not trust
    ("ocsp-garbage.der", False, VERIFY_FAILED),  # "successful", but its basic response is garbage
    ("revoked-ocsp.der", False, VERIFY_FAILED),  # another certificate's
    ("server-ocsp-unknown.der", False, CERT_UNKNOWN),  # the responder does not know it
    ("ocsp-trylater.der", False, VERIFY_FAILED),  # a response that is no answer
    (None, True, VERIFY_NEEDED),
    (None, False, None),
])
def test_bad_or_missing_staples(processes, certs, staple, require, expected):  # noqa: F811
    _, port = staple_server(processes, certs, staple)
    client, recorder = socketkit_client(port, certs.client(request_ocsp_staple=True, require_ocsp_staple=require))
    try:
        if expected is None:
            recorder.expect("secure")
            assert recorder.tls_info.ocsp_response is None
        else:
            error = recorder.disconnect_error()
            assert type(error) is socketkit.CertificateInvalidError, repr(error)
            assert error.errno == expected and "OCSP:" in str(error), repr(error)
    finally:
        client.close()


@pytest.mark.parametrize("staple", ["server-ocsp-good.der", None])
def test_a_socketkit_server_staples_for_openssl_s_client(processes, listeners, certs, staple):  # noqa: F811
    need("openssl")
    settings = certs.server(ocsp_response_file=certs.path(staple) if staple else None)
    listener = listeners(lambda connection: (connection.start_tls(settings), connection.write(b"welcome\n")))
    client = processes(["openssl", "s_client", "-connect", f"127.0.0.1:{listener.port}", "-servername", "localhost",
                        "-CAfile", certs.path("ca.pem"), "-status"])
    client.wait_for(r"welcome")
    client.close_stdin()
    assert client.wait() == 0, client.output
    if staple:
        assert client.wait_for(r"OCSP Response Status: successful")
        assert client.wait_for(r"Cert Status: good")
    else:
        assert client.wait_for(r"OCSP response: no response sent")


def test_a_socketkit_server_staples_its_renewed_file_for_a_socketkit_client(listeners, certs, tmp_path):  # noqa: F811
    path = tmp_path / "staple.der"

    def install(name):
        with open(certs.path(name), "rb") as source:
            (tmp_path / "staple.new").write_bytes(source.read())
        os.replace(tmp_path / "staple.new", path)

    install("server-ocsp-good.der")
    settings = certs.server("revoked", ocsp_response_file=path)
    listener = listeners(lambda connection: connection.start_tls(settings))
    client_settings = certs.client(request_ocsp_staple=True, session_resumption=False)
    # The good staple is for another certificate than the revoked one presented: refused.
    client, recorder = socketkit_client(listener.port, client_settings, host="localhost")
    error = recorder.disconnect_error()
    client.close()
    assert error.errno == VERIFY_FAILED, repr(error)
    install("revoked-ocsp.der")
    client, recorder = socketkit_client(listener.port, client_settings, host="localhost")
    error = recorder.disconnect_error()
    client.close()
    assert type(error) is socketkit.CertificateInvalidError and error.errno == REVOKED, repr(error)


def test_unusable_ocsp_settings_raise(certs, tmp_path):
    for path in [str(tmp_path / "no-such.der"), certs.path("ca.pem"), certs.path("ocsp-garbage.der"),
                 certs.path("ocsp-trylater.der"), str(tmp_path)]:
        with pytest.raises(socketkit.TLSSettingsError):
            certs.server(ocsp_response_file=path).check()
    certs.server(ocsp_response_file=certs.path("server-ocsp-good.der")).check()
    with pytest.raises(socketkit.TLSSettingsError, match="server setting"):
        certs.client(ocsp_response_file=certs.path("server-ocsp-good.der")).check()
    with pytest.raises(socketkit.TLSSettingsError, match="client settings"):
        certs.server(require_ocsp_staple=True).check()
