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


@pytest.mark.parametrize("kind", ["loop", "serial", "host"])
def test_waiting_calls_from_delegate_methods_return_with_their_effect(kind):
    """UDP binds and listeners' disconnects made from a UDP delegate method, on each kind of
    queue, against sockets on its loop and on another loop: each returns with its effect."""
    queue = {"loop": None, "serial": socketkit.SerialQueue(), "host": socketkit.HostQueue()}[kind]
    here = socketkit.LoopGroup(1)
    there = socketkit.LoopGroup(1)
    targets = {"same loop": here, "other loop": there}
    udp = {name: socketkit.UdpSocket(loop_group=group) for name, group in targets.items()}
    listeners = {name: socketkit.Socket(object(), loop_group=group) for name, group in targets.items()}
    for listener in listeners.values():
        listener.accept_on_interface("127.0.0.1", 0)
    ports = {name: listener.local_port for name, listener in listeners.items()}
    seen = {}
    done = threading.Event()

    class Delegate:
        def udp_socket_did_receive(self, sock, data, address, context):
            if done.is_set():
                return
            sock.disconnect()
            seen["same socket"] = sock.is_closed
            for name in targets:
                udp[name].bind_to_port(0, "127.0.0.1")
                seen[name + " bound"] = udp[name].local_port != 0
                listeners[name].disconnect()
                seen[name + " closed"] = _port_is_free(ports[name])
            done.set()

    source = socketkit.UdpSocket(Delegate(), queue=queue, loop_group=here)
    source.bind_to_port(0, "127.0.0.1")
    source.begin_receiving()
    sender = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sender.sendto(b"d", ("127.0.0.1", source.local_port))
    if kind == "host":
        from conftest import pump
        pump(queue, done.is_set)
    assert done.wait(20)
    assert seen == {"same socket": True, "same loop bound": True, "same loop closed": True,
                    "other loop bound": True, "other loop closed": True}
    sender.close()
    for sock in [source, *udp.values()]:
        sock.release()
    for listener in listeners.values():
        listener.close()
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
