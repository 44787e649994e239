# SPDX-License-Identifier: MIT
"""Addresses between Python and C: text for C (a NUL inside is a BadParamError, never a
truncation: see _ffi.c_string), ("ip", port) tuples and Unix paths to and from C
sockaddrs, and name resolution (:func:`lookup_host`)."""
from __future__ import annotations

import ctypes
import os
import socket as _stdlib_socket
import struct
from ctypes import byref, c_uint16
from typing import Any, Dict, List, NamedTuple, Optional, Tuple, Union

from . import _ffi
from ._ffi import lib
from ._status import bad_param, check_port, raise_for
from .errors import Error

#: ("ip", port) or a Unix path.
Address = Union[Tuple[str, int], str]
#: An IPv4 or IPv6 peer: ("address", port). IPv6 link-local hosts carry their scope
#: ("fe80::1%eth0").
IPAddress = Tuple[str, int]

_AF_INET = _stdlib_socket.AF_INET
_AF_INET6 = _stdlib_socket.AF_INET6
_unpack_family = struct.Struct("=H").unpack_from
_unpack_port = struct.Struct("!H").unpack_from
_unpack_scope = struct.Struct("=I").unpack_from


def host(name: str) -> bytes:
    return _ffi.c_string(name, "the host")


def interface(name: Optional[str]) -> Optional[bytes]:
    return _ffi.c_string(name or None, "the interface")


def unix_path(path: "Union[str, bytes, os.PathLike[str], os.PathLike[bytes]]") -> bytes:
    return _ffi.c_string(path, "the Unix socket path", path=True)


def sockaddr(address: Address) -> bytes:
    """A C sockaddr for ("host", port) or a Unix path."""
    if isinstance(address, str):
        path = unix_path(address)
        return struct.pack("=H", _stdlib_socket.AF_UNIX) + path + b"\x00"
    host_name, port = address
    if ":" in host_name:
        scope = 0
        if "%" in host_name:
            host_name, scope_name = host_name.split("%", 1)
            scope = int(scope_name) if scope_name.isdigit() else _stdlib_socket.if_nametoindex(scope_name)
        packed = _stdlib_socket.inet_pton(_AF_INET6, host_name)
        return struct.pack("=H", _AF_INET6) + struct.pack("!H", port) + struct.pack(
            "=I", 0) + packed + struct.pack("=I", scope)
    packed = _stdlib_socket.inet_pton(_AF_INET, host_name)
    return struct.pack("=H", _AF_INET) + struct.pack("!H", port) + packed + bytes(8)


def address_from_sockaddr(raw: bytes) -> Optional[Address]:
    """("ip", port) or a Unix path for a C sockaddr, as the library names it."""
    if len(raw) < 2:
        return None
    family = _unpack_family(raw)[0]
    if family == _stdlib_socket.AF_UNIX:
        return raw[2:].split(b"\x00", 1)[0].decode("utf-8", "replace")
    buffer = ctypes.create_string_buffer(64)
    length = lib.sk_address_get_host(raw, len(raw), buffer, len(buffer))
    if length < 0:
        return None
    port = c_uint16()
    lib.sk_address_get_port(raw, len(raw), byref(port))
    return (buffer.value.decode(), port.value)


def lookup_host(host_name: str, port: int) -> List[Tuple[str, int]]:
    """Resolves `host_name` (blocking) to ("address", port) pairs in resolver order.
    "localhost" gives 127.0.0.1 and ::1 without asking the resolver; a name under
    .invalid raises socket.gaierror (EAI_NONAME) at once (RFC 6761)."""
    encoded = host(host_name)
    capacity = 16
    while True:
        entries = (_ffi.Address * capacity)()
        error = _ffi.CError()
        found = raise_for(lib.sk_lookup_host_addresses(encoded, port, entries, capacity, byref(error)), error)
        if found <= capacity:
            break
        capacity = found  # more than fitted: ask again with room for all of them
    addresses = []
    for entry in entries[:found]:
        address = address_from_sockaddr(ctypes.string_at(ctypes.addressof(entry), entry.length))
        if isinstance(address, tuple):
            addresses.append(address)
    return addresses


def ip_address_from_sockaddr(raw: bytes) -> Optional[IPAddress]:
    """("host", port) of a sockaddr_in / sockaddr_in6, as sk_address_get_host writes it (IPv6
    scope as "%name", or "%index" for an interface that no longer exists); None otherwise.
    In Python: a datagram's sender is decoded for every datagram."""
    # The library's rule for address lengths: at least the family's struct, at most a
    # sockaddr_storage (the bytes beyond the struct are ignored).
    if not 4 <= len(raw) <= 128:
        return None
    family = _unpack_family(raw)[0]
    if family == _AF_INET and len(raw) >= 16:
        return (_stdlib_socket.inet_ntop(_AF_INET, raw[4:8]), _unpack_port(raw, 2)[0])
    if family == _AF_INET6 and len(raw) >= 28:
        host_name = _stdlib_socket.inet_ntop(_AF_INET6, raw[8:24])
        scope = _unpack_scope(raw, 24)[0]
        if scope:
            try:
                host_name += "%" + _stdlib_socket.if_indextoname(scope)
            except OSError:
                host_name += f"%{scope}"
        return (host_name, _unpack_port(raw, 2)[0])
    return None


class PacketInfo(NamedTuple):
    """Where a datagram arrived (IP_PKTINFO / IPV6_RECVPKTINFO): what
    ``udp_socket_did_receive_with_packet_info`` is given."""

    #: The address the datagram was sent to, as its IP header says: a multicast group, a
    #: broadcast address, or one of this host's (text, as the socket module writes it).
    destination: str
    #: The index of the interface it came in on.
    interface_index: int

    @property
    def interface_name(self) -> Optional[str]:
        """The interface's name (``socket.if_indextoname``), None if it is gone."""
        try:
            return _stdlib_socket.if_indextoname(self.interface_index)
        except OSError:
            return None


def packet_info_at(pointer: Optional[int]) -> Optional[PacketInfo]:
    """The PacketInfo of the sk_udp_packet_info_t at `pointer` (borrowed), None for NULL."""
    if not pointer:
        return None
    info = _ffi.UdpPacketInfo.from_address(pointer)
    address = ip_address_from_sockaddr(bytes(info.destination)[:info.destination_length])
    return PacketInfo(address[0] if address else "", info.interface_index)


def ip_address_at(pointer: Optional[int], length: int) -> Optional[IPAddress]:
    if not pointer or length <= 0:
        return None
    return ip_address_from_sockaddr(ctypes.string_at(pointer, length))


# Recent (host, port) <-> sockaddr conversions: a UDP server answers the same peers again
# and again. Bounded; cleared when full. The C extension reads and fills them too.
sockaddr_by_address: Dict[Any, bytes] = {}
address_by_sockaddr: Dict[bytes, IPAddress] = {}
_CACHE_LIMIT = 4096


def ip_sockaddr(address: Any) -> bytes:
    """The C sockaddr for ("ip", port) or ("ip6", port, flowinfo, scope_id) (as Python's
    socket module gives them). Host names are refused: use the *_to_host methods."""
    try:
        cached = sockaddr_by_address.get(address)
    except TypeError:  # unhashable: not a valid address either; the checks below say why
        cached = None
    if cached is not None:
        return cached
    raw = _ip_sockaddr_uncached(address)
    if len(sockaddr_by_address) >= _CACHE_LIMIT:
        sockaddr_by_address.clear()
    sockaddr_by_address[address] = raw
    return raw


def _ip_sockaddr_uncached(address: Any) -> bytes:
    try:
        if not isinstance(address, tuple) or len(address) not in (2, 4):
            raise TypeError("expected (host, port)")
        host_name, port = address[0], check_port(address[1])
        if not isinstance(host_name, str):
            raise TypeError("host must be a str")
        if len(address) == 4 and address[3] and "%" not in host_name and ":" in host_name:
            host_name = f"{host_name}%{int(address[3])}"
        return sockaddr((host_name, port))
    except Error:
        raise
    except (OSError, TypeError, ValueError) as problem:
        raise bad_param(f"not a numeric IPv4 or IPv6 address with a port: {address!r} ({problem})") from None


def _remember(raw: bytes, address: IPAddress) -> None:
    if len(address_by_sockaddr) >= _CACHE_LIMIT:
        address_by_sockaddr.clear()
    address_by_sockaddr[raw] = address


def record_address(host_text: int, port: int, raw_address: int, raw_length: int) -> IPAddress:
    """The (host, port) of a datagram's event record: from the cache by the raw sockaddr (a
    copy of a few bytes) instead of decoding the host text each time."""
    key = (ctypes.c_char * raw_length).from_address(raw_address).raw if raw_address and raw_length else None
    if key is not None:
        cached = address_by_sockaddr.get(key)
        if cached is not None:
            return cached
    address = (ctypes.string_at(host_text).decode("utf-8", "replace"), port)
    if key is not None:
        _remember(key, address)
    return address


def address_for_sockaddr(raw: Optional[bytes]) -> Optional[IPAddress]:
    """The (host, port) of a datagram's sockaddr (a callback's), cached."""
    if not raw:
        return None
    address = ip_address_from_sockaddr(raw)
    if address is not None:
        _remember(raw, address)
    return address
