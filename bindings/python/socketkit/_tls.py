# SPDX-License-Identifier: MIT
"""TLS: settings, certificates, what a handshake settled, and manual trust answers.

:class:`TLSSettings` is a plain value; each :meth:`Socket.start_tls` builds a C
``sk_tls_settings_t`` from it, hands it over and releases it (SocketKit copies what the
settings say when the handshake is queued, and shares one OpenSSL context between sockets
started with equal settings).
"""
from __future__ import annotations

import base64
import binascii
import contextlib
import datetime
import enum
import os
import re
import threading
from collections.abc import Mapping
from ctypes import POINTER, byref, c_char_p, c_size_t, c_void_p, cast, create_string_buffer, string_at
from dataclasses import dataclass, field
from typing import Any, Dict, Iterator, List, Optional, Sequence, Union

from . import _ffi
from ._ffi import lib
from . import errors
from ._status import error_from_c, raise_for
from .errors import Error, TLSSettingsError, error_from_code

PathLike = Union[str, bytes, "os.PathLike[str]", "os.PathLike[bytes]"]
PEM = Union[str, bytes]


class TLSRole(enum.IntEnum):
    """Which side of the handshake a socket takes (sk_tls_role_t)."""

    CLIENT = _ffi.TLS_CLIENT
    SERVER = _ffi.TLS_SERVER


class TLSVerification(enum.IntEnum):
    """How the peer's certificate is checked (sk_tls_verification_t)."""

    #: Clients verify the server; servers ask clients for nothing.
    DEFAULT = _ffi.TLS_VERIFY_DEFAULT
    #: Accept any peer (a client is then defenceless against impostors).
    NONE = _ffi.TLS_VERIFY_NONE
    #: Verify the peer's certificate if it sends one (servers ask for one, but let clients
    #: without one in).
    PEER = _ffi.TLS_VERIFY_PEER
    #: Servers: clients must present a certificate that verifies.
    REQUIRE = _ffi.TLS_VERIFY_REQUIRE_CERTIFICATE


class TLSVersion(enum.IntEnum):
    """Protocol versions (sk_tls_version_t). The values are the wire versions, as those of
    :class:`ssl.TLSVersion`, so ``ssl.TLSVersion.TLSv1_3`` is accepted too."""

    TLSv1 = _ffi.TLS_VERSION_1_0
    TLSv1_1 = _ffi.TLS_VERSION_1_1
    TLSv1_2 = _ffi.TLS_VERSION_1_2
    TLSv1_3 = _ffi.TLS_VERSION_1_3

    @property
    def label(self) -> str:
        """OpenSSL's name: "TLSv1", "TLSv1.1", "TLSv1.2", "TLSv1.3"."""
        return {0x0301: "TLSv1", 0x0302: "TLSv1.1", 0x0303: "TLSv1.2", 0x0304: "TLSv1.3"}[self.value]


def _enum_value(kind: type, value: Any, names: Dict[str, Any], what: str) -> int:
    if isinstance(value, str):
        key = value.strip().lower().replace("-", "_").replace(" ", "_")
        if key in names:
            return int(names[key])
        raise TLSSettingsError(f"unknown {what} {value!r} (one of {', '.join(sorted(names))})", None, 0)
    try:
        return int(kind(value))
    except (ValueError, TypeError):
        raise TLSSettingsError(f"unknown {what} {value!r}", None, 0) from None


_ROLES = {"client": TLSRole.CLIENT, "server": TLSRole.SERVER}
_VERIFICATIONS = {"default": TLSVerification.DEFAULT, "none": TLSVerification.NONE, "peer": TLSVerification.PEER,
                  "verify": TLSVerification.PEER, "require": TLSVerification.REQUIRE,
                  "require_certificate": TLSVerification.REQUIRE}
_VERSIONS = {"tlsv1": TLSVersion.TLSv1, "tlsv1.0": TLSVersion.TLSv1, "tlsv1_0": TLSVersion.TLSv1,
             "1.0": TLSVersion.TLSv1, "tlsv1.1": TLSVersion.TLSv1_1, "tlsv1_1": TLSVersion.TLSv1_1,
             "1.1": TLSVersion.TLSv1_1, "tlsv1.2": TLSVersion.TLSv1_2, "tlsv1_2": TLSVersion.TLSv1_2,
             "1.2": TLSVersion.TLSv1_2, "tlsv1.3": TLSVersion.TLSv1_3, "tlsv1_3": TLSVersion.TLSv1_3,
             "1.3": TLSVersion.TLSv1_3}


def _pem(value: PEM) -> bytes:
    # With its length: the library itself refuses PEM text with a NUL inside.
    return value.encode() if isinstance(value, str) else bytes(value)


def _set(setting: str, status: int) -> None:
    """A setter's status: BadParamError naming the setting when it refused the value."""
    if status < 0:
        raise error_from_code(status, 0, f"TLS setting {setting} refused: {lib.sk_strerror(status).decode()}")


@dataclass
class TLSSettings:
    """What :meth:`Socket.start_tls` needs: the side of the handshake, whom to trust, who we
    are, and the protocol limits. Secure by default: a client verifies the server against
    the system trust store and the host it connected to (an IP literal against the
    certificate's IP addresses, and never sent as SNI); TLS 1.2 minimum; OpenSSL security
    level 2; a 30 s handshake timeout.

    Pass everything as keywords::

        TLSSettings(trust_file="ca.pem", alpn_protocols=["h2", "http/1.1"])
        TLSSettings("server", certificate_chain_file="chain.pem", private_key_file="key.pem")

    - ``role``: "client" (default) or "server" (or :class:`TLSRole`).
    - ``peer_name``: the name sent as SNI and verified (clients); default: the connect host.
      An empty name is refused (it would turn host-name verification off). A Unix-domain
      connection has no host: a client that verifies must be given a name, or its
      handshake ends at once with :class:`TLSSettingsError`.
    - trust roots: the system store, unless one of ``trust_file`` (PEM file),
      ``trust_directory`` (hashed directory, ``openssl rehash``) or ``trust_pem`` (PEM
      text) is given.
    - our identity: ``certificate_chain_file`` / ``certificate_chain_pem`` (our certificate
      then its intermediates) and ``private_key_file`` / ``private_key_pem``, encrypted if
      ``private_key_password`` is given. Servers need both; clients send them when asked.
    - or our identity as PKCS#12 (``.p12``, ``.pfx``): ``pkcs12_file`` or ``pkcs12_data``
      (the bytes), with ``pkcs12_password`` (None: none). Not together with the PEM
      identity. A wrong password, data that is not PKCS#12, a missing file or one without a
      key is a :class:`TLSSettingsError` with OpenSSL's reason, never a handshake without
      the identity. OpenSSL 3's format and the older 3DES one are read; RC2-40 (``openssl
      pkcs12 -legacy``, OpenSSL 1.x's default) needs OpenSSL's legacy provider, which
      SocketKit does not load: such a file is a :class:`TLSSettingsError` saying so.
    - ``verification``: "default", "none", "peer" or "require" (or :class:`TLSVerification`).
    - ``crl_files``: certificate revocation lists (files: PEM, one or more CRLs each, or
      DER) the peer's chain is checked against, on a client as on a server verifying client
      certificates. Empty (default): no revocation check. Given, a revoked certificate
      fails verification (:class:`CertificateInvalidError`, ``errno`` 23,
      X509_V_ERR_CERT_REVOKED, "certificate revoked"), and so does a certificate whose
      issuer has no CRL here ("unable to get certificate CRL": fail closed) or an expired
      CRL. A file that cannot be read or holds no CRL is a :class:`TLSSettingsError`, never
      "no check". The files are read again when they change, as certificates are. A
      server's CRLs are its own, not those of its ``server_names`` settings (refused there).
    - ``crl_check_whole_chain``: True (default): every certificate of the chain needs a CRL
      of its issuer; False: the leaf only.
    - ``ocsp_response_file`` (servers): a DER OCSP response for our certificate (``openssl
      ocsp -respout``), stapled for each client that asks. It must be a successful OCSP
      response: a file that cannot be read or is not one is a :class:`TLSSettingsError`,
      never a handshake without the staple. Read again when it changes, as certificates
      are (a renewed response renamed over the old one is stapled from the next
      connection on). SocketKit does not fetch responses: keep the file current.
    - ``request_ocsp_staple`` (clients): ask the server to staple an OCSP response. A
      stapled response is checked against the chain the handshake verified (signed by the
      leaf's issuer or its delegate chaining to the trust roots, for the leaf and that
      issuer, current with five minutes' leeway): "revoked" fails the handshake
      (:class:`CertificateInvalidError`, ``errno`` 23, "OCSP: certificate revoked"), and
      so does a staple that does not verify, does not parse, is stale or is another
      certificate's (``errno`` 74; "unknown": 75). No staple: the handshake goes on. The
      staple is :attr:`TLSInfo.ocsp_response`.
    - ``require_ocsp_staple`` (clients): a server that staples nothing fails the handshake
      (:class:`CertificateInvalidError`, ``errno`` 73), as for a must-staple certificate;
      implies ``request_ocsp_staple``.
    - ``minimum_version`` / ``maximum_version``: "TLSv1.2", "TLSv1.3", ... (or
      :class:`TLSVersion`, or :class:`ssl.TLSVersion`); None: TLS 1.2 / the newest.
    - ``cipher_list`` (OpenSSL cipher list, TLS 1.2 and older), ``cipher_suites`` (TLS 1.3).
      A list that lowers the security level below 2 (``"@SECLEVEL=0"`` or ``"=1"``) is
      refused.
    - ``alpn_protocols``: offered by a client in order, or chosen by a server in its order
      of preference.
    - ``session_resumption`` (clients): resume earlier sessions with the same peer name
      and port (default True).
    - ``handshake_timeout``: seconds from the start of the handshake until the connection is
      secure (negative: none; default 30); with manual trust evaluation the delegate's
      answer counts too.
    - ``key_log_file``: append the session keys in NSS key-log format (debugging only; a
      new file is created readable by its owner only, one that cannot be opened is a
      :class:`TLSSettingsError`).
    - ``manual_trust_evaluation``: ``socket_did_receive_trust`` decides instead of the
      built-in verdict.
    - ``server_names`` (servers): the certificate for each name a client asks for (SNI),
      as asyncio's ``sni_callback`` would choose it: ``{"example.com": TLSSettings.server(
      ...), "*.example.net": ...}``. A key is a host name (matched without regard to case)
      or ``*.`` and a domain for any one label in front of it; an exact name wins. A name
      not listed, or no SNI: these settings' own certificate. Each value is a server's
      settings whose certificate chain and key (and ALPN list and key-log file) serve the
      name; versions, ciphers and client verification (mode and trust roots) are these
      settings'.

    Files are read again when they change: each :meth:`Socket.start_tls` stats the
    certificate chain, key, PKCS#12 file, CRL files, OCSP response file and trust file or directory named here and, when one was
    replaced (renamed over, as certbot does) or rewritten, the new connection uses the
    current files; connections already made keep theirs.

    Each handshake flight leaves in one send, and the last one (a client's Finished, a
    server's session tickets) together with what follows it at once (writes queued behind
    :meth:`Socket.start_tls` or made in ``socket_did_secure``, an answer written on the loop
    thread to data that came with the peer's Finished): a first request and its answer do
    not wait for a delayed ACK even with ``no_delay`` off (it is on by default).

    What TLS does not do: renegotiation (TLS 1.2 and older) is refused (a peer's request is
    answered with a no_renegotiation alert; a peer that insists ends the connection with
    :class:`TLSFailedError`); revocation is checked against ``crl_files`` and a stapled OCSP
    response when asked for (``request_ocsp_staple``), never by fetching from an OCSP
    responder or a CRL distribution point; the security level cannot be lowered.

    :meth:`check` loads the files and validates everything now, raising
    :class:`TLSSettingsError`; :meth:`Socket.start_tls` does the same. Text with a NUL
    character in any setting (a name, a path, a cipher string, a password, PEM text) is a
    :class:`TLSSettingsError` too, as Python's ssl refuses it: C would see only the text
    before the NUL.
    """

    role: Union[str, TLSRole] = "client"
    peer_name: Optional[str] = None
    trust_file: Optional[PathLike] = None
    trust_directory: Optional[PathLike] = None
    trust_pem: Optional[PEM] = None
    certificate_chain_file: Optional[PathLike] = None
    certificate_chain_pem: Optional[PEM] = None
    private_key_file: Optional[PathLike] = None
    private_key_pem: Optional[PEM] = None
    private_key_password: Optional[Union[str, bytes]] = None
    pkcs12_file: Optional[PathLike] = None
    pkcs12_data: Optional[bytes] = None
    pkcs12_password: Optional[Union[str, bytes]] = None
    crl_files: Sequence[PathLike] = field(default_factory=list)
    crl_check_whole_chain: bool = True
    verification: Union[str, TLSVerification] = "default"
    minimum_version: Optional[Union[str, int]] = None
    maximum_version: Optional[Union[str, int]] = None
    cipher_list: Optional[str] = None
    cipher_suites: Optional[str] = None
    alpn_protocols: Sequence[str] = field(default_factory=list)
    session_resumption: bool = True
    handshake_timeout: float = 30.0
    key_log_file: Optional[PathLike] = None
    manual_trust_evaluation: bool = False
    server_names: Mapping[str, "TLSSettings"] = field(default_factory=dict)
    ocsp_response_file: Optional[PathLike] = None
    request_ocsp_staple: bool = False
    require_ocsp_staple: bool = False

    @classmethod
    def client(cls, **options: Any) -> "TLSSettings":
        """Client settings (the defaults plus `options`)."""
        return cls(role=TLSRole.CLIENT, **options)

    @classmethod
    def server(cls, certificate_chain_file: Optional[PathLike] = None, private_key_file: Optional[PathLike] = None,
               **options: Any) -> "TLSSettings":
        """Server settings with a certificate chain and its key (files, or ``*_pem`` options,
        or ``pkcs12_file`` / ``pkcs12_data`` and ``pkcs12_password``)."""
        return cls(role=TLSRole.SERVER, certificate_chain_file=certificate_chain_file,
                   private_key_file=private_key_file, **options)

    # ---- to C ------------------------------------------------------------------------

    @property
    def _role(self) -> int:
        return _enum_value(TLSRole, self.role, _ROLES, "role")

    def _version(self, value: Any, what: str) -> int:
        if value is None:
            return _ffi.TLS_VERSION_DEFAULT
        return _enum_value(TLSVersion, value, _VERSIONS, what)

    @contextlib.contextmanager
    def _c_settings(self) -> Iterator[int]:
        """A C sk_tls_settings_t saying what these settings say, released on exit."""
        role = self._role
        trusts = [name for name in ("trust_file", "trust_directory", "trust_pem") if getattr(self, name) is not None]
        if len(trusts) > 1:
            raise TLSSettingsError(f"give one of trust_file, trust_directory and trust_pem, not {', '.join(trusts)}",
                                   None, 0)
        for kind in ("certificate_chain", "private_key"):
            if getattr(self, f"{kind}_file") is not None and getattr(self, f"{kind}_pem") is not None:
                raise TLSSettingsError(f"give {kind}_file or {kind}_pem, not both", None, 0)
        if self.pkcs12_file is not None and self.pkcs12_data is not None:
            raise TLSSettingsError("give pkcs12_file or pkcs12_data, not both", None, 0)
        if self.pkcs12_data is not None and not isinstance(self.pkcs12_data, (bytes, bytearray, memoryview)):
            raise TLSSettingsError("pkcs12_data is the bytes of a PKCS#12 file", None, 0)
        if isinstance(self.alpn_protocols, (str, bytes)):
            raise TLSSettingsError("alpn_protocols is a list of names, not one string", None, 0)
        verification = _enum_value(TLSVerification, self.verification, _VERIFICATIONS, "verification")
        minimum = self._version(self.minimum_version, "minimum version")
        maximum = self._version(self.maximum_version, "maximum version")
        if maximum and maximum < (minimum or _ffi.TLS_VERSION_1_2):
            raise TLSSettingsError("the maximum TLS version is below the minimum", None, 0)

        handle = c_void_p()
        error = _ffi.CError()
        raise_for(lib.sk_tls_settings_create(role, byref(handle), byref(error)), error)
        created = _ffi.created(handle)
        try:
            self._apply(created, verification, minimum, maximum)
            yield created
        finally:
            lib.sk_tls_settings_release(created)

    def _c(self, name: str, path: bool = False) -> Optional[bytes]:
        """The setting `name` as a C string: one with a NUL inside is a TLSSettingsError
        (a ValueError), never a silent truncation ("localhost\\0.evil.test" verified and
        sent as "localhost")."""
        value: Optional[Union[str, bytes]] = getattr(self, name)
        return _ffi.c_string(value, name, path=path, error=TLSSettingsError)

    def _apply(self, handle: int, verification: int, minimum: int, maximum: int) -> None:
        if self.peer_name is not None:
            _set("peer_name", lib.sk_tls_settings_set_peer_name(handle, self._c("peer_name")))
        if self.trust_file is not None:
            _set("trust_file", lib.sk_tls_settings_set_trust_file(handle, self._c("trust_file", path=True)))
        elif self.trust_directory is not None:
            directory = self._c("trust_directory", path=True)
            _set("trust_directory", lib.sk_tls_settings_set_trust_directory(handle, directory))
        elif self.trust_pem is not None:
            pem = _pem(self.trust_pem)
            _set("trust_pem", lib.sk_tls_settings_set_trust_pem(handle, pem, len(pem)))
        else:
            _set("trust_system", lib.sk_tls_settings_set_trust_system(handle))
        if self.certificate_chain_file is not None:
            chain = self._c("certificate_chain_file", path=True)
            _set("certificate_chain_file", lib.sk_tls_settings_set_certificate_chain_file(handle, chain))
        elif self.certificate_chain_pem is not None:
            pem = _pem(self.certificate_chain_pem)
            _set("certificate_chain_pem", lib.sk_tls_settings_set_certificate_chain_pem(handle, pem, len(pem)))
        password_bytes = self._c("private_key_password")
        if self.private_key_file is not None:
            key = self._c("private_key_file", path=True)
            _set("private_key_file", lib.sk_tls_settings_set_private_key_file(handle, key, password_bytes))
        elif self.private_key_pem is not None:
            pem = _pem(self.private_key_pem)
            _set("private_key_pem", lib.sk_tls_settings_set_private_key_pem(handle, pem, len(pem), password_bytes))
        pkcs12_password = self._c("pkcs12_password")
        if self.pkcs12_file is not None:
            pkcs12 = self._c("pkcs12_file", path=True)
            _set("pkcs12_file", lib.sk_tls_settings_set_pkcs12_file(handle, pkcs12, pkcs12_password))
        elif self.pkcs12_data is not None:
            data = bytes(self.pkcs12_data)
            if not data:
                raise TLSSettingsError("pkcs12_data is empty", None, 0)
            _set("pkcs12_data", lib.sk_tls_settings_set_pkcs12_data(handle, data, len(data), pkcs12_password))
        if isinstance(self.crl_files, (str, bytes)) or isinstance(self.crl_files, os.PathLike):
            raise TLSSettingsError("crl_files is a list of paths, not one path", None, 0)
        crls = [_ffi.c_string(path, "crl_files", path=True, error=TLSSettingsError) for path in self.crl_files]
        if crls:
            paths = (c_char_p * len(crls))(*crls)
            _set("crl_files", lib.sk_tls_settings_set_crl_files(handle, cast(paths, POINTER(c_char_p)), len(crls)))
        if not self.crl_check_whole_chain:
            _set("crl_check_whole_chain", lib.sk_tls_settings_set_crl_check_whole_chain(handle, 0))
        if verification != _ffi.TLS_VERIFY_DEFAULT:
            _set("verification", lib.sk_tls_settings_set_verification(handle, verification))
        if minimum or maximum:
            _set("versions", lib.sk_tls_settings_set_versions(handle, minimum, maximum))
        if self.cipher_list is not None:
            _set("cipher_list", lib.sk_tls_settings_set_cipher_list(handle, self._c("cipher_list")))
        if self.cipher_suites is not None:
            _set("cipher_suites", lib.sk_tls_settings_set_cipher_suites(handle, self._c("cipher_suites")))
        protocols = [_ffi.c_string(name, "alpn_protocols", error=TLSSettingsError) for name in self.alpn_protocols]
        if protocols:
            array = (c_char_p * len(protocols))(*protocols)
            _set("alpn_protocols",
                 lib.sk_tls_settings_set_alpn_protocols(handle, cast(array, POINTER(c_char_p)), len(protocols)))
        if not self.session_resumption:
            _set("session_resumption", lib.sk_tls_settings_set_session_resumption(handle, 0))
        timeout = float(self.handshake_timeout)
        if timeout != timeout:
            raise TLSSettingsError("handshake_timeout is not a number", None, 0)
        if timeout != 30.0:
            _set("handshake_timeout", lib.sk_tls_settings_set_handshake_timeout(handle, timeout))
        if self.key_log_file is not None:
            _set("key_log_file", lib.sk_tls_settings_set_key_log_file(handle, self._c("key_log_file", path=True)))
        if self.manual_trust_evaluation:
            _set("manual_trust_evaluation", lib.sk_tls_settings_set_manual_trust_evaluation(handle, 1))
        if self.ocsp_response_file is not None:
            _set("ocsp_response_file",
                 lib.sk_tls_settings_set_ocsp_response_file(handle, self._c("ocsp_response_file", path=True)))
        if self.request_ocsp_staple:
            _set("request_ocsp_staple", lib.sk_tls_settings_set_request_ocsp_staple(handle, 1))
        if self.require_ocsp_staple:
            _set("require_ocsp_staple", lib.sk_tls_settings_set_require_ocsp_staple(handle, 1))
        if not isinstance(self.server_names, Mapping):
            raise TLSSettingsError("server_names maps host names to TLSSettings", None, 0)
        for name, named in self.server_names.items():
            if not isinstance(named, TLSSettings):
                raise TLSSettingsError(f"server_names[{name!r}] is not a TLSSettings", None, 0)
            c_name = _ffi.c_string(name, "server_names", error=TLSSettingsError)
            with named._c_settings() as named_handle:
                _set("server_names", lib.sk_tls_settings_set_server_name_settings(handle, c_name, named_handle))

    def check(self) -> "TLSSettings":
        """Loads the files and checks everything now, as :meth:`Socket.start_tls` would.
        Raises :class:`TLSSettingsError` saying what is wrong; returns the settings."""
        with self._c_settings() as handle:
            error = _ffi.CError()
            raise_for(lib.sk_tls_settings_check(handle, byref(error)), error)
        return self


# --------------------------------------------------------------------------------------
# Certificates
# --------------------------------------------------------------------------------------

_PEM_BLOCK = re.compile(rb"-----BEGIN CERTIFICATE-----(.*?)-----END CERTIFICATE-----", re.S)
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)


class Certificate:
    """An X.509 certificate: ``der`` (bytes), ``pem`` (text), ``subject`` and ``issuer``
    (RFC 2253 text, e.g. "CN=localhost"), ``not_before`` / ``not_after`` (aware UTC
    datetimes). Raises BadParamError when `der` is not a certificate. Equal when their
    DER is."""

    __slots__ = ("der", "subject", "issuer", "not_before", "not_after", "_pem")

    def __init__(self, der: Union[bytes, bytearray, memoryview]) -> None:
        self.der = bytes(der)
        info = _ffi.CertificateInfo()
        error = _ffi.CError()
        raise_for(lib.sk_certificate_get_info(self.der, len(self.der), byref(info), byref(error)), error)
        self.subject: str = info.subject.decode("utf-8", "replace")
        self.issuer: str = info.issuer.decode("utf-8", "replace")
        self.not_before = _EPOCH + datetime.timedelta(seconds=info.not_before)
        self.not_after = _EPOCH + datetime.timedelta(seconds=info.not_after)
        self._pem: Optional[str] = None

    @classmethod
    def _from_c(cls, certificate: _ffi.Certificate) -> "Certificate":
        return cls(string_at(certificate.der, certificate.der_length) if certificate.der_length else b"")

    @classmethod
    def from_pem(cls, pem: PEM) -> List["Certificate"]:
        """Every certificate in PEM text, in order."""
        data = _pem(pem) or b""
        found = []
        for block in _PEM_BLOCK.findall(data):
            try:
                der = base64.b64decode(b"".join(block.split()), validate=True)
            except binascii.Error as exc:
                raise error_from_code(-2, 0, f"bad base64 in a PEM certificate: {exc}") from None
            found.append(cls(der))
        return found

    @property
    def pem(self) -> str:
        """The certificate as PEM text."""
        if self._pem is None:
            size = c_size_t(0)
            lib.sk_certificate_to_pem(self.der, len(self.der), None, byref(size))
            buffer = create_string_buffer(max(size.value, 1))
            size = c_size_t(len(buffer))
            raise_for(lib.sk_certificate_to_pem(self.der, len(self.der), buffer, byref(size)))
            self._pem = buffer.value.decode("ascii")
        return self._pem

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Certificate) and other.der == self.der

    def __hash__(self) -> int:
        return hash(self.der)

    def __repr__(self) -> str:
        return f"<socketkit.Certificate subject={self.subject!r} issuer={self.issuer!r}>"


@dataclass(frozen=True)
class TLSInfo:
    """What a handshake settled (:attr:`Socket.tls_info`)."""

    #: "TLSv1.2" or "TLSv1.3".
    protocol_version: str
    #: OpenSSL's cipher name, e.g. "TLS_AES_256_GCM_SHA384".
    cipher: str
    #: The protocol ALPN chose, or None.
    alpn_protocol: Optional[str]
    #: The SNI name a client sent or a server received, or None.
    server_name: Optional[str]
    #: True when an earlier session was resumed.
    session_reused: bool
    #: The peer's certificates, leaf first (empty for a client that sent none).
    peer_certificates: List[Certificate]
    #: Clients that asked (``request_ocsp_staple``): the DER OCSP response the server
    #: stapled, checked before the handshake succeeded; None when none was stapled.
    ocsp_response: Optional[bytes] = None


class _SessionChanged(Exception):
    """The session read so far ended, or another one started, between two C calls."""


def _session_info(handle: int) -> Optional[bytes]:
    """sk_tls_info_t of the current session as bytes (comparable), or None if not secure."""
    info = _ffi.TLSInfo()
    status = lib.sk_socket_get_tls_info(handle, byref(info))
    if status == errors.BAD_CONFIG:  # not secure
        return None
    raise_for(status)
    return bytes(info)


def _peer_certificate(handle: int, index: int) -> bytes:
    """The DER of certificate `index` of the current session (its size, then a copy)."""
    size = c_size_t(0)
    _copied(lib.sk_socket_copy_peer_certificate(handle, index, None, byref(size)))
    buffer = create_string_buffer(size.value)
    _copied(lib.sk_socket_copy_peer_certificate(handle, index, buffer, byref(size)))
    return buffer.raw[:size.value]


def _ocsp_response(handle: int) -> Optional[bytes]:
    """The stapled OCSP response of the current session (its size, then a copy), or None."""
    size = c_size_t(0)
    _copied(lib.sk_socket_copy_ocsp_response(handle, None, byref(size)))
    if size.value == 0:
        return None
    buffer = create_string_buffer(size.value)
    copied = c_size_t(size.value)
    _copied(lib.sk_socket_copy_ocsp_response(handle, buffer, byref(copied)))
    if copied.value != size.value:  # another session's
        raise _SessionChanged()
    return buffer.raw[:size.value]


def _copied(status: int) -> None:
    # BAD_CONFIG: the session ended. BAD_PARAM: no such index, or a certificate bigger than
    # the size just read: another session started.
    if status in (errors.BAD_CONFIG, errors.BAD_PARAM):
        raise _SessionChanged()
    raise_for(status)


def _tls_info(handle: int) -> Optional[TLSInfo]:
    """What the handshake settled, or None when the connection is not secure. It takes
    several C calls (the info, then each certificate) and the session can end at any
    moment on the loop thread (a peer that closes right after the handshake ends it while
    socket_did_secure runs): a session that ended reads as None, and a result is returned
    only when the info read after the certificates is the one read before them."""
    for _ in range(8):
        before = _session_info(handle)
        if before is None:
            return None
        info = _ffi.TLSInfo.from_buffer_copy(before)
        try:
            certificates = [_peer_certificate(handle, index) for index in range(max(info.peer_certificate_count, 0))]
            ocsp_response = _ocsp_response(handle)
        except _SessionChanged:
            continue
        if _session_info(handle) != before:
            continue
        return TLSInfo(protocol_version=_c_text(info.protocol_version), cipher=_c_text(info.cipher),
                       alpn_protocol=_c_text(info.alpn_protocol) or None,
                       server_name=_c_text(info.server_name) or None, session_reused=bool(info.session_reused),
                       peer_certificates=[Certificate(der) for der in certificates], ocsp_response=ocsp_response)
    return None  # sessions ending and starting faster than they can be read: none stays


def _c_text(raw: bytes) -> str:
    return raw.decode("utf-8", "replace")


# --------------------------------------------------------------------------------------
# Manual trust evaluation
# --------------------------------------------------------------------------------------

class TLSTrust:
    """What ``socket_did_receive_trust(sock, trust)`` shows: the peer's chain as it sent it
    (``chain``, leaf first; empty if it sent none), what built-in verification concluded
    (``verification_error``: None when the chain verifies against the trust roots, is valid
    now and names the peer; otherwise the exception a socket without manual trust would
    have disconnected with), and ``peer_name``, the name checked against (or None).

    Answer by returning True or False from the delegate method, or return None and call
    :meth:`answer` later, from any thread. Only the first answer counts. Until then the
    connection neither reads nor writes, and the handshake timeout keeps running: it bounds
    how long an unauthenticated peer holds a connection, whoever is slow. Without an answer
    in time the connection ends with :class:`HandshakeTimeoutError` and a later answer does
    nothing; a delegate that needs longer raises ``handshake_timeout`` (or sets it
    negative)."""

    __slots__ = ("socket", "token", "chain", "verification_error", "peer_name", "_lock", "_answer")

    def __init__(self, sock: Any, token: int, chain: List[Certificate], verification_error: Optional[Error],
                 peer_name: Optional[str]) -> None:
        self.socket = sock
        self.token = token
        self.chain = chain
        self.verification_error = verification_error
        self.peer_name = peer_name
        self._lock = threading.Lock()
        self._answer: Optional[bool] = None

    @classmethod
    def _from_c(cls, sock: Any, address: int) -> "TLSTrust":
        trust = cast(address, POINTER(_ffi.TLSTrust)).contents
        chain = [Certificate._from_c(trust.chain[index]) for index in range(trust.chain_count)] if trust.chain else []
        error = error_from_c(trust.verification_error)
        peer_name = trust.peer_name.decode("utf-8", "replace") if trust.peer_name else None
        return cls(sock, trust.token, chain, error, peer_name)

    @property
    def answered(self) -> Optional[bool]:
        """The answer given (None: not yet)."""
        return self._answer

    def answer(self, accept: bool) -> None:
        """Trusts the peer (``socket_did_secure`` follows) or rejects it (the connection
        ends with :class:`PeerRejectedError`). Any thread, any time; only the first answer
        counts (later ones do nothing). Raises InvalidHandleError if the socket was closed."""
        with self._lock:
            if self._answer is not None:
                return
            self._answer = bool(accept)
        raise_for(lib.sk_socket_answer_trust(self.socket.handle, self.token, int(bool(accept))))

    def __repr__(self) -> str:
        leaf = self.chain[0].subject if self.chain else None
        return (f"<socketkit.TLSTrust leaf={leaf!r} chain={len(self.chain)} peer_name={self.peer_name!r} "
                f"verification_error={self.verification_error!r}>")
