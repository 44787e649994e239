# SPDX-License-Identifier: MIT
"""dist_smoke.py - what check-dist.sh runs in a new virtualenv with an installed wheel:
socketkit imports from site-packages, with its C extension and the library and OpenSSL the
wheel bundles, and a loopback echo works in plain TCP and in TLS.

    python dist_smoke.py CERTIFICATE_DIRECTORY   (made by Tests/certs/make-test-certs.sh)

Runs from outside the checkout with nothing else set (check-dist.sh uses `env -i`), so only
what the wheel installed can be found. Exit status 0 and a last line "dist-smoke: ok".
"""
import asyncio
import os
import sys

import socketkit
from socketkit import _ffi, aio

CERTS = sys.argv[1]


def check_installation() -> None:
    library = _ffi.lib._name
    assert "site-packages" in library and library.endswith(socketkit._version.SONAME), library
    assert socketkit.SPEEDUPS, "the C extension did not load"
    assert socketkit.__version__ == socketkit.LIBRARY_VERSION, (socketkit.__version__, socketkit.LIBRARY_VERSION)
    # The library's OpenSSL is the copy auditwheel bundled next to the package (nothing
    # else loads it); the interpreter's ssl module has the system's besides.
    with open("/proc/self/maps") as maps:
        mapped = {line.split()[-1] for line in maps if "libssl" in line or "libcrypto" in line}
    bundled = os.path.join(os.path.dirname(os.path.dirname(socketkit.__file__)), "socketkit.libs")
    for name in ("libssl-", "libcrypto-"):
        assert any(path.startswith(os.path.join(bundled, name)) for path in mapped), (name, mapped)


async def echo(connection: aio.AsyncSocket) -> None:
    try:
        while True:
            await connection.write(await connection.read_to_data(socketkit.LF, max_length=1024))
    except socketkit.ClosedError:
        pass


async def round_trip(tls: bool) -> None:
    server_tls = socketkit.TLSSettings.server(f"{CERTS}/server-chain.pem", f"{CERTS}/server.key") if tls else None
    client_tls = socketkit.TLSSettings.client(trust_file=f"{CERTS}/ca.pem", peer_name="localhost") if tls else None
    async with await aio.start_server(echo, "127.0.0.1", 0, tls=server_tls) as server:
        client = await aio.AsyncSocket.connect("127.0.0.1", server.port, timeout=5, tls=client_tls)
        await client.write(b"hello from the wheel\n")
        line = await client.read_to_data(socketkit.LF, timeout=5)
        assert line == b"hello from the wheel\n", line
        assert client.is_secure == tls
        await client.close()


async def main() -> None:
    check_installation()
    await round_trip(tls=False)
    await round_trip(tls=True)
    aio.detach()


if __name__ == "__main__":
    asyncio.run(main())
    print(f"dist-smoke: ok (socketkit {socketkit.__version__}, CPython {sys.version.split()[0]}, "
          f"library {_ffi.lib._name})")
