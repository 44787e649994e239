# SPDX-License-Identifier: MIT
"""Events to delegate methods. SocketKit reports an event in one of two ways:

- a call of a C delegate member on a SocketKit thread (a SerialQueue's, or the loop's with
  ``queue=None``): the members are a fixed set of ctypes trampolines (module-level, alive
  for the process's life), or the C extension's for the frequent ones (reads, datagrams);
- an event record polled by :meth:`HostQueue.drain <socketkit.HostQueue.drain>`
  (sk_callback_queue_poll_events), handled by :func:`dispatch_records` (or by the C
  extension's drain, which hands it every record but reads and datagrams).

Both end in the same handlers: each finds the Socket or UdpSocket by its handle in
:data:`_handles.live` and calls the delegate method of the event's name, if the delegate
has one. An exception raised by a delegate method goes to :func:`sys.unraisablehook`.
"""
from __future__ import annotations

import atexit
import ctypes
from ctypes import byref, c_void_p
from typing import Any, Dict, Optional, Sequence, Tuple

from . import _ffi
from ._addresses import IPAddress, PacketInfo, address_from_sockaddr, ip_address_at, packet_info_at, record_address
from ._delegates import check_method_names, implements
from ._ffi import lib
from ._handles import adopting, live
from ._native import speedups
from ._status import error_at, error_from_c, report_unraisable
from ._tls import TLSTrust
from .errors import Error

#: Set at exit (before the interpreter goes away): from then on events reach no delegate.
shutting_down = False
_refs = live.refs  # read directly by the hot event path


def socket_for(handle: Optional[int], userdata: Optional[int] = None) -> Any:
    """The live Socket or UdpSocket of `handle`, or None. `userdata` is a Socket.from_fd
    token: the socket it names gets its handle now if its first event came first."""
    if shutting_down or not handle:
        return None
    sock = live.get(handle)
    if sock is None and userdata:
        sock = adopting.get(userdata)
        if sock is not None:
            sock._register(handle)
    return sock


def invoke(sock: Any, name: str, *arguments: Any, default: Any = None) -> Any:
    method = getattr(sock._delegate, name, None)
    if method is None:
        return default
    try:
        return method(sock, *arguments)
    except BaseException:
        report_unraisable(f"Exception ignored in socketkit delegate method {name}", sock._delegate)
        return default


# ---- handlers, shared by the trampolines and the record dispatch ----------------------------

def on_simple(handle: int, name: str, *arguments: Any) -> None:
    sock = socket_for(handle)
    if sock is not None:
        invoke(sock, name, *arguments)


def on_accept(listener_handle: int, new_handle: int) -> None:
    listener = socket_for(listener_handle)
    if listener is None:
        lib.sk_socket_release(new_handle)
        return
    invoke(listener, "socket_did_accept", listener._accepted(new_handle))


def on_connect(handle: int, host: bytes, port: int, userdata: Optional[int]) -> None:
    sock = socket_for(handle, userdata)
    if sock is not None:
        invoke(sock, "socket_did_connect", host.decode("utf-8", "replace"), port)


def on_read(handle: int, data: int, length: int, tag: int) -> None:
    # The hottest path through ctypes (one call per read): socket_for and invoke inlined.
    if shutting_down:
        return
    ref = _refs.get(handle)
    sock = ref() if ref is not None else None
    if sock is None:
        return
    payload = sock._take_read_result(data, length)
    method = getattr(sock._delegate, "socket_did_read", None)
    if method is not None:
        try:
            method(sock, payload, tag)
        except BaseException:
            report_unraisable("Exception ignored in socketkit delegate method socket_did_read", sock._delegate)


def on_timeout(handle: int, name: str, tag: int, elapsed: float, done: int) -> float:
    sock = socket_for(handle)
    if sock is None:
        return 0.0
    extension = invoke(sock, name, tag, elapsed, done, default=0.0)
    try:
        return float(extension or 0.0)
    except (TypeError, ValueError):
        return 0.0


def on_disconnect(handle: int, error: Optional[Error], userdata: Optional[int]) -> None:
    sock = socket_for(handle, userdata)
    if sock is None:
        return
    sock._session_ended()  # SocketKit no longer touches that session's buffers
    invoke(sock, "socket_did_disconnect", error)


def _reject_trust(handle: int, trust_address: int) -> None:
    token = ctypes.cast(trust_address, ctypes.POINTER(_ffi.TLSTrust)).contents.token
    lib.sk_socket_answer_trust(handle, token, 0)


def on_trust(handle: int, trust_address: int) -> None:
    """did_receive_trust: the delegate answers True/False now, or None to answer later with
    trust.answer(). A method that raises rejects the peer."""
    sock = socket_for(handle)
    if sock is None or not trust_address:
        if trust_address:
            _reject_trust(handle, trust_address)  # nobody to ask (being released): as a NULL member
        return
    try:
        trust = TLSTrust._from_c(sock, trust_address)
    except BaseException:
        report_unraisable("Exception ignored while reading a socketkit trust question", sock._delegate)
        _reject_trust(handle, trust_address)
        return
    verdict = invoke(sock, "socket_did_receive_trust", trust, default=False)
    if verdict is not None:
        try:
            trust.answer(bool(verdict))
        except Error:
            pass  # the socket was closed meanwhile


def on_udp_receive(handle: int, data: bytes, address: Optional[IPAddress], context: Optional[int]) -> None:
    sock = socket_for(handle)
    if sock is None:
        return
    value = sock._contexts.pop(context, None) if context else None
    invoke(sock, "udp_socket_did_receive", data, address, value)


def on_udp_receive_with_packet_info(handle: int, data: bytes, address: Optional[IPAddress],
                                    info: Optional[PacketInfo], context: Optional[int]) -> None:
    sock = socket_for(handle)
    if sock is None:
        return
    value = sock._contexts.pop(context, None) if context else None
    invoke(sock, "udp_socket_did_receive_with_packet_info", data, address, info, value)


# ---- the C delegate members (ctypes trampolines) ---------------------------------------------

# The C extension's members for reads and datagrams, in place of ctypes trampolines (which
# cost more than the delegate method they call): for sockets on every queue.
_c_members: Dict[str, int] = speedups.trampolines() if speedups is not None else {}


def _passing(prototype: Any, method: str, error_last: bool = False) -> Any:
    """A trampoline that calls the delegate method `method` with the C arguments between
    the handle and the userdata, the last of them an sk_error_t pointer when `error_last`."""
    if error_last:
        def trampoline(handle: int, *arguments: Any) -> None:
            on_simple(handle, method, *arguments[:-2], error_from_c(arguments[-2]))
    else:
        def trampoline(handle: int, *arguments: Any) -> None:
            on_simple(handle, method, *arguments[:-1])
    return prototype(trampoline)


def _asking_timeout(method: str) -> Any:
    def trampoline(handle: int, tag: int, elapsed: float, done: int, userdata: Optional[int]) -> float:
        return on_timeout(handle, method, tag, elapsed, done)
    return _ffi.SHOULD_TIMEOUT(trampoline)


def _did_accept_py(listener_handle: int, new_handle: int, userdata: Optional[int]) -> None:
    on_accept(listener_handle, new_handle)


_did_accept = _ffi.DID_ACCEPT(_did_accept_py)


def _new_socket_loop_py(listener_handle: int, address: int, length: int, userdata: Optional[int]) -> int:
    listener = socket_for(listener_handle)
    if listener is None:
        return -1
    peer = address_from_sockaddr(ctypes.string_at(address, length))
    index = invoke(listener, "socket_new_loop_for_connection", peer)
    return index if isinstance(index, int) else -1


_new_socket_loop = _ffi.NEW_SOCKET_LOOP_FOR_CONNECTION(_new_socket_loop_py)


def _did_connect_py(handle: int, host: bytes, port: int, userdata: Optional[int]) -> None:
    on_connect(handle, host, port, userdata)


_did_connect = _ffi.DID_CONNECT(_did_connect_py)


def _did_read_py(handle: int, data: int, length: int, tag: int, userdata: Optional[int]) -> None:
    on_read(handle, data, length, tag)


def _did_disconnect_py(handle: int, error: Any, userdata: Optional[int]) -> None:
    on_disconnect(handle, error_from_c(error), userdata)


_did_disconnect = _ffi.DID_DISCONNECT(_did_disconnect_py)


def _did_receive_trust_py(handle: int, trust: Any, userdata: Optional[int]) -> None:
    on_trust(handle, ctypes.cast(trust, c_void_p).value or 0)


_did_receive_trust = _ffi.DID_RECEIVE_TRUST(_did_receive_trust_py)


def _udp_did_connect_py(handle: int, address: int, length: int, userdata: Optional[int]) -> None:
    on_simple(handle, "udp_socket_did_connect", ip_address_at(address, length))


_udp_did_connect = _ffi.UDP_DID_CONNECT(_udp_did_connect_py)


def udp_did_receive_py(handle: int, data: int, length: int, address: int, address_length: int,
                       context: Optional[int], userdata: Optional[int]) -> None:
    """The did_receive member through ctypes (the C extension's calls it for a datagram
    with a receive filter's context)."""
    on_udp_receive(handle, ctypes.string_at(data, length) if length else b"",
                   ip_address_at(address, address_length), context)


def _udp_did_receive_with_packet_info_py(handle: int, data: int, length: int, address: int, address_length: int,
                                         info: int, context: Optional[int], userdata: Optional[int]) -> None:
    on_udp_receive_with_packet_info(handle, ctypes.string_at(data, length) if length else b"",
                                    ip_address_at(address, address_length), packet_info_at(info), context)


_udp_did_receive_with_packet_info = _ffi.UDP_DID_RECEIVE_WITH_PACKET_INFO(_udp_did_receive_with_packet_info_py)


# Delegate method -> (C delegate member, its trampoline), per kind. The trampolines stay
# alive with these tables, for the process's life.
_SOCKET_MEMBERS = {
    "socket_did_accept": ("did_accept", _did_accept),
    "socket_new_loop_for_connection": ("new_socket_loop_for_connection", _new_socket_loop),
    "socket_did_pause_accepting": ("did_pause_accepting", _passing(_ffi.DID_PAUSE_ACCEPTING,
                                                                   "socket_did_pause_accepting", error_last=True)),
    "socket_did_connect": ("did_connect", _did_connect),
    "socket_did_read": ("did_read", _ffi.DID_READ(_c_members.get("did_read") or _did_read_py)),
    "socket_did_read_partial": ("did_read_partial", _passing(_ffi.DID_READ_PARTIAL, "socket_did_read_partial")),
    "socket_should_timeout_read": ("should_timeout_read", _asking_timeout("socket_should_timeout_read")),
    "socket_did_write": ("did_write", _passing(_ffi.DID_WRITE, "socket_did_write")),
    "socket_did_write_partial": ("did_write_partial", _passing(_ffi.DID_WRITE_PARTIAL, "socket_did_write_partial")),
    "socket_should_timeout_write": ("should_timeout_write", _asking_timeout("socket_should_timeout_write")),
    "socket_did_close_read_stream": ("did_close_read_stream",
                                     _passing(_ffi.DID_CLOSE_READ_STREAM, "socket_did_close_read_stream")),
    "socket_did_reach_high_watermark": ("did_reach_high_watermark",
                                        _passing(_ffi.DID_WATERMARK, "socket_did_reach_high_watermark")),
    "socket_did_drain_to_low_watermark": ("did_drain_to_low_watermark",
                                          _passing(_ffi.DID_WATERMARK, "socket_did_drain_to_low_watermark")),
    "socket_did_disconnect": ("did_disconnect", _did_disconnect),
    "socket_did_secure": ("did_secure", _passing(_ffi.DID_SECURE, "socket_did_secure")),
    "socket_did_receive_trust": ("did_receive_trust", _did_receive_trust),
    "socket_did_cancel_read": ("did_cancel_read", _passing(_ffi.DID_CANCEL_READ, "socket_did_cancel_read")),
}
_UDP_SOCKET_MEMBERS = {
    "udp_socket_did_connect": ("did_connect", _udp_did_connect),
    "udp_socket_did_not_connect": ("did_not_connect", _passing(_ffi.UDP_DID_NOT_CONNECT, "udp_socket_did_not_connect",
                                                               error_last=True)),
    "udp_socket_did_send": ("did_send", _passing(_ffi.UDP_DID_SEND, "udp_socket_did_send")),
    "udp_socket_did_not_send": ("did_not_send", _passing(_ffi.UDP_DID_NOT_SEND, "udp_socket_did_not_send",
                                                         error_last=True)),
    "udp_socket_did_receive": ("did_receive",
                               _ffi.UDP_DID_RECEIVE(_c_members.get("udp_did_receive") or udp_did_receive_py)),
    "udp_socket_did_receive_error": ("did_receive_error", _passing(_ffi.UDP_DID_RECEIVE_ERROR,
                                                                   "udp_socket_did_receive_error", error_last=True)),
    "udp_socket_did_close": ("did_close", _passing(_ffi.UDP_DID_CLOSE, "udp_socket_did_close", error_last=True)),
    "udp_socket_did_receive_with_packet_info": ("did_receive_with_packet_info", _udp_did_receive_with_packet_info),
}
_SOCKET_DELEGATE_SIZE = ctypes.sizeof(_ffi.SocketDelegate)
_UDP_SOCKET_DELEGATE_SIZE = ctypes.sizeof(_ffi.UdpSocketDelegate)


_SOCKET_METHODS = frozenset(_SOCKET_MEMBERS)
_UDP_SOCKET_METHODS = frozenset(_UDP_SOCKET_MEMBERS)


def _wired(struct_type: Any, members: Dict[str, Tuple[str, Any]], delegate: Any, always: Sequence[str]) -> Any:
    """A C delegate struct with the members of the methods `delegate` defines (SocketKit
    then does not call into Python for events nobody listens to), and those in `always`."""
    struct_ = struct_type()
    for method, (member, trampoline) in members.items():
        if member in always or implements(delegate, method):
            setattr(struct_, member, trampoline)
    return struct_


def socket_delegate_struct(delegate: Any) -> Tuple[Any, int]:
    """(pointer, size) of the sk_socket_delegate_t for a Python delegate. Reads and
    disconnects are always wired, as they keep internal state right (pinned buffers), and
    accepting is (a listener without ``socket_did_accept`` closes its connections). None
    (NULL) for no delegate: SocketKit then has none either, so connecting and accepting
    raise BadConfigError as in C and Swift (a struct of our own would count as one)."""
    if delegate is None:
        return None, _SOCKET_DELEGATE_SIZE
    check_method_names(delegate, "socket_", _SOCKET_METHODS, "Socket")
    return byref(_wired(_ffi.SocketDelegate, _SOCKET_MEMBERS, delegate, ("did_read", "did_disconnect"))), \
        _SOCKET_DELEGATE_SIZE


def udp_delegate_struct(delegate: Any) -> Tuple[Any, int]:
    """(pointer, size) of the sk_udp_socket_delegate_t for a Python delegate (None too:
    nothing a UDP socket does needs one). did_receive is always wired: it hands back, and
    so frees, the receive filter's contexts."""
    check_method_names(delegate, "udp_socket_", _UDP_SOCKET_METHODS, "UdpSocket")
    return byref(_wired(_ffi.UdpSocketDelegate, _UDP_SOCKET_MEMBERS, delegate, ("did_receive",))), \
        _UDP_SOCKET_DELEGATE_SIZE


# ---- event records (HostQueue) ---------------------------------------------------------------

_EVENT_SIZE = _ffi.EVENT_FORMAT.size
_iter_unpack_events = _ffi.EVENT_FORMAT.iter_unpack


def dispatch_records(raw: memoryview, records: Any, count: int, start: int = 0) -> None:
    """Handles records `start` ..< `count` of a poll, in order (one struct unpack per record:
    no ctypes callback and no ctypes field access on the common paths). The C drain calls
    it for each record it does not handle itself."""
    read_kind = _ffi.EVENT_READ
    for index, (handle, userdata, kind, port, tag, data, length, elapsed, host, error, new_socket,
                _token, udp_handle, address, address_length, context,
                trust) in enumerate(_iter_unpack_events(raw[start * _EVENT_SIZE:count * _EVENT_SIZE]), start):
        try:
            if kind == read_kind:
                on_read(handle, data, length, tag)
            elif kind == _ffi.EVENT_WRITE:
                on_simple(handle, "socket_did_write", tag)
            elif kind >= _ffi.EVENT_UDP_CONNECT:
                # UDP records carry the peer as text (host, port) beside the sockaddr.
                if kind == _ffi.EVENT_UDP_RECEIVE:
                    on_udp_receive(udp_handle, (ctypes.c_char * length).from_address(data).raw if length else b"",
                                   record_address(host, port, address, address_length), context)
                elif kind == _ffi.EVENT_UDP_SEND:
                    on_simple(udp_handle, "udp_socket_did_send", tag)
                elif kind == _ffi.EVENT_UDP_NOT_SEND:
                    on_simple(udp_handle, "udp_socket_did_not_send", tag, error_at(error))
                elif kind == _ffi.EVENT_UDP_CONNECT:
                    on_simple(udp_handle, "udp_socket_did_connect",
                              (ctypes.string_at(host).decode("utf-8", "replace"), port))
                elif kind == _ffi.EVENT_UDP_NOT_CONNECT:
                    on_simple(udp_handle, "udp_socket_did_not_connect", error_at(error))
                elif kind == _ffi.EVENT_UDP_RECEIVE_ERROR:
                    on_simple(udp_handle, "udp_socket_did_receive_error", error_at(error))
                elif kind == _ffi.EVENT_UDP_CLOSE:
                    on_simple(udp_handle, "udp_socket_did_close", error_at(error))
                elif kind == _ffi.EVENT_UDP_RECEIVE_PACKET_INFO:
                    on_udp_receive_with_packet_info(
                        udp_handle, (ctypes.c_char * length).from_address(data).raw if length else b"",
                        record_address(host, port, address, address_length), packet_info_at(_token), context)
            elif kind == _ffi.EVENT_ACCEPT:
                on_accept(handle, new_socket)
            elif kind == _ffi.EVENT_CONNECT:
                on_connect(handle, ctypes.string_at(host), port, userdata)
            elif kind == _ffi.EVENT_DISCONNECT:
                on_disconnect(handle, error_at(error), userdata)
            elif kind == _ffi.EVENT_READ_PARTIAL:
                on_simple(handle, "socket_did_read_partial", length, tag)
            elif kind == _ffi.EVENT_WRITE_PARTIAL:
                on_simple(handle, "socket_did_write_partial", length, tag)
            elif kind == _ffi.EVENT_READ_TIMEOUT or kind == _ffi.EVENT_WRITE_TIMEOUT:
                name = "socket_should_timeout_read" if kind == _ffi.EVENT_READ_TIMEOUT else "socket_should_timeout_write"
                extension = 0.0
                try:
                    extension = on_timeout(handle, name, tag, elapsed, length)
                finally:
                    # Always answered: the read or write waits for it.
                    lib.sk_socket_answer_timeout(byref(records[index]), extension)
            elif kind == _ffi.EVENT_CLOSE_READ_STREAM:
                on_simple(handle, "socket_did_close_read_stream")
            elif kind == _ffi.EVENT_HIGH_WATERMARK:
                on_simple(handle, "socket_did_reach_high_watermark", length)
            elif kind == _ffi.EVENT_LOW_WATERMARK:
                on_simple(handle, "socket_did_drain_to_low_watermark", length)
            elif kind == _ffi.EVENT_PAUSE_ACCEPTING:
                on_simple(handle, "socket_did_pause_accepting", error_at(error))
            elif kind == _ffi.EVENT_SECURE:
                on_simple(handle, "socket_did_secure")
            elif kind == _ffi.EVENT_TRUST:
                on_trust(handle, trust)
            elif kind == _ffi.EVENT_CANCEL_READ:
                on_simple(handle, "socket_did_cancel_read", tag, length)
        except BaseException:  # pragma: no cover - invoke already reports delegate errors
            report_unraisable("Exception ignored while dispatching a socketkit event", None)


@atexit.register
def _shutdown() -> None:
    """Closes every live socket (TCP and UDP) before the interpreter goes away, so no
    SocketKit thread calls into a finalizing interpreter."""
    global shutting_down
    if speedups is not None:
        # First: its callbacks from SocketKit's threads no longer enter Python, and its
        # check of this flag (per event) reads its own from then on.
        speedups.shutdown()
    shutting_down = True
    for sock in live.values():
        try:
            sock.abort()
        except Exception:  # pragma: no cover
            pass
