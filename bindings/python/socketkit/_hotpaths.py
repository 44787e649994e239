# SPDX-License-Identifier: MIT
"""The binding's hot methods: :meth:`Socket.read <socketkit.Socket.read>`,
:meth:`Socket.write <socketkit.Socket.write>` and :meth:`UdpSocket.send_to_address
<socketkit.UdpSocket.send_to_address>`, called once per message by an echo.

Each is defined twice, with the same behaviour: in Python here (:class:`SocketIOPython`,
:class:`UdpSocketIOPython`, through ctypes), and in the C extension (its ``SocketIO`` and
``UdpSocketIO`` types), which handles the common arguments itself and calls the Python
method here for the others. Socket and UdpSocket derive from whichever is in use
(:data:`SocketIO`, :data:`UdpSocketIO`).

The C extension is also handed, once, everything else it works with (:func:`_connect`):
the library's functions, the table of live sockets, the address caches and the Python
functions it calls back.
"""
from __future__ import annotations

import ctypes
from ctypes import c_void_p
from typing import Any, Tuple, Union

from . import _addresses, _dispatch, _status
from ._ffi import lib
from ._handles import live
from ._native import speedups
from ._status import NO_TIMEOUT, ZERO_SIZE, ZERO_TAG, check_size, raise_for, thread_errors
from .errors import INVALID_HANDLE, InvalidHandleError

BytesLike = Union[bytes, bytearray, memoryview]

# The C extension lends bytes objects from 16 KiB to SocketKit instead of copying them (a
# stream echo's writes are chunks of up to 256 KiB, most of them queued behind the previous
# one and so copied whole when not lent): it holds a reference, which its release function,
# C code that outlives the interpreter, drops, and leaves alone once the interpreter is
# finishing. The ctypes path copies every write: its release function would be a ctypes
# callback, which SocketKit's threads may still call while the interpreter finalizes, after
# ctypes has freed it (a write completing, or dropped, as the process exits).
NO_COPY_THRESHOLD = 16 * 1024


def _closed() -> InvalidHandleError:
    return InvalidHandleError("the socket is closed", INVALID_HANDLE)


class SocketIOPython:
    """Socket's read and write through ctypes."""

    __slots__ = ()

    def read(self, max_length: int = 0, timeout: float = -1, tag: int = 0) -> None:
        """Reads whatever is available (at least one byte, at most `max_length` if not 0).
        ``socket_did_read(sock, data, tag)`` receives ``bytes``."""
        handle = self._c_handle  # type: ignore[attr-defined]
        if handle is None:
            raise _closed()
        errors = thread_errors
        status = lib.sk_socket_read(handle, check_size(max_length, "max_length") if max_length else ZERO_SIZE,
                                    NO_TIMEOUT if timeout == -1 else float(timeout), ZERO_TAG if tag == 0 else tag,
                                    errors.pointer)
        if status < 0:
            raise_for(status, errors.error)

    def write(self, data: BytesLike, timeout: float = -1, tag: int = 0) -> None:
        """Queues `data` (any bytes-like object); ``socket_did_write(sock, tag)`` follows once
        the kernel accepted it all. SocketKit copies it before this returns (with the C
        extension, a ``bytes`` object of 16 KiB or more written with the default timeout
        and tag is lent instead: immutable, it is kept alive until SocketKit is done with
        it). Raises
        :class:`WriteQueueFullError` (nothing queued) when the write would take the queue
        above :attr:`maximum_queued_write_bytes`."""
        source: Any
        if isinstance(data, bytes):
            source, length = data, len(data)
        else:
            view = memoryview(data)
            if view.readonly or not view.c_contiguous or view.nbytes == 0:
                source = view.tobytes()
            else:
                source = (ctypes.c_char * view.nbytes).from_buffer(view.cast("B"))
            length = view.nbytes
        handle = self._c_handle  # type: ignore[attr-defined]
        if handle is None:
            raise _closed()
        errors = thread_errors
        # SocketKit copies the bytes before the call returns.
        status = lib.sk_socket_write(handle, source, length, NO_TIMEOUT if timeout == -1 else float(timeout),
                                     ZERO_TAG if tag == 0 else tag, errors.pointer)
        if status < 0:
            raise_for(status, errors.error)


def send_source(data: BytesLike) -> Tuple[Any, int]:
    """What to pass as a datagram's `data` (SocketKit copies it during the call), and its
    length."""
    if isinstance(data, bytes):
        return (data if data else None), len(data)
    view = memoryview(data)
    length = view.nbytes
    if length == 0:
        return None, 0
    if view.readonly or not view.c_contiguous:
        return view.tobytes(), length
    return (ctypes.c_char * length).from_buffer(view.cast("B")), length


class UdpSocketIOPython:
    """UdpSocket's send_to_address through ctypes."""

    __slots__ = ()

    def send_to_address(self, data: BytesLike, address: _addresses.IPAddress, timeout: float = -1,
                        tag: int = 0) -> None:
        """Queues a datagram to ("ip", port)."""
        raw = _addresses.ip_sockaddr(address)
        source, length = send_source(data)
        handle = self._c_handle  # type: ignore[attr-defined]
        if handle is None:
            raise _closed()
        errors = thread_errors
        status = lib.sk_udp_socket_send_to_address(handle, source, length, raw, len(raw),
                                                   NO_TIMEOUT if timeout == -1 else float(timeout),
                                                   ZERO_TAG if tag == 0 else tag, errors.pointer)
        if status < 0:
            raise_for(status, errors.error)


#: Socket's base for read and write: the C extension's type when it is in use.
SocketIO: Any = speedups.SocketIO if speedups is not None else SocketIOPython
#: UdpSocket's base for send_to_address.
UdpSocketIO: Any = speedups.UdpSocketIO if speedups is not None else UdpSocketIOPython


def _connect() -> None:
    """Hands the C extension what it works with: exactly these objects, once."""
    speedups.init(
        functions={name: ctypes.cast(getattr(lib, name), c_void_p).value
                   for name in ("sk_socket_write", "sk_socket_read", "sk_socket_write_no_copy",
                                "sk_udp_socket_send_to_address", "sk_callback_queue_poll_events",
                                "sk_loop_group_run_once", "sk_thread_set_wait_hook")},
        no_copy_threshold=NO_COPY_THRESHOLD,
        live_sockets=live.refs,
        address_by_sockaddr=_addresses.address_by_sockaddr,
        sockaddr_by_address=_addresses.sockaddr_by_address,
        dispatch_records=_dispatch.dispatch_records,
        record_address=_addresses.record_address,
        address_for_sockaddr=_addresses.address_for_sockaddr,
        udp_did_receive=_dispatch.udp_did_receive_py,
        raise_c_error=_status.raise_c_error,
        report_delegate_error=_status.report_delegate_error,
        read=SocketIOPython.read,
        write=SocketIOPython.write,
        send_to_address=UdpSocketIOPython.send_to_address,
    )


if speedups is not None:
    _connect()
