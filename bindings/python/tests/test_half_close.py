# SPDX-License-Identifier: MIT
"""Socket.close_write_stream (half-close) and Socket.disconnect_with_reset (abortive close),
against peers made with Python's socket and ssl modules."""
import errno
import select
import socket
import ssl

import pytest

import socketkit
from conftest import WAIT, Recorder, StdlibTLSServer, pattern


def test_close_write_stream_sends_fin_after_the_queued_writes_and_keeps_reading(raw_peer):
    pair = raw_peer()
    payload = pattern(1 << 20, seed=4)
    pair.socket.write(payload, tag=1)
    pair.socket.close_write_stream()
    with pytest.raises(socketkit.BadConfigError):
        pair.socket.write(b"late")
    assert pair.receive_all() == payload  # every byte, then the end of our stream
    pair.socket.read_to_length(5, tag=2)
    pair.peer.sendall(b"reply")
    assert pair.recorder.expect_bytes(5) == b"reply"
    assert pair.socket.is_connected
    pair.peer.close()
    assert pair.recorder.disconnect_error() is None  # both sides closed, ours first


def test_under_tls_the_half_close_is_a_close_notify_and_the_answer_still_arrives(certs):
    """Python's ssl server reads to the end of our stream (our close_notify), then answers."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(certs.path("server-chain.pem"), certs.path("server.key"))

    def handler(tls):
        received = b""
        while True:
            chunk = tls.recv(64)
            if not chunk:
                break
            received += chunk
        tls.sendall(received.upper())
        tls.unwrap()
        return received

    server = StdlibTLSServer(context, handler)
    recorder = Recorder()
    client = socketkit.Socket(recorder)
    try:
        client.connect_to_host("127.0.0.1", server.port, timeout=10)
        client.start_tls(certs.client(peer_name="localhost"))
        client.write(b"ping")
        client.close_write_stream()
        client.read_to_length(4, tag=1)
        assert recorder.expect("read") == [("read", b"PING", 1)]
        assert recorder.disconnect_error() is None
        server.join()
        assert server.results == [b"ping"] and not server.errors, server.errors
    finally:
        client.close()
        server.close()


def test_disconnect_with_reset_sends_a_reset(raw_peer):
    pair = raw_peer()
    pair.socket.disconnect_with_reset()
    assert pair.recorder.disconnect_error() is None
    assert select.select([pair.peer], [], [], WAIT)[0]
    with pytest.raises(ConnectionResetError):
        pair.peer.recv(1)
