# SPDX-License-Identifier: MIT
"""asyncio on SocketKit.

**Streams**, as asyncio's: code written for ``asyncio.open_connection`` and
``asyncio.start_server`` ports by changing the import::

    from socketkit import aio

    async def handle(reader, writer):
        async for line in reader:                   # or readuntil, readexactly, read
            writer.write(line)
            await writer.drain()
        writer.close()

    async def main():
        async with await aio.start_server(handle, "127.0.0.1", 8000) as server:
            reader, writer = await aio.open_connection("127.0.0.1", 8000)
            writer.write(b"hello\\n")
            print(await reader.readline())
            writer.close()
            await writer.wait_closed()

:class:`StreamReader` and :class:`StreamWriter` have asyncio's surface and semantics
(IncompleteReadError with the partial bytes at the end of the stream, LimitOverrunError
past the limit, ``drain``, ``write_eof``, ``start_tls``, ``get_extra_info``), plus
SocketKit's own framing (``read_to_length``, ``read_to_data``) and iterators
(``reader.lines()``, ``reader.chunks()``). Every read is **cancellation-safe**: a read
cancelled by ``asyncio.wait_for`` or a cancelled task loses no byte, and the next read
gets them; so ``wait_for(reader.readline(), 0.2)`` is the way to wait a bounded time and
keep both the connection and the data (SocketKit's own read ``timeout`` ends the
connection, CocoaAsyncSocket's rule). The reads are SocketKit's framing: the engine
gathers a line or a length, and ``Socket.cancel_read`` / ``Socket.unread`` give back what
a withdrawn read had gathered.

Where the I/O runs: by default SocketKit's own loop threads do it and the callbacks reach
the asyncio loop through :func:`queue`; ``loop_group=aio.loop_group()`` (on
``open_connection``, ``start_server``, ...) has the asyncio loop run SocketKit's loop
itself: one thread and no hand-over, which costs less per read (``bench/README.md`` has
the figures); call :func:`detach` before closing such an asyncio loop.

TLS: ``ssl=`` takes a :class:`~socketkit.TLSSettings`, an SSLContext made by
:func:`ssl_context` (for libraries that insist on ``ssl.SSLContext``), or a client
SSLContext whose settings can be read; the handshake is SocketKit's (OpenSSL inside the
engine).

**Servers** (:class:`Server`): ``async with``, ``serve_forever()``, ``sockets``,
``close()``, ``wait_closed()``; what a connection handler raises goes to the loop's
exception handler (and closes that connection), as with asyncio 3.12.

**UDP**: :func:`create_datagram_endpoint` gives asyncio's (transport, protocol) pair;
:class:`AsyncUdpSocket` awaitable sends and receives, ``async for data, address in sock``.
Options are set before binding (``reuse_port``, ``allow_broadcast``, ``configure=``).

**asyncio libraries unchanged** (aiohttp, websockets, ...): :func:`install` sets an
event-loop policy whose loops (:class:`EventLoop`, asyncio's selector loop) make their
TCP and Unix-domain connections and servers, and their ``start_tls``, with SocketKit;
see :mod:`socketkit.aio._transport` for why a loop and not separate functions.

**The building blocks**: :func:`queue` (a callback queue the asyncio loop drains: any
socket's delegate methods on the loop's thread), :func:`loop_group` (a SocketKit loop
that asyncio itself runs), :func:`detach`. The former awaitable API, :class:`AsyncSocket`
(SocketKit's reads, awaited), is kept.

Errors are socketkit's exceptions (each also the built-in Python programmers catch:
``ConnectionRefusedError``, ``TimeoutError``, ``ssl.SSLError``, ...), and asyncio's own
where asyncio's API raises them.
"""
from asyncio import IncompleteReadError, LimitOverrunError

from ._asyncsocket import AsyncSocket
from ._connection import TrustEvaluator
from ._datagram import AsyncUdpSocket, DatagramTransport, create_datagram_endpoint
from ._hosting import detach, loop_group, queue
from ._server import ListeningSocket, Server
from ._streams import (
    DEFAULT_LIMIT,
    StreamReader,
    StreamWriter,
    open_connection,
    open_unix_connection,
    start_server,
    start_unix_server,
)
from ._tlsargs import SSLContext, ssl_context
from ._transport import EventLoop, EventLoopPolicy, SocketTransport, install, new_event_loop, run

__all__ = [
    "AsyncSocket", "AsyncUdpSocket", "DEFAULT_LIMIT", "DatagramTransport", "EventLoop", "EventLoopPolicy",
    "IncompleteReadError", "LimitOverrunError", "ListeningSocket", "SSLContext", "Server", "SocketTransport",
    "StreamReader", "StreamWriter", "TrustEvaluator", "create_datagram_endpoint", "detach", "install",
    "loop_group", "new_event_loop", "open_connection", "open_unix_connection", "queue", "run", "ssl_context",
    "start_server", "start_unix_server",
]
