# SPDX-License-Identifier: MIT
"""Socket.user_timeout, Socket.fast_open and Socket.set_socket_option (options set before
bind, connect and listen), against peers made with Python's socket module."""
import errno
import socket
import threading

import pytest

import socketkit
from conftest import WAIT, Recorder, descriptor_options

TCP_FASTOPEN_CONNECT = getattr(socket, "TCP_FASTOPEN_CONNECT", 30)


def test_user_timeout_fast_open_and_an_option_reach_the_connect(raw_peer):
    def configure(sock):
        sock.user_timeout = 1.5
        sock.fast_open = True
        sock.set_socket_option(socket.IPPROTO_TCP, socket.TCP_MAXSEG, 1000)

    pair = raw_peer(configure=configure)
    assert pair.socket.user_timeout == 1.5 and pair.socket.fast_open
    timeout, fast_open, mss = descriptor_options(
        pair.socket,
        ("primary", socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT),
        ("primary", socket.IPPROTO_TCP, TCP_FASTOPEN_CONNECT),
        ("primary", socket.IPPROTO_TCP, socket.TCP_MAXSEG),
    )
    assert (timeout, fast_open) == (1500, 1)
    assert 0 < mss <= 1000, mss  # set before the connect: the SYN announced it
    assert 0 < pair.peer.getsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG) <= 1000
    pair.socket.user_timeout = 0  # at once on a connected socket
    assert descriptor_options(pair.socket, ("primary", socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT)) == [0]
    pair.socket.write(b"first", tag=1)
    assert pair.receive_exactly(5) == b"first"


def test_bad_values_raise():
    sock = socketkit.Socket(Recorder())
    try:
        for bad in (-1, float("nan"), float("inf")):
            with pytest.raises(socketkit.BadParamError):
                sock.user_timeout = bad
        with pytest.raises(socketkit.BadParamError):
            sock.set_socket_option(socket.SOL_SOCKET, socket.SO_MARK, b"")
        with pytest.raises(socketkit.BadParamError):
            sock.set_socket_option(socket.SOL_SOCKET, socket.SO_MARK, bytes(1025))
        with pytest.raises(socketkit.BadParamError):
            sock.set_socket_option(socket.SOL_SOCKET, socket.SO_MARK, 1 << 40)
    finally:
        sock.close()


def test_options_before_listen_and_an_option_the_kernel_refuses():
    recorder = Recorder()
    listener = socketkit.Socket(recorder)
    try:
        listener.set_socket_option(socket.IPPROTO_TCP, 9999, 1)
        with pytest.raises(socketkit.SystemCallError) as raised:
            listener.accept_on_interface("127.0.0.1", 0)
        assert raised.value.errno == errno.ENOPROTOOPT
        assert listener.is_disconnected
        listener.clear_socket_options()
        listener.fast_open = True
        listener.set_socket_option(socket.IPPROTO_TCP, socket.TCP_MAXSEG, 800)
        listener.accept_on_interface("127.0.0.1", 0)
        assert descriptor_options(listener, ("ipv4", socket.IPPROTO_TCP, socket.TCP_FASTOPEN))[0] > 0
        with socket.create_connection(("127.0.0.1", listener.local_port), timeout=WAIT) as client:
            assert 0 < client.getsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG) <= 800
    finally:
        listener.close()


def test_a_refused_option_fails_the_connect_through_the_delegate():
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(4)
        recorder = Recorder()
        client = socketkit.Socket(recorder)
        try:
            client.set_socket_option(socket.IPPROTO_TCP, 9999, 1)
            client.connect_to_host("127.0.0.1", server.getsockname()[1], timeout=WAIT)
            error = recorder.disconnect_error()
            assert isinstance(error, socketkit.SystemCallError) and error.errno == errno.ENOPROTOOPT, error
        finally:
            client.close()
