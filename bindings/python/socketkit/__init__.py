# SPDX-License-Identifier: MIT
"""SocketKit for Python: asynchronous TCP, TLS and Unix-domain sockets with CocoaAsyncSocket's
model (queued reads and writes with tags and timeouts, framing, listeners, STARTTLS,
delegates), and UDP sockets with GCDAsyncUdpSocket's (:class:`UdpSocket`), on the SocketKit
engine through its C library.

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
    server.bind_to_interface("127.0.0.1", 9999)
    server.begin_receiving()

TLS is started on a connected (or connecting) socket, GCDAsyncSocket's ``startTLS``: it is
queued behind the reads and writes already queued, so the STARTTLS pattern needs no
waiting, and ``socket_did_secure(sock)`` says when the connection is encrypted::

    sock.connect_to_host("example.com", 443, timeout=5)
    sock.start_tls(socketkit.TLSSettings(alpn_protocols=["http/1.1"]))
    sock.write(b"GET / HTTP/1.1\r\nHost: example.com\r\n\r\n")

Handshake failures end the connection with a :class:`TLSError` subclass
(:class:`CertificateExpiredError`, :class:`HostnameMismatchError`, ...).

Host names, interfaces, Unix paths and TLS settings with a NUL character in them are
refused with :class:`BadParamError` (:class:`TLSSettingsError` for TLS settings), both
``ValueError``, as the standard library refuses them: C would see only the text before the
NUL.

With asyncio, :mod:`socketkit.aio` runs delegates on the event loop and offers awaitable
helpers (``await sock.read_to_data(b"\\r\\n")``).

The engine's log (a TLS handshake's failure and OpenSSL's reason, a name that did not
resolve, a listener out of descriptors, ...) goes to :mod:`logging`, under the
``socketkit`` logger, once asked for: ``socketkit.enable_logging(logging.INFO)``. It is off
by default.

Timeouts are seconds: negative or ``math.inf`` = none, 0 = fail unless the operation can
complete at once, positive = from when the operation reaches the front of its queue; NaN
raises BadParamError. On expiry ``socket_should_timeout_read`` / ``_write`` may return an
extension: positive (``math.inf``: for good) re-arms the timer, anything else ends the
connection with ReadTimeoutError / WriteTimeoutError.
"""
from ._addresses import Address, IPAddress, lookup_host
from ._delegates import ReadData, SocketDelegate, UdpSocketDelegate
from ._handles import Descriptors
from ._log import disable_logging, enable_logging
from ._native import SPEEDUPS
from ._queues import CallbackQueue, HostQueue, LoopGroup, SerialQueue, default_queue
from ._tcp import CR, CRLF, LF, ZERO, KeepAlive, Progress, Proxy, Socket
from ._tcp import PeerCredentials, ProxyProtocol, socket_activation_fds
from ._addresses import PacketInfo
from ._udp import AddressPreference, UdpSocket
from ._ffi import lib as _lib
from ._tls import Certificate, TLSInfo, TLSRole, TLSSettings, TLSTrust, TLSVerification, TLSVersion
from .errors import (
    AddressInUseError,
    AddressNotAvailableError,
    BadConfigError,
    BadParamError,
    CertificateExpiredError,
    CertificateInvalidError,
    CertificateNotYetValidError,
    CertificateVerificationError,
    ClientCertificateRequiredError,
    BrokenPipeError,
    ClosedError,
    ConnectionAbortedError,
    ConnectionRefusedError,
    ConnectionResetError,
    ConnectionTimedOutError,
    ConnectTimeoutError,
    Error,
    FileExistsError,
    FileNotFoundError,
    HandshakeTimeoutError,
    HostnameMismatchError,
    InvalidHandleError,
    IsADirectoryError,
    NotADirectoryError,
    OtherError,
    PeerRejectedError,
    PermissionError,
    ProtocolVersionError,
    ReadMaxedOutError,
    ReadTimeoutError,
    ResolutionError,
    SelfSignedCertificateError,
    SendTimeoutError,
    SystemCallError,
    TimeoutError,
    TLSError,
    TLSFailedError,
    TLSPeerClosedError,
    TLSSettingsError,
    TruncatedError,
    TruncatedTLSError,
    UnknownIssuerError,
    WriteQueueFullError,
    ProxyError,
    ProxyAuthenticationError,
    WouldDeadlockError,
    WriteTimeoutError,
)

from ._version import __version__

#: The version of the loaded libsocketkit ("MAJOR.MINOR.PATCH"); the package's own,
#: ``__version__``, is the header's it was built against (the same in a wheel).
LIBRARY_VERSION: str = _lib.sk_version().decode()

__all__ = [
    "Address", "AddressInUseError", "AddressNotAvailableError", "AddressPreference", "BadConfigError", "BadParamError",
    "BrokenPipeError", "CR", "CRLF", "CallbackQueue", "Certificate", "CertificateExpiredError",
    "CertificateInvalidError", "CertificateNotYetValidError", "CertificateVerificationError",
    "ClientCertificateRequiredError", "ClosedError", "ConnectTimeoutError", "ConnectionAbortedError",
    "ConnectionRefusedError", "ConnectionResetError", "ConnectionTimedOutError", "Descriptors", "Error",
    "FileExistsError", "FileNotFoundError", "HandshakeTimeoutError", "HostQueue", "HostnameMismatchError", "IPAddress",
    "InvalidHandleError", "IsADirectoryError", "KeepAlive", "LF", "LIBRARY_VERSION", "LoopGroup", "NotADirectoryError",
    "OtherError", "PeerRejectedError", "PermissionError", "Progress", "ProtocolVersionError", "ProxyProtocol", "ReadData",
    "ReadMaxedOutError", "ReadTimeoutError", "ResolutionError", "SPEEDUPS", "SelfSignedCertificateError",
    "SendTimeoutError", "SerialQueue", "Socket", "SocketDelegate", "SystemCallError", "TLSError", "TLSFailedError",
    "TLSInfo", "TLSPeerClosedError", "TLSRole", "TLSSettings", "TLSSettingsError", "TLSTrust", "TLSVerification",
    "TLSVersion", "TimeoutError", "TruncatedError", "TruncatedTLSError", "UdpSocket", "UdpSocketDelegate",
    "UnknownIssuerError", "WouldDeadlockError", "WriteQueueFullError", "WriteTimeoutError", "ZERO", "default_queue",
    "disable_logging", "enable_logging", "lookup_host",
]
__all__ += ["PeerCredentials", "socket_activation_fds"]
__all__ += ["PacketInfo"]
__all__ += ["Proxy", "ProxyAuthenticationError", "ProxyError"]
