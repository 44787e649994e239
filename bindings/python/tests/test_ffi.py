# SPDX-License-Identifier: MIT
"""The binding's tables agree with the C library's: prototypes, struct layouts and error codes."""
import ctypes
import importlib.util
import pathlib
import re
import shutil
import subprocess

import pytest

import socketkit
from socketkit import _ffi, errors

REPOSITORY = pathlib.Path(__file__).resolve().parents[3]
HEADER = REPOSITORY / "include" / "socketkit.h"


def _load_abi_checker():
    spec = importlib.util.spec_from_file_location("check_abi", REPOSITORY / "bindings" / "c" / "tests" / "check_abi.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _class_of(ctype):
    if ctype is None:
        return "void"
    if ctype in (ctypes.c_char_p, ctypes.c_void_p) or hasattr(ctype, "_type_") and isinstance(ctype._type_, type) \
            or getattr(ctype, "__name__", "").startswith(("LP_", "CFunctionType")):
        return "pointer"
    if issubclass(ctype, ctypes._CFuncPtr):
        return "pointer"
    size = ctypes.sizeof(ctype)
    if ctype is ctypes.c_double:
        return "double"
    return {2: "int16", 4: "int32", 8: "int64"}[size]


def _function_pointer_typedefs(text):
    """Names of the header's function-pointer typedefs (sk_udp_send_filter_fn, ...): the ABI
    checker does not resolve typedefs, and these are pointers."""
    return set(re.findall(r"typedef\s[^;{}]*?\(\s*\*\s*(\w+)\s*\)\s*\(", text))


def test_every_header_function_is_declared_with_matching_types():
    checker = _load_abi_checker()
    text = HEADER.read_text()
    declared = checker.declarations(text)
    pointer_types = _function_pointer_typedefs(text)
    assert {"sk_udp_receive_filter_fn", "sk_udp_send_filter_fn"} <= pointer_types

    def abi_class(declaration):
        if declaration.split() and declaration.replace("const", " ").split()[0] in pointer_types:
            return "pointer"
        return checker.abi_class(declaration)

    assert set(declared) == set(_ffi.PROTOTYPES), set(declared) ^ set(_ffi.PROTOTYPES)
    for name, (result, parameters) in declared.items():
        expected = [abi_class(result)] + [abi_class(parameter) for parameter in parameters]
        assert not any(kind.startswith("?") for kind in expected), f"{name}: unknown type in {expected}"
        restype, argtypes = _ffi.PROTOTYPES[name]
        actual = [_class_of(restype)] + [_class_of(argtype) for argtype in argtypes]
        assert actual == expected, f"{name}: binding {actual}, header {expected}"


def test_struct_layouts_match_the_header():
    pointer = ctypes.sizeof(ctypes.c_void_p)
    assert ctypes.sizeof(_ffi.SocketDelegate) == 17 * pointer
    assert [name for name, _ in _ffi.SocketDelegate._fields_][-4:] == ["did_disconnect", "did_secure",
                                                                        "did_receive_trust", "did_cancel_read"]
    assert ctypes.sizeof(_ffi.CError) == 8 + _ffi.ERROR_MESSAGE_CAPACITY
    assert ctypes.sizeof(_ffi.SocketDescriptors) == 16
    assert ctypes.sizeof(_ffi.UdpSocketDelegate) == 8 * pointer
    assert [name for name, _ in _ffi.UdpSocketDelegate._fields_] == [
        "did_connect", "did_not_connect", "did_send", "did_not_send", "did_receive", "did_receive_error", "did_close",
        "did_receive_with_packet_info"]
    assert ctypes.sizeof(_ffi.UdpPacketInfo) == 128 + 4 + 4
    # sk_event_t, with the UDP fields, then the TLS trust, at the end
    assert ctypes.sizeof(_ffi.Event) == _ffi.EVENT_FORMAT.size == 128
    assert (_ffi.Event.kind.offset, _ffi.Event.tag.offset, _ffi.Event.token.offset) == (16, 24, 80)
    assert (_ffi.Event.udp_sock.offset, _ffi.Event.address.offset, _ffi.Event.address_length.offset,
            _ffi.Event.context.offset, _ffi.Event.trust.offset) == (88, 96, 104, 112, 120)
    assert (_ffi.EVENT_SECURE, _ffi.EVENT_TRUST) == (14, 15)
    # TLS
    assert ctypes.sizeof(_ffi.Certificate) == 2 * pointer
    assert ctypes.sizeof(_ffi.TLSTrust) == 8 + 4 * pointer
    assert ctypes.sizeof(_ffi.TLSInfo) == 16 + 64 + 256 + 256 + 4 + 4
    assert ctypes.sizeof(_ffi.CertificateInfo) == 512 + 512 + 8 + 8


_LAYOUT_PROGRAM = r"""
#include <stddef.h>
#include <stdio.h>
#include "socketkit.h"
#define FIELD(type, name) printf(#type "." #name " %zu\n", offsetof(type, name));
int main(void) {
    printf("sk_event_t %zu\n", sizeof(sk_event_t));
    printf("sk_socket_delegate_t %zu\n", sizeof(sk_socket_delegate_t));
    printf("sk_udp_socket_delegate_t %zu\n", sizeof(sk_udp_socket_delegate_t));
    printf("sk_error_t %zu\n", sizeof(sk_error_t));
    printf("sk_certificate_t %zu\n", sizeof(sk_certificate_t));
    printf("sk_tls_trust_t %zu\n", sizeof(sk_tls_trust_t));
    printf("sk_tls_info_t %zu\n", sizeof(sk_tls_info_t));
    printf("sk_certificate_info_t %zu\n", sizeof(sk_certificate_info_t));
    printf("sk_udp_packet_info_t %zu\n", sizeof(sk_udp_packet_info_t));
    %s
    return 0;
}
"""


@pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler")
def test_struct_layouts_match_a_compiled_header(tmp_path):
    """Every field offset of the structs the binding declares, as the C compiler lays them
    out from socketkit.h, equals the ctypes declaration's."""
    fields = [("sk_event_t", _ffi.Event), ("sk_udp_socket_delegate_t", _ffi.UdpSocketDelegate),
              ("sk_socket_delegate_t", _ffi.SocketDelegate), ("sk_error_t", _ffi.CError),
              ("sk_certificate_t", _ffi.Certificate), ("sk_tls_trust_t", _ffi.TLSTrust),
              ("sk_tls_info_t", _ffi.TLSInfo), ("sk_certificate_info_t", _ffi.CertificateInfo),
              ("sk_udp_packet_info_t", _ffi.UdpPacketInfo)]
    lines = " ".join(f"FIELD({c_name}, {name})" for c_name, structure in fields for name, _ in structure._fields_)
    source = tmp_path / "layout.c"
    source.write_text(_LAYOUT_PROGRAM.replace("%s", lines))
    program = tmp_path / "layout"
    subprocess.run(["cc", "-I", str(HEADER.parent), str(source), "-o", str(program)], check=True)
    measured = dict(line.rsplit(" ", 1) for line in subprocess.run(
        [str(program)], check=True, capture_output=True, text=True).stdout.splitlines())
    for c_name, structure in fields:
        assert int(measured[c_name]) == ctypes.sizeof(structure), c_name
        for name, _ in structure._fields_:
            assert int(measured[f"{c_name}.{name}"]) == getattr(structure, name).offset, f"{c_name}.{name}"


def test_error_tables_agree_with_the_library():
    names = {
        errors.BAD_CONFIG: "SK_ERR_BAD_CONFIG", errors.BAD_PARAM: "SK_ERR_BAD_PARAM",
        errors.CONNECT_TIMEOUT: "SK_ERR_CONNECT_TIMEOUT", errors.READ_TIMEOUT: "SK_ERR_READ_TIMEOUT",
        errors.WRITE_TIMEOUT: "SK_ERR_WRITE_TIMEOUT", errors.READ_MAXED_OUT: "SK_ERR_READ_MAXED_OUT",
        errors.CLOSED: "SK_ERR_CLOSED", errors.OTHER: "SK_ERR_OTHER", errors.SYSTEM: "SK_ERR_SYSTEM",
        errors.RESOLUTION: "SK_ERR_RESOLUTION", errors.INVALID_HANDLE: "SK_ERR_INVALID_HANDLE",
        errors.SEND_TIMEOUT: "SK_ERR_SEND_TIMEOUT", errors.TRUNCATED: "SK_ERR_TRUNCATED",
        errors.TLS_FAILED: "SK_ERR_TLS_FAILED", errors.TLS_CERT_EXPIRED: "SK_ERR_TLS_CERT_EXPIRED",
        errors.TLS_CERT_NOT_YET_VALID: "SK_ERR_TLS_CERT_NOT_YET_VALID",
        errors.TLS_SELF_SIGNED: "SK_ERR_TLS_SELF_SIGNED", errors.TLS_UNKNOWN_ISSUER: "SK_ERR_TLS_UNKNOWN_ISSUER",
        errors.TLS_HOSTNAME_MISMATCH: "SK_ERR_TLS_HOSTNAME_MISMATCH", errors.TLS_CERT_INVALID: "SK_ERR_TLS_CERT_INVALID",
        errors.TLS_CLIENT_CERT_REQUIRED: "SK_ERR_TLS_CLIENT_CERT_REQUIRED",
        errors.TLS_PROTOCOL_VERSION: "SK_ERR_TLS_PROTOCOL_VERSION", errors.TLS_PEER_CLOSED: "SK_ERR_TLS_PEER_CLOSED",
        errors.TLS_HANDSHAKE_TIMEOUT: "SK_ERR_TLS_HANDSHAKE_TIMEOUT", errors.TLS_TRUNCATED: "SK_ERR_TLS_TRUNCATED",
        errors.TLS_PEER_REJECTED: "SK_ERR_TLS_PEER_REJECTED", errors.TLS_SETTINGS: "SK_ERR_TLS_SETTINGS",
        errors.WRITE_QUEUE_FULL: "SK_ERR_WRITE_QUEUE_FULL",
        errors.PROXY: "SK_ERR_PROXY", errors.PROXY_AUTH: "SK_ERR_PROXY_AUTH",
    }
    header = HEADER.read_text()
    assert set(re.findall(r"\b(SK_ERR_\w+)\s*=", header)) == set(names.values()), "a code the binding does not map"
    assert set(names) == set(errors.CLASSES)
    for code, name in names.items():
        assert _ffi.lib.sk_error_name(code).decode() == name
        exception = errors.error_from_code(code, 0, "message")
        assert isinstance(exception, socketkit.Error) and exception.code == code
    assert _ffi.lib.sk_error_name(-31).decode() == "SK_ERR_UNKNOWN", "a C code the binding does not know"
    assert type(errors.error_from_code(errors.PROXY_AUTH)) is socketkit.ProxyAuthenticationError
    assert isinstance(errors.error_from_code(errors.PROXY_AUTH), socketkit.ProxyError)
    assert type(errors.error_from_code(errors.WRITE_QUEUE_FULL)) is socketkit.WriteQueueFullError
    assert isinstance(errors.error_from_code(errors.SEND_TIMEOUT), socketkit.TimeoutError)
    assert isinstance(errors.error_from_code(errors.SEND_TIMEOUT), TimeoutError)
    assert type(errors.error_from_code(errors.TRUNCATED)) is socketkit.TruncatedError
    # TLS: one base class, the certificate codes grouped, built-in bases where they fit
    for code in range(errors.TLS_SETTINGS, errors.TLS_FAILED + 1):
        assert isinstance(errors.error_from_code(code), socketkit.TLSError), code
    for code in range(errors.TLS_CERT_INVALID, errors.TLS_CERT_EXPIRED + 1):
        assert isinstance(errors.error_from_code(code), socketkit.CertificateVerificationError), code
    assert isinstance(errors.error_from_code(errors.TLS_HANDSHAKE_TIMEOUT), TimeoutError)
    assert isinstance(errors.error_from_code(errors.TLS_SETTINGS), ValueError)
    assert isinstance(errors.error_from_code(errors.TLS_TRUNCATED), ConnectionError)
    assert not isinstance(errors.error_from_code(errors.TLS_TRUNCATED), socketkit.ClosedError)


def test_the_library_exports_every_function_the_binding_declares():
    assert _ffi.MISSING == [], f"{_ffi.lib._name} lacks {_ffi.MISSING}: rebuild it (make library)"


def test_versions():
    """The package's version is the header's (setup.py reads it from there), and the library
    loaded is that version: Tests/check_version.py checks the other faces."""
    text = HEADER.read_text()
    numbers = dict(re.findall(r'^#define SK_VERSION_(\w+) "?([0-9.]+)"?\s*$', text, re.MULTILINE))
    assert socketkit.__version__ == numbers["STRING"] == "{MAJOR}.{MINOR}.{PATCH}".format(**numbers)
    assert socketkit.LIBRARY_VERSION == socketkit.__version__
    assert _ffi.lib.sk_version_number() == _ffi.EXPECTED_VERSION_NUMBER == int(numbers["NUMBER"])

