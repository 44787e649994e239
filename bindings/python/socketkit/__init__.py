"""SocketKit for Python: asynchronous TCP and Unix-domain sockets with CocoaAsyncSocket's
model (queued reads and writes with tags and timeouts, framing, listeners, delegates), and
UDP sockets with GCDAsyncUdpSocket's (:class:`UdpSocket`), on the SocketKit engine through
its C library.

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

UDP works the same way, with datagrams and ("ip", port) addresses::

    class Echo:
        def udp_socket_did_receive(self, sock, data, address, context):
            sock.send_to_address(data, address)

    server = socketkit.UdpSocket(Echo())
    server.bind_to_port(9999, "127.0.0.1")
    server.begin_receiving()

With asyncio, :mod:`socketkit.aio` runs delegates on the event loop and offers awaitable
helpers (``await sock.read_to_data(b"\\r\\n")``).
"""
from ._core import (
    CR,
    CRLF,
    LF,
    ZERO,
    AddressPreference,
    CallbackQueue,
    Descriptors,
    HostQueue,
    KeepAlive,
    LoopGroup,
    Progress,
    SerialQueue,
    Socket,
    UdpSocket,
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
    SendTimeoutError,
    SystemCallError,
    TimeoutError,
    TruncatedError,
    WriteTimeoutError,
)

#: The version of the loaded libsocketkit ("MAJOR.MINOR.PATCH").
LIBRARY_VERSION: str = _lib.sk_version().decode()
__version__ = "0.1.0"

__all__ = [
    "AddressPreference", "BadConfigError", "BadParamError", "CR", "CRLF", "CallbackQueue", "ClosedError",
    "ConnectTimeoutError", "ConnectionRefusedError", "ConnectionResetError", "Descriptors", "Error", "HostQueue",
    "InvalidHandleError", "KeepAlive", "LF", "LIBRARY_VERSION", "LoopGroup", "OtherError", "Progress",
    "ReadMaxedOutError", "ReadTimeoutError", "ResolutionError", "SendTimeoutError", "SerialQueue", "Socket",
    "SystemCallError", "TimeoutError", "TruncatedError", "UdpSocket", "WriteTimeoutError", "ZERO", "default_queue",
    "lookup_host",
]
