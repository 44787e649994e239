"""Sockets, callback queues and loop groups over the C API.

Callbacks: SocketKit calls a small fixed set of C trampolines (module-level, alive for the
process's life); each finds the Python :class:`Socket` by its handle and calls the method
of the same name on its delegate, if the delegate has one. An exception raised by a
delegate method goes to :func:`sys.unraisablehook`: it never crashes the process and is
never silently lost.
"""
from __future__ import annotations

import atexit
import ctypes
import socket as _stdlib_socket
import struct
import sys
import threading
import types
import weakref
from ctypes import byref, c_double, c_int, c_long, c_size_t, c_uint16, c_uint32, c_void_p
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Tuple, Union

from . import _ffi
from ._ffi import lib
from .errors import Error, InvalidHandleError, error_from_code

BytesLike = Union[bytes, bytearray, memoryview]
Address = Union[Tuple[str, int], str]

#: Separators for :meth:`Socket.read_to_data`.
CRLF = b"\r\n"
CR = b"\r"
LF = b"\n"
ZERO = b"\x00"


# --------------------------------------------------------------------------------------
# Errors
# --------------------------------------------------------------------------------------

def _raise_for(status: int, error: Optional[_ffi.CError] = None) -> int:
    """Returns `status` when it is not an error, raises the matching exception otherwise."""
    if status >= 0:
        return status
    if error is not None and error.code == status:
        raise error_from_code(status, error.os_error, error.message.decode("utf-8", "replace"))
    raise error_from_code(status, 0, lib.sk_strerror(status).decode())


def _error_from_c(pointer) -> Optional[Error]:
    if not pointer:
        return None
    value = pointer.contents
    return error_from_code(value.code, value.os_error, value.message.decode("utf-8", "replace"))


def _report_unraisable(message: str, target: Any) -> None:
    """Hands the exception being handled to sys.unraisablehook."""
    kind, value, traceback = sys.exc_info()
    sys.unraisablehook(types.SimpleNamespace(
        exc_type=kind, exc_value=value, exc_traceback=traceback, err_msg=message, object=target))


# --------------------------------------------------------------------------------------
# Callback queues and loop groups
# --------------------------------------------------------------------------------------

class CallbackQueue:
    """Where a socket's delegate methods run. Use :class:`SerialQueue` or :class:`HostQueue`;
    ``None`` wherever a queue is accepted means SocketKit's own event loop thread (fastest,
    but every callback then competes for the GIL with your program)."""

    def __init__(self, handle: int) -> None:
        self._handle: Optional[int] = handle

    @property
    def handle(self) -> int:
        if self._handle is None:
            raise InvalidHandleError("the callback queue is closed", -11)
        return self._handle

    def close(self) -> None:
        """Releases the queue. Sockets still using it keep it alive."""
        handle, self._handle = self._handle, None
        if handle is not None:
            lib.sk_callback_queue_release(handle)

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # pragma: no cover - interpreter shutdown
            pass


class SerialQueue(CallbackQueue):
    """A queue with a thread of its own, shared by any number of sockets: their delegate
    methods run there one at a time (the GIL is taken for each)."""

    def __init__(self, name: Optional[str] = None) -> None:
        handle = c_void_p()
        error = _ffi.CError()
        _raise_for(lib.sk_callback_queue_create_serial(name.encode() if name else None, byref(handle), byref(error)),
                   error)
        super().__init__(handle.value)


class HostQueue(CallbackQueue):
    """A queue you drive: callbacks wait until :meth:`drain` runs them on the calling thread.
    :meth:`fileno` is readable while callbacks are pending, for ``select``, ``selectors`` or
    asyncio's ``add_reader`` (see :mod:`socketkit.aio`)."""

    def __init__(self) -> None:
        handle = c_void_p()
        error = _ffi.CError()
        _raise_for(lib.sk_callback_queue_create_host(byref(handle), byref(error)), error)
        super().__init__(handle.value)
        self._records = (_ffi.Event * self.BATCH)()
        self._raw_records = memoryview((ctypes.c_ubyte * ctypes.sizeof(self._records)).from_buffer(self._records))
        # Held while a batch is handled: the memory its records point to lives until the
        # queue's next poll, so no other poll may start meanwhile.
        self._drain_lock = threading.Lock()

    def fileno(self) -> int:
        """A descriptor readable exactly while callbacks are pending (owned by the queue)."""
        return _raise_for(lib.sk_callback_queue_fd(self.handle))

    #: Events moved per foreign call.
    BATCH = 256

    def drain(self, max_callbacks: int = 0) -> int:
        """Runs the delegate methods of pending events (all, or at most `max_callbacks`) and
        returns how many events were handled. Events come over in batches
        (sk_callback_queue_poll_events): one foreign call per batch, not one per event. One
        thread drains at a time: a concurrent call, or one from a delegate method, returns 0."""
        if not self._drain_lock.acquire(blocking=False):
            return 0
        try:
            handled = 0
            while True:
                room = self.BATCH if max_callbacks <= 0 else min(self.BATCH, max_callbacks - handled)
                if room <= 0:
                    break
                count = _raise_for(lib.sk_callback_queue_poll_events(self.handle, self._records, room))
                if count == 0:
                    break
                _dispatch_records(self._raw_records, self._records, count)
                handled += count
                if count < room:
                    break  # anything that arrived meanwhile keeps the descriptor readable
            return handled
        finally:
            self._drain_lock.release()


class LoopGroup:
    """A set of SocketKit event loops (threads). Sockets created without a group use a
    process-wide default one."""

    def __init__(self, loop_count: int = 1) -> None:
        handle = c_void_p()
        error = _ffi.CError()
        _raise_for(lib.sk_loop_group_create(loop_count, byref(handle), byref(error)), error)
        self._handle: Optional[int] = handle.value

    @property
    def handle(self) -> int:
        if self._handle is None:
            raise InvalidHandleError("the loop group is closed", -11)
        return self._handle

    @property
    def loop_count(self) -> int:
        return _raise_for(lib.sk_loop_group_loop_count(self.handle))

    def close(self) -> None:
        """Stops the loops; sockets still open on them disconnect with BadConfigError."""
        handle, self._handle = self._handle, None
        if handle is not None:
            lib.sk_loop_group_release(handle)

    def __enter__(self) -> "LoopGroup":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


_default_queue: Optional[SerialQueue] = None
_default_queue_lock = threading.Lock()


def default_queue() -> SerialQueue:
    """The serial queue sockets use when none is given: one SocketKit thread runs every
    delegate method in the process, one at a time."""
    global _default_queue
    with _default_queue_lock:
        if _default_queue is None:
            _default_queue = SerialQueue("socketkit-python")
        return _default_queue


# --------------------------------------------------------------------------------------
# Addresses
# --------------------------------------------------------------------------------------

def _sockaddr(address: Address) -> bytes:
    """A C sockaddr for ("host", port) or a Unix path."""
    if isinstance(address, str):
        path = address.encode()
        return struct.pack("=H", _stdlib_socket.AF_UNIX) + path + b"\x00"
    host, port = address
    if ":" in host:
        scope = 0
        if "%" in host:
            host, scope_name = host.split("%", 1)
            scope = int(scope_name) if scope_name.isdigit() else _stdlib_socket.if_nametoindex(scope_name)
        packed = _stdlib_socket.inet_pton(_stdlib_socket.AF_INET6, host)
        return struct.pack("=H", _stdlib_socket.AF_INET6) + struct.pack("!H", port) + struct.pack(
            "=I", 0) + packed + struct.pack("=I", scope)
    packed = _stdlib_socket.inet_pton(_stdlib_socket.AF_INET, host)
    return struct.pack("=H", _stdlib_socket.AF_INET) + struct.pack("!H", port) + packed + bytes(8)


def _address_from_sockaddr(raw: bytes) -> Optional[Address]:
    if len(raw) < 2:
        return None
    family = struct.unpack("=H", raw[:2])[0]
    if family == _stdlib_socket.AF_UNIX:
        return raw[2:].split(b"\x00", 1)[0].decode("utf-8", "replace")
    buffer = ctypes.create_string_buffer(64)
    length = lib.sk_address_get_host(raw, len(raw), buffer, len(buffer))
    if length < 0:
        return None
    port = c_uint16()
    lib.sk_address_get_port(raw, len(raw), byref(port))
    return (buffer.value.decode(), port.value)


def lookup_host(host: str, port: int) -> List[Tuple[str, int]]:
    """Resolves `host` (blocking) to ("address", port) pairs in resolver order.
    "localhost" gives 127.0.0.1 and ::1 without asking the resolver."""
    storage = (ctypes.c_byte * (128 * 32))()
    count = c_size_t()
    error = _ffi.CError()
    _raise_for(lib.sk_lookup_host(host.encode(), port, storage, 32, byref(count), byref(error)), error)
    found = []
    for index in range(count.value):
        raw = bytes(storage[index * 128:(index + 1) * 128])
        family = struct.unpack("=H", raw[:2])[0]
        length = 16 if family == _stdlib_socket.AF_INET else 28
        address = _address_from_sockaddr(raw[:length])
        if isinstance(address, tuple):
            found.append(address)
    return found


# --------------------------------------------------------------------------------------
# Sockets
# --------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Progress:
    """How far the current read or write has got; ``total`` is None when unknown."""

    tag: int
    done: int
    total: Optional[int]


@dataclass(frozen=True)
class KeepAlive:
    """TCP keep-alive: probe after `idle` seconds, every `interval` seconds, `count` times."""

    idle: int = 60
    interval: int = 10
    count: int = 6


@dataclass(frozen=True)
class Descriptors:
    """A socket's descriptors (-1 where there is none), as :meth:`Socket.perform` sees them."""

    primary: int
    ipv4: int
    ipv6: int
    unix: int


# Delegate method name -> delegate struct member.
_DELEGATE_METHODS = {
    "socket_did_accept": "did_accept",
    "socket_new_loop_for_connection": "new_socket_loop_for_connection",
    "socket_did_pause_accepting": "did_pause_accepting",
    "socket_did_connect": "did_connect",
    "socket_did_read": "did_read",
    "socket_did_read_partial": "did_read_partial",
    "socket_should_timeout_read": "should_timeout_read",
    "socket_did_write": "did_write",
    "socket_did_write_partial": "did_write_partial",
    "socket_should_timeout_write": "should_timeout_write",
    "socket_did_close_read_stream": "did_close_read_stream",
    "socket_did_reach_high_watermark": "did_reach_high_watermark",
    "socket_did_drain_to_low_watermark": "did_drain_to_low_watermark",
    "socket_did_disconnect": "did_disconnect",
}

# Live sockets by handle, held weakly: a socket nobody references closes.
_sockets: "weakref.WeakValueDictionary[int, Socket]" = weakref.WeakValueDictionary()
# Sockets being adopted with from_fd, by the token passed as userdata: their first callback
# (did_connect) may run before sk_socket_create_from_fd has returned their handle.
_adopting: "weakref.WeakValueDictionary[int, Socket]" = weakref.WeakValueDictionary()
_next_token = iter(range(1, 1 << 62))
_shutting_down = False
_UNSET: Any = object()


def _socket_for(handle: Optional[int], userdata: Optional[int] = None) -> Optional["Socket"]:
    if _shutting_down or handle is None:
        return None
    sock = _sockets.get(handle)
    if sock is None and userdata:
        sock = _adopting.get(userdata)
        if sock is not None:
            sock._register(handle)
    return sock


def _invoke(sock: "Socket", name: str, *arguments: Any, default: Any = None) -> Any:
    method = getattr(sock._delegate, name, None)
    if method is None:
        return default
    try:
        return method(sock, *arguments)
    except BaseException:
        _report_unraisable(f"Exception ignored in socketkit delegate method {name}", sock._delegate)
        return default


# Event handlers, shared by the C trampolines (serial queues, the loop thread) and the
# record dispatcher of HostQueue (sk_callback_queue_poll_events).

def _on_accept(listener_handle, new_handle):
    listener = _socket_for(listener_handle)
    if listener is None:
        lib.sk_socket_release(new_handle)
        return
    child = Socket._adopt_handle(new_handle, listener._delegate, listener._queue)
    _invoke(listener, "socket_did_accept", child)


def _on_pause_accepting(handle, error):
    sock = _socket_for(handle)
    if sock is not None:
        _invoke(sock, "socket_did_pause_accepting", error)


def _on_connect(handle, host, port, userdata):
    sock = _socket_for(handle, userdata)
    if sock is not None:
        _invoke(sock, "socket_did_connect", host.decode("utf-8", "replace"), port)


def _on_read(handle, data, length, tag):
    sock = _socket_for(handle)
    if sock is not None:
        _invoke(sock, "socket_did_read", sock._take_read_result(data, length), tag)


def _on_timeout(handle, name, tag, elapsed, done) -> float:
    sock = _socket_for(handle)
    if sock is None:
        return 0.0
    extension = _invoke(sock, name, tag, elapsed, done, default=0.0)
    try:
        return float(extension or 0.0)
    except (TypeError, ValueError):
        return 0.0


def _on_disconnect(handle, error, userdata):
    sock = _socket_for(handle, userdata)
    if sock is None:
        return
    sock._session_ended()  # SocketKit no longer touches that session's buffers
    _invoke(sock, "socket_did_disconnect", error)


def _on_simple(handle, name, *arguments):
    sock = _socket_for(handle)
    if sock is not None:
        _invoke(sock, name, *arguments)


@_ffi.DID_ACCEPT
def _did_accept(listener_handle, new_handle, userdata):
    _on_accept(listener_handle, new_handle)


@_ffi.NEW_SOCKET_LOOP_FOR_CONNECTION
def _new_socket_loop(listener_handle, address, length, userdata):
    listener = _socket_for(listener_handle)
    if listener is None:
        return -1
    peer = _address_from_sockaddr(ctypes.string_at(address, length))
    index = _invoke(listener, "socket_new_loop_for_connection", peer)
    return index if isinstance(index, int) else -1


@_ffi.DID_PAUSE_ACCEPTING
def _did_pause_accepting(handle, error, userdata):
    _on_pause_accepting(handle, _error_from_c(error))


@_ffi.DID_CONNECT
def _did_connect(handle, host, port, userdata):
    _on_connect(handle, host, port, userdata)


@_ffi.DID_READ
def _did_read(handle, data, length, tag, userdata):
    _on_read(handle, data, length, tag)


@_ffi.DID_READ_PARTIAL
def _did_read_partial(handle, length, tag, userdata):
    _on_simple(handle, "socket_did_read_partial", length, tag)


@_ffi.SHOULD_TIMEOUT
def _should_timeout_read(handle, tag, elapsed, done, userdata):
    return _on_timeout(handle, "socket_should_timeout_read", tag, elapsed, done)


@_ffi.DID_WRITE
def _did_write(handle, tag, userdata):
    _on_simple(handle, "socket_did_write", tag)


@_ffi.DID_WRITE_PARTIAL
def _did_write_partial(handle, length, tag, userdata):
    _on_simple(handle, "socket_did_write_partial", length, tag)


@_ffi.SHOULD_TIMEOUT
def _should_timeout_write(handle, tag, elapsed, done, userdata):
    return _on_timeout(handle, "socket_should_timeout_write", tag, elapsed, done)


@_ffi.DID_CLOSE_READ_STREAM
def _did_close_read_stream(handle, userdata):
    _on_simple(handle, "socket_did_close_read_stream")


@_ffi.DID_WATERMARK
def _did_reach_high_watermark(handle, queued, userdata):
    _on_simple(handle, "socket_did_reach_high_watermark", queued)


@_ffi.DID_WATERMARK
def _did_drain_to_low_watermark(handle, queued, userdata):
    _on_simple(handle, "socket_did_drain_to_low_watermark", queued)


@_ffi.DID_DISCONNECT
def _did_disconnect(handle, error, userdata):
    _on_disconnect(handle, _error_from_c(error), userdata)


def _error_at(address: int) -> Optional[Error]:
    return _error_from_c(ctypes.cast(address, ctypes.POINTER(_ffi.CError))) if address else None


_EVENT_SIZE = _ffi.EVENT_FORMAT.size
_unpack_event = _ffi.EVENT_FORMAT.unpack_from


def _dispatch_records(raw: memoryview, records: Any, count: int) -> None:
    """Handles `count` records of a poll, in order (one struct unpack per record: no ctypes
    callback and no ctypes field access on the common paths)."""
    for index in range(count):
        (handle, userdata, kind, port, tag, data, length, elapsed, host, error, new_socket,
         _token) = _unpack_event(raw, index * _EVENT_SIZE)
        try:
            if kind == _ffi.EVENT_READ:
                _on_read(handle, data, length, tag)
            elif kind == _ffi.EVENT_WRITE:
                _on_simple(handle, "socket_did_write", tag)
            elif kind == _ffi.EVENT_ACCEPT:
                _on_accept(handle, new_socket)
            elif kind == _ffi.EVENT_CONNECT:
                _on_connect(handle, ctypes.string_at(host), port, userdata)
            elif kind == _ffi.EVENT_DISCONNECT:
                _on_disconnect(handle, _error_at(error), userdata)
            elif kind == _ffi.EVENT_READ_PARTIAL:
                _on_simple(handle, "socket_did_read_partial", length, tag)
            elif kind == _ffi.EVENT_WRITE_PARTIAL:
                _on_simple(handle, "socket_did_write_partial", length, tag)
            elif kind == _ffi.EVENT_READ_TIMEOUT or kind == _ffi.EVENT_WRITE_TIMEOUT:
                name = "socket_should_timeout_read" if kind == _ffi.EVENT_READ_TIMEOUT else "socket_should_timeout_write"
                extension = 0.0
                try:
                    extension = _on_timeout(handle, name, tag, elapsed, length)
                finally:
                    # Always answered: the read or write waits for it.
                    lib.sk_socket_answer_timeout(byref(records[index]), extension)
            elif kind == _ffi.EVENT_CLOSE_READ_STREAM:
                _on_simple(handle, "socket_did_close_read_stream")
            elif kind == _ffi.EVENT_HIGH_WATERMARK:
                _on_simple(handle, "socket_did_reach_high_watermark", length)
            elif kind == _ffi.EVENT_LOW_WATERMARK:
                _on_simple(handle, "socket_did_drain_to_low_watermark", length)
            elif kind == _ffi.EVENT_PAUSE_ACCEPTING:
                _on_pause_accepting(handle, _error_at(error))
        except BaseException:  # pragma: no cover - _invoke already reports delegate errors
            _report_unraisable("Exception ignored while dispatching a socketkit event", None)


_TRAMPOLINES = {
    "did_accept": _did_accept,
    "new_socket_loop_for_connection": _new_socket_loop,
    "did_pause_accepting": _did_pause_accepting,
    "did_connect": _did_connect,
    "did_read": _did_read,
    "did_read_partial": _did_read_partial,
    "should_timeout_read": _should_timeout_read,
    "did_write": _did_write,
    "did_write_partial": _did_write_partial,
    "should_timeout_write": _should_timeout_write,
    "did_close_read_stream": _did_close_read_stream,
    "did_reach_high_watermark": _did_reach_high_watermark,
    "did_drain_to_low_watermark": _did_drain_to_low_watermark,
    "did_disconnect": _did_disconnect,
}


def _delegate_struct(delegate: Any) -> _ffi.SocketDelegate:
    """The C delegate for a Python delegate: only the methods it has are wired, so SocketKit
    does not call into Python for events nobody listens to. Accepting always is (a listener
    without ``socket_did_accept`` closes its connections)."""
    struct_ = _ffi.SocketDelegate()
    for method, member in _DELEGATE_METHODS.items():
        if delegate is not None and getattr(delegate, method, None) is not None:
            setattr(struct_, member, _TRAMPOLINES[member])
    # These keep internal state right whatever the delegate implements.
    struct_.did_read = _TRAMPOLINES["did_read"]
    struct_.did_disconnect = _TRAMPOLINES["did_disconnect"]
    return struct_


class Socket:
    """An asynchronous TCP or Unix-domain socket (GCDAsyncSocket's model).

    ``delegate`` is any object; SocketKit calls the methods it defines, named after the
    C delegate members: ``socket_did_connect(sock, host, port)``,
    ``socket_did_read(sock, data, tag)``, ``socket_did_write(sock, tag)``,
    ``socket_did_disconnect(sock, error)``, ``socket_did_accept(listener, new_sock)``, ...
    They run on ``queue``: by default a SocketKit thread shared by all sockets
    (:func:`default_queue`); a :class:`HostQueue` to run them yourself (see
    :mod:`socketkit.aio` for asyncio); ``None`` for SocketKit's loop thread.

    Keep a reference: a socket nobody holds is closed. Use it as a context manager, or
    call :meth:`close`; afterwards every method raises :class:`InvalidHandleError`.
    """

    def __init__(self, delegate: Any = None, *, queue: Optional[CallbackQueue] = _UNSET,
                 loop_group: Optional[LoopGroup] = None) -> None:
        self._init_common(delegate, default_queue() if queue is _UNSET else queue)
        handle = c_void_p()
        error = _ffi.CError()
        struct_ = _delegate_struct(delegate)
        _raise_for(lib.sk_socket_create(byref(struct_), ctypes.sizeof(struct_), None, self._queue_handle,
                                        loop_group.handle if loop_group is not None else None,
                                        byref(handle), byref(error)), error)
        self._register(handle.value)

    def _init_common(self, delegate: Any, queue: Optional[CallbackQueue]) -> None:
        self._handle: Optional[int] = None
        self._delegate = delegate
        self._queue = queue
        # Caller buffers of pending *_into reads: (start address, end address, view, session).
        # The view keeps the buffer exported (unmovable) until SocketKit is done with it: its
        # read completed, its session ended (did_disconnect), or the socket was released.
        self._pending_buffers: List[Tuple[int, int, memoryview, int]] = []
        # Sessions (connect, accept, adopt) started and ended: each ends with exactly one
        # did_disconnect, in order, so a late did_disconnect unpins only its own session's buffers.
        self._sessions_started = 0
        self._sessions_ended = 0
        self.user_data: Any = None

    def _register(self, handle: int) -> None:
        self._handle = handle
        _sockets[handle] = self

    @property
    def _queue_handle(self) -> Optional[int]:
        return self._queue.handle if self._queue is not None else None

    @classmethod
    def _adopt_handle(cls, handle: int, delegate: Any, queue: Optional[CallbackQueue]) -> "Socket":
        """Wraps a handle SocketKit created (an accepted connection)."""
        sock = cls.__new__(cls)
        sock._init_common(delegate, queue)
        sock._sessions_started = 1
        sock._register(handle)
        return sock

    def _session_ended(self) -> None:
        self._sessions_ended += 1
        ended = self._sessions_ended
        self._pending_buffers = [pin for pin in self._pending_buffers if pin[3] > ended]

    @classmethod
    def from_fd(cls, fd: int, delegate: Any = None, *, queue: Optional[CallbackQueue] = _UNSET,
                loop_group: Optional[LoopGroup] = None) -> "Socket":
        """Wraps an already connected TCP or Unix stream socket descriptor. On success the
        socket owns it (detach it from any Python socket object first) and
        ``socket_did_connect`` follows."""
        sock = cls.__new__(cls)
        sock._init_common(delegate, default_queue() if queue is _UNSET else queue)
        handle = c_void_p()
        error = _ffi.CError()
        struct_ = _delegate_struct(delegate)
        token = next(_next_token)
        _adopting[token] = sock
        try:
            status = lib.sk_socket_create_from_fd(
                fd, byref(struct_), ctypes.sizeof(struct_), token, sock._queue_handle,
                loop_group.handle if loop_group is not None else None, byref(handle), byref(error))
        finally:
            _adopting.pop(token, None)
        _raise_for(status, error)
        sock._sessions_started = 1
        sock._register(handle.value)
        return sock

    # ---- lifetime ------------------------------------------------------------------------

    @property
    def handle(self) -> int:
        """The C handle (an integer), for use with the C API directly."""
        if self._handle is None:
            raise InvalidHandleError("the socket is closed", -11)
        return self._handle

    def close(self) -> None:
        """Releases the socket. Writes already queued are still sent before the connection
        closes (as asyncio's ``transport.close()`` does); queued reads are dropped. No
        delegate method runs after this returns (one running on another thread is waited
        for). Idempotent."""
        if self._handle is not None:
            lib.sk_socket_disconnect_after_writing(self._handle)
        self._release()

    def abort(self) -> None:
        """Releases the socket and closes the connection at once, dropping queued writes."""
        self._release()

    def _release(self) -> None:
        handle, self._handle = self._handle, None
        if handle is not None:
            _sockets.pop(handle, None)
            lib.sk_socket_release(handle)
            self._pending_buffers.clear()

    def __enter__(self) -> "Socket":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self._release()
        except Exception:  # pragma: no cover - interpreter shutdown
            pass

    def __repr__(self) -> str:
        if self._handle is None:
            return "<socketkit.Socket closed>"
        state = "connected" if self.is_connected else ("accepting" if self.is_accepting else
                                                       ("disconnected" if self.is_disconnected else "connecting"))
        return f"<socketkit.Socket {state} handle={self._handle:#x}>"

    @property
    def delegate(self) -> Any:
        return self._delegate

    @delegate.setter
    def delegate(self, delegate: Any) -> None:
        """Replaces the delegate, synchronously: once set, no method of the old one runs."""
        struct_ = _delegate_struct(delegate)
        _raise_for(lib.sk_socket_set_delegate(self.handle, byref(struct_), ctypes.sizeof(struct_), None))
        self._delegate = delegate

    @property
    def queue(self) -> Optional[CallbackQueue]:
        return self._queue

    @queue.setter
    def queue(self, queue: Optional[CallbackQueue]) -> None:
        """Moves callbacks to another queue (None: SocketKit's loop thread), keeping order."""
        _raise_for(lib.sk_socket_set_callback_queue(self.handle, queue.handle if queue is not None else None))
        self._queue = queue

    # ---- configuration -------------------------------------------------------------------

    def _flag(self, getter: Callable[[int], int]) -> bool:
        return bool(_raise_for(getter(self.handle)))

    @property
    def ipv4_enabled(self) -> bool:
        return self._flag(lib.sk_socket_is_ipv4_enabled)

    @ipv4_enabled.setter
    def ipv4_enabled(self, enabled: bool) -> None:
        _raise_for(lib.sk_socket_set_ipv4_enabled(self.handle, int(bool(enabled))))

    @property
    def ipv6_enabled(self) -> bool:
        return self._flag(lib.sk_socket_is_ipv6_enabled)

    @ipv6_enabled.setter
    def ipv6_enabled(self, enabled: bool) -> None:
        _raise_for(lib.sk_socket_set_ipv6_enabled(self.handle, int(bool(enabled))))

    @property
    def ipv4_preferred_over_ipv6(self) -> bool:
        return self._flag(lib.sk_socket_is_ipv4_preferred_over_ipv6)

    @ipv4_preferred_over_ipv6.setter
    def ipv4_preferred_over_ipv6(self, preferred: bool) -> None:
        _raise_for(lib.sk_socket_set_ipv4_preferred_over_ipv6(self.handle, int(bool(preferred))))

    @property
    def alternate_address_delay(self) -> float:
        value = c_double()
        _raise_for(lib.sk_socket_get_alternate_address_delay(self.handle, byref(value)))
        return value.value

    @alternate_address_delay.setter
    def alternate_address_delay(self, seconds: float) -> None:
        _raise_for(lib.sk_socket_set_alternate_address_delay(self.handle, float(seconds)))

    @property
    def auto_disconnect_on_closed_read_stream(self) -> bool:
        return self._flag(lib.sk_socket_get_auto_disconnect_on_closed_read_stream)

    @auto_disconnect_on_closed_read_stream.setter
    def auto_disconnect_on_closed_read_stream(self, enabled: bool) -> None:
        _raise_for(lib.sk_socket_set_auto_disconnect_on_closed_read_stream(self.handle, int(bool(enabled))))

    @property
    def maximum_read_length(self) -> int:
        value = c_size_t()
        _raise_for(lib.sk_socket_get_maximum_read_length(self.handle, byref(value)))
        return value.value

    @maximum_read_length.setter
    def maximum_read_length(self, length: int) -> None:
        _raise_for(lib.sk_socket_set_maximum_read_length(self.handle, _size(length, "length")))

    @property
    def write_watermarks(self) -> Tuple[int, int]:
        """(low, high) in bytes."""
        low, high = c_size_t(), c_size_t()
        _raise_for(lib.sk_socket_get_write_watermarks(self.handle, byref(low), byref(high)))
        return (low.value, high.value)

    @write_watermarks.setter
    def write_watermarks(self, marks: Tuple[int, int]) -> None:
        low, high = marks
        error = _ffi.CError()
        _raise_for(lib.sk_socket_set_write_watermarks(self.handle, _size(low, "low"), _size(high, "high"),
                                                      byref(error)), error)

    @property
    def no_delay(self) -> bool:
        return self._flag(lib.sk_socket_get_no_delay)

    @no_delay.setter
    def no_delay(self, enabled: bool) -> None:
        _raise_for(lib.sk_socket_set_no_delay(self.handle, int(bool(enabled))))

    @property
    def keep_alive(self) -> Optional[KeepAlive]:
        enabled, idle, interval, count = c_int(), c_int(), c_int(), c_int()
        _raise_for(lib.sk_socket_get_keep_alive(self.handle, byref(enabled), byref(idle), byref(interval),
                                                byref(count)))
        return KeepAlive(idle.value, interval.value, count.value) if enabled.value else None

    @keep_alive.setter
    def keep_alive(self, settings: Optional[KeepAlive]) -> None:
        error = _ffi.CError()
        if settings is None:
            status = lib.sk_socket_set_keep_alive(self.handle, 0, 0, 0, 0, byref(error))
        else:
            status = lib.sk_socket_set_keep_alive(self.handle, 1, _int(settings.idle), _int(settings.interval),
                                                  _int(settings.count), byref(error))
        _raise_for(status, error)

    @property
    def buffer_sizes(self) -> Tuple[int, int]:
        """(send, receive) sizes requested with SO_SNDBUF/SO_RCVBUF; 0 = the kernel's default."""
        send, receive = c_int(), c_int()
        _raise_for(lib.sk_socket_get_buffer_sizes(self.handle, byref(send), byref(receive)))
        return (send.value, receive.value)

    @buffer_sizes.setter
    def buffer_sizes(self, sizes: Tuple[int, int]) -> None:
        send, receive = sizes
        error = _ffi.CError()
        _raise_for(lib.sk_socket_set_buffer_sizes(self.handle, _int(send), _int(receive), byref(error)), error)

    # ---- accepting and connecting -----------------------------------------------------------

    def accept_on_port(self, port: int) -> None:
        """Listens on every interface, IPv4 and IPv6; port 0 picks one (see :attr:`local_port`).
        Accepted connections arrive in ``socket_did_accept(listener, new_socket)``."""
        error = _ffi.CError()
        _raise_for(lib.sk_socket_accept_on_port(self.handle, _port(port), byref(error)), error)
        self._sessions_started += 1

    def accept_on_interface(self, interface: Optional[str], port: int) -> None:
        """Listens on an interface name, an address, "localhost" or None (any)."""
        error = _ffi.CError()
        _raise_for(lib.sk_socket_accept_on_interface(self.handle, interface.encode() if interface else None,
                                                     _port(port), byref(error)), error)
        self._sessions_started += 1

    def accept_on_unix_path(self, path: str) -> None:
        """Listens on a Unix-domain socket (a stale socket file there is replaced)."""
        error = _ffi.CError()
        _raise_for(lib.sk_socket_accept_on_unix_path(self.handle, path.encode(), byref(error)), error)
        self._sessions_started += 1

    def connect_to_host(self, host: str, port: int, interface: Optional[str] = None, timeout: float = -1) -> None:
        """Connects to a host name or address (every resolved address is raced, Happy
        Eyeballs). Reads and writes may be queued at once. The outcome arrives as
        ``socket_did_connect`` or ``socket_did_disconnect``."""
        error = _ffi.CError()
        _raise_for(lib.sk_socket_connect_to_host(self.handle, host.encode(), _port(port),
                                                 interface.encode() if interface else None, float(timeout),
                                                 byref(error)), error)
        self._sessions_started += 1

    def connect_to_address(self, address: Address, interface: Optional[str] = None, timeout: float = -1) -> None:
        """Connects to ("ip", port) or a Unix path, without name resolution."""
        raw = _sockaddr(address)
        error = _ffi.CError()
        _raise_for(lib.sk_socket_connect_to_address(self.handle, raw, len(raw),
                                                    interface.encode() if interface else None, float(timeout),
                                                    byref(error)), error)
        self._sessions_started += 1

    def connect_to_unix_path(self, path: str, timeout: float = -1) -> None:
        """Connects to a Unix-domain socket."""
        error = _ffi.CError()
        _raise_for(lib.sk_socket_connect_to_unix_path(self.handle, path.encode(), float(timeout), byref(error)),
                   error)
        self._sessions_started += 1

    # ---- reading ---------------------------------------------------------------------------

    def read(self, max_length: int = 0, timeout: float = -1, tag: int = 0) -> None:
        """Reads whatever is available (at least one byte, at most `max_length` if not 0).
        ``socket_did_read(sock, data, tag)`` receives ``bytes``."""
        error = _ffi.CError()
        _raise_for(lib.sk_socket_read(self.handle, _size(max_length, "max_length"), float(timeout), tag,
                                      byref(error)), error)

    def read_to_length(self, length: int, timeout: float = -1, tag: int = 0) -> None:
        """Reads exactly `length` bytes."""
        error = _ffi.CError()
        _raise_for(lib.sk_socket_read_to_length(self.handle, _size(length, "length"), float(timeout), tag,
                                                byref(error)), error)

    def read_to_data(self, separator: BytesLike, max_length: int = 0, timeout: float = -1, tag: int = 0) -> None:
        """Reads up to and including `separator`; with `max_length` the connection ends with
        ReadMaxedOutError if that many bytes arrive without it."""
        separator = bytes(separator)
        error = _ffi.CError()
        _raise_for(lib.sk_socket_read_to_data(self.handle, separator, len(separator), _size(max_length, "max_length"),
                                              float(timeout), tag, byref(error)), error)

    def read_into(self, buffer: Any, offset: int = 0, max_length: int = 0, timeout: float = -1,
                  tag: int = 0) -> None:
        """Reads whatever is available into a writable buffer (``bytearray``, writable
        ``memoryview``, ...) at `offset`. ``socket_did_read`` then receives a memoryview of
        the bytes that landed in it. The buffer is held until then."""
        view, address, capacity = self._pin(buffer)
        error = _ffi.CError()
        status = lib.sk_socket_read_into(self.handle, address, capacity, _size(offset, "offset"),
                                         _size(max_length, "max_length"), float(timeout), tag, byref(error))
        self._commit_pin(status, error, view, address, capacity)

    def read_to_length_into(self, length: int, buffer: Any, offset: int = 0, timeout: float = -1,
                            tag: int = 0) -> None:
        """Reads exactly `length` bytes into `buffer` at `offset`."""
        view, address, capacity = self._pin(buffer)
        error = _ffi.CError()
        status = lib.sk_socket_read_to_length_into(self.handle, _size(length, "length"), address, capacity,
                                                   _size(offset, "offset"), float(timeout), tag, byref(error))
        self._commit_pin(status, error, view, address, capacity)

    def read_to_data_into(self, separator: BytesLike, buffer: Any, offset: int = 0, max_length: int = 0,
                          timeout: float = -1, tag: int = 0) -> None:
        """Reads up to and including `separator` into `buffer` at `offset`."""
        separator = bytes(separator)
        view, address, capacity = self._pin(buffer)
        error = _ffi.CError()
        status = lib.sk_socket_read_to_data_into(self.handle, separator, len(separator), address, capacity,
                                                 _size(offset, "offset"), _size(max_length, "max_length"),
                                                 float(timeout), tag, byref(error))
        self._commit_pin(status, error, view, address, capacity)

    def _pin(self, buffer: Any) -> Tuple[memoryview, int, int]:
        view = memoryview(buffer)
        if view.readonly:
            raise error_from_code(-2, 0, "the buffer is read-only: pass a bytearray or a writable memoryview")
        if not view.contiguous:
            raise error_from_code(-2, 0, "the buffer is not contiguous")
        view = view.cast("B")
        if len(view) == 0:
            raise error_from_code(-2, 0, "empty buffer")
        export = (ctypes.c_char * len(view)).from_buffer(view)
        return view, ctypes.addressof(export), len(view)

    def _commit_pin(self, status: int, error: _ffi.CError, view: memoryview, address: int, capacity: int) -> None:
        _raise_for(status, error)
        self._pending_buffers.append((address, address + capacity, view, self._sessions_started))

    def _take_read_result(self, data: int, length: int) -> Union[bytes, memoryview]:
        for index, (start, end, view, _) in enumerate(self._pending_buffers):
            if start <= data < end:
                del self._pending_buffers[index]
                offset = data - start
                return view[offset:offset + length]
        return ctypes.string_at(data, length)

    @property
    def read_progress(self) -> Optional[Progress]:
        """The current read's progress, or None when no read is under way."""
        return self._progress(lib.sk_socket_read_progress)

    # ---- writing ---------------------------------------------------------------------------

    def write(self, data: BytesLike, timeout: float = -1, tag: int = 0) -> None:
        """Queues `data` (any bytes-like object); ``socket_did_write(sock, tag)`` follows once
        the kernel accepted it all. Large ``bytes`` objects (immutable) are sent without a
        copy and kept alive until SocketKit is done with them; anything else is copied."""
        source: Any
        if isinstance(data, bytes) and len(data) >= _NO_COPY_THRESHOLD:
            self._write_no_copy(data, timeout, tag)
            return
        if isinstance(data, bytes):
            source, length = data, len(data)
        else:
            view = memoryview(data)
            if view.readonly or not view.c_contiguous or view.nbytes == 0:
                source = view.tobytes()
            else:
                source = (ctypes.c_char * view.nbytes).from_buffer(view.cast("B"))
            length = view.nbytes
        error = _ffi.CError()
        # SocketKit copies the bytes before the call returns.
        _raise_for(lib.sk_socket_write(self.handle, source, length, float(timeout), tag, byref(error)), error)

    def _write_no_copy(self, data: bytes, timeout: float, tag: int) -> None:
        token = next(_next_token)
        with _lent_lock:
            _lent[token] = data
        error = _ffi.CError()
        status = lib.sk_socket_write_no_copy(self.handle, data, len(data), _release_lent, token, float(timeout),
                                             tag, byref(error))
        if status < 0:
            # Refused: SocketKit never took the bytes, so the release will not come.
            with _lent_lock:
                _lent.pop(token, None)
        _raise_for(status, error)

    @property
    def write_progress(self) -> Optional[Progress]:
        """The current write's progress, or None."""
        return self._progress(lib.sk_socket_write_progress)

    @property
    def queued_write_bytes(self) -> int:
        """Bytes queued and not yet accepted by the kernel."""
        value = c_size_t()
        _raise_for(lib.sk_socket_get_queued_write_bytes(self.handle, byref(value)))
        return value.value

    def _progress(self, function: Callable[..., int]) -> Optional[Progress]:
        tag, done, total = c_long(), c_size_t(), c_size_t()
        if not _raise_for(function(self.handle, byref(tag), byref(done), byref(total))):
            return None
        return Progress(tag.value, done.value, total.value or None)

    # ---- disconnecting ------------------------------------------------------------------

    def disconnect(self) -> None:
        """Closes the connection now; ``socket_did_disconnect(sock, None)`` follows. The
        socket may connect or accept again."""
        _raise_for(lib.sk_socket_disconnect(self.handle))

    def disconnect_after_reading(self) -> None:
        """Closes once every queued read completed."""
        _raise_for(lib.sk_socket_disconnect_after_reading(self.handle))

    def disconnect_after_writing(self) -> None:
        """Closes once every queued write was written."""
        _raise_for(lib.sk_socket_disconnect_after_writing(self.handle))

    def disconnect_after_reading_and_writing(self) -> None:
        """Closes once both queues drained."""
        _raise_for(lib.sk_socket_disconnect_after_reading_and_writing(self.handle))

    # ---- diagnostics ---------------------------------------------------------------------

    @property
    def is_connected(self) -> bool:
        return self._flag(lib.sk_socket_is_connected)

    @property
    def is_disconnected(self) -> bool:
        return self._flag(lib.sk_socket_is_disconnected)

    @property
    def is_accepting(self) -> bool:
        return self._flag(lib.sk_socket_is_accepting)

    @property
    def is_ipv4(self) -> bool:
        return self._flag(lib.sk_socket_is_ipv4)

    @property
    def is_ipv6(self) -> bool:
        return self._flag(lib.sk_socket_is_ipv6)

    @property
    def is_unix(self) -> bool:
        return self._flag(lib.sk_socket_is_unix)

    def _text(self, function: Callable[..., int]) -> Optional[str]:
        buffer = ctypes.create_string_buffer(4096)
        status = function(self.handle, buffer, len(buffer))
        if status == -1:  # SK_ERR_BAD_CONFIG: nothing to report
            return None
        _raise_for(status)
        return buffer.value.decode("utf-8", "replace")

    def _port_of(self, function: Callable[..., int]) -> int:
        port = c_uint16()
        status = function(self.handle, byref(port))
        if status == -1:
            return 0
        _raise_for(status)
        return port.value

    def _address(self, function: Callable[..., int]) -> Optional[Address]:
        storage = ctypes.create_string_buffer(128)
        length = c_uint32(len(storage))
        status = function(self.handle, storage, byref(length))
        if status == -1:
            return None
        _raise_for(status)
        return _address_from_sockaddr(storage.raw[:length.value])

    @property
    def connected_host(self) -> Optional[str]:
        """The peer's IP address, or None (not connected, or Unix-domain)."""
        return self._text(lib.sk_socket_get_connected_host)

    @property
    def connected_port(self) -> int:
        return self._port_of(lib.sk_socket_get_connected_port)

    @property
    def connected_address(self) -> Optional[Address]:
        """("ip", port), a Unix path, or None."""
        return self._address(lib.sk_socket_get_connected_address)

    @property
    def connected_unix_path(self) -> Optional[str]:
        return self._text(lib.sk_socket_get_connected_unix_path)

    @property
    def local_host(self) -> Optional[str]:
        return self._text(lib.sk_socket_get_local_host)

    @property
    def local_port(self) -> int:
        return self._port_of(lib.sk_socket_get_local_port)

    @property
    def local_address(self) -> Optional[Address]:
        return self._address(lib.sk_socket_get_local_address)

    # ---- advanced ------------------------------------------------------------------------

    def perform(self, function: Callable[[Descriptors], None]) -> None:
        """Runs `function(descriptors)` on the socket's loop thread (e.g. for setsockopt)."""
        def trampoline(descriptors, context):
            try:
                value = descriptors.contents
                function(Descriptors(value.primary, value.ipv4, value.ipv6, value.unix_domain))
            except BaseException:
                _report_unraisable("Exception ignored in socketkit perform function", function)
            finally:
                with _perform_lock:
                    _perform_calls.pop(id(callback), None)

        # Kept alive until it has run (SocketKit calls it later, on its loop thread).
        callback = _ffi.PERFORM_FUNCTION(trampoline)
        with _perform_lock:
            _perform_calls[id(callback)] = callback
        status = lib.sk_socket_perform(self.handle, callback, None)
        if status < 0:
            with _perform_lock:
                _perform_calls.pop(id(callback), None)
        _raise_for(status)


_perform_lock = threading.Lock()

# bytes lent to SocketKit by no-copy writes, by token, until their release callback.
_NO_COPY_THRESHOLD = 64 * 1024
_lent: Dict[int, bytes] = {}
_lent_lock = threading.Lock()


@_ffi.RELEASE_FUNCTION
def _release_lent(data, context):
    with _lent_lock:
        _lent.pop(context, None)

_perform_calls: Dict[int, Any] = {}


def _size(value: int, name: str) -> int:
    value = int(value)
    if value < 0 or value >= 1 << 63:
        raise error_from_code(-2, 0, f"{name} must be between 0 and 2**63 - 1")
    return value


def _int(value: int) -> int:
    value = int(value)
    if not -(1 << 31) <= value < 1 << 31:
        raise error_from_code(-2, 0, f"{value} does not fit in a C int")
    return value


def _port(port: int) -> int:
    port = int(port)
    if not 0 <= port <= 65535:
        raise error_from_code(-2, 0, f"port {port} is not in 0...65535")
    return port


@atexit.register
def _shutdown() -> None:
    """Closes every live socket before the interpreter goes away, so no SocketKit thread
    calls into a finalizing interpreter."""
    global _shutting_down
    _shutting_down = True
    for sock in list(_sockets.values()):
        try:
            sock.abort()
        except Exception:  # pragma: no cover
            pass
