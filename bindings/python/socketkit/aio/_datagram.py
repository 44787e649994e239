# SPDX-License-Identifier: MIT
"""UDP for asyncio: :func:`create_datagram_endpoint` (asyncio's DatagramProtocol and
DatagramTransport over a SocketKit UdpSocket) and :class:`AsyncUdpSocket` (awaitable
sends and receives, ``async for`` over datagrams). Options are set before the socket binds:
``reuse_port``, ``allow_broadcast``, ``family``, or anything through ``configure(udp)``."""
from __future__ import annotations

import asyncio
import collections
import ipaddress
import socket as _stdlib_socket
from typing import Any, Callable, Deque, Dict, Optional, Tuple, Union

from .._addresses import IPAddress
from .._queues import CallbackQueue, LoopGroup
from .._udp import UdpSocket
from ..errors import ClosedError, Error
from ._hosting import callback_queue, queue as host_queue

Configure = Callable[[UdpSocket], None]
_UNSET: Any = object()


def _is_ip_literal(host: str) -> bool:
    try:
        ipaddress.ip_address(host.split("%", 1)[0])
        return True
    except ValueError:
        return False


def _bind(sock: UdpSocket, host: Optional[str], port: int) -> None:
    """Binds to (host, port): an IP address binds that family only (as a socket bound to
    it would), a name or None every enabled family on that interface (None: any)."""
    if host is not None and host != "" and _is_ip_literal(host):
        sock.bind_to_address((host, port))
    else:
        sock.bind_to_interface(host or None, port)


def _prepare(sock: UdpSocket, family: int, reuse_port: Optional[bool], reuse_address: Optional[bool],
             allow_broadcast: Optional[bool], configure: Optional[Configure]) -> None:
    if family == _stdlib_socket.AF_INET:
        sock.ipv6_enabled = False
    elif family == _stdlib_socket.AF_INET6:
        sock.ipv4_enabled = False
    if reuse_port:
        sock.enable_reuse_port(True)
    if reuse_address:
        sock.enable_reuse_address(True)
    if allow_broadcast:
        sock.enable_broadcast(True)
    if configure is not None:
        configure(sock)


# ---- asyncio's datagram endpoint ---------------------------------------------------------

class DatagramTransport(asyncio.DatagramTransport):
    """asyncio.DatagramTransport over a SocketKit UdpSocket: ``sendto(data, addr=None)``
    queues a datagram (to a host name too: resolved off the loop); a datagram that
    cannot be sent reaches the protocol's ``error_received``, as do ICMP errors."""

    def __init__(self, loop: asyncio.AbstractEventLoop, sock: UdpSocket, protocol: asyncio.DatagramProtocol,
                 remote: Optional[IPAddress]) -> None:
        super().__init__()
        self._loop = loop
        self._socket = sock
        self._protocol = protocol
        self._remote = remote
        self._closing = False
        self._lost = False

    @property
    def socket(self) -> UdpSocket:
        """The SocketKit socket underneath."""
        return self._socket

    def sendto(self, data: Any, addr: Any = None) -> None:
        if self._closing:
            return
        try:
            if addr is None or (self._remote is not None and tuple(addr) == tuple(self._remote)):
                if self._remote is None:
                    raise ValueError("no address given and the transport is not connected")
                self._socket.send(data)
            else:
                host, port = addr[0], addr[1]
                if _is_ip_literal(host):
                    self._socket.send_to_address(data, (host, port))
                else:
                    self._socket.send_to_host(data, host, port)
        except Error as error:
            self._protocol.error_received(error)

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        try:
            if name == "sockname":
                return self._socket.local_address or default
            if name == "peername":
                return self._remote if self._remote is not None else default
            if name == "socketkit_socket":
                return self._socket
        except Error:
            return default
        return default

    def get_write_buffer_size(self) -> int:
        return 0

    def is_closing(self) -> bool:
        return self._closing

    def close(self) -> None:
        """Closes once the queued datagrams are sent; ``connection_lost(None)`` follows."""
        if self._closing:
            return
        self._closing = True
        self._socket.close()
        self._loop.call_soon(self._connection_lost, None)

    def abort(self) -> None:
        self._closing = True
        self._socket.abort()
        self._loop.call_soon(self._connection_lost, None)

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        self._protocol = protocol  # type: ignore[assignment]

    def get_protocol(self) -> asyncio.BaseProtocol:
        return self._protocol

    def _connection_lost(self, error: Optional[Exception]) -> None:
        if self._lost:
            return
        self._lost = True
        self._protocol.connection_lost(error)


class _DatagramDelegate:
    """The UdpSocket's delegate for a DatagramTransport (private: SocketKit's callbacks)."""

    def __init__(self) -> None:
        self.transport: Optional[DatagramTransport] = None
        self.connected: Optional[asyncio.Future[IPAddress]] = None

    def udp_socket_did_receive(self, sock: UdpSocket, data: bytes, address: Optional[IPAddress],
                               context: Any) -> None:
        if self.transport is not None and not self.transport._closing:
            self.transport._protocol.datagram_received(data, address)  # type: ignore[arg-type]

    def udp_socket_did_receive_error(self, sock: UdpSocket, error: Optional[Error]) -> None:
        if self.transport is not None and error is not None:
            self.transport._protocol.error_received(error)

    def udp_socket_did_not_send(self, sock: UdpSocket, tag: int, error: Optional[Error]) -> None:
        if self.transport is not None and error is not None:
            self.transport._protocol.error_received(error)

    def udp_socket_did_connect(self, sock: UdpSocket, address: IPAddress) -> None:
        if self.connected is not None and not self.connected.done():
            self.connected.set_result(address)

    def udp_socket_did_not_connect(self, sock: UdpSocket, error: Optional[Error]) -> None:
        if self.connected is not None and not self.connected.done():
            self.connected.set_exception(error or ClosedError("the connect failed"))

    def udp_socket_did_close(self, sock: UdpSocket, error: Optional[Error]) -> None:
        transport = self.transport
        if transport is not None and not transport._closing:
            transport._closing = True
            transport._connection_lost(error)


async def create_datagram_endpoint(protocol_factory: Callable[[], asyncio.DatagramProtocol],
                                   local_addr: Optional[Tuple[Optional[str], int]] = None,
                                   remote_addr: Optional[Tuple[str, int]] = None, *, family: int = 0,
                                   proto: int = 0, flags: int = 0, reuse_address: Optional[bool] = None,
                                   reuse_port: Optional[bool] = None, allow_broadcast: Optional[bool] = None,
                                   sock: Optional[_stdlib_socket.socket] = None,
                                   configure: Optional[Configure] = None, loop_group: Optional[LoopGroup] = None,
                                   queue: Optional[CallbackQueue] = _UNSET
                                   ) -> Tuple[DatagramTransport, asyncio.DatagramProtocol]:
    """asyncio's ``loop.create_datagram_endpoint`` on SocketKit: a UdpSocket whose options
    (`family`, `reuse_port`, `reuse_address`, `allow_broadcast`, anything through
    ``configure(udp)``) are set before it binds to `local_addr` (an IP address: that
    family only; a name or None: every enabled family; port 0: one the kernel picks) and,
    with `remote_addr`, connects (only that peer is heard). Returns (transport, protocol)
    once it receives. A given `sock` is not supported (ValueError)."""
    if sock is not None:
        raise ValueError("socketkit.aio.create_datagram_endpoint does not adopt a socket")
    loop = asyncio.get_running_loop()
    delegate = _DatagramDelegate()
    udp = UdpSocket(delegate, queue=callback_queue(loop, loop_group) if queue is _UNSET else queue,
                    loop_group=loop_group)
    try:
        _prepare(udp, family, reuse_port, reuse_address, allow_broadcast, configure)
        if local_addr is not None:
            _bind(udp, local_addr[0], local_addr[1])
        remote: Optional[IPAddress] = None
        if remote_addr is not None:
            delegate.connected = loop.create_future()
            udp.connect_to_host(remote_addr[0], remote_addr[1])
            remote = await delegate.connected
        protocol = protocol_factory()
        transport = DatagramTransport(loop, udp, protocol, remote)
        delegate.transport = transport
        protocol.connection_made(transport)
        udp.begin_receiving()
    except BaseException:
        udp.abort()
        raise
    return transport, protocol


# ---- AsyncUdpSocket ----------------------------------------------------------------------

class _AsyncUdpDelegate:
    """An AsyncUdpSocket's delegate (private: SocketKit's callbacks)."""

    def __init__(self, owner: "AsyncUdpSocket") -> None:
        self.owner = owner

    def udp_socket_did_connect(self, sock: UdpSocket, address: IPAddress) -> None:
        connected = self.owner._connected
        if connected is not None and not connected.done():
            connected.set_result(address)

    def udp_socket_did_not_connect(self, sock: UdpSocket, error: Optional[Error]) -> None:
        connected = self.owner._connected
        if connected is not None and not connected.done():
            connected.set_exception(error or ClosedError("the connect failed"))

    def udp_socket_did_send(self, sock: UdpSocket, tag: int) -> None:
        future = self.owner._sends.pop(tag, None)
        if future is not None and not future.done():
            future.set_result(None)

    def udp_socket_did_not_send(self, sock: UdpSocket, tag: int, error: Optional[Error]) -> None:
        future = self.owner._sends.pop(tag, None)
        if future is not None and not future.done():
            future.set_exception(error or ClosedError("not sent"))

    def udp_socket_did_receive(self, sock: UdpSocket, data: bytes, address: Optional[IPAddress],
                               context: Any) -> None:
        self.owner._deliver((data, address))  # type: ignore[arg-type]

    def udp_socket_did_receive_error(self, sock: UdpSocket, error: Optional[Error]) -> None:
        if error is not None:
            self.owner._deliver(error)

    def udp_socket_did_close(self, sock: UdpSocket, error: Optional[Error]) -> None:
        owner = self.owner
        owner._fail(error if error is not None else ClosedError("the socket was closed"))
        if not owner._closed.done():
            owner._closed.set_result(None)


class AsyncUdpSocket:
    """A UDP socket with awaitable operations; its callbacks run on the asyncio loop.

    Sends resolve when SocketKit reports the datagram sent, and raise what failed it
    (SystemCallError with EMSGSIZE, ResolutionError, ...: the socket stays open).
    Received datagrams wait in a queue for :meth:`receive` (or ``async for data,
    address in sock``); past :attr:`max_queued` of them the socket stops reading (they
    wait in the kernel, where the kernel may drop them) until :meth:`receive` has taken
    half. A receive error (an ICMP error about an earlier datagram, TruncatedError) is
    raised by the :meth:`receive` whose turn it is.

    Options before binding: ``AsyncUdpSocket.bind(host, port, reuse_port=True,
    broadcast=True, configure=lambda udp: ...)``, or make one unbound, set options on
    :attr:`socket`, then ``await sock.bind_to(host, port)``.
    """

    def __init__(self, sock: Optional[UdpSocket] = None, *, loop_group: Optional[LoopGroup] = None,
                 max_queued: int = 1024) -> None:
        self._loop = asyncio.get_running_loop()
        self._sends: Dict[int, asyncio.Future[None]] = {}
        self._next_tag = 0
        self._received: Deque[Union[Tuple[bytes, IPAddress], BaseException]] = collections.deque()
        self._waiters: Deque[asyncio.Future[Tuple[bytes, IPAddress]]] = collections.deque()
        self._connected: Optional[asyncio.Future[IPAddress]] = None
        self._closed: asyncio.Future[None] = self._loop.create_future()
        self._error: Optional[BaseException] = None
        self._receiving = False
        self._paused = False
        #: Datagrams queued for :meth:`receive` before reading pauses.
        self.max_queued = max_queued
        delegate = _AsyncUdpDelegate(self)
        if sock is None:
            sock = UdpSocket(delegate, queue=host_queue(self._loop), loop_group=loop_group)
        else:
            sock.queue = host_queue(self._loop)
            sock.delegate = delegate
        #: The SocketKit socket underneath.
        self.socket = sock

    @classmethod
    async def bind(cls, host: Optional[str] = "127.0.0.1", port: int = 0, *, loop_group: Optional[LoopGroup] = None,
                   max_queued: int = 1024, reuse_port: bool = False, reuse_address: bool = False,
                   broadcast: bool = False, configure: Optional[Configure] = None) -> "AsyncUdpSocket":
        """A socket bound to `host` (an IP address: that family; a name or None: every
        enabled family, None on every interface) and `port` (0: one free port), receiving.
        The options (and ``configure(udp)``) apply before it binds."""
        self = cls(loop_group=loop_group, max_queued=max_queued)
        try:
            _prepare(self.socket, 0, reuse_port, reuse_address, broadcast, configure)
            await self.bind_to(host, port)
        except BaseException:
            self.socket.abort()
            raise
        return self

    async def bind_to(self, host: Optional[str], port: int = 0) -> None:
        """Binds this socket (options set on :attr:`socket` beforehand apply) and starts
        receiving."""
        _bind(self.socket, host, port)
        self._start_receiving()

    @classmethod
    async def connect(cls, host: str, port: int, *, loop_group: Optional[LoopGroup] = None, max_queued: int = 1024,
                      configure: Optional[Configure] = None) -> "AsyncUdpSocket":
        """A socket connected to `host` and `port` (only that peer is heard), receiving.
        Raises what failed the connect (ResolutionError, ...)."""
        self = cls(loop_group=loop_group, max_queued=max_queued)
        self._connected = self._loop.create_future()
        try:
            _prepare(self.socket, 0, None, None, None, configure)
            self.socket.connect_to_host(host, port)
            await self._connected
            self._start_receiving()
        except BaseException:
            self.socket.abort()
            raise
        return self

    @property
    def local_address(self) -> Optional[IPAddress]:
        return self.socket.local_address

    # ---- sending ---------------------------------------------------------------------

    async def _send(self, start: Callable[[int], None]) -> None:
        if self._error is not None:
            raise self._error
        tag = self._next_tag
        self._next_tag += 1
        future: asyncio.Future[None] = self._loop.create_future()
        self._sends[tag] = future
        try:
            start(tag)
        except BaseException:
            self._sends.pop(tag, None)
            raise
        await future

    async def send(self, data: Any, timeout: float = -1) -> None:
        """Sends a datagram to the connected peer."""
        await self._send(lambda tag: self.socket.send(data, timeout, tag))

    async def send_to(self, data: Any, address: IPAddress, timeout: float = -1) -> None:
        """Sends a datagram to ("ip", port)."""
        await self._send(lambda tag: self.socket.send_to_address(data, address, timeout, tag))

    async def send_to_host(self, data: Any, host: str, port: int, timeout: float = -1) -> None:
        """Sends a datagram to a host name (resolved off the loop)."""
        await self._send(lambda tag: self.socket.send_to_host(data, host, port, timeout, tag))

    # ---- receiving -------------------------------------------------------------------

    def _start_receiving(self) -> None:
        self.socket.begin_receiving()
        self._receiving = True

    async def receive(self) -> Tuple[bytes, IPAddress]:
        """The next datagram and its sender. Raises ClosedError (or the error that closed
        the socket) once it is closed and every datagram received before was taken. A
        cancelled receive loses no datagram."""
        if not self._received:
            if self._error is not None:
                raise self._error
            waiter: asyncio.Future[Tuple[bytes, IPAddress]] = self._loop.create_future()
            self._waiters.append(waiter)
            try:
                return await waiter
            except asyncio.CancelledError:
                if waiter.done() and not waiter.cancelled() and waiter.exception() is None:
                    self._received.appendleft(waiter.result())  # taken, not consumed: back in front
                else:
                    try:
                        self._waiters.remove(waiter)
                    except ValueError:
                        pass
                raise
        item = self._received.popleft()
        if self._paused and len(self._received) <= self.max_queued // 2 and self._error is None:
            self._paused = False
            self.socket.begin_receiving()
        if isinstance(item, BaseException):
            raise item
        return item

    def __aiter__(self) -> "AsyncUdpSocket":
        return self

    async def __anext__(self) -> Tuple[bytes, IPAddress]:
        """``async for data, address in sock``: until the socket is closed."""
        try:
            return await self.receive()
        except ClosedError:
            raise StopAsyncIteration from None

    def _deliver(self, item: Union[Tuple[bytes, IPAddress], BaseException]) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                if isinstance(item, BaseException):
                    waiter.set_exception(item)
                else:
                    waiter.set_result(item)
                return
        self._received.append(item)
        if len(self._received) >= self.max_queued and self._receiving and not self._paused:
            self._paused = True
            self.socket.pause_receiving()

    # ---- closing ---------------------------------------------------------------------

    async def close(self) -> None:
        """Closes for good once queued datagrams were sent (returning then, as
        :meth:`UdpSocket.close <socketkit.UdpSocket.close>` does not wait)."""
        if not self._closed.done():
            try:
                self.socket.disconnect_after_sending()
                if self.socket.is_closed and not self._closed.done():
                    self._closed.set_result(None)  # it never had descriptors: no did_close
            except Error:
                if not self._closed.done():
                    self._closed.set_result(None)
            await asyncio.shield(self._closed)
        self.socket.abort()
        self._fail(ClosedError("the socket was closed"))

    def abort(self) -> None:
        """Closes for good at once; pending operations raise ClosedError."""
        self.socket.abort()
        self._fail(ClosedError("the socket was closed"))
        if not self._closed.done():
            self._closed.set_result(None)

    @property
    def closed(self) -> "asyncio.Future[None]":
        """Resolves when the socket closes."""
        return asyncio.shield(self._closed)

    async def __aenter__(self) -> "AsyncUdpSocket":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    def _fail(self, error: BaseException) -> None:
        if self._error is None:
            self._error = error
        futures = list(self._sends.values()) + list(self._waiters)
        self._sends.clear()
        self._waiters.clear()
        if self._connected is not None and not self._connected.done():
            futures.append(self._connected)  # type: ignore[arg-type]
        for future in futures:
            if not future.done():
                future.set_exception(self._error)
