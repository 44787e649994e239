# SPDX-License-Identifier: MIT
"""One connection seen by coroutines: the private delegate that turns a Socket's callbacks
into awaitable reads, flow control and the connection's end, shared by the streams
(:class:`~socketkit.aio.StreamReader` / :class:`~socketkit.aio.StreamWriter`) and
:class:`~socketkit.aio.AsyncSocket`.

Reads are SocketKit's framing (a read of what is available, of a length, to a separator),
one at a time: at most one read is with SocketKit, and a read that is cancelled (a task
cancelled, ``asyncio.wait_for`` timing out) loses no byte:

- cancelled while SocketKit still has it: ``cancel_read(tag)`` withdraws it, the bytes it
  had gathered go back in front of the unread bytes, and no other read starts until the
  answer (``socket_did_cancel_read``) came; if the read completed meanwhile, its bytes
  (delivered before the answer) are given back with ``unread`` first;
- cancelled after its bytes arrived but before its coroutine took them (the result was
  set, the task's cancellation came first): they are given back with ``unread`` at once.
  No read can be ahead of them: the next read starts only when this one's coroutine lets
  go of it.

The end of the stream has asyncio's meaning (a short last read, IncompleteReadError with
the partial bytes): ``auto_disconnect_on_closed_read_stream`` is off, so the peer's end is
``socket_did_close_read_stream``; the read then pending is withdrawn, a ``cancel_read`` of
a tag no read has tells how many bytes SocketKit holds, one read takes them all, and from
then on reads are served from those bytes in Python (nothing more can arrive).

A separator read longer than the limit raises asyncio's LimitOverrunError and leaves its
bytes unread: ``socket_did_read_partial`` counts what the read gathered, and past the
limit the read is withdrawn (its bytes go back).
"""
from __future__ import annotations

import asyncio
import collections
import inspect
import socket as _stdlib_socket
from typing import Any, Awaitable, Callable, Deque, List, Optional, Tuple, Union

from .._tcp import Socket
from .._tls import TLSInfo, TLSSettings, TLSTrust
from ..errors import BadConfigError, ClosedError, Error, PeerRejectedError

#: Decides manual trust (``TLSSettings(manual_trust_evaluation=True)``): returns True or
#: False, or an awaitable of it.
TrustEvaluator = Callable[[TLSTrust], Union[bool, Awaitable[bool]]]

# Tags of the connection's own calls; readers' tags count up from 1.
_PROBE = -1  # a cancel_read no read has: its answer says how many bytes SocketKit holds
_REST = -2  # the read that takes every byte left once the peer's side has ended

# Read kinds.
AVAILABLE, EXACTLY, UNTIL = 0, 1, 2

# The most SocketKit gathers for a read by default: a read of more raises its maximum first.
_DEFAULT_MAXIMUM_READ = 16 * 1024 * 1024
# drain() asks SocketKit how many bytes are queued after this many were written (the
# default low watermark: a queue above the high one has been told about by then).
_CHECK_AFTER = 32 * 1024


class _Read:
    """One read: its SocketKit call, and how its bytes (or the end) become its result."""

    __slots__ = ("kind", "length", "separator", "limit", "timeout", "tag", "future", "gathered", "overrun",
                 "ending")

    def __init__(self, kind: int, length: int = 0, separator: bytes = b"", limit: int = 0,
                 timeout: float = -1) -> None:
        self.kind = kind
        self.length = length  # AVAILABLE: at most (0: any); EXACTLY: the length; UNTIL: SocketKit's max_length
        self.separator = separator
        self.limit = limit  # UNTIL: asyncio's limit (0: none)
        self.timeout = timeout
        self.tag = 0
        self.future: Optional[asyncio.Future[bytes]] = None
        self.gathered = 0  # UNTIL with a limit: bytes the read has gathered so far
        self.overrun = 0  # UNTIL: the offset past the limit, once withdrawn for it
        self.ending = False  # withdrawn because the peer's side ended

    def start(self, sock: Socket, tag: int) -> None:
        if self.kind == AVAILABLE:
            sock.read(self.length, self.timeout, tag)
        elif self.kind == EXACTLY:
            sock.read_to_length(self.length, self.timeout, tag)
        else:
            sock.read_to_data(self.separator, self.length, self.timeout, tag)

    def from_rest(self, rest: bytearray) -> bytes:
        """The result from the bytes left after the end (taken from `rest`)."""
        if self.kind == AVAILABLE:
            count = len(rest) if self.length == 0 else min(self.length, len(rest))
            data = bytes(rest[:count])
            del rest[:count]
            return data
        if self.kind == EXACTLY:
            if len(rest) < self.length:
                partial = bytes(rest)
                rest.clear()
                raise asyncio.IncompleteReadError(partial, self.length)
            data = bytes(rest[:self.length])
            del rest[:self.length]
            return data
        found = rest.find(self.separator)
        if found >= 0:
            if self.limit and found > self.limit:
                raise asyncio.LimitOverrunError("Separator is found, but chunk is longer than limit", found)
            end = found + len(self.separator)
            data = bytes(rest[:end])
            del rest[:end]
            return data
        offset = len(rest) + 1 - len(self.separator)
        if self.limit and offset > self.limit:
            raise asyncio.LimitOverrunError("Separator is not found, and chunk exceed the limit", offset)
        partial = bytes(rest)
        rest.clear()
        raise asyncio.IncompleteReadError(partial, None)


class Connection:
    """The delegate of one connection's Socket (private to socketkit.aio: its methods are
    SocketKit's callbacks). Every method runs on the asyncio loop's thread."""

    def __init__(self, loop: asyncio.AbstractEventLoop, limit: int = 0, eof_is_end: bool = True) -> None:
        self.loop = loop
        self.sock: Socket = None  # type: ignore[assignment]  # set by attach()
        self.limit = limit
        # False (AsyncSocket): the peer's end ends the connection (ClosedError), as before.
        self.eof_is_end = eof_is_end
        self.server_side = False
        self.next_tag = 1
        # The read SocketKit has (None: none); a reader cancelled while SocketKit had its
        # read leaves `withdrawing` set until the answer, and the bytes of such a read that
        # had completed meanwhile in `kept`.
        self.current: Optional[_Read] = None
        self.withdrawing: Optional[int] = None
        self.kept = b""
        # Readers waiting for their turn (AsyncSocket lets several wait; a stream, one).
        self.turns: Deque[asyncio.Future[None]] = collections.deque()
        # The peer's side: ended (socket_did_close_read_stream), and once SocketKit's bytes
        # were taken, every byte left (reads are then served from it).
        self.read_closed = False
        self.rest: Optional[bytearray] = None
        self.fetching_rest = False
        self.error: Optional[BaseException] = None
        self.closing = False
        self.ended = False
        self.closed: asyncio.Future[None] = loop.create_future()
        self.connected: Optional[asyncio.Future[Tuple[str, int]]] = None
        self.secured: Optional[asyncio.Future[Optional[TLSInfo]]] = None
        self.secure_started = False
        self.evaluate_trust: Optional[TrustEvaluator] = None
        self.trust_failure: Optional[BaseException] = None
        self.background: "set[asyncio.Task[None]]" = set()
        # Flow control: above the high watermark writers wait in drain().
        self.write_paused = False
        self.drain_waiters: List[asyncio.Future[None]] = []
        # Bytes written since drain() last asked SocketKit how many are queued (see drain).
        self.written_unchecked = 0
        self.write_refused = False
        self.eof_written = False
        self.half_closing = False
        self.unread_bytes = 0
        self.on_end: List[Callable[[], None]] = []

    # ---- the socket ------------------------------------------------------------------

    def attach(self, sock: Socket) -> None:
        self.sock = sock
        if self.eof_is_end:
            sock.auto_disconnect_on_closed_read_stream = False

    def _tag(self) -> int:
        tag = self.next_tag
        self.next_tag = tag + 1 if tag < (1 << 62) else 1
        return tag

    # ---- reads -----------------------------------------------------------------------

    def reader_waiting(self) -> bool:
        """A coroutine is waiting for a read (its own, or its turn)."""
        return self.current is not None or bool(self.turns)

    async def read(self, request: _Read) -> bytes:
        """`request`'s bytes, once every earlier read is done (see the module)."""
        while self.current is not None or self.withdrawing is not None or self.fetching_rest:
            turn: asyncio.Future[None] = self.loop.create_future()
            self.turns.append(turn)
            try:
                await turn
            except asyncio.CancelledError:
                try:
                    self.turns.remove(turn)
                except ValueError:
                    self._next_turn()  # it had been given this turn: pass it on
                raise
        if self.error is not None:
            raise self.error
        if self.rest is not None:
            return request.from_rest(self.rest)
        if self.read_closed or self.ended:
            # The end came and what is left is not taken yet (or the socket is gone).
            self._fetch_rest()
            if self.rest is None:
                return await self.read(request)
            return request.from_rest(self.rest)
        tag = request.tag = self._tag()
        future: asyncio.Future[bytes] = self.loop.create_future()
        request.future = future
        self.current = request
        try:
            request.start(self.sock, tag)
        except BadConfigError:
            self.current = None
            if self.error is not None or not self._session_over():
                self._next_turn()
                raise
            # The connection ended and its socket_did_disconnect is on its way: wait for it.
            await asyncio.shield(self.closed)
            self._next_turn()
            return await self.read(request)
        except BaseException:
            self.current = None
            self._next_turn()
            raise
        try:
            return await future
        except asyncio.CancelledError:
            self._withdraw(request)
            raise
        finally:
            if self.current is request:
                self.current = None
            self._next_turn()

    def _session_over(self) -> bool:
        sock = self.sock
        try:
            return self.ended or (sock.is_disconnected and sock._sessions_started > sock._sessions_ended)
        except Error:
            return True

    def _withdraw(self, request: _Read) -> None:
        """`request`'s reader was cancelled: nothing of its bytes may be lost."""
        future = request.future
        assert future is not None
        if future.done() and not future.cancelled():
            if future.exception() is None:
                data = future.result()
                if data:
                    self._give_back(data)
            return
        if self.current is request and not self.ended and self.rest is None:
            # Its answer (socket_did_cancel_read) lets the next read start. A read already
            # being withdrawn (past the limit, or at the end) has its cancel_read on the way.
            self.withdrawing = request.tag
            if not (request.overrun or request.ending):
                try:
                    self.sock.cancel_read(request.tag)
                except Error:
                    self.withdrawing = None

    def _give_back(self, data: bytes) -> None:
        if self.rest is not None:
            self.rest[:0] = data
            return
        try:
            self.sock.unread(data)
        except Error:
            if self.error is None:
                self.error = ClosedError("the connection was closed")

    def _next_turn(self) -> None:
        if self.current is not None or self.withdrawing is not None or self.fetching_rest:
            return
        if self.read_closed and self.rest is None and not self.ended:
            self._fetch_rest()
            if self.fetching_rest:
                return
        while self.turns:
            turn = self.turns.popleft()
            if not turn.done():
                turn.set_result(None)
                return

    def _fetch_rest(self) -> None:
        """After the peer's end, with no read outstanding: take every byte SocketKit still
        holds (asking how many first), to serve the reads from."""
        if self.rest is not None or self.fetching_rest:
            return
        if self.ended:
            self.rest = bytearray()
            return
        self.fetching_rest = True
        try:
            self.sock.cancel_read(_PROBE)
        except Error:
            self.fetching_rest = False
            self.rest = bytearray()

    def _read_rest(self, count: int) -> None:
        """The read of the `count` bytes left after the end. Queued from a turn of the
        asyncio loop of its own, not from the callback that asked: on SocketKit's loop
        (queue None) a read queued by a callback of the end of the stream is not started
        by the pump that made the callback (it has already seen the end), and nothing
        else would start it."""
        def read() -> None:
            if self.ended:
                return
            try:
                self.sock.read_to_length(count, -1, _REST)
            except Error:
                self._rest_arrived(b"")

        self.loop.call_soon(read)

    def _rest_arrived(self, data: bytes) -> None:
        self.fetching_rest = False
        self.rest = bytearray(self.kept + data)
        self.kept = b""
        request = self.current
        if request is not None and request.ending:
            self._settle_from_rest(request)
        self._next_turn()

    def _settle_from_rest(self, request: _Read) -> None:
        future = request.future
        assert future is not None and self.rest is not None
        if future.done():
            return
        try:
            future.set_result(request.from_rest(self.rest))
        except BaseException as error:  # IncompleteReadError, LimitOverrunError
            future.set_exception(error)

    # ---- delegate methods: reading ---------------------------------------------------

    def socket_did_read(self, sock: Socket, data: Any, tag: int) -> None:
        request = self.current
        if request is not None and request.tag == tag:
            future = request.future
            if future is None or future.done():
                return
            if request.ending:
                # It completed before the withdrawal reached it: its bytes come before the
                # rest (the answer, already counted without them, is on its way).
                self.kept += bytes(data)
                return
            if request.overrun:
                # Completed before the withdrawal reached it: judged as a completed read.
                request.overrun = 0
            if request.limit and request.kind == UNTIL:
                found = len(data) - len(request.separator)
                if found > request.limit:
                    self._give_back(bytes(data))
                    future.set_exception(asyncio.LimitOverrunError(
                        "Separator is found, but chunk is longer than limit", found))
                    return
            future.set_result(data if type(data) is bytes else bytes(data))
        elif tag == self.withdrawing:
            self.kept += bytes(data)
        elif tag == _REST:
            self._rest_arrived(bytes(data))

    def socket_did_read_partial(self, sock: Socket, length: int, tag: int) -> None:
        request = self.current
        if request is None or request.tag != tag or not request.limit or request.overrun or request.ending:
            return
        request.gathered += length
        offset = request.gathered + 1 - len(request.separator)
        if offset > request.limit:
            request.overrun = offset
            sock.cancel_read(tag)

    def socket_did_cancel_read(self, sock: Socket, tag: int, unread_bytes: int) -> None:
        self.unread_bytes = unread_bytes
        if tag == self.withdrawing:
            self.withdrawing = None
            if self.kept:
                kept, self.kept = self.kept, b""
                self._give_back(kept)
                self.unread_bytes += len(kept)
            self._next_turn()
            return
        if tag == _PROBE:
            if unread_bytes:
                self._read_rest(unread_bytes)
            else:
                self._rest_arrived(b"")
            return
        request = self.current
        if request is None or request.tag != tag or request.future is None or request.future.done():
            return
        if request.overrun:
            request.future.set_exception(asyncio.LimitOverrunError(
                "Separator is not found, and chunk exceed the limit", request.overrun))
        elif request.ending:
            if unread_bytes:
                self.fetching_rest = True
                self._read_rest(unread_bytes)
            else:
                self._rest_arrived(b"")

    def socket_did_close_read_stream(self, sock: Socket) -> None:
        self.read_closed = True
        request = self.current
        if request is not None and request.future is not None and not request.future.done():
            if not request.overrun:
                request.ending = True
                sock.cancel_read(request.tag)
            return
        if self.current is None and self.withdrawing is None:
            self._fetch_rest()

    # ---- delegate methods: the connection ----------------------------------------------

    def socket_did_connect(self, sock: Socket, host: str, port: int) -> None:
        if self.connected is not None and not self.connected.done():
            self.connected.set_result((host, port))

    def socket_did_disconnect(self, sock: Socket, error: Optional[Error]) -> None:
        self.end(error)

    def end(self, error: Optional[BaseException]) -> None:
        """The connection is over: `error` None for a clean end (the reads then see the end
        of the stream, as asyncio's do), else what ended it."""
        if self.ended:
            return
        self.ended = True
        if error is None and not self.eof_is_end:
            error = ClosedError("the connection was closed")
        if error is not None and self.error is None:
            self.error = error
        if self.rest is None:
            self.rest = bytearray()
        self.fetching_rest = False
        self.withdrawing = None
        request = self.current
        if request is not None and request.future is not None and not request.future.done():
            if error is not None:
                request.future.set_exception(error)
            else:
                self._settle_from_rest(request)
        for future in (self.connected, self.secured):
            if future is not None and not future.done():
                future.set_exception(error if error is not None else ClosedError("the connection was closed"))
        self._release_drain_waiters()
        while self.turns:
            turn = self.turns.popleft()
            if not turn.done():
                turn.set_result(None)
        if not self.closed.done():
            self.closed.set_result(None)
        for callback in self.on_end:
            callback()
        self.on_end.clear()
        if self.closing:
            self.sock.close()

    # ---- writing ---------------------------------------------------------------------

    def write(self, data: Any) -> None:
        if self.ended or self.closing:
            return  # asyncio's transports drop writes after the connection is lost
        if self.eof_written:
            raise RuntimeError("Cannot call write() after write_eof()")
        try:
            self.sock.write(data)
        except BadConfigError:
            # The session ended (SocketKit refuses writes at once) and its
            # socket_did_disconnect is on its way: drain() waits for it and reports it.
            self.write_refused = True
            return
        self.written_unchecked += len(data)

    def socket_did_reach_high_watermark(self, sock: Socket, queued: int) -> None:
        self.write_paused = True

    def socket_did_drain_to_low_watermark(self, sock: Socket, queued: int) -> None:
        self.write_paused = False
        self._release_drain_waiters()

    def _release_drain_waiters(self) -> None:
        waiters, self.drain_waiters = self.drain_waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    async def drain(self) -> None:
        if self.write_refused and not self.ended:
            await asyncio.shield(self.closed)
        if self.error is not None:
            raise self.error
        if self.ended:
            raise ConnectionResetError("Connection lost")
        if self.closing:
            await asyncio.sleep(0)
        if not self.write_paused and self.written_unchecked >= _CHECK_AFTER:
            # The watermark events come from SocketKit's loop and may not have reached this
            # thread yet, while a writer that awaits drain() after every write never lets
            # the asyncio loop run: after every so many bytes, what is queued is asked
            # directly (asyncio's transports know at once). Above the high watermark the
            # engine has crossed it too, so its events follow: the low one releases us.
            self.written_unchecked = 0
            try:
                high = self.sock.write_watermarks[1]
                if self.sock.queued_write_bytes > high:
                    self.write_paused = True
            except Error:
                pass
        if self.write_paused:
            waiter: asyncio.Future[None] = self.loop.create_future()
            self.drain_waiters.append(waiter)
            await waiter
            if self.ended:
                raise self.error if self.error is not None else ConnectionResetError("Connection lost")

    def can_write_eof(self) -> bool:
        return not self.secure_started and not self.ended

    def write_eof(self) -> None:
        """Shuts the write side down once every write queued so far is sent (half-close)."""
        if self.eof_written or self.ended or self.closing:
            return
        if self.secure_started:
            raise NotImplementedError("TLS does not support half-closes")
        self.eof_written = True
        # SocketKit has no half-close of its own: once the write queue is empty, the
        # descriptor is shut down for writing from the socket's loop (perform). Knowing when
        # it empties takes socket_did_write, which the connection does not ask for otherwise
        # (an event per write): the class that has it takes over from now on.
        self.__class__ = _HalfClosingConnection
        self.sock.delegate = self
        self._shutdown_if_flushed()

    def _shutdown_if_flushed(self) -> None:
        if self.half_closing or self.ended:
            return
        try:
            if self.sock.queued_write_bytes:
                return
            self.half_closing = True
            self.sock.perform(_shutdown_write)
        except Error:
            pass

    def close(self) -> None:
        """Closes once the queued writes are sent (the end follows: :attr:`closed`)."""
        if self.closing:
            return
        self.closing = True
        if self.ended:
            self.sock.close()
            return
        try:
            self.sock.disconnect_after_writing()
        except Error:
            pass
        try:
            if self.sock.is_disconnected and not self._session_over():
                self.end(None)  # it was not connected: no socket_did_disconnect will come
        except Error:
            self.end(None)

    def abort(self) -> None:
        self.closing = True
        self.sock.abort()
        self.end(None)

    # ---- TLS -------------------------------------------------------------------------

    async def start_tls(self, settings: Optional[TLSSettings], evaluate_trust: Optional[TrustEvaluator] = None
                        ) -> Optional[TLSInfo]:
        if self.error is not None:
            raise self.error
        if self.ended:
            raise ClosedError("the connection was closed")
        self.secured = self.loop.create_future()
        self.evaluate_trust = evaluate_trust
        self.trust_failure = None
        try:
            self.sock.start_tls(settings)
        except BaseException:
            self.secured = None
            raise
        self.secure_started = True
        try:
            return await self.secured
        except PeerRejectedError as error:
            if self.trust_failure is not None:
                raise error from self.trust_failure
            raise

    def socket_did_secure(self, sock: Socket) -> None:
        if self.secured is not None and not self.secured.done():
            self.secured.set_result(sock.tls_info)

    def socket_did_receive_trust(self, sock: Socket, trust: TLSTrust) -> Optional[bool]:
        evaluate = self.evaluate_trust
        if evaluate is None:
            return False
        verdict = evaluate(trust)
        if not inspect.isawaitable(verdict):
            return bool(verdict)

        async def answer_later(pending: Awaitable[bool]) -> None:
            accept = False
            try:
                accept = bool(await pending)
            except BaseException as error:  # noqa: BLE001 - rejected, and said why
                self.trust_failure = error
            try:
                trust.answer(accept)
            except Error:
                pass  # closed meanwhile

        task = self.loop.create_task(answer_later(verdict))
        self.background.add(task)
        task.add_done_callback(self.background.discard)
        return None


class _HalfClosingConnection(Connection):
    """A connection whose write side is to shut down once its writes are sent
    (:meth:`Connection.write_eof`): it hears of every write."""

    def socket_did_write(self, sock: Socket, tag: int) -> None:
        self._shutdown_if_flushed()


def _shutdown_write(descriptors: Any) -> None:
    """On the socket's loop, once nothing is queued: the write side's end (FIN)."""
    raw = _stdlib_socket.socket(fileno=descriptors.primary)
    try:
        raw.shutdown(_stdlib_socket.SHUT_WR)
    except OSError:
        pass  # the connection ended meanwhile
    finally:
        raw.detach()  # the descriptor stays SocketKit's
