# SPDX-License-Identifier: MIT
"""Where delegate methods run (callback queues) and where sockets do their I/O (loop
groups)."""
from __future__ import annotations

import ctypes
import threading
from ctypes import byref, c_void_p
from typing import Any, Callable, List, Optional

from . import _ffi
from ._dispatch import dispatch_records
from ._ffi import lib
from ._native import speedups
from ._status import raise_for, thread_errors
from .errors import INVALID_HANDLE, InvalidHandleError


class CallbackQueue:
    """Where a socket's delegate methods run. Use :class:`SerialQueue` or :class:`HostQueue`;
    ``None`` wherever a queue is accepted means SocketKit's own event loop thread (fastest,
    but every callback then competes for the GIL with your program)."""

    def __init__(self, handle: int) -> None:
        self._handle: Optional[int] = handle

    @property
    def handle(self) -> int:
        if self._handle is None:
            raise InvalidHandleError("the callback queue is closed", INVALID_HANDLE)
        return self._handle

    def close(self) -> None:
        """Releases the queue. Sockets still using it keep it alive."""
        handle, self._handle = self._handle, None
        if handle is not None:
            lib.sk_callback_queue_release(handle)

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # pragma: no cover - interpreter shutdown
            pass


class SerialQueue(CallbackQueue):
    """A queue with a thread of its own, shared by any number of sockets: their delegate
    methods run there one at a time (the GIL is taken for each)."""

    def __init__(self, name: Optional[str] = None) -> None:
        handle = c_void_p()
        error = _ffi.CError()
        name_bytes = _ffi.c_string(name or None, "the queue name")
        raise_for(lib.sk_callback_queue_create_serial(name_bytes, byref(handle), byref(error)), error)
        super().__init__(handle.value)


class HostQueue(CallbackQueue):
    """A queue you drive: callbacks wait until :meth:`drain` runs them on the calling thread.
    :meth:`fileno` is readable while callbacks are pending, for ``select``, ``selectors`` or
    asyncio's ``add_reader`` (see :mod:`socketkit.aio`)."""

    def __init__(self) -> None:
        handle = c_void_p()
        error = _ffi.CError()
        raise_for(lib.sk_callback_queue_create_host(byref(handle), byref(error)), error)
        super().__init__(handle.value)
        self._records = (_ffi.Event * self.BATCH)()
        self._raw_records = memoryview((ctypes.c_ubyte * ctypes.sizeof(self._records)).from_buffer(self._records))
        self._records_address = ctypes.addressof(self._records)
        # Taken (popped) while a batch is handled: the memory its records point to lives
        # until the queue's next poll, so no other poll may start meanwhile. A one-token
        # list, not a threading.Lock: list.pop and append are atomic, and a non-blocking
        # Lock.acquire parses its arguments on every call, while drain runs after every
        # turn of an asyncio loop driving a loop group.
        self._drain_token: List[None] = [None]

    def fileno(self) -> int:
        """A descriptor readable exactly while callbacks are pending (owned by the queue)."""
        return raise_for(lib.sk_callback_queue_fd(self.handle))

    #: Events moved per foreign call.
    BATCH = 256

    def drain(self, max_callbacks: int = 0) -> int:
        """Runs the delegate methods of pending events (all, or at most `max_callbacks`) and
        returns how many events were handled. Events come over in batches
        (sk_callback_queue_poll_events): one foreign call per batch, not one per event. One
        thread drains at a time: a concurrent call, or one from a delegate method, returns 0."""
        try:
            self._drain_token.pop()
        except IndexError:
            return 0
        try:
            queue = self._handle or self.handle  # the property only to raise when closed
            handled = 0
            while True:
                room = self.BATCH if max_callbacks <= 0 else min(self.BATCH, max_callbacks - handled)
                if room <= 0:
                    break
                if speedups is not None:
                    # One C call polls and dispatches the batch.
                    count = speedups.drain(queue, self._records_address, room, self._raw_records,
                                           self._records)
                else:
                    count = raise_for(lib.sk_callback_queue_poll_events(queue, self._records, room))
                    dispatch_records(self._raw_records, self._records, count)
                if count == 0:
                    break
                handled += count
                if count < room:
                    break  # anything that arrived meanwhile keeps the descriptor readable
            return handled
        finally:
            self._drain_token.append(None)


class LoopGroup:
    """A set of SocketKit event loops (threads). Sockets created without a group use a
    process-wide default one."""

    def __init__(self, loop_count: int = 1) -> None:
        handle = c_void_p()
        error = _ffi.CError()
        raise_for(lib.sk_loop_group_create(loop_count, byref(handle), byref(error)), error)
        self._handle: Optional[int] = handle.value
        self._close_hooks: List[Callable[[], None]] = []

    @classmethod
    def driven(cls) -> "LoopGroup":
        """A group of one loop with no thread of its own, run by the calling thread: call
        :meth:`run_once` whenever :meth:`fileno` is readable (:func:`socketkit.aio.loop_group`
        does this for asyncio). Socket I/O then happens on that thread, and its calls on the
        group's sockets run at once instead of waiting for another thread."""
        group = cls.__new__(cls)
        handle = c_void_p()
        error = _ffi.CError()
        raise_for(lib.sk_loop_group_create_driven(byref(handle), byref(error)), error)
        group._handle = handle.value
        group._close_hooks = []
        return group

    def fileno(self) -> int:
        """A driven group's descriptor, readable while its loop has work (owned by the group)."""
        return raise_for(lib.sk_loop_group_get_fd(self.handle))

    def run_once(self) -> bool:
        """Runs one iteration of a driven group's loop without waiting, on the thread that
        created the group; True when more work is ready at once."""
        group = self._handle or self.handle  # the property only to raise when closed
        if speedups is not None:
            return speedups.run_once(group)
        errors = thread_errors
        status = lib.sk_loop_group_run_once(group, errors.pointer)
        if status < 0:
            raise_for(status, errors.error)
        return status == 1

    @property
    def handle(self) -> int:
        if self._handle is None:
            raise InvalidHandleError("the loop group is closed", INVALID_HANDLE)
        return self._handle

    @property
    def loop_count(self) -> int:
        return raise_for(lib.sk_loop_group_loop_count(self.handle))

    @staticmethod
    def default_loop_count() -> int:
        """The loops of the process-wide default group: one per CPU the process may run
        on (its affinity mask when the group was first used)."""
        return raise_for(lib.sk_loop_group_loop_count(None))

    def close(self) -> None:
        """Stops the loops; sockets still open on them disconnect with BadConfigError. A driven
        group closed from another thread, or from a delegate method run by :meth:`run_once`,
        stops in its thread's next :meth:`run_once` (which still works until then). The stop
        takes bounded time: from the moment a loop starts stopping, calls other threads make
        on its sockets raise BadConfigError, as they do once it has stopped."""
        handle = self._handle
        if handle is None:
            return
        lib.sk_loop_group_release(handle)
        if lib.sk_loop_group_get_fd(handle) >= 0:
            return  # a driven group whose stop is pending: its handle lives until then
        self._handle = None
        hooks, self._close_hooks = self._close_hooks, []
        for hook in hooks:
            hook()

    def __enter__(self) -> "LoopGroup":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


_default_queue: Optional[SerialQueue] = None
_default_queue_lock = threading.Lock()


def default_queue() -> SerialQueue:
    """The serial queue sockets use when none is given: one SocketKit thread runs every
    delegate method in the process, one at a time."""
    global _default_queue
    with _default_queue_lock:
        if _default_queue is None:
            _default_queue = SerialQueue("socketkit-python")
        return _default_queue
