# SPDX-License-Identifier: MIT
"""Deliberate misuses of socketkit's API: `mypy --strict` must report each line marked
``# expect: CODE`` with that error code, and nothing else (tests/test_typing.py). Never
run: it is only type-checked."""
import asyncio

import socketkit
from socketkit import aio

sock = socketkit.Socket()
sock.wirte(b"hello")  # expect: attr-defined
sock.write("a str is not bytes")  # expect: arg-type
sock.read(tag="seven")  # expect: arg-type
sock.read_to_data(socketkit.LF, timeout="5")  # expect: arg-type
sock.connect_to_host(8080, "example.com")  # expect: arg-type
sock.is_connected = True  # expect: assignment
sock.no_delay = "yes"  # expect: assignment
port: str = sock.local_port  # expect: assignment
sock.proxy_protocol = "v2"  # expect: assignment
proxy_version: int = sock.proxy_protocol_version  # expect: assignment
udp = socketkit.UdpSocket()
udp.reed(0)  # expect: attr-defined
udp.send_to_address(b"x", "127.0.0.1")  # expect: arg-type
udp.bind_to_interface(9999, "127.0.0.1")  # expect: arg-type
error: socketkit.Error = socketkit.ConnectionRefusedError()
code: str = error.code  # expect: assignment


class Misspelt(socketkit.SocketDelegate):
    def socket_did_read(self, sock: socketkit.Socket, data: str, tag: int) -> None:  # expect: override
        pass

    def socket_did_connect(self, sock: socketkit.Socket, host: str) -> None:  # expect: override
        pass


async def streams() -> None:
    reader, writer = await aio.open_connection("127.0.0.1", 8000)
    writer.wirte(b"x")  # expect: attr-defined
    writer.write("text")  # expect: arg-type
    line: str = await reader.readline()  # expect: assignment
    await reader.readexactly("3")  # expect: arg-type
    await aio.open_connection(8000, "127.0.0.1")  # expect: arg-type
    server = await aio.start_server(lambda r, w: None, "127.0.0.1", 0)
    server.serve()  # expect: attr-defined
    endpoint = await aio.AsyncUdpSocket.bind("127.0.0.1", "0")  # expect: arg-type
    data, address = await endpoint.receive()
    text: str = data  # expect: assignment
    asyncio.get_running_loop()
