# SPDX-License-Identifier: MIT
"""SocketKit echo servers written with socketkit.aio's coroutine APIs, for the benchmark
harness: the Python rows beside sk_echo.py (delegates) and echo_asyncio.py --loop
socketkit (asyncio protocols on SocketKit's event loop).

    python sk_aio_echo.py --api streams|asyncsocket [--hosting threads|driven] --port P [--udp-port Q]
                          [--host ADDR] [--tls CERT KEY]

--api streams: asyncio's streams (aio.start_server(handler(reader, writer))): each
connection reads what is there (reader.read) and writes it back, awaiting drain().
--api asyncsocket: the former API (a handler of one AsyncSocket: await read, await write),
the aio server before the streams. --hosting threads (the default, as those APIs run
unless told otherwise): SocketKit's own loop thread does the I/O and the asyncio loop
drains the callbacks (aio.queue()); --hosting driven: SocketKit's loop is run by the
asyncio loop itself (loop_group=aio.loop_group()), one thread and no hand-over. Prints
"listening on PORT"; runs until SIGTERM. --udp-port is accepted and unused (TCP only).
"""
import argparse
import asyncio
import signal
import warnings

import socketkit
from socketkit import aio


async def streams_echo(reader, writer):
    try:
        while True:
            data = await reader.read(65536)
            if not data:
                break
            writer.write(data)
            await writer.drain()
    except (ConnectionError, socketkit.Error):
        pass
    writer.close()


async def asyncsocket_echo(connection):
    while True:
        try:
            data = await connection.read()
            await connection.write(data)
        except socketkit.Error:
            return


async def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--api", choices=("streams", "asyncsocket"), required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--udp-port", type=int)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--tls", nargs=2)
    parser.add_argument("--hosting", choices=("threads", "driven"), default="threads")
    options = parser.parse_args()
    group = aio.loop_group() if options.hosting == "driven" else None
    loop = asyncio.get_running_loop()
    stop = loop.create_future()
    loop.add_signal_handler(signal.SIGTERM, stop.set_result, None)
    tls = socketkit.TLSSettings.server(options.tls[0], options.tls[1]) if options.tls else None
    if options.api == "streams":
        server = await aio.start_server(streams_echo, options.host, options.port, ssl=tls, loop_group=group)
    else:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # the former API, on purpose
            server = await aio.start_server(asyncsocket_echo, options.host, options.port, tls=tls, loop_group=group)
    print(f"listening on {server.port}", flush=True)
    await stop
    server.close()


if __name__ == "__main__":
    asyncio.run(main())
