# SPDX-License-Identifier: MIT
"""SocketKit's errors as exceptions.

Every error has ``code`` (the C ``SK_ERR_*`` value), ``errno`` (the OS errno, or the
resolver's ``EAI_*`` value for resolution failures, else 0) and ``message``. The class says
what happened, and derives from the built-in a Python programmer would catch for it, so
``except FileNotFoundError``, ``except ConnectionRefusedError``, ``except TimeoutError``,
``except OSError``, ``except socket.gaierror`` or ``except ssl.SSLError`` work as they do
with the standard library. Every error that carries an ``errno`` is an ``OSError``:

- :class:`Error`
  - :class:`BadConfigError` -- not valid in the socket's state (not connected, ...)
    - :class:`WouldDeadlockError` (also ``OSError``, errno EDEADLK) -- a waiting call
      refused because two loops' callbacks were calling each other's sockets
  - :class:`BadParamError` (also ``ValueError``) -- an argument is not acceptable
  - :class:`TimeoutError` (also the built-in ``TimeoutError``, an ``OSError``)
    - :class:`ConnectTimeoutError`, :class:`ReadTimeoutError`, :class:`WriteTimeoutError`,
      :class:`SendTimeoutError` (UDP: a datagram was not sent in time)
  - :class:`ReadMaxedOutError` -- a separator read passed its maximum length
  - :class:`ClosedError` (also ``ConnectionError``) -- the peer closed the connection
  - :class:`OtherError`
  - :class:`SystemCallError` (also ``OSError``) -- an OS call failed; ``errno`` says why,
    and picks the subclass, each also the built-in of the same name where Python has one
    (the table ``ERRNO_CLASSES``; docs/EVENTS_AND_ERRORS.md lists it):
    :class:`ConnectionRefusedError`, :class:`ConnectionResetError`,
    :class:`BrokenPipeError` (also :class:`ConnectionResetError`, which EPIPE was before),
    :class:`ConnectionAbortedError`, :class:`ConnectionTimedOutError` (also
    :class:`TimeoutError`), :class:`FileNotFoundError`, :class:`FileExistsError`,
    :class:`PermissionError`, :class:`IsADirectoryError`, :class:`NotADirectoryError`,
    :class:`AddressInUseError` and :class:`AddressNotAvailableError` (``OSError`` only:
    Python has no built-in for EADDRINUSE and EADDRNOTAVAIL)
  - :class:`ResolutionError` (also ``socket.gaierror``) -- a host name did not resolve;
    ``errno`` is the ``EAI_*`` code, as for ``socket.getaddrinfo``
  - :class:`InvalidHandleError` -- the socket, queue or group was closed or released
  - :class:`TruncatedError` -- UDP: a datagram larger than the receive limit was dropped
  - :class:`TLSError` (also ``ssl.SSLError``) -- TLS failed (handshake, records,
    settings); ``errno`` holds the X.509 verification result (``X509_V_ERR_*``) for
    certificate errors, else OpenSSL's reason code (or 0)
    - :class:`TLSFailedError` -- a failure without a code of its own: a handshake_failure
      alert, no shared cipher, a bad record, the peer rejecting our certificate, a peer
      that does not speak TLS
    - :class:`CertificateVerificationError` (also ``ssl.SSLCertVerificationError``,
      with its ``verify_code`` and ``verify_message``) -- the peer's certificate did not
      verify
      - :class:`CertificateExpiredError`, :class:`CertificateNotYetValidError`,
        :class:`SelfSignedCertificateError`, :class:`UnknownIssuerError`,
        :class:`HostnameMismatchError`, :class:`CertificateInvalidError` (any other
        reason: an issuer that is not a CA, a weak key or digest, the wrong purpose, ...)
    - :class:`ClientCertificateRequiredError` -- the server requires a client certificate
    - :class:`ProtocolVersionError` -- no protocol version both sides accept
    - :class:`TLSPeerClosedError` (also ``ConnectionError``) -- the peer closed during the
      handshake
    - :class:`HandshakeTimeoutError` (also :class:`TimeoutError`) -- the handshake outlived
      its timeout
    - :class:`TruncatedTLSError` (also ``ssl.SSLEOFError`` and ``ConnectionError``) -- the
      peer closed the TCP connection without a TLS close_notify: the data may be cut short
    - :class:`PeerRejectedError` -- manual trust evaluation said no
    - :class:`TLSSettingsError` (also ``ValueError``) -- the settings cannot be used: an
      unreadable or invalid certificate, key or trust file, a wrong key password, a key
      that does not match its certificate, an unknown cipher, an empty peer name, text
      with a NUL character, ...
  - :class:`WriteQueueFullError` -- a write would take the socket's queued bytes above
    its ``maximum_queued_write_bytes``: refused, nothing queued
  - :class:`ProxyError` -- the proxy did not connect us to the target (``errno``: the
    SOCKS5 reply code or the HTTP status, when it gave one)

    - :class:`ProxyAuthenticationError` -- the proxy wants credentials, or refused ours
"""
from __future__ import annotations

import builtins
import errno as _errno
import socket as _socket
import ssl as _ssl
from typing import Callable, Dict, Optional, Tuple, Type, cast

OK = 0
BAD_CONFIG = -1
BAD_PARAM = -2
CONNECT_TIMEOUT = -3
READ_TIMEOUT = -4
WRITE_TIMEOUT = -5
READ_MAXED_OUT = -6
CLOSED = -7
OTHER = -8
SYSTEM = -9
RESOLUTION = -10
INVALID_HANDLE = -11
SEND_TIMEOUT = -12
TRUNCATED = -13
TLS_FAILED = -14
TLS_CERT_EXPIRED = -15
TLS_CERT_NOT_YET_VALID = -16
TLS_SELF_SIGNED = -17
TLS_UNKNOWN_ISSUER = -18
TLS_HOSTNAME_MISMATCH = -19
TLS_CERT_INVALID = -20
TLS_CLIENT_CERT_REQUIRED = -21
TLS_PROTOCOL_VERSION = -22
TLS_PEER_CLOSED = -23
TLS_HANDSHAKE_TIMEOUT = -24
TLS_TRUNCATED = -25
TLS_PEER_REJECTED = -26
TLS_SETTINGS = -27
WRITE_QUEUE_FULL = -28
PROXY = -29
PROXY_AUTH = -30


class Error(Exception):
    """A SocketKit error: ``code`` (SK_ERR_*), ``errno`` and ``message``. The classes that
    also derive from ``OSError`` keep ``errno`` in OSError's own attribute, and give the
    message as ``strerror``, so code written for the standard library's errors reads
    them as it always does."""

    code: int = OTHER
    # Typed as OSError types it, for the classes that are both.
    errno: Optional[int]
    message: str

    def __init__(self, message: str = "", code: Optional[int] = None, errno: int = 0) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code
        self.errno = errno
        self.message = message
        if isinstance(self, OSError):
            cast(OSError, self).strerror = message

    def __str__(self) -> str:
        return self.message

    def __repr__(self) -> str:
        return f"{type(self).__name__}(code={self.code}, errno={self.errno}, message={self.message!r})"

    # OSError's machinery would otherwise misread our arguments.
    def __reduce__(self) -> Tuple[Callable[..., "Error"], Tuple[int, int, str]]:  # pragma: no cover - pickling
        return (error_from_code, (self.code, self.errno or 0, self.message))


class BadConfigError(Error):
    code = BAD_CONFIG


class WouldDeadlockError(BadConfigError, OSError):
    """A call that waits for another loop was refused, with no effect (errno EDEADLK):
    two loops' delegate methods were calling each other's sockets at the same moment."""


class BadParamError(Error, ValueError):
    code = BAD_PARAM


class TimeoutError(Error, builtins.TimeoutError):  # noqa: A001 - deliberately mirrors the built-in
    pass


class ConnectTimeoutError(TimeoutError):
    code = CONNECT_TIMEOUT


class ReadTimeoutError(TimeoutError):
    code = READ_TIMEOUT


class WriteTimeoutError(TimeoutError):
    code = WRITE_TIMEOUT


class ReadMaxedOutError(Error):
    code = READ_MAXED_OUT


class ClosedError(Error, ConnectionError):
    code = CLOSED


class OtherError(Error):
    code = OTHER


class SystemCallError(Error, OSError):
    """An operating-system call failed: ``errno`` says why, and chooses the subclass
    (:data:`ERRNO_CLASSES`)."""

    code = SYSTEM


# One class per errno a socket meets, each also the built-in of the same name (PEP 3151's
# mapping, which OSError itself applies): `except FileNotFoundError` catches a missing Unix
# path from SocketKit as it does from the socket module.

class ConnectionRefusedError(SystemCallError, builtins.ConnectionRefusedError):  # noqa: A001
    """ECONNREFUSED."""


class ConnectionResetError(SystemCallError, builtins.ConnectionResetError):  # noqa: A001
    """ECONNRESET."""


class BrokenPipeError(ConnectionResetError, builtins.BrokenPipeError):  # noqa: A001
    """EPIPE, ESHUTDOWN: writing to a connection the peer has reset. Also
    :class:`ConnectionResetError`, as SocketKit reported it before (which of the two a
    reset gives depends on whether a write meets it first)."""


class ConnectionAbortedError(SystemCallError, builtins.ConnectionAbortedError):  # noqa: A001
    """ECONNABORTED."""


class ConnectionTimedOutError(SystemCallError, TimeoutError):
    """ETIMEDOUT: the kernel gave up on the connection (unanswered retransmissions or
    keep-alive probes). Also :class:`TimeoutError` (socketkit's and the built-in)."""


class FileNotFoundError(SystemCallError, builtins.FileNotFoundError):  # noqa: A001
    """ENOENT: no Unix-domain socket at that path (or no such directory)."""


class FileExistsError(SystemCallError, builtins.FileExistsError):  # noqa: A001
    """EEXIST."""


class PermissionError(SystemCallError, builtins.PermissionError):  # noqa: A001
    """EACCES, EPERM: a privileged port, a path without permission, a broadcast without
    SO_BROADCAST, a firewall."""


class IsADirectoryError(SystemCallError, builtins.IsADirectoryError):  # noqa: A001
    """EISDIR."""


class NotADirectoryError(SystemCallError, builtins.NotADirectoryError):  # noqa: A001
    """ENOTDIR: a Unix path through something that is not a directory."""


class AddressInUseError(SystemCallError):
    """EADDRINUSE: the address or port is taken. ``OSError`` only: Python has no built-in
    class for it."""


class AddressNotAvailableError(SystemCallError):
    """EADDRNOTAVAIL: no local interface has that address. ``OSError`` only."""


class ResolutionError(Error, _socket.gaierror):
    """A host name did not resolve: also ``socket.gaierror``, whose ``errno`` is likewise
    the resolver's ``EAI_*`` code."""

    code = RESOLUTION


class InvalidHandleError(Error):
    code = INVALID_HANDLE


class SendTimeoutError(TimeoutError):
    """UDP: a datagram was not sent within its timeout (``udp_socket_did_not_send``)."""

    code = SEND_TIMEOUT


class TruncatedError(Error):
    """UDP: a datagram larger than the receive limit arrived and was dropped
    (``udp_socket_did_receive_error``)."""

    code = TRUNCATED


class TLSError(Error, _ssl.SSLError):
    """A TLS failure: every SK_ERR_TLS_* code raises a subclass of this. Also
    ``ssl.SSLError``, as a failure of the standard library's TLS is; ``library`` and
    ``reason`` are empty (the message says what OpenSSL said)."""

    code = TLS_FAILED
    library = ""
    reason = ""


class TLSFailedError(TLSError):
    """TLS failed for a reason without a code of its own (see the message): a
    handshake_failure alert, no shared cipher, a bad record, the peer rejecting our
    certificate, a peer that does not speak TLS."""

    code = TLS_FAILED


class CertificateVerificationError(TLSError, _ssl.SSLCertVerificationError):
    """The peer's certificate failed verification (``errno``, as ``verify_code``: the
    X509_V_ERR_* result). Also ``ssl.SSLCertVerificationError``."""

    code = TLS_CERT_INVALID

    def __init__(self, message: str = "", code: Optional[int] = None, errno: int = 0) -> None:
        super().__init__(message, code, errno)
        self.verify_code = errno
        self.verify_message = message


class CertificateExpiredError(CertificateVerificationError):
    code = TLS_CERT_EXPIRED


class CertificateNotYetValidError(CertificateVerificationError):
    code = TLS_CERT_NOT_YET_VALID


class SelfSignedCertificateError(CertificateVerificationError):
    """A self-signed certificate (the leaf, or the root the chain ends at) that is not trusted."""

    code = TLS_SELF_SIGNED


class UnknownIssuerError(CertificateVerificationError):
    """The chain leads to no trusted root (an intermediate is missing or unknown)."""

    code = TLS_UNKNOWN_ISSUER


class HostnameMismatchError(CertificateVerificationError):
    """The certificate does not name the peer (host name or IP address)."""

    code = TLS_HOSTNAME_MISMATCH


class CertificateInvalidError(CertificateVerificationError):
    """Verification failed for another reason: an issuer that is not a CA, a bad signature,
    a weak key or digest, the wrong purpose (see the message)."""

    code = TLS_CERT_INVALID


class ClientCertificateRequiredError(TLSError):
    code = TLS_CLIENT_CERT_REQUIRED


class ProtocolVersionError(TLSError):
    """No protocol version both sides accept."""

    code = TLS_PROTOCOL_VERSION


class TLSPeerClosedError(TLSError, ConnectionError):
    """The peer closed the connection during the handshake."""

    code = TLS_PEER_CLOSED


class HandshakeTimeoutError(TLSError, TimeoutError):
    code = TLS_HANDSHAKE_TIMEOUT


class TruncatedTLSError(TLSError, _ssl.SSLEOFError, ConnectionError):
    """The peer closed the TCP connection without a TLS close_notify: what arrived may be
    cut short (never reported as a clean close). Also ``ssl.SSLEOFError``, the standard
    library's error for the same ("EOF occurred in violation of protocol")."""

    code = TLS_TRUNCATED


class PeerRejectedError(TLSError):
    """Manual trust evaluation rejected the peer (``socket_did_receive_trust`` said no)."""

    code = TLS_PEER_REJECTED


class TLSSettingsError(TLSError, ValueError):
    """The TLS settings cannot be used (see the message)."""

    code = TLS_SETTINGS


class WriteQueueFullError(Error):
    """A write would take the socket's queued, unsent bytes above its
    ``maximum_queued_write_bytes``: it was refused and nothing of it queued. The peer is not
    keeping up; stop writing until the queue drains (the watermark methods tell when)."""

    code = WRITE_QUEUE_FULL


class ProxyError(Error):
    """The proxy (``Socket.proxy``) did not connect us to the target: it refused or failed
    the connection, broke its protocol or closed during its handshake. ``errno`` holds
    the SOCKS5 reply code (1-8) or the HTTP status (403, 502, ...) when the proxy gave one.
    An unreachable proxy raises the ``SystemCallError`` of its errno
    (``ConnectionRefusedError``, ...), a silent one ``ConnectTimeoutError``."""

    code = PROXY


class ProxyAuthenticationError(ProxyError):
    """The proxy requires authentication, or rejected the username and password (SOCKS5:
    RFC 1929; HTTP: status 407, or 401 as some proxies answer, in ``errno``)."""

    code = PROXY_AUTH


#: C code -> exception class (the table tests compare with the C and Swift tables).
CLASSES: Dict[int, Type[Error]] = {
    BAD_CONFIG: BadConfigError,
    BAD_PARAM: BadParamError,
    CONNECT_TIMEOUT: ConnectTimeoutError,
    READ_TIMEOUT: ReadTimeoutError,
    WRITE_TIMEOUT: WriteTimeoutError,
    READ_MAXED_OUT: ReadMaxedOutError,
    CLOSED: ClosedError,
    OTHER: OtherError,
    SYSTEM: SystemCallError,
    RESOLUTION: ResolutionError,
    INVALID_HANDLE: InvalidHandleError,
    SEND_TIMEOUT: SendTimeoutError,
    TRUNCATED: TruncatedError,
    TLS_FAILED: TLSFailedError,
    TLS_CERT_EXPIRED: CertificateExpiredError,
    TLS_CERT_NOT_YET_VALID: CertificateNotYetValidError,
    TLS_SELF_SIGNED: SelfSignedCertificateError,
    TLS_UNKNOWN_ISSUER: UnknownIssuerError,
    TLS_HOSTNAME_MISMATCH: HostnameMismatchError,
    TLS_CERT_INVALID: CertificateInvalidError,
    TLS_CLIENT_CERT_REQUIRED: ClientCertificateRequiredError,
    TLS_PROTOCOL_VERSION: ProtocolVersionError,
    TLS_PEER_CLOSED: TLSPeerClosedError,
    TLS_HANDSHAKE_TIMEOUT: HandshakeTimeoutError,
    TLS_TRUNCATED: TruncatedTLSError,
    TLS_PEER_REJECTED: PeerRejectedError,
    TLS_SETTINGS: TLSSettingsError,
    WRITE_QUEUE_FULL: WriteQueueFullError,
    PROXY: ProxyError,
    PROXY_AUTH: ProxyAuthenticationError,
}


#: OS errno -> the SystemCallError subclass an SK_ERR_SYSTEM error with it raises (the table
#: Tests/check_tables.py compares with docs/EVENTS_AND_ERRORS.md). Any other errno raises
#: SystemCallError itself.
ERRNO_CLASSES: Dict[int, Type[SystemCallError]] = {
    _errno.ECONNREFUSED: ConnectionRefusedError,
    _errno.ECONNRESET: ConnectionResetError,
    _errno.EPIPE: BrokenPipeError,
    _errno.ESHUTDOWN: BrokenPipeError,
    _errno.ECONNABORTED: ConnectionAbortedError,
    _errno.ETIMEDOUT: ConnectionTimedOutError,
    _errno.ENOENT: FileNotFoundError,
    _errno.EEXIST: FileExistsError,
    _errno.EACCES: PermissionError,
    _errno.EPERM: PermissionError,
    _errno.EISDIR: IsADirectoryError,
    _errno.ENOTDIR: NotADirectoryError,
    _errno.EADDRINUSE: AddressInUseError,
    _errno.EADDRNOTAVAIL: AddressNotAvailableError,
}


def error_from_code(code: int, errno: int = 0, message: str = "") -> Error:
    """The exception for a C error code (and errno)."""
    cls: Type[Error] = CLASSES.get(code, OtherError)
    if code == SYSTEM:
        cls = ERRNO_CLASSES.get(errno, SystemCallError)
    elif code == BAD_CONFIG and errno == _errno.EDEADLK:
        cls = WouldDeadlockError
    return cls(message or f"SocketKit error {code}", code, errno)
