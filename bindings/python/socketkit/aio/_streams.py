# SPDX-License-Identifier: MIT
"""asyncio's streams on SocketKit: :func:`open_connection`, :func:`start_server` and
their Unix-domain twins return and hand over :class:`StreamReader` / :class:`StreamWriter`
objects with the surface and semantics of asyncio's, so asyncio code ports by changing an
import. Reads are SocketKit's framing, cancellation-safe (see ``_connection``)."""
from __future__ import annotations

import asyncio
import inspect
import os
import socket as _stdlib_socket
import warnings
from typing import Any, AsyncIterator, Awaitable, Callable, List, Optional, Sequence, Tuple, Union

from .._queues import LoopGroup
from .._tcp import KeepAlive, Proxy, ProxyProtocol, Socket
from .._tls import TLSInfo, TLSSettings
from ..errors import Error
from ._connection import AVAILABLE, EXACTLY, UNTIL, Connection, TrustEvaluator, _Read, _DEFAULT_MAXIMUM_READ
from ._hosting import callback_queue
from ._server import Server, client_options, endpoints_for, family_only
from ._tlsargs import SSLArgument, tls_settings

#: asyncio's default limit of a line (a separator read).
DEFAULT_LIMIT = 2 ** 16

_LF = b"\n"


class StreamReader:
    """asyncio.StreamReader's reading surface over a SocketKit connection: :meth:`read`,
    :meth:`readexactly`, :meth:`readuntil`, :meth:`readline`, :meth:`at_eof`,
    :meth:`exception` and ``async for line in reader``, with asyncio's exceptions
    (IncompleteReadError with the partial bytes at the end of the stream,
    LimitOverrunError past the limit, the bytes left to read); and SocketKit's framing
    with its own timeouts (:meth:`read_to_length`, :meth:`read_to_data`), :meth:`lines`
    and :meth:`chunks`.

    Every read is cancellation-safe: cancelled (``asyncio.wait_for`` timing out, a task
    cancelled), it loses no byte, and the next read gets them. As with asyncio, one
    coroutine reads at a time (another raises RuntimeError).
    """

    def __init__(self, connection: Connection, limit: int = DEFAULT_LIMIT) -> None:
        if limit <= 0:
            raise ValueError("Limit cannot be <= 0")
        self._connection = connection
        self._limit = limit
        self._maximum_read = _DEFAULT_MAXIMUM_READ

    def __repr__(self) -> str:
        state = "eof" if self.at_eof() else ("closed" if self._connection.ended else "open")
        return f"<socketkit.aio.StreamReader {state} limit={self._limit}>"

    def _read(self, request: _Read, what: str) -> Awaitable[bytes]:
        if self._connection.reader_waiting():
            raise RuntimeError(f"{what}() called while another coroutine is already waiting for incoming data")
        return self._connection.read(request)

    def exception(self) -> Optional[BaseException]:
        """What ended the connection, if it did not end cleanly."""
        return self._connection.error

    def at_eof(self) -> bool:
        """True once the peer's side ended and every byte was read."""
        rest = self._connection.rest
        return rest is not None and not rest and (self._connection.read_closed or self._connection.ended)

    async def read(self, n: int = -1) -> bytes:
        """Up to `n` bytes, as soon as any are there (``b""`` at the end of the stream);
        `n` -1: every byte until the end; 0: ``b""`` at once."""
        if n == 0:
            return b""
        if n < 0:
            chunks: List[bytes] = []
            while True:
                chunk = await self.read(self._limit)
                if not chunk:
                    return b"".join(chunks)
                chunks.append(chunk)
        return await self._read(_Read(AVAILABLE, length=n), "read")

    async def readexactly(self, n: int) -> bytes:
        """Exactly `n` bytes; at the end of the stream first, IncompleteReadError with the
        bytes that came (and nothing is left)."""
        if n < 0:
            raise ValueError("readexactly size can not be less than zero")
        if n == 0:
            return b""
        self._allow(n)
        return await self._read(_Read(EXACTLY, length=n), "readexactly")

    async def readuntil(self, separator: Union[bytes, Tuple[bytes, ...]] = _LF) -> bytes:
        """Up to and including `separator` (or, as from Python 3.13, the first of several).
        LimitOverrunError (the bytes left to read) when the separator is not within the
        limit; IncompleteReadError with the partial bytes at the end of the stream."""
        if isinstance(separator, tuple):
            return await self._readuntil_any(separator)
        if not separator:
            raise ValueError("Separator should be at least one-byte string")
        return await self._read(_Read(UNTIL, separator=bytes(separator), limit=self._limit), "readuntil")

    async def _readuntil_any(self, separators: Tuple[bytes, ...]) -> bytes:
        """The first of several separators: what is available is gathered in Python and what
        follows the separator found is given back (unread)."""
        if not separators or not all(separators):
            raise ValueError("Separator should contain at least one element" if not separators
                             else "Separator should be at least one-byte string")
        if len(separators) == 1:
            return await self.readuntil(separators[0])
        gathered = bytearray()
        longest = max(len(item) for item in separators)
        while True:
            found = [(index, item) for item in separators for index in [gathered.find(item)] if index >= 0]
            if found:
                index, item = min(found)
                end = index + len(item)
                if index > self._limit:
                    self._give_back(bytes(gathered))
                    raise asyncio.LimitOverrunError("Separator is found, but chunk is longer than limit", index)
                if end < len(gathered):
                    self._give_back(bytes(gathered[end:]))
                return bytes(gathered[:end])
            offset = len(gathered) + 1 - longest
            if offset > self._limit:
                self._give_back(bytes(gathered))
                raise asyncio.LimitOverrunError("Separator is not found, and chunk exceed the limit", offset)
            try:
                chunk = await self.read(self._limit)
            except BaseException:
                self._give_back(bytes(gathered))
                raise
            if not chunk:
                raise asyncio.IncompleteReadError(bytes(gathered), None)
            gathered += chunk

    def _give_back(self, data: bytes) -> None:
        if data:
            self._connection._give_back(data)

    async def readline(self) -> bytes:
        """A line, ``\n`` included; at the end of the stream what is left (``b""`` when
        nothing). A line longer than the limit is dropped and raises ValueError, as
        asyncio's does."""
        try:
            return await self.readuntil(_LF)
        except asyncio.IncompleteReadError as error:
            return error.partial
        except asyncio.LimitOverrunError as error:
            await self._drop_overrun(error)
            raise ValueError(error.args[0])

    async def _drop_overrun(self, error: asyncio.LimitOverrunError) -> None:
        """asyncio's readline after a line too long: drops it up to its separator when the
        separator was found, else every byte that was there."""
        connection = self._connection
        found = error.args[0].startswith("Separator is found")
        if connection.rest is not None:
            del connection.rest[:error.consumed + 1 if found else len(connection.rest)]
            return
        # The bytes went back to SocketKit: as many as the withdrawal's answer counted.
        count = error.consumed + 1 if found else connection.unread_bytes
        if count > 0:
            self._allow(count)
            await self._connection.read(_Read(EXACTLY, length=count))

    # ---- SocketKit's own framing, with SocketKit's timeouts ------------------------------

    async def read_to_length(self, length: int, timeout: float = -1) -> bytes:
        """Exactly `length` bytes (SocketKit's read to a length). A `timeout` (seconds)
        ends the connection with ReadTimeoutError, SocketKit's rule; to wait a bounded time
        and keep the connection, use ``asyncio.wait_for`` (nothing is lost)."""
        self._allow(length)
        return await self._read(_Read(EXACTLY, length=length, timeout=timeout), "read_to_length")

    async def read_to_data(self, separator: bytes, max_length: int = 0, timeout: float = -1) -> bytes:
        """Up to and including `separator` (SocketKit's read to a separator): with
        `max_length`, the connection ends with ReadMaxedOutError if that many bytes come
        without it; the reader's limit does not apply."""
        return await self._read(_Read(UNTIL, separator=bytes(separator), length=max_length, timeout=timeout),
                                "read_to_data")

    def _allow(self, length: int) -> None:
        # SocketKit refuses a read of more than its maximum_read_length (a guard against
        # lengths from the peer); asyncio's readexactly has no such bound: raised to fit.
        if length > self._maximum_read:
            self._connection.sock.maximum_read_length = length
            self._maximum_read = length

    # ---- iteration -------------------------------------------------------------------

    def __aiter__(self) -> "StreamReader":
        return self

    async def __anext__(self) -> bytes:
        line = await self.readline()
        if line == b"":
            raise StopAsyncIteration
        return line

    async def lines(self, separator: bytes = _LF) -> AsyncIterator[bytes]:
        """``async for line in reader.lines(b"\\r\\n")``: each line with its separator,
        until the end of the stream (a last line without one too)."""
        while True:
            try:
                yield await self.readuntil(separator)
            except asyncio.IncompleteReadError as error:
                if error.partial:
                    yield error.partial
                return

    async def chunks(self, size: int = DEFAULT_LIMIT) -> AsyncIterator[bytes]:
        """``async for chunk in reader.chunks()``: what arrives, at most `size` bytes at a
        time, until the end of the stream."""
        while True:
            chunk = await self.read(size)
            if not chunk:
                return
            yield chunk


class StreamWriter:
    """asyncio.StreamWriter's surface over a SocketKit connection: :meth:`write`,
    :meth:`writelines`, :meth:`drain`, :meth:`write_eof`, :meth:`close`,
    :meth:`wait_closed`, :meth:`is_closing`, :meth:`start_tls`, :meth:`get_extra_info`,
    ``async with`` (closes at the end)."""

    def __init__(self, connection: Connection, reader: StreamReader, sslcontext: Any = None) -> None:
        self._connection = connection
        self._reader = reader
        self._sslcontext = sslcontext

    def __repr__(self) -> str:
        return f"<socketkit.aio.StreamWriter socket={self._connection.sock!r}>"

    @property
    def transport(self) -> "StreamWriter":
        """asyncio's writers expose their transport; here the writer itself offers what a
        transport would (write, close, abort, is_closing, get_extra_info)."""
        return self

    @property
    def socket(self) -> Socket:
        """The SocketKit socket underneath."""
        return self._connection.sock

    def write(self, data: Union[bytes, bytearray, memoryview]) -> None:
        """Queues `data` (copied, or for a large ``bytes`` lent); :meth:`drain` waits while
        too much is queued."""
        self._connection.write(data)

    def writelines(self, data: Any) -> None:
        for item in data:
            self._connection.write(item)

    def can_write_eof(self) -> bool:
        return self._connection.can_write_eof()

    def write_eof(self) -> None:
        """Closes the write side once what was written is sent (a half-close; not with TLS)."""
        self._connection.write_eof()

    async def drain(self) -> None:
        """Waits while the queued bytes are above the high watermark (SocketKit's
        ``write_watermarks``); raises what ended the connection."""
        await self._connection.drain()

    def close(self) -> None:
        """Closes once the queued writes are sent; :meth:`wait_closed` waits for it."""
        self._connection.close()

    def abort(self) -> None:
        """Closes at once, dropping the queued writes."""
        self._connection.abort()

    def is_closing(self) -> bool:
        return self._connection.closing or self._connection.ended

    async def wait_closed(self) -> None:
        """Returns once the connection has ended."""
        await asyncio.shield(self._connection.closed)

    async def start_tls(self, sslcontext: SSLArgument, *, server_hostname: Optional[str] = None,
                        ssl_handshake_timeout: Optional[float] = None,
                        evaluate_trust: Optional[TrustEvaluator] = None) -> Optional[TLSInfo]:
        """Secures the connection (the side is the one that connected or accepted) and
        returns what the handshake settled. `sslcontext`: TLSSettings, an SSLContext of
        :func:`socketkit.aio.ssl_context`, or a client SSLContext that can be read (see
        there). Reads and writes queued before run in plaintext first."""
        settings = tls_settings(sslcontext, self._connection.server_side, server_hostname, ssl_handshake_timeout)
        await self.drain()
        info = await self._connection.start_tls(settings, evaluate_trust)
        self._sslcontext = sslcontext
        return info

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return extra_info(self._connection.sock, name, default, self._sslcontext)

    async def __aenter__(self) -> "StreamWriter":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        self.close()
        await self.wait_closed()


class _SSLObjectInfo:
    """What ``get_extra_info("ssl_object")`` gives: the parts of ssl.SSLObject's surface
    that SocketKit's TLS can answer."""

    def __init__(self, sock: Socket, info: TLSInfo, server_hostname: Optional[str]) -> None:
        self._socket = sock
        self._info = info
        self.server_hostname = server_hostname

    def version(self) -> str:
        return self._info.protocol_version

    def cipher(self) -> Tuple[str, str, Optional[int]]:
        return (self._info.cipher, self._info.protocol_version, None)

    def selected_alpn_protocol(self) -> Optional[str]:
        return self._info.alpn_protocol

    def compression(self) -> None:
        return None

    def getpeercert(self, binary_form: bool = False) -> Any:
        certificates = self._info.peer_certificates
        if not certificates:
            return None
        if binary_form:
            return certificates[0].der
        leaf = certificates[0]
        return {"subject": leaf.subject, "issuer": leaf.issuer}

    def session_reused(self) -> bool:
        return self._info.session_reused


def extra_info(sock: Socket, name: str, default: Any, sslcontext: Any = None) -> Any:
    """asyncio's get_extra_info for a SocketKit connection (``socket`` is None: the
    descriptor is SocketKit's)."""
    try:
        if name == "peername":
            return sock.connected_address or default
        if name == "sockname":
            return sock.local_address or default
        if name in ("sslcontext", "ssl_object", "peercert", "cipher", "compression"):
            info = sock.tls_info
            if info is None:
                return default
            if name == "sslcontext":
                return sslcontext if sslcontext is not None else default
            ssl_object = _SSLObjectInfo(sock, info, info.server_name)
            if name == "ssl_object":
                return ssl_object
            if name == "peercert":
                return ssl_object.getpeercert()
            if name == "cipher":
                return ssl_object.cipher()
            return None
        if name == "socketkit_socket":
            return sock
    except Error:
        return default
    return default


# ---- opening and serving -----------------------------------------------------------------

def _stream_pair(connection: Connection, limit: int, sslcontext: Any = None) -> Tuple[StreamReader, StreamWriter]:
    reader = StreamReader(connection, limit)
    return reader, StreamWriter(connection, reader, sslcontext)


async def _connected(connection: Connection, start: Callable[[], None], settings: Optional[TLSSettings],
                     evaluate_trust: Optional[TrustEvaluator]) -> None:
    """Runs `start` (a connect, an adoption), waits for socket_did_connect, then secures the
    connection if asked; on any failure (a cancellation too) the socket is aborted."""
    connection.connected = connection.loop.create_future()
    try:
        start()
        await connection.connected
        if settings is not None:
            await connection.start_tls(settings, evaluate_trust)
    except BaseException:
        if connection.sock is not None:
            connection.abort()
        raise


def _new_connection(limit: int, loop_group: Optional[LoopGroup]) -> Connection:
    loop = asyncio.get_running_loop()
    connection = Connection(loop, limit)
    connection.attach(Socket(connection, queue=callback_queue(loop, loop_group), loop_group=loop_group))
    return connection


async def open_connection(host: Optional[str] = None, port: Optional[int] = None, *, limit: int = DEFAULT_LIMIT,
                          ssl: SSLArgument = None, family: int = 0, proto: int = 0, flags: int = 0,
                          sock: Optional[_stdlib_socket.socket] = None,
                          local_addr: Optional[Tuple[str, int]] = None, server_hostname: Optional[str] = None,
                          ssl_handshake_timeout: Optional[float] = None, ssl_shutdown_timeout: Optional[float] = None,
                          happy_eyeballs_delay: Optional[float] = None, interleave: Optional[int] = None,
                          timeout: float = -1, loop_group: Optional[LoopGroup] = None,
                          evaluate_trust: Optional[TrustEvaluator] = None,
                          proxy: Union[Proxy, str, None] = None) -> Tuple[StreamReader, StreamWriter]:
    """asyncio.open_connection on SocketKit: connects (every resolved address raced, Happy
    Eyeballs), secures with `ssl` if given, and returns (reader, writer).

    `proxy`: connect through a SOCKS5 or HTTP CONNECT proxy (a :class:`socketkit.Proxy` or a
    URL, ``"socks5://user:password@host:1080"``; see :attr:`socketkit.Socket.proxy`): `host`
    goes to the proxy unresolved, `timeout` covers the proxy's handshake, and `ssl` verifies
    `host` (or `server_hostname`), not the proxy.

    `ssl`: TLSSettings, an SSLContext of :func:`socketkit.aio.ssl_context`, a client
    SSLContext SocketKit can read, or True (the defaults). `sock`: a connected socket to
    adopt (detached from the socket object). `timeout` bounds the connect (SocketKit's;
    ``asyncio.wait_for`` works too). `family` AF_INET or AF_INET6 limits the addresses
    tried; `local_addr` names the interface (an address) to connect from.
    `ssl_shutdown_timeout`, `proto`, `flags` and `interleave` are accepted and unused."""
    settings = tls_settings(ssl, False, server_hostname, ssl_handshake_timeout)
    if sock is not None:
        if host is not None or port is not None:
            raise ValueError("host/port and sock can not be specified at the same time")
        loop = asyncio.get_running_loop()
        adopted = Connection(loop, limit)
        descriptor = sock.detach()
        await _connected(adopted, lambda: adopted.attach(Socket.from_fd(descriptor, adopted,
                                                                        queue=callback_queue(loop, loop_group),
                                                                        loop_group=loop_group)),
                         settings, evaluate_trust)
        return _stream_pair(adopted, limit, ssl)
    if host is None or port is None:
        raise ValueError("host and port are needed (or sock)")
    connection = _new_connection(limit, loop_group)
    client_options(connection.sock, family, happy_eyeballs_delay)
    interface = local_addr[0] if local_addr is not None else None

    target_host, target_port = host, port

    def start() -> None:
        # Inside `_connected`: a proxy it refuses aborts the socket as a failed connect does.
        if proxy is not None:
            connection.sock.proxy = proxy
        connection.sock.connect_to_host(target_host, target_port, interface=interface, timeout=timeout)

    await _connected(connection, start, settings, evaluate_trust)
    return _stream_pair(connection, limit, ssl)


async def open_unix_connection(path: Union[str, "os.PathLike[str]", None] = None, *, limit: int = DEFAULT_LIMIT,
                               ssl: SSLArgument = None, sock: Optional[_stdlib_socket.socket] = None,
                               server_hostname: Optional[str] = None, ssl_handshake_timeout: Optional[float] = None,
                               ssl_shutdown_timeout: Optional[float] = None, timeout: float = -1,
                               loop_group: Optional[LoopGroup] = None) -> Tuple[StreamReader, StreamWriter]:
    """asyncio.open_unix_connection on SocketKit (see :func:`open_connection`)."""
    if sock is not None:
        return await open_connection(sock=sock, limit=limit, ssl=ssl, server_hostname=server_hostname,
                                     ssl_handshake_timeout=ssl_handshake_timeout, loop_group=loop_group)
    if path is None:
        raise ValueError("path is needed (or sock)")
    settings = tls_settings(ssl, False, server_hostname, ssl_handshake_timeout)
    connection = _new_connection(limit, loop_group)
    target = os.fspath(path)
    await _connected(connection, lambda: connection.sock.connect_to_unix_path(target, timeout=timeout), settings,
                     None)
    return _stream_pair(connection, limit, ssl)


ClientConnected = Callable[[StreamReader, StreamWriter], Any]


class _StreamServing:
    """What a streams server does with each accepted connection: secure it if asked, hand
    the handler a reader and a writer in a task, report what the handler raises through
    the loop's exception handler (as asyncio's start_server does from Python 3.12), close
    the connection when the task ends."""

    def __init__(self, loop: asyncio.AbstractEventLoop, handler: ClientConnected, limit: int,
                 settings: Optional[TLSSettings], sslcontext: Any,
                 on_tls_error: Optional[Callable[[BaseException], None]],
                 evaluate_trust: Optional[TrustEvaluator]) -> None:
        self.loop = loop
        self.handler = handler
        self.limit = limit
        self.settings = settings
        self.sslcontext = sslcontext
        self.on_tls_error = on_tls_error
        self.evaluate_trust = evaluate_trust
        self.server: Optional[Server] = None
        self.tasks: "set[asyncio.Task[None]]" = set()

    def accept(self, new_socket: Socket) -> None:
        connection = Connection(self.loop, self.limit)
        connection.server_side = True
        new_socket.delegate = connection
        connection.attach(new_socket)
        reader, writer = _stream_pair(connection, self.limit, self.sslcontext)
        task = self.loop.create_task(self.serve(connection, reader, writer))
        self.tasks.add(task)
        if self.server is not None:
            self.server._clients.add(writer)
            connection.on_end.append(lambda: self.server._clients.discard(writer) if self.server else None)
        task.add_done_callback(lambda done: self.finished(done, connection, writer))

    async def serve(self, connection: Connection, reader: StreamReader, writer: StreamWriter) -> None:
        if self.settings is not None:
            try:
                await connection.start_tls(self.settings, self.evaluate_trust)
            except Error as error:
                connection.abort()
                if self.on_tls_error is not None:
                    self.on_tls_error(error)
                elif self.loop.get_debug():
                    self.loop.call_exception_handler({
                        "message": "socketkit: TLS handshake of an accepted connection failed", "exception": error,
                        "socket": connection.sock})
                return
        result = self.handler(reader, writer)
        if inspect.isawaitable(result):
            await result

    def finished(self, task: "asyncio.Task[None]", connection: Connection, writer: StreamWriter) -> None:
        self.tasks.discard(task)
        # As asyncio's start_server (Python 3.12): a handler cancelled or failed has its
        # connection closed, and what it raised goes to the loop's exception handler; one
        # that returned leaves the connection as it left it.
        if task.cancelled():
            connection.close()
            return
        error = task.exception()
        if error is not None:
            self.loop.call_exception_handler({"message": "Unhandled exception in client_connected_cb",
                                              "exception": error, "transport": writer, "socket": connection.sock})
            connection.close()


async def start_server(client_connected_cb: Callable[..., Any], host: Union[None, str, Sequence[str]] = None,
                       port: Optional[int] = None, *, limit: int = DEFAULT_LIMIT, family: int = 0,
                       flags: int = 0, sock: Optional[_stdlib_socket.socket] = None, backlog: int = 100,
                       ssl: SSLArgument = None, reuse_address: Optional[bool] = None,
                       reuse_port: Optional[bool] = None, keep_alive: Optional[bool] = None,
                       ssl_handshake_timeout: Optional[float] = None, ssl_shutdown_timeout: Optional[float] = None,
                       start_serving: bool = True, loop_group: Optional[LoopGroup] = None,
                       tls: Optional[TLSSettings] = None, evaluate_trust: Optional[TrustEvaluator] = None,
                       on_tls_error: Optional[Callable[[BaseException], None]] = None,
                       proxy_protocol: ProxyProtocol = ProxyProtocol.NONE,
                       proxy_header_timeout: Optional[float] = None) -> Server:
    """asyncio.start_server on SocketKit: listens on `host` (None or "": every interface;
    a name, an address, or a list of them) and `port` (0: one the kernel picks, the same
    for every address: ``server.sockets[0].getsockname()`` or ``server.port``), and runs
    ``client_connected_cb(reader, writer)`` for each connection (a coroutine becomes a
    task; what it raises goes to the loop's exception handler; its connection is closed
    if it fails). With `ssl` (TLSSettings.server(...), or ``ssl_context`` of them) each
    connection is secured before the callback sees it; a failed handshake closes it and
    goes to `on_tls_error` if given.

    Behind a load balancer that sends a PROXY protocol header (HAProxy ``send-proxy`` /
    ``send-proxy-v2``, nginx, AWS NLB), `proxy_protocol` (:class:`ProxyProtocol`) reads it
    before the callback runs (and before the TLS handshake): the writer's ``peername`` is
    then the client the header names, ``sockname`` the address it connected to, and
    ``get_extra_info("socketkit_socket").proxy_address`` the proxy itself. A malformed
    header, or one not complete within `proxy_header_timeout` seconds (default 5), closes
    that connection alone; the callback never sees it.

    ``start_server(handler)`` with a handler of one argument is the former API (the
    handler gets an :class:`AsyncSocket`; the host defaults to 127.0.0.1; TLS is
    ``tls=``): it still works and warns (DeprecationWarning).

    `sock`, `family`, `flags`, `backlog`, `reuse_address`, `reuse_port`, `keep_alive`
    and `ssl_shutdown_timeout` are accepted; SocketKit sets SO_REUSEADDR itself and
    listens with its own backlog; a given `sock` is not supported (ValueError)."""
    loop = asyncio.get_running_loop()
    if _takes_one_argument(client_connected_cb):
        warnings.warn("socketkit.aio.start_server(handler) with a handler of one argument (an AsyncSocket) is "
                      "deprecated: take (reader, writer) as asyncio.start_server does", DeprecationWarning,
                      stacklevel=2)
        from ._asyncsocket import legacy_start_server
        return await legacy_start_server(client_connected_cb, "127.0.0.1" if host is None else host, port or 0,
                                         loop_group=loop_group, tls=tls if tls is not None else ssl,
                                         evaluate_trust=evaluate_trust, on_tls_error=on_tls_error)
    if sock is not None:
        raise ValueError("socketkit.aio.start_server does not adopt a listening socket: give host and port")
    settings = tls_settings(ssl if ssl is not None else tls, True, None, ssl_handshake_timeout)
    if settings is not None:
        settings.check()  # unusable settings fail here, not once per connection
    serving = _StreamServing(loop, client_connected_cb, limit, settings, ssl if ssl is not None else tls,
                             on_tls_error, evaluate_trust)
    server = Server(loop, endpoints_for(host, port), serving.accept, queue=callback_queue(loop, loop_group),
                    use_host_queue=False, loop_group=loop_group,
                    configure=_listener_options(family, keep_alive, ProxyProtocol(proxy_protocol), proxy_header_timeout))
    serving.server = server
    if start_serving:
        await server.start_serving()
    return server


async def start_unix_server(client_connected_cb: Callable[..., Any], path: Union[str, "os.PathLike[str]", None] = None,
                            *, limit: int = DEFAULT_LIMIT, sock: Optional[_stdlib_socket.socket] = None,
                            backlog: int = 100, ssl: SSLArgument = None,
                            ssl_handshake_timeout: Optional[float] = None,
                            ssl_shutdown_timeout: Optional[float] = None, start_serving: bool = True,
                            loop_group: Optional[LoopGroup] = None) -> Server:
    """asyncio.start_unix_server on SocketKit (a stale socket file at `path` is replaced;
    the file is removed when the server closes)."""
    loop = asyncio.get_running_loop()
    if path is None:
        raise ValueError("path is needed (a given sock is not supported)")
    if _takes_one_argument(client_connected_cb):
        warnings.warn("socketkit.aio.start_unix_server(handler, path) with a handler of one argument (an "
                      "AsyncSocket) is deprecated: take (reader, writer)", DeprecationWarning, stacklevel=2)
        from ._asyncsocket import legacy_start_unix_server
        return await legacy_start_unix_server(client_connected_cb, os.fspath(path))
    settings = tls_settings(ssl, True, None, ssl_handshake_timeout)
    serving = _StreamServing(loop, client_connected_cb, limit, settings, ssl, None, None)
    server = Server(loop, [os.fspath(path)], serving.accept, queue=callback_queue(loop, loop_group),
                    use_host_queue=False, loop_group=loop_group)
    serving.server = server
    if start_serving:
        await server.start_serving()
    return server


def _listener_options(family: int, keep_alive: Optional[bool], proxy_protocol: ProxyProtocol = ProxyProtocol.NONE,
                      proxy_header_timeout: Optional[float] = None) -> Optional[Callable[[Socket], None]]:
    if (family not in (_stdlib_socket.AF_INET, _stdlib_socket.AF_INET6) and not keep_alive
            and proxy_protocol == ProxyProtocol.NONE and proxy_header_timeout is None):
        return None

    def configure(sock: Socket) -> None:
        family_only(sock, family)
        if keep_alive:
            sock.keep_alive = KeepAlive()
        sock.proxy_protocol = proxy_protocol
        if proxy_header_timeout is not None:
            sock.proxy_header_timeout = proxy_header_timeout

    return configure


def _takes_one_argument(handler: Callable[..., Any]) -> bool:
    try:
        parameters = list(inspect.signature(handler).parameters.values())
    except (TypeError, ValueError):
        return False
    positional = [parameter for parameter in parameters
                  if parameter.kind in (parameter.POSITIONAL_ONLY, parameter.POSITIONAL_OR_KEYWORD)]
    varargs = any(parameter.kind == parameter.VAR_POSITIONAL for parameter in parameters)
    required = [parameter for parameter in positional if parameter.default is parameter.empty]
    return not varargs and len(required) == 1 and len(positional) == 1
