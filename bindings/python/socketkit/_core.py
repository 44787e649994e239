"""Sockets (TCP, Unix-domain and UDP), callback queues and loop groups over the C API.

Callbacks: SocketKit calls a small fixed set of C trampolines (module-level, alive for the
process's life); each finds the Python :class:`Socket` or :class:`UdpSocket` by its handle
and calls the method of the same name on its delegate, if the delegate has one. An
exception raised by a delegate method goes to :func:`sys.unraisablehook`: it never crashes
the process and is never silently lost.
"""
from __future__ import annotations

import atexit
import ctypes
import enum
import os
import socket as _stdlib_socket
import struct
import sys
import threading
import traceback as _traceback
import types
import weakref
from _weakref import _remove_dead_weakref  # type: ignore[import]
from ctypes import byref, c_double, c_int, c_long, c_size_t, c_uint16, c_uint32, c_void_p
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Tuple, Union

from . import _ffi
from ._ffi import lib
from ._tls import TLSInfo, TLSSettings, TLSTrust, _tls_info
from .errors import Error, InvalidHandleError, error_from_code

# The hot paths in C (socketkit/_speedups.c), when the extension was built; everything
# works without it, through ctypes. SOCKETKIT_NO_SPEEDUPS=1 forces the ctypes paths.
_speedups: Any = None
if not os.environ.get("SOCKETKIT_NO_SPEEDUPS"):
    try:
        from . import _speedups  # type: ignore[attr-defined,no-redef]
    except ImportError:
        _speedups = None
    else:
        _layout = _speedups.event_layout()
        if (_layout["sizeof"] != ctypes.sizeof(_ffi.Event)
                or any(getattr(_ffi.Event, name).offset != offset for name, offset in _layout["offsets"].items())
                or _layout["version"] // 100 != lib.sk_version_number() // 100):
            _speedups = None  # built against another socketkit.h than the library's: not safe to use

#: True when the C hot paths (socketkit._speedups) are in use.
SPEEDUPS = _speedups is not None
_SocketBase: Any = _speedups.SocketBase if _speedups is not None else object
_UdpSocketBase: Any = _speedups.UdpSocketBase if _speedups is not None else object

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

class _WeakTable:
    """handle -> object, held weakly: what WeakValueDictionary does, without its Python-level
    code on every lookup (one lookup per event)."""

    __slots__ = ("_refs", "_gone")

    def __init__(self) -> None:
        self._refs: Dict[int, "weakref.ref[Any]"] = {}
        refs = self._refs

        def gone(ref: Any) -> None:
            # Removes the entry only if it is still the dead one (atomic under the GIL),
            # as WeakValueDictionary does: the handle may already name a new object.
            _remove_dead_weakref(refs, ref.key)

        # One callback for every entry; each reference carries its key (weakref.KeyedRef,
        # as WeakValueDictionary does): no closure per object held.
        self._gone = gone

    def get(self, key: int) -> Any:
        ref = self._refs.get(key)
        return ref() if ref is not None else None

    def __setitem__(self, key: int, value: Any) -> None:
        self._refs[key] = weakref.KeyedRef(value, self._gone, key)

    def pop(self, key: int, default: Any = None) -> Any:
        ref = self._refs.pop(key, None)
        value = ref() if ref is not None else None
        return default if value is None else value

    def values(self) -> List[Any]:
        return [value for value in (ref() for ref in list(self._refs.values())) if value is not None]


class _ThreadErrors(threading.local):
    """One sk_error_t per thread, reused by every call that can fail: making a ctypes
    structure per call cost more than the call. SocketKit fills it only as the call
    returns, after any callback the call ran (which may itself use it)."""

    def __init__(self) -> None:
        self.error = _ffi.CError()
        self.pointer = byref(self.error)


_thread_errors = _ThreadErrors()

# The default arguments of the hot calls, as ctypes values (never mutated).
_NO_TIMEOUT = c_double(-1.0)
_ZERO_TAG = c_long(0)
_ZERO_SIZE = c_size_t(0)


def _raise_for(status: int, error: Optional[_ffi.CError] = None) -> int:
    """Returns `status` when it is not an error, raises the matching exception otherwise."""
    if status >= 0:
        return status
    if error is not None and error.code == status:
        raise error_from_code(status, error.os_error, error.message.decode("utf-8", "replace"))
    raise error_from_code(status, 0, lib.sk_strerror(status).decode())


def _raise_c_error(status: int, code: int, os_error: int, message: bytes) -> None:
    """_raise_for for the C hot paths, which pass the sk_error_t's fields."""
    if code == status:
        raise error_from_code(status, os_error, message.decode("utf-8", "replace"))
    raise error_from_code(status, 0, lib.sk_strerror(status).decode())


def _report_delegate_error(message: Optional[str], target: Any, exception: Optional[BaseException]) -> None:
    """_report_unraisable for the C hot paths, which pass the exception."""
    _unraisable(type(exception) if exception is not None else None, exception,
                exception.__traceback__ if exception is not None else None,
                message or "Exception ignored while dispatching a socketkit event", target)


def _unraisable(kind: Any, value: Optional[BaseException], trace: Any, message: str, target: Any) -> None:
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


def _error_from_c(pointer) -> Optional[Error]:
    if not pointer:
        return None
    value = pointer.contents
    return error_from_code(value.code, value.os_error, value.message.decode("utf-8", "replace"))


def _report_unraisable(message: str, target: Any) -> None:
    """Hands the exception being handled to sys.unraisablehook."""
    kind, value, trace = sys.exc_info()
    _unraisable(kind, value, trace, message, target)


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
        name_bytes = _ffi.c_string(name or None, "the queue name")
        _raise_for(lib.sk_callback_queue_create_serial(name_bytes, byref(handle), byref(error)), error)
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
        self._records_address = ctypes.addressof(self._records)
        # Taken (popped) while a batch is handled: the memory its records point to lives
        # until the queue's next poll, so no other poll may start meanwhile. A one-token
        # list, not a threading.Lock: list.pop and append are atomic, and a non-blocking
        # Lock.acquire parses its arguments on every call (~1,300 instructions, callgrind;
        # drain runs after every turn of an asyncio loop driving a loop group).
        self._drain_token: List[None] = [None]

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
        try:
            self._drain_token.pop()
        except IndexError:
            return 0
        try:
            queue = self._handle or self.handle  # the property only to raise when closed
            handled = 0
            while True:
                room = self.BATCH if max_callbacks <= 0 else min(self.BATCH, max_callbacks - handled)
                if room <= 0:
                    break
                if _speedups is not None:
                    # One C call polls and dispatches the batch.
                    count = _speedups.drain(queue, self._records_address, room, self._raw_records,
                                            self._records)
                else:
                    count = _raise_for(lib.sk_callback_queue_poll_events(queue, self._records, room))
                    _dispatch_records(self._raw_records, self._records, count)
                if count == 0:
                    break
                handled += count
                if count < room:
                    break  # anything that arrived meanwhile keeps the descriptor readable
            return handled
        finally:
            self._drain_token.append(None)


class LoopGroup:
    """A set of SocketKit event loops (threads). Sockets created without a group use a
    process-wide default one."""

    def __init__(self, loop_count: int = 1) -> None:
        handle = c_void_p()
        error = _ffi.CError()
        _raise_for(lib.sk_loop_group_create(loop_count, byref(handle), byref(error)), error)
        self._handle: Optional[int] = handle.value
        self._close_hooks: List[Callable[[], None]] = []

    @classmethod
    def driven(cls) -> "LoopGroup":
        """A group of one loop with no thread of its own, run by the calling thread: call
        :meth:`run_once` whenever :meth:`fileno` is readable (:func:`socketkit.aio.loop_group`
        does this for asyncio). Socket I/O then happens on that thread, and its calls on the
        group's sockets run at once instead of waiting for another thread."""
        group = cls.__new__(cls)
        handle = c_void_p()
        error = _ffi.CError()
        _raise_for(lib.sk_loop_group_create_driven(byref(handle), byref(error)), error)
        group._handle = handle.value
        group._close_hooks = []
        return group

    def fileno(self) -> int:
        """A driven group's descriptor, readable while its loop has work (owned by the group)."""
        return _raise_for(lib.sk_loop_group_get_fd(self.handle))

    def run_once(self) -> bool:
        """Runs one iteration of a driven group's loop without waiting, on the thread that
        created the group; True when more work is ready at once."""
        group = self._handle or self.handle  # the property only to raise when closed
        if _speedups is not None:
            return _speedups.run_once(group)
        errors = _thread_errors
        status = lib.sk_loop_group_run_once(group, errors.pointer)
        if status < 0:
            _raise_for(status, errors.error)
        return status == 1

    @property
    def handle(self) -> int:
        if self._handle is None:
            raise InvalidHandleError("the loop group is closed", -11)
        return self._handle

    @property
    def loop_count(self) -> int:
        return _raise_for(lib.sk_loop_group_loop_count(self.handle))

    @staticmethod
    def default_loop_count() -> int:
        """The loops of the process-wide default group: one per CPU the process may run
        on (its affinity mask when the group was first used)."""
        return _raise_for(lib.sk_loop_group_loop_count(None))

    def close(self) -> None:
        """Stops the loops; sockets still open on them disconnect with BadConfigError. A driven
        group closed from another thread, or from a delegate method run by :meth:`run_once`,
        stops in its thread's next :meth:`run_once` (which still works until then). The stop
        takes bounded time: from the moment a loop starts stopping, calls other threads make
        on its sockets raise BadConfigError, as they do once it has stopped."""
        handle = self._handle
        if handle is None:
            return
        lib.sk_loop_group_release(handle)
        if lib.sk_loop_group_get_fd(handle) >= 0:
            return  # a driven group whose stop is pending: its handle lives until then
        self._handle = None
        hooks, self._close_hooks = self._close_hooks, []
        for hook in hooks:
            hook()

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

# Text for C (see _ffi.c_string): a NUL inside is a BadParamError, never a truncation.

def _host(host: str) -> bytes:
    return _ffi.c_string(host, "the host")


def _interface(interface: Optional[str]) -> Optional[bytes]:
    return _ffi.c_string(interface or None, "the interface")


def _unix_path(path: Any) -> bytes:
    return _ffi.c_string(path, "the Unix socket path", path=True)


def _sockaddr(address: Address) -> bytes:
    """A C sockaddr for ("host", port) or a Unix path."""
    if isinstance(address, str):
        path = _unix_path(address)
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
    encoded = _host(host)
    capacity = 16
    while True:
        entries = (_ffi.Address * capacity)()
        error = _ffi.CError()
        found = _raise_for(lib.sk_lookup_host_addresses(encoded, port, entries, capacity, byref(error)), error)
        if found <= capacity:
            break
        capacity = found  # more than fitted: ask again with room for all of them
    addresses = []
    for entry in entries[:found]:
        address = _address_from_sockaddr(ctypes.string_at(ctypes.addressof(entry), entry.length))
        if isinstance(address, tuple):
            addresses.append(address)
    return addresses


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
    "socket_did_secure": "did_secure",
    "socket_did_receive_trust": "did_receive_trust",
}

_DELEGATE_SIZE = ctypes.sizeof(_ffi.SocketDelegate)

# Live sockets by handle, held weakly: a socket nobody references closes.
_sockets = _WeakTable()
_socket_refs = _sockets._refs  # read directly by the hot event path
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
    # The hottest path of the binding (one call per read): _socket_for and _invoke inlined.
    if _shutting_down:
        return
    ref = _socket_refs.get(handle)
    sock = ref() if ref is not None else None
    if sock is None:
        return
    payload = sock._take_read_result(data, length)
    method = getattr(sock._delegate, "socket_did_read", None)
    if method is not None:
        try:
            method(sock, payload, tag)
        except BaseException:
            _report_unraisable("Exception ignored in socketkit delegate method socket_did_read", sock._delegate)


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


def _on_trust(handle, trust_address):
    """did_receive_trust: the delegate answers True/False now, or None to answer later with
    trust.answer(). A method that raises rejects the peer."""
    sock = _socket_for(handle)
    if sock is None or not trust_address:
        if trust_address:
            # Nobody to ask (the socket is being released): reject, as a NULL member would.
            token = ctypes.cast(trust_address, ctypes.POINTER(_ffi.TLSTrust)).contents.token
            lib.sk_socket_answer_trust(handle, token, 0)
        return
    trust = None
    try:
        trust = TLSTrust._from_c(sock, trust_address)
    except BaseException:
        _report_unraisable("Exception ignored while reading a socketkit trust question", sock._delegate)
        token = ctypes.cast(trust_address, ctypes.POINTER(_ffi.TLSTrust)).contents.token
        lib.sk_socket_answer_trust(handle, token, 0)
        return
    method = getattr(sock._delegate, "socket_did_receive_trust", None)
    verdict: Any = False
    if method is not None:
        try:
            verdict = method(sock, trust)
        except BaseException:
            _report_unraisable("Exception ignored in socketkit delegate method socket_did_receive_trust",
                               sock._delegate)
            verdict = False
    if verdict is not None:
        try:
            trust.answer(bool(verdict))
        except Error:
            pass  # the socket was closed meanwhile


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


@_ffi.DID_SECURE
def _did_secure(handle, userdata):
    _on_simple(handle, "socket_did_secure")


@_ffi.DID_RECEIVE_TRUST
def _did_receive_trust(handle, trust, userdata):
    _on_trust(handle, ctypes.cast(trust, c_void_p).value)


def _error_at(address: int) -> Optional[Error]:
    return _error_from_c(ctypes.cast(address, ctypes.POINTER(_ffi.CError))) if address else None


_EVENT_SIZE = _ffi.EVENT_FORMAT.size
_unpack_event = _ffi.EVENT_FORMAT.unpack_from
_iter_unpack_events = _ffi.EVENT_FORMAT.iter_unpack


def _dispatch_records(raw: memoryview, records: Any, count: int, start: int = 0) -> None:
    """Handles records `start` ..< `count` of a poll, in order (one struct unpack per record:
    no ctypes callback and no ctypes field access on the common paths). The C drain
    (_speedups.drain) calls it for each record it does not handle itself."""
    read_kind = _ffi.EVENT_READ
    on_read = _on_read
    for index, (handle, userdata, kind, port, tag, data, length, elapsed, host, error, new_socket,
                _token, udp_handle, _address, _address_length, context,
                trust) in enumerate(_iter_unpack_events(raw[start * _EVENT_SIZE:count * _EVENT_SIZE]),
                                    start):
        try:
            if kind == read_kind:
                on_read(handle, data, length, tag)
            elif kind == _ffi.EVENT_WRITE:
                _on_simple(handle, "socket_did_write", tag)
            elif kind >= _ffi.EVENT_UDP_CONNECT:
                # UDP records carry the peer as text (host, port) beside the sockaddr.
                if kind == _ffi.EVENT_UDP_RECEIVE:
                    _on_udp_receive(udp_handle, (ctypes.c_char * length).from_address(data).raw if length else b"",
                                    _udp_record_address(host, port, _address, _address_length), context)
                elif kind == _ffi.EVENT_UDP_SEND:
                    _on_udp_simple(udp_handle, "udp_socket_did_send", tag)
                elif kind == _ffi.EVENT_UDP_NOT_SEND:
                    _on_udp_simple(udp_handle, "udp_socket_did_not_send", tag, _error_at(error))
                elif kind == _ffi.EVENT_UDP_CONNECT:
                    _on_udp_simple(udp_handle, "udp_socket_did_connect",
                                   (ctypes.string_at(host).decode("utf-8", "replace"), port))
                elif kind == _ffi.EVENT_UDP_NOT_CONNECT:
                    _on_udp_simple(udp_handle, "udp_socket_did_not_connect", _error_at(error))
                elif kind == _ffi.EVENT_UDP_RECEIVE_ERROR:
                    _on_udp_simple(udp_handle, "udp_socket_did_receive_error", _error_at(error))
                elif kind == _ffi.EVENT_UDP_CLOSE:
                    _on_udp_simple(udp_handle, "udp_socket_did_close", _error_at(error))
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
            elif kind == _ffi.EVENT_SECURE:
                _on_simple(handle, "socket_did_secure")
            elif kind == _ffi.EVENT_TRUST:
                _on_trust(handle, trust)
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
    "did_secure": _did_secure,
    "did_receive_trust": _did_receive_trust,
}


def _delegate_struct(delegate: Any) -> Any:
    """The C delegate for a Python delegate, as the C functions take it (a pointer to the
    struct): only the methods it has are wired, so SocketKit does not call into Python for
    events nobody listens to. Accepting always is (a listener without ``socket_did_accept``
    closes its connections). None (NULL) for no delegate: SocketKit then has none either,
    so connecting and accepting raise BadConfigError as in C and Swift (a struct of our own
    would count as a delegate)."""
    if delegate is None:
        return None  # NULL
    struct_ = _ffi.SocketDelegate()
    for method, member in _DELEGATE_METHODS.items():
        if getattr(delegate, method, None) is not None:
            setattr(struct_, member, _TRAMPOLINES[member])
    # These keep internal state right whatever the delegate implements.
    struct_.did_read = _TRAMPOLINES["did_read"]
    struct_.did_disconnect = _TRAMPOLINES["did_disconnect"]
    return byref(struct_)


class Socket(_SocketBase):
    """An asynchronous TCP or Unix-domain socket (GCDAsyncSocket's model).

    ``delegate`` is any object; SocketKit calls the methods it defines, named after the
    C delegate members: ``socket_did_connect(sock, host, port)``,
    ``socket_did_read(sock, data, tag)``, ``socket_did_write(sock, tag)``,
    ``socket_did_disconnect(sock, error)``, ``socket_did_accept(listener, new_sock)``, ...
    and for TLS (:meth:`start_tls`) ``socket_did_secure(sock)`` and, with manual trust
    evaluation, ``socket_did_receive_trust(sock, trust)`` (see :class:`TLSTrust`).
    They run on ``queue``: by default a SocketKit thread shared by all sockets
    (:func:`default_queue`); a :class:`HostQueue` to run them yourself (see
    :mod:`socketkit.aio` for asyncio); ``None`` for SocketKit's loop thread.

    Without a delegate (None) a socket cannot connect or accept: those raise
    :class:`BadConfigError`, as in C and Swift; set :attr:`delegate` first.

    Keep a reference: a socket nobody holds is aborted (queued writes dropped, as
    :meth:`abort`). Use it as a context manager, or call :meth:`close` (queued writes are
    still sent); afterwards every method raises :class:`InvalidHandleError`.

    The socket's loop is the only writer of its state: a method that changes it waits for
    the loop to make the change and returns its answer (inline on the loop's thread), so the
    effect is visible on return: the connects return connecting (a read queued next is
    taken), :meth:`accept_on_port` and its twins return listening, :meth:`from_fd` returns
    connected, the disconnects and the option setters return done; :meth:`disconnect`,
    :meth:`close` and :meth:`abort` of a listener return with its descriptors closed and its
    Unix-domain socket file removed (a new listener can take the port or path at once); and
    so does every :class:`UdpSocket` method but the sends and getters. Reads, writes,
    :meth:`start_tls` and sends are queued without waiting, and what follows comes to the
    delegate; getters read what the loop last published. Setting :attr:`delegate` and
    closing wait for a delegate method running on another thread. None of these waits can
    deadlock, whichever thread or delegate method calls them: when the thread waited for is
    itself waiting for the caller, a wait for a running delegate method gives way (the
    setter returns while that method may still be finishing); only when two loops' delegate
    methods call each other's sockets at the same moment does a call not wait: it raises
    BadConfigError (errno EDEADLK) with no effect, or, when it returns nothing, is queued.
    """

    def __init__(self, delegate: Any = None, *, queue: Optional[CallbackQueue] = _UNSET,
                 loop_group: Optional[LoopGroup] = None) -> None:
        self._init_common(delegate, default_queue() if queue is _UNSET else queue)
        handle = c_void_p()
        error = _ffi.CError()
        struct_ = _delegate_struct(delegate)
        _raise_for(lib.sk_socket_create(struct_, _DELEGATE_SIZE, None, self._queue_handle,
                                        loop_group.handle if loop_group is not None else None,
                                        byref(handle), byref(error)), error)
        self._register(handle.value)

    def _init_common(self, delegate: Any, queue: Optional[CallbackQueue]) -> None:
        self._handle: Optional[int] = None
        self._c_handle: Optional[c_void_p] = None
        self._delegate = delegate
        self._queue = queue
        # Caller buffers of pending *_into reads: (start address, end address, view, session).
        # The view keeps the buffer exported (unmovable) until SocketKit is done with it: its
        # read completed, its session ended (did_disconnect), or the socket was released.
        # A shared empty tuple until a caller buffer is pinned: most sockets never pin one.
        self._pending_buffers: Union[Tuple[()], List[Tuple[int, int, memoryview, int]]] = ()
        # Sessions (connect, accept, adopt) started and ended: each ends with exactly one
        # did_disconnect, in order, so a late did_disconnect unpins only its own session's buffers.
        self._sessions_started = 0
        self._sessions_ended = 0
        self.user_data: Any = None

    def _register(self, handle: int) -> None:
        self._handle = handle
        # Through ctypes, passed as a c_void_p: ctypes then skips converting the integer each
        # time. The C extension keeps the pointer itself: the int (no object per socket).
        self._c_handle = handle if _speedups is not None else c_void_p(handle)
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
        self._pending_buffers = [pin for pin in self._pending_buffers if pin[3] > ended] or ()

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
                fd, struct_, _DELEGATE_SIZE, token, sock._queue_handle,
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
        closes (as asyncio's ``transport.close()`` does), for at most two minutes, also when
        the socket is still connecting: it goes on connecting (within its connect timeout)
        and through a queued :meth:`start_tls` handshake. Queued reads are dropped (except
        those ahead of such a handshake, which waits for them). A listener's descriptors are
        closed before this returns. No delegate method runs after this returns (one running
        on another thread is waited for, unless that would deadlock). Idempotent."""
        if self._handle is not None:
            lib.sk_socket_disconnect_after_writing(self._handle)
        self._release()

    def abort(self) -> None:
        """Releases the socket and closes the connection at once, dropping queued writes."""
        self._release()

    def _release(self) -> None:
        handle, self._handle = self._handle, None
        self._c_handle = None
        if handle is not None:
            _sockets.pop(handle, None)
            lib.sk_socket_release(handle)
            self._pending_buffers = ()

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
        """Replaces the delegate, synchronously: once set, no method of the old one runs
        (one running on another thread is waited for, unless that would deadlock: see
        :class:`Socket`)."""
        struct_ = _delegate_struct(delegate)
        _raise_for(lib.sk_socket_set_delegate(self.handle, struct_, _DELEGATE_SIZE, None))
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
        """When the peer closes its side: True (default) ends the connection
        (``socket_did_disconnect`` with :class:`ClosedError`), False keeps it open for
        writing and calls ``socket_did_close_read_stream``; either once every byte that
        arrived before the close has been read (at once when none is unread, whether or not
        a read is queued). A reset is reported the same way, as
        :class:`ConnectionResetError`, after the bytes that came before it."""
        return self._flag(lib.sk_socket_get_auto_disconnect_on_closed_read_stream)

    @auto_disconnect_on_closed_read_stream.setter
    def auto_disconnect_on_closed_read_stream(self, enabled: bool) -> None:
        _raise_for(lib.sk_socket_set_auto_disconnect_on_closed_read_stream(self.handle, int(bool(enabled))))

    @property
    def maximum_read_length(self) -> int:
        """The most bytes a read may gather in SocketKit's memory (default 16 MiB; at least 1,
        BadParamError otherwise): a read to a separator without ``max_length`` ends the
        connection with ReadMaxedOutError once it holds that many bytes without the
        separator, and ``read_to_length`` above it raises BadParamError at once. Reads into
        your buffer (``*_into``) are bounded by the buffer instead. GCDAsyncSocket has no
        such limit; SocketKit has one because a read's length usually comes from the peer (a
        length prefix): without it, a peer announcing 4 GiB makes the process hold 4 GiB
        before the application sees any of it. Raise it for bigger messages, or read them
        into a buffer of your own."""
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
    def maximum_queued_write_bytes(self) -> int:
        """The most bytes the write queue may hold: written, and not yet taken by the kernel
        (64 MiB by default; 0: no limit). A write that would take the queue above it raises
        :class:`WriteQueueFullError` and queues nothing, so a peer that stops reading cannot
        make the socket's memory grow without bound, even when the watermarks are ignored
        (heed them first: stop writing, or reading what you echo, at the high one). A single
        write larger than the maximum always raises."""
        value = c_size_t()
        _raise_for(lib.sk_socket_get_maximum_queued_write_bytes(self.handle, byref(value)))
        return value.value

    @maximum_queued_write_bytes.setter
    def maximum_queued_write_bytes(self, maximum: int) -> None:
        _raise_for(lib.sk_socket_set_maximum_queued_write_bytes(self.handle, _size(maximum, "maximum")))

    @property
    def no_delay(self) -> bool:
        """TCP_NODELAY: small writes leave at once instead of waiting under Nagle's
        algorithm for earlier data to be acknowledged. True by default, as asyncio sets it
        on every TCP transport: SocketKit already sends what is queued together, and Nagle
        costs a delayed-ACK wait (40 ms on Linux) whenever a message leaves in two sends
        the peer does not answer in between (a response behind a TLS server's session
        tickets). Accepted sockets take the listener's setting."""
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
        _raise_for(lib.sk_socket_accept_on_interface(self.handle, _interface(interface),
                                                     _port(port), byref(error)), error)
        self._sessions_started += 1

    def accept_on_unix_path(self, path: str) -> None:
        """Listens on a Unix-domain socket (a stale socket file there is replaced). The file
        is removed when the listener closes, unless a newer listener replaced it."""
        error = _ffi.CError()
        _raise_for(lib.sk_socket_accept_on_unix_path(self.handle, _unix_path(path), byref(error)), error)
        self._sessions_started += 1

    def connect_to_host(self, host: str, port: int, interface: Optional[str] = None, timeout: float = -1) -> None:
        """Connects to a host name or address (every resolved address is raced, Happy
        Eyeballs). `timeout` covers resolution and connecting (negative: none); with 0 the
        connect succeeds only if it completes at once (by the loop's next poll), so a name
        that needs the resolver always ends with ConnectTimeoutError. Reads and writes may
        be queued at once. The outcome arrives as ``socket_did_connect`` or
        ``socket_did_disconnect`` (OtherError when no resolved address is of an enabled
        family)."""
        error = _ffi.CError()
        _raise_for(lib.sk_socket_connect_to_host(self.handle, _host(host), _port(port),
                                                 _interface(interface), float(timeout),
                                                 byref(error)), error)
        self._sessions_started += 1

    def connect_to_address(self, address: Address, interface: Optional[str] = None, timeout: float = -1) -> None:
        """Connects to ("ip", port) or a Unix path, without name resolution."""
        raw = _sockaddr(address)
        error = _ffi.CError()
        _raise_for(lib.sk_socket_connect_to_address(self.handle, raw, len(raw),
                                                    _interface(interface), float(timeout),
                                                    byref(error)), error)
        self._sessions_started += 1

    def connect_to_unix_path(self, path: str, timeout: float = -1) -> None:
        """Connects to a Unix-domain socket."""
        error = _ffi.CError()
        _raise_for(lib.sk_socket_connect_to_unix_path(self.handle, _unix_path(path), float(timeout), byref(error)),
                   error)
        self._sessions_started += 1

    # ---- reading ---------------------------------------------------------------------------

    def _read_py(self, max_length: int = 0, timeout: float = -1, tag: int = 0) -> None:
        """Reads whatever is available (at least one byte, at most `max_length` if not 0).
        ``socket_did_read(sock, data, tag)`` receives ``bytes``."""
        handle = self._c_handle
        if handle is None:
            raise InvalidHandleError("the socket is closed", -11)
        errors = _thread_errors
        status = lib.sk_socket_read(handle, _size(max_length, "max_length") if max_length else _ZERO_SIZE,
                                    _NO_TIMEOUT if timeout == -1 else float(timeout), _ZERO_TAG if tag == 0 else tag,
                                    errors.pointer)
        if status < 0:
            _raise_for(status, errors.error)

    def read_to_length(self, length: int, timeout: float = -1, tag: int = 0) -> None:
        """Reads exactly `length` bytes (1 to :attr:`maximum_read_length`; BadParamError
        otherwise: see there why, and use :meth:`read_to_length_into` for more)."""
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
        if not self._pending_buffers:
            self._pending_buffers = []
        self._pending_buffers.append((address, address + capacity, view, self._sessions_started))

    def _take_read_result(self, data: int, length: int) -> Union[bytes, memoryview]:
        for index, (start, end, view, _) in enumerate(self._pending_buffers):
            if start <= data < end:
                del self._pending_buffers[index]  # a list: something was pinned
                offset = data - start
                return view[offset:offset + length]
        # A third of ctypes.string_at's cost (that one is itself a foreign call).
        return (ctypes.c_char * length).from_address(data).raw if length else b""

    @property
    def read_progress(self) -> Optional[Progress]:
        """The current read's progress, or None when no read is under way."""
        return self._progress(lib.sk_socket_read_progress)

    # ---- writing ---------------------------------------------------------------------------

    def _write_py(self, data: BytesLike, timeout: float = -1, tag: int = 0) -> None:
        """Queues `data` (any bytes-like object); ``socket_did_write(sock, tag)`` follows once
        the kernel accepted it all. Large ``bytes`` objects (immutable) are sent without a
        copy and kept alive until SocketKit is done with them; anything else is copied.
        Raises :class:`WriteQueueFullError` (nothing queued) when the write would take the
        queue above :attr:`maximum_queued_write_bytes`."""
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
        handle = self._c_handle
        if handle is None:
            raise InvalidHandleError("the socket is closed", -11)
        errors = _thread_errors
        # SocketKit copies the bytes before the call returns. Default arguments go as prebuilt
        # ctypes values (converting Python numbers costs more than the call).
        status = lib.sk_socket_write(handle, source, length, _NO_TIMEOUT if timeout == -1 else float(timeout),
                                     _ZERO_TAG if tag == 0 else tag, errors.pointer)
        if status < 0:
            _raise_for(status, errors.error)

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
        socket may connect or accept again. A listener returns with its descriptors closed
        and its Unix-domain socket file removed: a new listener can take the port or path
        at once."""
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

    # ---- TLS -------------------------------------------------------------------------------

    def start_tls(self, settings: Optional[TLSSettings] = None) -> None:
        """Queues the TLS handshake behind every read and write already queued (the
        STARTTLS pattern: those run in plaintext; the ones queued afterwards run encrypted
        once ``socket_did_secure(sock)`` was called). `settings` None: a client with the
        defaults (system trust store, the connect host verified).

        Raises at once TLSSettingsError (unusable settings: files are loaded now),
        BadConfigError (not connecting or connected, a listener, after disconnect_after_*,
        or TLS already started in this session). Handshake failures end the connection:
        ``socket_did_disconnect`` gets the TLSError subclass that says why.

        With ``manual_trust_evaluation``, ``socket_did_receive_trust(sock, trust)`` decides
        (see :class:`TLSTrust`); a delegate without that method rejects every peer."""
        handle = self.handle
        error = _ffi.CError()
        if settings is None:
            _raise_for(lib.sk_socket_start_tls(handle, None, byref(error)), error)
            return
        if not isinstance(settings, TLSSettings):
            raise TypeError(f"settings must be socketkit.TLSSettings or None, not {type(settings).__name__}")
        with settings._c_settings() as c_settings:
            _raise_for(lib.sk_socket_start_tls(handle, c_settings, byref(error)), error)

    @property
    def is_secure(self) -> bool:
        """True once the handshake finished (and manual trust, if any, said yes)."""
        return self._flag(lib.sk_socket_is_secure)

    @property
    def tls_info(self) -> Optional[TLSInfo]:
        """What the handshake settled (protocol, cipher, ALPN, SNI, resumption, the peer's
        certificates), or None while the connection is not secure. The session can end at
        any moment (even while ``socket_did_secure`` runs): then this is None, never an
        error, and never a mix of two sessions."""
        return _tls_info(self.handle)

    # ---- advanced ------------------------------------------------------------------------

    def perform(self, function: Callable[[Descriptors], None]) -> None:
        """Runs `function(descriptors)` on the socket's loop thread (e.g. for setsockopt).
        It runs as a delegate method does: methods it causes are called after it, and a
        disconnect it makes takes effect once it returns. Called on the loop thread (from a
        delegate method with ``queue=None``), it runs before ``perform`` returns."""
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
# Through ctypes lending costs a token, a lock and a ctypes callback: worth it from 64 KiB.
# The C extension lends with a reference count and a C release function, cheaper than
# copying from 16 KiB (a stream echo's writes are chunks of up to 256 KiB, most of them
# queued behind the previous one and so copied whole when not lent).
_NO_COPY_THRESHOLD = 64 * 1024
_SPEEDUPS_NO_COPY_THRESHOLD = 16 * 1024
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


# --------------------------------------------------------------------------------------
# UDP sockets
# --------------------------------------------------------------------------------------

#: An IPv4 or IPv6 peer: ("address", port). IPv6 link-local hosts carry their scope
#: ("fe80::1%eth0").
IPAddress = Tuple[str, int]


class AddressPreference(enum.IntEnum):
    """Which of a host name's addresses a :class:`UdpSocket` uses (sk_udp_address_preference)."""

    NEUTRAL = _ffi.UDP_PREFER_NEUTRAL  #: the resolver's first address (default)
    IPV4 = _ffi.UDP_PREFER_IPV4
    IPV6 = _ffi.UDP_PREFER_IPV6


# Delegate method name -> sk_udp_socket_delegate_t member.
_UDP_DELEGATE_METHODS = {
    "udp_socket_did_connect": "did_connect",
    "udp_socket_did_not_connect": "did_not_connect",
    "udp_socket_did_send": "did_send",
    "udp_socket_did_not_send": "did_not_send",
    "udp_socket_did_receive": "did_receive",
    "udp_socket_did_receive_error": "did_receive_error",
    "udp_socket_did_close": "did_close",
}

# Live UDP sockets by handle, held weakly, as _sockets.
_udp_sockets = _WeakTable()
_udp_socket_refs = _udp_sockets._refs  # read directly by the C hot path

_AF_INET = _stdlib_socket.AF_INET
_AF_INET6 = _stdlib_socket.AF_INET6
_unpack_family = struct.Struct("=H").unpack_from
_unpack_port = struct.Struct("!H").unpack_from
_unpack_scope = struct.Struct("=I").unpack_from


def _ip_address_from_sockaddr(raw: bytes) -> Optional[IPAddress]:
    """("host", port) of a sockaddr_in / sockaddr_in6, as sk_address_get_host writes it (IPv6
    scope as "%name", or "%index" for an interface that no longer exists); None otherwise."""
    # The library's rule for address lengths: at least the family's struct, at most a
    # sockaddr_storage (the bytes beyond the struct are ignored).
    if not 4 <= len(raw) <= 128:
        return None
    family = _unpack_family(raw)[0]
    if family == _AF_INET and len(raw) >= 16:
        return (_stdlib_socket.inet_ntop(_AF_INET, raw[4:8]), _unpack_port(raw, 2)[0])
    if family == _AF_INET6 and len(raw) >= 28:
        host = _stdlib_socket.inet_ntop(_AF_INET6, raw[8:24])
        scope = _unpack_scope(raw, 24)[0]
        if scope:
            try:
                host += "%" + _stdlib_socket.if_indextoname(scope)
            except OSError:
                host += f"%{scope}"
        return (host, _unpack_port(raw, 2)[0])
    return None


def _ip_address_at(pointer: Optional[int], length: int) -> Optional[IPAddress]:
    if not pointer or length <= 0:
        return None
    return _ip_address_from_sockaddr(ctypes.string_at(pointer, length))


# Recent (host, port) <-> sockaddr conversions: a UDP server answers the same peers again
# and again. Bounded; cleared when full.
_sockaddr_by_address: Dict[Any, bytes] = {}
_address_by_sockaddr: Dict[bytes, IPAddress] = {}
_ADDRESS_CACHE_LIMIT = 4096


def _ip_sockaddr(address: Any) -> bytes:
    """The C sockaddr for ("ip", port) or ("ip6", port, flowinfo, scope_id) (as Python's
    socket module gives them). Host names are refused: use the *_to_host methods."""
    try:
        cached = _sockaddr_by_address.get(address)
    except TypeError:  # unhashable: not a valid address either; the checks below say why
        cached = None
    if cached is not None:
        return cached
    raw = _ip_sockaddr_uncached(address)
    if len(_sockaddr_by_address) >= _ADDRESS_CACHE_LIMIT:
        _sockaddr_by_address.clear()
    _sockaddr_by_address[address] = raw
    return raw


def _ip_sockaddr_uncached(address: Any) -> bytes:
    try:
        if not isinstance(address, tuple) or len(address) not in (2, 4):
            raise TypeError("expected (host, port)")
        host, port = address[0], _port(address[1])
        if not isinstance(host, str):
            raise TypeError("host must be a str")
        if len(address) == 4 and address[3] and "%" not in host and ":" in host:
            host = f"{host}%{int(address[3])}"
        return _sockaddr((host, port))
    except Error:
        raise
    except (OSError, TypeError, ValueError) as problem:
        raise error_from_code(-2, 0, f"not a numeric IPv4 or IPv6 address with a port: {address!r} ({problem})"
                              ) from None


def _udp_socket_for(handle: Optional[int]) -> Optional["UdpSocket"]:
    if _shutting_down or not handle:
        return None
    return _udp_sockets.get(handle)


# Handlers shared by the C trampolines and the record dispatcher.

def _on_udp_simple(handle, name, *arguments):
    sock = _udp_socket_for(handle)
    if sock is not None:
        _invoke(sock, name, *arguments)


def _on_udp_receive(handle, data: bytes, address: Optional[IPAddress], context: Optional[int]):
    sock = _udp_socket_for(handle)
    if sock is None:
        return
    value = sock._contexts.pop(context, None) if context else None
    _invoke(sock, "udp_socket_did_receive", data, address, value)


def _udp_record_address(host: int, port: int, raw_address: int, raw_length: int) -> IPAddress:
    """The (host, port) of a receive record: from the cache by the raw sockaddr (a copy of
    a few bytes) instead of decoding the host text each time."""
    key = (ctypes.c_char * raw_length).from_address(raw_address).raw if raw_address and raw_length else None
    if key is not None:
        cached = _address_by_sockaddr.get(key)
        if cached is not None:
            return cached
    address = (ctypes.string_at(host).decode("utf-8", "replace"), port)
    if key is not None:
        if len(_address_by_sockaddr) >= _ADDRESS_CACHE_LIMIT:
            _address_by_sockaddr.clear()
        _address_by_sockaddr[key] = address
    return address


@_ffi.UDP_DID_CONNECT
def _udp_did_connect(handle, address, length, userdata):
    _on_udp_simple(handle, "udp_socket_did_connect", _ip_address_at(address, length))


@_ffi.UDP_DID_NOT_CONNECT
def _udp_did_not_connect(handle, error, userdata):
    _on_udp_simple(handle, "udp_socket_did_not_connect", _error_from_c(error))


@_ffi.UDP_DID_SEND
def _udp_did_send(handle, tag, userdata):
    _on_udp_simple(handle, "udp_socket_did_send", tag)


@_ffi.UDP_DID_NOT_SEND
def _udp_did_not_send(handle, tag, error, userdata):
    _on_udp_simple(handle, "udp_socket_did_not_send", tag, _error_from_c(error))


def _udp_did_receive_py(handle, data, length, address, address_length, context, userdata):
    _on_udp_receive(handle, ctypes.string_at(data, length) if length else b"",
                    _ip_address_at(address, address_length), context)


_udp_did_receive = _ffi.UDP_DID_RECEIVE(_udp_did_receive_py)


def _udp_address_for_sockaddr(raw: Optional[bytes]) -> Optional[IPAddress]:
    """The (host, port) of a received datagram's sockaddr, cached (the C callback's path)."""
    if not raw:
        return None
    address = _ip_address_from_sockaddr(raw)
    if address is not None:
        if len(_address_by_sockaddr) >= _ADDRESS_CACHE_LIMIT:
            _address_by_sockaddr.clear()
        _address_by_sockaddr[raw] = address
    return address


@_ffi.UDP_DID_RECEIVE_ERROR
def _udp_did_receive_error(handle, error, userdata):
    _on_udp_simple(handle, "udp_socket_did_receive_error", _error_from_c(error))


@_ffi.UDP_DID_CLOSE
def _udp_did_close(handle, error, userdata):
    _on_udp_simple(handle, "udp_socket_did_close", _error_from_c(error))


_UDP_TRAMPOLINES = {
    "did_connect": _udp_did_connect,
    "did_not_connect": _udp_did_not_connect,
    "did_send": _udp_did_send,
    "did_not_send": _udp_did_not_send,
    "did_receive": _udp_did_receive,
    "did_receive_error": _udp_did_receive_error,
    "did_close": _udp_did_close,
}


def _udp_delegate_struct(delegate: Any) -> _ffi.UdpSocketDelegate:
    """The C delegate for a Python delegate: only the methods it has are wired, plus
    did_receive always (it hands back, and so frees, the receive filter's contexts)."""
    struct_ = _ffi.UdpSocketDelegate()
    for method, member in _UDP_DELEGATE_METHODS.items():
        if delegate is not None and getattr(delegate, method, None) is not None:
            setattr(struct_, member, _UDP_TRAMPOLINES[member])
    struct_.did_receive = _UDP_TRAMPOLINES["did_receive"]
    return struct_


# The UDP sockets whose filter is running on this thread (innermost last). SocketKit holds
# a lock of the socket around each filter call that sk_udp_socket_release takes as well, so
# a release from inside a filter (explicit, or by the garbage collector) is handed to
# another thread instead of deadlocking.
_filter_calls = threading.local()


def _filters_running() -> List[int]:
    running = getattr(_filter_calls, "handles", None)
    if running is None:
        running = _filter_calls.handles = []
    return running


def _release_udp_handle(handle: int) -> None:
    if handle in _filters_running():
        try:
            threading.Thread(target=lib.sk_udp_socket_release, args=(handle,), name="socketkit-udp-release",
                             daemon=True).start()
            return
        except RuntimeError:  # pragma: no cover - interpreter shutdown: no threads any more
            return
    lib.sk_udp_socket_release(handle)


@_ffi.UDP_RECEIVE_FILTER
def _udp_receive_filter(handle, data, length, address, address_length, out_context, userdata):
    sock = _udp_socket_for(handle)
    function = sock._receive_filter if sock is not None else None
    if function is None:
        return 1  # removed meanwhile (or shutting down): no filter
    running = _filters_running()
    running.append(handle)
    verdict: Any = None
    context: Any = None
    try:
        verdict = function(ctypes.string_at(data, length) if length else b"", _ip_address_at(address, address_length))
        if isinstance(verdict, tuple):
            verdict, context = verdict
        if not verdict:
            return 0
        if context is not None and out_context:
            token = next(_next_token)
            sock._contexts[token] = context
            out_context[0] = token
        return 1
    except BaseException:
        _report_unraisable("Exception ignored in socketkit UDP receive filter (the datagram is dropped)", function)
        return 0
    finally:
        # Dropped while still marked as inside the filter (see _release_udp_handle).
        sock = function = verdict = context = None
        running.pop()


@_ffi.UDP_SEND_FILTER
def _udp_send_filter(handle, data, length, address, address_length, tag, userdata):
    sock = _udp_socket_for(handle)
    function = sock._send_filter if sock is not None else None
    if function is None:
        return 1
    running = _filters_running()
    running.append(handle)
    try:
        send = function(ctypes.string_at(data, length) if length else b"", _ip_address_at(address, address_length),
                        tag)
        return 1 if send else 0
    except BaseException:
        _report_unraisable("Exception ignored in socketkit UDP send filter (the datagram is dropped)", function)
        return 0
    finally:
        sock = function = send = None
        running.pop()


#: A receive filter: ``filter(data, address)`` returns whether to keep the datagram, or
#: ``(keep, context)`` to hand `context` to ``udp_socket_did_receive``.
ReceiveFilter = Callable[[bytes, Optional[IPAddress]], Union[bool, Tuple[bool, Any]]]
#: A send filter: ``filter(data, address, tag)`` returns whether to send the datagram.
SendFilter = Callable[[bytes, Optional[IPAddress], int], bool]


def _send_source(data: BytesLike) -> Tuple[Any, int]:
    """What to pass as `data` (SocketKit copies it during the call) and its length."""
    if isinstance(data, bytes):
        return (data if data else None), len(data)
    view = memoryview(data)
    length = view.nbytes
    if length == 0:
        return None, 0
    if view.readonly or not view.c_contiguous:
        return view.tobytes(), length
    return (ctypes.c_char * length).from_buffer(view.cast("B")), length


class UdpSocket(_UdpSocketBase):
    """An asynchronous UDP socket (GCDAsyncUdpSocket's model).

    Datagrams are queued with tags and timeouts and answered by the delegate; receiving is
    off until :meth:`receive_once` or :meth:`begin_receiving`. Descriptors (one per address
    family) are made by the first bind, connect or send. Addresses are ``("ip", port)``
    tuples, IPv4 or IPv6.

    ``delegate`` is any object; SocketKit calls the methods it defines:

    - ``udp_socket_did_connect(sock, address)`` / ``udp_socket_did_not_connect(sock, error)``
    - ``udp_socket_did_send(sock, tag)`` / ``udp_socket_did_not_send(sock, tag, error)``
      (a datagram that cannot be sent fails alone: the socket stays open)
    - ``udp_socket_did_receive(sock, data, address, context)``: `data` is ``bytes``
      (possibly empty), `context` what the receive filter attached (else None)
    - ``udp_socket_did_receive_error(sock, error)``: an ICMP error about an earlier
      datagram, or :class:`~socketkit.TruncatedError` for one larger than the receive limit
    - ``udp_socket_did_close(sock, error)``: last; `error` None after :meth:`close`

    They run on ``queue``, as for :class:`Socket`: by default :func:`default_queue`; a
    :class:`HostQueue` to run them yourself (:mod:`socketkit.aio` for asyncio); ``None`` for
    SocketKit's loop thread. An exception raised by one goes to :func:`sys.unraisablehook`.

    Keep a reference: a socket nobody holds is released (closed without callbacks). Use it
    as a context manager or call :meth:`release`; afterwards every method raises
    :class:`InvalidHandleError`. :meth:`close` only closes: the socket can be used again.

    Sends and getters return at once; every other method waits for the socket's loop and
    returns its answer (bound after :meth:`bind_to_port`, closed after :meth:`close`),
    without ever deadlocking (see :class:`Socket` for the rule).
    """

    def __init__(self, delegate: Any = None, *, queue: Optional[CallbackQueue] = _UNSET,
                 loop_group: Optional[LoopGroup] = None) -> None:
        self._handle: Optional[int] = None
        self._c_handle: Optional[c_void_p] = None
        self._delegate = delegate
        self._queue = default_queue() if queue is _UNSET else queue
        # Receive-filter contexts waiting for their did_receive, by the token given to C.
        self._contexts: Dict[int, Any] = {}
        self._send_filter: Optional[SendFilter] = None
        self._receive_filter: Optional[ReceiveFilter] = None
        # Queues the filters run on (held so a HostQueue is not collected under them).
        self._filter_queues: Dict[str, Optional[CallbackQueue]] = {}
        self.user_data: Any = None
        handle = c_void_p()
        error = _ffi.CError()
        struct_ = _udp_delegate_struct(delegate)
        _raise_for(lib.sk_udp_socket_create(byref(struct_), ctypes.sizeof(struct_), None, self._queue_handle,
                                            loop_group.handle if loop_group is not None else None,
                                            byref(handle), byref(error)), error)
        self._handle = handle.value
        self._c_handle: Any = handle.value if _speedups is not None else c_void_p(handle.value)
        _udp_sockets[handle.value] = self

    # ---- lifetime ------------------------------------------------------------------------

    @property
    def handle(self) -> int:
        """The C handle (an integer), for use with the C API directly."""
        if self._handle is None:
            raise InvalidHandleError("the UDP socket is released", -11)
        return self._handle

    @property
    def _queue_handle(self) -> Optional[int]:
        return self._queue.handle if self._queue is not None else None

    def release(self) -> None:
        """Releases the socket: it closes without callbacks (no ``udp_socket_did_close``),
        and no delegate method or filter of it starts once this returns (one running on
        another thread is waited for). Idempotent. Called from inside one of the socket's
        own filters, the release completes on another thread once the filter returns."""
        handle, self._handle = self._handle, None
        self._c_handle = None
        if handle is not None:
            _udp_sockets.pop(handle, None)
            _release_udp_handle(handle)
            self._contexts.clear()

    def __enter__(self) -> "UdpSocket":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()

    def __del__(self) -> None:
        try:
            self.release()
        except Exception:  # pragma: no cover - interpreter shutdown
            pass

    def __repr__(self) -> str:
        if self._handle is None:
            return "<socketkit.UdpSocket released>"
        if self.is_closed:
            state = "closed"
        elif self.is_connected:
            state = f"connected to {self.connected_address}"
        else:
            state = f"bound to {self.local_address}"
        return f"<socketkit.UdpSocket {state} handle={self._handle:#x}>"

    @property
    def delegate(self) -> Any:
        return self._delegate

    @delegate.setter
    def delegate(self, delegate: Any) -> None:
        """Replaces the delegate, synchronously: once set, no method of the old one runs
        (one running on another thread is waited for, unless that would deadlock: see
        :class:`Socket`)."""
        struct_ = _udp_delegate_struct(delegate)
        _raise_for(lib.sk_udp_socket_set_delegate(self.handle, byref(struct_), ctypes.sizeof(struct_), None))
        self._delegate = delegate

    @property
    def queue(self) -> Optional[CallbackQueue]:
        return self._queue

    @queue.setter
    def queue(self, queue: Optional[CallbackQueue]) -> None:
        """Moves callbacks to another queue (None: SocketKit's loop thread), keeping order."""
        _raise_for(lib.sk_udp_socket_set_callback_queue(self.handle, queue.handle if queue is not None else None))
        self._queue = queue

    # ---- configuration -------------------------------------------------------------------

    def _flag(self, getter: Callable[[int], int]) -> bool:
        return bool(_raise_for(getter(self.handle)))

    @property
    def ipv4_enabled(self) -> bool:
        """Whether IPv4 is used (default True). Set before the first bind, connect or send."""
        return self._flag(lib.sk_udp_socket_is_ipv4_enabled)

    @ipv4_enabled.setter
    def ipv4_enabled(self, enabled: bool) -> None:
        _raise_for(lib.sk_udp_socket_set_ipv4_enabled(self.handle, int(bool(enabled))))

    @property
    def ipv6_enabled(self) -> bool:
        """Whether IPv6 is used (default True). Set before the first bind, connect or send."""
        return self._flag(lib.sk_udp_socket_is_ipv6_enabled)

    @ipv6_enabled.setter
    def ipv6_enabled(self, enabled: bool) -> None:
        _raise_for(lib.sk_udp_socket_set_ipv6_enabled(self.handle, int(bool(enabled))))

    @property
    def address_preference(self) -> AddressPreference:
        """Which resolved address of a host name sends and connects use."""
        return AddressPreference(_raise_for(lib.sk_udp_socket_get_address_preference(self.handle)))

    @address_preference.setter
    def address_preference(self, preference: Union[AddressPreference, int]) -> None:
        _raise_for(lib.sk_udp_socket_set_address_preference(self.handle, _int(preference)))

    @property
    def max_receive_sizes(self) -> Tuple[int, int]:
        """(IPv4, IPv6): the largest datagram delivered per family (1...65535, 65535 by
        default); larger ones are dropped and reported as TruncatedError."""
        ipv4, ipv6 = c_size_t(), c_size_t()
        _raise_for(lib.sk_udp_socket_get_max_receive_sizes(self.handle, byref(ipv4), byref(ipv6)))
        return (ipv4.value, ipv6.value)

    @max_receive_sizes.setter
    def max_receive_sizes(self, sizes: Tuple[int, int]) -> None:
        ipv4, ipv6 = sizes
        error = _ffi.CError()
        _raise_for(lib.sk_udp_socket_set_max_receive_sizes(self.handle, _size(ipv4, "ipv4_size"),
                                                           _size(ipv6, "ipv6_size"), byref(error)), error)

    @property
    def buffer_sizes(self) -> Tuple[int, int]:
        """(send, receive) sizes requested with SO_SNDBUF/SO_RCVBUF when descriptors are
        made; 0 = the kernel's default."""
        send, receive = c_int(), c_int()
        _raise_for(lib.sk_udp_socket_get_buffer_sizes(self.handle, byref(send), byref(receive)))
        return (send.value, receive.value)

    @buffer_sizes.setter
    def buffer_sizes(self, sizes: Tuple[int, int]) -> None:
        send, receive = sizes
        error = _ffi.CError()
        _raise_for(lib.sk_udp_socket_set_buffer_sizes(self.handle, _int(send), _int(receive), byref(error)), error)

    # ---- binding and connecting ---------------------------------------------------------

    def bind_to_port(self, port: int = 0, interface: Optional[str] = None) -> None:
        """Binds every enabled family on `interface` (None: any; "localhost"; a name such as
        "lo"; an IP address) to `port` (0: one free port for both families). Raises
        SystemCallError (EADDRINUSE, EACCES), BadParamError (unknown interface),
        BadConfigError (bound already, or after a connect or send)."""
        error = _ffi.CError()
        _raise_for(lib.sk_udp_socket_bind_to_port(self.handle, _interface(interface),
                                                  _port(port), byref(error)), error)

    def bind_to_address(self, address: IPAddress) -> None:
        """Binds the address's family only, to ("ip", port); the other family is given up."""
        raw = _ip_sockaddr(address)
        error = _ffi.CError()
        _raise_for(lib.sk_udp_socket_bind_to_address(self.handle, raw, len(raw), byref(error)), error)

    def connect_to_host(self, host: str, port: int) -> None:
        """Connects (queued behind earlier sends; the name is resolved off the loop): only
        that peer can then send to the socket. ``udp_socket_did_connect(sock, address)`` or
        ``udp_socket_did_not_connect(sock, error)`` follows."""
        error = _ffi.CError()
        _raise_for(lib.sk_udp_socket_connect_to_host(self.handle, _host(host), _port(port), byref(error)), error)

    def connect_to_address(self, address: IPAddress) -> None:
        """Connects to ("ip", port), without name resolution."""
        raw = _ip_sockaddr(address)
        error = _ffi.CError()
        _raise_for(lib.sk_udp_socket_connect_to_address(self.handle, raw, len(raw), byref(error)), error)

    # ---- sending ---------------------------------------------------------------------------

    def send(self, data: BytesLike, timeout: float = -1, tag: int = 0) -> None:
        """Queues a datagram (copied; 0...65535 bytes) to the connected peer.
        ``udp_socket_did_send(sock, tag)`` or ``udp_socket_did_not_send(sock, tag, error)``
        follows. `timeout` (seconds, negative: none) counts from when the datagram reaches
        the head of the queue."""
        source, length = _send_source(data)
        error = _ffi.CError()
        _raise_for(lib.sk_udp_socket_send(self.handle, source, length, float(timeout), tag, byref(error)), error)

    def send_to_host(self, data: BytesLike, host: str, port: int, timeout: float = -1, tag: int = 0) -> None:
        """Queues a datagram to `host` (resolved off the loop: a name that does not resolve
        comes back as ``udp_socket_did_not_send`` with ResolutionError)."""
        source, length = _send_source(data)
        error = _ffi.CError()
        _raise_for(lib.sk_udp_socket_send_to_host(self.handle, source, length, _host(host), _port(port), float(timeout),
                                                  tag, byref(error)), error)

    def _send_to_address_py(self, data: BytesLike, address: IPAddress, timeout: float = -1, tag: int = 0) -> None:
        """Queues a datagram to ("ip", port)."""
        raw = _ip_sockaddr(address)
        source, length = _send_source(data)
        handle = self._c_handle
        if handle is None:
            raise InvalidHandleError("the socket is closed", -11)
        errors = _thread_errors
        status = lib.sk_udp_socket_send_to_address(handle, source, length, raw, len(raw),
                                                   _NO_TIMEOUT if timeout == -1 else float(timeout),
                                                   _ZERO_TAG if tag == 0 else tag, errors.pointer)
        if status < 0:
            _raise_for(status, errors.error)

    # ---- filters -------------------------------------------------------------------------

    def set_send_filter(self, filter: Optional[SendFilter], queue: Optional[CallbackQueue] = None,  # noqa: A002
                        asynchronous: bool = True) -> None:
        """Sets (None: removes) the send filter: ``filter(data, address, tag)`` returns
        whether to send the datagram; one it refuses is still reported by
        ``udp_socket_did_send``. `asynchronous` False runs it on SocketKit's loop thread as
        each datagram goes out (`queue` must then be None); True on `queue` (None: the
        socket's callback queue). A filter that raises drops the datagram (the exception
        goes to sys.unraisablehook)."""
        self._set_filter("send", filter, queue, asynchronous)

    def set_receive_filter(self, filter: Optional[ReceiveFilter],  # noqa: A002
                           queue: Optional[CallbackQueue] = None, asynchronous: bool = True) -> None:
        """Sets (None: removes) the receive filter: ``filter(data, address)`` returns whether
        to keep the datagram, or ``(keep, context)``: `context` (any object) is then passed
        to ``udp_socket_did_receive``. Threads as for :meth:`set_send_filter`; a filter that
        raises drops the datagram. In receive-once mode a dropped datagram does not count."""
        self._set_filter("receive", filter, queue, asynchronous)

    def _set_filter(self, which: str, function: Optional[Callable[..., Any]], queue: Optional[CallbackQueue],
                    asynchronous: bool) -> None:
        if function is not None and not callable(function):
            raise error_from_code(-2, 0, f"the {which} filter must be callable or None")
        handle = self.handle
        attribute = "_send_filter" if which == "send" else "_receive_filter"
        previous = getattr(self, attribute)
        # Set first: SocketKit may call the filter before the C call returns.
        setattr(self, attribute, function)
        error = _ffi.CError()
        queue_handle = queue.handle if queue is not None else None
        if which == "send":
            trampoline = _udp_send_filter if function is not None else _ffi.UDP_SEND_FILTER()
            status = lib.sk_udp_socket_set_send_filter(handle, trampoline, None, queue_handle, int(bool(asynchronous)),
                                                       byref(error))
        else:
            trampoline = _udp_receive_filter if function is not None else _ffi.UDP_RECEIVE_FILTER()
            status = lib.sk_udp_socket_set_receive_filter(handle, trampoline, None, queue_handle,
                                                          int(bool(asynchronous)), byref(error))
        if status < 0:
            setattr(self, attribute, previous)
        _raise_for(status, error)
        self._filter_queues[which] = queue

    # ---- receiving -----------------------------------------------------------------------

    def receive_once(self) -> None:
        """Delivers the next datagram (one the receive filter keeps), then stops. Raises
        BadConfigError before the socket has descriptors (bind, connect or send first)."""
        error = _ffi.CError()
        _raise_for(lib.sk_udp_socket_receive_once(self.handle, byref(error)), error)

    def begin_receiving(self) -> None:
        """Delivers every datagram until :meth:`pause_receiving` or close."""
        error = _ffi.CError()
        _raise_for(lib.sk_udp_socket_begin_receiving(self.handle, byref(error)), error)

    def pause_receiving(self) -> None:
        """Stops reading (datagrams wait in the kernel); callbacks already queued still come."""
        _raise_for(lib.sk_udp_socket_pause_receiving(self.handle))

    # ---- multicast, broadcast, reuse ---------------------------------------------------

    def join_multicast_group(self, group: str, interface: Optional[str] = None) -> None:
        """Joins `group` (a numeric IPv4 or IPv6 address) on `interface` (None: the kernel's
        choice; a name, "localhost", or an IP address of one). Needs a bound, unconnected
        socket."""
        error = _ffi.CError()
        _raise_for(lib.sk_udp_socket_join_multicast_group(self.handle, _ffi.c_string(group, "the multicast group"),
                                                          _interface(interface),
                                                          byref(error)), error)

    def leave_multicast_group(self, group: str, interface: Optional[str] = None) -> None:
        """Leaves `group` (SystemCallError EADDRNOTAVAIL if it was not joined)."""
        error = _ffi.CError()
        _raise_for(lib.sk_udp_socket_leave_multicast_group(self.handle, _ffi.c_string(group, "the multicast group"),
                                                           _interface(interface),
                                                           byref(error)), error)

    def send_ipv4_multicast_on_interface(self, interface: str) -> None:
        """The interface IPv4 multicast leaves through (IP_MULTICAST_IF)."""
        error = _ffi.CError()
        name = _ffi.c_string(interface, "the interface")
        _raise_for(lib.sk_udp_socket_send_ipv4_multicast_on_interface(self.handle, name, byref(error)), error)

    def send_ipv6_multicast_on_interface(self, interface: str) -> None:
        """The interface IPv6 multicast leaves through (IPV6_MULTICAST_IF)."""
        error = _ffi.CError()
        name = _ffi.c_string(interface, "the interface")
        _raise_for(lib.sk_udp_socket_send_ipv6_multicast_on_interface(self.handle, name, byref(error)), error)

    def set_multicast_ttl(self, ttl: int) -> None:
        """Multicast TTL / hop limit (0...255), both families."""
        error = _ffi.CError()
        _raise_for(lib.sk_udp_socket_set_multicast_ttl(self.handle, _int(ttl), byref(error)), error)

    def set_multicast_loopback(self, enabled: bool) -> None:
        """Whether this host's own multicast comes back to it (the kernel's default: yes)."""
        error = _ffi.CError()
        _raise_for(lib.sk_udp_socket_set_multicast_loopback(self.handle, int(bool(enabled)), byref(error)), error)

    def enable_broadcast(self, enabled: bool = True) -> None:
        """SO_BROADCAST (IPv4): without it a send to a broadcast address fails with EACCES."""
        error = _ffi.CError()
        _raise_for(lib.sk_udp_socket_enable_broadcast(self.handle, int(bool(enabled)), byref(error)), error)

    def enable_reuse_port(self, enabled: bool = True) -> None:
        """SO_REUSEPORT (several sockets on one port); before binding."""
        error = _ffi.CError()
        _raise_for(lib.sk_udp_socket_enable_reuse_port(self.handle, int(bool(enabled)), byref(error)), error)

    def enable_reuse_address(self, enabled: bool = True) -> None:
        """SO_REUSEADDR; before binding."""
        error = _ffi.CError()
        _raise_for(lib.sk_udp_socket_enable_reuse_address(self.handle, int(bool(enabled)), byref(error)), error)

    # ---- closing -------------------------------------------------------------------------

    def close(self) -> None:
        """Closes now: queued datagrams are dropped without callbacks, then
        ``udp_socket_did_close(sock, None)`` follows if the socket had descriptors. The
        socket can be bound, connected or used to send again."""
        _raise_for(lib.sk_udp_socket_close(self.handle))

    def close_after_sending(self) -> None:
        """Closes once every queued datagram has been sent."""
        _raise_for(lib.sk_udp_socket_close_after_sending(self.handle))

    # ---- diagnostics ---------------------------------------------------------------------

    @property
    def is_connected(self) -> bool:
        return self._flag(lib.sk_udp_socket_is_connected)

    @property
    def is_closed(self) -> bool:
        """True while the socket has no descriptor (fresh, or closed)."""
        return self._flag(lib.sk_udp_socket_is_closed)

    @property
    def is_ipv4(self) -> bool:
        """With descriptors: whether an IPv4 one exists; before: whether IPv4 is enabled."""
        return self._flag(lib.sk_udp_socket_is_ipv4)

    @property
    def is_ipv6(self) -> bool:
        return self._flag(lib.sk_udp_socket_is_ipv6)

    # AF_UNSPEC ("IPv4 if the socket has it, else IPv6") is asked as AF_INET, then AF_INET6:
    # the library's sk_udp_socket_get_local_host / _get_local_address answer AF_UNSPEC with
    # SK_ERR_BAD_PARAM (0.1.0), and the two questions mean the same.

    def _local_host(self, family: int) -> Optional[str]:
        if family == _stdlib_socket.AF_UNSPEC:
            return self._local_host(_AF_INET) or self._local_host(_AF_INET6)
        buffer = ctypes.create_string_buffer(128)
        status = lib.sk_udp_socket_get_local_host(self.handle, family, buffer, len(buffer))
        if status == -1:  # SK_ERR_BAD_CONFIG: no such address
            return None
        _raise_for(status)
        return buffer.value.decode("utf-8", "replace")

    def _local_port(self, family: int) -> int:
        port = c_uint16()
        status = lib.sk_udp_socket_get_local_port(self.handle, family, byref(port))
        if status == -1:
            return 0
        _raise_for(status)
        return port.value

    def _local_address(self, family: int) -> Optional[IPAddress]:
        if family == _stdlib_socket.AF_UNSPEC:
            return self._local_address(_AF_INET) or self._local_address(_AF_INET6)
        storage = ctypes.create_string_buffer(128)
        length = c_uint32(len(storage))
        status = lib.sk_udp_socket_get_local_address(self.handle, family, storage, byref(length))
        if status == -1:
            return None
        _raise_for(status)
        return _ip_address_from_sockaddr(storage.raw[:length.value])

    @property
    def local_host(self) -> Optional[str]:
        """The local IPv4 address if the socket has one, else the IPv6 one; None before a
        bind, connect or send."""
        return self._local_host(_stdlib_socket.AF_UNSPEC)

    @property
    def local_port(self) -> int:
        """The local port (IPv4's if the socket has it, else IPv6's); 0 when none."""
        return self._local_port(_stdlib_socket.AF_UNSPEC)

    @property
    def local_address(self) -> Optional[IPAddress]:
        return self._local_address(_stdlib_socket.AF_UNSPEC)

    @property
    def local_host_ipv4(self) -> Optional[str]:
        return self._local_host(_AF_INET)

    @property
    def local_port_ipv4(self) -> int:
        return self._local_port(_AF_INET)

    @property
    def local_address_ipv4(self) -> Optional[IPAddress]:
        return self._local_address(_AF_INET)

    @property
    def local_host_ipv6(self) -> Optional[str]:
        return self._local_host(_AF_INET6)

    @property
    def local_port_ipv6(self) -> int:
        return self._local_port(_AF_INET6)

    @property
    def local_address_ipv6(self) -> Optional[IPAddress]:
        return self._local_address(_AF_INET6)

    @property
    def connected_host(self) -> Optional[str]:
        """The connected peer's IP address, or None."""
        buffer = ctypes.create_string_buffer(128)
        status = lib.sk_udp_socket_get_connected_host(self.handle, buffer, len(buffer))
        if status == -1:
            return None
        _raise_for(status)
        return buffer.value.decode("utf-8", "replace")

    @property
    def connected_port(self) -> int:
        """The connected peer's port, or 0."""
        port = c_uint16()
        status = lib.sk_udp_socket_get_connected_port(self.handle, byref(port))
        if status == -1:
            return 0
        _raise_for(status)
        return port.value

    @property
    def connected_address(self) -> Optional[IPAddress]:
        storage = ctypes.create_string_buffer(128)
        length = c_uint32(len(storage))
        status = lib.sk_udp_socket_get_connected_address(self.handle, storage, byref(length))
        if status == -1:
            return None
        _raise_for(status)
        return _ip_address_from_sockaddr(storage.raw[:length.value])

    # ---- advanced ------------------------------------------------------------------------

    def perform(self, function: Callable[[Descriptors], None]) -> None:
        """Runs `function(descriptors)` on the socket's loop thread with its descriptors
        (-1 where absent; ``unix`` is always -1), e.g. for a setsockopt SocketKit does not
        offer. Do not close them."""
        def trampoline(descriptors, context):
            try:
                value = descriptors.contents
                function(Descriptors(value.primary, value.ipv4, value.ipv6, value.unix_domain))
            except BaseException:
                _report_unraisable("Exception ignored in socketkit perform function", function)
            finally:
                with _perform_lock:
                    _perform_calls.pop(id(callback), None)

        callback = _ffi.PERFORM_FUNCTION(trampoline)
        with _perform_lock:
            _perform_calls[id(callback)] = callback
        status = lib.sk_udp_socket_perform(self.handle, callback, None)
        if status < 0:
            with _perform_lock:
                _perform_calls.pop(id(callback), None)
        _raise_for(status)


if _speedups is None:
    # The hot methods in Python (with the extension they are SocketBase's and
    # UdpSocketBase's, which call these for the arguments they do not handle).
    Socket.read = Socket._read_py  # type: ignore[assignment]
    Socket.write = Socket._write_py  # type: ignore[assignment]
    UdpSocket.send_to_address = UdpSocket._send_to_address_py  # type: ignore[assignment]
else:
    _speedups.configure({name: ctypes.cast(getattr(lib, name), c_void_p).value
                         for name in ("sk_socket_write", "sk_socket_read", "sk_udp_socket_send_to_address",
                                      "sk_callback_queue_poll_events", "sk_loop_group_run_once",
                                      "sk_socket_write_no_copy", "sk_thread_set_wait_hook")},
                        _SPEEDUPS_NO_COPY_THRESHOLD, globals())
    # C callbacks for the most frequent events, instead of ctypes trampolines (which cost
    # more than the delegate method they call): for every queue, not only HostQueue.
    _c_callbacks = _speedups.trampolines()
    _TRAMPOLINES["did_read"] = _ffi.DID_READ(_c_callbacks["did_read"])
    _UDP_TRAMPOLINES["did_receive"] = _ffi.UDP_DID_RECEIVE(_c_callbacks["udp_did_receive"])


@atexit.register
def _shutdown() -> None:
    """Closes every live socket (TCP and UDP) before the interpreter goes away, so no
    SocketKit thread calls into a finalizing interpreter."""
    global _shutting_down
    if _speedups is not None:
        # First: its callbacks from SocketKit's threads no longer enter Python, and its
        # check of this flag (per event) reads its own from then on.
        _speedups.shutdown()
    _shutting_down = True
    for sock in list(_sockets.values()):
        try:
            sock.abort()
        except Exception:  # pragma: no cover
            pass
    for udp_socket in list(_udp_sockets.values()):
        try:
            udp_socket.release()
        except Exception:  # pragma: no cover
            pass
