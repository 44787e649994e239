# SPDX-License-Identifier: MIT
"""Types of socketkit._speedups, the binding's optional C extension (_speedups.c,
_speedups_dispatch.c): what mypy checks its callers against. _hotpaths defines the same
methods in Python (SocketIOPython, UdpSocketIOPython) with the same signatures."""
from typing import Any, Callable, Dict, Optional, Tuple, Union

_BytesLike = Union[bytes, bytearray, memoryview]

class HandleBase:
    """The slots of Socket and UdpSocket that the C dispatch reads for every event."""

    _delegate: Any
    _pending_buffers: Any
    _c_handle: Any

class SocketIO(HandleBase):
    def write(self, data: _BytesLike, timeout: float = ..., tag: int = ...) -> None: ...
    def read(self, max_length: int = ..., timeout: float = ..., tag: int = ...) -> None: ...

class UdpSocketIO(HandleBase):
    def send_to_address(self, data: _BytesLike, address: Tuple[str, int], timeout: float = ...,
                        tag: int = ...) -> None: ...

def init(*, functions: Dict[str, Optional[int]], no_copy_threshold: int, live_sockets: Dict[int, Any],
         address_by_sockaddr: Dict[bytes, Any], sockaddr_by_address: Dict[Any, bytes],
         dispatch_records: Callable[..., None], record_address: Callable[..., Any],
         address_for_sockaddr: Callable[..., Any], udp_did_receive: Callable[..., None],
         raise_c_error: Callable[..., None], report_delegate_error: Callable[..., None],
         read: Callable[..., None], write: Callable[..., None], send_to_address: Callable[..., None]) -> None: ...
def drain(queue: int, records: int, capacity: int, raw: memoryview, records_object: Any, /) -> int: ...
def run_once(group: int, /) -> bool: ...
def shutdown() -> None: ...
def trampolines() -> Dict[str, int]: ...
def event_layout() -> Dict[str, Any]: ...
