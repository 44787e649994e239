# SPDX-License-Identifier: MIT
"""Socket.write_file (a file region sent with sendfile, a queued write with its tag) and
Socket.read_to_file (a read whose bytes go to a file), against Python socket peers."""
import os

import pytest

import socketkit
from conftest import pattern


def test_write_file_is_a_queued_write_with_its_tag(raw_peer, tmp_path):
    contents = pattern(1 << 20, seed=3)
    path = tmp_path / "region.bin"
    path.write_bytes(contents)
    pair = raw_peer()
    with open(path, "rb") as file:
        file.seek(7)
        pair.socket.write(b"head", tag=1)
        pair.socket.write_file(file, offset=1000, length=500_000, tag=2)
        pair.socket.write(b"tail", tag=3)
        expected = b"head" + contents[1000:501_000] + b"tail"
        assert pair.receive_exactly(len(expected)) == expected
        assert file.tell() == 7  # its position is untouched
    assert pair.recorder.wait_for(lambda events: [e[1] for e in events if e[0] == "write"] == [1, 2, 3])
    # The whole file by default.
    with open(path, "rb") as file:
        pair.socket.write_file(file.fileno(), tag=4)
    assert pair.receive_exactly(len(contents)) == contents


def test_read_to_file_writes_there_and_completes_empty(raw_peer, tmp_path):
    payload = pattern(2 << 20, seed=8)
    pair = raw_peer()
    with open(tmp_path / "body.bin", "wb") as file:
        pair.socket.read_to_file(len(payload), file, tag=5)
        pair.socket.read_to_length(4, tag=6)
        pair.peer.sendall(payload + b"next")
        assert pair.recorder.wait_for(lambda events: ("read", b"next", 6) in events)
        assert ("read", b"", 5) in pair.recorder.events
        assert file.tell() == len(payload)  # written at its position, which it shares
    assert (tmp_path / "body.bin").read_bytes() == payload


def test_bad_files_and_regions_raise(raw_peer, tmp_path):
    path = tmp_path / "small.bin"
    path.write_bytes(b"x" * 100)
    pair = raw_peer()
    read_end, write_end = os.pipe()
    try:
        with open(path, "rb") as readable:
            for bad in (dict(file=read_end), dict(file=readable, offset=101), dict(file=readable, length=0),
                        dict(file=readable, offset=50, length=51), dict(file=readable, offset=-1)):
                with pytest.raises(socketkit.BadParamError):
                    pair.socket.write_file(**bad)
            with pytest.raises(socketkit.BadParamError):
                pair.socket.read_to_file(10, readable)  # not open for writing
        with pytest.raises(socketkit.BadParamError):
            pair.socket.read_to_file(10, write_end)  # a pipe, not a regular file
        assert pair.socket.queued_write_bytes == 0
    finally:
        os.close(read_end)
        os.close(write_end)
