# SPDX-License-Identifier: MIT
"""An SMTP client that upgrades to TLS with STARTTLS, on SocketKit and asyncio.

    python starttls_client.py HOST PORT CA_FILE [PEER_NAME]

Reads the greeting, says EHLO, and once the server offers STARTTLS upgrades: the command,
the server's "220 ready" and the handshake are queued together (SocketKit's start_tls is a
marker in the socket's queues: the read before it runs in plaintext, what follows it
encrypted), then EHLO again over TLS and QUIT. The server's certificate is verified
against CA_FILE and PEER_NAME (default: HOST). Prints the dialogue; exits 0 when the
server said goodbye over TLS.
"""
import asyncio
import sys
from typing import List

import socketkit
from socketkit import aio


async def reply(sock: aio.AsyncSocket) -> List[str]:
    """One reply: its lines ("250-..." continues, "250 ..." ends it)."""
    lines = []
    while True:
        line = (await sock.read_to_data(socketkit.CRLF, max_length=1000, timeout=10)).decode().rstrip("\r\n")
        print(f"S: {line}")
        lines.append(line)
        if len(line) < 4 or line[3] != "-":
            return lines


async def say(sock: aio.AsyncSocket, command: str) -> None:
    print(f"C: {command}")
    await sock.write(command.encode() + b"\r\n", timeout=10)


async def main(host: str, port: int, ca_file: str, peer_name: str) -> int:
    settings = socketkit.TLSSettings.client(trust_file=ca_file, peer_name=peer_name)
    sock = await aio.AsyncSocket.connect(host, port, timeout=10)
    goodbye = False
    try:
        assert (await reply(sock))[0].startswith("220"), "no greeting"
        await say(sock, "EHLO client.example")
        extensions = await reply(sock)
        if not any(line[4:].upper() == "STARTTLS" for line in extensions):
            print("the server does not offer STARTTLS", file=sys.stderr)
            return 1
        # The upgrade, queued in one go: STARTTLS, the read of its answer, the handshake.
        command = sock.write(b"STARTTLS\r\n", timeout=10)
        ready = asyncio.ensure_future(reply(sock))
        secured = asyncio.ensure_future(sock.start_tls(settings))
        print("C: STARTTLS")
        await command
        assert (await ready)[0].startswith("220"), "STARTTLS refused"
        info = await secured
        print(f"-- TLS: {info.protocol_version}, {info.cipher}, the certificate of {peer_name} verified")
        await say(sock, "EHLO client.example")
        assert (await reply(sock))[0].startswith("250")
        await say(sock, "QUIT")
        goodbye = (await reply(sock))[0].startswith("221") and sock.is_secure
    finally:
        await sock.close()
    aio.detach()
    return 0 if goodbye else 1


if __name__ == "__main__":
    if len(sys.argv) not in (4, 5):
        sys.exit(f"usage: {sys.argv[0]} HOST PORT CA_FILE [PEER_NAME]")
    host = sys.argv[1]
    sys.exit(asyncio.run(main(host, int(sys.argv[2]), sys.argv[3], sys.argv[4] if len(sys.argv) == 5 else host)))
