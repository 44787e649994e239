# SPDX-License-Identifier: MIT
"""Calls that wait for their effect: made from delegate methods they never deadlock (issue
27.4), and a listener's disconnect or close returns with its descriptors closed (27.5)."""
import os
import socket
import subprocess
import sys
import tempfile
import threading

import pytest

import socketkit

# In a subprocess, so that a deadlock fails the test instead of hanging the suite.
_PAUSE_WHILE_THE_LOOP_SETS_THE_DELEGATE = r"""
import socket
import threading
import time

import socketkit

for round in range(10):
    group = socketkit.LoopGroup(1)
    serial_inside = threading.Event()
    loop_inside = threading.Event()
    returned = []

    def spin(seconds):
        until = time.monotonic() + seconds
        while time.monotonic() < until:
            pass

    class UdpDelegate:
        def udp_socket_did_receive(self, sock, data, address, context):
            if serial_inside.is_set():
                return
            serial_inside.set()
            assert loop_inside.wait(20)
            if round % 2:
                spin(0.002)  # the loop thread gets ahead, in every other round
            sock.pause_receiving()  # waits for the loop
            returned.append("pause")

    class TcpDelegate:
        def socket_did_read(self, sock, data, tag):
            loop_inside.set()
            if not round % 2:
                spin(0.002)
            udp.delegate = None  # waits for the UDP callback running on the serial queue
            returned.append("delegate")

    udp = socketkit.UdpSocket(UdpDelegate(), queue=socketkit.SerialQueue(), loop_group=group)
    udp.bind_to_port(0, "127.0.0.1")
    udp.begin_receiving()
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    tcp = socketkit.Socket(TcpDelegate(), queue=None, loop_group=group)
    tcp.connect_to_host("127.0.0.1", listener.getsockname()[1])
    peer, _ = listener.accept()
    tcp.read(tag=1)
    sender = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sender.sendto(b"d", ("127.0.0.1", udp.local_port))
    assert serial_inside.wait(20)
    peer.sendall(b"x")
    deadline = time.monotonic() + 10
    while len(returned) < 2:
        assert time.monotonic() < deadline, "round %d: the two callbacks deadlocked" % round
        time.sleep(0.01)
    tcp.close()
    udp.release()
    group.close()
    for closable in (sender, peer, listener):
        closable.close()
print("ok")
"""


def test_udp_pause_in_a_serial_callback_while_the_loop_sets_its_delegate():
    """A UDP delegate method on a SerialQueue calls pause_receiving() (which waits for the
    loop) while a TCP delegate method on that loop sets the UDP socket's delegate (which
    waits for the running UDP callback): both return, in either order."""
    result = subprocess.run([sys.executable, "-c", _PAUSE_WHILE_THE_LOOP_SETS_THE_DELEGATE],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


def _port_is_free(port: int) -> bool:
    probe = socket.socket()
    probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        probe.bind(("127.0.0.1", port))
        probe.listen(1)
        return True
    except OSError:
        return False
    finally:
        probe.close()


def _refused(call, *arguments):
    """Whether ``call`` raises BadConfigError (what a socket that takes no reads or writes
    does)."""
    try:
        call(*arguments)
    except socketkit.BadConfigError:
        return True
    return False


class _Targets:
    """A socket for every call that waits, on one loop, made beforehand; ``call_all`` makes
    the calls and returns those that did not have their effect."""

    def __init__(self, group, peer_port):
        self.group = group
        self.peer_port = peer_port
        self.udp = socketkit.UdpSocket(loop_group=group)
        self.listener = self.tcp()
        self.listener.accept_on_interface("127.0.0.1", 0)
        self.listener_port = self.listener.local_port
        self.fresh = self.tcp()
        self.connecting = self.tcp()
        self.connected = self.tcp()
        self.connected.connect_to_host("127.0.0.1", peer_port)
        self.draining = self.tcp()
        self.draining.connect_to_host("127.0.0.1", peer_port)
        self.configured = self.tcp()
        self.delegated = self.tcp()
        self.pair = socket.socketpair()
        self.adopted = None

    def tcp(self):
        return socketkit.Socket(object(), loop_group=self.group)

    def call_all(self):
        failed = []
        self.udp.bind_to_port(0, "127.0.0.1")
        if self.udp.local_port == 0:
            failed.append("UDP bind")
        self.listener.disconnect()
        if not _port_is_free(self.listener_port):
            failed.append("disconnect a listener")
        self.fresh.accept_on_interface("127.0.0.1", 0)
        if not self.fresh.is_accepting:
            failed.append("accept")
        self.connecting.connect_to_host("127.0.0.1", self.peer_port)
        self.connecting.read(tag=1)  # taken: the session is published on return
        self.connected.disconnect()
        if not (self.connected.is_disconnected and _refused(self.connected.read)):
            failed.append("disconnect a connection")
        self.draining.disconnect_after_writing()
        if not _refused(self.draining.write, b"x"):
            failed.append("disconnect after writing")
        self.configured.no_delay = False
        if self.configured.no_delay:
            failed.append("a setter")
        replacement = object()
        self.delegated.delegate = replacement
        if self.delegated.delegate is not replacement:
            failed.append("set the delegate")
        self.adopted = socketkit.Socket.from_fd(self.pair[0].detach(), object(), loop_group=self.group)
        if not self.adopted.is_connected:
            failed.append("adopt a descriptor")
        return failed

    def close(self):
        for sock in (self.listener, self.fresh, self.connecting, self.connected, self.draining,
                     self.configured, self.delegated, self.adopted):
            if sock is not None:
                sock.close()
        self.udp.release()
        for end in self.pair:
            end.close()


def _call_itself(sock, peer_port):
    """The waiting calls a TCP socket makes on itself from its own delegate method, one
    after the other; those that did not have their effect."""
    failed = []
    if sock.is_accepting:
        port = sock.local_port
        sock.disconnect()
        if not _port_is_free(port):
            failed.append("disconnect a listener")
    else:
        sock.no_delay = False
        if sock.no_delay:
            failed.append("a setter")
        sock.disconnect_after_writing()
        if not _refused(sock.write, b"x"):
            failed.append("disconnect after writing")
        sock.disconnect()
        if not sock.is_disconnected:
            failed.append("disconnect a connection")
    sock.connect_to_host("127.0.0.1", peer_port)
    sock.read(tag=1)
    sock.disconnect()
    sock.accept_on_interface("127.0.0.1", 0)
    port = sock.local_port
    if _port_is_free(port):
        failed.append("accept")
    sock.disconnect()
    if not _port_is_free(port):
        failed.append("disconnect a listener begun in the delegate method")
    return failed


@pytest.mark.parametrize("source", ["udp", "connection", "listener"])
@pytest.mark.parametrize("kind", ["loop", "serial", "host"])
def test_waiting_calls_from_delegate_methods_return_with_their_effect(kind, source):
    """Every call that waits (UDP bind and close; TCP accept, connect, adoption, the
    disconnects, a setter; the delegate setter), made from a delegate method of a UDP
    socket, a connection and a listener, on each kind of queue, against the calling socket,
    sockets on its loop and sockets on another loop: each returns with its effect."""
    queue = {"loop": None, "serial": socketkit.SerialQueue(), "host": socketkit.HostQueue()}[kind]
    here = socketkit.LoopGroup(1)
    there = socketkit.LoopGroup(1)
    peer = socket.create_server(("127.0.0.1", 0), backlog=64)  # the connects reach it
    peer_port = peer.getsockname()[1]
    targets = {"same loop": _Targets(here, peer_port), "other loop": _Targets(there, peer_port)}
    failed = []
    done = threading.Event()

    def call_all(own):
        if done.is_set():
            return
        failed.extend("same socket: " + name for name in own)
        for place, made in targets.items():
            failed.extend(place + ": " + name for name in made.call_all())
        done.set()

    class Delegate:
        def udp_socket_did_receive(self, sock, data, address, context):
            sock.disconnect()
            call_all([] if sock.is_closed else ["UDP disconnect"])

        def socket_did_read(self, sock, data, tag):
            call_all(_call_itself(sock, peer_port))

        def socket_did_accept(self, listener, sock):
            call_all(_call_itself(listener, peer_port))

    closing = []
    if source == "udp":
        udp_source = socketkit.UdpSocket(Delegate(), queue=queue, loop_group=here)
        udp_source.bind_to_port(0, "127.0.0.1")
        udp_source.begin_receiving()
        sender = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        sender.sendto(b"d", ("127.0.0.1", udp_source.local_port))
        closing = [sender, udp_source.release]
    else:
        tcp_source = socketkit.Socket(Delegate(), queue=queue, loop_group=here)
        if source == "connection":
            listener = socket.create_server(("127.0.0.1", 0))  # the targets' connections wait at the peer
            tcp_source.connect_to_host("127.0.0.1", listener.getsockname()[1])
            tcp_source.read(tag=1)
            client, _ = listener.accept()
            client.sendall(b"x")
            closing = [listener, client, tcp_source]
        else:
            tcp_source.accept_on_interface("127.0.0.1", 0)
            client = socket.create_connection(("127.0.0.1", tcp_source.local_port))
            closing = [client, tcp_source]
    if kind == "host":
        from conftest import pump
        pump(queue, done.is_set)
    assert done.wait(20)
    assert failed == []
    for item in closing:
        item() if callable(item) and not hasattr(item, "close") else item.close()
    for made in targets.values():
        made.close()
    peer.close()
    here.close()
    there.close()


@pytest.mark.parametrize("how", ["disconnect", "close", "abort"])
def test_a_listener_port_is_free_when_disconnect_or_close_returns(how):
    """Listening again on the port right after disconnect(), close() or abort() never finds
    it in use."""
    port = 0
    for _ in range(100):
        listener = socketkit.Socket(object())
        listener.accept_on_interface("localhost", port)
        port = listener.local_port
        getattr(listener, how)()
        again = socketkit.Socket(object())
        again.accept_on_interface("localhost", port)
        again.close()


@pytest.mark.parametrize("how", ["disconnect", "close"])
def test_a_unix_listener_path_is_free_when_disconnect_or_close_returns(how):
    """The same for a Unix-domain path; the new listener stays reachable."""
    path = os.path.join(tempfile.mkdtemp(prefix="sk-py-"), "relisten.sock")
    for _ in range(100):
        old = socketkit.Socket(object())
        old.accept_on_unix_path(path)
        getattr(old, how)()
        assert not os.path.lexists(path)
        new = socketkit.Socket(object())
        new.accept_on_unix_path(path)
        client = socket.socket(socket.AF_UNIX)
        client.connect(path)  # refused or missing if the old listener removed the new file
        client.close()
        new.close()
    os.rmdir(os.path.dirname(path))


def test_a_listener_leaves_a_newer_listeners_file_alone(recorder):
    """A listener removes its socket file only while it is still the one it made."""
    from conftest import Recorder

    path = os.path.join(tempfile.mkdtemp(prefix="sk-py-"), "replaced.sock")
    old_recorder = Recorder()
    old = socketkit.Socket(old_recorder)
    old.accept_on_unix_path(path)
    new = socketkit.Socket(recorder)
    new.accept_on_unix_path(path)  # replaces the old listener's file
    old.disconnect()
    old_recorder.expect("disconnect")  # its close, and removal of its file, are done
    old.close()
    client = socket.socket(socket.AF_UNIX)
    client.connect(path)
    recorder.expect("accept")
    client.close()
    new.close()
    assert not os.path.lexists(path)
    os.rmdir(os.path.dirname(path))


_DISCONNECT_IN_THE_NEW_CONNECTION_HOOK = r"""
import socket
import threading

import socketkit

disconnected = threading.Event()
events = []


class Listener:
    def socket_new_loop_for_connection(self, listener, address):
        listener.disconnect()
        return -1

    def socket_did_accept(self, listener, new_socket):
        events.append("accept")

    def socket_did_disconnect(self, sock, error):
        events.append("disconnect")
        disconnected.set()


group = socketkit.LoopGroup(1)
listener = socketkit.Socket(Listener(), queue=None, loop_group=group)  # callbacks on the loop
listener.accept_on_interface("127.0.0.1", 0)
client = socket.create_connection(("127.0.0.1", listener.local_port))
assert disconnected.wait(10), "the disconnect made in the hook did not finish"
client.settimeout(10)
assert client.recv(1) == b""  # closed unserved
assert events == ["disconnect"], events
client.close()
listener.close()
group.close()
print("ok")
"""


def test_a_listener_disconnected_in_its_new_connection_hook():
    """The new-connection hook may disconnect its listener: the connection asked about is
    closed unserved, and no accept follows the disconnect. In a subprocess: this used to
    hang the listener's loop."""
    result = subprocess.run([sys.executable, "-c", _DISCONNECT_IN_THE_NEW_CONNECTION_HOOK],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"
