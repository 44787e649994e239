# SPDX-License-Identifier: MIT
"""Unix-domain extras: Linux abstract names ("\\0name", as the socket module writes them),
descriptors passed with the bytes (socket.send_fds / recv_fds on the other side), and the
peer's credentials."""
import os
import socket
import uuid

import pytest

import socketkit
from conftest import WAIT, Recorder


def unique_name() -> str:
    return f"\0socketkit-py-{os.getpid()}-{uuid.uuid4().hex[:12]}"


def python_unix_listener(address):
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(address)
    listener.listen(4)
    listener.settimeout(WAIT)
    return listener


def test_abstract_names_both_ways_with_python_peers():
    name = unique_name()
    recorder = Recorder()
    listener = socketkit.Socket(recorder)
    try:
        listener.accept_on_unix_path(name)
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
            client.settimeout(WAIT)
            client.connect(name)
            client.sendall(b"abstract")
            server = recorder.expect("accept")[0][1]
            server.read_to_length(8, tag=1)
            assert recorder.expect_bytes(8) == b"abstract"
        other = unique_name()
        with python_unix_listener(other) as python_listener:
            client_recorder = Recorder()
            client = socketkit.Socket(client_recorder)
            try:
                client.connect_to_unix_path(other.encode(), timeout=WAIT)  # bytes work too
                connection, _ = python_listener.accept()
                with connection:
                    assert client_recorder.expect("connect")[0][1] == "@" + other[1:]
                    assert client.connected_unix_path == "@" + other[1:]
            finally:
                client.close()
        with pytest.raises(socketkit.BadParamError):
            socketkit.Socket(Recorder()).connect_to_unix_path("\0" + "x" * 108)
    finally:
        listener.close()


def test_descriptors_pass_to_and_from_python(tmp_path):
    path = str(tmp_path / "fds.sock")
    with python_unix_listener(path) as python_listener:
        recorder = Recorder()
        sock = socketkit.Socket(recorder)
        sock.receives_descriptors = True
        read_end, write_end = os.pipe()
        try:
            sock.connect_to_unix_path(path, timeout=WAIT)
            peer, _ = python_listener.accept()
            recorder.expect("connect")
            with peer:
                # SocketKit to Python: the descriptor rides with the byte.
                sock.write_with_descriptors(b"x", [write_end], tag=1)
                data, fds, _, _ = socket.recv_fds(peer, 16, 4)
                assert data == b"x" and len(fds) == 1
                os.write(fds[0], b"via python")
                os.close(fds[0])
                assert os.read(read_end, 64) == b"via python"
                # Python to SocketKit.
                socket.send_fds(peer, [b"hello"], [write_end])
                sock.read_to_length(5, tag=2)
                assert recorder.expect_bytes(5) == b"hello"
                received = sock.take_received_descriptors()
                assert len(received) == 1
                os.write(received[0], b"via socketkit")
                os.close(received[0])
                assert os.read(read_end, 64) == b"via socketkit"
                assert sock.take_received_descriptors() == []
                # Our own descriptor stayed open.
                os.write(write_end, b"mine")
                assert os.read(read_end, 64) == b"mine"
        finally:
            sock.close()
            os.close(read_end)
            os.close(write_end)


def test_peer_credentials_and_bad_input(tmp_path, raw_peer):
    path = str(tmp_path / "credentials.sock")
    with python_unix_listener(path) as python_listener:
        recorder = Recorder()
        sock = socketkit.Socket(recorder)
        try:
            sock.connect_to_unix_path(path, timeout=WAIT)
            peer, _ = python_listener.accept()
            recorder.expect("connect")
            with peer:
                assert sock.peer_credentials() == socketkit.PeerCredentials(os.getpid(), os.getuid(), os.getgid())
                with pytest.raises(socketkit.BadParamError):
                    sock.write_with_descriptors(b"x", [])
                with pytest.raises(socketkit.BadParamError):
                    sock.write_with_descriptors(b"x", [-1])
                with pytest.raises(socketkit.BadParamError):
                    sock.write_with_descriptors(b"", [0])
        finally:
            sock.close()
    tcp = raw_peer()
    with pytest.raises(socketkit.BadConfigError):
        tcp.socket.peer_credentials()
    with pytest.raises(socketkit.BadConfigError):
        tcp.socket.write_with_descriptors(b"x", [0])
