# SPDX-License-Identifier: MIT
"""asyncio's transports and protocols on SocketKit, and the event loop that makes an
asyncio library use them unchanged.

**Why an event loop, not functions.** An asyncio library (aiohttp, websockets, asyncpg,
...) opens its connections with ``loop.create_connection``, its servers with
``loop.create_server`` and upgrades with ``loop.start_tls``, on whatever loop it runs
on: functions of our own, taking a loop, would need every library changed. So
:class:`EventLoop` is asyncio's own selector loop with exactly those methods (and their
Unix-domain twins, ``connect_accepted_socket`` and ``create_datagram_endpoint``) made
SocketKit's; everything else stays asyncio's (timers, ``getaddrinfo``, subprocesses,
signals, ``sock_*`` calls, sockets a library makes itself), which is what makes the
substitution sound: a library sees the transports and protocols asyncio documents, and
nothing else changes. :func:`install` sets a policy whose loops are :class:`EventLoop`
(as uvloop's ``install()`` does); :func:`new_event_loop` and :func:`run` choose it
without a policy (``asyncio.run(main(), loop_factory=aio.new_event_loop)`` from Python
3.12).

SocketKit's own loop is driven by the asyncio loop (:func:`socketkit.aio.loop_group`: no
SocketKit thread, no hand-over), and the transports' callbacks come straight from it
(``queue=None``), on the asyncio thread: ``protocol.data_received`` is called from the
loop as asyncio's selector transports call it, and a write from it goes to the kernel at
once.

**TLS.** ``ssl=`` is SocketKit's TLS (OpenSSL inside the engine) when it is
:class:`~socketkit.TLSSettings`, ``True``, or an ``ssl.SSLContext`` made by
:func:`socketkit.aio.ssl_context` (it carries settings, and passes a library's
``isinstance(ssl, ssl.SSLContext)`` checks). Any other ``SSLContext`` is run by the
standard library's TLS (asyncio's ``SSLProtocol``) over a SocketKit connection: the loop
cannot read a context's certificate, key, ALPN list or callbacks back, and does not guess,
so a library works unchanged either way and its context means exactly what it says.
"""
from __future__ import annotations

import asyncio
import inspect
import os
import socket as _stdlib_socket
import ssl as _ssl
import sys
from asyncio import sslproto
from typing import Any, Awaitable, Callable, Coroutine, List, Optional, Sequence, Tuple, TypeVar, Union

from .._queues import LoopGroup
from .._tcp import Socket
from .._tls import TLSSettings
from ..errors import BadConfigError, Error
from ._connection import _shutdown_write
from ._datagram import create_datagram_endpoint as _create_datagram_endpoint
from ._hosting import detach, loop_group
from ._server import Server, client_options, endpoints_for, family_only
from ._streams import extra_info
from ._tlsargs import SSLArgument, tls_settings

_T = TypeVar("_T")


def _feed_buffered(protocol: Any, data: bytes) -> None:
    """data_received for a BufferedProtocol (asyncio's own helper, written out: it is
    private to asyncio)."""
    view = memoryview(data)
    while view:
        buffer = memoryview(protocol.get_buffer(len(view)))
        if not len(buffer):
            raise RuntimeError("get_buffer() returned an empty buffer")
        count = min(len(buffer), len(view))
        buffer[:count] = view[:count]
        protocol.buffer_updated(count)
        view = view[count:]


class SocketTransport(asyncio.Transport):
    """asyncio.Transport over a SocketKit Socket: what :class:`EventLoop`'s
    ``create_connection`` and ``create_server`` give their protocols. Reads are SocketKit
    reads of whatever is available, one always queued while reading is not paused;
    writes are SocketKit writes (flow control through its write watermarks, which
    ``set_write_buffer_limits`` sets); the peer's end is ``eof_received`` (the write side
    stays open unless the protocol says otherwise)."""

    # asyncio's start_tls (the standard library's TLS) may be layered over it.
    _start_tls_compatible = True

    def __init__(self, loop: asyncio.AbstractEventLoop, server: Optional[Server] = None) -> None:
        super().__init__()
        self._loop = loop
        self._socket: Socket = None  # type: ignore[assignment]  # the loop's _adopt or _new_transport sets it
        self._server = server
        self._protocol: Any = None
        self._buffered = False
        self._reading_paused = True  # until a protocol is attached
        self._read_queued = False
        self._held: List[bytes] = []
        self._eof = False
        self._closing = False
        self._lost = False
        self._eof_written = False
        self._eof_shut = False
        self._secure = False
        self._sslcontext: Any = None
        self._delegate = _TransportDelegate(self)
        self._connected: Optional[asyncio.Future[None]] = None
        self._secured: Optional[asyncio.Future[None]] = None
        self._withdrawn: Optional[asyncio.Future[None]] = None

    # ---- set-up ----------------------------------------------------------------------

    def _attach(self, protocol: Any) -> None:
        """Hands the connection to `protocol`: connection_made, then reading."""
        self.set_protocol(protocol)
        self._reading_paused = False
        try:
            protocol.connection_made(self)
        except BaseException as error:
            self._fatal_error(error, "Fatal error: protocol.connection_made() call failed.")
            return
        self._read_next()

    def _read_next(self) -> None:
        if self._reading_paused or self._read_queued or self._eof or self._closing or self._lost:
            return
        try:
            self._socket.read()
            self._read_queued = True
        except Error:
            pass  # ended: socket_did_disconnect is on its way

    # ---- asyncio.BaseTransport --------------------------------------------------------

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        if name == "socket":
            return default  # the descriptor is SocketKit's
        return extra_info(self._socket, name, default, self._sslcontext)

    def is_closing(self) -> bool:
        return self._closing or self._lost

    def close(self) -> None:
        """Closes once the queued writes are sent; ``connection_lost(None)`` follows."""
        if self._closing:
            return
        self._closing = True
        self._reading_paused = True
        try:
            self._socket.disconnect_after_writing()
            if not self._socket.is_disconnected or self._session_pending():
                return  # socket_did_disconnect follows
        except Error:
            pass
        self._loop.call_soon(self._connection_lost, None)

    def _session_pending(self) -> bool:
        sock = self._socket
        return sock._sessions_started > sock._sessions_ended

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        self._protocol = protocol
        self._buffered = isinstance(protocol, asyncio.BufferedProtocol)

    def get_protocol(self) -> asyncio.BaseProtocol:
        return self._protocol  # type: ignore[no-any-return]

    # ---- asyncio.ReadTransport --------------------------------------------------------

    def is_reading(self) -> bool:
        return not self._reading_paused and not self._closing

    @property
    def _paused(self) -> bool:  # read by asyncio's sslproto (3.9, 3.10)
        return self._reading_paused

    def pause_reading(self) -> None:
        """No data_received until :meth:`resume_reading` (what SocketKit delivers
        meanwhile is held)."""
        self._reading_paused = True

    def resume_reading(self) -> None:
        if self._closing or not self._reading_paused:
            return
        self._reading_paused = False
        if self._held:
            self._loop.call_soon(self._deliver_held)
        else:
            self._read_next()

    def _deliver_held(self) -> None:
        while self._held and not self._reading_paused and not self._lost:
            self._data(self._held.pop(0))
        if not self._held and self._eof and not self._reading_paused:
            self._end_of_stream()
        self._read_next()

    # ---- asyncio.WriteTransport --------------------------------------------------------

    def write(self, data: Union[bytes, bytearray, memoryview]) -> None:
        if self._eof_written:
            raise RuntimeError("Cannot call write() after write_eof()")
        if self._lost or self._closing:
            return  # as asyncio's transports: writes after the connection is lost are dropped
        try:
            self._socket.write(data)
        except BadConfigError:
            pass  # ended: connection_lost follows

    def writelines(self, list_of_data: Any) -> None:
        for data in list_of_data:
            self.write(data)

    def get_write_buffer_size(self) -> int:
        try:
            return self._socket.queued_write_bytes
        except Error:
            return 0

    def get_write_buffer_limits(self) -> Tuple[int, int]:
        return self._socket.write_watermarks

    def set_write_buffer_limits(self, high: Optional[int] = None, low: Optional[int] = None) -> None:
        if high is None:
            high = 64 * 1024 if low is None else 4 * low
        if low is None:
            low = high // 4
        if not high >= low >= 0:
            raise ValueError(f"high ({high!r}) must be >= low ({low!r}) must be >= 0")
        self._socket.write_watermarks = (low, high)

    def can_write_eof(self) -> bool:
        return not self._secure

    def write_eof(self) -> None:
        """Shuts the write side down once the queued writes are sent (not over TLS)."""
        if self._eof_written or self._closing or self._lost:
            return
        if self._secure:
            raise NotImplementedError("TLS does not support half-closes")
        self._eof_written = True
        # As the streams' write_eof (see _connection): the delegate that hears of every
        # write takes over, and the descriptor is shut down once the queue is empty.
        self._delegate.__class__ = _HalfClosingTransportDelegate
        self._socket.delegate = self._delegate
        self._delegate.shutdown_if_flushed()

    def abort(self) -> None:
        self._force_close(None)

    def _force_close(self, error: Optional[BaseException]) -> None:
        if self._lost:
            return
        self._closing = True
        self._socket.abort()
        self._loop.call_soon(self._connection_lost, error)

    # ---- what the delegate calls ---------------------------------------------------------

    def _data(self, data: bytes) -> None:
        try:
            if self._buffered:
                _feed_buffered(self._protocol, data)
            else:
                self._protocol.data_received(data)
        except BaseException as error:
            self._fatal_error(error, "Fatal error: protocol.data_received() call failed.")

    def _end_of_stream(self) -> None:
        try:
            keep_open = self._protocol.eof_received()
        except BaseException as error:
            self._fatal_error(error, "Fatal error: protocol.eof_received() call failed.")
            return
        if not keep_open:
            self.close()

    def _fatal_error(self, error: BaseException, message: str) -> None:
        if not isinstance(error, (Error, OSError)) or self._loop.get_debug():
            self._loop.call_exception_handler({"message": message, "exception": error, "transport": self,
                                               "protocol": self._protocol})
        self._force_close(error)

    def _connection_lost(self, error: Optional[BaseException]) -> None:
        if self._lost:
            return
        self._lost = True
        self._closing = True
        self._socket.close()
        for future in (self._connected, self._secured):
            if future is not None and not future.done():
                future.set_exception(error or ConnectionResetError("Connection lost"))
        if self._protocol is not None:
            try:
                self._protocol.connection_lost(error)
            finally:
                if self._server is not None:
                    self._server._clients.discard(self)

    def __repr__(self) -> str:
        state = "closed" if self._lost else ("closing" if self._closing else "open")
        return f"<socketkit.aio.SocketTransport {state} socket={self._socket!r}>"


class _TransportDelegate:
    """A SocketTransport's delegate (private: SocketKit's callbacks). Runs on the asyncio
    thread, straight from SocketKit's loop (queue None, a driven loop group)."""

    __slots__ = ("transport",)

    def __init__(self, transport: SocketTransport) -> None:
        self.transport = transport

    def socket_did_connect(self, sock: Socket, host: str, port: int) -> None:
        connected = self.transport._connected
        if connected is not None and not connected.done():
            connected.set_result(None)

    def socket_did_secure(self, sock: Socket) -> None:
        transport = self.transport
        transport._secure = True
        if transport._secured is not None and not transport._secured.done():
            transport._secured.set_result(None)

    def socket_did_read(self, sock: Socket, data: Any, tag: int) -> None:
        transport = self.transport
        transport._read_queued = False
        if transport._reading_paused or transport._held:
            transport._held.append(data)
            return
        transport._data(data)
        if not transport._reading_paused and not transport._closing and not transport._lost:
            sock.read()
            transport._read_queued = True

    def socket_did_close_read_stream(self, sock: Socket) -> None:
        transport = self.transport
        transport._eof = True
        if not transport._held and not transport._reading_paused:
            transport._end_of_stream()

    def socket_did_reach_high_watermark(self, sock: Socket, queued: int) -> None:
        transport = self.transport
        try:
            transport._protocol.pause_writing()
        except BaseException as error:
            transport._loop.call_exception_handler({"message": "protocol.pause_writing() failed",
                                                    "exception": error, "transport": transport,
                                                    "protocol": transport._protocol})

    def socket_did_drain_to_low_watermark(self, sock: Socket, queued: int) -> None:
        transport = self.transport
        try:
            transport._protocol.resume_writing()
        except BaseException as error:
            transport._loop.call_exception_handler({"message": "protocol.resume_writing() failed",
                                                    "exception": error, "transport": transport,
                                                    "protocol": transport._protocol})

    def socket_did_disconnect(self, sock: Socket, error: Optional[Error]) -> None:
        self.transport._connection_lost(error)

    def shutdown_if_flushed(self) -> None:
        """After write_eof: the write side's end, once nothing is queued (once)."""
        transport = self.transport
        if transport._eof_shut:
            return
        try:
            if not transport._socket.queued_write_bytes:
                transport._eof_shut = True
                transport._socket.perform(_shutdown_write)
        except Error:
            pass


class _HalfClosingTransportDelegate(_TransportDelegate):
    """After write_eof: hears of every write, to shut the write side once none is queued."""

    __slots__ = ()

    def socket_did_write(self, sock: Socket, tag: int) -> None:
        self.shutdown_if_flushed()


# ---- the standard library's TLS over a SocketKit transport ------------------------------

def _stdlib_context(ssl: SSLArgument) -> bool:
    """Whether `ssl` is an SSLContext of the standard library's own, not one carrying
    SocketKit settings: the loop then runs the standard library's TLS, which does all that
    context says (its certificate, ALPN list and callbacks cannot be read back)."""
    return isinstance(ssl, _ssl.SSLContext) and getattr(ssl, "socketkit_settings", None) is None


def _stdlib_tls(loop: asyncio.AbstractEventLoop, protocol: Any, context: _ssl.SSLContext, waiter: "asyncio.Future[Any]",
                server_side: bool, server_hostname: Optional[str], handshake_timeout: Optional[float],
                shutdown_timeout: Optional[float], call_connection_made: bool = True) -> Any:
    options: Any = {"ssl_handshake_timeout": handshake_timeout, "call_connection_made": call_connection_made}
    if "ssl_shutdown_timeout" in inspect.signature(sslproto.SSLProtocol).parameters:
        options["ssl_shutdown_timeout"] = shutdown_timeout
    return sslproto.SSLProtocol(loop, protocol, context, waiter, server_side, server_hostname, **options)


def _app_transport(ssl_protocol: Any) -> asyncio.Transport:
    make = getattr(ssl_protocol, "_get_app_transport", None)
    return make() if make is not None else ssl_protocol._app_transport  # type: ignore[no-any-return]


# ---- the event loop ---------------------------------------------------------------------

def _pending(future: "Optional[asyncio.Future[None]]") -> "asyncio.Future[None]":
    assert future is not None
    return future


ProtocolFactory = Callable[[], asyncio.BaseProtocol]


class EventLoop(asyncio.SelectorEventLoop):
    """asyncio's selector event loop whose TCP and Unix-domain connections, servers and
    ``start_tls`` (and datagram endpoints) are SocketKit's (see the module for why)."""

    def _socketkit_group(self) -> LoopGroup:
        return loop_group(self)

    def close(self) -> None:
        if not self.is_closed() and not self.is_running():
            detach(self)  # SocketKit's loop (and its sockets) with it
        super().close()

    def _new_transport(self) -> SocketTransport:
        transport = SocketTransport(self)
        transport._socket = Socket(transport._delegate, queue=None, loop_group=self._socketkit_group())
        # The peer's end as asyncio sees it: eof_received, the write side stays open.
        transport._socket.auto_disconnect_on_closed_read_stream = False
        return transport

    def _adopt(self, sock: _stdlib_socket.socket) -> SocketTransport:
        transport = SocketTransport(self)
        transport._connected = self.create_future()
        transport._socket = Socket.from_fd(sock.detach(), transport._delegate, queue=None,
                                           loop_group=self._socketkit_group())
        transport._socket.auto_disconnect_on_closed_read_stream = False
        return transport

    def _wrap(self, sock: Socket, server: Optional[Server] = None) -> SocketTransport:
        """An accepted connection (its listener's settings, the end of stream's included)."""
        transport = SocketTransport(self, server)
        transport._socket = sock
        sock.delegate = transport._delegate
        return transport

    async def _tls_then_attach(self, transport: SocketTransport, protocol: Any, ssl: SSLArgument, server_side: bool,
                               server_hostname: Optional[str], handshake_timeout: Optional[float],
                               shutdown_timeout: Optional[float]) -> Tuple[asyncio.Transport, Any]:
        """Secures `transport` (SocketKit's TLS, or the standard library's when the context
        cannot be read) and hands it to `protocol`."""
        if ssl is None or ssl is False:
            transport._attach(protocol)
            return transport, protocol
        if _stdlib_context(ssl):
            assert isinstance(ssl, _ssl.SSLContext)
            waiter: asyncio.Future[Any] = self.create_future()
            ssl_protocol = _stdlib_tls(self, protocol, ssl, waiter, server_side, server_hostname, handshake_timeout,
                                       shutdown_timeout)
            transport._attach(ssl_protocol)
            try:
                await waiter
            except BaseException:
                transport.close()
                raise
            return _app_transport(ssl_protocol), protocol
        settings = tls_settings(ssl, server_side, server_hostname, handshake_timeout)
        await self._secure(transport, settings)
        transport._sslcontext = ssl
        transport._attach(protocol)
        return transport, protocol

    async def _connected_then_attach(self, transport: SocketTransport, protocol_factory: ProtocolFactory,
                                     ssl: SSLArgument, server_side: bool, server_hostname: Optional[str],
                                     handshake_timeout: Optional[float], shutdown_timeout: Optional[float]
                                     ) -> Tuple[asyncio.Transport, Any]:
        """Waits for the connect (or adoption) of `transport`, then secures it if asked and
        hands it to a new protocol; a failure aborts it."""
        try:
            await _pending(transport._connected)
        except BaseException:
            transport.abort()
            raise
        return await self._tls_then_attach(transport, protocol_factory(), ssl, server_side, server_hostname,
                                           handshake_timeout, shutdown_timeout)

    async def _secure(self, transport: SocketTransport, settings: Optional[TLSSettings]) -> None:
        transport._secured = self.create_future()
        transport._socket.start_tls(settings)
        try:
            await _pending(transport._secured)
        except BaseException:
            transport.abort()
            raise

    # ---- connections ---------------------------------------------------------------------

    async def create_connection(
            self, protocol_factory: ProtocolFactory, host: Optional[str] = None, port: Optional[int] = None, *,
            ssl: SSLArgument = None, family: int = 0, proto: int = 0, flags: int = 0,
            sock: Optional[_stdlib_socket.socket] = None, local_addr: Optional[Tuple[str, int]] = None,
            server_hostname: Optional[str] = None, ssl_handshake_timeout: Optional[float] = None,
            ssl_shutdown_timeout: Optional[float] = None, happy_eyeballs_delay: Optional[float] = None,
            interleave: Optional[int] = None, all_errors: bool = False) -> Tuple[asyncio.Transport, Any]:
        """asyncio's create_connection, over SocketKit (Happy Eyeballs is SocketKit's: every
        resolved address raced)."""
        if server_hostname is not None and not ssl:
            raise ValueError("server_hostname is only meaningful with ssl")
        if server_hostname is None and ssl:
            if not host:
                raise ValueError("You must set server_hostname when using ssl without a host")
            server_hostname = host
        if ssl_handshake_timeout is not None and not ssl:
            raise ValueError("ssl_handshake_timeout is only meaningful with ssl")
        if sock is not None:
            if host is not None or port is not None:
                raise ValueError("host/port and sock can not be specified at the same time")
            if sock.type != _stdlib_socket.SOCK_STREAM:
                raise ValueError(f"A Stream Socket was expected, got {sock!r}")
            transport = self._adopt(sock)
        else:
            if host is None or port is None:
                raise ValueError("host and port was not specified and no sock specified")
            transport = self._new_transport()
            client_options(transport._socket, family, happy_eyeballs_delay)
            transport._connected = self.create_future()
            transport._socket.connect_to_host(host, port, interface=local_addr[0] if local_addr else None)
        return await self._connected_then_attach(transport, protocol_factory, ssl, False, server_hostname,
                                                 ssl_handshake_timeout, ssl_shutdown_timeout)

    async def create_unix_connection(
            self, protocol_factory: ProtocolFactory, path: Optional[str] = None, *, ssl: SSLArgument = None,
            sock: Optional[_stdlib_socket.socket] = None, server_hostname: Optional[str] = None,
            ssl_handshake_timeout: Optional[float] = None,
            ssl_shutdown_timeout: Optional[float] = None) -> Tuple[asyncio.Transport, Any]:
        if sock is not None:
            return await self.create_connection(protocol_factory, sock=sock, ssl=ssl,
                                                server_hostname=server_hostname,
                                                ssl_handshake_timeout=ssl_handshake_timeout)
        if path is None:
            raise ValueError("no path and sock were specified")
        if ssl and server_hostname is None:
            raise ValueError("you have to pass server_hostname when using ssl")
        transport = self._new_transport()
        transport._connected = self.create_future()
        transport._socket.connect_to_unix_path(os.fspath(path))
        return await self._connected_then_attach(transport, protocol_factory, ssl, False, server_hostname,
                                                 ssl_handshake_timeout, ssl_shutdown_timeout)

    async def connect_accepted_socket(
            self, protocol_factory: ProtocolFactory, sock: _stdlib_socket.socket, *, ssl: SSLArgument = None,
            ssl_handshake_timeout: Optional[float] = None,
            ssl_shutdown_timeout: Optional[float] = None) -> Tuple[asyncio.Transport, Any]:
        return await self._connected_then_attach(self._adopt(sock), protocol_factory, ssl, True, None,
                                                 ssl_handshake_timeout, ssl_shutdown_timeout)

    # ---- servers -----------------------------------------------------------------------

    async def create_server(  # type: ignore[override]
            self, protocol_factory: ProtocolFactory, host: Union[None, str, Sequence[str]] = None,
            port: Optional[int] = None, *, family: int = 0, flags: int = 0,
            sock: Optional[_stdlib_socket.socket] = None, backlog: int = 100, ssl: SSLArgument = None,
            reuse_address: Optional[bool] = None, reuse_port: Optional[bool] = None,
            keep_alive: Optional[bool] = None, ssl_handshake_timeout: Optional[float] = None,
            ssl_shutdown_timeout: Optional[float] = None, start_serving: bool = True) -> Server:
        """asyncio's create_server, over SocketKit (`sock`: not supported, ValueError)."""
        if sock is not None:
            raise ValueError("the SocketKit event loop does not adopt a listening socket: give host and port")
        if ssl_handshake_timeout is not None and ssl is None:
            raise ValueError("ssl_handshake_timeout is only meaningful with ssl")
        if isinstance(ssl, TLSSettings) or getattr(ssl, "socketkit_settings", None) is not None:
            settings = tls_settings(ssl, True, None, ssl_handshake_timeout)
            if settings is not None:
                settings.check()
        return await self._serve(endpoints_for(host, port), protocol_factory, ssl, ssl_handshake_timeout,
                                 ssl_shutdown_timeout, start_serving, family)

    async def create_unix_server(  # type: ignore[override]
            self, protocol_factory: ProtocolFactory, path: Optional[str] = None, *,
            sock: Optional[_stdlib_socket.socket] = None, backlog: int = 100, ssl: SSLArgument = None,
            ssl_handshake_timeout: Optional[float] = None, ssl_shutdown_timeout: Optional[float] = None,
            start_serving: bool = True, cleanup_socket: bool = True) -> Server:
        if sock is not None or path is None:
            raise ValueError("the SocketKit event loop needs a path (it does not adopt a listening socket)")
        return await self._serve([os.fspath(path)], protocol_factory, ssl, ssl_handshake_timeout,
                                 ssl_shutdown_timeout, start_serving, 0)

    async def _serve(self, endpoints: Any, protocol_factory: ProtocolFactory, ssl: SSLArgument,
                     handshake_timeout: Optional[float], shutdown_timeout: Optional[float], start_serving: bool,
                     family: int) -> Server:
        server: Optional[Server] = None
        pending: "set[asyncio.Task[Any]]" = set()

        def accept(new_socket: Socket) -> None:
            transport = self._wrap(new_socket, server)
            if server is not None:
                server._clients.add(transport)
            if not ssl:
                transport._attach(protocol_factory())
                return
            task = self.create_task(self._accept_tls(transport, protocol_factory, ssl, handshake_timeout,
                                                     shutdown_timeout))
            pending.add(task)
            task.add_done_callback(pending.discard)

        server = Server(self, endpoints, accept, queue=None, use_host_queue=False, loop_group=self._socketkit_group(),
                        configure=lambda sock: family_only(sock, family))
        if start_serving:
            await server.start_serving()
        return server

    async def _accept_tls(self, transport: SocketTransport, protocol_factory: ProtocolFactory, ssl: SSLArgument,
                          handshake_timeout: Optional[float], shutdown_timeout: Optional[float]) -> None:
        try:
            await self._tls_then_attach(transport, protocol_factory(), ssl, True, None, handshake_timeout,
                                        shutdown_timeout)
        except (Error, OSError, asyncio.TimeoutError) as error:
            # As asyncio: a failed handshake of an accepted connection is logged only in
            # debug mode.
            transport.abort()
            if self.get_debug():
                self.call_exception_handler({"message": "socketkit: TLS handshake of an accepted connection failed",
                                             "exception": error, "transport": transport})

    # ---- TLS on an open connection --------------------------------------------------------

    async def start_tls(
            self, transport: asyncio.BaseTransport, protocol: asyncio.BaseProtocol, sslcontext: SSLArgument, *,
            server_side: bool = False, server_hostname: Optional[str] = None,
            ssl_handshake_timeout: Optional[float] = None,
            ssl_shutdown_timeout: Optional[float] = None) -> Optional[asyncio.Transport]:
        """asyncio's start_tls: SocketKit's TLS on a SocketTransport whose context can be
        read (the same transport comes back, secured); otherwise asyncio's own."""
        settings: Optional[TLSSettings] = None
        if isinstance(transport, SocketTransport) and not _stdlib_context(sslcontext):
            settings = tls_settings(sslcontext, server_side, server_hostname, ssl_handshake_timeout)
        if settings is None:
            if not isinstance(sslcontext, _ssl.SSLContext):
                raise TypeError(f"sslcontext is expected to be an instance of ssl.SSLContext, got {sslcontext!r}")
            return await super().start_tls(transport, protocol, sslcontext, server_side=server_side,
                                           server_hostname=server_hostname,
                                           ssl_handshake_timeout=ssl_handshake_timeout,
                                           **({"ssl_shutdown_timeout": ssl_shutdown_timeout}
                                              if sys.version_info >= (3, 11) else {}))
        assert isinstance(transport, SocketTransport)
        # Nothing more reaches the old protocol; the read SocketKit holds is withdrawn, its
        # bytes (the peer's first handshake bytes, if they came) given back for the handshake.
        transport.pause_reading()
        if transport._read_queued:
            transport._withdrawn = self.create_future()
            transport._delegate.__class__ = _WithdrawingTransportDelegate
            transport._socket.delegate = transport._delegate
            transport._socket.cancel_read(0)
            try:
                await transport._withdrawn
            finally:
                transport._withdrawn = None
                transport._delegate.__class__ = _TransportDelegate
                transport._socket.delegate = transport._delegate
        if transport._held:
            transport._socket.unread(b"".join(transport._held))
            transport._held.clear()
        await self._secure(transport, settings)
        transport._sslcontext = sslcontext
        transport.set_protocol(protocol)
        transport.resume_reading()
        return transport

    # ---- datagrams ---------------------------------------------------------------------

    async def create_datagram_endpoint(  # type: ignore[override]
            self, protocol_factory: Callable[[], asyncio.DatagramProtocol],
            local_addr: Optional[Tuple[Optional[str], int]] = None, remote_addr: Optional[Tuple[str, int]] = None, *,
            family: int = 0, proto: int = 0, flags: int = 0, reuse_address: Optional[bool] = None,
            reuse_port: Optional[bool] = None, allow_broadcast: Optional[bool] = None,
            sock: Optional[_stdlib_socket.socket] = None) -> Tuple[asyncio.DatagramTransport, Any]:
        """asyncio's create_datagram_endpoint over a SocketKit UdpSocket (a given `sock`
        stays asyncio's own)."""
        if sock is not None:
            return await super().create_datagram_endpoint(protocol_factory, sock=sock)
        return await _create_datagram_endpoint(protocol_factory, local_addr, remote_addr, family=family,
                                               reuse_address=reuse_address, reuse_port=reuse_port,
                                               allow_broadcast=allow_broadcast, loop_group=self._socketkit_group(),
                                               queue=None)


class _WithdrawingTransportDelegate(_TransportDelegate):
    """During start_tls: the read SocketKit held is being withdrawn (cancel_read)."""

    __slots__ = ()

    def socket_did_read(self, sock: Socket, data: Any, tag: int) -> None:
        transport = self.transport
        transport._read_queued = False
        transport._held.append(bytes(data))  # completed before the withdrawal: given back

    def socket_did_cancel_read(self, sock: Socket, tag: int, unread_bytes: int) -> None:
        transport = self.transport
        transport._read_queued = False
        if transport._withdrawn is not None and not transport._withdrawn.done():
            transport._withdrawn.set_result(None)

    def socket_did_disconnect(self, sock: Socket, error: Optional[Error]) -> None:
        withdrawn = self.transport._withdrawn
        if withdrawn is not None and not withdrawn.done():
            withdrawn.set_exception(error or ConnectionResetError("Connection lost"))
        super().socket_did_disconnect(sock, error)


class EventLoopPolicy(asyncio.DefaultEventLoopPolicy):
    """An event-loop policy whose loops are :class:`EventLoop`."""

    def new_event_loop(self) -> asyncio.AbstractEventLoop:
        return EventLoop()


def install() -> None:
    """Makes asyncio use SocketKit: the event loops asyncio creates from now on
    (``asyncio.run``, ``asyncio.new_event_loop``) are :class:`EventLoop`, whose
    connections, servers and ``start_tls`` are SocketKit's."""
    asyncio.set_event_loop_policy(EventLoopPolicy())


def new_event_loop() -> EventLoop:
    """A new :class:`EventLoop` (for ``asyncio.run(main(), loop_factory=...)``, Python 3.12)."""
    return EventLoop()


def run(main: Coroutine[Any, Any, _T], *, debug: Optional[bool] = None) -> _T:
    """``asyncio.run(main)`` on an :class:`EventLoop`, without changing the policy."""
    loop = new_event_loop()
    try:
        asyncio.set_event_loop(loop)
        if debug is not None:
            loop.set_debug(debug)
        return loop.run_until_complete(main)
    finally:
        try:
            _cancel_all_tasks(loop)
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.run_until_complete(loop.shutdown_default_executor())
        finally:
            asyncio.set_event_loop(None)
            loop.close()


def _cancel_all_tasks(loop: asyncio.AbstractEventLoop) -> None:
    tasks = [task for task in asyncio.all_tasks(loop) if not task.done()]
    for task in tasks:
        task.cancel()
    if tasks:
        loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
