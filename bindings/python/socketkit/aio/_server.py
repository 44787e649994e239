# SPDX-License-Identifier: MIT
"""Listening sockets for asyncio: :class:`Server`, what :func:`socketkit.aio.start_server`
and the SocketKit event loop's ``create_server`` return, with the surface of asyncio's
``Server`` (``sockets``, ``close``, ``wait_closed``, ``serve_forever``, ``async with``)."""
from __future__ import annotations

import asyncio
import socket as _stdlib_socket
from typing import Any, Callable, List, Optional, Sequence, Set, Tuple, Union

from .._queues import CallbackQueue, LoopGroup
from .._tcp import Socket
from ..errors import Error
from ._hosting import queue as host_queue


class ListeningSocket:
    """What ``server.sockets`` lists: a listener's addresses, as asyncio's TransportSocket
    shows them (the descriptor stays SocketKit's)."""

    def __init__(self, sock: Socket) -> None:
        self._socket = sock

    @property
    def family(self) -> int:
        if self._socket.is_unix:
            return int(_stdlib_socket.AF_UNIX)
        return int(_stdlib_socket.AF_INET6 if self._socket.is_ipv6 and not self._socket.is_ipv4 else
                   _stdlib_socket.AF_INET)

    @property
    def type(self) -> int:
        return int(_stdlib_socket.SOCK_STREAM)

    def getsockname(self) -> Any:
        return self._socket.local_address

    def __repr__(self) -> str:
        return f"<socketkit.aio.ListeningSocket {self.getsockname()!r}>"


class _Listener:
    """The delegate of a server's listening sockets (private: SocketKit's callbacks)."""

    def __init__(self, server: "Server") -> None:
        self.server = server

    def socket_did_accept(self, listener: Socket, new_socket: Socket) -> None:
        self.server._accepted(new_socket)

    def socket_did_disconnect(self, sock: Socket, error: Optional[Error]) -> None:
        if error is not None and sock in self.server._listeners:
            self.server._listener_failed(sock, error)


#: Where to listen: (host or None, port), or a Unix path.
Endpoint = Union[Tuple[Optional[str], int], str]


class Server(asyncio.AbstractServer):
    """A listening server: `accept(new_socket)` takes each accepted connection. Listening
    starts with :meth:`start_serving` (``start_server`` calls it unless
    ``start_serving=False``) and stops with :meth:`close`; connections already accepted
    carry on."""

    def __init__(self, loop: asyncio.AbstractEventLoop, endpoints: Sequence[Endpoint],
                 accept: Callable[[Socket], None], *, queue: Optional[CallbackQueue] = None,
                 use_host_queue: bool = True, loop_group: Optional[LoopGroup] = None,
                 configure: Optional[Callable[[Socket], None]] = None, half_close: bool = True) -> None:
        self._loop = loop
        self._half_close = half_close
        self._endpoints = list(endpoints)
        self._accept = accept
        self._queue = queue if queue is not None or not use_host_queue else host_queue(loop)
        self._loop_group = loop_group
        self._configure = configure
        self._listeners: List[Socket] = []
        self._delegate = _Listener(self)
        self._serving = False
        self._closed = False
        self._closed_future: asyncio.Future[None] = loop.create_future()
        self._serving_forever: Optional[asyncio.Future[None]] = None
        #: Transports or writers of the connections accepted (for close_clients / abort_clients).
        self._clients: Set[Any] = set()
        self._error: Optional[BaseException] = None

    # ---- listening -------------------------------------------------------------------

    def _listen(self) -> None:
        for index in range(len(self._endpoints)):
            endpoint = self._endpoints[index]
            sock = Socket(self._delegate, queue=self._queue, loop_group=self._loop_group)
            try:
                # Both inherited by the accepted connections: TCP_NODELAY, as asyncio sets it;
                # the peer's end as asyncio sees it (the read side ends, the write side stays).
                sock.no_delay = True
                if self._half_close:
                    sock.auto_disconnect_on_closed_read_stream = False
                if self._configure is not None:
                    self._configure(sock)
                if isinstance(endpoint, str):
                    sock.accept_on_unix_path(endpoint)
                else:
                    host, port = endpoint
                    if host is None or host == "":
                        sock.accept_on_port(port)
                    else:
                        sock.accept_on_interface(host, port)
            except BaseException:
                sock.abort()
                self._close_listeners()
                raise
            self._listeners.append(sock)
            # Later endpoints of one server with port 0 take the port the first one got, as
            # asyncio's do for every address of a host.
            if not isinstance(endpoint, str) and endpoint[1] == 0:
                self._endpoints[index + 1:] = [(other[0], sock.local_port)
                                               if not isinstance(other, str) and other[1] == 0 else other
                                               for other in self._endpoints[index + 1:]]

    def _accepted(self, new_socket: Socket) -> None:
        if self._closed:
            new_socket.abort()
            return
        self._accept(new_socket)

    def _listener_failed(self, sock: Socket, error: BaseException) -> None:
        self._error = error
        self._loop.call_exception_handler({"message": "socketkit: a listening socket ended", "exception": error,
                                           "server": self})

    def _close_listeners(self) -> None:
        listeners, self._listeners = self._listeners, []
        for sock in listeners:
            sock.close()

    # ---- asyncio.AbstractServer ------------------------------------------------------

    @property
    def sockets(self) -> Tuple[ListeningSocket, ...]:
        return tuple(ListeningSocket(sock) for sock in self._listeners)

    @property
    def port(self) -> int:
        """The port of the first listening socket (0 for a Unix-domain one)."""
        return self._listeners[0].local_port if self._listeners else 0

    def get_loop(self) -> asyncio.AbstractEventLoop:
        return self._loop

    def is_serving(self) -> bool:
        return self._serving

    async def start_serving(self) -> None:
        """Starts listening (nothing if it already does)."""
        if self._closed:
            raise RuntimeError(f"server {self!r} is closed")
        if not self._serving:
            self._listen()
            self._serving = True

    async def serve_forever(self) -> None:
        """Serves until cancelled, then closes the server (asyncio's semantics)."""
        if self._serving_forever is not None:
            raise RuntimeError(f"server {self!r} is already being awaited on serve_forever()")
        if self._closed:
            raise RuntimeError(f"server {self!r} is closed")
        await self.start_serving()
        self._serving_forever = self._loop.create_future()
        try:
            await self._serving_forever
        except asyncio.CancelledError:
            try:
                self.close()
                await self.wait_closed()
            finally:
                raise
        finally:
            self._serving_forever = None

    def close(self) -> None:
        """Stops listening: the ports (and Unix paths) are free when this returns; the
        connections already accepted carry on."""
        if self._closed:
            return
        self._closed = True
        self._serving = False
        self._close_listeners()
        if self._serving_forever is not None and not self._serving_forever.done():
            self._serving_forever.cancel()
        if not self._closed_future.done():
            self._closed_future.set_result(None)

    def close_clients(self) -> None:
        """Closes every connection accepted so far (gracefully)."""
        for client in list(self._clients):
            client.close()

    def abort_clients(self) -> None:
        """Closes every connection accepted so far at once."""
        for client in list(self._clients):
            abort = getattr(client, "abort", None) or getattr(getattr(client, "transport", None), "abort")
            abort()

    async def wait_closed(self) -> None:
        await asyncio.shield(self._closed_future)

    async def __aenter__(self) -> "Server":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        self.close()
        await self.wait_closed()

    def __repr__(self) -> str:
        return f"<socketkit.aio.Server sockets={self.sockets!r}>"


def family_only(sock: Socket, family: int) -> None:
    """asyncio's `family`: AF_INET or AF_INET6 keeps that family only (0: both)."""
    if family == _stdlib_socket.AF_INET:
        sock.ipv6_enabled = False
    elif family == _stdlib_socket.AF_INET6:
        sock.ipv4_enabled = False


def client_options(sock: Socket, family: int, happy_eyeballs_delay: Optional[float]) -> None:
    """asyncio's `family` and `happy_eyeballs_delay` for a connecting socket."""
    family_only(sock, family)
    if happy_eyeballs_delay is not None:
        sock.alternate_address_delay = happy_eyeballs_delay


def endpoints_for(host: Union[None, str, Sequence[str]], port: Optional[int]) -> List[Endpoint]:
    """asyncio's host argument (None or "": every interface; a name or address; a list of
    them) as endpoints."""
    number = int(port or 0)
    if host is None or host == "":
        return [(None, number)]
    if isinstance(host, str):
        return [(host, number)]
    return [(item, number) for item in host]
