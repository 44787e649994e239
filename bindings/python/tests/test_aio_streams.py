# SPDX-License-Identifier: MIT
"""socketkit.aio's streams: asyncio's open_connection / start_server surface and semantics
on SocketKit, against asyncio's own streams (and Python's ssl) as the peer, and the
cancellation-safe reads: a read cancelled by asyncio.wait_for or a cancelled task loses no
byte, for every read kind, in the clear and over TLS."""
import asyncio
import select
import socket
import ssl
import sys

import pytest

import socketkit
from socketkit import aio
from socketkit.aio import _connection

from conftest import WAIT, pattern

SHORT = 0.1  # the bounded wait a test gives a read that must time out


def run(coroutine):
    async def main():
        try:
            return await asyncio.wait_for(coroutine, 60)
        finally:
            aio.detach()  # the loop's SocketKit queue and driven loop, if a test made them

    return asyncio.run(main())


HOSTINGS = ["queue", "driven"]


def hosting_options(hosting):
    """open_connection's options for a hosting: SocketKit's default threads with the
    asyncio loop draining the callbacks, or SocketKit's loop run by asyncio itself."""
    return {"loop_group": aio.loop_group()} if hosting == "driven" else {}


class Peer:
    """The other end, made with asyncio's own streams (optionally over Python's ssl)."""

    def __init__(self):
        self.server = None
        self.accepted = None

    async def start(self, ssl_context=None):
        self.accepted = asyncio.get_running_loop().create_future()

        async def handler(reader, writer):
            if not self.accepted.done():
                self.accepted.set_result((reader, writer))

        self.server = await asyncio.start_server(handler, "127.0.0.1", 0, ssl=ssl_context)
        return self.server.sockets[0].getsockname()[1]

    async def close(self):
        if self.accepted is not None and self.accepted.done():
            self.accepted.result()[1].close()
        self.server.close()
        await self.server.wait_closed()


def server_context(certs):
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(certs.path("server-chain.pem"), certs.path("server.key"))
    return context


async def connected_pair(tls, certs, hosting="queue", **options):
    """(reader, writer) of socketkit.aio, and (peer_reader, peer_writer) of asyncio."""
    peer = Peer()
    port = await peer.start(server_context(certs) if tls else None)
    if tls:
        options.update(ssl=certs.client(), server_hostname="localhost")
    reader, writer = await aio.open_connection("127.0.0.1", port, **hosting_options(hosting), **options)
    peer_reader, peer_writer = await peer.accepted
    return reader, writer, peer_reader, peer_writer, peer


# ---- asyncio's surface -------------------------------------------------------------------

@pytest.mark.parametrize("hosting", HOSTINGS)
def test_open_connection_against_asyncio_streams(certs, hosting):
    async def main():
        reader, writer, peer_reader, peer_writer, peer = await connected_pair(False, certs, hosting)
        assert isinstance(reader, aio.StreamReader) and isinstance(writer, aio.StreamWriter)
        assert writer.get_extra_info("peername") == ("127.0.0.1", peer.server.sockets[0].getsockname()[1])
        assert writer.get_extra_info("sockname")[0] == "127.0.0.1"
        assert writer.get_extra_info("ssl_object") is None
        writer.write(b"hello\n")
        writer.writelines([b"a", b"b\r\n"])
        await writer.drain()
        assert await peer_reader.readline() == b"hello\n"
        assert await peer_reader.readuntil(b"\r\n") == b"ab\r\n"
        big = pattern(300_000, seed=3)
        peer_writer.write(b"line one\nline two\r\n" + big + b"tail")
        await peer_writer.drain()
        assert await reader.readline() == b"line one\n"
        assert await reader.readuntil(b"\r\n") == b"line two\r\n"
        assert await reader.readexactly(len(big)) == big
        assert await reader.read(2) == b"ta"
        assert await reader.read(0) == b""
        assert not reader.at_eof()
        peer_writer.write(b" and more")
        peer_writer.write_eof()
        assert await reader.read() == b"il and more"  # read(-1): until the end
        assert reader.at_eof() and reader.exception() is None
        assert await reader.read(10) == b"" and await reader.readline() == b""
        with pytest.raises(asyncio.IncompleteReadError) as caught:
            await reader.readexactly(1)
        assert caught.value.partial == b"" and caught.value.expected == 1
        # The peer's end leaves the write side open, as asyncio's streams do.
        writer.write(b"after your end\n")
        await writer.drain()
        assert await peer_reader.readline() == b"after your end\n"
        writer.close()
        assert writer.is_closing()
        await writer.wait_closed()
        assert await peer_reader.read() == b""
        await peer.close()
        aio.detach()

    run(main())


@pytest.mark.parametrize("hosting", HOSTINGS)
def test_the_end_of_the_stream_in_the_middle_of_each_read(certs, hosting):
    async def main():
        for kind in ("readexactly", "readuntil", "readline", "read_to_data", "read"):
            reader, writer, _, peer_writer, peer = await connected_pair(False, certs, hosting)
            peer_writer.write(b"partial")
            await peer_writer.drain()
            pending = asyncio.ensure_future({
                "readexactly": lambda: reader.readexactly(100),
                "readuntil": lambda: reader.readuntil(b"\n"),
                "readline": reader.readline,
                "read_to_data": lambda: reader.read_to_data(b"\n"),
                "read": lambda: reader.read(100),
            }[kind]())
            if kind != "read":
                await asyncio.sleep(0)
                peer_writer.write_eof()
            if kind == "readexactly":
                with pytest.raises(asyncio.IncompleteReadError) as caught:
                    await pending
                assert (caught.value.partial, caught.value.expected) == (b"partial", 100)
            elif kind in ("readuntil", "read_to_data"):
                with pytest.raises(asyncio.IncompleteReadError) as caught:
                    await pending
                assert (caught.value.partial, caught.value.expected) == (b"partial", None)
            elif kind == "readline":
                assert await pending == b"partial"
            else:
                assert await pending == b"partial"
                peer_writer.write_eof()
                assert await reader.read(100) == b""
            assert reader.at_eof(), kind
            writer.close()
            await writer.wait_closed()
            await peer.close()

    run(main())


@pytest.mark.parametrize("hosting", HOSTINGS)
def test_limits_raise_limit_overrun_and_leave_the_bytes(certs, hosting):
    async def main():
        reader, writer, _, peer_writer, peer = await connected_pair(False, certs, hosting, limit=16)
        # The separator beyond the limit, all at once: the read completes, then is refused.
        peer_writer.write(b"x" * 40 + b"\n")
        await peer_writer.drain()
        with pytest.raises(asyncio.LimitOverrunError) as caught:
            await reader.readuntil(b"\n")
        assert caught.value.consumed == 40
        assert await reader.readexactly(41) == b"x" * 40 + b"\n"  # nothing was lost
        # No separator, more than the limit: the read is withdrawn while it gathers.
        waiting = asyncio.ensure_future(reader.readuntil(b"\n"))
        await asyncio.sleep(0)
        peer_writer.write(b"y" * 40)
        await peer_writer.drain()
        with pytest.raises(asyncio.LimitOverrunError) as caught:
            await waiting
        assert caught.value.consumed > 16
        peer_writer.write(b"\n")
        assert await reader.readexactly(41) == b"y" * 40 + b"\n"
        # readline drops an overlong line (asyncio's behaviour) and raises ValueError.
        peer_writer.write(b"z" * 40 + b"\nnext\n")
        await peer_writer.drain()
        with pytest.raises(ValueError):
            await reader.readline()
        assert await reader.readline() == b"next\n"
        # SocketKit's framing has its own maximum instead.
        peer_writer.write(b"w" * 40 + b"\n")
        assert await reader.read_to_data(b"\n") == b"w" * 40 + b"\n"
        writer.close()
        await peer.close()

    run(main())


def test_async_iteration_lines_and_chunks(certs):
    async def main():
        reader, writer, _, peer_writer, peer = await connected_pair(False, certs)
        peer_writer.write(b"one\ntwo\nthree")
        peer_writer.write_eof()
        assert [line async for line in reader] == [b"one\n", b"two\n", b"three"]
        writer.close()
        await peer.close()
        reader, writer, _, peer_writer, peer = await connected_pair(False, certs)
        peer_writer.write(b"a\r\nb\r\nc")
        peer_writer.write_eof()
        assert [line async for line in reader.lines(b"\r\n")] == [b"a\r\n", b"b\r\n", b"c"]
        writer.close()
        await peer.close()
        reader, writer, _, peer_writer, peer = await connected_pair(False, certs)
        data = pattern(100_000, seed=4)
        peer_writer.write(data)
        peer_writer.write_eof()
        chunks = [chunk async for chunk in reader.chunks(4096)]
        assert b"".join(chunks) == data and all(len(chunk) <= 4096 for chunk in chunks)
        writer.close()
        await peer.close()

    run(main())


def test_one_reader_at_a_time(certs):
    async def main():
        reader, writer, _, peer_writer, peer = await connected_pair(False, certs)
        first = asyncio.ensure_future(reader.readline())
        await asyncio.sleep(0)
        with pytest.raises(RuntimeError):
            await reader.readline()
        peer_writer.write(b"x\n")
        assert await first == b"x\n"
        writer.close()
        await peer.close()

    run(main())


def test_write_eof_half_closes_and_the_answer_still_arrives(certs):
    async def main():
        reader, writer, peer_reader, peer_writer, peer = await connected_pair(False, certs)
        assert writer.can_write_eof()
        big = pattern(2_000_000, seed=6)
        writer.write(big)
        writer.write_eof()
        with pytest.raises(RuntimeError):
            writer.write(b"after eof")
        received = await peer_reader.read()  # everything, then the end
        assert received == big
        peer_writer.write(b"answer\n")
        await peer_writer.drain()
        assert await reader.readline() == b"answer\n"
        writer.close()
        await writer.wait_closed()
        await peer.close()

    run(main())


@pytest.mark.parametrize("hosting", HOSTINGS)
def test_after_write_eof_the_peers_end_still_gives_a_pending_read_its_partial_bytes(certs, hosting):
    """Both directions closed, ours first: the read waiting for more than came still gets
    what came (IncompleteReadError with the partial bytes), as with asyncio's streams."""
    async def main():
        reader, writer, peer_reader, peer_writer, peer = await connected_pair(False, certs, hosting)
        pending = asyncio.ensure_future(reader.readexactly(10))
        await asyncio.sleep(0)
        peer_writer.write(b"12345")
        await peer_writer.drain()
        writer.write_eof()
        assert await peer_reader.read() == b""  # our end
        peer_writer.close()
        with pytest.raises(asyncio.IncompleteReadError) as caught:
            await pending
        assert caught.value.partial == b"12345"
        assert reader.at_eof()
        writer.close()
        await peer.close()

    run(main())


def test_drain_waits_for_a_slow_reader_and_reports_a_reset(certs):
    async def main():
        reader, writer, peer_reader, peer_writer, peer = await connected_pair(False, certs)
        writer.socket.write_watermarks = (16 * 1024, 64 * 1024)
        chunk = pattern(64 * 1024, seed=7)
        drained = 0
        for _ in range(1024):  # at most 64 MiB, of which the kernel's buffers hold some
            writer.write(chunk)
            drain = asyncio.ensure_future(writer.drain())
            await asyncio.sleep(0)
            if not drain.done():
                break  # above the high watermark: waits for the reader
            drained += 1
        assert not drain.done(), "the peer reads nothing, yet drain() never waited"
        total = (drained + 1) * len(chunk)
        assert len(await peer_reader.readexactly(total)) == total
        await drain
        # A reset ends it: drain raises what ended the connection.
        peer_writer.transport.abort()
        with pytest.raises(ConnectionError):
            for _ in range(1000):
                writer.write(chunk)
                await writer.drain()
        writer.close()
        await peer.close()

    run(main())


@pytest.mark.parametrize("hosting", HOSTINGS)
def test_start_server_with_asyncio_clients(hosting):
    async def main():
        connections = []

        async def echo(reader, writer):
            connections.append(writer)
            async for line in reader:
                writer.write(line)
                await writer.drain()
            writer.close()

        options = {"loop_group": aio.loop_group()} if hosting == "driven" else {}
        async with await aio.start_server(echo, "127.0.0.1", 0, **options) as server:
            assert server.is_serving()
            host, port = server.sockets[0].getsockname()
            assert host == "127.0.0.1" and port == server.port

            async def client(index):
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
                lines = [f"client {index} line {number}\n".encode() for number in range(20)]
                for line in lines:
                    writer.write(line)
                await writer.drain()
                received = [await reader.readline() for _ in lines]
                writer.close()
                await writer.wait_closed()
                return received == lines

            assert all(await asyncio.gather(*(client(index) for index in range(25))))
        assert not server.is_serving()
        with pytest.raises(OSError):
            await asyncio.open_connection("127.0.0.1", port)
        aio.detach()

    run(main())


def test_serve_forever_start_serving_and_a_server_on_every_interface():
    async def main():
        async def hello(reader, writer):
            writer.write(b"hello\n")
            await writer.drain()
            writer.close()

        server = await aio.start_server(hello, None, 0, start_serving=False)
        assert not server.is_serving() and server.sockets == ()
        task = asyncio.ensure_future(server.serve_forever())
        await asyncio.sleep(0)
        assert server.is_serving()
        port = server.sockets[0].getsockname()[1]
        for host in ("127.0.0.1", "::1"):
            reader, writer = await asyncio.open_connection(host, port)
            assert await reader.readline() == b"hello\n"
            writer.close()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert not server.is_serving()
        await server.wait_closed()

        several = await aio.start_server(hello, ["127.0.0.1", "::1"], 0)
        assert len(several.sockets) == 2
        assert len({sock.getsockname()[1] for sock in several.sockets}) == 1  # one port for both
        several.close()
        await several.wait_closed()

    run(main())


def test_a_handler_that_raises_reaches_the_loops_exception_handler():
    async def main():
        loop = asyncio.get_running_loop()
        reported = loop.create_future()
        loop.set_exception_handler(lambda loop_, context: reported.done() or reported.set_result(context))

        async def broken(reader, writer):
            await reader.readline()
            raise KeyError("the handler's bug")

        server = await aio.start_server(broken, "127.0.0.1", 0)
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        writer.write(b"go\n")
        context = await reported
        assert context["message"] == "Unhandled exception in client_connected_cb"
        assert isinstance(context["exception"], KeyError)
        assert isinstance(context["transport"], aio.StreamWriter)
        assert await reader.read() == b""  # the connection of the failed handler was closed
        writer.close()
        server.close()
        await server.wait_closed()

    run(main())


def test_unix_domain_streams(tmp_path):
    async def main():
        path = str(tmp_path / "streams.sock")

        async def reverse(reader, writer):
            data = await reader.readexactly(4)
            writer.write(data[::-1])
            await writer.drain()
            writer.close()

        async with await aio.start_unix_server(reverse, path):
            reader, writer = await aio.open_unix_connection(path)
            writer.write(b"abcd")
            assert await reader.read() == b"dcba"
            writer.close()
            await writer.wait_closed()
            # asyncio's own client against SocketKit's server, too.
            reader, writer = await asyncio.open_unix_connection(path)
            writer.write(b"wxyz")
            assert await reader.read() == b"zyxw"
            writer.close()

    run(main())


def test_adopting_a_connected_socket():
    async def main():
        listener = socket.create_server(("127.0.0.1", 0))
        raw = socket.create_connection(listener.getsockname())
        peer, _ = listener.accept()
        reader, writer = await aio.open_connection(sock=raw)
        assert raw.fileno() == -1  # detached: SocketKit owns the descriptor
        peer.sendall(b"adopted\n")
        assert await reader.readline() == b"adopted\n"
        writer.close()
        await writer.wait_closed()
        peer.close()
        listener.close()

    run(main())


def test_connection_errors_are_the_builtin_exceptions():
    async def main():
        probe = socket.socket()
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
        probe.close()
        with pytest.raises(ConnectionRefusedError):
            await aio.open_connection("127.0.0.1", port)
        with pytest.raises(socket.gaierror):
            await aio.open_connection("no-such-host.invalid", 80)
        with pytest.raises(FileNotFoundError):
            await aio.open_unix_connection("/tmp/socketkit-no-such-socket")

    run(main())


# ---- cancellation-safe reads ---------------------------------------------------------------

# (name, the read, what the peer sends before the read times out, what it sends after)
READS = [
    ("read", lambda reader: reader.read(100), b"", b"available"),
    ("readexactly", lambda reader: reader.readexactly(10), b"12345", b"67890"),
    ("readuntil", lambda reader: reader.readuntil(b"\r\n"), b"line par", b"t\r\n"),
    ("readuntil several", lambda reader: reader.readuntil((b"\r\n", b";")), b"first pa", b"rt;"),
    ("readline", lambda reader: reader.readline(), b"a line wi", b"th its end\n"),
    ("read_to_length", lambda reader: reader.read_to_length(10), b"abcde", b"fghij"),
    ("read_to_data", lambda reader: reader.read_to_data(b"\n"), b"to the ", b"separator\n"),
]


@pytest.mark.parametrize("hosting", HOSTINGS)
@pytest.mark.parametrize("tls", [False, True], ids=["plain", "tls"])
@pytest.mark.parametrize("name, read, before, after", READS, ids=[entry[0] for entry in READS])
def test_a_read_cancelled_by_wait_for_loses_nothing_and_keeps_the_connection(certs, tls, name, read, before,
                                                                              after, hosting):
    """SocketKit's readuntil takes several separators on every Python version (asyncio's
    from 3.13). With the driven hosting the callbacks come straight from SocketKit's loop,
    inside the calls that cause them (a withdrawal answered at once)."""
    async def main():
        reader, writer, peer_reader, peer_writer, peer = await connected_pair(tls, certs, hosting)
        if before:
            peer_writer.write(before)
            await peer_writer.drain()
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(read(reader), SHORT)
        # The connection is still there, both ways.
        writer.write(b"still here\n")
        await writer.drain()
        assert await peer_reader.readline() == b"still here\n"
        peer_writer.write(after)
        await peer_writer.drain()
        # The next read, of any kind, gets every byte, in order.
        assert await read(reader) == before + after
        peer_writer.write(b"+more")
        assert await reader.readexactly(5) == b"+more"
        writer.close()
        await writer.wait_closed()
        await peer.close()
        aio.detach()

    run(main())


@pytest.mark.parametrize("tls", [False, True], ids=["plain", "tls"])
def test_a_read_whose_bytes_arrived_before_its_cancellation_reached_the_loop_gives_them_back(certs, tls):
    """The engine completed the read and its bytes wait in the loop's queue when the task
    is cancelled: the read is withdrawn (cancel_read), its did_read comes first anyway, and
    its bytes are given back (unread) before the next read starts."""
    async def main():
        listener = socket.create_server(("127.0.0.1", 0))
        options = {"ssl": certs.client(), "server_hostname": "localhost"} if tls else {}
        connecting = asyncio.ensure_future(aio.open_connection("127.0.0.1", listener.getsockname()[1], **options))
        raw, _ = await asyncio.get_running_loop().run_in_executor(None, listener.accept)
        if tls:
            context = server_context(certs)
            peer = await asyncio.get_running_loop().run_in_executor(
                None, lambda: context.wrap_socket(raw, server_side=True))
        else:
            peer = raw
        reader, writer = await connecting
        for line in (b"first whole line\n", b"second whole line\n"):
            task = asyncio.ensure_future(reader.readline())
            await asyncio.sleep(0)  # the read is queued with SocketKit
            peer.sendall(line)
            # Without yielding to the loop: wait until SocketKit has handed the read's
            # event to the loop's queue (its descriptor turns readable), then cancel.
            readable, _, _ = select.select([aio.queue().fileno()], [], [], WAIT)
            assert readable
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert await reader.readline() == line
        writer.close()
        await writer.wait_closed()
        peer.close()
        listener.close()

    run(main())


@pytest.mark.parametrize("hosting", HOSTINGS)
def test_a_read_cancelled_after_its_result_was_set_gives_the_bytes_back(certs, hosting, monkeypatch):
    """The read completed and its future has its bytes, but the task is cancelled before
    it runs: the bytes are unread, and the next read gets them."""
    state = {"cancel": None}
    original = _connection.Connection.socket_did_read

    def socket_did_read(self, sock, data, tag):
        original(self, sock, data, tag)
        if state["cancel"] is not None:
            state["cancel"].cancel()  # after set_result, before the task runs
            state["cancel"] = None

    monkeypatch.setattr(_connection.Connection, "socket_did_read", socket_did_read)

    async def main():
        reader, writer, _, peer_writer, peer = await connected_pair(False, certs, hosting)
        for kind in ("readline", "readexactly", "read"):
            task = asyncio.ensure_future({"readline": reader.readline, "readexactly": lambda: reader.readexactly(6),
                                          "read": lambda: reader.read(100)}[kind]())
            await asyncio.sleep(0)
            state["cancel"] = task
            peer_writer.write(b"bytes\n")
            await peer_writer.drain()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert state["cancel"] is None, "the read never completed"
            assert await reader.readexactly(6) == b"bytes\n", kind
        writer.close()
        await peer.close()
        aio.detach()

    run(main())


def test_a_cancelled_read_at_the_end_of_the_stream_loses_nothing(certs):
    async def main():
        reader, writer, _, peer_writer, peer = await connected_pair(False, certs)
        peer_writer.write(b"no separator")
        await peer_writer.drain()
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(reader.readuntil(b"\n"), SHORT)
        peer_writer.write_eof()
        with pytest.raises(asyncio.IncompleteReadError) as caught:
            await reader.readuntil(b"\n")
        assert caught.value.partial == b"no separator"
        assert reader.at_eof()
        writer.close()
        await peer.close()

    run(main())


# ---- TLS -----------------------------------------------------------------------------------

def test_tls_connections_and_their_extra_info(certs):
    async def main():
        reader, writer, peer_reader, peer_writer, peer = await connected_pair(True, certs)
        ssl_object = writer.get_extra_info("ssl_object")
        assert ssl_object.version() in ("TLSv1.2", "TLSv1.3")
        assert "CN=localhost" in ssl_object.getpeercert()["subject"]
        assert isinstance(writer.get_extra_info("peercert"), dict)
        assert writer.get_extra_info("cipher")[1] == ssl_object.version()
        assert not writer.can_write_eof()
        writer.write(b"secret\n")
        assert await peer_reader.readline() == b"secret\n"
        peer_writer.write(b"reply\n")
        assert await reader.readline() == b"reply\n"
        writer.close()
        await writer.wait_closed()
        await peer.close()

        # A server of ours, with ssl_context(settings) (an ssl.SSLContext), and asyncio's
        # client with a plain SSLContext.
        async def hello(reader, writer):
            assert writer.get_extra_info("ssl_object") is not None
            writer.write(await reader.readline())
            await writer.drain()
            writer.close()

        context = aio.ssl_context(certs.server())
        assert isinstance(context, ssl.SSLContext)
        async with await aio.start_server(hello, "127.0.0.1", 0, ssl=context) as server:
            client = ssl.create_default_context(cafile=certs.path("ca.pem"))
            reader, writer = await asyncio.open_connection("127.0.0.1", server.port, ssl=client,
                                                          server_hostname="localhost")
            writer.write(b"over tls\n")
            assert await reader.readline() == b"over tls\n"
            writer.close()
            # And ours with that plain client context (SocketKit reads what it says).
            reader, writer = await aio.open_connection("127.0.0.1", server.port, ssl=client,
                                                      server_hostname="localhost")
            writer.write(b"read back\n")
            assert await reader.readline() == b"read back\n"
            writer.close()
            with pytest.raises(ssl.SSLCertVerificationError):
                await aio.open_connection("127.0.0.1", server.port, ssl=True, server_hostname="localhost")
            with pytest.raises(ValueError):
                await aio.open_connection("127.0.0.1", server.port, ssl=context)  # a server's settings

    run(main())


def test_starttls_on_both_sides(certs):
    async def main():
        async def smtp_like(reader, writer):
            assert await reader.readline() == b"STARTTLS\n"
            writer.write(b"220 go ahead\n")
            await writer.drain()
            info = await writer.start_tls(certs.server())
            assert info.protocol_version == "TLSv1.3"
            writer.write(b"250 " + await reader.readline())
            await writer.drain()
            writer.close()

        async with await aio.start_server(smtp_like, "127.0.0.1", 0) as server:
            reader, writer = await aio.open_connection("127.0.0.1", server.port)
            writer.write(b"STARTTLS\n")
            assert await reader.readline() == b"220 go ahead\n"
            assert writer.get_extra_info("ssl_object") is None
            await writer.start_tls(certs.client(), server_hostname="localhost")
            assert writer.get_extra_info("ssl_object").version() == "TLSv1.3"
            writer.write(b"EHLO secret\n")
            assert await reader.readline() == b"250 EHLO secret\n"
            writer.close()
            await writer.wait_closed()

    run(main())


def test_a_failed_server_handshake_goes_to_on_tls_error_and_not_to_the_handler(certs):
    async def main():
        failure = asyncio.get_running_loop().create_future()

        async def never(reader, writer):  # pragma: no cover - must not run
            raise AssertionError("the handler ran for a connection whose handshake failed")

        server = await aio.start_server(never, "127.0.0.1", 0, ssl=certs.server("wrong-host"),
                                        on_tls_error=failure.set_result)
        with pytest.raises(ssl.SSLCertVerificationError):
            await aio.open_connection("localhost", server.port, ssl=certs.client())
        assert isinstance(await failure, ssl.SSLError)
        server.close()
        with pytest.raises(socketkit.TLSSettingsError):
            await aio.start_server(never, "127.0.0.1", 0, ssl=socketkit.TLSSettings("server"))

    run(main())


# ---- the former API --------------------------------------------------------------------------

def test_the_former_start_server_still_works_and_warns():
    async def main():
        async def echo(connection):
            assert isinstance(connection, aio.AsyncSocket)
            await connection.write(await connection.read_to_data(b"\n"))

        with pytest.warns(DeprecationWarning):
            server = await aio.start_server(echo)
        reader, writer = await aio.open_connection("127.0.0.1", server.port)
        writer.write(b"old\n")
        assert await reader.readline() == b"old\n"
        writer.close()
        server.close()

    run(main())


def test_async_socket_reads_are_cancellation_safe_and_its_delegate_is_private():
    async def main():
        assert not [name for name in dir(aio.AsyncSocket) if name.startswith("socket_")]
        assert not [name for name in dir(aio.StreamReader) + dir(aio.StreamWriter) + dir(aio.Server)
                    if name.startswith(("socket_", "udp_socket_"))]
        listener = socket.create_server(("127.0.0.1", 0))
        connection = await aio.AsyncSocket.connect("127.0.0.1", listener.getsockname()[1], timeout=5)
        peer, _ = listener.accept()
        peer.sendall(b"first li")
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(connection.read_to_data(b"\n"), SHORT)
        peer.sendall(b"ne\nsecond line\n")
        assert await connection.read_to_data(b"\n") == b"first line\n"
        assert await connection.read_to_data(b"\n") == b"second line\n"
        async with connection:
            pass
        peer.close()
        listener.close()

    run(main())
