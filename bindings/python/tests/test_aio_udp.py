# SPDX-License-Identifier: MIT
"""UDP for asyncio: create_datagram_endpoint (asyncio's DatagramProtocol and transport on a
SocketKit UdpSocket, options set before it binds) against asyncio's own endpoints and
Python's socket module; AsyncUdpSocket's options, iteration and cancellation."""
import asyncio
import socket

import pytest

import socketkit
from socketkit import aio

from conftest import WAIT


def run(coroutine):
    return asyncio.run(asyncio.wait_for(coroutine, 60))


class Collector(asyncio.DatagramProtocol):
    def __init__(self, echo=False):
        self.echo = echo
        self.transport = None
        self.datagrams = asyncio.Queue()
        self.errors = asyncio.Queue()
        self.lost = asyncio.get_event_loop().create_future()

    def connection_made(self, transport):
        self.transport = transport

    def datagram_received(self, data, addr):
        if self.echo:
            self.transport.sendto(data.upper(), addr)
        self.datagrams.put_nowait((data, addr))

    def error_received(self, exc):
        self.errors.put_nowait(exc)

    def connection_lost(self, exc):
        if not self.lost.done():
            self.lost.set_result(exc)


def test_an_endpoint_echoes_to_asyncios_own_endpoint():
    async def main():
        loop = asyncio.get_running_loop()
        transport, server = await aio.create_datagram_endpoint(lambda: Collector(echo=True),
                                                               local_addr=("127.0.0.1", 0))
        assert isinstance(transport, asyncio.DatagramTransport)
        address = transport.get_extra_info("sockname")
        client_transport, client = await loop.create_datagram_endpoint(Collector, remote_addr=address)
        client_transport.sendto(b"ping")
        assert (await client.datagrams.get())[0] == b"PING"
        data, sender = await server.datagrams.get()
        assert data == b"ping" and sender == client_transport.get_extra_info("sockname")
        # A connected endpoint of ours: sendto without an address, only that peer heard.
        connected_transport, connected = await aio.create_datagram_endpoint(Collector, remote_addr=address)
        assert connected_transport.get_extra_info("peername") == address
        connected_transport.sendto(b"hello")
        assert (await connected.datagrams.get())[0] == b"HELLO"
        # To a host name (resolved off the loop).
        transport.sendto(b"by name", ("localhost", client_transport.get_extra_info("sockname")[1]))
        assert (await client.datagrams.get())[0] == b"by name"
        for each in (transport, connected_transport, client_transport):
            each.close()
        assert await server.lost is None and await connected.lost is None

    run(main())


def test_options_are_set_before_the_bind():
    async def main():
        first_transport, first = await aio.create_datagram_endpoint(Collector, local_addr=("127.0.0.1", 0),
                                                                    reuse_port=True)
        port = first_transport.get_extra_info("sockname")[1]
        second_transport, second = await aio.create_datagram_endpoint(Collector, local_addr=("127.0.0.1", port),
                                                                      reuse_port=True)
        assert second_transport.get_extra_info("sockname")[1] == port
        with pytest.raises(OSError) as caught:  # without the option: the port is taken
            await aio.create_datagram_endpoint(Collector, local_addr=("127.0.0.1", port))
        assert isinstance(caught.value, socketkit.AddressInUseError)
        # configure(udp) runs before the bind: a receive limit that truncates.
        small_transport, small = await aio.create_datagram_endpoint(
            Collector, local_addr=("127.0.0.1", 0),
            configure=lambda udp: setattr(udp, "max_receive_sizes", (100, 100)))
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sender:
            sender.sendto(bytes(200), small_transport.get_extra_info("sockname"))
            sender.sendto(b"fits", small_transport.get_extra_info("sockname"))
        assert isinstance(await small.errors.get(), socketkit.TruncatedError)
        assert (await small.datagrams.get())[0] == b"fits"
        for each in (first_transport, second_transport, small_transport):
            each.close()

    run(main())


def test_broadcast_needs_allow_broadcast():
    async def main():
        receiver = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        receiver.bind(("0.0.0.0", 0))
        everyone = ("127.255.255.255", receiver.getsockname()[1])
        refused_transport, refused = await aio.create_datagram_endpoint(Collector, local_addr=("0.0.0.0", 0),
                                                                        family=socket.AF_INET)
        refused_transport.sendto(b"refused", everyone)
        assert isinstance(await refused.errors.get(), PermissionError)
        allowed_transport, _ = await aio.create_datagram_endpoint(Collector, local_addr=("0.0.0.0", 0),
                                                                  family=socket.AF_INET, allow_broadcast=True)
        allowed_transport.sendto(b"everyone", everyone)
        receiver.settimeout(WAIT)
        assert (await asyncio.get_running_loop().run_in_executor(None, receiver.recv, 100)) == b"everyone"
        refused_transport.close()
        allowed_transport.close()
        receiver.close()

    run(main())


def test_async_udp_socket_options_iteration_and_cancellation():
    async def main():
        assert not [name for name in dir(aio.AsyncUdpSocket) if name.startswith("udp_socket_")]
        first = await aio.AsyncUdpSocket.bind("127.0.0.1", 0, reuse_port=True)
        # Options on an unbound socket, then bind_to.
        second = aio.AsyncUdpSocket()
        second.socket.enable_reuse_port(True)
        await second.bind_to("127.0.0.1", first.local_address[1])
        assert second.local_address[1] == first.local_address[1]
        receiver = await aio.AsyncUdpSocket.bind("127.0.0.1", 0, configure=lambda udp: udp.enable_reuse_address())
        sender = await aio.AsyncUdpSocket.connect("127.0.0.1", receiver.local_address[1])
        # A cancelled receive loses no datagram.
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(receiver.receive(), 0.1)
        await sender.send(b"one")
        await sender.send(b"two")
        await sender.send(b"three")
        got = []
        async with receiver:
            async for data, address in receiver:
                assert address == sender.local_address
                got.append(data)
                if len(got) == 3:
                    break
        assert got == [b"one", b"two", b"three"]
        with pytest.raises(socketkit.ClosedError):
            await receiver.receive()
        for each in (first, second, sender):
            await each.close()

    run(main())


def test_bind_takes_the_host_first_and_the_former_order_warns():
    udp = socketkit.UdpSocket()
    try:
        udp.bind_to_interface("127.0.0.1", 0)
        assert udp.local_host == "127.0.0.1"
    finally:
        udp.close()
    old = socketkit.UdpSocket()
    try:
        with pytest.warns(DeprecationWarning, match="bind_to_interface"):
            old.bind_to_port(0, "127.0.0.1")
        assert old.local_host == "127.0.0.1"
    finally:
        old.close()
    anywhere = socketkit.UdpSocket()
    try:
        import warnings
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            anywhere.bind_to_port(0)  # the port alone is no former spelling
        assert anywhere.local_port != 0
    finally:
        anywhere.close()
