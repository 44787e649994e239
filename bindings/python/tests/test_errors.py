# SPDX-License-Identifier: MIT
"""Errors as Python programmers expect them: every SocketKit error that carries an errno is
an OSError, of the built-in subclass of its errno (FileNotFoundError, PermissionError,
ConnectionRefusedError, ...), so the standard library's except clauses catch it; a host
name that does not resolve is a socket.gaierror, a TLS failure an ssl.SSLError; and a tag
that does not fit in a C long raises OverflowError instead of coming back cut down."""
import builtins
import errno
import pickle
import socket
import ssl
import tempfile

import pytest

import socketkit
from socketkit import errors

from conftest import WAIT, Recorder


def test_every_errno_class_is_its_builtin_and_a_system_call_error():
    for number, cls in errors.ERRNO_CLASSES.items():
        error = errors.error_from_code(errors.SYSTEM, number, "what failed")
        assert type(error) is cls
        assert isinstance(error, OSError) and isinstance(error, socketkit.SystemCallError)
        assert error.errno == number and error.strerror == "what failed" and str(error) == "what failed"
        assert getattr(socketkit, cls.__name__) is cls
        builtin = getattr(builtins, cls.__name__, None)
        if builtin is not None:
            assert isinstance(error, builtin), (cls, builtin)
        # The standard library's own mapping agrees where it has a class.
        standard = type(OSError(number, "x"))
        assert isinstance(error, standard), (number, standard)
        copy = pickle.loads(pickle.dumps(error))
        assert type(copy) is cls and copy.errno == number
    unknown = errors.error_from_code(errors.SYSTEM, errno.EHOSTUNREACH, "no route")
    assert type(unknown) is socketkit.SystemCallError and isinstance(unknown, OSError)
    # EPIPE is a broken pipe and, as before, a connection reset.
    pipe = errors.error_from_code(errors.SYSTEM, errno.EPIPE)
    assert isinstance(pipe, builtins.BrokenPipeError) and isinstance(pipe, socketkit.ConnectionResetError)
    timed_out = errors.error_from_code(errors.SYSTEM, errno.ETIMEDOUT)
    assert isinstance(timed_out, builtins.TimeoutError) and isinstance(timed_out, socketkit.TimeoutError)


def test_every_error_with_an_errno_is_an_oserror():
    deadlock = errors.error_from_code(errors.BAD_CONFIG, errno.EDEADLK, "would deadlock")
    assert isinstance(deadlock, socketkit.WouldDeadlockError) and isinstance(deadlock, OSError)
    assert deadlock.errno == errno.EDEADLK
    assert not isinstance(errors.error_from_code(errors.BAD_CONFIG), OSError)
    for code in (errors.CONNECT_TIMEOUT, errors.READ_TIMEOUT, errors.WRITE_TIMEOUT, errors.SEND_TIMEOUT,
                 errors.TLS_HANDSHAKE_TIMEOUT):
        assert isinstance(errors.error_from_code(code), builtins.TimeoutError)
    resolution = errors.error_from_code(errors.RESOLUTION, socket.EAI_NONAME, "no such host")
    assert isinstance(resolution, socket.gaierror) and resolution.errno == socket.EAI_NONAME
    for code in range(errors.TLS_SETTINGS, errors.TLS_FAILED + 1):
        assert isinstance(errors.error_from_code(code), ssl.SSLError), code
    expired = errors.error_from_code(errors.TLS_CERT_EXPIRED, 10, "certificate has expired")
    assert isinstance(expired, ssl.SSLCertVerificationError)
    assert expired.verify_code == 10 and expired.verify_message == "certificate has expired"
    assert isinstance(errors.error_from_code(errors.TLS_TRUNCATED), ssl.SSLEOFError)


def test_a_missing_unix_path_is_file_not_found(recorder):
    path = tempfile.mktemp(prefix="sk-missing-", suffix=".sock", dir="/tmp")
    sock = socketkit.Socket(recorder)
    sock.connect_to_unix_path(path, timeout=5)
    error = recorder.disconnect_error()
    assert isinstance(error, builtins.FileNotFoundError) and error.errno == errno.ENOENT, repr(error)
    sock.close()
    listener = socketkit.Socket(recorder)
    with pytest.raises(builtins.FileNotFoundError):
        listener.accept_on_unix_path(f"/tmp/no-such-directory-{id(listener)}/server.sock")
    listener.close()


def test_a_port_in_use_is_an_oserror_with_eaddrinuse():
    holder = socket.create_server(("127.0.0.1", 0))
    port = holder.getsockname()[1]
    sock = socketkit.Socket(Recorder())
    try:
        with pytest.raises(OSError) as raised:
            sock.accept_on_interface("127.0.0.1", port)
        assert isinstance(raised.value, socketkit.AddressInUseError)
        assert raised.value.errno == errno.EADDRINUSE
        udp = socketkit.UdpSocket()
        with pytest.raises(socketkit.AddressInUseError):
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as taken:
                taken.bind(("127.0.0.1", 0))
                udp.bind_to_interface("127.0.0.1", taken.getsockname()[1])
        udp.close()
    finally:
        sock.close()
        holder.close()


def test_a_refused_connection_is_caught_by_the_builtin_except_clause():
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    recorder = Recorder()
    sock = socketkit.Socket(recorder)
    sock.connect_to_host("127.0.0.1", port, timeout=5)
    try:
        raise recorder.disconnect_error()
    except builtins.ConnectionError as error:  # ConnectionRefusedError's base
        assert error.errno == errno.ECONNREFUSED
    finally:
        sock.close()


TAG_MAX = (1 << 63) - 1
TAG_MIN = -(1 << 63)


def test_tags_out_of_range_raise_overflow_error_and_the_extremes_round_trip(raw_peer):
    peer = raw_peer()
    sock = peer.socket
    for tag in ((1 << 70) + 5, TAG_MAX + 1, TAG_MIN - 1):
        for call in (lambda: sock.read(tag=tag), lambda: sock.read(0, -1, tag),
                     lambda: sock.write(b"x", tag=tag), lambda: sock.write(b"x", -1, tag),
                     lambda: sock.read_to_length(1, tag=tag), lambda: sock.read_to_data(b"\n", tag=tag),
                     lambda: sock.read_into(bytearray(4), tag=tag),
                     lambda: sock.read_to_length_into(1, bytearray(4), tag=tag),
                     lambda: sock.read_to_data_into(b"\n", bytearray(4), tag=tag)):
            with pytest.raises(OverflowError):
                call()
    with pytest.raises(TypeError):
        sock.read(tag=1.5)
    # Nothing was queued by the refused calls: the extremes come back whole.
    sock.write(b"max", tag=TAG_MAX)
    sock.write(b"min", tag=TAG_MIN)
    sock.read_to_length(2, tag=TAG_MAX)
    sock.read(tag=TAG_MIN)
    assert [event[1] for event in peer.recorder.expect("write", 2)] == [TAG_MAX, TAG_MIN]
    assert peer.receive_exactly(6) == b"maxmin"
    peer.peer.sendall(b"ab")
    peer.recorder.expect("read", 1)
    peer.peer.sendall(b"c")
    reads = peer.recorder.expect("read", 2)
    assert [(data, tag) for _, data, tag in reads] == [(b"ab", TAG_MAX), (b"c", TAG_MIN)]


def test_udp_tags_out_of_range_raise_overflow_error():
    sock = socketkit.UdpSocket()
    try:
        sock.bind_to_interface("127.0.0.1", 0)
        for call in (lambda: sock.send_to_address(b"x", ("127.0.0.1", 9), tag=1 << 70),
                     lambda: sock.send_to_address(b"x", ("127.0.0.1", 9), -1, 1 << 70),
                     lambda: sock.send_to_host(b"x", "127.0.0.1", 9, tag=1 << 70)):
            with pytest.raises(OverflowError):
                call()
        sock.connect_to_address(("127.0.0.1", 9))
        with pytest.raises(OverflowError):
            sock.send(b"x", tag=-(1 << 64))
    finally:
        sock.close()
