# SPDX-License-Identifier: MIT
"""The conventions of a call into the C library: its status becomes an exception, its
arguments are checked before they cross, and an exception nobody can catch (one raised by a
delegate method, a filter or a perform function) goes to :func:`sys.unraisablehook`: it
never crashes the process and is never silently lost."""
from __future__ import annotations

import ctypes
import sys
import threading
import traceback as _traceback
import types
from ctypes import byref, c_double, c_long, c_size_t
from typing import Any, Optional

from . import _ffi
from ._ffi import lib
from .errors import BAD_PARAM, Error, error_from_code


class _ThreadErrors(threading.local):
    """One sk_error_t per thread, reused by every hot call that can fail: making a ctypes
    structure per call cost more than the call. SocketKit fills it only as the call
    returns, after any callback the call ran (which may itself use it)."""

    def __init__(self) -> None:
        self.error = _ffi.CError()
        self.pointer = byref(self.error)


thread_errors = _ThreadErrors()

# The default arguments of the hot calls, as ctypes values (never mutated): converting a
# Python number costs more than the call.
NO_TIMEOUT = c_double(-1.0)
ZERO_TAG = c_long(0)
ZERO_SIZE = c_size_t(0)


def raise_for(status: int, error: Optional[_ffi.CError] = None) -> int:
    """Returns `status` when it is not an error, raises the matching exception otherwise
    (with the message and errno of `error` when the call filled it)."""
    if status >= 0:
        return status
    if error is not None and error.code == status:
        raise error_from_code(status, error.os_error, error.message.decode("utf-8", "replace"))
    raise error_from_code(status, 0, lib.sk_strerror(status).decode())


def raise_c_error(status: int, code: int, os_error: int, message: bytes) -> None:
    """raise_for for the C extension, which passes the sk_error_t's fields."""
    if code == status:
        raise error_from_code(status, os_error, message.decode("utf-8", "replace"))
    raise error_from_code(status, 0, lib.sk_strerror(status).decode())


def error_from_c(pointer: Any) -> Optional[Error]:
    """The exception for a `const sk_error_t *` (a ctypes pointer; None for NULL)."""
    if not pointer:
        return None
    value = pointer.contents
    return error_from_code(value.code, value.os_error, value.message.decode("utf-8", "replace"))


def error_at(address: int) -> Optional[Error]:
    """error_from_c for an sk_error_t given by address (an event record's field)."""
    return error_from_c(ctypes.cast(address, ctypes.POINTER(_ffi.CError))) if address else None


def bad_param(message: str) -> Error:
    return error_from_code(BAD_PARAM, 0, message)


def check_size(value: int, name: str) -> int:
    value = int(value)
    if value < 0 or value >= 1 << 63:
        raise bad_param(f"{name} must be between 0 and 2**63 - 1")
    return value


def check_int(value: int) -> int:
    value = int(value)
    if not -(1 << 31) <= value < 1 << 31:
        raise bad_param(f"{value} does not fit in a C int")
    return value


def check_port(port: int) -> int:
    port = int(port)
    if not 0 <= port <= 65535:
        raise bad_param(f"port {port} is not in 0...65535")
    return port


def unraisable(kind: Any, value: Optional[BaseException], trace: Any, message: str, target: Any) -> None:
    """Reports an exception nobody can catch to sys.unraisablehook. Python's own hook only
    takes the UnraisableHookArgs it makes itself (anything else is a TypeError that hides
    the exception): while it is the one installed, the report is printed as it prints."""
    hook = sys.unraisablehook
    if hook is sys.__unraisablehook__:
        stream = sys.stderr
        if stream is None:
            return
        try:
            stream.write(f"{message}: {target!r}\n" if target is not None else f"{message}\n")
            if value is not None:
                _traceback.print_exception(kind, value, trace, file=stream)
            stream.flush()
        except Exception:  # pragma: no cover - a broken stderr: nothing left to report to
            pass
        return
    hook(types.SimpleNamespace(exc_type=kind, exc_value=value, exc_traceback=trace, err_msg=message,
                               object=target))


def report_unraisable(message: str, target: Any) -> None:
    """Hands the exception being handled to sys.unraisablehook."""
    kind, value, trace = sys.exc_info()
    unraisable(kind, value, trace, message, target)


def report_delegate_error(message: Optional[str], target: Any, exception: Optional[BaseException]) -> None:
    """report_unraisable for the C extension, which passes the exception."""
    unraisable(type(exception) if exception is not None else None, exception,
               exception.__traceback__ if exception is not None else None,
               message or "Exception ignored while dispatching a socketkit event", target)
