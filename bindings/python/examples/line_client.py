# SPDX-License-Identifier: MIT
"""A line-protocol client on SocketKit, without asyncio: a delegate object.

    python line_client.py HOST PORT

Sends each line of standard input and prints each reply. SocketKit calls the delegate's
methods on a SocketKit thread (its default callback queue); the main thread reads the
input and waits for the replies with a threading.Condition.
"""
import sys
import threading

import socketkit


class LineClient:
    """The delegate: counts the replies still owed, and how the connection ended."""

    def __init__(self) -> None:
        self.changed = threading.Condition()
        self.owed = 0
        self.ended = False
        self.error = None

    def socket_did_connect(self, sock: socketkit.Socket, host: str, port: int) -> None:
        print(f"connected to {host} port {port}", file=sys.stderr)

    def socket_did_read(self, sock: socketkit.Socket, data: bytes, tag: int) -> None:
        print(data.decode("utf-8", "replace").rstrip("\n"), flush=True)
        with self.changed:
            self.owed -= 1
            self.changed.notify_all()

    def socket_did_disconnect(self, sock: socketkit.Socket, error) -> None:
        with self.changed:
            self.ended, self.error = True, error
            self.changed.notify_all()


def main(host: str, port: int) -> int:
    client = LineClient()
    with socketkit.Socket(client) as sock:
        sock.connect_to_host(host, port, timeout=10)
        for line in sys.stdin.buffer:  # reads and writes are queued: no need to wait for the connect
            if not line.endswith(b"\n"):
                line += b"\n"
            with client.changed:
                client.owed += 1
            sock.write(line, timeout=10)
            sock.read_to_data(socketkit.LF, max_length=65536, timeout=10)
        with client.changed:
            client.changed.wait_for(lambda: client.owed == 0 or client.ended, timeout=30)
            failed = client.owed != 0
    if failed:
        print(f"no reply: {client.error}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(f"usage: {sys.argv[0]} HOST PORT")
    sys.exit(main(sys.argv[1], int(sys.argv[2])))
