# SPDX-License-Identifier: MIT
"""A line echo server and a client on SocketKit, in one asyncio program.

socketkit.aio has asyncio's streams: the code is asyncio's, with the import changed. The
server awaits drain() after each line, so a client that does not read its echo stops being
read from (backpressure) instead of making the server queue without bound. The client
waits a bounded time for a line with asyncio.wait_for: a read cancelled that way loses no
byte, and the connection stays.

    python echo_demo.py
"""
import asyncio

import socketkit
from socketkit import aio


async def echo(reader: aio.StreamReader, writer: aio.StreamWriter) -> None:
    async for line in reader:
        writer.write(line)
        await writer.drain()
    writer.close()


async def main() -> None:
    async with await aio.start_server(echo, "127.0.0.1", 0) as server:
        print(f"Python echo server on port {server.port} (socketkit {socketkit.LIBRARY_VERSION})")
        reader, writer = await aio.open_connection("127.0.0.1", server.port)
        writer.write(b"hello from Python\n")
        print("echoed:", (await reader.readline()).decode().rstrip())
        writer.write(b"over SocketKit, ")
        try:
            await asyncio.wait_for(reader.readline(), 0.1)  # half a line: times out
        except asyncio.TimeoutError:
            pass
        writer.write(b"with nothing lost\n")
        print("echoed:", (await reader.readline()).decode().rstrip())
        writer.close()
        await writer.wait_closed()
    aio.detach()
    print("python demo: ok")


if __name__ == "__main__":
    asyncio.run(main())
