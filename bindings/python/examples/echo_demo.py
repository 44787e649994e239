# SPDX-License-Identifier: MIT
"""A line echo server and a client on SocketKit, in one asyncio program.

Delegate methods run on the asyncio loop (socketkit.aio); the client uses the awaitable
helpers, the server a coroutine per connection. The server awaits each write before it reads
the next line: a client that does not read its echo stops being read from (backpressure),
instead of making the server queue without bound.

    python echo_demo.py
"""
import asyncio

import socketkit
from socketkit import aio


async def echo(connection: aio.AsyncSocket) -> None:
    while True:
        try:
            line = await connection.read_to_data(socketkit.LF, max_length=65536)
        except socketkit.ClosedError:
            return
        await connection.write(line)


async def main() -> None:
    async with await aio.start_server(echo, "127.0.0.1", 0) as server:
        print(f"Python echo server on port {server.port} (socketkit {socketkit.LIBRARY_VERSION})")
        client = await aio.AsyncSocket.connect("127.0.0.1", server.port, timeout=5)
        for line in (b"hello from Python\n", b"over SocketKit\n"):
            await client.write(line)
            print("echoed:", (await client.read_to_data(socketkit.LF, timeout=5)).decode().rstrip())
        await client.close()
    aio.detach()
    print("python demo: ok")


if __name__ == "__main__":
    asyncio.run(main())
