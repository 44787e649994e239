# SPDX-License-Identifier: MIT
"""The C API of libsocketkit, declared for ctypes: every function with exact argument and
result types, the structs, and the callback types (TCP and UDP). Nothing here is public; the
rest of the package wraps it. ``tests/test_ffi.py`` checks this table against ``socketkit.h``.
"""
from __future__ import annotations

import ctypes
from ctypes import (
    CFUNCTYPE,
    POINTER,
    Structure,
    c_char,
    c_char_p,
    c_double,
    c_int,
    c_long,
    c_size_t,
    c_uint,
    c_uint16,
    c_int32,
    c_int64,
    c_uint32,
    c_uint64,
    c_void_p,
)
import os
import struct
from typing import Any, Callable, List, Optional, Union, overload

from ._loader import load_library
from ._version import VERSION_NUMBER

#: The C version this binding was built against (the header's SK_VERSION_NUMBER, through
#: setup.py: socketkit/_version.py).
EXPECTED_VERSION_NUMBER = VERSION_NUMBER

ERROR_MESSAGE_CAPACITY = 256


class CError(Structure):
    """sk_error_t"""

    _fields_ = [
        ("code", c_int),
        ("os_error", c_int),
        ("message", c_char * ERROR_MESSAGE_CAPACITY),
    ]


class SocketDescriptors(Structure):
    """sk_socket_descriptors_t"""

    _fields_ = [
        ("primary", c_int),
        ("ipv4", c_int),
        ("ipv6", c_int),
        ("unix_domain", c_int),
    ]


# Callback types of sk_socket_delegate_t, in member order.
DID_ACCEPT = CFUNCTYPE(None, c_void_p, c_void_p, c_void_p)
NEW_SOCKET_LOOP_FOR_CONNECTION = CFUNCTYPE(c_int, c_void_p, c_void_p, c_uint32, c_void_p)
DID_PAUSE_ACCEPTING = CFUNCTYPE(None, c_void_p, POINTER(CError), c_void_p)
DID_CONNECT = CFUNCTYPE(None, c_void_p, c_char_p, c_uint16, c_void_p)
DID_READ = CFUNCTYPE(None, c_void_p, c_void_p, c_size_t, c_long, c_void_p)
DID_READ_PARTIAL = CFUNCTYPE(None, c_void_p, c_size_t, c_long, c_void_p)
SHOULD_TIMEOUT = CFUNCTYPE(c_double, c_void_p, c_long, c_double, c_size_t, c_void_p)
DID_WRITE = CFUNCTYPE(None, c_void_p, c_long, c_void_p)
DID_WRITE_PARTIAL = CFUNCTYPE(None, c_void_p, c_size_t, c_long, c_void_p)
DID_CLOSE_READ_STREAM = CFUNCTYPE(None, c_void_p, c_void_p)
DID_WATERMARK = CFUNCTYPE(None, c_void_p, c_size_t, c_void_p)
DID_DISCONNECT = CFUNCTYPE(None, c_void_p, POINTER(CError), c_void_p)

# sk_log_callback_t: level, subsystem, message, userdata.
LOG_CALLBACK = CFUNCTYPE(None, c_int, c_char_p, c_char_p, c_void_p)


class Address(Structure):
    """sk_address_t: a sockaddr_storage (8-byte aligned, as in C) and its length."""

    _fields_ = [
        ("address", c_uint64 * 16),
        ("length", c_uint32),  # socklen_t
    ]


class Certificate(Structure):
    """sk_certificate_t: one certificate in DER (borrowed)."""

    _fields_ = [
        ("der", c_void_p),
        ("der_length", c_size_t),
    ]


class TLSTrust(Structure):
    """sk_tls_trust_t: what did_receive_trust (or an SK_EVENT_TRUST record) shows."""

    _fields_ = [
        ("token", c_uint64),
        ("chain", POINTER(Certificate)),
        ("chain_count", c_size_t),
        ("verification_error", POINTER(CError)),
        ("peer_name", c_char_p),
    ]


DID_SECURE = CFUNCTYPE(None, c_void_p, c_void_p)
DID_RECEIVE_TRUST = CFUNCTYPE(None, c_void_p, POINTER(TLSTrust), c_void_p)
DID_CANCEL_READ = CFUNCTYPE(None, c_void_p, c_long, c_size_t, c_void_p)

RELEASE_FUNCTION = CFUNCTYPE(None, c_void_p, c_void_p)
PERFORM_FUNCTION = CFUNCTYPE(None, POINTER(SocketDescriptors), c_void_p)


class SocketDelegate(Structure):
    """sk_socket_delegate_t"""

    _fields_ = [
        ("did_accept", DID_ACCEPT),
        ("new_socket_loop_for_connection", NEW_SOCKET_LOOP_FOR_CONNECTION),
        ("did_pause_accepting", DID_PAUSE_ACCEPTING),
        ("did_connect", DID_CONNECT),
        ("did_read", DID_READ),
        ("did_read_partial", DID_READ_PARTIAL),
        ("should_timeout_read", SHOULD_TIMEOUT),
        ("did_write", DID_WRITE),
        ("did_write_partial", DID_WRITE_PARTIAL),
        ("should_timeout_write", SHOULD_TIMEOUT),
        ("did_close_read_stream", DID_CLOSE_READ_STREAM),
        ("did_reach_high_watermark", DID_WATERMARK),
        ("did_drain_to_low_watermark", DID_WATERMARK),
        ("did_disconnect", DID_DISCONNECT),
        ("did_secure", DID_SECURE),
        ("did_receive_trust", DID_RECEIVE_TRUST),
        ("did_cancel_read", DID_CANCEL_READ),
    ]


# Callback types of sk_udp_socket_delegate_t, in member order, and the UDP filters.
UDP_DID_CONNECT = CFUNCTYPE(None, c_void_p, c_void_p, c_uint32, c_void_p)
UDP_DID_NOT_CONNECT = CFUNCTYPE(None, c_void_p, POINTER(CError), c_void_p)
UDP_DID_SEND = CFUNCTYPE(None, c_void_p, c_long, c_void_p)
UDP_DID_NOT_SEND = CFUNCTYPE(None, c_void_p, c_long, POINTER(CError), c_void_p)
UDP_DID_RECEIVE = CFUNCTYPE(None, c_void_p, c_void_p, c_size_t, c_void_p, c_uint32, c_void_p, c_void_p)
UDP_DID_RECEIVE_ERROR = CFUNCTYPE(None, c_void_p, POINTER(CError), c_void_p)
UDP_DID_CLOSE = CFUNCTYPE(None, c_void_p, POINTER(CError), c_void_p)
#: did_receive_with_packet_info(sock, data, length, address, address_length, info, context, userdata)
UDP_DID_RECEIVE_WITH_PACKET_INFO = CFUNCTYPE(None, c_void_p, c_void_p, c_size_t, c_void_p, c_uint32, c_void_p,
                                             c_void_p, c_void_p)
#: sk_udp_receive_filter_fn(sock, data, length, address, address_length, out_context, filter_userdata)
UDP_RECEIVE_FILTER = CFUNCTYPE(c_int, c_void_p, c_void_p, c_size_t, c_void_p, c_uint32, POINTER(c_void_p), c_void_p)
#: sk_udp_send_filter_fn(sock, data, length, address, address_length, tag, filter_userdata)
UDP_SEND_FILTER = CFUNCTYPE(c_int, c_void_p, c_void_p, c_size_t, c_void_p, c_uint32, c_long, c_void_p)


class UdpSocketDelegate(Structure):
    """sk_udp_socket_delegate_t"""

    _fields_ = [
        ("did_connect", UDP_DID_CONNECT),
        ("did_not_connect", UDP_DID_NOT_CONNECT),
        ("did_send", UDP_DID_SEND),
        ("did_not_send", UDP_DID_NOT_SEND),
        ("did_receive", UDP_DID_RECEIVE),
        ("did_receive_error", UDP_DID_RECEIVE_ERROR),
        ("did_close", UDP_DID_CLOSE),
        ("did_receive_with_packet_info", UDP_DID_RECEIVE_WITH_PACKET_INFO),
    ]


class UdpPacketInfo(Structure):
    """sk_udp_packet_info_t"""

    _fields_ = [
        ("destination", ctypes.c_byte * 128),  # struct sockaddr_storage
        ("destination_length", c_uint32),      # socklen_t
        ("interface_index", ctypes.c_uint),
    ]


# sk_udp_address_preference_t
UDP_PREFER_NEUTRAL, UDP_PREFER_IPV4, UDP_PREFER_IPV6 = 0, 1, 2


class Event(Structure):
    """sk_event_t: one event record from sk_callback_queue_poll_events."""

    _fields_ = [
        ("sock", c_void_p),
        ("userdata", c_void_p),
        ("kind", c_int32),
        ("port", c_uint16),
        ("tag", c_long),
        ("data", c_void_p),
        ("length", c_size_t),
        ("elapsed", c_double),
        ("host", c_void_p),
        ("error", c_void_p),
        ("new_socket", c_void_p),
        ("token", c_uint64),
        # UDP records (`sock` is NULL for them)
        ("udp_sock", c_void_p),
        ("address", c_void_p),
        ("address_length", c_uint32),  # socklen_t
        ("context", c_void_p),
        ("trust", c_void_p),  # const sk_tls_trust_t * (SK_EVENT_TRUST)
    ]


# sk_event_kind_t
(EVENT_ACCEPT, EVENT_PAUSE_ACCEPTING, EVENT_CONNECT, EVENT_READ, EVENT_READ_PARTIAL, EVENT_READ_TIMEOUT,
 EVENT_WRITE, EVENT_WRITE_PARTIAL, EVENT_WRITE_TIMEOUT, EVENT_CLOSE_READ_STREAM, EVENT_HIGH_WATERMARK,
 EVENT_LOW_WATERMARK, EVENT_DISCONNECT, EVENT_SECURE, EVENT_TRUST, EVENT_CANCEL_READ) = range(1, 17)
(EVENT_UDP_CONNECT, EVENT_UDP_NOT_CONNECT, EVENT_UDP_SEND, EVENT_UDP_NOT_SEND, EVENT_UDP_RECEIVE,
 EVENT_UDP_RECEIVE_ERROR, EVENT_UDP_CLOSE, EVENT_UDP_RECEIVE_PACKET_INFO) = range(20, 28)

#: sk_event_t as a struct format: one unpack_from reads a whole record (much cheaper than
#: ctypes field access). Fields: sock, userdata, kind, port, tag, data, length, elapsed,
#: host, error, new_socket, token, udp_sock, address, address_length, context, trust (NULL
#: pointers unpack as 0, not None).
EVENT_FORMAT = struct.Struct("@PPiHlPNdPPPQPPIPP")
assert EVENT_FORMAT.size == ctypes.sizeof(Event), (EVENT_FORMAT.size, ctypes.sizeof(Event))
assert [getattr(Event, name).offset for name in ("kind", "port", "tag", "token", "udp_sock", "address",
                                                 "address_length", "context", "trust")] == [
    16, 20, 24, 80, 88, 96, 104, 112, 120]


# ---- TLS ----------------------------------------------------------------------------

# sk_tls_role_t
TLS_CLIENT, TLS_SERVER = 0, 1
# sk_tls_verification_t
TLS_VERIFY_DEFAULT, TLS_VERIFY_NONE, TLS_VERIFY_PEER, TLS_VERIFY_REQUIRE_CERTIFICATE = -1, 0, 1, 2
# sk_tls_version_t
TLS_VERSION_DEFAULT, TLS_VERSION_1_0, TLS_VERSION_1_1, TLS_VERSION_1_2, TLS_VERSION_1_3 = (
    0, 0x0301, 0x0302, 0x0303, 0x0304)


class TLSInfo(Structure):
    """sk_tls_info_t"""

    _fields_ = [
        ("protocol_version", c_char * 16),
        ("cipher", c_char * 64),
        ("alpn_protocol", c_char * 256),
        ("server_name", c_char * 256),
        ("session_reused", c_int),
        ("peer_certificate_count", c_int),
    ]


class CertificateInfo(Structure):
    """sk_certificate_info_t"""

    _fields_ = [
        ("subject", c_char * 512),
        ("issuer", c_char * 512),
        ("not_before", c_int64),
        ("not_after", c_int64),
    ]

_error = POINTER(CError)
_handle = c_void_p
_out_handle = POINTER(c_void_p)

#: name -> (result type, argument types), one entry per function of socketkit.h.
PROTOTYPES = {
    "sk_version": (c_char_p, []),
    "sk_version_number": (c_uint, []),
    "sk_strerror": (c_char_p, [c_int]),
    "sk_error_name": (c_char_p, [c_int]),
    # Loop groups
    "sk_loop_group_create": (c_int, [c_int, _out_handle, _error]),
    "sk_loop_group_loop_count": (c_int, [_handle]),
    "sk_loop_group_create_driven": (c_int, [_out_handle, _error]),
    "sk_loop_group_get_fd": (c_int, [_handle]),
    "sk_loop_group_run_once": (c_int, [_handle, _error]),
    "sk_thread_set_wait_hook": (c_int, [c_void_p, c_void_p]),
    # Logging
    "sk_log_set_callback": (c_int, [c_void_p, c_int, c_void_p]),
    "sk_loop_group_release": (c_int, [_handle]),
    # Callback queues
    "sk_callback_queue_create_serial": (c_int, [c_char_p, _out_handle, _error]),
    "sk_callback_queue_create_host": (c_int, [_out_handle, _error]),
    "sk_callback_queue_fd": (c_int, [_handle]),
    "sk_callback_queue_drain": (c_int, [_handle, c_int]),
    "sk_callback_queue_poll_events": (c_int, [_handle, POINTER(Event), c_int]),
    "sk_callback_queue_release": (c_int, [_handle]),
    # Socket lifetime
    "sk_socket_create": (c_int, [POINTER(SocketDelegate), c_size_t, c_void_p, _handle, _handle, _out_handle, _error]),
    "sk_socket_create_from_fd": (
        c_int,
        [c_int, POINTER(SocketDelegate), c_size_t, c_void_p, _handle, _handle, _out_handle, _error],
    ),
    "sk_socket_release": (c_int, [_handle]),
    "sk_socket_set_delegate": (c_int, [_handle, POINTER(SocketDelegate), c_size_t, c_void_p]),
    "sk_socket_set_callback_queue": (c_int, [_handle, _handle]),
    "sk_socket_get_userdata": (c_int, [_handle, POINTER(c_void_p)]),
    "sk_socket_answer_timeout": (c_int, [POINTER(Event), c_double]),
    # Configuration
    "sk_socket_set_ipv4_enabled": (c_int, [_handle, c_int]),
    "sk_socket_is_ipv4_enabled": (c_int, [_handle]),
    "sk_socket_set_ipv6_enabled": (c_int, [_handle, c_int]),
    "sk_socket_is_ipv6_enabled": (c_int, [_handle]),
    "sk_socket_set_ipv4_preferred_over_ipv6": (c_int, [_handle, c_int]),
    "sk_socket_is_ipv4_preferred_over_ipv6": (c_int, [_handle]),
    "sk_socket_set_alternate_address_delay": (c_int, [_handle, c_double]),
    "sk_socket_get_alternate_address_delay": (c_int, [_handle, POINTER(c_double)]),
    "sk_socket_set_resolution_delay": (c_int, [_handle, c_double]),
    "sk_socket_get_resolution_delay": (c_int, [_handle, POINTER(c_double)]),
    "sk_socket_set_auto_disconnect_on_closed_read_stream": (c_int, [_handle, c_int]),
    "sk_socket_get_auto_disconnect_on_closed_read_stream": (c_int, [_handle]),
    "sk_socket_set_maximum_read_length": (c_int, [_handle, c_size_t]),
    "sk_socket_get_maximum_read_length": (c_int, [_handle, POINTER(c_size_t)]),
    "sk_socket_set_write_watermarks": (c_int, [_handle, c_size_t, c_size_t, _error]),
    "sk_socket_get_write_watermarks": (c_int, [_handle, POINTER(c_size_t), POINTER(c_size_t)]),
    "sk_socket_set_maximum_queued_write_bytes": (c_int, [_handle, c_size_t]),
    "sk_socket_get_maximum_queued_write_bytes": (c_int, [_handle, POINTER(c_size_t)]),
    "sk_socket_set_no_delay": (c_int, [_handle, c_int]),
    "sk_socket_get_no_delay": (c_int, [_handle]),
    "sk_socket_set_keep_alive": (c_int, [_handle, c_int, c_int, c_int, c_int, _error]),
    "sk_socket_get_keep_alive": (
        c_int,
        [_handle, POINTER(c_int), POINTER(c_int), POINTER(c_int), POINTER(c_int)],
    ),
    "sk_socket_set_buffer_sizes": (c_int, [_handle, c_int, c_int, _error]),
    "sk_socket_get_buffer_sizes": (c_int, [_handle, POINTER(c_int), POINTER(c_int)]),
    "sk_socket_set_reuse_port": (c_int, [_handle, c_int]),
    "sk_socket_get_reuse_port": (c_int, [_handle]),
    "sk_socket_set_accepts_on_every_loop": (c_int, [_handle, c_int]),
    "sk_socket_get_accepts_on_every_loop": (c_int, [_handle]),
    "sk_socket_set_proxy_protocol": (c_int, [_handle, c_int]),
    "sk_socket_get_proxy_protocol": (c_int, [_handle]),
    "sk_socket_set_proxy_header_timeout": (c_int, [_handle, c_double, _error]),
    "sk_socket_get_proxy_header_timeout": (c_int, [_handle, POINTER(c_double)]),
    "sk_socket_get_proxy_address": (c_int, [_handle, c_void_p, POINTER(c_uint32)]),
    "sk_socket_get_proxy_protocol_version": (c_int, [_handle]),
    "sk_socket_set_user_timeout": (c_int, [_handle, c_double, _error]),
    "sk_socket_get_user_timeout": (c_int, [_handle, POINTER(c_double)]),
    "sk_socket_set_proxy": (c_int, [_handle, c_int, c_char_p, c_uint16, c_char_p, c_char_p, _error]),
    "sk_socket_get_proxy": (c_int, [_handle, POINTER(c_int), c_char_p, c_size_t, POINTER(c_uint16)]),
    "sk_socket_set_fast_open": (c_int, [_handle, c_int]),
    "sk_socket_get_fast_open": (c_int, [_handle]),
    "sk_socket_set_socket_option": (c_int, [_handle, c_int, c_int, c_void_p, c_size_t, _error]),
    "sk_socket_clear_socket_options": (c_int, [_handle]),
    # Accepting and connecting
    "sk_socket_accept_on_port": (c_int, [_handle, c_uint16, _error]),
    "sk_socket_accept_on_interface": (c_int, [_handle, c_char_p, c_uint16, _error]),
    "sk_socket_accept_on_unix_path": (c_int, [_handle, c_char_p, _error]),
    "sk_socket_connect_to_host": (c_int, [_handle, c_char_p, c_uint16, c_char_p, c_double, _error]),
    "sk_socket_connect_to_address": (c_int, [_handle, c_void_p, c_uint32, c_char_p, c_double, _error]),
    "sk_socket_connect_to_unix_path": (c_int, [_handle, c_char_p, c_double, _error]),
    "sk_socket_accept_on_fds": (c_int, [_handle, POINTER(c_int), c_size_t, _error]),
    "sk_socket_activation_fds": (c_int, [POINTER(c_int), c_size_t, c_int, _error]),
    "sk_socket_accept_on_abstract_unix_name": (c_int, [_handle, c_void_p, c_size_t, _error]),
    "sk_socket_connect_to_abstract_unix_name": (c_int, [_handle, c_void_p, c_size_t, c_double, _error]),
    # Unix-domain extras
    "sk_socket_set_receives_descriptors": (c_int, [_handle, c_int]),
    "sk_socket_get_receives_descriptors": (c_int, [_handle]),
    "sk_socket_take_received_descriptors": (c_int, [_handle, POINTER(c_int), c_size_t, _error]),
    "sk_socket_write_with_descriptors": (
        c_int,
        [_handle, c_void_p, c_size_t, POINTER(c_int), c_size_t, c_double, c_long, _error],
    ),
    "sk_socket_get_peer_credentials": (c_int, [_handle, POINTER(c_int), POINTER(c_uint32), POINTER(c_uint32), _error]),
    # Reading
    "sk_socket_read": (c_int, [_handle, c_size_t, c_double, c_long, _error]),
    "sk_socket_read_into": (c_int, [_handle, c_void_p, c_size_t, c_size_t, c_size_t, c_double, c_long, _error]),
    "sk_socket_read_to_length": (c_int, [_handle, c_size_t, c_double, c_long, _error]),
    "sk_socket_read_to_length_into": (
        c_int,
        [_handle, c_size_t, c_void_p, c_size_t, c_size_t, c_double, c_long, _error],
    ),
    "sk_socket_read_to_data": (c_int, [_handle, c_void_p, c_size_t, c_size_t, c_double, c_long, _error]),
    "sk_socket_read_to_data_into": (
        c_int,
        [_handle, c_void_p, c_size_t, c_void_p, c_size_t, c_size_t, c_size_t, c_double, c_long, _error],
    ),
    "sk_socket_read_progress": (c_int, [_handle, POINTER(c_long), POINTER(c_size_t), POINTER(c_size_t)]),
    "sk_socket_read_to_file": (c_int, [_handle, c_size_t, c_int, c_double, c_long, _error]),
    "sk_socket_cancel_read": (c_int, [_handle, c_long, _error]),
    "sk_socket_unread": (c_int, [_handle, c_void_p, c_size_t, _error]),
    # Writing
    "sk_socket_write": (c_int, [_handle, c_void_p, c_size_t, c_double, c_long, _error]),
    "sk_socket_write_no_copy": (
        c_int,
        [_handle, c_void_p, c_size_t, RELEASE_FUNCTION, c_void_p, c_double, c_long, _error],
    ),
    "sk_socket_write_progress": (c_int, [_handle, POINTER(c_long), POINTER(c_size_t), POINTER(c_size_t)]),
    "sk_socket_write_file": (c_int, [_handle, c_int, ctypes.c_int64, c_size_t, c_double, c_long, _error]),
    "sk_socket_get_queued_write_bytes": (c_int, [_handle, POINTER(c_size_t)]),
    # Disconnecting
    "sk_socket_disconnect": (c_int, [_handle]),
    "sk_socket_disconnect_after_reading": (c_int, [_handle]),
    "sk_socket_disconnect_after_writing": (c_int, [_handle]),
    "sk_socket_disconnect_after_reading_and_writing": (c_int, [_handle]),
    "sk_socket_disconnect_with_reset": (c_int, [_handle]),
    "sk_socket_close_write_stream": (c_int, [_handle]),
    # Diagnostics
    "sk_socket_is_connected": (c_int, [_handle]),
    "sk_socket_is_disconnected": (c_int, [_handle]),
    "sk_socket_is_accepting": (c_int, [_handle]),
    "sk_socket_is_ipv4": (c_int, [_handle]),
    "sk_socket_is_ipv6": (c_int, [_handle]),
    "sk_socket_is_unix": (c_int, [_handle]),
    "sk_socket_get_connected_host": (c_int, [_handle, c_char_p, c_size_t]),
    "sk_socket_get_connected_port": (c_int, [_handle, POINTER(c_uint16)]),
    "sk_socket_get_connected_address": (c_int, [_handle, c_void_p, POINTER(c_uint32)]),
    "sk_socket_get_connected_unix_path": (c_int, [_handle, c_char_p, c_size_t]),
    "sk_socket_get_local_host": (c_int, [_handle, c_char_p, c_size_t]),
    "sk_socket_get_local_port": (c_int, [_handle, POINTER(c_uint16)]),
    "sk_socket_get_local_address": (c_int, [_handle, c_void_p, POINTER(c_uint32)]),
    # Advanced
    "sk_socket_perform": (c_int, [_handle, PERFORM_FUNCTION, c_void_p]),
    # UDP sockets: lifetime
    "sk_udp_socket_create": (
        c_int,
        [POINTER(UdpSocketDelegate), c_size_t, c_void_p, _handle, _handle, _out_handle, _error],
    ),
    "sk_udp_socket_release": (c_int, [_handle]),
    "sk_udp_socket_set_delegate": (c_int, [_handle, POINTER(UdpSocketDelegate), c_size_t, c_void_p]),
    "sk_udp_socket_set_callback_queue": (c_int, [_handle, _handle]),
    "sk_udp_socket_get_userdata": (c_int, [_handle, POINTER(c_void_p)]),
    # UDP configuration
    "sk_udp_socket_set_ipv4_enabled": (c_int, [_handle, c_int]),
    "sk_udp_socket_is_ipv4_enabled": (c_int, [_handle]),
    "sk_udp_socket_set_ipv6_enabled": (c_int, [_handle, c_int]),
    "sk_udp_socket_is_ipv6_enabled": (c_int, [_handle]),
    "sk_udp_socket_set_address_preference": (c_int, [_handle, c_int]),
    "sk_udp_socket_get_address_preference": (c_int, [_handle]),
    "sk_udp_socket_set_max_receive_sizes": (c_int, [_handle, c_size_t, c_size_t, _error]),
    "sk_udp_socket_get_max_receive_sizes": (c_int, [_handle, POINTER(c_size_t), POINTER(c_size_t)]),
    "sk_udp_socket_set_buffer_sizes": (c_int, [_handle, c_int, c_int, _error]),
    "sk_udp_socket_get_buffer_sizes": (c_int, [_handle, POINTER(c_int), POINTER(c_int)]),
    # UDP binding and connecting
    "sk_udp_socket_bind_to_port": (c_int, [_handle, c_char_p, c_uint16, _error]),
    "sk_udp_socket_bind_to_address": (c_int, [_handle, c_void_p, c_uint32, _error]),
    "sk_udp_socket_connect_to_host": (c_int, [_handle, c_char_p, c_uint16, _error]),
    "sk_udp_socket_connect_to_address": (c_int, [_handle, c_void_p, c_uint32, _error]),
    # UDP sending, filters, receiving
    "sk_udp_socket_send": (c_int, [_handle, c_void_p, c_size_t, c_double, c_long, _error]),
    "sk_udp_socket_send_to_host": (
        c_int,
        [_handle, c_void_p, c_size_t, c_char_p, c_uint16, c_double, c_long, _error],
    ),
    "sk_udp_socket_send_to_address": (
        c_int,
        [_handle, c_void_p, c_size_t, c_void_p, c_uint32, c_double, c_long, _error],
    ),
    "sk_udp_socket_set_send_filter": (c_int, [_handle, UDP_SEND_FILTER, c_void_p, _handle, c_int, _error]),
    "sk_udp_socket_set_receive_filter": (c_int, [_handle, UDP_RECEIVE_FILTER, c_void_p, _handle, c_int, _error]),
    "sk_udp_socket_receive_once": (c_int, [_handle, _error]),
    "sk_udp_socket_begin_receiving": (c_int, [_handle, _error]),
    "sk_udp_socket_pause_receiving": (c_int, [_handle]),
    # UDP multicast, broadcast, reuse
    "sk_udp_socket_join_multicast_group": (c_int, [_handle, c_char_p, c_char_p, _error]),
    "sk_udp_socket_set_receives_packet_info": (c_int, [_handle, c_int, _error]),
    "sk_udp_socket_get_receives_packet_info": (c_int, [_handle]),
    "sk_udp_event_packet_info": (c_void_p, [c_void_p]),
    "sk_udp_socket_set_send_segment_size": (c_int, [_handle, c_size_t, _error]),
    "sk_udp_socket_get_send_segment_size": (c_int, [_handle, POINTER(c_size_t)]),
    "sk_udp_socket_set_receive_offload": (c_int, [_handle, c_int, _error]),
    "sk_udp_socket_get_receive_offload": (c_int, [_handle]),
    "sk_udp_socket_join_multicast_source": (c_int, [_handle, c_char_p, c_char_p, c_char_p, _error]),
    "sk_udp_socket_leave_multicast_source": (c_int, [_handle, c_char_p, c_char_p, c_char_p, _error]),
    "sk_udp_socket_leave_multicast_group": (c_int, [_handle, c_char_p, c_char_p, _error]),
    "sk_udp_socket_send_ipv4_multicast_on_interface": (c_int, [_handle, c_char_p, _error]),
    "sk_udp_socket_send_ipv6_multicast_on_interface": (c_int, [_handle, c_char_p, _error]),
    "sk_udp_socket_set_multicast_ttl": (c_int, [_handle, c_int, _error]),
    "sk_udp_socket_set_multicast_loopback": (c_int, [_handle, c_int, _error]),
    "sk_udp_socket_enable_broadcast": (c_int, [_handle, c_int, _error]),
    "sk_udp_socket_enable_reuse_port": (c_int, [_handle, c_int, _error]),
    "sk_udp_socket_enable_reuse_address": (c_int, [_handle, c_int, _error]),
    # UDP closing
    "sk_udp_socket_close": (c_int, [_handle]),
    "sk_udp_socket_close_after_sending": (c_int, [_handle]),
    # UDP diagnostics
    "sk_udp_socket_get_local_host": (c_int, [_handle, c_int, c_char_p, c_size_t]),
    "sk_udp_socket_get_local_port": (c_int, [_handle, c_int, POINTER(c_uint16)]),
    "sk_udp_socket_get_local_address": (c_int, [_handle, c_int, c_void_p, POINTER(c_uint32)]),
    "sk_udp_socket_get_connected_host": (c_int, [_handle, c_char_p, c_size_t]),
    "sk_udp_socket_get_connected_port": (c_int, [_handle, POINTER(c_uint16)]),
    "sk_udp_socket_get_connected_address": (c_int, [_handle, c_void_p, POINTER(c_uint32)]),
    "sk_udp_socket_is_connected": (c_int, [_handle]),
    "sk_udp_socket_is_closed": (c_int, [_handle]),
    "sk_udp_socket_is_ipv4": (c_int, [_handle]),
    "sk_udp_socket_is_ipv6": (c_int, [_handle]),
    "sk_udp_socket_perform": (c_int, [_handle, PERFORM_FUNCTION, c_void_p]),
    # TLS settings
    "sk_tls_settings_create": (c_int, [c_int, _out_handle, _error]),
    "sk_tls_settings_release": (c_int, [_handle]),
    "sk_tls_settings_set_peer_name": (c_int, [_handle, c_char_p]),
    "sk_tls_settings_set_trust_system": (c_int, [_handle]),
    "sk_tls_settings_set_trust_file": (c_int, [_handle, c_char_p]),
    "sk_tls_settings_set_trust_directory": (c_int, [_handle, c_char_p]),
    "sk_tls_settings_set_trust_pem": (c_int, [_handle, c_char_p, c_size_t]),
    "sk_tls_settings_set_certificate_chain_file": (c_int, [_handle, c_char_p]),
    "sk_tls_settings_set_certificate_chain_pem": (c_int, [_handle, c_char_p, c_size_t]),
    "sk_tls_settings_set_private_key_file": (c_int, [_handle, c_char_p, c_char_p]),
    "sk_tls_settings_set_private_key_pem": (c_int, [_handle, c_char_p, c_size_t, c_char_p]),
    "sk_tls_settings_set_pkcs12_file": (c_int, [_handle, c_char_p, c_char_p]),
    "sk_tls_settings_set_pkcs12_data": (c_int, [_handle, c_char_p, c_size_t, c_char_p]),
    "sk_tls_settings_set_crl_files": (c_int, [_handle, POINTER(c_char_p), c_size_t]),
    "sk_tls_settings_set_crl_check_whole_chain": (c_int, [_handle, c_int]),
    "sk_tls_settings_set_ocsp_response_file": (c_int, [_handle, c_char_p]),
    "sk_tls_settings_set_request_ocsp_staple": (c_int, [_handle, c_int]),
    "sk_tls_settings_set_require_ocsp_staple": (c_int, [_handle, c_int]),
    "sk_tls_settings_set_verification": (c_int, [_handle, c_int]),
    "sk_tls_settings_set_versions": (c_int, [_handle, c_int, c_int]),
    "sk_tls_settings_set_cipher_list": (c_int, [_handle, c_char_p]),
    "sk_tls_settings_set_cipher_suites": (c_int, [_handle, c_char_p]),
    "sk_tls_settings_set_alpn_protocols": (c_int, [_handle, POINTER(c_char_p), c_size_t]),
    "sk_tls_settings_set_session_resumption": (c_int, [_handle, c_int]),
    "sk_tls_settings_set_handshake_timeout": (c_int, [_handle, c_double]),
    "sk_tls_settings_set_key_log_file": (c_int, [_handle, c_char_p]),
    "sk_tls_settings_set_manual_trust_evaluation": (c_int, [_handle, c_int]),
    "sk_tls_settings_set_server_name_settings": (c_int, [_handle, c_char_p, _handle]),
    "sk_tls_settings_check": (c_int, [_handle, _error]),
    # TLS on sockets
    "sk_socket_start_tls": (c_int, [_handle, _handle, _error]),
    "sk_socket_answer_trust": (c_int, [_handle, c_uint64, c_int]),
    "sk_socket_is_secure": (c_int, [_handle]),
    "sk_socket_get_tls_info": (c_int, [_handle, POINTER(TLSInfo)]),
    "sk_socket_copy_peer_certificate": (c_int, [_handle, c_int, c_void_p, POINTER(c_size_t)]),
    "sk_socket_copy_ocsp_response": (c_int, [_handle, c_void_p, POINTER(c_size_t)]),
    "sk_certificate_get_info": (c_int, [c_void_p, c_size_t, POINTER(CertificateInfo), _error]),
    "sk_certificate_to_pem": (c_int, [c_void_p, c_size_t, c_char_p, POINTER(c_size_t)]),
    # Utilities
    "sk_lookup_host_addresses": (c_int, [c_char_p, c_uint16, POINTER(Address), c_size_t, _error]),
    "sk_lookup_host": (c_int, [c_char_p, c_uint16, c_void_p, c_size_t, POINTER(c_size_t), _error]),
    "sk_address_get_host": (c_int, [c_void_p, c_uint32, c_char_p, c_size_t]),
    "sk_address_get_port": (c_int, [c_void_p, c_uint32, POINTER(c_uint16)]),
    "sk_address_is_ipv4": (c_int, [c_void_p, c_uint32]),
    "sk_address_is_ipv6": (c_int, [c_void_p, c_uint32]),
}


def created(handle: c_void_p) -> int:
    """The handle a successful sk_*_create wrote: never NULL (a NULL one would be a bug in
    the library, not an error to handle)."""
    value = handle.value
    if value is None:  # pragma: no cover
        raise RuntimeError("SocketKit reported success and gave a NULL handle")
    return value


@overload
def c_string(value: None, what: str, *, path: bool = False, error: Optional[type] = None) -> None: ...
@overload
def c_string(value: Union[str, bytes, "os.PathLike[str]", "os.PathLike[bytes]"], what: str, *, path: bool = False,
             error: Optional[type] = None) -> bytes: ...
@overload
def c_string(value: Any, what: str, *, path: bool = False, error: Optional[type] = None) -> Optional[bytes]: ...


def c_string(value: Any, what: str, *, path: bool = False, error: Optional[type] = None) -> Optional[bytes]:
    """`value` as the bytes of a C string argument (None stays None): a str as UTF-8 (with
    ``path``, any str, bytes or path-like object as :func:`os.fsencode` makes it), bytes
    as they are. Text holding a NUL character is refused with `error` (default
    :class:`BadParamError`; both are ValueErrors, as Python's own "embedded null character")
    before ctypes passes it: C would see only the text before the NUL, so
    "localhost\\0.evil.test" would be resolved, verified and sent as "localhost"."""
    if value is None:
        return None
    if path:
        data = os.fsencode(value)
    else:
        data = value.encode() if isinstance(value, str) else bytes(value)
    if b"\0" in data:
        from .errors import BadParamError

        raise (error or BadParamError)(f"{what} contains an embedded null character")
    return data


#: Functions of the header the loaded library does not export (a library built before
#: they were added): calling one raises OtherError saying so, and the rest still works.
MISSING: List[str] = []


def _missing(library: ctypes.CDLL, name: str) -> Callable[..., int]:
    def unavailable(*arguments: object) -> int:
        from .errors import OtherError

        raise OtherError(f"{library._name} does not export {name}: it is older than this binding (rebuild it)")

    unavailable.__name__ = name
    return unavailable


def _bind(library: ctypes.CDLL) -> ctypes.CDLL:
    for name, (result, arguments) in PROTOTYPES.items():
        try:
            function = getattr(library, name)
        except AttributeError:
            MISSING.append(name)
            setattr(library, name, _missing(library, name))
            continue
        function.restype = result
        function.argtypes = arguments
    return library


#: The loaded library, every prototype declared. ctypes.CDLL releases the GIL during each
#: call, which SocketKit needs: a call may wait for a callback running on another thread.
lib = _bind(load_library(EXPECTED_VERSION_NUMBER))
