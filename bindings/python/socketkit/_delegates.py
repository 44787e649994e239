# SPDX-License-Identifier: MIT
"""The delegate methods SocketKit calls, as typing.Protocol classes: :class:`SocketDelegate`
(TCP and Unix-domain sockets) and :class:`UdpSocketDelegate`.

A delegate is any object, and it defines only the methods it wants: SocketKit calls those.
To have a type checker check their signatures, derive the delegate from the protocol::

    class Client(socketkit.SocketDelegate):
        def socket_did_read(self, sock: socketkit.Socket, data: socketkit.ReadData, tag: int) -> None:
            ...

A method whose signature does not match is then an error (``mypy --strict``), and the
methods the class does not define are inherited from the protocol as the behaviour of a
delegate without them: SocketKit treats those as absent (it does not even call into
Python for their events). An object that defines every method satisfies the protocol
structurally, without deriving from it.

Setting a delegate that has a ``socket_*`` (for a :class:`Socket`) or ``udp_socket_*``
(for a :class:`UdpSocket`) method that is not one of these raises TypeError naming the
closest one: a misspelt delegate method would otherwise never be called.
"""
from __future__ import annotations

import difflib
import weakref
from typing import TYPE_CHECKING, Any, Callable, Dict, FrozenSet, Iterable, List, Optional, Protocol, Union

if TYPE_CHECKING:
    from ._addresses import Address, IPAddress, PacketInfo
    from ._tcp import Socket
    from ._tls import TLSTrust
    from ._udp import UdpSocket
    from .errors import Error

#: What ``socket_did_read`` receives: ``bytes``, or a ``memoryview`` of your buffer for the
#: reads into one (``read_into``, ``read_to_length_into``, ``read_to_data_into``).
ReadData = Union[bytes, memoryview]


class SocketDelegate(Protocol):
    """What a :class:`~socketkit.Socket` calls on its delegate (each optional; see the
    module). They run on the socket's callback queue, one at a time and in order."""

    def socket_did_accept(self, listener: Socket, new_socket: Socket) -> None:
        """A listener accepted `new_socket` (which has the listener's delegate and queue).
        Keep a reference to it: a socket nobody holds is closed. Without this method a
        listener closes what it accepts."""
        return None

    def socket_new_loop_for_connection(self, listener: Socket, address: Optional[Address]) -> Optional[int]:
        """The index of the listener group's loop for a connection from `address` (None or
        an index out of range: SocketKit's choice)."""
        return None

    def socket_did_pause_accepting(self, listener: Socket, error: Optional[Error]) -> None:
        """Accepting paused (descriptors exhausted: EMFILE, ENFILE); it resumes by itself."""
        return None

    def socket_did_connect(self, sock: Socket, host: str, port: int) -> None:
        """Connected (or adopted) to `host` and `port` (a Unix path and 0 for Unix-domain)."""
        return None

    def socket_did_read(self, sock: Socket, data: ReadData, tag: int) -> None:
        """A read completed: its bytes and the tag it was queued with."""
        return None

    def socket_did_read_partial(self, sock: Socket, length: int, tag: int) -> None:
        """The current read gathered `length` more bytes and goes on."""
        return None

    def socket_should_timeout_read(self, sock: Socket, tag: int, elapsed: float, done: int) -> float:
        """A read's timeout passed: seconds to extend it by (``math.inf``: for good), or 0 to
        end the connection with :class:`~socketkit.ReadTimeoutError`."""
        return 0.0

    def socket_did_write(self, sock: Socket, tag: int) -> None:
        """The kernel accepted every byte of the write queued with `tag`."""
        return None

    def socket_did_write_partial(self, sock: Socket, length: int, tag: int) -> None:
        """The current write sent `length` more bytes and goes on."""
        return None

    def socket_should_timeout_write(self, sock: Socket, tag: int, elapsed: float, done: int) -> float:
        """As :meth:`socket_should_timeout_read`, for a write."""
        return 0.0

    def socket_did_close_read_stream(self, sock: Socket) -> None:
        """The peer closed its side (with ``auto_disconnect_on_closed_read_stream`` off)."""
        return None

    def socket_did_reach_high_watermark(self, sock: Socket, queued: int) -> None:
        """The bytes queued to write reached the high watermark: stop writing."""
        return None

    def socket_did_drain_to_low_watermark(self, sock: Socket, queued: int) -> None:
        """The bytes queued to write drained to the low watermark: write again."""
        return None

    def socket_did_disconnect(self, sock: Socket, error: Optional[Error]) -> None:
        """The session ended: None after :meth:`~socketkit.Socket.disconnect`, else why."""
        return None

    def socket_did_secure(self, sock: Socket) -> None:
        """The TLS handshake finished (:meth:`~socketkit.Socket.start_tls`)."""
        return None

    def socket_did_receive_trust(self, sock: Socket, trust: TLSTrust) -> Optional[bool]:
        """Manual trust evaluation: True or False now, or None to answer later with
        ``trust.answer()``. Without this method every peer is rejected."""
        return False

    def socket_did_cancel_read(self, sock: Socket, tag: int, unread_bytes: int) -> None:
        """The answer to :meth:`~socketkit.Socket.cancel_read`: the reads with `tag` that had
        not completed are withdrawn; `unread_bytes` is what SocketKit holds ahead of the
        next read."""
        return None


class UdpSocketDelegate(Protocol):
    """What a :class:`~socketkit.UdpSocket` calls on its delegate (each optional)."""

    def udp_socket_did_connect(self, sock: UdpSocket, address: IPAddress) -> None:
        """Connected to `address` (``connect_to_host``, ``connect_to_address``)."""
        return None

    def udp_socket_did_not_connect(self, sock: UdpSocket, error: Optional[Error]) -> None:
        """The connect failed (ResolutionError, ...)."""
        return None

    def udp_socket_did_send(self, sock: UdpSocket, tag: int) -> None:
        """The datagram queued with `tag` was sent."""
        return None

    def udp_socket_did_not_send(self, sock: UdpSocket, tag: int, error: Optional[Error]) -> None:
        """The datagram queued with `tag` could not be sent; the socket stays open."""
        return None

    def udp_socket_did_receive(self, sock: UdpSocket, data: bytes, address: Optional[IPAddress],
                               context: Any) -> None:
        """A datagram from `address`; `context` is what the receive filter attached."""
        return None

    def udp_socket_did_receive_with_packet_info(self, sock: UdpSocket, data: bytes, address: Optional[IPAddress],
                                                packet_info: Optional[PacketInfo], context: Any) -> None:
        """A datagram with where it arrived (``receives_packet_info`` on): its destination
        address and interface. A delegate without this method gets such datagrams through
        ``udp_socket_did_receive``, as this default does."""
        return self.udp_socket_did_receive(sock, data, address, context)

    def udp_socket_did_receive_error(self, sock: UdpSocket, error: Optional[Error]) -> None:
        """An ICMP error about an earlier datagram, or a datagram too large (TruncatedError)."""
        return None

    def udp_socket_did_close(self, sock: UdpSocket, error: Optional[Error]) -> None:
        """The socket's descriptors closed: None after ``disconnect()``, else why."""
        return None


def _defaults(protocol: type) -> Dict[str, Any]:
    return {name: value for name, value in vars(protocol).items()
            if name.startswith(("socket_", "udp_socket_")) and callable(value)}


_SOCKET_DEFAULTS = _defaults(SocketDelegate)
_UDP_DEFAULTS = _defaults(UdpSocketDelegate)
#: The protocols' own methods: a delegate that inherits one unchanged does not define it.
_INHERITED = frozenset(id(function) for function in list(_SOCKET_DEFAULTS.values()) + list(_UDP_DEFAULTS.values()))


def implements(delegate: Any, name: str) -> bool:
    """Whether `delegate` defines the delegate method `name` (one inherited unchanged from
    SocketDelegate or UdpSocketDelegate, or set to None, does not count)."""
    method = getattr(delegate, name, None)
    if method is None:
        return False
    return id(getattr(method, "__func__", method)) not in _INHERITED


# Per delegate class and prefix: the names of its methods with the prefix that are not
# delegate methods (a class is looked at once; a listener's delegate is set again on every
# connection it accepts in some programs).
_unknown_by_class: "weakref.WeakKeyDictionary[type, Dict[str, List[str]]]" = weakref.WeakKeyDictionary()


def _unknown(names: Iterable[str], owner: Any, prefix: str, known: FrozenSet[str]) -> List[str]:
    return [name for name in names
            if name.startswith(prefix) and name not in known and callable(getattr(owner, name, None))]


def closest(name: str, known: Iterable[str]) -> Optional[str]:
    """The known name `name` most likely misspells: the longest one it begins with
    (``socket_did_read_data``: ``socket_did_read``), else difflib's closest match."""
    prefixes = [candidate for candidate in known if name.startswith(candidate)]
    if prefixes:
        return max(prefixes, key=len)
    matches = difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.6)
    return matches[0] if matches else None


def check_method_names(delegate: Any, prefix: str, known: FrozenSet[str], kind: str) -> None:
    """Raises TypeError when `delegate` has a method named like a delegate method of `kind`
    (``prefix``...) that is not one: SocketKit would never call it, which is how a
    misspelling (``socket_did_read_data``) goes unnoticed. The message names the closest
    real one."""
    if delegate is None:
        return
    cls = type(delegate)
    try:
        by_prefix = _unknown_by_class[cls]
    except KeyError:
        by_prefix = _unknown_by_class[cls] = {}
    except TypeError:  # pragma: no cover - a class that cannot be weakly referenced
        by_prefix = {}
    unknown = by_prefix.get(prefix)
    if unknown is None:
        unknown = by_prefix[prefix] = _unknown(dir(cls), cls, prefix, known)
    instance_names = getattr(delegate, "__dict__", None)
    if instance_names:
        unknown = unknown + _unknown(list(instance_names), delegate, prefix, known)
    if unknown:
        name = unknown[0]
        close = closest(name, known)
        hint = f"; did you mean {close!r}?" if close else f" (they are: {', '.join(sorted(known))})"
        raise TypeError(f"{cls.__name__}.{name} is not a {kind} delegate method, so SocketKit would never call "
                        f"it{hint}")
