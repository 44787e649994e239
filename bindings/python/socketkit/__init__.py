"""SocketKit for Python: asynchronous TCP and Unix-domain sockets with CocoaAsyncSocket's
model (queued reads and writes with tags and timeouts, framing, listeners, delegates), on
the SocketKit engine through its C library.

A delegate is any object; SocketKit calls the methods it defines::

    import socketkit, threading

    done = threading.Event()

    class Client:
        def socket_did_connect(self, sock, host, port):
            sock.write(b"hello\\n")
            sock.read_to_data(socketkit.LF)

        def socket_did_read(self, sock, data, tag):
            print(data)
            sock.disconnect()

        def socket_did_disconnect(self, sock, error):
            done.set()

    client = Client()
    with socketkit.Socket(client) as sock:
        sock.connect_to_host("example.com", 7, timeout=5)
        done.wait()

With asyncio, :mod:`socketkit.aio` runs delegates on the event loop and offers awaitable
helpers (``await sock.read_to_data(b"\\r\\n")``).
"""
from ._core import (
    CR,
    CRLF,
    LF,
    ZERO,
    CallbackQueue,
    Descriptors,
    HostQueue,
    KeepAlive,
    LoopGroup,
    Progress,
    SerialQueue,
    Socket,
    default_queue,
    lookup_host,
)
from ._ffi import lib as _lib
from .errors import (
    BadConfigError,
    BadParamError,
    ClosedError,
    ConnectionRefusedError,
    ConnectionResetError,
    ConnectTimeoutError,
    Error,
    InvalidHandleError,
    OtherError,
    ReadMaxedOutError,
    ReadTimeoutError,
    ResolutionError,
    SystemCallError,
    TimeoutError,
    WriteTimeoutError,
)

#: The version of the loaded libsocketkit ("MAJOR.MINOR.PATCH").
LIBRARY_VERSION: str = _lib.sk_version().decode()
__version__ = "0.1.0"

__all__ = [
    "BadConfigError", "BadParamError", "CR", "CRLF", "CallbackQueue", "ClosedError", "ConnectTimeoutError",
    "ConnectionRefusedError", "ConnectionResetError", "Descriptors", "Error", "HostQueue", "InvalidHandleError",
    "KeepAlive", "LF", "LIBRARY_VERSION", "LoopGroup", "OtherError", "Progress", "ReadMaxedOutError",
    "ReadTimeoutError", "ResolutionError", "SerialQueue", "Socket", "SystemCallError", "TimeoutError",
    "WriteTimeoutError", "ZERO", "default_queue", "lookup_host",
]
