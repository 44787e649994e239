# SPDX-License-Identifier: MIT
"""Where SocketKit's events meet an asyncio loop: :func:`queue` (a callback queue the loop
drains), :func:`loop_group` (a SocketKit loop the asyncio loop runs itself) and
:func:`detach`. The rest of :mod:`socketkit.aio` is built on them."""
from __future__ import annotations

import asyncio
import weakref
from typing import Optional

from .._queues import HostQueue, LoopGroup
from ..errors import Error

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


def callback_queue(loop: asyncio.AbstractEventLoop, group: Optional[LoopGroup]) -> Optional[HostQueue]:
    """Where the callbacks of a socket on `group` reach `loop`: straight from SocketKit's
    loop when it is the one `loop` runs itself (:func:`loop_group`: the same thread, so
    nothing to hand over, and a call into the engine may deliver them before it returns),
    else through the loop's :func:`queue`."""
    if group is not None and _groups.get(loop) is group:
        return None
    return queue(loop)


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
