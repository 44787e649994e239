# SPDX-License-Identifier: MIT
"""The first awaitable API of socketkit.aio, kept: :class:`AsyncSocket` (SocketKit's reads,
awaited) and the servers that hand it to a handler. Built on the same connection as the
streams, so its reads are cancellation-safe too; the peer's end still ends the connection
(ClosedError), as it always did."""
from __future__ import annotations

import asyncio
from typing import Any, Awaitable, Callable, Dict, Optional, Sequence, Union

from .._queues import LoopGroup
from .._tcp import Socket
from .._tls import TLSInfo, TLSSettings
from ..errors import BadConfigError, ClosedError, Error
from ._connection import AVAILABLE, EXACTLY, UNTIL, Connection, TrustEvaluator, _Read
from ._hosting import queue as host_queue
from ._server import Server, endpoints_for


class _AsyncSocketConnection(Connection):
    """A connection whose writes are awaited one by one (socket_did_write)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(loop, eof_is_end=False)
        self.writes: Dict[int, asyncio.Future[None]] = {}

    def socket_did_write(self, sock: Socket, tag: int) -> None:
        future = self.writes.pop(tag, None)
        if future is not None and not future.done():
            future.set_result(None)

    def end(self, error: Optional[BaseException]) -> None:
        super().end(error)
        writes, self.writes = self.writes, {}
        for future in writes.values():
            if not future.done():
                future.set_exception(self.error or ClosedError("the connection was closed"))


class AsyncSocket:
    """A socket with awaitable reads and writes (SocketKit's framing); its callbacks run on
    the asyncio loop. Reads wait their turn and complete in order; writes are queued at
    once. A read or write pending when the connection ends raises the error that ended it
    (ClosedError when the peer closed). A cancelled read loses no byte.

    New code: :func:`socketkit.aio.open_connection` (asyncio's streams)."""

    def __init__(self, sock: Optional[Socket] = None, *, loop_group: Optional[LoopGroup] = None) -> None:
        self._loop = asyncio.get_running_loop()
        self._connection = _AsyncSocketConnection(self._loop)
        if sock is None:
            sock = Socket(self._connection, queue=host_queue(self._loop), loop_group=loop_group)
        else:
            sock.queue = host_queue(self._loop)
            sock.delegate = self._connection
        self._connection.attach(sock)
        #: The SocketKit socket underneath.
        self.socket = sock

    @classmethod
    async def connect(cls, host: str, port: int, *, interface: Optional[str] = None, timeout: float = -1,
                      loop_group: Optional[LoopGroup] = None, tls: Optional[TLSSettings] = None,
                      evaluate_trust: Optional[TrustEvaluator] = None) -> "AsyncSocket":
        """Connects and returns once the connection is up (raises what ended it otherwise).
        With `tls` (client settings), also secures it first (see :meth:`start_tls`)."""
        self = cls(loop_group=loop_group)
        connection = self._connection
        connection.connected = self._loop.create_future()
        try:
            self.socket.connect_to_host(host, port, interface=interface, timeout=timeout)
            await connection.connected
            if tls is not None:
                await self.start_tls(tls, evaluate_trust=evaluate_trust)
        except BaseException:
            self.socket.close()
            raise
        return self

    @classmethod
    async def connect_unix(cls, path: str, *, timeout: float = -1) -> "AsyncSocket":
        self = cls()
        self._connection.connected = self._loop.create_future()
        try:
            self.socket.connect_to_unix_path(path, timeout=timeout)
            await self._connection.connected
        except BaseException:
            self.socket.close()
            raise
        return self

    # ---- reading and writing ---------------------------------------------------------

    async def read(self, max_length: int = 0, timeout: float = -1) -> bytes:
        """Whatever is available (at least one byte)."""
        return await self._connection.read(_Read(AVAILABLE, length=max_length, timeout=timeout))

    async def read_to_length(self, length: int, timeout: float = -1) -> bytes:
        """Exactly `length` bytes."""
        return await self._connection.read(_Read(EXACTLY, length=length, timeout=timeout))

    async def read_to_data(self, separator: bytes, max_length: int = 0, timeout: float = -1) -> bytes:
        """Up to and including `separator`."""
        return await self._connection.read(_Read(UNTIL, separator=bytes(separator), length=max_length,
                                                 timeout=timeout))

    async def write(self, data: Any, timeout: float = -1) -> None:
        """Resolves once the kernel accepted every byte."""
        connection = self._connection
        if connection.error is not None:
            raise connection.error
        tag = connection._tag()
        future: asyncio.Future[None] = self._loop.create_future()
        connection.writes[tag] = future
        try:
            self.socket.write(data, timeout, tag)
        except BadConfigError:
            connection.writes.pop(tag, None)
            if connection.error is not None or not connection._session_over():
                raise
            await asyncio.shield(connection.closed)  # its socket_did_disconnect is on its way
            raise connection.error or ClosedError("the connection was closed") from None
        except BaseException:
            connection.writes.pop(tag, None)
            raise
        await future

    # ---- TLS -------------------------------------------------------------------------

    async def start_tls(self, settings: Optional[TLSSettings] = None, *,
                        evaluate_trust: Optional[TrustEvaluator] = None) -> Optional[TLSInfo]:
        """Secures the connection and returns what the handshake settled (None if the
        connection already ended again by the time it was reported). Queued behind the
        reads and writes already queued; `settings` None: a client with the defaults.
        Raises TLSSettingsError or BadConfigError at once, and the TLSError that ended the
        connection if the handshake fails. With ``manual_trust_evaluation``,
        ``evaluate_trust(trust)`` decides (True/False, or an awaitable of it); without it
        every peer is rejected."""
        return await self._connection.start_tls(settings, evaluate_trust)

    @property
    def is_secure(self) -> bool:
        return self.socket.is_secure

    @property
    def tls_info(self) -> Optional[TLSInfo]:
        """What the handshake settled, or None while not secure."""
        return self.socket.tls_info

    # ---- closing ---------------------------------------------------------------------

    async def close(self) -> None:
        """Closes after pending writes; returns when the connection has ended."""
        self._connection.close()
        await asyncio.shield(self._connection.closed)

    def abort(self) -> None:
        """Closes at once, dropping pending operations (queued writes are not sent)."""
        self._connection.abort()

    @property
    def closed(self) -> Awaitable[None]:
        """Resolves when the connection ends."""
        return asyncio.shield(self._connection.closed)

    async def __aenter__(self) -> "AsyncSocket":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()


Handler = Callable[[AsyncSocket], Awaitable[None]]


def _legacy_server(loop: asyncio.AbstractEventLoop, endpoints: Any, handler: Handler,
                   loop_group: Optional[LoopGroup], tls: Optional[TLSSettings],
                   evaluate_trust: Optional[TrustEvaluator],
                   on_tls_error: Optional[Callable[[BaseException], None]]) -> Server:
    tasks: "set[asyncio.Task[None]]" = set()

    async def serve(connection: AsyncSocket) -> None:
        try:
            if tls is not None:
                try:
                    await connection.start_tls(tls, evaluate_trust=evaluate_trust)
                except Error as error:
                    if on_tls_error is not None:
                        on_tls_error(error)
                    else:
                        loop.call_exception_handler({
                            "message": "socketkit: TLS handshake of an accepted connection failed",
                            "exception": error, "socket": connection.socket})
                    return
            await handler(connection)
        finally:
            connection.socket.close()

    def accept(new_socket: Socket) -> None:
        task = loop.create_task(serve(AsyncSocket(new_socket)))
        tasks.add(task)
        task.add_done_callback(tasks.discard)

    server = Server(loop, endpoints, accept, loop_group=loop_group, half_close=False)
    original_close = server.close

    def close() -> None:
        original_close()
        for task in list(tasks):
            task.cancel()

    server.close = close  # type: ignore[method-assign]  # the former Server cancelled its handlers
    return server


async def legacy_start_server(handler: Handler, host: Union[None, str, Sequence[str]], port: int, *,
                              loop_group: Optional[LoopGroup],
                              tls: Any, evaluate_trust: Optional[TrustEvaluator],
                              on_tls_error: Optional[Callable[[BaseException], None]]) -> Server:
    if tls is not None and not isinstance(tls, TLSSettings):
        raise TypeError("the former start_server(handler) takes tls=socketkit.TLSSettings")
    if tls is not None:
        tls.check()
    loop = asyncio.get_running_loop()
    server = _legacy_server(loop, endpoints_for(host, port), handler, loop_group, tls, evaluate_trust, on_tls_error)
    await server.start_serving()
    return server


async def legacy_start_unix_server(handler: Handler, path: str) -> Server:
    loop = asyncio.get_running_loop()
    server = _legacy_server(loop, [path], handler, None, None, None, None)
    await server.start_serving()
    return server
