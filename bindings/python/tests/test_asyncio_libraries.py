# SPDX-License-Identifier: MIT
"""A third-party asyncio library, unchanged, over SocketKit: aiohttp's client and server
(HTTP and WebSocket) on socketkit.aio's event loop, in the clear and over TLS (SocketKit's
TLS through aio.ssl_context, and the standard library's for a plain SSLContext), against
each other and against aiohttp on asyncio's own loop in another thread.

aiohttp comes from PyPI (bindings/python/requirements-test.txt pins the version that
installs on every CPython from 3.9 to 3.13); without it these tests are skipped."""
import asyncio
import ssl
import threading

import pytest

import socketkit
from socketkit import aio

from conftest import WAIT, pattern

aiohttp = pytest.importorskip("aiohttp", reason="aiohttp is not installed (pip install -r requirements-test.txt)")
from aiohttp import web  # noqa: E402


def run(coroutine):
    return aio.run(asyncio.wait_for(coroutine, 120))


def application():
    async def hello(request):
        transport = request.transport
        return web.json_response({
            "name": request.match_info["name"],
            "secure": request.secure,
            "transport": type(transport).__name__,
            "loop": type(asyncio.get_running_loop()).__name__,
        })

    async def echo(request):
        response = web.StreamResponse()
        await response.prepare(request)
        async for chunk in request.content.iter_chunked(64 * 1024):
            await response.write(chunk)
        await response.write_eof()
        return response

    async def websocket(request):
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        async for message in ws:
            if message.type == aiohttp.WSMsgType.TEXT:
                await ws.send_str(message.data.upper())
            elif message.type == aiohttp.WSMsgType.BINARY:
                await ws.send_bytes(message.data[::-1])
        return ws

    app = web.Application()
    app.router.add_get("/hello/{name}", hello)
    app.router.add_post("/echo", echo)
    app.router.add_get("/ws", websocket)
    return app


async def serve(ssl_context=None):
    runner = web.AppRunner(application())
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=ssl_context)
    await site.start()
    return runner, runner.addresses[0][1]


async def exercise(base, client_ssl=None, expect_loop="EventLoop"):
    """Requests, a streamed body both ways, concurrent requests and a WebSocket."""
    connector = aiohttp.TCPConnector(ssl=client_ssl if client_ssl is not None else False, limit=8)
    async with aiohttp.ClientSession(connector=connector) as session:
        async with session.get(f"{base}/hello/alice") as response:
            assert response.status == 200
            body = await response.json()
            assert body["name"] == "alice" and body["loop"] == expect_loop
            assert body["secure"] == base.startswith("https")
        payload = pattern(3_000_000, seed=11)
        async with session.post(f"{base}/echo", data=payload) as response:
            assert await response.read() == payload

        async def one(index):
            async with session.get(f"{base}/hello/n{index}") as response:
                return (await response.json())["name"]

        assert await asyncio.gather(*(one(index) for index in range(40))) == [f"n{index}" for index in range(40)]
        async with session.ws_connect(f"{base.replace('http', 'ws', 1)}/ws") as ws:
            await ws.send_str("over socketkit")
            assert (await ws.receive()).data == "OVER SOCKETKIT"
            await ws.send_bytes(b"\x00\x01\x02")
            assert (await ws.receive()).data == b"\x02\x01\x00"
            await ws.close()
        return body


def test_aiohttp_client_and_server_over_socketkit():
    async def main():
        runner, port = await serve()
        body = await exercise(f"http://127.0.0.1:{port}")
        assert body["transport"] == "SocketTransport"
        await runner.cleanup()

    run(main())


@pytest.mark.parametrize("server_kind", ["socketkit", "stdlib"])
@pytest.mark.parametrize("client_kind", ["socketkit", "stdlib"])
def test_aiohttp_over_tls(certs, server_kind, client_kind):
    """SocketKit's TLS where the context carries SocketKit settings (aio.ssl_context), the
    standard library's over a SocketKit connection for a plain SSLContext; aiohttp sees an
    ssl.SSLContext either way."""
    async def main():
        if server_kind == "socketkit":
            server_ssl = aio.ssl_context(certs.server())
        else:
            server_ssl = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            server_ssl.load_cert_chain(certs.path("server-chain.pem"), certs.path("server.key"))
        if client_kind == "socketkit":
            client_ssl = aio.ssl_context(certs.client())
        else:
            client_ssl = ssl.create_default_context(cafile=certs.path("ca.pem"))
        runner, port = await serve(server_ssl)
        body = await exercise(f"https://localhost:{port}", client_ssl)
        assert body["secure"] is True
        # A server the client does not trust: aiohttp's certificate error, as with the
        # standard library (SocketKit's errors are ssl.SSLCertVerificationError).
        untrusting = aio.ssl_context(socketkit.TLSSettings.client()) if client_kind == "socketkit" \
            else ssl.create_default_context()
        async with aiohttp.ClientSession() as session:
            with pytest.raises(aiohttp.ClientConnectorCertificateError):
                await session.get(f"https://localhost:{port}/hello/x", ssl=untrusting)
        await runner.cleanup()

    run(main())


def test_aiohttp_on_socketkit_against_aiohttp_on_asyncios_own_loop(certs):
    """Peers we did not write: the server runs on asyncio's own loop in another thread."""
    ready = threading.Event()
    stop = threading.Event()
    state = {}

    def other_loop():
        async def main():
            server_ssl = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            server_ssl.load_cert_chain(certs.path("server-chain.pem"), certs.path("server.key"))
            plain_runner, plain_port = await serve()
            tls_runner, tls_port = await serve(server_ssl)
            state["ports"] = (plain_port, tls_port)
            ready.set()
            while not stop.is_set():
                await asyncio.sleep(0.05)
            await plain_runner.cleanup()
            await tls_runner.cleanup()

        asyncio.run(main())

    thread = threading.Thread(target=other_loop, name="asyncio-aiohttp-server")
    thread.start()
    try:
        assert ready.wait(WAIT)
        plain_port, tls_port = state["ports"]

        async def main():
            await exercise(f"http://127.0.0.1:{plain_port}", expect_loop="_UnixSelectorEventLoop")
            await exercise(f"https://localhost:{tls_port}", aio.ssl_context(certs.client()),
                           expect_loop="_UnixSelectorEventLoop")

        run(main())
    finally:
        stop.set()
        thread.join(WAIT)
