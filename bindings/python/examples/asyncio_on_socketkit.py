# SPDX-License-Identifier: MIT
"""asyncio's own code, unchanged, on SocketKit: socketkit.aio.run() (or install(), or
asyncio.run(main(), loop_factory=aio.new_event_loop) from Python 3.12) gives asyncio an
event loop whose TCP connections, servers and start_tls are SocketKit's. Libraries such as
aiohttp run on it as they are.

    python asyncio_on_socketkit.py
"""
import asyncio

from socketkit import aio


async def main() -> None:
    served = asyncio.Event()

    async def uppercase(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        async for line in reader:
            writer.write(line.upper())
            await writer.drain()
        writer.close()
        served.set()

    server = await asyncio.start_server(uppercase, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"asyncio's streams, SocketKit's sockets\n")
    print(type(asyncio.get_running_loop()).__name__, type(writer.transport).__name__,
          (await reader.readline()).decode().rstrip())
    writer.close()
    await writer.wait_closed()
    await served.wait()
    server.close()
    await server.wait_closed()


if __name__ == "__main__":
    aio.run(main())
