# SPDX-License-Identifier: MIT
"""The engine's log to Python's :mod:`logging` (:func:`enable_logging`).

SocketKit's engine says, when asked, what no exception or delegate method carries: a
listener out of descriptors that backs off (``WARNING``), a TLS handshake that failed with
OpenSSL's reason or a name that did not resolve (``INFO``), every connection that ended with
an error and events dropped for want of a delegate (``DEBUG``). Its records go to the logger
``socketkit.<subsystem>`` (``socketkit.accept``, ``socketkit.connection``,
``socketkit.tls``, ``socketkit.resolver``, ``socketkit.callbacks``), children of
``socketkit``, with the record attribute ``subsystem``.

Off by default, as the engine's log is (it then costs the engine nothing but a flag it
reads where it could log). The records are emitted on SocketKit's threads (a loop, the
resolver, a callback queue) or inside a call of yours; handlers must not call back into
socketkit.
"""
from __future__ import annotations

import atexit
import ctypes
import logging
from typing import Optional

from ._ffi import LOG_CALLBACK, lib
from ._status import raise_for

#: The engine's levels (SK_LOG_*) and Python's.
_ENGINE_LEVEL = {1: logging.ERROR, 2: logging.WARNING, 3: logging.INFO, 4: logging.DEBUG}


def _engine_level(level: int) -> int:
    """The most detailed SK_LOG_* level a Python level wants."""
    if level <= logging.DEBUG:
        return 4
    if level <= logging.INFO:
        return 3
    if level <= logging.WARNING:
        return 2
    return 1


def _emit(level: int, subsystem: Optional[bytes], message: Optional[bytes], userdata: Optional[int]) -> None:
    name = (subsystem or b"").decode("utf-8", "replace")
    logger = logging.getLogger("socketkit." + name if name else "socketkit")
    python_level = _ENGINE_LEVEL.get(level, logging.ERROR)
    if logger.isEnabledFor(python_level):
        logger.log(python_level, "%s", (message or b"").decode("utf-8", "replace"), extra={"subsystem": name})


# One trampoline for the life of the process: the engine may still be finishing a call of it
# on another thread when a disable from inside a handler returns.
_trampoline = LOG_CALLBACK(_emit)
_enabled_level: Optional[int] = None


def enable_logging(level: Optional[int] = None) -> None:
    """Sends the engine's records to :mod:`logging`: those at `level` and above (a
    ``logging`` level; default: the effective level of the ``socketkit`` logger now).
    Replaces whatever handler the engine had (one per process, whichever face set it)."""
    global _enabled_level
    if level is None:
        level = logging.getLogger("socketkit").getEffectiveLevel()
    if not isinstance(level, int) or isinstance(level, bool):
        raise TypeError(f"level must be a logging level (an int), not {type(level).__name__}")
    raise_for(lib.sk_log_set_callback(ctypes.cast(_trampoline, ctypes.c_void_p), _engine_level(level), None))
    _enabled_level = level


def disable_logging() -> None:
    """Stops the engine's records (the default). Once this returns no record is emitted
    from another thread."""
    global _enabled_level
    raise_for(lib.sk_log_set_callback(None, 0, None))
    _enabled_level = None


def logging_level() -> Optional[int]:
    """The level :func:`enable_logging` set, or None while the engine's log is off."""
    return _enabled_level


@atexit.register
def _stop_at_exit() -> None:
    # No SocketKit thread enters a finalizing interpreter: the engine waits for a record
    # being emitted on another thread, then emits no more.
    if _enabled_level is not None:
        lib.sk_log_set_callback(None, 0, None)
