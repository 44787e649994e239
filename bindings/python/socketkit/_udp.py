# SPDX-License-Identifier: MIT
"""The UDP socket: :class:`UdpSocket` (GCDAsyncUdpSocket's model), with its send and receive
filters."""
from __future__ import annotations

import ctypes
import enum
import socket as _stdlib_socket
import threading
import warnings
from ctypes import byref, c_int, c_size_t, c_void_p
from typing import Any, Callable, Dict, List, Optional, Tuple, Union

from . import _addresses, _ffi
from ._addresses import IPAddress, ip_address_at, ip_address_from_sockaddr
from ._dispatch import socket_for, udp_delegate_struct
from ._ffi import lib
from ._handles import UNSET, Handle, flag_property, next_token
from ._hotpaths import BytesLike, UdpSocketIO, send_source
from ._queues import CallbackQueue, LoopGroup, default_queue
from ._status import bad_param, check_int, check_port, check_size, check_tag, raise_for, report_unraisable

_AF_INET = _stdlib_socket.AF_INET
# bind_to_port's interface when not given (None is "any interface", given explicitly).
_NO_INTERFACE: Any = object()
_AF_INET6 = _stdlib_socket.AF_INET6


class AddressPreference(enum.IntEnum):
    """Which of a host name's addresses a :class:`UdpSocket` uses (sk_udp_address_preference)."""

    NEUTRAL = _ffi.UDP_PREFER_NEUTRAL  #: the resolver's first address (default)
    IPV4 = _ffi.UDP_PREFER_IPV4
    IPV6 = _ffi.UDP_PREFER_IPV6


#: A receive filter: ``filter(data, address)`` returns whether to keep the datagram, or
#: ``(keep, context)`` to hand `context` to ``udp_socket_did_receive``.
ReceiveFilter = Callable[[bytes, Optional[IPAddress]], Union[bool, Tuple[bool, Any]]]
#: A send filter: ``filter(data, address, tag)`` returns whether to send the datagram.
SendFilter = Callable[[bytes, Optional[IPAddress], int], bool]


# ---- filters ---------------------------------------------------------------------------------

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


def _udp_receive_filter_py(handle: int, data: int, length: int, address: int, address_length: int,
                           out_context: Any, userdata: Optional[int]) -> int:
    sock = socket_for(handle)
    function = sock._receive_filter if sock is not None else None
    if function is None:
        return 1  # removed meanwhile (or shutting down): no filter
    running = _filters_running()
    running.append(handle)
    verdict: Any = None
    context: Any = None
    try:
        verdict = function(ctypes.string_at(data, length) if length else b"", ip_address_at(address, address_length))
        if isinstance(verdict, tuple):
            verdict, context = verdict
        if not verdict:
            return 0
        if context is not None and out_context:
            token = next_token()
            sock._contexts[token] = context
            out_context[0] = token
        return 1
    except BaseException:
        report_unraisable("Exception ignored in socketkit UDP receive filter (the datagram is dropped)", function)
        return 0
    finally:
        # Dropped while still marked as inside the filter (see _release_udp_handle).
        sock = function = verdict = context = None
        running.pop()


_udp_receive_filter = _ffi.UDP_RECEIVE_FILTER(_udp_receive_filter_py)


def _udp_send_filter_py(handle: int, data: int, length: int, address: int, address_length: int, tag: int,
                        userdata: Optional[int]) -> int:
    sock = socket_for(handle)
    function = sock._send_filter if sock is not None else None
    if function is None:
        return 1
    running = _filters_running()
    running.append(handle)
    try:
        send = function(ctypes.string_at(data, length) if length else b"", ip_address_at(address, address_length),
                        tag)
        return 1 if send else 0
    except BaseException:
        report_unraisable("Exception ignored in socketkit UDP send filter (the datagram is dropped)", function)
        return 0
    finally:
        sock = function = send = None
        running.pop()


_udp_send_filter = _ffi.UDP_SEND_FILTER(_udp_send_filter_py)


class UdpSocket(UdpSocketIO, Handle):
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
    - ``udp_socket_did_receive_with_packet_info(sock, data, address, packet_info, context)``:
      as ``udp_socket_did_receive``, for the datagrams that carry packet info
      (:attr:`receives_packet_info`), with a :class:`PacketInfo`; without this method they
      go to ``udp_socket_did_receive``
    - ``udp_socket_did_receive_error(sock, error)``: an ICMP error about an earlier
      datagram, or :class:`~socketkit.TruncatedError` for one larger than the receive limit
    - ``udp_socket_did_close(sock, error)``: last of a session; `error` None after
      :meth:`disconnect`

    They run on ``queue``, as for :class:`Socket`: by default :func:`default_queue`; a
    :class:`HostQueue` to run them yourself (:mod:`socketkit.aio` for asyncio); ``None`` for
    SocketKit's loop thread. An exception raised by one goes to :func:`sys.unraisablehook`.

    Closing (the same words as :class:`Socket`'s, those of asyncio's transports):
    :meth:`close` closes for good once the datagrams already queued are sent, and the
    ``with`` statement ends with it; :meth:`abort` (or :meth:`release`) closes for good at
    once, dropping them; afterwards every method raises :class:`InvalidHandleError`. Keep a
    reference: a socket nobody holds is aborted. :meth:`disconnect` (GCDAsyncUdpSocket's
    ``close``) and :meth:`disconnect_after_sending` close the descriptors and keep the
    socket, which can bind, connect or send again.

    Sends and getters return at once; every other method waits for the socket's loop and
    returns its answer (bound after :meth:`bind_to_port`, without descriptors after
    :meth:`disconnect`), without ever deadlocking (see :class:`Socket` for the rule).
    """

    _KIND = "UDP socket"
    _delegate_struct = staticmethod(udp_delegate_struct)
    _c_set_delegate = lib.sk_udp_socket_set_delegate
    _c_set_callback_queue = lib.sk_udp_socket_set_callback_queue
    _c_perform = lib.sk_udp_socket_perform

    def __init__(self, delegate: Any = None, *, queue: Optional[CallbackQueue] = UNSET,
                 loop_group: Optional[LoopGroup] = None) -> None:
        self._init_handle(delegate, default_queue() if queue is UNSET else queue)
        # Receive-filter contexts waiting for their did_receive, by the token given to C.
        self._contexts: Dict[int, Any] = {}
        self._send_filter: Optional[SendFilter] = None
        self._receive_filter: Optional[ReceiveFilter] = None
        # Queues the filters run on (held so a HostQueue is not collected under them).
        self._filter_queues: Dict[str, Optional[CallbackQueue]] = {}
        handle = c_void_p()
        error = _ffi.CError()
        delegate_pointer, delegate_size = udp_delegate_struct(delegate)
        raise_for(lib.sk_udp_socket_create(delegate_pointer, delegate_size, None, self._queue_handle,
                                           loop_group.handle if loop_group is not None else None,
                                           byref(handle), byref(error)), error)
        self._register(_ffi.created(handle))

    # ---- lifetime ------------------------------------------------------------------------

    def close(self) -> None:
        """Closes the socket for good, gracefully: :meth:`disconnect_after_sending` and a
        release (SocketKit's lingering close, as :meth:`Socket.close`): datagrams already
        queued are still sent (those waiting for a name to resolve too, each within its
        timeout, all within two minutes), then its descriptors close, as asyncio's
        ``transport.close()`` does; receiving stops. No delegate method or filter call
        starts once this returns (one running on another thread is waited for, unless that
        would deadlock), and no ``udp_socket_did_close`` comes. With a send filter set, the
        socket closes at once instead, as by :meth:`abort`: the filter decides what may
        leave, and it is not called once this returns. Idempotent."""
        if self._send_filter is not None:
            self.abort()
            return
        if self._handle is not None:
            lib.sk_udp_socket_close_after_sending(self._handle)
        self._release()

    def _release_handle(self, handle: int) -> None:
        _release_udp_handle(handle)
        self._contexts.clear()

    def disconnect(self) -> None:
        """Closes the descriptors now (GCDAsyncUdpSocket's ``close``): queued datagrams are
        dropped without callbacks, then ``udp_socket_did_close(sock, None)`` follows if the
        socket had descriptors. The socket stays usable: it can be bound, connected or used
        to send again."""
        raise_for(lib.sk_udp_socket_close(self.handle))

    def disconnect_after_sending(self) -> None:
        """Closes the descriptors once every queued datagram has been sent (those queued
        meanwhile too), then ``udp_socket_did_close(sock, None)``; the socket stays usable."""
        raise_for(lib.sk_udp_socket_close_after_sending(self.handle))

    def close_after_sending(self) -> None:
        """The former name of :meth:`disconnect_after_sending` (the socket stays usable)."""
        self.disconnect_after_sending()

    def __repr__(self) -> str:
        if self._handle is None:
            return "<socketkit.UdpSocket closed>"
        if self.is_closed:
            state = "idle"
        elif self.is_connected:
            state = f"connected to {self.connected_address}"
        else:
            state = f"bound to {self.local_address}"
        return f"<socketkit.UdpSocket {state} handle={self._handle:#x}>"

    # ---- configuration -------------------------------------------------------------------

    ipv4_enabled = flag_property(lib.sk_udp_socket_is_ipv4_enabled, lib.sk_udp_socket_set_ipv4_enabled,
                                 "Whether IPv4 is used (default True). Set before the first bind, connect or send.")
    ipv6_enabled = flag_property(lib.sk_udp_socket_is_ipv6_enabled, lib.sk_udp_socket_set_ipv6_enabled,
                                 "Whether IPv6 is used (default True). Set before the first bind, connect or send.")

    @property
    def address_preference(self) -> AddressPreference:
        """Which resolved address of a host name sends and connects use."""
        return AddressPreference(raise_for(lib.sk_udp_socket_get_address_preference(self.handle)))

    @address_preference.setter
    def address_preference(self, preference: Union[AddressPreference, int]) -> None:
        raise_for(lib.sk_udp_socket_set_address_preference(self.handle, check_int(preference)))

    @property
    def max_receive_sizes(self) -> Tuple[int, int]:
        """(IPv4, IPv6): the largest datagram delivered per family (1...65535, 65535 by
        default); larger ones are dropped and reported as TruncatedError."""
        ipv4, ipv6 = c_size_t(), c_size_t()
        raise_for(lib.sk_udp_socket_get_max_receive_sizes(self.handle, byref(ipv4), byref(ipv6)))
        return (ipv4.value, ipv6.value)

    @max_receive_sizes.setter
    def max_receive_sizes(self, sizes: Tuple[int, int]) -> None:
        ipv4, ipv6 = sizes
        self._request(lib.sk_udp_socket_set_max_receive_sizes, check_size(ipv4, "ipv4_size"),
                      check_size(ipv6, "ipv6_size"))

    @property
    def buffer_sizes(self) -> Tuple[int, int]:
        """(send, receive) sizes requested with SO_SNDBUF/SO_RCVBUF when descriptors are
        made; 0 = the kernel's default."""
        send, receive = c_int(), c_int()
        raise_for(lib.sk_udp_socket_get_buffer_sizes(self.handle, byref(send), byref(receive)))
        return (send.value, receive.value)

    @buffer_sizes.setter
    def buffer_sizes(self, sizes: Tuple[int, int]) -> None:
        send, receive = sizes
        self._request(lib.sk_udp_socket_set_buffer_sizes, check_int(send), check_int(receive))

    # ---- binding and connecting ----------------------------------------------------------

    def bind_to_port(self, port: int = 0, interface: Optional[str] = _NO_INTERFACE) -> None:
        """Binds every enabled family to `port` (0: one free port for both families), on
        every interface. Raises AddressInUseError, PermissionError, BadConfigError (bound
        already, or after a connect or send).

        ``bind_to_port(port, interface)`` is the former spelling of
        :meth:`bind_to_interface` (interface, port): it still works and warns
        (DeprecationWarning); every other call takes the host or interface first."""
        if interface is not _NO_INTERFACE:
            warnings.warn("UdpSocket.bind_to_port(port, interface) is deprecated: use bind_to_interface(interface, "
                          "port), host before port as everywhere else", DeprecationWarning, stacklevel=2)
        else:
            interface = None
        self.bind_to_interface(interface, port)

    def bind_to_interface(self, interface: Optional[str], port: int = 0) -> None:
        """Binds every enabled family on `interface` (None: any; "localhost"; a name such as
        "lo"; an IP address) to `port` (0: one free port for both families), as
        :meth:`Socket.accept_on_interface` listens. Raises AddressInUseError,
        PermissionError, BadParamError (unknown interface), BadConfigError (bound already,
        or after a connect or send)."""
        self._request(lib.sk_udp_socket_bind_to_port, _addresses.interface(interface), check_port(port))

    def bind_to_address(self, address: IPAddress) -> None:
        """Binds the address's family only, to ("ip", port); the other family is given up."""
        raw = _addresses.ip_sockaddr(address)
        self._request(lib.sk_udp_socket_bind_to_address, raw, len(raw))

    def connect_to_host(self, host: str, port: int) -> None:
        """Connects (queued behind earlier sends; the name is resolved off the loop): only
        that peer can then send to the socket. ``udp_socket_did_connect(sock, address)`` or
        ``udp_socket_did_not_connect(sock, error)`` follows."""
        self._request(lib.sk_udp_socket_connect_to_host, _addresses.host(host), check_port(port))

    def connect_to_address(self, address: IPAddress) -> None:
        """Connects to ("ip", port), without name resolution."""
        raw = _addresses.ip_sockaddr(address)
        self._request(lib.sk_udp_socket_connect_to_address, raw, len(raw))

    # ---- sending (send_to_address() itself is UdpSocketIO's) -----------------------------

    def send(self, data: BytesLike, timeout: float = -1, tag: int = 0) -> None:
        """Queues a datagram (copied; 0...65535 bytes) to the connected peer.
        ``udp_socket_did_send(sock, tag)`` or ``udp_socket_did_not_send(sock, tag, error)``
        follows. `timeout` (seconds, negative: none) counts from when the datagram reaches
        the head of the queue."""
        source, length = send_source(data)
        self._request(lib.sk_udp_socket_send, source, length, float(timeout), check_tag(tag))

    def send_to_host(self, data: BytesLike, host: str, port: int, timeout: float = -1, tag: int = 0) -> None:
        """Queues a datagram to `host` (resolved off the loop: a name that does not resolve
        comes back as ``udp_socket_did_not_send`` with ResolutionError)."""
        source, length = send_source(data)
        self._request(lib.sk_udp_socket_send_to_host, source, length, _addresses.host(host), check_port(port),
                      float(timeout), check_tag(tag))

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
            raise bad_param(f"the {which} filter must be callable or None")
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
        raise_for(status, error)
        self._filter_queues[which] = queue

    # ---- receiving -----------------------------------------------------------------------

    def receive_once(self) -> None:
        """Delivers the next datagram (one the receive filter keeps), then stops. Raises
        BadConfigError before the socket has descriptors (bind, connect or send first)."""
        self._request(lib.sk_udp_socket_receive_once)

    def begin_receiving(self) -> None:
        """Delivers every datagram until :meth:`pause_receiving` or close."""
        self._request(lib.sk_udp_socket_begin_receiving)

    def pause_receiving(self) -> None:
        """Stops reading (datagrams wait in the kernel); callbacks already queued still come."""
        raise_for(lib.sk_udp_socket_pause_receiving(self.handle))

    # ---- multicast, broadcast, reuse -----------------------------------------------------

    def join_multicast_group(self, group: str, interface: Optional[str] = None) -> None:
        """Joins `group` (a numeric IPv4 or IPv6 address) on `interface` (None: the kernel's
        choice; a name, "localhost", or an IP address of one). Needs a bound, unconnected
        socket."""
        self._request(lib.sk_udp_socket_join_multicast_group, _ffi.c_string(group, "the multicast group"),
                      _addresses.interface(interface))

    def leave_multicast_group(self, group: str, interface: Optional[str] = None) -> None:
        """Leaves `group` (SystemCallError EADDRNOTAVAIL if it was not joined)."""
        self._request(lib.sk_udp_socket_leave_multicast_group, _ffi.c_string(group, "the multicast group"),
                      _addresses.interface(interface))

    @property
    def receives_packet_info(self) -> bool:
        """Packet info (IP_PKTINFO / IPV6_RECVPKTINFO; False by default): each datagram comes
        with the address it was sent to and the interface it arrived on, through
        ``udp_socket_did_receive_with_packet_info``. Applies to the descriptors there are and
        those made later; datagrams the kernel queued before it was turned on come without."""
        return bool(raise_for(lib.sk_udp_socket_get_receives_packet_info(self.handle)))

    @receives_packet_info.setter
    def receives_packet_info(self, enabled: bool) -> None:
        self._request(lib.sk_udp_socket_set_receives_packet_info, int(bool(enabled)))

    @property
    def send_segment_size(self) -> int:
        """UDP segmentation offload (UDP_SEGMENT; 0, the default: off): each datagram sent
        larger than this leaves as datagrams of this size (the last shorter), cut by the
        kernel after one trip through the stack. The kernel's limits hold (at most 64
        segments, the size within the MTU): sends beyond them fail alone
        (``udp_socket_did_not_send``). BadParamError above 65535; SystemCallError ENOPROTOOPT
        on a kernel without it (no silent fallback)."""
        size = c_size_t(0)
        raise_for(lib.sk_udp_socket_get_send_segment_size(self.handle, byref(size)))
        return size.value

    @send_segment_size.setter
    def send_segment_size(self, size: int) -> None:
        self._request(lib.sk_udp_socket_set_send_segment_size, check_size(size, "the segment size"))

    @property
    def receive_offload(self) -> bool:
        """UDP receive offload (UDP_GRO; False by default): the kernel may hand over several
        datagrams of one sender in one buffer; SocketKit cuts them apart again, so the
        delegate sees the same datagrams, in order, each held to the receive limit.
        SystemCallError ENOPROTOOPT on a kernel without it."""
        return bool(raise_for(lib.sk_udp_socket_get_receive_offload(self.handle)))

    @receive_offload.setter
    def receive_offload(self, enabled: bool) -> None:
        self._request(lib.sk_udp_socket_set_receive_offload, int(bool(enabled)))

    def join_multicast_source(self, group: str, source: str, interface: Optional[str] = None) -> None:
        """Source-specific multicast: receives what `source` sends to `group` and nothing
        others send to it (both numeric, one family; IPv4's SSM range is 232.0.0.0/8).
        Otherwise as :meth:`join_multicast_group`."""
        self._request(lib.sk_udp_socket_join_multicast_source, _ffi.c_string(group, "the multicast group"),
                      _ffi.c_string(source, "the source"), _addresses.interface(interface))

    def leave_multicast_source(self, group: str, source: str, interface: Optional[str] = None) -> None:
        """Stops receiving what `source` sends to `group` (SystemCallError if not joined:
        EADDRNOTAVAIL, or EINVAL when the group has no source joined)."""
        self._request(lib.sk_udp_socket_leave_multicast_source, _ffi.c_string(group, "the multicast group"),
                      _ffi.c_string(source, "the source"), _addresses.interface(interface))

    def send_ipv4_multicast_on_interface(self, interface: str) -> None:
        """The interface IPv4 multicast leaves through (IP_MULTICAST_IF)."""
        self._request(lib.sk_udp_socket_send_ipv4_multicast_on_interface, _ffi.c_string(interface, "the interface"))

    def send_ipv6_multicast_on_interface(self, interface: str) -> None:
        """The interface IPv6 multicast leaves through (IPV6_MULTICAST_IF)."""
        self._request(lib.sk_udp_socket_send_ipv6_multicast_on_interface, _ffi.c_string(interface, "the interface"))

    def set_multicast_ttl(self, ttl: int) -> None:
        """Multicast TTL / hop limit (0...255), both families."""
        self._request(lib.sk_udp_socket_set_multicast_ttl, check_int(ttl))

    def set_multicast_loopback(self, enabled: bool) -> None:
        """Whether this host's own multicast comes back to it (the kernel's default: yes)."""
        self._request(lib.sk_udp_socket_set_multicast_loopback, int(bool(enabled)))

    def enable_broadcast(self, enabled: bool = True) -> None:
        """SO_BROADCAST (IPv4): without it a send to a broadcast address fails with EACCES."""
        self._request(lib.sk_udp_socket_enable_broadcast, int(bool(enabled)))

    def enable_reuse_port(self, enabled: bool = True) -> None:
        """SO_REUSEPORT (several sockets on one port); before binding."""
        self._request(lib.sk_udp_socket_enable_reuse_port, int(bool(enabled)))

    def enable_reuse_address(self, enabled: bool = True) -> None:
        """SO_REUSEADDR; before binding."""
        self._request(lib.sk_udp_socket_enable_reuse_address, int(bool(enabled)))

    # ---- diagnostics ---------------------------------------------------------------------

    is_connected = flag_property(lib.sk_udp_socket_is_connected)
    is_closed = flag_property(lib.sk_udp_socket_is_closed,
                              doc="True while the socket has no descriptors (fresh, or after :meth:`disconnect`).")
    is_ipv4 = flag_property(lib.sk_udp_socket_is_ipv4,
                            doc="With descriptors: whether an IPv4 one exists; before: whether IPv4 is enabled.")
    is_ipv6 = flag_property(lib.sk_udp_socket_is_ipv6)

    # "IPv4 if the socket has it, else IPv6" (AF_UNSPEC) is asked as AF_INET, then AF_INET6.

    def _local_host(self, family: int) -> Optional[str]:
        if family == _stdlib_socket.AF_UNSPEC:
            return self._local_host(_AF_INET) or self._local_host(_AF_INET6)
        return self._text(lib.sk_udp_socket_get_local_host, family)

    def _local_port(self, family: int) -> int:
        return self._port_of(lib.sk_udp_socket_get_local_port, family)

    def _local_address(self, family: int) -> Optional[IPAddress]:
        if family == _stdlib_socket.AF_UNSPEC:
            return self._local_address(_AF_INET) or self._local_address(_AF_INET6)
        raw = self._sockaddr_of(lib.sk_udp_socket_get_local_address, family)
        return ip_address_from_sockaddr(raw) if raw is not None else None

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
        return self._text(lib.sk_udp_socket_get_connected_host)

    @property
    def connected_port(self) -> int:
        """The connected peer's port, or 0."""
        return self._port_of(lib.sk_udp_socket_get_connected_port)

    @property
    def connected_address(self) -> Optional[IPAddress]:
        raw = self._sockaddr_of(lib.sk_udp_socket_get_connected_address)
        return ip_address_from_sockaddr(raw) if raw is not None else None
