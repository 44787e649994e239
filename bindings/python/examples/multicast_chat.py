# SPDX-License-Identifier: MIT
"""A chat over UDP multicast, on SocketKit.

    python multicast_chat.py NAME [PORT [GROUP [INTERFACE]]]

Every chat on the same GROUP (default 239.255.42.42) and PORT (default 4242) hears every
other: each line of standard input goes to the group as "NAME: line", and every line from
the others is printed. INTERFACE (default "lo": the chats of one machine) carries the
group both ways, with a TTL of 1. Several chats share the port (SO_REUSEPORT); each hears
its own lines too (multicast loopback) and skips them. Prints "joined GROUP:PORT on
INTERFACE as NAME" once it listens; ends at the end of its input, once its lines are sent.
"""
import sys
import threading

import socketkit


class Chat:
    """The delegate: prints what the others say, and tells when the socket has closed."""

    def __init__(self, name: str) -> None:
        self.own = f"{name}:".encode()
        self.closed = threading.Event()

    def udp_socket_did_receive(self, sock, data: bytes, address, context) -> None:
        if not data.startswith(self.own):
            print(data.decode("utf-8", "replace"), flush=True)

    def udp_socket_did_not_send(self, sock, tag: int, error) -> None:
        print(f"line {tag} not sent: {error}", file=sys.stderr)

    def udp_socket_did_close(self, sock, error) -> None:
        self.closed.set()


def main(name: str, port: int = 4242, group: str = "239.255.42.42", interface: str = "lo") -> int:
    chat = Chat(name)
    sock = socketkit.UdpSocket(chat)
    try:
        sock.ipv6_enabled = False
        sock.enable_reuse_port(True)  # before bind: the other chats share the port
        sock.bind_to_port(port)
        sock.join_multicast_group(group, interface)
        sock.send_ipv4_multicast_on_interface(interface)
        sock.set_multicast_ttl(1)
        sock.set_multicast_loopback(True)
        sock.begin_receiving()
        print(f"joined {group}:{port} on {interface} as {name}", flush=True)
        for tag, line in enumerate(sys.stdin, 1):
            sock.send_to_host(f"{name}: {line.rstrip()}".encode(), group, port, timeout=5, tag=tag)
        # The end of the input: close once the queued lines are sent (and wait for it:
        # the process would otherwise end with them still queued).
        sock.disconnect_after_sending()
        chat.closed.wait(10)
    finally:
        sock.close()
    return 0


if __name__ == "__main__":
    if not 2 <= len(sys.argv) <= 5:
        sys.exit(f"usage: {sys.argv[0]} NAME [PORT [GROUP [INTERFACE]]]")
    arguments = sys.argv[1:]
    sys.exit(main(arguments[0], *([int(arguments[1])] if len(arguments) > 1 else []), *arguments[2:]))
