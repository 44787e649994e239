# SPDX-License-Identifier: MIT
"""The TCP and Unix-domain socket: :class:`Socket` (GCDAsyncSocket's model)."""
from __future__ import annotations

import ctypes
import enum
import os
from ctypes import byref, c_double, c_int, c_long, c_size_t, c_uint16, c_void_p
from dataclasses import dataclass
from typing import Any, Callable, List, NamedTuple, Optional, Tuple, Union
from urllib.parse import unquote, urlsplit

from . import _addresses, _ffi
from ._addresses import Address, address_from_sockaddr
from ._dispatch import socket_delegate_struct
from ._ffi import lib
from ._handles import UNSET, Handle, adopting, flag_property, next_token
from ._hotpaths import BytesLike, SocketIO
from ._queues import CallbackQueue, LoopGroup, default_queue
from ._status import bad_param, check_int, check_port, check_size, check_tag, raise_for
from ._tls import TLSInfo, TLSSettings, _tls_info


class ProxyProtocol(enum.IntEnum):
    """Which PROXY protocol header a listener expects (sk_proxy_protocol_t,
    :attr:`Socket.proxy_protocol`)."""

    NONE = 0  #: no header: the first bytes are the client's (default)
    V1 = 1  #: the text header of version 1 only
    V2 = 2  #: the binary header of version 2 only
    EITHER = 3  #: either, told apart by the first byte

#: Separators for :meth:`Socket.read_to_data`.
CRLF = b"\r\n"
CR = b"\r"
LF = b"\n"
ZERO = b"\x00"


@dataclass(frozen=True)
class Progress:
    """How far the current read or write has got; ``total`` is None when unknown."""

    tag: int
    done: int
    total: Optional[int]


@dataclass(frozen=True)
class PeerCredentials:
    """The process, user and group at the other end of a Unix-domain connection, as the
    kernel recorded them when it was made (SO_PEERCRED)."""

    pid: int
    uid: int
    gid: int


def _abstract_name(path: Any) -> Optional[bytes]:
    """The name of a Linux abstract Unix-domain address given as the socket module gives
    one (a str or bytes starting with NUL), else None."""
    if isinstance(path, str) and path.startswith("\0"):
        return path[1:].encode()
    if isinstance(path, (bytes, bytearray)) and path[:1] == b"\0":
        return bytes(path[1:])
    return None


def socket_activation_fds(unset_environment: bool = True) -> List[int]:
    """The listening descriptors systemd's socket activation passed to this process
    (sd_listen_fds(3)): LISTEN_FDS of them from 3 on, when LISTEN_PID is this process; []
    otherwise. Made close-on-exec; the variables are removed unless `unset_environment` is
    False. Hand them to :meth:`Socket.accept_on_fds`. BadParamError for malformed variables."""
    error = _ffi.CError()
    # First the count (the variables kept), then the descriptors (removing them if asked).
    count = lib.sk_socket_activation_fds(None, 0, 0, byref(error))
    raise_for(count, error)
    fds = (c_int * max(1, count))()
    found = lib.sk_socket_activation_fds(fds, count, 1 if unset_environment else 0, byref(error))
    raise_for(found, error)
    if unset_environment:
        # os.environ is Python's own copy, which subprocess hands to children.
        for name in ("LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"):
            os.environ.pop(name, None)
    return list(fds[:min(found, count)])


@dataclass(frozen=True)
class KeepAlive:
    """TCP keep-alive: probe after `idle` seconds, every `interval` seconds, `count` times."""

    idle: int = 60
    interval: int = 10
    count: int = 6



_PROXY_NONE, _PROXY_SOCKS5, _PROXY_HTTP_CONNECT = 0, 1, 2


class Proxy(NamedTuple):
    """A proxy for :attr:`Socket.proxy`: ``kind`` ``"socks5"`` (RFC 1928; username and
    password by RFC 1929, 1-255 bytes each) or ``"http-connect"`` (HTTP CONNECT; username
    and password as Basic ``Proxy-Authorization``), the proxy's ``host`` and ``port``, and
    optional credentials (both or neither)."""

    kind: str
    host: str
    port: int
    username: Optional[str] = None
    password: Optional[str] = None

    @classmethod
    def from_url(cls, url: str) -> "Proxy":
        """``socks5://[user:password@]host:port`` (``socks5h://`` too: the name is always
        sent to the proxy unresolved) or ``http://[user:password@]host:port``; user and
        password percent-decoded. BadParamError for another scheme or no port."""
        parts = urlsplit(url)
        kinds = {"socks5": "socks5", "socks5h": "socks5", "http": "http-connect"}
        try:
            port = parts.port
        except ValueError:
            port = None
        if parts.scheme not in kinds or not parts.hostname or port is None:
            raise bad_param(f"not a proxy URL (socks5://host:port or http://host:port): {url!r}")
        username = unquote(parts.username) if parts.username is not None else None
        password = unquote(parts.password) if parts.password is not None else None
        return cls(kinds[parts.scheme], parts.hostname, port, username, password)

class Socket(SocketIO, Handle):
    """An asynchronous TCP or Unix-domain socket (GCDAsyncSocket's model).

    ``delegate`` is any object; SocketKit calls the methods it defines, named after the
    C delegate members: ``socket_did_connect(sock, host, port)``,
    ``socket_did_read(sock, data, tag)``, ``socket_did_write(sock, tag)``,
    ``socket_did_disconnect(sock, error)``, ``socket_did_accept(listener, new_sock)``, ...
    and for TLS (:meth:`start_tls`) ``socket_did_secure(sock)`` and, with manual trust
    evaluation, ``socket_did_receive_trust(sock, trust)`` (see :class:`TLSTrust`); for
    :meth:`cancel_read`, ``socket_did_cancel_read(sock, tag, unread_bytes)``.
    They run on ``queue``: by default a SocketKit thread shared by all sockets
    (:func:`default_queue`); a :class:`HostQueue` to run them yourself (see
    :mod:`socketkit.aio` for asyncio); ``None`` for SocketKit's loop thread.

    Without a delegate (None) a socket cannot connect or accept: those raise
    :class:`BadConfigError`, as in C and Swift; set :attr:`delegate` first.

    Closing (the same words as :class:`UdpSocket`'s, those of asyncio's transports):
    :meth:`close` closes for good once the writes already queued are sent, and the ``with``
    statement ends with it; :meth:`abort` (or :meth:`release`) closes for good at once,
    dropping them; afterwards every method raises :class:`InvalidHandleError`. Keep a
    reference: a socket nobody holds is aborted. :meth:`disconnect` and its
    ``disconnect_after_*`` forms end the connection (or stop the listener) and keep the
    socket, which can connect or accept again.

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

    _KIND = "socket"
    _delegate_struct = staticmethod(socket_delegate_struct)
    _c_set_delegate = lib.sk_socket_set_delegate
    _c_set_callback_queue = lib.sk_socket_set_callback_queue
    _c_perform = lib.sk_socket_perform

    def __init__(self, delegate: Any = None, *, queue: Optional[CallbackQueue] = UNSET,
                 loop_group: Optional[LoopGroup] = None) -> None:
        self._init_socket(delegate, default_queue() if queue is UNSET else queue)
        handle = c_void_p()
        error = _ffi.CError()
        delegate_pointer, delegate_size = socket_delegate_struct(delegate)
        raise_for(lib.sk_socket_create(delegate_pointer, delegate_size, None, self._queue_handle,
                                       loop_group.handle if loop_group is not None else None,
                                       byref(handle), byref(error)), error)
        self._register(_ffi.created(handle))

    def _init_socket(self, delegate: Any, queue: Optional[CallbackQueue]) -> None:
        self._init_handle(delegate, queue)
        # Caller buffers of pending *_into reads: (start address, end address, view, session).
        # The view keeps the buffer exported (unmovable) until SocketKit is done with it: its
        # read completed, its session ended (did_disconnect), or the socket was released.
        # A shared empty tuple until a caller buffer is pinned: most sockets never pin one.
        self._pending_buffers: Union[Tuple[()], List[Tuple[int, int, memoryview, int]]] = ()
        # Sessions (connect, accept, adopt) started and ended: each ends with exactly one
        # did_disconnect, in order, so a late did_disconnect unpins only its own session's buffers.
        self._sessions_started = 0
        self._sessions_ended = 0

    def _accepted(self, handle: int) -> "Socket":
        """A connection this listener accepted (a handle SocketKit made), with the listener's
        delegate and queue."""
        sock = Socket.__new__(Socket)
        sock._init_socket(self._delegate, self._queue)
        sock._sessions_started = 1
        sock._register(handle)
        return sock

    def _session_ended(self) -> None:
        self._sessions_ended += 1
        ended = self._sessions_ended
        self._pending_buffers = [pin for pin in self._pending_buffers if pin[3] > ended] or ()

    @classmethod
    def from_fd(cls, fd: int, delegate: Any = None, *, queue: Optional[CallbackQueue] = UNSET,
                loop_group: Optional[LoopGroup] = None) -> "Socket":
        """Wraps an already connected TCP or Unix stream socket descriptor. On success the
        socket owns it (detach it from any Python socket object first) and
        ``socket_did_connect`` follows."""
        sock = cls.__new__(cls)
        sock._init_socket(delegate, default_queue() if queue is UNSET else queue)
        handle = c_void_p()
        error = _ffi.CError()
        delegate_pointer, delegate_size = socket_delegate_struct(delegate)
        token = next_token()
        adopting[token] = sock
        try:
            status = lib.sk_socket_create_from_fd(
                fd, delegate_pointer, delegate_size, token, sock._queue_handle,
                loop_group.handle if loop_group is not None else None, byref(handle), byref(error))
        finally:
            adopting.pop(token, None)
        raise_for(status, error)
        sock._sessions_started = 1
        sock._register(_ffi.created(handle))
        return sock

    # ---- lifetime ------------------------------------------------------------------------

    def close(self) -> None:
        """Closes the socket for good, gracefully. Writes already queued are still sent
        before the connection closes (as asyncio's ``transport.close()`` does), for at most
        two minutes, also when the socket is still connecting: it goes on connecting (within
        its connect timeout) and through a queued :meth:`start_tls` handshake. Queued reads
        are dropped (except those ahead of such a handshake, which waits for them). A
        listener's descriptors are closed before this returns. No delegate method runs
        after this returns (one running on another thread is waited for, unless that would
        deadlock). Idempotent."""
        if self._handle is not None:
            lib.sk_socket_disconnect_after_writing(self._handle)
        self._release()

    def _release_handle(self, handle: int) -> None:
        lib.sk_socket_release(handle)
        self._pending_buffers = ()  # SocketKit writes into them no more

    def __repr__(self) -> str:
        if self._handle is None:
            return "<socketkit.Socket closed>"
        state = "connected" if self.is_connected else ("accepting" if self.is_accepting else
                                                       ("disconnected" if self.is_disconnected else "connecting"))
        return f"<socketkit.Socket {state} handle={self._handle:#x}>"

    # ---- configuration -------------------------------------------------------------------

    ipv4_enabled = flag_property(lib.sk_socket_is_ipv4_enabled, lib.sk_socket_set_ipv4_enabled)
    ipv6_enabled = flag_property(lib.sk_socket_is_ipv6_enabled, lib.sk_socket_set_ipv6_enabled)
    ipv4_preferred_over_ipv6 = flag_property(lib.sk_socket_is_ipv4_preferred_over_ipv6,
                                             lib.sk_socket_set_ipv4_preferred_over_ipv6)

    @property
    def alternate_address_delay(self) -> float:
        value = c_double()
        raise_for(lib.sk_socket_get_alternate_address_delay(self.handle, byref(value)))
        return value.value

    @alternate_address_delay.setter
    def alternate_address_delay(self, seconds: float) -> None:
        raise_for(lib.sk_socket_set_alternate_address_delay(self.handle, float(seconds)))

    @property
    def resolution_delay(self) -> float:
        """Happy Eyeballs v2's resolution delay (RFC 8305) in seconds, 0.05 by default: a
        name's A and AAAA records are asked for apart and connecting starts with the first
        answer; the other family's waits this long for the preferred family's. Negative or
        NaN become 0."""
        value = c_double()
        raise_for(lib.sk_socket_get_resolution_delay(self.handle, byref(value)))
        return value.value

    @resolution_delay.setter
    def resolution_delay(self, seconds: float) -> None:
        raise_for(lib.sk_socket_set_resolution_delay(self.handle, float(seconds)))

    auto_disconnect_on_closed_read_stream = flag_property(
        lib.sk_socket_get_auto_disconnect_on_closed_read_stream,
        lib.sk_socket_set_auto_disconnect_on_closed_read_stream,
        """When the peer closes its side: True (default) ends the connection
        (``socket_did_disconnect`` with :class:`ClosedError`), False keeps it open for
        writing and calls ``socket_did_close_read_stream``; either once every byte that
        arrived before the close has been read (at once when none is unread, whether or not
        a read is queued). A reset is reported the same way, as
        :class:`ConnectionResetError`, after the bytes that came before it.""")

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
        raise_for(lib.sk_socket_get_maximum_read_length(self.handle, byref(value)))
        return value.value

    @maximum_read_length.setter
    def maximum_read_length(self, length: int) -> None:
        raise_for(lib.sk_socket_set_maximum_read_length(self.handle, check_size(length, "length")))

    @property
    def write_watermarks(self) -> Tuple[int, int]:
        """(low, high) in bytes."""
        low, high = c_size_t(), c_size_t()
        raise_for(lib.sk_socket_get_write_watermarks(self.handle, byref(low), byref(high)))
        return (low.value, high.value)

    @write_watermarks.setter
    def write_watermarks(self, marks: Tuple[int, int]) -> None:
        low, high = marks
        error = _ffi.CError()
        raise_for(lib.sk_socket_set_write_watermarks(self.handle, check_size(low, "low"), check_size(high, "high"),
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
        raise_for(lib.sk_socket_get_maximum_queued_write_bytes(self.handle, byref(value)))
        return value.value

    @maximum_queued_write_bytes.setter
    def maximum_queued_write_bytes(self, maximum: int) -> None:
        raise_for(lib.sk_socket_set_maximum_queued_write_bytes(self.handle, check_size(maximum, "maximum")))

    no_delay = flag_property(
        lib.sk_socket_get_no_delay, lib.sk_socket_set_no_delay,
        """TCP_NODELAY: small writes leave at once instead of waiting under Nagle's
        algorithm for earlier data to be acknowledged. True by default, as asyncio sets it
        on every TCP transport: SocketKit already sends what is queued together, and Nagle
        costs a delayed-ACK wait (40 ms on Linux) whenever a message leaves in two sends
        the peer does not answer in between (a response behind a TLS server's session
        tickets). Accepted sockets take the listener's setting.""")

    @property
    def keep_alive(self) -> Optional[KeepAlive]:
        enabled, idle, interval, count = c_int(), c_int(), c_int(), c_int()
        raise_for(lib.sk_socket_get_keep_alive(self.handle, byref(enabled), byref(idle), byref(interval),
                                                byref(count)))
        return KeepAlive(idle.value, interval.value, count.value) if enabled.value else None

    @keep_alive.setter
    def keep_alive(self, settings: Optional[KeepAlive]) -> None:
        error = _ffi.CError()
        if settings is None:
            status = lib.sk_socket_set_keep_alive(self.handle, 0, 0, 0, 0, byref(error))
        else:
            status = lib.sk_socket_set_keep_alive(self.handle, 1, check_int(settings.idle),
                                                  check_int(settings.interval), check_int(settings.count),
                                                  byref(error))
        raise_for(status, error)

    @property
    def buffer_sizes(self) -> Tuple[int, int]:
        """(send, receive) sizes requested with SO_SNDBUF/SO_RCVBUF; 0 = the kernel's default."""
        send, receive = c_int(), c_int()
        raise_for(lib.sk_socket_get_buffer_sizes(self.handle, byref(send), byref(receive)))
        return (send.value, receive.value)

    @buffer_sizes.setter
    def buffer_sizes(self, sizes: Tuple[int, int]) -> None:
        send, receive = sizes
        error = _ffi.CError()
        raise_for(lib.sk_socket_set_buffer_sizes(self.handle, check_int(send), check_int(receive), byref(error)), error)

    reuse_port = flag_property(
        lib.sk_socket_get_reuse_port, lib.sk_socket_set_reuse_port,
        """SO_REUSEPORT on the listening sockets :meth:`accept_on_port` and
        :meth:`accept_on_interface` make (False by default): other sockets with it set (of
        this process or another of the same user) may listen on the same port, and the kernel
        spreads new connections among them.""")

    accepts_on_every_loop = flag_property(
        lib.sk_socket_get_accepts_on_every_loop, lib.sk_socket_set_accepts_on_every_loop,
        """A listener with one accepting socket per loop of its :class:`LoopGroup` (False by
        default): the kernel spreads connections over the loops (SO_REUSEPORT), and each
        connection lives on the loop that accepted it, with no hand-off between threads.
        ``socket_did_accept`` names this socket as the listener; with ``queue=None`` it runs
        on the accepting loop, so two loops' may run at once. Everything else (getters,
        disconnect, close, delegate changes) is as for one listener.""")

    @property
    def proxy_protocol(self) -> ProxyProtocol:
        """The PROXY protocol header (HAProxy's, v1 text or v2 binary) every connection this
        listener accepts must begin with (:attr:`ProxyProtocol.NONE` by default), for a
        listener behind a load balancer that sends one (HAProxy ``send-proxy``,
        ``send-proxy-v2``); ``EITHER`` tells the versions apart by the first byte. A
        connection reaches ``socket_did_accept`` only once its whole header has arrived; its
        :attr:`connected_address` (host, port) is then the header's source (the client), its
        :attr:`local_address` the header's destination, and :attr:`proxy_address` the proxy
        it came from. A v2 LOCAL header (a health check) or v1 ``UNKNOWN`` keeps the real
        addresses; v2 TLVs are skipped, except a CRC32C, which must match the header. What
        the client sent after the header is the first
        read, or the TLS handshake (the header comes before the ClientHello). A malformed,
        oversized or cut-short header, or one not complete within
        :attr:`proxy_header_timeout`, closes that connection alone with a warning in the
        engine's log (subsystem ``accept``); the listener goes on. Set before accepting."""
        return ProxyProtocol(raise_for(lib.sk_socket_get_proxy_protocol(self.handle)))

    @proxy_protocol.setter
    def proxy_protocol(self, mode: Union[ProxyProtocol, int]) -> None:
        raise_for(lib.sk_socket_set_proxy_protocol(self.handle, check_int(mode)))

    @property
    def proxy_header_timeout(self) -> float:
        """Seconds an accepted connection may take to send its whole PROXY protocol header
        (default 5); BadParamError unless 0 < seconds <= 86400."""
        value = c_double()
        raise_for(lib.sk_socket_get_proxy_header_timeout(self.handle, byref(value)))
        return value.value

    @proxy_header_timeout.setter
    def proxy_header_timeout(self, seconds: float) -> None:
        error = _ffi.CError()
        raise_for(lib.sk_socket_set_proxy_header_timeout(self.handle, float(seconds), byref(error)), error)

    @property
    def user_timeout(self) -> float:
        """TCP_USER_TIMEOUT in seconds: how long written data may stay unacknowledged before
        the kernel gives up on the connection (``socket_did_disconnect`` with a
        :class:`SystemCallError` of errno ETIMEDOUT); 0 (default) leaves the kernel's. Accepted
        sockets take the listener's; applies at once when connected; millisecond resolution.
        Negative, NaN, infinite or above about 24 days: BadParamError."""
        value = c_double()
        raise_for(lib.sk_socket_get_user_timeout(self.handle, byref(value)))
        return value.value

    @user_timeout.setter
    def user_timeout(self, seconds: float) -> None:
        error = _ffi.CError()
        raise_for(lib.sk_socket_set_user_timeout(self.handle, float(seconds), byref(error)), error)

    fast_open = flag_property(
        lib.sk_socket_get_fast_open, lib.sk_socket_set_fast_open,
        """TCP Fast Open (False by default; TCP only). A listener accepts data in the
        client's SYN; a connect sends its first write with the SYN when the kernel has a
        cookie from an earlier connection to that server (otherwise it asks for one and
        connects as usual). net.ipv4.tcp_fastopen must allow it (bit 1 clients, the default;
        bit 2 servers). With a cookie, ``socket_did_connect`` comes before the handshake: a
        server that is not there ends the connection with ConnectionRefusedError after it.
        Queue the first write right after the connect for it to ride in the SYN.""")

    @property
    def proxy(self) -> Optional[Proxy]:
        """The proxy connects go through, or None (the default: directly). Set it before
        connecting, as a :class:`Proxy` or a URL (``"socks5://user:password@host:1080"``,
        ``"http://host:3128"``; :meth:`Proxy.from_url`), or None. :meth:`connect_to_host`
        and :meth:`connect_to_address` with an IP address then connect to the proxy (its
        name resolved, Happy Eyeballs and the connect timeout as for any host), send it the
        target unresolved (the proxy resolves a name; IP literals go as addresses), and call
        ``socket_did_connect`` with the target's host and port once the proxy said yes. The
        connect timeout covers the proxy's handshake; reads, writes and :meth:`start_tls`
        queued meanwhile run afterwards, TLS verifying the target's name. Unix-domain
        connects never use it. :attr:`connected_host` and :attr:`connected_port` give the
        target, :attr:`connected_address` the proxy's address. Failures arrive in
        ``socket_did_disconnect``: :class:`ProxyError` (``errno``: the SOCKS5 reply code or
        HTTP status), :class:`ProxyAuthenticationError`, the ``SystemCallError`` of an
        unreachable proxy, :class:`ConnectTimeoutError`. Reading it gives the kind, host and
        port, never the credentials. BadConfigError while connecting or connected;
        BadParamError for settings the proxy cannot take."""
        kind = c_int()
        port = c_uint16()
        buffer = ctypes.create_string_buffer(1024)
        raise_for(lib.sk_socket_get_proxy(self.handle, byref(kind), buffer, len(buffer), byref(port)))
        if kind.value == _PROXY_NONE:
            return None
        return Proxy("socks5" if kind.value == _PROXY_SOCKS5 else "http-connect", buffer.value.decode(), port.value)

    @proxy.setter
    def proxy(self, proxy: Union[Proxy, str, None]) -> None:
        if isinstance(proxy, str):
            proxy = Proxy.from_url(proxy)
        error = _ffi.CError()
        if proxy is None:
            raise_for(lib.sk_socket_set_proxy(self.handle, _PROXY_NONE, None, 0, None, None, byref(error)), error)
            return
        if not isinstance(proxy, Proxy):
            raise bad_param("proxy must be a socketkit.Proxy, a URL or None")
        kinds = {"socks5": _PROXY_SOCKS5, "http-connect": _PROXY_HTTP_CONNECT}
        if proxy.kind not in kinds:
            raise bad_param("a proxy's kind is 'socks5' or 'http-connect'")
        raise_for(lib.sk_socket_set_proxy(self.handle, kinds[proxy.kind], _addresses.host(proxy.host),
                                          check_port(proxy.port), _ffi.c_string(proxy.username, "the proxy username"),
                                          _ffi.c_string(proxy.password, "the proxy password"), byref(error)), error)

    def set_socket_option(self, level: int, name: int, value: Union[int, BytesLike]) -> None:
        """Sets an option (as :meth:`socket.socket.setsockopt`: an int, or bytes) on every
        descriptor SocketKit makes for this socket from now on, right after creating it:
        before a listener binds and listens, before each connection attempt binds and
        connects (what :meth:`perform` comes too late for: TCP_MAXSEG for the SYN, IP_TOS,
        SO_BINDTODEVICE...). Setting the same level and name again replaces the value. An
        option the kernel refuses makes the accept raise (OSError subclass with its errno),
        or fails the connection attempt (``socket_did_disconnect``). Empty or over 1024
        bytes, more than 64 options: BadParamError."""
        # The buffer the pointer points into stays referenced (`data`) until the call returns.
        data: Union[ctypes.c_int, "ctypes.Array[ctypes.c_char]"]
        if isinstance(value, int) and not isinstance(value, bool):
            data = ctypes.c_int(check_int(value))
            pointer, length = ctypes.addressof(data), ctypes.sizeof(data)
        else:
            raw = bytes(value)
            if not raw:
                raise bad_param("a socket option's value must not be empty")
            data = ctypes.create_string_buffer(raw, len(raw))
            pointer, length = ctypes.addressof(data), len(raw)
        error = _ffi.CError()
        raise_for(lib.sk_socket_set_socket_option(self.handle, check_int(level), check_int(name), pointer, length,
                                                  byref(error)), error)

    def clear_socket_options(self) -> None:
        """Forgets every option :meth:`set_socket_option` set."""
        raise_for(lib.sk_socket_clear_socket_options(self.handle))

    # ---- accepting and connecting --------------------------------------------------------

    def accept_on_port(self, port: int) -> None:
        """Listens on every interface, IPv4 and IPv6; port 0 picks one (see :attr:`local_port`).
        Accepted connections arrive in ``socket_did_accept(listener, new_socket)``."""
        error = _ffi.CError()
        raise_for(lib.sk_socket_accept_on_port(self.handle, check_port(port), byref(error)), error)
        self._sessions_started += 1

    def accept_on_interface(self, interface: Optional[str], port: int) -> None:
        """Listens on an interface name, an address, "localhost" or None (any)."""
        error = _ffi.CError()
        raise_for(lib.sk_socket_accept_on_interface(self.handle, _addresses.interface(interface),
                                                     check_port(port), byref(error)), error)
        self._sessions_started += 1

    def accept_on_unix_path(self, path: str) -> None:
        """Listens on a Unix-domain socket (a stale socket file there is replaced). The file
        is removed when the listener closes, unless a newer listener replaced it. A path
        that starts with NUL (``"\\0name"``, str or bytes, as the socket module takes it) is
        a Linux abstract name: no file at all."""
        error = _ffi.CError()
        name = _abstract_name(path)
        if name is not None:
            status = lib.sk_socket_accept_on_abstract_unix_name(self.handle, name, len(name), byref(error))
        else:
            status = lib.sk_socket_accept_on_unix_path(self.handle, _addresses.unix_path(path), byref(error))
        raise_for(status, error)
        self._sessions_started += 1

    def accept_on_fds(self, fds: List[Any]) -> None:
        """Listens on sockets made elsewhere (asyncio's ``create_server(sock=)``): bound
        stream sockets (TCP or Unix-domain), listening or not, as ints or socket objects, such
        as :func:`socket_activation_fds` gives. On success this Socket owns them (socket
        objects are detached) and closes them when it stops listening; on failure they stay
        yours, unchanged. BadParamError (not bound, connected, of another kind, given twice),
        SystemCallError (not open, not a socket), BadConfigError (already in use, no delegate)."""
        objects = list(fds)
        numbers = [fd if isinstance(fd, int) else fd.fileno() for fd in objects]
        array = (c_int * max(1, len(numbers)))(*[check_int(fd) for fd in numbers])
        error = _ffi.CError()
        raise_for(lib.sk_socket_accept_on_fds(self.handle, array, len(numbers), byref(error)), error)
        for item in objects:
            if not isinstance(item, int):
                item.detach()
        self._sessions_started += 1

    def connect_to_host(self, host: str, port: int, interface: Optional[str] = None, timeout: float = -1) -> None:
        """Connects to a host name or address (every resolved address is raced, Happy
        Eyeballs). `timeout` covers resolution and connecting (negative: none); with 0 the
        connect succeeds only if it completes at once (by the loop's next poll), so a name
        that needs the resolver always ends with ConnectTimeoutError. Reads and writes may
        be queued at once. The outcome arrives as ``socket_did_connect`` or
        ``socket_did_disconnect`` (OtherError when no resolved address is of an enabled
        family). With :attr:`proxy` set, the proxy resolves `host` (see there)."""
        error = _ffi.CError()
        raise_for(lib.sk_socket_connect_to_host(self.handle, _addresses.host(host), check_port(port),
                                                 _addresses.interface(interface), float(timeout),
                                                 byref(error)), error)
        self._sessions_started += 1

    def connect_to_address(self, address: Address, interface: Optional[str] = None, timeout: float = -1) -> None:
        """Connects to ("ip", port) or a Unix path, without name resolution."""
        raw = _addresses.sockaddr(address)
        error = _ffi.CError()
        raise_for(lib.sk_socket_connect_to_address(self.handle, raw, len(raw),
                                                    _addresses.interface(interface), float(timeout),
                                                    byref(error)), error)
        self._sessions_started += 1

    def connect_to_unix_path(self, path: str, timeout: float = -1) -> None:
        """Connects to a Unix-domain socket; a path starting with NUL is an abstract name (see
        :meth:`accept_on_unix_path`), which ``socket_did_connect`` and
        :attr:`connected_unix_path` show as ``"@name"``."""
        error = _ffi.CError()
        name = _abstract_name(path)
        if name is not None:
            status = lib.sk_socket_connect_to_abstract_unix_name(self.handle, name, len(name), float(timeout),
                                                                 byref(error))
        else:
            status = lib.sk_socket_connect_to_unix_path(self.handle, _addresses.unix_path(path), float(timeout),
                                                        byref(error))
        raise_for(status, error)
        self._sessions_started += 1

    # ---- Unix-domain extras --------------------------------------------------------------

    receives_descriptors = flag_property(
        lib.sk_socket_get_receives_descriptors, lib.sk_socket_set_receives_descriptors,
        """Whether reads of a Unix-domain connection keep the descriptors the peer passes
        (SCM_RIGHTS) for :meth:`take_received_descriptors`. False by default: the kernel then
        closes them as their bytes are read. Accepted sockets take the listener's.""")

    def take_received_descriptors(self, limit: Optional[int] = None) -> List[int]:
        """Takes the descriptors the peer passed (up to `limit`), in the order they came:
        yours to close (``os.close``, or ``socket.socket(fileno=...)``). They are there by the
        time the bytes they came with reach a read, possibly earlier; those nobody takes are
        closed when the next session begins or the socket is closed."""
        error = _ffi.CError()
        waiting = lib.sk_socket_take_received_descriptors(self.handle, None, 0, byref(error))
        raise_for(waiting, error)
        count = waiting if limit is None else min(waiting, check_size(limit, "limit"))
        if count == 0:
            return []
        fds = (c_int * count)()
        taken = lib.sk_socket_take_received_descriptors(self.handle, fds, count, byref(error))
        raise_for(taken, error)
        return list(fds[:taken])

    def write_with_descriptors(self, data: BytesLike, fds: List[int], timeout: float = -1, tag: int = 0) -> None:
        """Writes `data` with the descriptors `fds` (1 to 253; ints, or objects with
        ``fileno()``) passed along, as :func:`socket.send_fds` does: they reach the peer with
        the first byte of `data`. SocketKit passes duplicates, so yours stay open. Raises
        BadParamError (empty data, bad descriptors), BadConfigError (not a Unix-domain
        connection, or under TLS)."""
        raw = bytes(data)
        numbers = [fd if isinstance(fd, int) else fd.fileno() for fd in fds]
        array = (c_int * max(1, len(numbers)))(*[check_int(fd) for fd in numbers])
        error = _ffi.CError()
        raise_for(lib.sk_socket_write_with_descriptors(self.handle, raw, len(raw), array, len(numbers), float(timeout),
                                                       check_tag(tag), byref(error)), error)

    def peer_credentials(self) -> PeerCredentials:
        """The peer's process, user and group (SO_PEERCRED) of a connected Unix-domain
        socket; BadConfigError for any other."""
        pid, uid, gid = c_int(), ctypes.c_uint32(), ctypes.c_uint32()
        error = _ffi.CError()
        raise_for(lib.sk_socket_get_peer_credentials(self.handle, byref(pid), byref(uid), byref(gid), byref(error)),
                  error)
        return PeerCredentials(pid.value, uid.value, gid.value)

    # ---- reading (read() itself is SocketIO's) -------------------------------------------

    def read_to_length(self, length: int, timeout: float = -1, tag: int = 0) -> None:
        """Reads exactly `length` bytes (1 to :attr:`maximum_read_length`; BadParamError
        otherwise: see there why, and use :meth:`read_to_length_into` for more)."""
        error = _ffi.CError()
        raise_for(lib.sk_socket_read_to_length(self.handle, check_size(length, "length"), float(timeout),
                                                check_tag(tag), byref(error)), error)

    def read_to_data(self, separator: BytesLike, max_length: int = 0, timeout: float = -1, tag: int = 0) -> None:
        """Reads up to and including `separator`; with `max_length` the connection ends with
        ReadMaxedOutError if that many bytes arrive without it."""
        separator = bytes(separator)
        error = _ffi.CError()
        raise_for(lib.sk_socket_read_to_data(self.handle, separator, len(separator),
                                             check_size(max_length, "max_length"), float(timeout), check_tag(tag),
                                             byref(error)), error)

    def read_into(self, buffer: Any, offset: int = 0, max_length: int = 0, timeout: float = -1,
                  tag: int = 0) -> None:
        """Reads whatever is available into a writable buffer (``bytearray``, writable
        ``memoryview``, ...) at `offset`. ``socket_did_read`` then receives a memoryview of
        the bytes that landed in it. The buffer is held until then."""
        view, address, capacity = self._pin(buffer)
        error = _ffi.CError()
        status = lib.sk_socket_read_into(self.handle, address, capacity, check_size(offset, "offset"),
                                         check_size(max_length, "max_length"), float(timeout), check_tag(tag),
                                         byref(error))
        self._commit_pin(status, error, view, address, capacity)

    def read_to_length_into(self, length: int, buffer: Any, offset: int = 0, timeout: float = -1,
                            tag: int = 0) -> None:
        """Reads exactly `length` bytes into `buffer` at `offset`."""
        view, address, capacity = self._pin(buffer)
        error = _ffi.CError()
        status = lib.sk_socket_read_to_length_into(self.handle, check_size(length, "length"), address, capacity,
                                                   check_size(offset, "offset"), float(timeout), check_tag(tag),
                                                   byref(error))
        self._commit_pin(status, error, view, address, capacity)

    def read_to_data_into(self, separator: BytesLike, buffer: Any, offset: int = 0, max_length: int = 0,
                          timeout: float = -1, tag: int = 0) -> None:
        """Reads up to and including `separator` into `buffer` at `offset`."""
        separator = bytes(separator)
        view, address, capacity = self._pin(buffer)
        error = _ffi.CError()
        status = lib.sk_socket_read_to_data_into(self.handle, separator, len(separator), address, capacity,
                                                 check_size(offset, "offset"), check_size(max_length, "max_length"),
                                                 float(timeout), check_tag(tag), byref(error))
        self._commit_pin(status, error, view, address, capacity)

    def read_to_file(self, length: int, file: Any, timeout: float = -1, tag: int = 0) -> None:
        """Reads exactly `length` bytes into `file` (a regular file open for writing: an int
        descriptor, or an object with ``fileno()``, such as ``open(path, "wb")``), written at
        its position as they arrive, so a large body never sits in memory. Completes with
        ``socket_did_read(sock, b"", tag)``; ``socket_did_read_partial`` and
        :attr:`read_progress` follow it. Flush a Python file object before (its buffer is
        not SocketKit's). BadParamError for anything but a regular file open for writing."""
        fd = file if isinstance(file, int) else file.fileno()
        error = _ffi.CError()
        raise_for(lib.sk_socket_read_to_file(self.handle, check_size(length, "length"), check_int(fd), float(timeout),
                                             check_tag(tag), byref(error)), error)

    def write_file(self, file: Any, offset: int = 0, length: Optional[int] = None, timeout: float = -1,
                   tag: int = 0) -> None:
        """Queues `length` bytes (None: to the end) of `file` (a regular file open for
        reading: an int descriptor, or an object with ``fileno()``) from `offset`, sent with
        sendfile(2) (asyncio's ``loop.sendfile``): no copy through this process. A write in
        the queue like any other (``socket_did_write(sock, tag)``); the file's position is
        untouched and it may be closed at once. Plaintext only: BadConfigError under TLS;
        BadParamError for a bad file or region."""
        fd = file if isinstance(file, int) else file.fileno()
        if offset < 0:
            raise bad_param("negative offset")
        if length is not None and length <= 0:
            raise bad_param("the region is empty")
        error = _ffi.CError()
        raise_for(lib.sk_socket_write_file(self.handle, check_int(fd), int(offset), 0 if length is None else
                                           check_size(length, "length"), float(timeout), check_tag(tag), byref(error)), error)

    def cancel_read(self, tag: int) -> None:
        """Withdraws every queued read with `tag` that has not completed; the bytes the
        current one had gathered go back in front of the unread bytes, so the next read gets
        them, in order: a read can be cancelled without losing data. Queued like a read, in
        order with the reads and :meth:`unread` calls made before it, and answered once by
        ``socket_did_cancel_read(sock, tag, unread_bytes)`` (``unread_bytes``: what SocketKit
        holds ahead of the next read); a read with that tag that had already completed
        delivered its ``socket_did_read`` before that answer. A buffer pinned by a withdrawn
        ``read_*_into`` stays pinned until the session ends."""
        error = _ffi.CError()
        raise_for(lib.sk_socket_cancel_read(self.handle, check_tag(tag), byref(error)), error)

    def unread(self, data: BytesLike) -> None:
        """Puts `data` (copied) in front of the socket's unread bytes, as if it had arrived
        before everything not yet read: the next read gets it first. For bytes a read
        delivered to a caller that no longer wanted them, or a protocol sniffed and not
        consumed. Under TLS it is plaintext. Queued like a read, in order."""
        data = bytes(data)
        error = _ffi.CError()
        raise_for(lib.sk_socket_unread(self.handle, data, len(data), byref(error)), error)

    def _pin(self, buffer: Any) -> Tuple[memoryview, int, int]:
        view = memoryview(buffer)
        if view.readonly:
            raise bad_param("the buffer is read-only: pass a bytearray or a writable memoryview")
        if not view.contiguous:
            raise bad_param("the buffer is not contiguous")
        view = view.cast("B")
        if len(view) == 0:
            raise bad_param("empty buffer")
        export = (ctypes.c_char * len(view)).from_buffer(view)
        return view, ctypes.addressof(export), len(view)

    def _commit_pin(self, status: int, error: _ffi.CError, view: memoryview, address: int, capacity: int) -> None:
        raise_for(status, error)
        if not self._pending_buffers:
            self._pending_buffers = []
        self._pending_buffers.append((address, address + capacity, view, self._sessions_started))

    def _take_read_result(self, data: int, length: int) -> Union[bytes, memoryview]:
        if not length:
            return b""  # a read to a file completes empty, with data NULL
        pending = self._pending_buffers
        for index, (start, end, view, _) in enumerate(pending):
            if start <= data < end:
                assert isinstance(pending, list)  # something was pinned
                del pending[index]
                offset = data - start
                return view[offset:offset + length]
        # Not ctypes.string_at, which is itself a foreign call.
        return (ctypes.c_char * length).from_address(data).raw if length else b""

    @property
    def read_progress(self) -> Optional[Progress]:
        """The current read's progress, or None when no read is under way."""
        return self._progress(lib.sk_socket_read_progress)

    # ---- writing (write() itself is SocketIO's) ------------------------------------------

    @property
    def write_progress(self) -> Optional[Progress]:
        """The current write's progress, or None."""
        return self._progress(lib.sk_socket_write_progress)

    @property
    def queued_write_bytes(self) -> int:
        """Bytes queued and not yet accepted by the kernel."""
        value = c_size_t()
        raise_for(lib.sk_socket_get_queued_write_bytes(self.handle, byref(value)))
        return value.value

    def _progress(self, function: Callable[..., int]) -> Optional[Progress]:
        tag, done, total = c_long(), c_size_t(), c_size_t()
        if not raise_for(function(self.handle, byref(tag), byref(done), byref(total))):
            return None
        return Progress(tag.value, done.value, total.value or None)

    # ---- disconnecting -------------------------------------------------------------------

    def disconnect(self) -> None:
        """Closes the connection now; ``socket_did_disconnect(sock, None)`` follows. The
        socket may connect or accept again. A listener returns with its descriptors closed
        and its Unix-domain socket file removed: a new listener can take the port or path
        at once."""
        raise_for(lib.sk_socket_disconnect(self.handle))

    def disconnect_after_reading(self) -> None:
        """Closes once every queued read completed."""
        raise_for(lib.sk_socket_disconnect_after_reading(self.handle))

    def disconnect_after_writing(self) -> None:
        """Closes once every queued write was written."""
        raise_for(lib.sk_socket_disconnect_after_writing(self.handle))

    def disconnect_after_reading_and_writing(self) -> None:
        """Closes once both queues drained."""
        raise_for(lib.sk_socket_disconnect_after_reading_and_writing(self.handle))

    def disconnect_with_reset(self) -> None:
        """Ends the connection abortively: the peer gets a reset (RST) instead of an orderly
        close, queued writes are dropped, and under TLS no close_notify is sent. Otherwise as
        :meth:`disconnect` (``socket_did_disconnect`` with None follows; the socket can
        connect again)."""
        raise_for(lib.sk_socket_disconnect_with_reset(self.handle))

    def close_write_stream(self) -> None:
        """Half-close (asyncio's ``write_eof``): closes our sending side once the writes
        queued before it are written (FIN; under TLS close_notify, then FIN) and keeps
        reading, so the peer reads to the end of our stream and may go on sending. Writes
        and :meth:`start_tls` raise :class:`BadConfigError` from then on. When the peer then
        closes its side, the connection ends cleanly (``socket_did_disconnect`` with None).
        Returns with writes refused."""
        raise_for(lib.sk_socket_close_write_stream(self.handle))

    # ---- diagnostics ---------------------------------------------------------------------

    is_connected = flag_property(lib.sk_socket_is_connected)
    is_disconnected = flag_property(lib.sk_socket_is_disconnected)
    is_accepting = flag_property(lib.sk_socket_is_accepting)
    is_ipv4 = flag_property(lib.sk_socket_is_ipv4)
    is_ipv6 = flag_property(lib.sk_socket_is_ipv6)
    is_unix = flag_property(lib.sk_socket_is_unix)

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
        raw = self._sockaddr_of(lib.sk_socket_get_connected_address)
        return address_from_sockaddr(raw) if raw is not None else None

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
        raw = self._sockaddr_of(lib.sk_socket_get_local_address)
        return address_from_sockaddr(raw) if raw is not None else None

    @property
    def proxy_address(self) -> Optional[Address]:
        """For a connection accepted with a PROXY protocol header that named the client
        (:attr:`proxy_protocol`): the proxy's address, the connection's real TCP peer (then
        :attr:`connected_address` is the client's); None otherwise (no header expected, a
        LOCAL or UNKNOWN header, not connected)."""
        raw = self._sockaddr_of(lib.sk_socket_get_proxy_address)
        return address_from_sockaddr(raw) if raw is not None else None

    @property
    def proxy_protocol_version(self) -> Optional[int]:
        """1 or 2: the version of the PROXY protocol header that gave the connection's
        addresses; None when none did (as :attr:`proxy_address`)."""
        version = raise_for(lib.sk_socket_get_proxy_protocol_version(self.handle))
        return version or None

    # ---- TLS -----------------------------------------------------------------------------

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
            raise_for(lib.sk_socket_start_tls(handle, None, byref(error)), error)
            return
        if not isinstance(settings, TLSSettings):
            raise TypeError(f"settings must be socketkit.TLSSettings or None, not {type(settings).__name__}")
        with settings._c_settings() as c_settings:
            raise_for(lib.sk_socket_start_tls(handle, c_settings, byref(error)), error)

    is_secure = flag_property(lib.sk_socket_is_secure,
                              doc="True once the handshake finished (and manual trust, if any, said yes).")

    @property
    def tls_info(self) -> Optional[TLSInfo]:
        """What the handshake settled (protocol, cipher, ALPN, SNI, resumption, the peer's
        certificates), or None while the connection is not secure. The session can end at
        any moment (even while ``socket_did_secure`` runs): then this is None, never an
        error, and never a mix of two sessions."""
        return _tls_info(self.handle)
