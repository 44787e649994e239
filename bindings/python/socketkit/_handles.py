# SPDX-License-Identifier: MIT
"""What :class:`~socketkit.Socket` and :class:`~socketkit.UdpSocket` share, as asyncio's
``_SelectorTransport`` serves stream and datagram transports alike: a C handle and its
lifetime, one close vocabulary, the delegate and callback-queue properties, the context
manager, flags, getters and ``perform``; and the table of live sockets that events are
dispatched through."""
from __future__ import annotations

import ctypes
import threading
import weakref
from _weakref import _remove_dead_weakref  # type: ignore[import]
from ctypes import byref, c_uint16, c_uint32, c_void_p
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Tuple, TypeVar

from . import _ffi
from ._addresses import address_from_sockaddr
from ._native import SPEEDUPS, HandleSlots
from ._status import raise_for, report_unraisable
from .errors import BAD_CONFIG, INVALID_HANDLE, InvalidHandleError


class WeakTable:
    """handle -> object, held weakly: what WeakValueDictionary does, without its Python-level
    code on every lookup (one lookup per event)."""

    __slots__ = ("refs", "_gone")

    def __init__(self) -> None:
        #: handle -> weakref.KeyedRef; read directly by the event paths (and the C extension).
        self.refs: Dict[int, "weakref.ref[Any]"] = {}
        refs = self.refs

        def gone(ref: Any) -> None:
            # Removes the entry only if it is still the dead one (atomic under the GIL),
            # as WeakValueDictionary does: the handle may already name a new object.
            _remove_dead_weakref(refs, ref.key)

        # One callback for every entry; each reference carries its key (weakref.KeyedRef,
        # as WeakValueDictionary does): no closure per object held.
        self._gone = gone

    def get(self, key: int) -> Any:
        ref = self.refs.get(key)
        return ref() if ref is not None else None

    def __setitem__(self, key: int, value: Any) -> None:
        self.refs[key] = weakref.KeyedRef(value, self._gone, key)

    def pop(self, key: int, default: Any = None) -> Any:
        ref = self.refs.pop(key, None)
        value = ref() if ref is not None else None
        return default if value is None else value

    def values(self) -> List[Any]:
        return [value for value in (ref() for ref in list(self.refs.values())) if value is not None]


#: Every live Socket and UdpSocket by handle, held weakly: a socket nobody references is
#: aborted. One table for both kinds: SocketKit's handles are one registry, a live handle
#: value names one object of one kind, and none is ever reused.
live = WeakTable()

#: Sockets being adopted with Socket.from_fd, by the token passed as userdata: their first
#: event (did_connect) may come before sk_socket_create_from_fd has returned their handle.
adopting: "weakref.WeakValueDictionary[int, Any]" = weakref.WeakValueDictionary()

#: Tokens for C (userdata, no-copy writes, filter contexts): unique for the process's life.
next_token = iter(range(1, 1 << 62)).__next__

#: "Not given" for arguments whose None means something (queue=None: the loop thread).
UNSET: Any = object()


@dataclass(frozen=True)
class Descriptors:
    """A socket's descriptors (-1 where there is none), as :meth:`Socket.perform` sees them."""

    primary: int
    ipv4: int
    ipv6: int
    unix: int


# perform() functions not yet called, kept alive for SocketKit (which calls them later).
_perform_calls: Dict[int, Any] = {}
_perform_lock = threading.Lock()


def flag_property(getter: Callable[..., int], setter: Optional[Callable[..., int]] = None,
                  doc: Optional[str] = None) -> property:
    """A boolean property over a C getter (and setter) of a handle."""
    def get(self: "Handle") -> bool:
        return bool(raise_for(getter(self.handle)))

    def set_(self: "Handle", enabled: bool) -> None:
        raise_for(setter(self.handle, int(bool(enabled))))  # type: ignore[misc]

    return property(get, set_ if setter is not None else None, doc=doc)


_Self = TypeVar("_Self", bound="Handle")


class Handle(HandleSlots):
    """The base of Socket and UdpSocket: a SocketKit handle, its delegate and its queue.

    Both kinds close with the same words, those of asyncio's transports:

    - ``close()``: for good, gracefully: what was queued to send is still sent, then the
      socket closes; no delegate method runs once it returns. The ``with`` statement ends
      with it.
    - ``abort()``: for good, at once: what was queued is dropped.
    - ``release()``: the same as ``abort()`` (the C API's word for it).
    - ``disconnect()`` and its ``disconnect_after_*`` forms: end what the socket is doing
      (a connection, a listener, a UDP socket's descriptors) and keep the object, which can
      connect, accept or bind again (GCDAsyncSocket's ``disconnect``, GCDAsyncUdpSocket's
      ``close``).

    After close, abort or release every method raises :class:`InvalidHandleError`; a socket
    nobody references any more is aborted.
    """

    # Per kind, set by Socket and UdpSocket: a name for messages, the delegate struct of a
    # Python delegate, and the C functions of what both kinds do alike.
    _KIND = "socket"
    _delegate_struct: Callable[[Any], Tuple[Any, int]]
    _c_set_delegate: Callable[..., int]
    _c_set_callback_queue: Callable[..., int]
    _c_perform: Callable[..., int]

    def _init_handle(self, delegate: Any, queue: Optional[Any]) -> None:
        self._handle: Optional[int] = None
        # What the hot paths pass to C: with the extension the int (its slot keeps the
        # pointer itself); through ctypes a c_void_p, which ctypes passes without
        # converting the integer each time.
        self._c_handle: Any = None
        self._delegate = delegate
        self._queue = queue
        self.user_data: Any = None

    def _register(self, handle: int) -> None:
        self._handle = handle
        self._c_handle = handle if SPEEDUPS else c_void_p(handle)
        live[handle] = self

    @property
    def handle(self) -> int:
        """The C handle (an integer), for use with the C API directly."""
        if self._handle is None:
            raise InvalidHandleError(f"the {self._KIND} is closed", INVALID_HANDLE)
        return self._handle

    @property
    def _queue_handle(self) -> Optional[int]:
        return self._queue.handle if self._queue is not None else None

    # ---- lifetime ------------------------------------------------------------------------

    def abort(self) -> None:
        """Closes the socket for good, at once: what is queued (writes, datagrams) is
        dropped, and no delegate method runs once this returns (one running on another
        thread is waited for, unless that would deadlock). Idempotent."""
        self._release()

    def release(self) -> None:
        """The same as :meth:`abort` (the C API's word for it)."""
        self.abort()

    def _release(self) -> None:
        handle = self._forget_handle()
        if handle is not None:
            self._release_handle(handle)

    def _forget_handle(self) -> Optional[int]:
        """Takes the handle from this object: from here on its methods raise
        InvalidHandleError and no event reaches it. Returns the handle (None: closed)."""
        handle, self._handle = self._handle, None
        self._c_handle = None
        if handle is not None:
            live.pop(handle, None)
        return handle

    def _release_handle(self, handle: int) -> None:
        raise NotImplementedError

    def __enter__(self: _Self) -> _Self:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()  # type: ignore[attr-defined]

    def __del__(self) -> None:
        try:
            self._release()
        except Exception:  # pragma: no cover - interpreter shutdown
            pass

    # ---- delegate and queue --------------------------------------------------------------

    @property
    def delegate(self) -> Any:
        """The object whose methods SocketKit calls (None: none). Setting it is synchronous:
        once set, no method of the old one runs (one running on another thread is waited
        for, unless that would deadlock: see :class:`Socket`)."""
        return self._delegate

    @delegate.setter
    def delegate(self, delegate: Any) -> None:
        pointer, size = self._delegate_struct(delegate)
        raise_for(self._c_set_delegate(self.handle, pointer, size, None))
        self._delegate = delegate

    @property
    def queue(self) -> Optional[Any]:
        """Where delegate methods run (None: SocketKit's loop thread). Setting it moves the
        callbacks still to come there, in order."""
        return self._queue

    @queue.setter
    def queue(self, queue: Optional[Any]) -> None:
        raise_for(self._c_set_callback_queue(self.handle, queue.handle if queue is not None else None))
        self._queue = queue

    # ---- calls ---------------------------------------------------------------------------

    def _request(self, function: Callable[..., int], *arguments: Any) -> int:
        """Calls ``function(handle, *arguments, &error)`` and raises what it reports."""
        error = _ffi.CError()
        return raise_for(function(self.handle, *arguments, byref(error)), error)

    # Getters answer SK_ERR_BAD_CONFIG when there is nothing to report (not connected, no
    # such family): None (0 for a port), not an exception.

    def _text(self, function: Callable[..., int], *arguments: Any) -> Optional[str]:
        buffer = ctypes.create_string_buffer(4096)
        status = function(self.handle, *arguments, buffer, len(buffer))
        if status == BAD_CONFIG:
            return None
        raise_for(status)
        return buffer.value.decode("utf-8", "replace")

    def _port_of(self, function: Callable[..., int], *arguments: Any) -> int:
        port = c_uint16()
        status = function(self.handle, *arguments, byref(port))
        if status == BAD_CONFIG:
            return 0
        raise_for(status)
        return port.value

    def _address_of(self, function: Callable[..., int], *arguments: Any,
                    decode: Callable[[bytes], Any] = address_from_sockaddr) -> Any:
        storage = ctypes.create_string_buffer(128)
        length = c_uint32(len(storage))
        status = function(self.handle, *arguments, storage, byref(length))
        if status == BAD_CONFIG:
            return None
        raise_for(status)
        return decode(storage.raw[:length.value])

    # ---- advanced ------------------------------------------------------------------------

    def perform(self, function: Callable[[Descriptors], None]) -> None:
        """Runs `function(descriptors)` on the socket's loop thread with its descriptors
        (-1 where absent), e.g. for a setsockopt SocketKit does not offer; do not close
        them. It runs as a delegate method does: methods it causes are called after it, and
        a disconnect it makes takes effect once it returns. Called on the loop thread (from
        a delegate method with ``queue=None``), it runs before ``perform`` returns."""
        def trampoline(descriptors: Any, context: Any) -> None:
            try:
                value = descriptors.contents
                function(Descriptors(value.primary, value.ipv4, value.ipv6, value.unix_domain))
            except BaseException:
                report_unraisable("Exception ignored in socketkit perform function", function)
            finally:
                with _perform_lock:
                    _perform_calls.pop(id(callback), None)

        callback = _ffi.PERFORM_FUNCTION(trampoline)
        with _perform_lock:
            _perform_calls[id(callback)] = callback
        status = self._c_perform(self.handle, callback, None)
        if status < 0:
            with _perform_lock:
                _perform_calls.pop(id(callback), None)
        raise_for(status)
