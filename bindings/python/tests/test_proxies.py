# SPDX-License-Identifier: MIT
"""Socket.proxy and aio.open_connection(proxy=...): SOCKS5 and HTTP CONNECT, against
Debian's microsocks and tinyproxy (which nobody here wrote) and scripted proxies made with
Python's socket module for the failures."""
import asyncio
import os
import select
import socket
import ssl
import subprocess
import time

import pytest

import socketkit
from socketkit import aio

from conftest import WAIT, Recorder, StdlibTLSServer

MICROSOCKS = "/usr/bin/microsocks"
TINYPROXY = "/usr/bin/tinyproxy"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class ExternalProxy:
    """A proxy process on a loopback port found free; ready once it accepts (bounded)."""

    def __init__(self, command, port, cleanup=None):
        self.port = port
        self.cleanup = cleanup
        self.process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                return
            except OSError:
                assert self.process.poll() is None, f"{command[0]} exited"
                assert time.monotonic() < deadline, f"{command[0]} did not listen on {port}"
                select_pause()

    def stop(self):
        self.process.terminate()
        self.process.wait(WAIT)
        if self.cleanup:
            self.cleanup()


def select_pause():
    """Waits a little for the proxy to start listening (nothing else to wait on)."""
    select.select([], [], [], 0.02)


@pytest.fixture
def microsocks():
    if not os.access(MICROSOCKS, os.X_OK):
        pytest.skip("microsocks is not installed (make test-tools)")
    started = []

    def start(*arguments):
        port = free_port()
        proxy = ExternalProxy([MICROSOCKS, "-i", "127.0.0.1", "-p", str(port), *arguments], port)
        started.append(proxy)
        return proxy

    yield start
    for proxy in started:
        proxy.stop()


@pytest.fixture
def tinyproxy(tmp_path):
    if not os.access(TINYPROXY, os.X_OK):
        pytest.skip("tinyproxy is not installed (make test-tools)")
    port = free_port()
    configuration = tmp_path / "tinyproxy.conf"
    configuration.write_text(f"Port {port}\nListen 127.0.0.1\nTimeout 30\nMaxClients 20\nAllow 127.0.0.1\nLogLevel Error\n")
    proxy = ExternalProxy([TINYPROXY, "-d", "-c", str(configuration)], port)
    yield proxy
    proxy.stop()


def exchange(sock, recorder, target, listener):
    """Connects through the socket's proxy to `target`, a write and a read queued before the
    proxy answers, and checks they cross with the listener's connection."""
    port = listener.getsockname()[1]
    sock.connect_to_host(target, port, timeout=WAIT)
    sock.write(b"ping", tag=1)
    sock.read_to_length(4, tag=2)
    listener.settimeout(WAIT)
    peer, _ = listener.accept()
    with peer:
        peer.settimeout(WAIT)
        assert peer.recv(4) == b"ping"
        peer.sendall(b"pong")
        assert recorder.expect_bytes(4) == b"pong"
        assert recorder.expect("connect")[0] == ("connect", target, port)
        assert sock.connected_host == target
        assert sock.connected_port == port
        assert sock.connected_address[1] == sock.proxy.port  # the TCP peer is the proxy
        sock.disconnect()


def test_socks5_through_microsocks_with_credentials(microsocks):
    proxy = microsocks("-u", "alice", "-P", "s3cret")
    with socket.create_server(("127.0.0.1", 0)) as listener:
        recorder = Recorder()
        sock = socketkit.Socket(recorder)
        assert sock.proxy is None
        sock.proxy = f"socks5://alice:s3cret@127.0.0.1:{proxy.port}"
        assert sock.proxy == socketkit.Proxy("socks5", "127.0.0.1", proxy.port)
        exchange(sock, recorder, "localhost", listener)
        sock.close()

        recorder = Recorder()
        sock = socketkit.Socket(recorder)
        sock.proxy = socketkit.Proxy("socks5", "127.0.0.1", proxy.port, "alice", "wrong")
        sock.connect_to_host("localhost", listener.getsockname()[1], timeout=WAIT)
        error = recorder.disconnect_error()
        assert isinstance(error, socketkit.ProxyAuthenticationError), error
        assert isinstance(error, socketkit.ProxyError)
        assert recorder.count("connect") == 0
        sock.close()


def test_http_connect_through_tinyproxy(tinyproxy):
    with socket.create_server(("127.0.0.1", 0)) as listener:
        for target in ("127.0.0.1", "localhost"):
            recorder = Recorder()
            sock = socketkit.Socket(recorder)
            sock.proxy = socketkit.Proxy("http-connect", "127.0.0.1", tinyproxy.port)
            exchange(sock, recorder, target, listener)
            sock.close()


@pytest.mark.parametrize("kind", ["socks5", "http"])
def test_open_connection_through_a_proxy_verifies_the_targets_name(certs, request, kind):
    """aio.open_connection(proxy=..., ssl=...): a Python ssl server behind the proxy; the
    client verifies "localhost", the target's name (the proxy is 127.0.0.1)."""
    if kind == "socks5":
        port = request.getfixturevalue("microsocks")().port
    else:
        port = request.getfixturevalue("tinyproxy").port
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(certs.path("server-chain.pem"), certs.path("server.key"))
    server = StdlibTLSServer(context, handler=lambda tls: tls.sendall(tls.recv(5).upper()))

    async def main():
        reader, writer = await aio.open_connection("localhost", server.port, ssl=certs.client(),
                                                   proxy=f"{kind}://127.0.0.1:{port}", timeout=WAIT)
        assert writer.get_extra_info("peername")[1] == port  # through the proxy
        writer.write(b"hello")
        await writer.drain()
        answer = await reader.readexactly(5)
        writer.close()
        await writer.wait_closed()
        return answer

    try:
        assert asyncio.run(main()) == b"HELLO"
        server.join()
        assert not server.errors
    finally:
        server.close()


# Scripted proxies.

@pytest.fixture
def scripted():
    """A listener standing in for a proxy, and a socket connecting through it to
    example.test:443; returns (socket, recorder, the proxy's end)."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(WAIT)
    made = []

    def connect(kind, timeout=WAIT, username=None):
        recorder = Recorder()
        sock = socketkit.Socket(recorder)
        sock.proxy = socketkit.Proxy(kind, "127.0.0.1", listener.getsockname()[1], username,
                                     "pw" if username else None)
        sock.connect_to_host("example.test", 443, timeout=timeout)
        peer, _ = listener.accept()
        peer.settimeout(WAIT)
        made.append((sock, peer))
        return sock, recorder, peer

    yield connect
    for sock, peer in made:
        sock.close()
        peer.close()
    listener.close()


def receive_exactly(peer, count):
    data = b""
    while len(data) < count:
        chunk = peer.recv(count - len(data))
        assert chunk
        data += chunk
    return data


def socks_request(peer):
    assert receive_exactly(peer, 3) == b"\x05\x01\x00"
    peer.sendall(b"\x05\x00")
    assert receive_exactly(peer, 5 + 12 + 2) == b"\x05\x01\x00\x03\x0cexample.test\x01\xbb"


@pytest.mark.parametrize("reply,text", [(1, "general SOCKS server failure"), (2, "not allowed by ruleset"),
                                        (3, "network unreachable"), (4, "host unreachable"),
                                        (5, "connection refused"), (6, "TTL expired"),
                                        (7, "command not supported"), (8, "address type not supported")])
def test_each_socks_reply_code_is_a_proxy_error(scripted, reply, text):
    sock, recorder, peer = scripted("socks5")
    socks_request(peer)
    peer.sendall(bytes([5, reply, 0, 1, 0, 0, 0, 0, 0, 0]))
    error = recorder.disconnect_error()
    assert type(error) is socketkit.ProxyError
    assert error.errno == reply
    assert text in str(error) and "example.test:443" in str(error)


def test_socks_authentication_rejected(scripted):
    sock, recorder, peer = scripted("socks5", username="user")
    assert receive_exactly(peer, 4) == b"\x05\x02\x00\x02"
    peer.sendall(b"\x05\x02")
    assert receive_exactly(peer, 9) == b"\x01\x04user\x02pw"
    peer.sendall(b"\x01\x01")
    assert isinstance(recorder.disconnect_error(), socketkit.ProxyAuthenticationError)


@pytest.mark.parametrize("status,kind", [(403, socketkit.ProxyError), (407, socketkit.ProxyAuthenticationError),
                                         (502, socketkit.ProxyError)])
def test_http_statuses_other_than_2xx(scripted, status, kind):
    sock, recorder, peer = scripted("http-connect")
    request = b"CONNECT example.test:443 HTTP/1.1\r\nHost: example.test:443\r\n\r\n"
    assert receive_exactly(peer, len(request)) == request
    peer.sendall(b"HTTP/1.1 %d Nope\r\n\r\n" % status)
    error = recorder.disconnect_error()
    assert type(error) is kind
    assert error.errno == status and f"{status} Nope" in str(error)


def test_a_proxy_closing_mid_handshake(scripted):
    sock, recorder, peer = scripted("socks5")
    receive_exactly(peer, 3)
    peer.sendall(b"\x05")
    peer.close()
    error = recorder.disconnect_error()
    assert type(error) is socketkit.ProxyError
    assert "closed the connection during its handshake" in str(error)


def test_a_silent_proxy_ends_with_the_connect_timeout(scripted):
    sock, recorder, peer = scripted("http-connect", timeout=0.5)
    assert isinstance(recorder.disconnect_error(), socketkit.ConnectTimeoutError)


@pytest.mark.parametrize("kind", ["socks5", "http-connect"])
def test_bytes_right_after_the_proxys_answer_are_the_first_read(scripted, kind):
    sock, recorder, peer = scripted(kind)
    if kind == "socks5":
        socks_request(peer)
        peer.sendall(b"\x05\x00\x00\x01\x7f\x00\x00\x01\x00\x50" + b"220 hello\r\n")
    else:
        receive_exactly(peer, len(b"CONNECT example.test:443 HTTP/1.1\r\nHost: example.test:443\r\n\r\n"))
        peer.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n220 hello\r\n")
    assert recorder.expect("connect")[0] == ("connect", "example.test", 443)
    sock.read_to_data(b"\r\n", tag=1)
    peer.sendall(b"more")
    sock.read_to_length(4, tag=2)
    assert recorder.expect_bytes(15) == b"220 hello\r\nmore"


def test_proxy_arguments_are_checked():
    sock = socketkit.Socket(Recorder())
    assert socketkit.Proxy.from_url("socks5h://a%40b:p%3Aw@proxy.example:1080") == \
        socketkit.Proxy("socks5", "proxy.example", 1080, "a@b", "p:w")
    assert socketkit.Proxy.from_url("http://[::1]:3128") == socketkit.Proxy("http-connect", "::1", 3128)
    for url in ("ftp://proxy:21", "socks5://proxy", "proxy:1080"):
        with pytest.raises(socketkit.BadParamError):
            socketkit.Proxy.from_url(url)
    with pytest.raises(socketkit.BadParamError):
        sock.proxy = socketkit.Proxy("socks4", "127.0.0.1", 1080)
    with pytest.raises(socketkit.BadParamError):
        sock.proxy = socketkit.Proxy("socks5", "127.0.0.1", 1080, "user")  # no password
    with pytest.raises(socketkit.BadParamError):
        sock.proxy = socketkit.Proxy("socks5", "127.0.0.1", 0)
    sock.proxy = socketkit.Proxy("socks5", "127.0.0.1", 1080)
    sock.proxy = None
    assert sock.proxy is None
    sock.close()


def test_open_connection_with_a_refusing_proxy_raises_its_error():
    with socket.create_server(("127.0.0.1", 0)) as listener:
        listener.settimeout(WAIT)

        async def main():
            attempt = asyncio.ensure_future(aio.open_connection(
                "example.test", 443, proxy=f"socks5://127.0.0.1:{listener.getsockname()[1]}", timeout=WAIT))
            loop = asyncio.get_running_loop()
            peer, _ = await loop.run_in_executor(None, listener.accept)
            with peer:
                peer.settimeout(WAIT)
                await loop.run_in_executor(None, socks_request, peer)
                peer.sendall(bytes([5, 2, 0, 1, 0, 0, 0, 0, 0, 0]))
                with pytest.raises(socketkit.ProxyError) as raised:
                    await attempt
            return raised.value

        assert asyncio.run(main()).errno == 2
