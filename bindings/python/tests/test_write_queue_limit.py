# SPDX-License-Identifier: MIT
"""Memory is bounded: past the socket's maximum of queued bytes a write raises
WriteQueueFullError and queues nothing, even when the application ignores the watermarks
(a peer that never reads)."""
import pytest

import socketkit
from conftest import pattern


def test_a_write_past_the_queue_maximum_raises_and_queues_nothing(raw_peer):
    peer = raw_peer()  # its peer reads nothing until the end
    sock = peer.socket
    assert sock.maximum_queued_write_bytes == 64 * 1024 * 1024  # on by default
    with pytest.raises(socketkit.BadParamError):
        sock.maximum_queued_write_bytes = -1
    sock.maximum_queued_write_bytes = 1024 * 1024
    assert sock.maximum_queued_write_bytes == 1024 * 1024
    accepted = []
    with pytest.raises(socketkit.WriteQueueFullError) as raised:
        for tag in range(1000):  # bounded: 250 MiB at most
            chunk = pattern(256 * 1024, seed=tag % 251)
            sock.write(chunk, tag=tag)
            accepted.append(chunk)
    assert raised.value.code == socketkit.errors.WRITE_QUEUE_FULL and raised.value.message
    assert sock.queued_write_bytes <= 1024 * 1024  # the memory held stays under the maximum
    assert sock.is_connected  # refused, not disconnected
    # Every accepted write arrives intact, and nothing of the refused one.
    assert peer.receive_exactly(sum(map(len, accepted))) == b"".join(accepted)
    peer.recorder.expect("write", len(accepted))
    sock.write(b"after")
    assert peer.receive_exactly(5) == b"after"
    # A single write above the maximum never fits; 0 lifts the limit.
    large = bytes(1024 * 1024 + 1)
    with pytest.raises(socketkit.WriteQueueFullError):
        sock.write(large)
    sock.maximum_queued_write_bytes = 0
    sock.write(large)
    assert peer.receive_exactly(len(large)) == large
