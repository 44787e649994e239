# SPDX-License-Identifier: MIT
"""Socket.accept_on_fds (asyncio's create_server(sock=)) and socketkit.socket_activation_fds
(systemd's sd_listen_fds), with listeners made by Python's socket module."""
import os
import socket
import subprocess
import sys
import textwrap

import pytest

import socketkit
from conftest import WAIT, Recorder


def test_a_python_listener_and_a_bound_socket_are_adopted():
    recorder = Recorder()
    listener = socketkit.Socket(recorder)
    python_listener = socket.create_server(("127.0.0.1", 0))
    bound = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    bound.bind(("::1", 0))
    ports = (python_listener.getsockname()[1], bound.getsockname()[1])
    try:
        listener.accept_on_fds([python_listener, bound.fileno()])
        assert python_listener.fileno() == -1  # detached: the Socket owns it now
        assert listener.is_accepting and listener.local_port == ports[0]
        for host, port in (("127.0.0.1", ports[0]), ("::1", ports[1])):
            with socket.create_connection((host, port), timeout=WAIT) as client:
                client.sendall(b"hi")
                server = recorder.expect("accept", count=1 if host == "127.0.0.1" else 2)[-1][1]
                server.read_to_length(2, tag=1)
        assert recorder.wait_for(lambda events: sum(1 for e in events if e[0] == "read") == 2)
    finally:
        listener.close()
        bound.detach()
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", ports[0]), timeout=WAIT)


def test_bad_descriptors_raise_and_stay_the_callers():
    listener = socketkit.Socket(Recorder())
    unbound = socket.socket()
    datagram = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    datagram.bind(("127.0.0.1", 0))
    try:
        for bad in ([unbound], [datagram], [], [-1]):
            with pytest.raises(socketkit.BadParamError):
                listener.accept_on_fds(bad)
        assert unbound.fileno() >= 0 and datagram.fileno() >= 0
        read_end, write_end = os.pipe()
        with pytest.raises(socketkit.SystemCallError):
            listener.accept_on_fds([read_end])
        os.close(read_end)
        os.close(write_end)
    finally:
        listener.close()
        unbound.close()
        datagram.close()


SERVICE = textwrap.dedent("""
    import socketkit, sys, threading
    fds = socketkit.socket_activation_fds()
    done = threading.Event()
    class Echo:
        def socket_did_accept(self, listener, sock):
            sock.read_to_data(b"\\n", tag=0)
            self.kept = sock
        def socket_did_read(self, sock, data, tag):
            sock.write(data.upper())
            sock.disconnect_after_writing()
        def socket_did_disconnect(self, sock, error):
            if sock is getattr(self, "kept", None):
                done.set()
    listener = socketkit.Socket(Echo())
    listener.accept_on_fds(fds)
    print(len(fds), "LISTEN_FDS" in __import__("os").environ, flush=True)
    done.wait(20)
    listener.close()
""")


def test_socket_activation_in_a_service_started_as_systemd_starts_it():
    """A child process gets a listening socket as descriptor 3 with LISTEN_PID and
    LISTEN_FDS, as systemd passes them, and serves on it."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    environment = dict(os.environ, LISTEN_FDS="1")

    # LISTEN_PID must be the child's own id: a small launcher sets it after the fork.
    launcher = "import os, sys; os.environ['LISTEN_PID'] = str(os.getpid()); exec(sys.argv[1])"
    child = subprocess.Popen([sys.executable, "-c", launcher, SERVICE], env=environment, pass_fds=[3],
                             preexec_fn=lambda: os.dup2(listener.fileno(), 3), stdout=subprocess.PIPE, text=True,
                             cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    try:
        listener.close()
        assert child.stdout.readline().split() == ["1", "False"]
        with socket.create_connection(("127.0.0.1", port), timeout=WAIT) as client:
            client.sendall(b"activated\n")
            assert client.makefile("rb").readline() == b"ACTIVATED\n"
        assert child.wait(timeout=WAIT) == 0
    finally:
        child.kill()
        child.wait()
        child.stdout.close()
