# SPDX-License-Identifier: MIT
"""asyncio integration: delegates on the loop's thread, awaitable helpers, and interop with
asyncio's own streams in both directions."""
import asyncio
import socket
import threading

import pytest

import socketkit
from socketkit import aio
from conftest import pattern


def run(coroutine):
    return asyncio.run(asyncio.wait_for(coroutine, 30))


def test_delegate_methods_run_on_the_event_loop_thread():
    async def main():
        loop_thread = threading.get_ident()
        seen = []
        done = asyncio.get_running_loop().create_future()

        class Client:
            def socket_did_connect(self, sock, host, port):
                seen.append(threading.get_ident())
                sock.write(b"ping\n")
                sock.read_to_data(socketkit.LF)

            def socket_did_read(self, sock, data, tag):
                seen.append(threading.get_ident())
                done.set_result(bytes(data))

        async def echo(reader, writer):
            writer.write(await reader.readline())
            await writer.drain()
            writer.close()

        server = await asyncio.start_server(echo, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        client = Client()
        sock = socketkit.Socket(client, queue=aio.queue())
        sock.connect_to_host("127.0.0.1", port, timeout=5)
        assert await done == b"ping\n"
        assert seen == [loop_thread, loop_thread]
        sock.close()
        server.close()
        await server.wait_closed()
        aio.detach()

    run(main())


def test_async_socket_against_an_asyncio_server():
    async def main():
        async def handle(reader, writer):
            line = await reader.readuntil(b"\r\n")
            writer.write(line.upper() + pattern(100_000))
            await writer.drain()
            writer.close()

        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        sock = await aio.AsyncSocket.connect("127.0.0.1", port, timeout=5)
        await sock.write(b"hello\r\n")
        assert await sock.read_to_data(b"\r\n") == b"HELLO\r\n"
        assert await sock.read_to_length(100_000) == pattern(100_000)
        with pytest.raises(socketkit.ClosedError):
            await sock.read()
        await sock.close()
        server.close()
        await server.wait_closed()

    run(main())


def test_socketkit_server_with_asyncio_clients():
    async def main():
        async def echo(connection):
            while True:
                try:
                    line = await connection.read_to_data(b"\n", max_length=1 << 20)
                except socketkit.ClosedError:
                    return
                await connection.write(line)

        async with await aio.start_server(echo, "127.0.0.1", 0) as server:
            async def client(index):
                reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
                lines = [f"client {index} line {number}\n".encode() for number in range(20)]
                for line in lines:
                    writer.write(line)
                await writer.drain()
                received = [await reader.readline() for _ in lines]
                writer.close()
                await writer.wait_closed()
                return received == lines

            assert all(await asyncio.gather(*(client(index) for index in range(25))))

    run(main())


def test_errors_arrive_as_exceptions():
    async def main():
        probe = socket.socket()
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
        probe.close()
        with pytest.raises(socketkit.ConnectionRefusedError):
            await aio.AsyncSocket.connect("127.0.0.1", port, timeout=5)

        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        sock = await aio.AsyncSocket.connect("127.0.0.1", listener.getsockname()[1], timeout=5)
        with pytest.raises(socketkit.ReadTimeoutError):
            await sock.read(timeout=0.1)
        with pytest.raises(socketkit.ReadTimeoutError):
            await sock.read()  # the connection ended with that error
        sock.abort()
        listener.close()

    run(main())


def test_unix_servers_and_clients():
    async def main():
        import tempfile
        path = tempfile.mktemp(prefix="sk-aio-", suffix=".sock", dir="/tmp")

        async def handle(connection):
            data = await connection.read_to_length(4)
            await connection.write(data[::-1])

        server = await aio.start_unix_server(handle, path)
        sock = await aio.AsyncSocket.connect_unix(path, timeout=5)
        await sock.write(b"abcd")
        assert await sock.read_to_length(4) == b"dcba"
        await sock.close()
        server.close()
        await server.wait_closed()

    run(main())


@pytest.mark.parametrize("queue_kind", ["aio.queue", "None", "SerialQueue"])
def test_a_loop_group_driven_by_asyncio_serves_on_its_thread(queue_kind):
    """aio.loop_group(): SocketKit's loop has no thread; asyncio runs it. I/O, delegate
    methods and the writes they make all happen on the asyncio thread, whether delegate
    methods come from aio.queue() or straight from the loop (queue None). With a
    SerialQueue they run on its thread, which takes the GIL for each while the asyncio
    thread runs the loop's iterations (without the GIL: see the SerialQueue listener test
    below)."""
    async def main():
        loop_thread = threading.get_ident()
        threads = set()
        connections = set()

        class Echo:
            def socket_did_accept(self, listener, connection):
                threads.add(threading.get_ident())
                connections.add(connection)
                connection.read()

            def socket_did_read(self, sock, data, tag):
                threads.add(threading.get_ident())
                sock.write(data)
                sock.read()

        group = aio.loop_group()
        assert aio.loop_group() is group  # one per asyncio loop
        serial = socketkit.SerialQueue("aio-serial") if queue_kind == "SerialQueue" else None
        queue = aio.queue() if queue_kind == "aio.queue" else serial
        listener = socketkit.Socket(Echo(), queue=queue, loop_group=group)
        listener.accept_on_interface("127.0.0.1", 0)
        reader, writer = await asyncio.open_connection("127.0.0.1", listener.local_port)
        expected = b""
        for index in range(200):
            line = b"line %d " % index + pattern(index * 50) + b"\n"
            expected += line
            writer.write(line)
        await writer.drain()
        received = await reader.readexactly(len(expected))
        assert received == expected
        if serial is None:
            assert threads == {loop_thread}
        else:
            assert len(threads) == 1 and loop_thread not in threads
        writer.close()
        aio.detach()  # closes the group: its sockets disconnect
        with pytest.raises(socketkit.Error):
            listener.read()

    run(main())


def test_timers_of_a_driven_loop_group_fire():
    """Nothing arrives: only the read's timer can wake the asyncio loop."""
    async def main():
        failure = asyncio.get_running_loop().create_future()

        class Client:
            def socket_did_connect(self, sock, host, port):
                sock.read(timeout=0.2)

            def socket_did_disconnect(self, sock, error):
                failure.set_result(error)

        async def silent(reader, writer):
            await reader.read()
            writer.close()

        server = await asyncio.start_server(silent, "127.0.0.1", 0)
        client = Client()
        sock = socketkit.Socket(client, queue=aio.queue(), loop_group=aio.loop_group())
        sock.connect_to_host("127.0.0.1", server.sockets[0].getsockname()[1], timeout=5)
        assert isinstance(await failure, socketkit.ReadTimeoutError)
        sock.close()
        server.close()
        await server.wait_closed()
        aio.detach()

    run(main())


def test_a_driven_loop_group_belongs_to_the_thread_that_made_it():
    group = socketkit.LoopGroup.driven()
    assert group.fileno() >= 0
    assert group.run_once() is False  # nothing to do
    outcome = []

    def intruder():
        try:
            group.run_once()
        except socketkit.Error as error:
            outcome.append(type(error))

    thread = threading.Thread(target=intruder)
    thread.start()
    thread.join()
    assert outcome == [socketkit.BadConfigError]
    group.close()
    with pytest.raises(socketkit.InvalidHandleError):
        group.run_once()
    threaded = socketkit.LoopGroup(1)
    try:
        with pytest.raises(socketkit.BadConfigError):
            threaded.fileno()
    finally:
        threaded.close()

    async def elsewhere():
        other = asyncio.new_event_loop()
        try:
            with pytest.raises(RuntimeError):
                aio.loop_group(other)
        finally:
            other.close()

    run(elsewhere())


def test_closing_a_driven_loop_group_directly_or_from_another_thread():
    """Either way its sockets disconnect, asyncio stops watching its descriptor, and
    aio.loop_group() then makes a fresh group that works."""
    async def main():
        for closer in ("direct", "thread"):
            gone = asyncio.get_running_loop().create_future()

            class Listener:
                def socket_did_disconnect(self, sock, error):
                    gone.set_result(error)

            group = aio.loop_group()
            listener = socketkit.Socket(Listener(), queue=aio.queue(), loop_group=group)
            listener.accept_on_interface("127.0.0.1", 0)
            if closer == "direct":
                group.close()
            else:
                thread = threading.Thread(target=group.close)
                thread.start()
                thread.join()
            assert isinstance(await gone, socketkit.BadConfigError)
            # The run that delivered the disconnect also finished the stop and forgot the group.
            fresh = aio.loop_group()
            assert fresh is not group
            listener.close()
        # The fresh group serves connections.
        connections = set()

        class Echo:
            def socket_did_accept(self, listener, connection):
                connections.add(connection)
                connection.read()

            def socket_did_read(self, sock, data, tag):
                sock.write(data)
                sock.read()

        server = socketkit.Socket(Echo(), queue=aio.queue(), loop_group=aio.loop_group())
        server.accept_on_interface("127.0.0.1", 0)
        reader, writer = await asyncio.open_connection("127.0.0.1", server.local_port)
        writer.write(b"still here\n")
        assert await reader.readline() == b"still here\n"
        writer.close()
        aio.detach()

    run(main())


def test_lent_writes_from_the_asyncio_thread_between_iterations_arrive_and_are_released():
    """On a driven group's host thread, outside any callback, a write goes to the kernel at
    once: bytes objects the C extension lends (from 16 KiB) are then released inside the
    call, and the rest of a large one is released once written."""
    import sys

    async def main():
        connected = asyncio.get_running_loop().create_future()

        class Client:
            def socket_did_connect(self, sock, host, port):
                connected.set_result(True)

        server = socket.socket()
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        server.setblocking(False)
        sock = socketkit.Socket(Client(), queue=None, loop_group=aio.loop_group())
        sock.connect_to_host("127.0.0.1", server.getsockname()[1], timeout=5)
        peer, _ = await asyncio.get_running_loop().sock_accept(server)
        await connected
        small, large = pattern(20_000, seed=8), pattern(24 << 20, seed=9)
        counts = sys.getrefcount(small), sys.getrefcount(large)
        sock.write(small)
        assert sys.getrefcount(small) == counts[0], "sent whole at once: released inside the call"
        sock.write(large)
        received = bytearray()
        while len(received) < len(small) + len(large):
            received += await asyncio.get_running_loop().sock_recv(peer, 1 << 20)
        assert received == small + large
        # One thread: the loop iteration that sent the last bytes, and released them, ran
        # before this coroutine could receive them.
        assert sys.getrefcount(large) == counts[1]
        sock.close()
        peer.close()
        server.close()
        aio.detach()

    run(main())


_SERIAL_LISTENER_ON_A_DRIVEN_GROUP = r"""
import asyncio
import socketkit
from socketkit import aio


async def main():
    accepted = []

    class Listener:
        def socket_did_accept(self, listener, connection):
            accepted.append(connection)
            total = 0
            for index in range(20000):  # Python work on the SerialQueue's thread, with the GIL
                total += index
            connection.read()

        def socket_did_read(self, sock, data, tag):
            sock.write(data)
            sock.read()

    listener = socketkit.Socket(Listener(), queue=socketkit.SerialQueue("accepts"), loop_group=aio.loop_group())
    listener.accept_on_interface("127.0.0.1", 0)

    async def client(index):
        reader, writer = await asyncio.open_connection("127.0.0.1", listener.local_port)
        writer.write(b"hello %d\n" % index)
        await writer.drain()
        assert await reader.readline() == b"hello %d\n" % index
        writer.close()

    for _ in range(10):
        await asyncio.gather(*(client(index) for index in range(50)))
    print("served", len(accepted), flush=True)
    aio.detach()


asyncio.run(main())
"""


_READ_THEN_GATE_WAIT_IN_ONE_ITERATION = r"""
import asyncio
import socket
import threading

import socketkit
from socketkit import aio


async def main():
    loop = asyncio.get_running_loop()
    group = aio.loop_group()
    in_accept = threading.Event()
    finish_accept = threading.Event()
    accepted = []
    reads = []
    read_done = loop.create_future()
    second_accepted = loop.create_future()

    class Listener:
        def socket_did_accept(self, listener, connection):
            accepted.append(connection)
            if len(accepted) == 1:
                in_accept.set()
                # Holds the listener's callback gate until the read below lets it go on.
                assert finish_accept.wait(30)
            else:
                loop.call_soon_threadsafe(second_accepted.set_result, None)

    class Reader:
        def socket_did_read(self, sock, data, tag):
            reads.append(data)
            # On the asyncio thread, inside run_once: the SerialQueue's thread wakes and
            # needs the GIL to return from socket_did_accept, while this thread goes on to
            # the iteration's next event, an accept that waits for that callback's gate.
            finish_accept.set()
            read_done.set_result(None)

    listener = socketkit.Socket(Listener(), queue=socketkit.SerialQueue("accepts"), loop_group=group)
    listener.accept_on_interface("127.0.0.1", 0)
    plain = socket.create_server(("127.0.0.1", 0))
    reader = socketkit.Socket(Reader(), queue=None, loop_group=group)
    reader.connect_to_host("127.0.0.1", plain.getsockname()[1], timeout=10)
    peer, _ = plain.accept()
    reader.read()

    first = socket.create_connection(("127.0.0.1", listener.local_port))
    assert await asyncio.to_thread(in_accept.wait, 30)
    # Both ready before the asyncio thread runs the next iteration, the read first.
    peer.sendall(b"x")
    second = socket.create_connection(("127.0.0.1", listener.local_port))
    await read_done
    await second_accepted
    print("accepted", len(accepted), "read", reads, flush=True)
    for sock in (first, second, peer, plain):
        sock.close()
    reader.close()
    listener.close()
    aio.detach()


asyncio.run(main())
"""


def test_an_iteration_that_read_on_the_asyncio_thread_drops_the_gil_before_waiting_for_a_callback_gate():
    """With the C extension the asyncio thread keeps the GIL from one C read callback of an
    iteration to the next. Here the iteration's next event is an accept that waits for the
    listener's callback gate, held by a SerialQueue thread that needs the GIL to finish
    socket_did_accept: SocketKit's wait hook must drop the GIL first (without it, this hangs
    every time). In a subprocess, so a deadlock fails the test instead of hanging the suite."""
    import subprocess
    import sys
    result = subprocess.run([sys.executable, "-c", _READ_THEN_GATE_WAIT_IN_ONE_ITERATION], capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "accepted 2 read [b'x']"


_NESTED_ITERATION_WAITS_FOR_A_GATE = r"""
import select
import socket
import threading
import time

import socketkit

outer = socketkit.LoopGroup.driven()
inner = socketkit.LoopGroup.driven()
in_accept = threading.Event()
finish_accept = threading.Event()
accepted = []
inner_reads = []
outer_reads = []


def drive(group, done):
    # Runs the group's iterations until done() (set by this thread or another), waiting on
    # the group's descriptor in short slices so a change made by another thread is seen.
    deadline = time.monotonic() + 30
    while not done():
        assert time.monotonic() < deadline, "gave up waiting"
        readable, _, _ = select.select([group.fileno()], [], [], 0.01)
        if readable:
            while group.run_once():
                pass


class Listener:
    def socket_did_accept(self, listener, connection):
        accepted.append(connection)
        if len(accepted) == 1:
            in_accept.set()
            assert finish_accept.wait(30)  # holds the listener's gate meanwhile


class InnerReader:
    def socket_did_read(self, sock, data, tag):
        inner_reads.append(data)
        finish_accept.set()  # the SerialQueue's thread now needs the GIL, which this iteration keeps


class OuterReader:
    def socket_did_read(self, sock, data, tag):
        # A C callback of the outer group's iteration runs an iteration of the inner group:
        # its callbacks count from zero there, so its wait hook may drop the GIL.
        drive(inner, lambda: len(accepted) == 2)
        outer_reads.append(data)


def connected_reader(delegate, group):
    plain = socket.create_server(("127.0.0.1", 0))
    sock = socketkit.Socket(delegate, queue=None, loop_group=group)
    sock.connect_to_host("127.0.0.1", plain.getsockname()[1], timeout=10)
    peer, _ = plain.accept()
    sock.read()
    return sock, peer, plain


listener = socketkit.Socket(Listener(), queue=socketkit.SerialQueue("accepts"), loop_group=inner)
listener.accept_on_interface("127.0.0.1", 0)
inner_reader, inner_peer, inner_plain = connected_reader(InnerReader(), inner)
outer_reader, outer_peer, outer_plain = connected_reader(OuterReader(), outer)
first = socket.create_connection(("127.0.0.1", listener.local_port))
drive(inner, in_accept.is_set)
inner_peer.sendall(b"x")  # ready before the accept below: the inner iteration reads first
second = socket.create_connection(("127.0.0.1", listener.local_port))
outer_peer.sendall(b"go")
drive(outer, lambda: outer_reads)
print("accepted", len(accepted), "reads", inner_reads, outer_reads, flush=True)
for sock in (first, second, inner_peer, inner_plain, outer_peer, outer_plain):
    sock.close()
for sock in (inner_reader, outer_reader, listener):
    sock.close()
inner.close()
outer.close()
"""


def test_an_iteration_run_from_a_callback_of_another_drops_the_gil_before_waiting_for_a_callback_gate():
    """The same wait as above, in an iteration of a second driven group that a read callback
    of the first one runs: the inner iteration's wait hook must drop the GIL although a
    callback of the outer one is running. In a subprocess, so a deadlock fails the test."""
    import subprocess
    import sys
    result = subprocess.run([sys.executable, "-c", _NESTED_ITERATION_WAITS_FOR_A_GATE], capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "accepted 2 reads [b'x'] [b'go']"


def test_a_serial_queue_listener_on_an_asyncio_driven_group_accepts_while_its_callbacks_run():
    """The asyncio thread runs the loop's iterations, which may wait for the listener's
    callback gate (to place a new connection) while the SerialQueue's thread holds it for
    socket_did_accept and needs the GIL: the iteration must not hold the GIL meanwhile (it
    did, briefly, and this hung every time). In a subprocess, so a deadlock fails the test
    instead of hanging the suite."""
    import subprocess
    import sys
    result = subprocess.run([sys.executable, "-c", _SERIAL_LISTENER_ON_A_DRIVEN_GROUP], capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "served 500"
