# SPDX-License-Identifier: MIT
"""SocketKit's errors as exceptions.

Every error has ``code`` (the C ``SK_ERR_*`` value), ``errno`` (the OS errno, or the
resolver's ``EAI_*`` value for resolution failures, else 0) and ``message``. The class says
what happened, and most also derive from the matching built-in, so ``except TimeoutError``
or ``except ConnectionRefusedError`` work as in the standard library:

- :class:`Error`
  - :class:`BadConfigError` -- not valid in the socket's state (not connected, ...)
  - :class:`BadParamError` (also ``ValueError``) -- an argument is not acceptable
  - :class:`TimeoutError` (also the built-in ``TimeoutError``)
    - :class:`ConnectTimeoutError`, :class:`ReadTimeoutError`, :class:`WriteTimeoutError`,
      :class:`SendTimeoutError` (UDP: a datagram was not sent in time)
  - :class:`ReadMaxedOutError` -- a separator read passed its maximum length
  - :class:`ClosedError` (also ``ConnectionError``) -- the peer closed the connection
  - :class:`OtherError`
  - :class:`SystemCallError` (also ``OSError``) -- an OS call failed; ``errno`` says why
    - :class:`ConnectionRefusedError` (also the built-in), :class:`ConnectionResetError`
      (also the built-in, for ECONNRESET and EPIPE)
  - :class:`ResolutionError` -- a host name did not resolve
  - :class:`InvalidHandleError` -- the socket, queue or group was closed or released
  - :class:`TruncatedError` -- UDP: a datagram larger than the receive limit was dropped
  - :class:`TLSError` -- TLS failed (handshake, records, settings); ``errno`` holds the
    X.509 verification result (``X509_V_ERR_*``) for certificate errors, else OpenSSL's
    reason code (or 0)
    - :class:`TLSFailedError` -- a failure without a code of its own: a handshake_failure
      alert, no shared cipher, a bad record, the peer rejecting our certificate, a peer
      that does not speak TLS
    - :class:`CertificateVerificationError` -- the peer's certificate did not verify
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
    - :class:`TruncatedTLSError` (also ``ConnectionError``) -- the peer closed the TCP
      connection without a TLS close_notify: the data may be cut short
    - :class:`PeerRejectedError` -- manual trust evaluation said no
    - :class:`TLSSettingsError` (also ``ValueError``) -- the settings cannot be used: an
      unreadable or invalid certificate, key or trust file, a wrong key password, a key
      that does not match its certificate, an unknown cipher, an empty peer name, text
      with a NUL character, ...
  - :class:`WriteQueueFullError` -- a write would take the socket's queued bytes above
    its ``maximum_queued_write_bytes``: refused, nothing queued
"""
from __future__ import annotations

import builtins
import errno as _errno
from typing import Dict, Optional, Type

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


class Error(Exception):
    """A SocketKit error: ``code`` (SK_ERR_*), ``errno`` and ``message``."""

    code: int = OTHER

    def __init__(self, message: str = "", code: Optional[int] = None, errno: int = 0) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code
        self.errno = errno
        self.message = message

    def __str__(self) -> str:
        return self.message

    def __repr__(self) -> str:
        return f"{type(self).__name__}(code={self.code}, errno={self.errno}, message={self.message!r})"

    # OSError's machinery would otherwise misread our arguments.
    def __reduce__(self):  # pragma: no cover - pickling support
        return (error_from_code, (self.code, self.errno, self.message))


class BadConfigError(Error):
    code = BAD_CONFIG


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
    code = SYSTEM

    def __init__(self, message: str = "", code: Optional[int] = None, errno: int = 0) -> None:
        Error.__init__(self, message, code, errno)

    @property
    def strerror(self) -> str:  # type: ignore[override]
        return self.message


class ConnectionRefusedError(SystemCallError, builtins.ConnectionRefusedError):  # noqa: A001
    pass


class ConnectionResetError(SystemCallError, builtins.ConnectionResetError):  # noqa: A001
    pass


class ResolutionError(Error):
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


class TLSError(Error):
    """A TLS failure: every SK_ERR_TLS_* code raises a subclass of this."""

    code = TLS_FAILED


class TLSFailedError(TLSError):
    """TLS failed for a reason without a code of its own (see the message): a
    handshake_failure alert, no shared cipher, a bad record, the peer rejecting our
    certificate, a peer that does not speak TLS."""

    code = TLS_FAILED


class CertificateVerificationError(TLSError):
    """The peer's certificate failed verification (``errno``: the X509_V_ERR_* result)."""

    code = TLS_CERT_INVALID


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


class TruncatedTLSError(TLSError, ConnectionError):
    """The peer closed the TCP connection without a TLS close_notify: what arrived may be
    cut short (never reported as a clean close)."""

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
}


def error_from_code(code: int, errno: int = 0, message: str = "") -> Error:
    """The exception for a C error code (and errno)."""
    cls: Type[Error] = CLASSES.get(code, OtherError)
    if code == SYSTEM:
        if errno == _errno.ECONNREFUSED:
            cls = ConnectionRefusedError
        elif errno in (_errno.ECONNRESET, _errno.EPIPE):
            cls = ConnectionResetError
    return cls(message or f"SocketKit error {code}", code, errno)
