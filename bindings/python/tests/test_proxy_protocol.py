# SPDX-License-Identifier: MIT
"""PROXY protocol v1 and v2 on listeners (Socket.proxy_protocol): headers from HAProxy
(`send-proxy`, `send-proxy-v2`, a sender nobody here wrote) and made by hand with Python's
socket module for the cases a real proxy does not produce."""
import asyncio
import ipaddress
import os
import shutil
import socket
import ssl
import struct
import subprocess

import pytest

import socketkit
from conftest import WAIT, Recorder

SIGNATURE = b"\r\n\r\n\x00\r\nQUIT\n"


def v2(command: int, family: int, block: bytes) -> bytes:
    """command 0x21 PROXY / 0x20 LOCAL; family 0x11 TCP4, 0x21 TCP6, 0x31 UNIX."""
    return SIGNATURE + bytes([command, family]) + struct.pack("!H", len(block)) + block


def v2_tcp6(source: str, source_port: int, destination: str, destination_port: int) -> bytes:
    block = (ipaddress.IPv6Address(source).packed + ipaddress.IPv6Address(destination).packed
             + struct.pack("!HH", source_port, destination_port))
    return v2(0x21, 0x21, block)


def listener(recorder: Recorder, mode: socketkit.ProxyProtocol, timeout: float = 5.0) -> socketkit.Socket:
    sock = socketkit.Socket(recorder)
    sock.proxy_protocol = mode
    sock.proxy_header_timeout = timeout
    sock.accept_on_interface("127.0.0.1", 0)
    return sock


def closed_by_the_listener(client: socket.socket) -> bool:
    """An end of stream, or a reset when the refused bytes were still unread."""
    client.settimeout(WAIT)
    try:
        while client.recv(4096):
            pass
        return True
    except ConnectionResetError:
        return True


def test_options_and_their_errors():
    sock = socketkit.Socket(Recorder())
    try:
        assert sock.proxy_protocol is socketkit.ProxyProtocol.NONE
        sock.proxy_protocol = socketkit.ProxyProtocol.V2
        assert sock.proxy_protocol == socketkit.ProxyProtocol.V2
        sock.proxy_protocol = 1
        assert sock.proxy_protocol is socketkit.ProxyProtocol.V1
        with pytest.raises(socketkit.BadParamError):
            sock.proxy_protocol = 7
        assert sock.proxy_header_timeout == 5.0
        for bad in (0.0, -1.0, float("nan"), float("inf"), 86401.0):
            with pytest.raises(socketkit.BadParamError):
                sock.proxy_header_timeout = bad
        sock.proxy_header_timeout = 0.5
        assert sock.proxy_header_timeout == 0.5
        assert sock.proxy_address is None and sock.proxy_protocol_version is None
    finally:
        sock.close()


def test_a_split_v2_ipv6_header_and_the_bytes_after_it(recorder):
    sock = listener(recorder, socketkit.ProxyProtocol.EITHER)
    header = v2_tcp6("2001:db8::10", 50000, "2001:db8::20", 8443)
    try:
        with socket.create_connection(("127.0.0.1", sock.local_port), timeout=WAIT) as first, \
                socket.create_connection(("127.0.0.1", sock.local_port), timeout=WAIT) as health:
            first.sendall(header[:9])
            # A LOCAL header (a health check): accepted with its real addresses, while the
            # first connection still lacks bytes.
            health.sendall(v2(0x20, 0x00, b"") + b"ok")
            local = recorder.expect("accept")[0][1]
            assert local.connected_address == ("127.0.0.1", health.getsockname()[1])
            assert local.proxy_address is None and local.proxy_protocol_version is None
            first.sendall(header[9:30])
            first.sendall(header[30:] + b"request")
            server = recorder.expect("accept", count=2)[1][1]
            assert server.connected_address == ("2001:db8::10", 50000)
            assert server.local_address == ("2001:db8::20", 8443)
            assert server.proxy_address == ("127.0.0.1", first.getsockname()[1])
            assert server.proxy_protocol_version == 2 and server.is_ipv6
            server.read_to_length(7, tag=4)
            assert recorder.wait_for(lambda events: ("read", b"request", 4) in events)
            local.read_to_length(2, tag=5)
            assert recorder.wait_for(lambda events: ("read", b"ok", 5) in events)
    finally:
        sock.close()


@pytest.mark.parametrize("mode, start", [
    (socketkit.ProxyProtocol.EITHER, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"),
    (socketkit.ProxyProtocol.V1, b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2\n"),  # LF without CR
    (socketkit.ProxyProtocol.V1, b"PROXY TCP4 " + b"9" * 110 + b"\r\n"),  # over 107 bytes
    (socketkit.ProxyProtocol.V1, b"PROXY TCP4 1.2.3.4 5.6.7.8 65536 2\r\n"),
    (socketkit.ProxyProtocol.V1, b"PROXY UDP4 1.2.3.4 5.6.7.8 1 2\r\n"),
    (socketkit.ProxyProtocol.V2, b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2\r\n"),  # v1 where v2 is expected
    (socketkit.ProxyProtocol.V2, SIGNATURE + b"\x22\x11\x00\x0c" + bytes(12)),  # command 2
    (socketkit.ProxyProtocol.V2, SIGNATURE + b"\x21\x21\x00\x0c" + bytes(12)),  # IPv6 block too short
    (socketkit.ProxyProtocol.V2, SIGNATURE + b"\x21\x11\x10\x01"),  # 4,097 bytes announced
    (socketkit.ProxyProtocol.V2, v2(0x21, 0x11, bytes(12) + b"\x03\x00\x04\x00\x00\x00\x00")),  # wrong CRC32C
    (socketkit.ProxyProtocol.V2, v2(0x21, 0x11, bytes(12) + b"\x02\x00\x09short")),  # TLV past the end
], ids=["garbage", "lf", "v1-too-long", "port", "udp4", "v1-for-v2", "command", "short", "oversized", "crc32c",
        "tlv-past-the-end"])
def test_a_bad_header_closes_that_connection_only(recorder, mode, start):
    sock = listener(recorder, mode)
    try:
        with socket.create_connection(("127.0.0.1", sock.local_port), timeout=WAIT) as bad:
            bad.sendall(start)
            assert closed_by_the_listener(bad)
        with socket.create_connection(("127.0.0.1", sock.local_port), timeout=WAIT) as good:
            good.sendall(b"PROXY TCP4 192.0.2.9 192.0.2.10 9 10\r\n" if mode != socketkit.ProxyProtocol.V2
                         else v2_tcp6("::9", 9, "::10", 10))
            server = recorder.expect("accept")[0][1]
            assert server.connected_host in ("192.0.2.9", "::9")
        assert sock.is_accepting and recorder.count("accept") == 1
    finally:
        sock.close()


def test_a_header_cut_short_or_never_sent_is_closed(recorder):
    sock = listener(recorder, socketkit.ProxyProtocol.EITHER, timeout=0.3)
    try:
        with socket.create_connection(("127.0.0.1", sock.local_port), timeout=WAIT) as cut:
            cut.sendall(v2_tcp6("::1", 1, "::2", 2)[:20])
            cut.shutdown(socket.SHUT_WR)
            assert closed_by_the_listener(cut)
        with socket.create_connection(("127.0.0.1", sock.local_port), timeout=WAIT) as silent:
            assert closed_by_the_listener(silent)  # by the 0.3 s header timeout
        assert recorder.count("accept") == 0
    finally:
        sock.close()


def test_the_header_comes_before_the_tls_client_hello(recorder, certs):
    recorder.on_accept = lambda listener_socket, child: child.start_tls(certs.server())
    sock = listener(recorder, socketkit.ProxyProtocol.V1)
    context = ssl.create_default_context(cafile=certs.path("ca.pem"))
    try:
        with socket.create_connection(("127.0.0.1", sock.local_port), timeout=WAIT) as raw:
            raw.sendall(b"PROXY TCP6 2001:db8::1 2001:db8::2 4000 443\r\n")
            with context.wrap_socket(raw, server_hostname="localhost") as tls:
                server = recorder.expect("accept")[0][1]
                assert server.connected_address == ("2001:db8::1", 4000)
                tls.sendall(b"secret\n")
                server.read_to_data(b"\n", tag=2)
                assert recorder.wait_for(lambda events: ("read", b"secret\n", 2) in events)
                assert server.is_secure
    finally:
        sock.close()


# ---- HAProxy ------------------------------------------------------------------------------

HAPROXY = shutil.which("haproxy") or ("/usr/sbin/haproxy" if os.path.exists("/usr/sbin/haproxy") else None)


class HAProxy:
    """HAProxy in the foreground with a generated configuration: each frontend listens on a
    socket made here (port chosen by the kernel, passed as `fd@N`) and forwards to
    `servers[i]` with the given `send-proxy` option. Stopped by its PID."""

    def __init__(self, directory, routes):
        self.frontends = []
        lines = ["global", "    maxconn 64"]
        if os.geteuid() == 0:
            lines += ["    uid 65534", "    gid 65534"]  # serves unprivileged
        lines += ["defaults", "    mode tcp", "    timeout connect 10s", "    timeout client 30s",
                  "    timeout server 30s"]
        for index, (family, host, server_port, option) in enumerate(routes):
            front = socket.socket(family, socket.SOCK_STREAM)
            front.bind((host, 0))
            front.listen(16)
            self.frontends.append(front)
            lines += [f"frontend f{index}", f"    bind fd@{front.fileno()}", f"    default_backend b{index}",
                      f"backend b{index}", f"    server s{index} 127.0.0.1:{server_port} {option}"]
        self.config = directory / "haproxy.cfg"
        self.config.write_text("\n".join(lines) + "\n")
        os.chmod(directory, 0o755)
        self.config.chmod(0o644)
        self.process = subprocess.Popen([HAPROXY, "-db", "-f", str(self.config)],
                                        pass_fds=[front.fileno() for front in self.frontends],
                                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT)

    def address(self, index):
        return self.frontends[index].getsockname()[:2]

    def output(self) -> str:
        self.stop()
        return self.process.stdout.read().decode(errors="replace") if self.process.stdout else ""

    def stop(self):
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=WAIT)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=WAIT)
        for front in self.frontends:
            front.close()


@pytest.mark.skipif(HAPROXY is None, reason="haproxy is missing (the Makefile's TEST_PACKAGES installs it)")
def test_haproxy_send_proxy_v1_and_v2_over_ipv4_and_ipv6(tmp_path):
    recorders = {version: Recorder() for version in (1, 2)}
    listeners = {1: listener(recorders[1], socketkit.ProxyProtocol.V1),
                 2: listener(recorders[2], socketkit.ProxyProtocol.EITHER)}
    for recorder in recorders.values():
        recorder.on_read = lambda sock, data, tag: (sock.write(data.upper()), sock.read_to_data(b"\n", tag=tag))
        recorder.on_accept = lambda listener_socket, child: child.read_to_data(b"\n", tag=1)
    # The last route adds a CRC32C TLV, which the listener verifies (a wrong one is refused:
    # test_a_bad_header_closes_that_connection_only).
    routes = [(socket.AF_INET, "127.0.0.1", listeners[1].local_port, "send-proxy"),
              (socket.AF_INET, "127.0.0.1", listeners[2].local_port, "send-proxy-v2"),
              (socket.AF_INET6, "::1", listeners[2].local_port, "send-proxy-v2"),
              (socket.AF_INET, "127.0.0.1", listeners[2].local_port, "send-proxy-v2 proxy-v2-options crc32c")]
    haproxy = HAProxy(tmp_path, routes)
    try:
        expected = []
        for index, (family, host, _, option) in enumerate(routes):
            version = 1 if option == "send-proxy" else 2
            recorder = recorders[version]
            with socket.socket(family, socket.SOCK_STREAM) as client:
                client.settimeout(WAIT)
                client.connect(haproxy.address(index))
                client.sendall(b"hello through haproxy\n")
                answer = b""
                while not answer.endswith(b"\n"):
                    chunk = client.recv(4096)
                    assert chunk, f"haproxy closed the connection: {haproxy.output()}"
                    answer += chunk
                assert answer == b"HELLO THROUGH HAPROXY\n"
                count = sum(1 for _ in expected if _[0] == version) + 1
                server = recorder.expect("accept", count=count)[-1][1]
                # The header's source is the client's own socket; its destination, the
                # frontend it connected to; the TCP peer, HAProxy's outgoing connection.
                assert server.connected_address == client.getsockname()[:2]
                assert server.local_address == haproxy.address(index)
                assert server.proxy_protocol_version == version
                proxy = server.proxy_address
                assert proxy is not None and proxy[0] == "127.0.0.1" and proxy[1] != client.getsockname()[1]
                expected.append((version, server))
        assert haproxy.process.poll() is None, haproxy.output()
    finally:
        haproxy.stop()
        for sock in listeners.values():
            sock.close()


@pytest.mark.skipif(HAPROXY is None, reason="haproxy is missing (the Makefile's TEST_PACKAGES installs it)")
def test_haproxy_send_proxy_in_front_of_a_tls_server(tmp_path, certs, recorder):
    recorder.on_accept = lambda listener_socket, child: child.start_tls(certs.server())
    sock = listener(recorder, socketkit.ProxyProtocol.EITHER)
    haproxy = HAProxy(tmp_path, [(socket.AF_INET, "127.0.0.1", sock.local_port, "send-proxy-v2")])
    context = ssl.create_default_context(cafile=certs.path("ca.pem"))
    try:
        with socket.create_connection(haproxy.address(0), timeout=WAIT) as raw:
            client_address = raw.getsockname()[:2]
            with context.wrap_socket(raw, server_hostname="localhost") as tls:
                server = recorder.expect("accept")[0][1]
                assert server.connected_address == client_address
                tls.sendall(b"over tls\n")
                server.read_to_data(b"\n", tag=3)
                assert recorder.wait_for(lambda events: ("read", b"over tls\n", 3) in events)
                assert server.is_secure and server.proxy_protocol_version == 2
    finally:
        haproxy.stop()
        sock.close()


def test_aio_start_server_reads_the_header_before_the_callback():
    """asyncio's idiom: start_server(proxy_protocol=...). The callback's peername is the
    client the header names, sockname the address it connected to, and the proxy (here the
    test's asyncio client) is kept apart; a malformed header closes its connection before
    any callback runs."""
    from socketkit import aio

    async def main():
        seen = []

        async def handle(reader, writer):
            seen.append((writer.get_extra_info("peername"), writer.get_extra_info("sockname"),
                         writer.get_extra_info("socketkit_socket").proxy_address))
            writer.write((await reader.readline()).upper())
            await writer.drain()
            writer.close()

        try:
            async with await aio.start_server(handle, "127.0.0.1", 0, proxy_protocol=socketkit.ProxyProtocol.V2,
                                              proxy_header_timeout=10) as server:
                reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
                writer.write(v2_tcp6("2001:db8::10", 50000, "2001:db8::20", 8443) + b"hello\n")
                assert await asyncio.wait_for(reader.readline(), WAIT) == b"HELLO\n"
                proxy = writer.get_extra_info("sockname")
                writer.close()
                await writer.wait_closed()
                reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
                writer.write(b"GET / HTTP/1.1\r\n\r\n")
                try:
                    assert await asyncio.wait_for(reader.read(), WAIT) == b""
                except ConnectionResetError:
                    pass  # closed with the refused bytes unread
                writer.close()
            assert seen == [(("2001:db8::10", 50000), ("2001:db8::20", 8443), proxy)]
            with pytest.raises(ValueError):
                await aio.start_server(handle, "127.0.0.1", 0, proxy_protocol=7)
        finally:
            aio.detach()

    asyncio.run(main())
