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
