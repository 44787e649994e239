# SPDX-License-Identifier: MIT
"""Delegates: typing.Protocol classes name every delegate method with its signature; a
delegate deriving from one has only the methods it defines wired (the protocol's own stand
for "absent"); and a method named like a delegate method that is not one (a misspelling,
which SocketKit would never call) is refused when the delegate is set, naming the closest
real one."""
import inspect
import threading

import pytest

import socketkit
from socketkit import _dispatch, _ffi

from conftest import WAIT


def test_the_protocols_name_exactly_the_delegate_methods_the_binding_dispatches():
    def methods(protocol):
        return {name for name, value in vars(protocol).items() if callable(value) and not name.startswith("_")}

    assert methods(socketkit.SocketDelegate) == set(_dispatch._SOCKET_MEMBERS)
    assert methods(socketkit.UdpSocketDelegate) == set(_dispatch._UDP_SOCKET_MEMBERS)
    for protocol in (socketkit.SocketDelegate, socketkit.UdpSocketDelegate):
        for name in methods(protocol):
            parameters = list(inspect.signature(getattr(protocol, name)).parameters)
            assert parameters[:2] == ["self", "listener" if "accept" in name or "new_loop" in name else "sock"], name


@pytest.mark.parametrize("make, name, suggestion", [
    (socketkit.Socket, "socket_did_read_data", "socket_did_read"),
    (socketkit.Socket, "socket_did_conect", "socket_did_connect"),
    (socketkit.Socket, "socket_did_disconect", "socket_did_disconnect"),
    (socketkit.UdpSocket, "udp_socket_did_recieve", "udp_socket_did_receive"),
    (socketkit.UdpSocket, "udp_socket_did_sent", "udp_socket_did_send"),
])
def test_a_misspelt_delegate_method_is_refused_naming_the_closest_one(make, name, suggestion):
    delegate_class = type("Misspelt", (), {name: lambda self, *arguments: None})
    with pytest.raises(TypeError) as raised:
        make(delegate_class())
    assert f"Misspelt.{name}" in str(raised.value) and repr(suggestion) in str(raised.value)
    # Setting it on an existing socket is refused the same way, and changes nothing.
    sock = make(None)
    try:
        with pytest.raises(TypeError):
            sock.delegate = delegate_class()
        assert sock.delegate is None
    finally:
        sock.close()


def test_a_method_set_on_the_instance_is_checked_too_and_other_names_are_left_alone():
    class Delegate:
        socket_count = 3  # not callable: not a delegate method, not a misspelling
        udp_socket_did_recieve = None  # checked only against UdpSocket's names

        def socket_did_read(self, sock, data, tag):
            pass

        def helper_socket_did(self):
            pass

    delegate = Delegate()
    socketkit.Socket(delegate).close()  # the UDP-looking name is no Socket method name
    delegate.socket_did_writ = lambda sock, tag: None
    with pytest.raises(TypeError, match="socket_did_write"):
        socketkit.Socket(delegate)
    other = Delegate()  # the class was looked at once; this instance has nothing extra
    socketkit.Socket(other).close()


def test_a_protocol_subclass_wires_only_what_it_defines_and_runs():
    got = []
    done = threading.Event()

    class Client(socketkit.SocketDelegate):
        def socket_did_connect(self, sock: socketkit.Socket, host: str, port: int) -> None:
            sock.write(b"ping\n")
            sock.read_to_data(socketkit.LF)

        def socket_did_read(self, sock: socketkit.Socket, data: socketkit.ReadData, tag: int) -> None:
            got.append(bytes(data))
            done.set()

    pointer, _ = _dispatch.socket_delegate_struct(Client())
    struct_ = pointer._obj
    wired = {name for name, _ in _ffi.SocketDelegate._fields_ if getattr(struct_, name)}
    # did_read and did_disconnect are always wired (the binding's own bookkeeping).
    assert wired == {"did_connect", "did_read", "did_disconnect"}
    class Nothing(socketkit.UdpSocketDelegate):
        pass

    udp_pointer, _ = _dispatch.udp_delegate_struct(Nothing())
    assert {name for name, _ in _ffi.UdpSocketDelegate._fields_ if getattr(udp_pointer._obj, name)} == {"did_receive"}

    import socket
    with socket.create_server(("127.0.0.1", 0)) as listener:
        listener.settimeout(WAIT)
        sock = socketkit.Socket(Client())
        sock.connect_to_host("127.0.0.1", listener.getsockname()[1], timeout=5)
        peer, _ = listener.accept()
        with peer:
            peer.settimeout(WAIT)
            assert peer.recv(5) == b"ping\n"
            peer.sendall(b"pong\n")
            assert done.wait(WAIT)
        sock.close()
    assert got == [b"pong\n"]
