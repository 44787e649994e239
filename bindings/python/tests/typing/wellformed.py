# SPDX-License-Identifier: MIT
"""Well-typed uses of socketkit's API: `mypy --strict` must find nothing here
(tests/test_typing.py). Never run: it is only type-checked."""
import asyncio
import ssl
from typing import List, Optional

import socketkit
from socketkit import aio


class Client(socketkit.SocketDelegate):
    def __init__(self) -> None:
        self.lines: List[bytes] = []

    def socket_did_connect(self, sock: socketkit.Socket, host: str, port: int) -> None:
        sock.write(b"hello\n")
        sock.read_to_data(socketkit.LF, tag=1)

    def socket_did_read(self, sock: socketkit.Socket, data: socketkit.ReadData, tag: int) -> None:
        self.lines.append(bytes(data))

    def socket_did_disconnect(self, sock: socketkit.Socket, error: Optional[socketkit.Error]) -> None:
        if isinstance(error, ConnectionRefusedError):
            print("refused", error.errno)


class Receiver(socketkit.UdpSocketDelegate):
    def udp_socket_did_receive(self, sock: socketkit.UdpSocket, data: bytes,
                               address: Optional[socketkit.IPAddress], context: object) -> None:
        if address is not None:
            sock.send_to_address(data, address)


def delegates() -> None:
    sock = socketkit.Socket(Client())
    sock.no_delay = False
    connected: bool = sock.is_connected
    sock.proxy_protocol = socketkit.ProxyProtocol.EITHER
    sock.proxy_header_timeout = 2.5
    proxy: Optional[socketkit.Address] = sock.proxy_address
    version: Optional[int] = sock.proxy_protocol_version
    print(proxy, version)
    sock.connect_to_host("example.com", 7, timeout=5)
    sock.close()
    udp = socketkit.UdpSocket(Receiver())
    udp.bind_to_interface("127.0.0.1", 0)
    udp.begin_receiving()
    udp.close()
    print(connected)


async def streams() -> None:
    async def echo(reader: aio.StreamReader, writer: aio.StreamWriter) -> None:
        async for line in reader:
            writer.write(line)
            await writer.drain()
        writer.close()

    async with await aio.start_server(echo, "127.0.0.1", 0) as server:
        reader, writer = await aio.open_connection("127.0.0.1", server.port,
                                                   ssl=aio.ssl_context(socketkit.TLSSettings.client()))
        writer.write(b"x\n")
        try:
            line: bytes = await asyncio.wait_for(reader.readline(), 0.5)
        except asyncio.TimeoutError:
            line = b""
        exactly: bytes = await reader.readexactly(4)
        print(line, exactly, writer.get_extra_info("peername"))
        writer.close()
        await writer.wait_closed()
    endpoint = await aio.AsyncUdpSocket.bind("127.0.0.1", 0, reuse_port=True)
    async for data, address in endpoint:
        await endpoint.send_to(data, address)
    context: ssl.SSLContext = aio.ssl_context(socketkit.TLSSettings.client())
    print(context)


def on_the_socketkit_loop() -> None:
    async def main() -> int:
        return 1

    result: int = aio.run(main())
    print(result)
