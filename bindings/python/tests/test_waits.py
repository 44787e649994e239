"""Calls that wait for their effect: made from delegate methods they never deadlock (issue
27.4)."""
import socket
import subprocess
import sys
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


@pytest.mark.parametrize("kind", ["loop", "serial", "host"])
def test_waiting_calls_from_delegate_methods_return_with_their_effect(kind):
    """UDP binds made from a UDP delegate method, on each kind of queue, against the calling
    socket, a socket on its loop and one on another loop: each returns with its effect."""
    queue = {"loop": None, "serial": socketkit.SerialQueue(), "host": socketkit.HostQueue()}[kind]
    here = socketkit.LoopGroup(1)
    there = socketkit.LoopGroup(1)
    targets = {"same loop": here, "other loop": there}
    udp = {name: socketkit.UdpSocket(loop_group=group) for name, group in targets.items()}
    seen = {}
    done = threading.Event()

    class Delegate:
        def udp_socket_did_receive(self, sock, data, address, context):
            if done.is_set():
                return
            sock.close()
            seen["same socket"] = sock.is_closed
            for name in targets:
                udp[name].bind_to_port(0, "127.0.0.1")
                seen[name + " bound"] = udp[name].local_port != 0
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
    assert seen == {"same socket": True, "same loop bound": True, "other loop bound": True}
    sender.close()
    for sock in [source, *udp.values()]:
        sock.release()
    here.close()
    there.close()
