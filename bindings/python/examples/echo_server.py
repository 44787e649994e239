# SPDX-License-Identifier: MIT
"""A line echo server on SocketKit and asyncio.

    python echo_server.py [PORT]

Listens on 127.0.0.1 (PORT, default 0: the kernel picks one), prints "listening on PORT",
and echoes every line each client sends, one coroutine per connection; each write is
awaited before the next read, so a client that stops reading its echoes stops being read
from (backpressure). Stops on SIGINT or SIGTERM.
"""
import asyncio
import signal
import sys

import socketkit
from socketkit import aio


async def echo(connection: aio.AsyncSocket) -> None:
    try:
        while True:
            line = await connection.read_to_data(socketkit.LF, max_length=65536)
            await connection.write(line)
    except socketkit.ClosedError:
        pass  # the client went away


async def main(port: int) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for number in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(number, stop.set)
    async with await aio.start_server(echo, "127.0.0.1", port) as server:
        print(f"listening on {server.port}", flush=True)
        await stop.wait()
    aio.detach()


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 0))
