# SPDX-License-Identifier: MIT
"""The binding's optional C extension, socketkit._speedups (see _speedups.c): the hot paths
(Socket.read and write, UdpSocket.send_to_address, read and datagram events, HostQueue's
drain and a driven group's iteration) in C. Everything works without it, through ctypes;
SOCKETKIT_NO_SPEEDUPS=1 forces that. It is loaded here, and used only when it was built
against the socketkit.h of the library ctypes loaded; _hotpaths hands it what it works with
in one explicit call."""
from __future__ import annotations

import ctypes
import os
from typing import Any

from . import _ffi
from ._ffi import lib


def _load() -> Any:
    if os.environ.get("SOCKETKIT_NO_SPEEDUPS"):
        return None
    try:
        from . import _speedups  # type: ignore[attr-defined]
    except ImportError:
        return None
    layout = _speedups.event_layout()
    if (layout["sizeof"] != ctypes.sizeof(_ffi.Event)
            or any(getattr(_ffi.Event, name).offset != offset for name, offset in layout["offsets"].items())
            or layout["version"] // 100 != lib.sk_version_number() // 100):
        return None  # built against another socketkit.h than the library's: not safe to use
    return _speedups


#: The extension module, or None.
speedups: Any = _load()

#: True when the C hot paths (socketkit._speedups) are in use.
SPEEDUPS = speedups is not None

#: The base of Socket and UdpSocket: with the extension, its HandleBase, whose slots hold
#: what its dispatch reads for every event (the handle, the delegate, pinned buffers).
HandleSlots: Any = speedups.HandleBase if SPEEDUPS else object
