# SPDX-License-Identifier: MIT
"""SocketKit echo server through the Python binding, for the benchmark harness.

    python sk_echo.py --port P [--udp-port Q] [--host ADDR]

Everything runs on the asyncio thread, as asyncio's own transports do: SocketKit's loop is
a driven one that asyncio runs (socketkit.aio.loop_group), and delegate methods run straight
from it (queue=None; with the binding's C extension, reads and datagrams reach them through
C callbacks, no ctypes). Echoes
every TCP byte and (with --udp-port) every UDP datagram back to its sender; prints
"listening on PORT"; runs until SIGTERM. With --tls CERT KEY every connection starts TLS
(server side) before its first read.

Backpressure: a client that sends but does not read its echo would make the server queue
the echo without bound, so each connection stops reading while its write queue is above
the high watermark and reads again once it has drained to the low one (Connection).
"""
import argparse
import asyncio
import signal

import socketkit
from socketkit import aio


class Echo:
    def __init__(self, tls=None):
        self.connections = set()
        self.tls = tls

    def socket_did_accept(self, listener, sock):
        self.connections.add(sock)
        connection = Connection(self)
        sock.delegate = connection
        if self.tls is not None:
            sock.start_tls(self.tls)
        connection.read_next(sock)

    def udp_socket_did_receive(self, sock, data, address, context):
        sock.send_to_address(data, address)


class Connection:
    """One client: echoes what it sends, reading no more from it while it does not read
    what comes back (its write queue above the high watermark) until the queue has drained
    to the low one."""

    __slots__ = ("server", "read_queued", "above_high_watermark")

    def __init__(self, server):
        self.server = server
        self.read_queued = False
        self.above_high_watermark = False

    def read_next(self, sock):
        self.read_queued = True
        sock.read()

    def socket_did_read(self, sock, data, tag):
        self.read_queued = False
        sock.write(data)
        if not self.above_high_watermark:
            self.read_queued = True
            sock.read()

    def socket_did_reach_high_watermark(self, sock, queued):
        self.above_high_watermark = True

    def socket_did_drain_to_low_watermark(self, sock, queued):
        self.above_high_watermark = False
        if not self.read_queued:
            self.read_next(sock)

    def socket_did_disconnect(self, sock, error):
        self.server.connections.discard(sock)


async def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--udp-port", type=int)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--tls", nargs=2)
    options = parser.parse_args()
    stop = asyncio.get_running_loop().create_future()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set_result, None)
    group = aio.loop_group()
    tls = None
    if options.tls:
        tls = socketkit.TLSSettings.server(options.tls[0], options.tls[1])
        tls.check()
    echo = Echo(tls)
    udp = None
    if options.udp_port is not None:
        # Bound before the TCP listener, so a client that sees "listening" finds both.
        udp = socketkit.UdpSocket(echo, queue=None, loop_group=group)
        udp.bind_to_port(options.udp_port, options.host)
        udp.begin_receiving()
    listener = socketkit.Socket(echo, queue=None, loop_group=group)
    listener.no_delay = True  # inherited by accepted connections (every bench server sets TCP_NODELAY)
    listener.accept_on_interface(options.host, options.port)
    print(f"listening on {listener.local_port}", flush=True)
    await stop


if __name__ == "__main__":
    asyncio.run(main())
