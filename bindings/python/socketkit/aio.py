# SPDX-License-Identifier: MIT
"""asyncio integration.

:func:`queue` gives the running loop a :class:`~socketkit.HostQueue` whose descriptor the
loop watches (``loop.add_reader``): SocketKit delegate methods then run on the loop's own
thread, between its other callbacks, with no extra thread. Use it for any socket::

    sock = socketkit.Socket(my_delegate, queue=socketkit.aio.queue())

On top of that, :class:`AsyncSocket` and :func:`start_server` offer awaitable calls::

    async def main():
        sock = await socketkit.aio.AsyncSocket.connect("127.0.0.1", 8000, timeout=5)
        await sock.write(b"PING\\r\\n")
        reply = await sock.read_to_data(b"\\r\\n")
        await sock.close()

Errors arrive as the same exceptions as everywhere in socketkit; a read or write pending
when the connection ends raises the error that ended it (ClosedError when the peer closed,
or the error of ``socket_did_disconnect``).

TLS: ``await sock.start_tls(settings)`` returns once the connection is secure (raising the
:class:`~socketkit.TLSError` that ended it otherwise); ``AsyncSocket.connect(..., tls=...)``
connects and secures in one call, and ``start_server(handler, tls=server_settings)`` hands
the handler only connections whose handshake succeeded::

    settings = socketkit.TLSSettings(trust_file="ca.pem")
    sock = await socketkit.aio.AsyncSocket.connect("localhost", 8443, tls=settings)
    print(sock.tls_info.protocol_version)

UDP: :class:`AsyncUdpSocket` sends and receives datagrams with awaitable calls::

    server = await socketkit.aio.AsyncUdpSocket.bind("127.0.0.1", 9999)
    data, address = await server.receive()
    await server.send_to(data, address)
"""
from __future__ import annotations

import asyncio
import collections
import inspect
import weakref
from typing import Any, Awaitable, Callable, Deque, Dict, Optional, Tuple, Union

from ._addresses import IPAddress
from ._queues import HostQueue, LoopGroup
from ._tcp import Socket
from ._udp import UdpSocket
from ._tls import TLSInfo, TLSSettings, TLSTrust
from .errors import BadConfigError, ClosedError, Error, PeerRejectedError

#: Decides manual trust (``TLSSettings(manual_trust_evaluation=True)``): returns True or
#: False, or an awaitable of it.
TrustEvaluator = Callable[[TLSTrust], Union[bool, Awaitable[bool]]]

_queues: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, HostQueue]" = weakref.WeakKeyDictionary()


def queue(loop: Optional[asyncio.AbstractEventLoop] = None) -> HostQueue:
    """The callback queue drained by `loop` (default: the running loop), created once per
    loop. Delegate methods of sockets using it run on that loop's thread."""
    loop = loop or asyncio.get_running_loop()
    host = _queues.get(loop)
    if host is None:
        host = HostQueue()
        loop.add_reader(host.fileno(), host.drain)
        _queues[loop] = host
    return host


_groups: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, LoopGroup]" = weakref.WeakKeyDictionary()


def loop_group(loop: Optional[asyncio.AbstractEventLoop] = None) -> LoopGroup:
    """A SocketKit loop run by the asyncio loop itself (:meth:`LoopGroup.driven`), created
    once per loop. Sockets on it do their I/O on the asyncio thread, between the loop's
    other callbacks, as asyncio's own transports do: no SocketKit thread, and a write from
    a delegate method goes to the kernel at once. Pass it as ``loop_group``, with
    ``queue=None`` (delegate methods run straight from the loop, on the asyncio thread: the
    fastest) or :func:`queue` (they run from a queue asyncio drains after each turn)::

        sock = socketkit.Socket(my_delegate, queue=None, loop_group=aio.loop_group())

    Must be called on the loop's thread (the group belongs to that thread). Closing the
    group (or :func:`detach`) disconnects its sockets.
    """
    running = asyncio.get_running_loop()
    loop = loop or running
    if loop is not running:
        raise RuntimeError("aio.loop_group() must be called from a coroutine or callback of its loop")
    group = _groups.get(loop)
    if group is None:
        host = queue(loop)
        group = LoopGroup.driven()
        descriptor = group.fileno()
        loop.add_reader(descriptor, _drive, loop, group, host, descriptor)
        _groups[loop] = group
        # Closed directly: stop watching its descriptor at once (the number may be reused).
        group._close_hooks.append(lambda: _forget(loop, group, descriptor))
    return group


#: Iterations one wake-up runs before letting the asyncio loop's other callbacks go.
_ITERATIONS_PER_WAKE_UP = 64
_ROUNDS = range(_ITERATIONS_PER_WAKE_UP)  # made once, not on every wake-up


def _drive(loop: asyncio.AbstractEventLoop, group: LoopGroup, host: HostQueue, descriptor: int) -> None:
    """Runs SocketKit iterations and the delegate methods they produced until both are idle
    (or, under sustained load, for a bounded number of rounds, then again soon)."""
    try:
        for _ in _ROUNDS:
            more = group.run_once()
            handled = host.drain()
            if not more and not handled:
                return
        loop.call_soon(_drive, loop, group, host, descriptor)
    except Error:
        # The group was closed (from another thread, its stop now complete).
        _forget(loop, group, descriptor)


def _forget(loop: asyncio.AbstractEventLoop, group: LoopGroup, descriptor: int) -> None:
    if _groups.get(loop) is group:
        del _groups[loop]
    if not loop.is_closed():
        loop.remove_reader(descriptor)


def detach(loop: Optional[asyncio.AbstractEventLoop] = None) -> None:
    """Stops `loop` from draining its queue and running its SocketKit loop (call before
    closing the loop; sockets on its :func:`loop_group` disconnect)."""
    loop = loop or asyncio.get_running_loop()
    group = _groups.get(loop)
    if group is not None:
        group.close()  # its close hook stops watching the descriptor
    host = _queues.pop(loop, None)
    if host is not None:
        loop.remove_reader(host.fileno())
        host.drain()
        host.close()


class AsyncSocket:
    """A socket with awaitable operations; delegate methods run on the asyncio loop.

    Every operation is queued at once (so several reads or writes may be outstanding, and
    they complete in order) and its awaitable resolves when SocketKit reports it.
    """

    def __init__(self, sock: Optional[Socket] = None, *, loop_group: Optional[LoopGroup] = None) -> None:
        self._loop = asyncio.get_running_loop()
        self._futures: Dict[Tuple[str, int], asyncio.Future] = {}
        self._next_tag = 0
        self._connected: Optional[asyncio.Future] = None
        self._secured: Optional[asyncio.Future] = None
        self._evaluate_trust: Optional[TrustEvaluator] = None
        self._trust_failure: Optional[BaseException] = None
        self._trust_tasks: set = set()  # answers being awaited (asyncio keeps tasks weakly)
        self._closed: asyncio.Future = self._loop.create_future()
        self._error: Optional[BaseException] = None
        if sock is None:
            sock = Socket(self, queue=queue(self._loop), loop_group=loop_group)
        else:
            sock.queue = queue(self._loop)
            sock.delegate = self
        self.socket = sock

    @classmethod
    async def connect(cls, host: str, port: int, *, interface: Optional[str] = None, timeout: float = -1,
                      loop_group: Optional[LoopGroup] = None, tls: Optional[TLSSettings] = None,
                      evaluate_trust: Optional[TrustEvaluator] = None) -> "AsyncSocket":
        """Connects and returns once the connection is up (raises what ended it otherwise).
        With `tls` (client settings), also secures it first (see :meth:`start_tls`)."""
        self = cls(loop_group=loop_group)
        self._connected = self._loop.create_future()
        self.socket.connect_to_host(host, port, interface=interface, timeout=timeout)
        try:
            await self._connected
            if tls is not None:
                await self.start_tls(tls, evaluate_trust=evaluate_trust)
        except BaseException:
            self.socket.close()
            raise
        return self

    @classmethod
    async def connect_unix(cls, path: str, *, timeout: float = -1) -> "AsyncSocket":
        self = cls()
        self._connected = self._loop.create_future()
        self.socket.connect_to_unix_path(path, timeout=timeout)
        try:
            await self._connected
        except BaseException:
            self.socket.close()
            raise
        return self

    # ---- operations ----------------------------------------------------------------

    def _begin(self, kind: str) -> Tuple[int, asyncio.Future]:
        if self._error is not None:
            raise self._error
        tag = self._next_tag
        self._next_tag += 1
        future = self._loop.create_future()
        self._futures[(kind, tag)] = future
        return tag, future

    async def _run(self, kind: str, start: Callable[[int], None]) -> Any:
        tag, future = self._begin(kind)
        try:
            start(tag)
        except BadConfigError:
            self._futures.pop((kind, tag), None)
            if not self._has_ended():
                raise
            # The connection ended (a peer close is reported at once, even with nothing
            # queued) and its socket_did_disconnect is still on its way: raise what ended it.
            await asyncio.shield(self._closed)
            raise self._error if self._error is not None else ClosedError("the connection was closed") from None
        except BaseException:
            self._futures.pop((kind, tag), None)
            raise
        return await future

    def _has_ended(self) -> bool:
        """A session of the socket ended and its socket_did_disconnect is yet to come."""
        sock = self.socket
        try:
            return sock.is_disconnected and sock._sessions_started > sock._sessions_ended
        except Error:  # closed by this program
            return False

    async def read(self, max_length: int = 0, timeout: float = -1) -> bytes:
        """Whatever is available (at least one byte)."""
        return await self._run("read", lambda tag: self.socket.read(max_length, timeout, tag))

    async def read_to_length(self, length: int, timeout: float = -1) -> bytes:
        """Exactly `length` bytes."""
        return await self._run("read", lambda tag: self.socket.read_to_length(length, timeout, tag))

    async def read_to_data(self, separator: bytes, max_length: int = 0, timeout: float = -1) -> bytes:
        """Up to and including `separator`."""
        return await self._run("read", lambda tag: self.socket.read_to_data(separator, max_length, timeout, tag))

    async def write(self, data: Any, timeout: float = -1) -> None:
        """Resolves once the kernel accepted every byte."""
        await self._run("write", lambda tag: self.socket.write(data, timeout, tag))

    # ---- TLS -------------------------------------------------------------------------

    async def start_tls(self, settings: Optional[TLSSettings] = None, *,
                        evaluate_trust: Optional[TrustEvaluator] = None) -> Optional[TLSInfo]:
        """Secures the connection and returns what the handshake settled (None if the
        connection already ended again by the time it was reported). The handshake is
        queued behind the reads and writes already queued (their awaitables complete in
        plaintext first); later ones run encrypted. `settings` None: a client with the
        defaults. Raises TLSSettingsError or BadConfigError at once, and the TLSError that
        ended the connection if the handshake fails.

        With ``manual_trust_evaluation``, ``evaluate_trust(trust)`` decides (True/False, or
        an awaitable of it: the connection waits); without it every peer is rejected."""
        if self._error is not None:
            raise self._error
        self._secured = self._loop.create_future()
        self._evaluate_trust = evaluate_trust
        self._trust_failure = None
        try:
            self.socket.start_tls(settings)
        except BaseException:
            self._secured = None
            raise
        try:
            return await self._secured
        except PeerRejectedError as error:
            if self._trust_failure is not None:
                raise error from self._trust_failure
            raise

    @property
    def is_secure(self) -> bool:
        return self.socket.is_secure

    @property
    def tls_info(self) -> Optional[TLSInfo]:
        """What the handshake settled, or None while not secure."""
        return self.socket.tls_info

    async def close(self) -> None:
        """Closes after pending writes; returns when the connection has ended."""
        if not self._closed.done():
            try:
                self.socket.disconnect_after_writing()
            except Error:
                pass
            if self.socket.is_disconnected and not self._closed.done():
                self._closed.set_result(None)
            await asyncio.shield(self._closed)
        self.socket.close()

    def abort(self) -> None:
        """Closes at once, dropping pending operations (queued writes are not sent)."""
        self.socket.abort()
        self._fail(ClosedError("the socket was closed"))

    @property
    def closed(self) -> Awaitable[None]:
        """Resolves when the connection ends."""
        return asyncio.shield(self._closed)

    # ---- delegate methods (run on the loop thread) -----------------------------

    def socket_did_connect(self, sock: Socket, host: str, port: int) -> None:
        if self._connected is not None and not self._connected.done():
            self._connected.set_result((host, port))

    def socket_did_read(self, sock: Socket, data: Any, tag: int) -> None:
        future = self._futures.pop(("read", tag), None)
        if future is not None and not future.done():
            future.set_result(bytes(data))

    def socket_did_write(self, sock: Socket, tag: int) -> None:
        future = self._futures.pop(("write", tag), None)
        if future is not None and not future.done():
            future.set_result(None)

    def socket_did_disconnect(self, sock: Socket, error: Optional[Error]) -> None:
        self._fail(error if error is not None else ClosedError("the connection was closed"))
        if not self._closed.done():
            self._closed.set_result(None)

    def socket_did_secure(self, sock: Socket) -> None:
        if self._secured is not None and not self._secured.done():
            self._secured.set_result(sock.tls_info)

    def socket_did_receive_trust(self, sock: Socket, trust: TLSTrust) -> Optional[bool]:
        evaluate = self._evaluate_trust
        if evaluate is None:
            return False
        verdict = evaluate(trust)
        if not inspect.isawaitable(verdict):
            return bool(verdict)

        async def answer_later() -> None:
            accept = False
            try:
                accept = bool(await verdict)
            except BaseException as error:  # noqa: BLE001 - rejected, and said why
                self._trust_failure = error
            try:
                trust.answer(accept)
            except Error:
                pass  # closed meanwhile

        task = self._loop.create_task(answer_later())
        self._trust_tasks.add(task)
        task.add_done_callback(self._trust_tasks.discard)
        return None

    def _fail(self, error: BaseException) -> None:
        self._error = error
        futures = list(self._futures.values())
        self._futures.clear()
        if self._connected is not None and not self._connected.done():
            futures.append(self._connected)
        if self._secured is not None and not self._secured.done():
            futures.append(self._secured)
        for future in futures:
            if not future.done():
                future.set_exception(error)


class Server:
    """A listener whose connections are handed to a coroutine as AsyncSocket objects.

    With `tls` (server settings) each connection is secured before the handler sees it; a
    connection whose handshake fails is closed, its error goes to ``on_tls_error(error)``
    if given (else to the loop's exception handler), and the handler is not called."""

    def __init__(self, handler: Callable[[AsyncSocket], Awaitable[None]], loop_group: Optional[LoopGroup],
                 tls: Optional[TLSSettings] = None, evaluate_trust: Optional[TrustEvaluator] = None,
                 on_tls_error: Optional[Callable[[BaseException], None]] = None) -> None:
        self._loop = asyncio.get_running_loop()
        self._handler = handler
        self._tls = tls
        self._evaluate_trust = evaluate_trust
        self._on_tls_error = on_tls_error
        self._tasks: set = set()
        self._closed = self._loop.create_future()
        self.socket = Socket(self, queue=queue(self._loop), loop_group=loop_group)

    @property
    def port(self) -> int:
        return self.socket.local_port

    def socket_did_accept(self, listener: Socket, new_socket: Socket) -> None:
        connection = AsyncSocket(new_socket)
        task = self._loop.create_task(self._serve(connection))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _serve(self, connection: AsyncSocket) -> None:
        try:
            if self._tls is not None:
                try:
                    await connection.start_tls(self._tls, evaluate_trust=self._evaluate_trust)
                except Error as error:
                    if self._on_tls_error is not None:
                        self._on_tls_error(error)
                    else:
                        self._loop.call_exception_handler({
                            "message": "socketkit: TLS handshake of an accepted connection failed",
                            "exception": error, "socket": connection.socket})
                    return
            await self._handler(connection)
        finally:
            connection.socket.close()

    def socket_did_disconnect(self, sock: Socket, error: Optional[Error]) -> None:
        if not self._closed.done():
            self._closed.set_result(error)

    def close(self) -> None:
        """Stops listening (connections already accepted carry on)."""
        self.socket.close()
        if not self._closed.done():
            self._closed.set_result(None)

    async def wait_closed(self) -> None:
        await asyncio.shield(self._closed)

    async def __aenter__(self) -> "Server":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        self.close()
        for task in list(self._tasks):
            task.cancel()


async def start_server(handler: Callable[[AsyncSocket], Awaitable[None]], host: Optional[str] = "127.0.0.1",
                       port: int = 0, *, loop_group: Optional[LoopGroup] = None, tls: Optional[TLSSettings] = None,
                       evaluate_trust: Optional[TrustEvaluator] = None,
                       on_tls_error: Optional[Callable[[BaseException], None]] = None) -> Server:
    """Listens on `host`/`port` (port 0 picks one: see ``server.port``) and runs
    ``handler(connection)`` as a task for each accepted connection. With `tls` (server
    settings, e.g. ``TLSSettings.server("chain.pem", "key.pem")``) connections are secured
    first (see :class:`Server`); for STARTTLS, call ``await connection.start_tls(...)`` in
    the handler instead."""
    if tls is not None:
        tls.check()  # unusable settings fail here, not once per connection
    server = Server(handler, loop_group, tls, evaluate_trust, on_tls_error)
    server.socket.accept_on_interface(host, port)
    return server


async def start_unix_server(handler: Callable[[AsyncSocket], Awaitable[None]], path: str) -> Server:
    server = Server(handler, None)
    server.socket.accept_on_unix_path(path)
    return server


class AsyncUdpSocket:
    """A UDP socket with awaitable operations; its delegate methods run on the asyncio loop.

    Sends resolve when SocketKit reports the datagram sent, and raise what failed it
    (SystemCallError with EMSGSIZE, ResolutionError, ...: the socket stays open). Received
    datagrams wait in a queue for :meth:`receive`; past :attr:`max_queued` of them the
    socket stops reading (they wait in the kernel, where the kernel may drop them) until
    :meth:`receive` has taken half. A receive error (an ICMP error about an earlier
    datagram, TruncatedError) is raised by the :meth:`receive` whose turn it is.
    """

    def __init__(self, sock: Optional[UdpSocket] = None, *, loop_group: Optional[LoopGroup] = None,
                 max_queued: int = 1024) -> None:
        self._loop = asyncio.get_running_loop()
        self._sends: Dict[int, asyncio.Future] = {}
        self._next_tag = 0
        self._received: Deque[Union[Tuple[bytes, IPAddress], BaseException]] = collections.deque()
        self._waiters: Deque[asyncio.Future] = collections.deque()
        self._connected: Optional[asyncio.Future] = None
        self._closed: asyncio.Future = self._loop.create_future()
        self._error: Optional[BaseException] = None
        self._receiving = False
        self._paused = False
        #: Datagrams queued for :meth:`receive` before reading pauses.
        self.max_queued = max_queued
        if sock is None:
            sock = UdpSocket(self, queue=queue(self._loop), loop_group=loop_group)
        else:
            sock.queue = queue(self._loop)
            sock.delegate = self
        self.socket = sock

    @classmethod
    async def bind(cls, host: Optional[str] = "127.0.0.1", port: int = 0, *, loop_group: Optional[LoopGroup] = None,
                   max_queued: int = 1024) -> "AsyncUdpSocket":
        """A socket bound to `host` (None: every interface) and `port` (0: one free port),
        receiving."""
        self = cls(loop_group=loop_group, max_queued=max_queued)
        try:
            self.socket.bind_to_port(port, host)
            self._start_receiving()
        except BaseException:
            self.socket.abort()
            raise
        return self

    @classmethod
    async def connect(cls, host: str, port: int, *, loop_group: Optional[LoopGroup] = None,
                      max_queued: int = 1024) -> "AsyncUdpSocket":
        """A socket connected to `host` and `port` (only that peer is heard), receiving.
        Raises what failed the connect (ResolutionError, ...)."""
        self = cls(loop_group=loop_group, max_queued=max_queued)
        self._connected = self._loop.create_future()
        try:
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

    # ---- sending -------------------------------------------------------------------

    async def _send(self, start: Callable[[int], None]) -> None:
        if self._error is not None:
            raise self._error
        tag = self._next_tag
        self._next_tag += 1
        future = self._loop.create_future()
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

    # ---- receiving -----------------------------------------------------------------

    def _start_receiving(self) -> None:
        self.socket.begin_receiving()
        self._receiving = True

    async def receive(self) -> Tuple[bytes, IPAddress]:
        """The next datagram and its sender. Raises ClosedError (or the error that closed
        the socket) once it is closed and every datagram received before was taken."""
        if not self._received:
            if self._error is not None:
                raise self._error
            waiter = self._loop.create_future()
            self._waiters.append(waiter)
            return await waiter
        item = self._received.popleft()
        if self._paused and len(self._received) <= self.max_queued // 2 and self._error is None:
            self._paused = False
            self.socket.begin_receiving()
        if isinstance(item, BaseException):
            raise item
        return item

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

    # ---- closing -------------------------------------------------------------------

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
    def closed(self) -> Awaitable[None]:
        """Resolves when the socket closes."""
        return asyncio.shield(self._closed)

    def _fail(self, error: BaseException) -> None:
        if self._error is None:
            self._error = error
        futures = list(self._sends.values()) + list(self._waiters)
        self._sends.clear()
        self._waiters.clear()
        if self._connected is not None and not self._connected.done():
            futures.append(self._connected)
        for future in futures:
            if not future.done():
                future.set_exception(self._error)

    # ---- delegate methods (run on the loop thread) -----------------------------

    def udp_socket_did_connect(self, sock: UdpSocket, address: IPAddress) -> None:
        if self._connected is not None and not self._connected.done():
            self._connected.set_result(address)

    def udp_socket_did_not_connect(self, sock: UdpSocket, error: Error) -> None:
        if self._connected is not None and not self._connected.done():
            self._connected.set_exception(error)

    def udp_socket_did_send(self, sock: UdpSocket, tag: int) -> None:
        future = self._sends.pop(tag, None)
        if future is not None and not future.done():
            future.set_result(None)

    def udp_socket_did_not_send(self, sock: UdpSocket, tag: int, error: Error) -> None:
        future = self._sends.pop(tag, None)
        if future is not None and not future.done():
            future.set_exception(error)

    def udp_socket_did_receive(self, sock: UdpSocket, data: bytes, address: IPAddress, context: Any) -> None:
        self._deliver((data, address))

    def udp_socket_did_receive_error(self, sock: UdpSocket, error: Error) -> None:
        self._deliver(error)

    def udp_socket_did_close(self, sock: UdpSocket, error: Optional[Error]) -> None:
        self._fail(error if error is not None else ClosedError("the socket was closed"))
        if not self._closed.done():
            self._closed.set_result(None)
