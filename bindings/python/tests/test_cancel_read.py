# SPDX-License-Identifier: MIT
"""Socket.cancel_read and Socket.unread: a read can be withdrawn, and bytes given back,
without losing or reordering a byte (what socketkit.aio's cancellable reads stand on).
Peers: Python's socket module, and Python's ssl module for TLS."""
import select
import ssl
import threading

import pytest

import socketkit
from conftest import WAIT, Recorder, StdlibTLSServer


def test_a_withdrawn_read_gives_its_bytes_to_the_next_read(raw_peer):
    pair = raw_peer()
    pair.socket.read_to_length(10, tag=1)
    pair.peer.sendall(b"12345")
    pair.recorder.expect("read_partial")
    pair.socket.cancel_read(1)
    assert pair.recorder.expect("cancel_read") == [("cancel_read", 1, 5)]
    pair.socket.read_to_data(socketkit.LF, tag=2)
    pair.peer.sendall(b"67\n")
    assert pair.recorder.expect("read") == [("read", b"1234567\n", 2)]


def test_a_read_that_had_completed_is_reported_before_the_answer(raw_peer):
    pair = raw_peer()
    pair.socket.read(tag=1)
    pair.peer.sendall(b"done")
    pair.recorder.expect("read")
    pair.socket.cancel_read(1)
    pair.recorder.expect("cancel_read")
    relevant = [event for event in pair.recorder.events if event[0] in ("read", "cancel_read")]
    assert relevant == [("read", b"done", 1), ("cancel_read", 1, 0)]


def test_bytes_given_back_in_did_read_come_before_what_followed(raw_peer):
    pair = raw_peer()

    def on_read(sock, data, tag):
        if tag == 0:
            sock.read_to_data(socketkit.LF, tag=1)
        elif tag == 1:
            sock.unread(b"XY")
            sock.read_to_length(5, tag=2)

    pair.recorder.on_read = on_read
    pair.peer.sendall(b"a\nbb\ncc\n")
    pair.socket.read_to_data(socketkit.LF, tag=0)
    reads = pair.recorder.expect("read", 3)
    assert [read[1] for read in reads] == [b"a\n", b"bb\n", b"XYcc\n"]


def test_the_answer_arrives_as_a_record_on_a_host_queue(raw_peer):
    host = socketkit.HostQueue()
    pair = raw_peer()
    pair.socket.queue = host
    pair.socket.unread(b"ab")
    pair.socket.read_to_length(4, tag=5)
    pair.socket.cancel_read(5)
    while not pair.recorder.wait_for(lambda events: any(e[0] == "cancel_read" for e in events), timeout=0):
        assert select.select([host.fileno()], [], [], WAIT)[0], f"nothing arrived; have {pair.recorder.events}"
        host.drain()
    assert pair.recorder.expect("cancel_read") == [("cancel_read", 5, 2)]
    host.close()


def test_bad_input_is_refused(raw_peer):
    pair = raw_peer()
    with pytest.raises(socketkit.BadParamError):
        pair.socket.unread(b"")
    idle = socketkit.Socket(Recorder())
    with pytest.raises(socketkit.BadConfigError):
        idle.cancel_read(1)
    with pytest.raises(socketkit.BadConfigError):
        idle.unread(b"x")
    idle.close()


def test_under_tls_a_withdrawn_reads_plaintext_goes_back(certs):
    """Against Python's ssl module: the plaintext a withdrawn read had gathered is the next
    read's, over TLS as in the clear."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(certs.path("server-chain.pem"), certs.path("server.key"))
    go_on = threading.Event()

    def handler(tls):
        tls.sendall(b"12345")
        assert go_on.wait(WAIT)
        tls.sendall(b"67\n")
        tls.recv(1)  # until the client closes

    server = StdlibTLSServer(context, handler)
    recorder = Recorder()
    client = socketkit.Socket(recorder)
    try:
        client.connect_to_host("127.0.0.1", server.port, timeout=10)
        client.start_tls(certs.client(peer_name="localhost"))
        client.read_to_length(10, tag=1)
        recorder.expect("read_partial")
        client.cancel_read(1)
        assert recorder.expect("cancel_read") == [("cancel_read", 1, 5)]
        client.read_to_data(socketkit.LF, tag=2)
        go_on.set()
        assert recorder.expect("read") == [("read", b"1234567\n", 2)]
    finally:
        go_on.set()
        client.close()
        server.close()
