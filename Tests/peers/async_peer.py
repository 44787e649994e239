#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""async_peer.py - peers SocketKit did not write, for the Swift async API's tests.

    async_peer.py MODE [--cert CERT --key KEY]

Listens on 127.0.0.1 (a port the kernel picks), prints "listening on PORT" and serves one
connection at a time, each in a thread, until killed. Python's socket and ssl modules only.

Modes:
  echo       echo every byte until the end of the stream, then close (TLS from the start
             with --cert/--key)
  starttls   read lines; "STARTTLS" is answered "OK" and the connection upgraded (server
             side, --cert/--key); then echo every byte until the end of the stream
  halfclose  read until the end of the stream (TLS with --cert/--key: until close_notify),
             then answer "got N bytes" and close
  sendclose  send "last words", shut the write side, read until the end of the stream,
             print "got TEXT" (what came) on standard output, then close
  udpecho    UDP: send every datagram back to its sender
"""
import argparse
import socket
import ssl
import sys
import threading


def serve_echo(conn):
    while True:
        data = conn.recv(65536)
        if not data:
            break
        conn.sendall(data)


def read_line(conn):
    line = b""
    while not line.endswith(b"\n"):
        byte = conn.recv(1)
        if not byte:
            return None
        line += byte
    return line


def handle(mode, conn, context):
    try:
        if mode == "echo":
            if context:
                conn = context.wrap_socket(conn, server_side=True)
            serve_echo(conn)
        elif mode == "starttls":
            while True:
                line = read_line(conn)
                if line is None:
                    return
                if line == b"STARTTLS\n":
                    conn.sendall(b"OK\n")
                    conn = context.wrap_socket(conn, server_side=True)
                    serve_echo(conn)
                    return
                conn.sendall(line)
        elif mode == "halfclose":
            if context:
                conn = context.wrap_socket(conn, server_side=True, suppress_ragged_eofs=False)
            total = 0
            while True:
                data = conn.recv(65536)
                if not data:
                    break
                total += len(data)
            conn.sendall(b"got %d bytes\n" % total)
            if context:
                conn = conn.unwrap()
        elif mode == "sendclose":
            conn.sendall(b"last words")
            conn.shutdown(socket.SHUT_WR)
            received = b""
            while True:
                data = conn.recv(65536)
                if not data:
                    break
                received += data
            print("got %s" % received.decode(errors="replace"), flush=True)
    except (OSError, ssl.SSLError) as error:
        sys.stderr.write("%s: %s\n" % (mode, error))
    finally:
        conn.close()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["echo", "starttls", "halfclose", "sendclose", "udpecho"])
    parser.add_argument("--cert")
    parser.add_argument("--key")
    arguments = parser.parse_args()
    context = None
    if arguments.cert:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(arguments.cert, arguments.key)

    if arguments.mode == "udpecho":
        server = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        server.bind(("127.0.0.1", 0))
        print("listening on %d" % server.getsockname()[1], flush=True)
        while True:
            data, sender = server.recvfrom(65536)
            server.sendto(data, sender)

    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", 0))
    server.listen(64)
    print("listening on %d" % server.getsockname()[1], flush=True)
    while True:
        conn, _ = server.accept()
        threading.Thread(target=handle, args=(arguments.mode, conn, context), daemon=True).start()


if __name__ == "__main__":
    main()
