#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""smtp_server.py - a small SMTP-style server with STARTTLS, written with Python's socket
and ssl modules: the peer the STARTTLS examples (C and Python) are tested against.

    smtp_server.py CERTIFICATE_CHAIN KEY [--sessions N]

Listens on 127.0.0.1 (port from the kernel), prints "listening on PORT", and serves N
sessions (default 1) one after the other: a greeting, EHLO (STARTTLS offered only before
TLS), STARTTLS (the connection is then wrapped in TLS), NOOP, QUIT. Anything else gets
500. Each session's transcript goes to standard error. Exits 0 when every session said
EHLO, upgraded, said EHLO again over TLS and quit; 1 otherwise. Every read has a timeout,
so a client that stops answering ends the server, not the test.
"""
import argparse
import socket
import ssl
import sys

TIMEOUT = 20


def serve(connection, context):
    """One session; True when it went greeting, EHLO, STARTTLS, EHLO over TLS, QUIT."""
    steps = []
    stream = connection
    reader = stream.makefile("rb")

    def send(text):
        print(f"S: {text}", file=sys.stderr)
        stream.sendall(text.encode() + b"\r\n")

    send("220 localhost ESMTP SocketKit test peer")
    while True:
        line = reader.readline(1001)
        if not line:
            break
        command = line.decode("ascii", "replace").rstrip("\r\n")
        print(f"C: {command}", file=sys.stderr)
        verb = command.split(" ", 1)[0].upper()
        secure = isinstance(stream, ssl.SSLSocket)
        if verb == "EHLO":
            steps.append("EHLO over TLS" if secure else "EHLO")
            extensions = ["PIPELINING", "AUTH PLAIN"] if secure else ["PIPELINING", "STARTTLS"]
            send("250-localhost greets " + command[5:])
            for index, extension in enumerate(extensions):
                send(("250 " if index == len(extensions) - 1 else "250-") + extension)
        elif verb == "STARTTLS" and not secure:
            send("220 2.0.0 Ready to start TLS")
            reader.close()
            stream = context.wrap_socket(connection, server_side=True)
            reader = stream.makefile("rb")
            steps.append("STARTTLS")
        elif verb == "NOOP":
            send("250 2.0.0 OK")
        elif verb == "QUIT":
            send("221 2.0.0 Bye")
            steps.append("QUIT over TLS" if secure else "QUIT")
            break
        else:
            send("500 5.5.2 unknown command")
    reader.close()
    if isinstance(stream, ssl.SSLSocket):
        try:
            stream.unwrap()
        except (OSError, ssl.SSLError):
            pass
    stream.close()
    print(f"session: {', '.join(steps)}", file=sys.stderr)
    return steps == ["EHLO", "STARTTLS", "EHLO over TLS", "QUIT over TLS"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("chain")
    parser.add_argument("key")
    parser.add_argument("--sessions", type=int, default=1)
    arguments = parser.parse_args()
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(arguments.chain, arguments.key)
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(TIMEOUT)
    print(f"listening on {listener.getsockname()[1]}", flush=True)
    good = 0
    for _ in range(arguments.sessions):
        connection, _ = listener.accept()
        connection.settimeout(TIMEOUT)
        try:
            good += serve(connection, context)
        except (OSError, ssl.SSLError) as error:
            print(f"session failed: {error!r}", file=sys.stderr)
    listener.close()
    return 0 if good == arguments.sessions else 1


if __name__ == "__main__":
    sys.exit(main())
