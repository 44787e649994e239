# SPDX-License-Identifier: MIT
"""The SocketKit event loop (socketkit.aio.EventLoop, install(), run()): asyncio's own code
(its streams, its protocols, its start_tls) runs unchanged over SocketKit transports,
against peers made with Python's socket and ssl modules."""
import asyncio
import socket
import ssl
import sys
import threading

import pytest

import socketkit
from socketkit import aio

from conftest import WAIT, pattern


def run(coroutine):
    return aio.run(asyncio.wait_for(coroutine, 60))


class Recording(asyncio.Protocol):
    """A protocol that records what asyncio calls, with the thread it runs on."""

    def __init__(self, eof_keeps_open=True):
        self.loop = asyncio.get_event_loop()
        self.events = []
        self.data = bytearray()
        self.threads = set()
        self.eof_keeps_open = eof_keeps_open
        self.made = self.loop.create_future()
        self.lost = self.loop.create_future()
        self.eof = self.loop.create_future()
        self.changed = asyncio.Event()
        self.transport = None

    def _note(self, event):
        self.threads.add(threading.get_ident())
        self.events.append(event)
        self.changed.set()

    def connection_made(self, transport):
        self.transport = transport
        self._note("made")
        self.made.set_result(transport)

    def data_received(self, data):
        self._note("data")
        self.data += data

    def eof_received(self):
        self._note("eof")
        self.eof.set_result(None)
        return self.eof_keeps_open

    def pause_writing(self):
        self._note("pause_writing")

    def resume_writing(self):
        self._note("resume_writing")

    def connection_lost(self, exc):
        self._note("lost")
        self.lost.set_result(exc)

    async def wait_for_bytes(self, count):
        while len(self.data) < count:
            self.changed.clear()
            await self.changed.wait()
        return bytes(self.data)


def peer_listener():
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(WAIT)
    return listener


async def accept(listener):
    peer, _ = await asyncio.get_running_loop().run_in_executor(None, listener.accept)
    peer.settimeout(WAIT)
    return peer


def test_the_loop_is_asyncios_with_socketkit_transports():
    async def main():
        loop = asyncio.get_running_loop()
        assert isinstance(loop, aio.EventLoop) and isinstance(loop, asyncio.SelectorEventLoop)

        async def echo(reader, writer):
            async for line in reader:
                writer.write(line)
                await writer.drain()
            writer.close()

        server = await asyncio.start_server(echo, "127.0.0.1", 0)
        assert isinstance(server, aio.Server)
        port = server.sockets[0].getsockname()[1]

        async def client(index):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            assert isinstance(writer.transport, aio.SocketTransport)
            lines = [b"client %d line %d\n" % (index, number) for number in range(20)]
            writer.writelines(lines)
            await writer.drain()
            received = [await reader.readline() for _ in lines]
            writer.close()
            await writer.wait_closed()
            return received == lines

        assert all(await asyncio.gather(*(client(index) for index in range(20))))
        server.close()
        await server.wait_closed()

    run(main())


def test_protocol_callbacks_on_the_loops_thread_eof_and_close():
    async def main():
        loop = asyncio.get_running_loop()
        listener = peer_listener()
        transport, protocol = await loop.create_connection(Recording, "127.0.0.1", listener.getsockname()[1])
        peer = await accept(listener)
        assert transport.get_extra_info("peername") == listener.getsockname()
        assert transport.get_extra_info("socket") is None
        peer.sendall(b"hello")
        assert await protocol.wait_for_bytes(5) == b"hello"
        peer.shutdown(socket.SHUT_WR)
        await protocol.eof
        # eof_received said to keep the connection: it still writes.
        transport.write(b"after your end")
        assert peer.recv(100) == b"after your end"
        transport.close()
        assert await protocol.lost is None
        assert peer.recv(100) == b""
        assert protocol.events[0] == "made" and protocol.events[-1] == "lost"
        assert protocol.threads == {threading.get_ident()}
        peer.close()

        # eof_received returning False closes the transport.
        transport, protocol = await loop.create_connection(lambda: Recording(eof_keeps_open=False), "127.0.0.1",
                                                           listener.getsockname()[1])
        peer = await accept(listener)
        peer.shutdown(socket.SHUT_WR)
        assert await protocol.lost is None
        peer.close()
        listener.close()

    run(main())


def test_pause_and_resume_reading_and_writing():
    async def main():
        loop = asyncio.get_running_loop()
        listener = peer_listener()
        transport, protocol = await loop.create_connection(Recording, "127.0.0.1", listener.getsockname()[1])
        peer = await accept(listener)
        transport.pause_reading()
        assert not transport.is_reading()
        peer.sendall(b"held while paused")
        # Give SocketKit's loop every chance to deliver: several turns of the asyncio loop.
        for _ in range(20):
            await asyncio.sleep(0)
        assert protocol.data == b""
        transport.resume_reading()
        assert await protocol.wait_for_bytes(17) == b"held while paused"
        # Writing: above the high limit the protocol is paused, and resumed once drained.
        transport.set_write_buffer_limits(high=64 * 1024, low=16 * 1024)
        assert transport.get_write_buffer_limits() == (16 * 1024, 64 * 1024)
        chunk = pattern(256 * 1024, seed=2)
        total = 0
        while "pause_writing" not in protocol.events:
            transport.write(chunk)
            total += len(chunk)
            await asyncio.sleep(0)
            assert total < 256 * 1024 * 1024, "never paused"
        assert transport.get_write_buffer_size() > 0
        received = 0
        while received < total:
            received += len(await loop.run_in_executor(None, peer.recv, 1 << 20))
        while "resume_writing" not in protocol.events:
            protocol.changed.clear()
            await protocol.changed.wait()
        transport.abort()
        await protocol.lost
        peer.close()
        listener.close()

    run(main())


def test_write_eof_and_a_buffered_protocol():
    class Buffered(asyncio.BufferedProtocol):
        def __init__(self):
            self.buffer = bytearray(7)  # small: a chunk is fed in several pieces
            self.received = bytearray()
            self.done = asyncio.get_event_loop().create_future()

        def connection_made(self, transport):
            self.transport = transport

        def get_buffer(self, sizehint):
            return self.buffer

        def buffer_updated(self, nbytes):
            self.received += self.buffer[:nbytes]

        def eof_received(self):
            self.done.set_result(bytes(self.received))
            return True  # keep the write side open

        def connection_lost(self, exc):
            pass

    async def main():
        loop = asyncio.get_running_loop()
        listener = peer_listener()
        transport, protocol = await loop.create_connection(Buffered, "127.0.0.1", listener.getsockname()[1])
        peer = await accept(listener)
        data = pattern(100_000, seed=5)
        peer.sendall(data)
        peer.shutdown(socket.SHUT_WR)
        assert await protocol.done == data
        assert transport.can_write_eof()
        transport.write(b"last words")
        transport.write_eof()
        with pytest.raises(RuntimeError):
            transport.write(b"more")
        received = b""
        while True:
            chunk = await loop.run_in_executor(None, peer.recv, 100)
            if not chunk:
                break
            received += chunk
        assert received == b"last words"
        transport.close()
        peer.close()
        listener.close()

    run(main())


def test_errors_and_a_failing_protocol():
    async def main():
        loop = asyncio.get_running_loop()
        probe = socket.socket()
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
        probe.close()
        with pytest.raises(ConnectionRefusedError):
            await loop.create_connection(asyncio.Protocol, "127.0.0.1", port)
        reported = loop.create_future()
        loop.set_exception_handler(lambda loop_, context: reported.done() or reported.set_result(context))

        class Broken(Recording):
            def data_received(self, data):
                raise ZeroDivisionError("the protocol's bug")

        listener = peer_listener()
        transport, protocol = await loop.create_connection(Broken, "127.0.0.1", listener.getsockname()[1])
        peer = await accept(listener)
        peer.sendall(b"boom")
        context = await reported
        assert isinstance(context["exception"], ZeroDivisionError)
        assert context["message"] == "Fatal error: protocol.data_received() call failed."
        assert isinstance(await protocol.lost, ZeroDivisionError)
        peer.close()
        listener.close()

    run(main())


def test_tls_socketkits_and_the_standard_librarys(certs):
    """ssl_context(settings) and TLSSettings: SocketKit's TLS; a plain SSLContext: the
    standard library's TLS over a SocketKit connection. Every pairing talks to the other."""
    async def main():
        async def echo(reader, writer):
            writer.write((await reader.readline()).upper())
            await writer.drain()
            writer.close()

        plain_server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        plain_server.load_cert_chain(certs.path("server-chain.pem"), certs.path("server.key"))
        plain_client = ssl.create_default_context(cafile=certs.path("ca.pem"))
        servers = {"socketkit": aio.ssl_context(certs.server()), "stdlib": plain_server}
        clients = {"socketkit": aio.ssl_context(certs.client()), "settings": certs.client(), "stdlib": plain_client}
        for server_name, server_context in servers.items():
            server = await asyncio.start_server(echo, "127.0.0.1", 0, ssl=server_context)
            for client_name, client_context in clients.items():
                reader, writer = await asyncio.open_connection("127.0.0.1", server.sockets[0].getsockname()[1],
                                                               ssl=client_context, server_hostname="localhost")
                ssl_object = writer.get_extra_info("ssl_object")
                assert ssl_object.version() == "TLSv1.3", (server_name, client_name)
                writer.write(b"%s to %s\n" % (client_name.encode(), server_name.encode()))
                assert await reader.readline() == b"%s TO %s\n" % (client_name.upper().encode(),
                                                                 server_name.upper().encode())
                writer.close()
            server.close()
            await server.wait_closed()
        # A certificate that does not verify: the standard library's exception class.
        server = await asyncio.start_server(echo, "127.0.0.1", 0, ssl=servers["socketkit"])
        with pytest.raises(ssl.SSLCertVerificationError):
            await asyncio.open_connection("127.0.0.1", server.sockets[0].getsockname()[1],
                                          ssl=aio.ssl_context(socketkit.TLSSettings.client()),
                                          server_hostname="localhost")
        server.close()

    run(main())


@pytest.mark.parametrize("kind", ["socketkit", "stdlib"])
def test_start_tls_on_an_open_connection(certs, kind):
    """STARTTLS with the loop's start_tls: SocketKit's TLS on the same transport, or the
    standard library's over it; the peer is Python's ssl module."""
    async def main():
        loop = asyncio.get_running_loop()
        listener = peer_listener()
        transport, protocol = await loop.create_connection(Recording, "127.0.0.1", listener.getsockname()[1])
        peer = await accept(listener)
        transport.write(b"STARTTLS\n")
        assert peer.recv(100) == b"STARTTLS\n"
        peer.sendall(b"go ahead\n")
        assert await protocol.wait_for_bytes(9) == b"go ahead\n"
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(certs.path("server-chain.pem"), certs.path("server.key"))
        secured = loop.run_in_executor(None, lambda: context.wrap_socket(peer, server_side=True))
        client_context = (aio.ssl_context(certs.client()) if kind == "socketkit"
                          else ssl.create_default_context(cafile=certs.path("ca.pem")))
        tls_transport = await loop.start_tls(transport, protocol, client_context, server_hostname="localhost")
        tls_peer = await secured
        if kind == "socketkit":
            assert tls_transport is transport
        tls_transport.write(b"secret\n")
        assert tls_peer.recv(100) == b"secret\n"
        tls_peer.sendall(b"reply\n")
        assert await protocol.wait_for_bytes(15) == b"go ahead\nreply\n"
        # The peer answers our close_notify with its own (the standard library's TLS waits
        # for it), then closes.
        tls_transport.close()
        await loop.run_in_executor(None, tls_peer.unwrap)
        await protocol.lost
        tls_peer.close()
        listener.close()

    run(main())


@pytest.mark.skipif(sys.version_info < (3, 11), reason="StreamWriter.start_tls is new in Python 3.11")
def test_asyncio_stream_writer_start_tls(certs):
    async def main():
        async def smtp_like(reader, writer):
            assert await reader.readline() == b"STARTTLS\n"
            writer.write(b"220 go ahead\n")
            await writer.drain()
            await writer.start_tls(aio.ssl_context(certs.server()))
            writer.write(b"250 " + await reader.readline())
            await writer.drain()
            writer.close()

        server = await asyncio.start_server(smtp_like, "127.0.0.1", 0)
        reader, writer = await asyncio.open_connection("127.0.0.1", server.sockets[0].getsockname()[1])
        writer.write(b"STARTTLS\n")
        assert await reader.readline() == b"220 go ahead\n"
        await writer.start_tls(ssl.create_default_context(cafile=certs.path("ca.pem")), server_hostname="localhost")
        writer.write(b"EHLO\n")
        assert await reader.readline() == b"250 EHLO\n"
        writer.close()
        server.close()

    run(main())


def test_unix_domain_and_datagrams_through_the_loop(tmp_path):
    async def main():
        loop = asyncio.get_running_loop()
        path = str(tmp_path / "loop.sock")

        async def echo(reader, writer):
            writer.write(await reader.readexactly(5))
            await writer.drain()
            writer.close()

        server = await asyncio.start_unix_server(echo, path)
        reader, writer = await asyncio.open_unix_connection(path)
        writer.write(b"unix!")
        assert await reader.read() == b"unix!"
        writer.close()
        server.close()

        class Echo(asyncio.DatagramProtocol):
            def connection_made(self, transport):
                self.transport = transport

            def datagram_received(self, data, addr):
                self.transport.sendto(data[::-1], addr)

        transport, _ = await loop.create_datagram_endpoint(Echo, local_addr=("127.0.0.1", 0))
        assert isinstance(transport, aio.DatagramTransport)
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as client:
            client.settimeout(WAIT)
            client.sendto(b"abc", transport.get_extra_info("sockname"))
            assert (await loop.run_in_executor(None, client.recv, 100)) == b"cba"
        transport.close()

    run(main())


def test_install_makes_asyncio_run_use_the_socketkit_loop():
    async def which():
        return type(asyncio.get_running_loop())

    previous = asyncio.get_event_loop_policy()
    try:
        aio.install()
        assert asyncio.run(which()) is aio.EventLoop
    finally:
        asyncio.set_event_loop_policy(previous)
    assert asyncio.run(which()) is not aio.EventLoop
    if sys.version_info >= (3, 12):
        assert asyncio.run(which(), loop_factory=aio.new_event_loop) is aio.EventLoop
