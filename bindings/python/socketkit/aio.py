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
"""
from __future__ import annotations

import asyncio
import weakref
from typing import Any, Awaitable, Callable, Dict, Optional, Tuple

from ._core import HostQueue, LoopGroup, Socket
from .errors import ClosedError, Error

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


def detach(loop: Optional[asyncio.AbstractEventLoop] = None) -> None:
    """Stops `loop` from draining its queue (call before closing the loop)."""
    loop = loop or asyncio.get_running_loop()
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
                      loop_group: Optional[LoopGroup] = None) -> "AsyncSocket":
        """Connects and returns once the connection is up (raises what ended it otherwise)."""
        self = cls(loop_group=loop_group)
        self._connected = self._loop.create_future()
        self.socket.connect_to_host(host, port, interface=interface, timeout=timeout)
        try:
            await self._connected
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
        except BaseException:
            self._futures.pop((kind, tag), None)
            raise
        return await future

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

    def _fail(self, error: BaseException) -> None:
        self._error = error
        futures = list(self._futures.values())
        self._futures.clear()
        if self._connected is not None and not self._connected.done():
            futures.append(self._connected)
        for future in futures:
            if not future.done():
                future.set_exception(error)


class Server:
    """A listener whose connections are handed to a coroutine as AsyncSocket objects."""

    def __init__(self, handler: Callable[[AsyncSocket], Awaitable[None]], loop_group: Optional[LoopGroup]) -> None:
        self._loop = asyncio.get_running_loop()
        self._handler = handler
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
                       port: int = 0, *, loop_group: Optional[LoopGroup] = None) -> Server:
    """Listens on `host`/`port` (port 0 picks one: see ``server.port``) and runs
    ``handler(connection)`` as a task for each accepted connection."""
    server = Server(handler, loop_group)
    server.socket.accept_on_interface(host, port)
    return server


async def start_unix_server(handler: Callable[[AsyncSocket], Awaitable[None]], path: str) -> Server:
    server = Server(handler, None)
    server.socket.accept_on_unix_path(path)
    return server
