# SPDX-License-Identifier: MIT
"""UDP beyond GCDAsyncUdpSocket: source-specific multicast and packet info, with Python's
socket module as the senders (loopback delivers within their sendto, so a datagram the
kernel let through arrives before the marker sent after it)."""
import errno
import socket
import sys

import pytest

import socketkit
from conftest import pump
from test_udp import UdpRecorder, udp  # noqa: F401  (udp is a fixture)


def multicast_sender(source: str) -> socket.socket:
    """A Python socket bound to `source` (a 127/8 address: each is local on lo) whose
    multicast leaves through lo and loops back."""
    sender = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sender.bind((source, 0))
    sender.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, socket.inet_aton("127.0.0.1"))
    sender.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_LOOP, 1)
    return sender


def test_source_specific_multicast_receives_only_the_joined_source(udp):
    group = "232.1.2.5"
    log = UdpRecorder()
    receiver = udp(log)
    with pytest.raises(socketkit.BadConfigError):
        receiver.join_multicast_source(group, "127.0.0.1", "lo")  # not bound
    receiver.bind_to_port(0)
    port = receiver.local_port_ipv4
    for bad_group, bad_source in (("not-an-ip", "127.0.0.1"), (group, "not-an-ip"), (group, "::1")):
        with pytest.raises(socketkit.BadParamError):
            receiver.join_multicast_source(bad_group, bad_source, "lo")
    receiver.join_multicast_source(group, "127.0.0.1", "lo")
    receiver.begin_receiving()
    allowed, other = multicast_sender("127.0.0.1"), multicast_sender("127.0.0.2")
    try:
        other.sendto(b"x", (group, port))
        allowed.sendto(b"a", (group, port))
        assert [event[1] for event in log.expect("receive")] == [b"a"]

        receiver.leave_multicast_source(group, "127.0.0.1", "lo")
        with pytest.raises(socketkit.SystemCallError) as caught:
            receiver.leave_multicast_source(group, "127.0.0.1", "lo")
        # The kernel: EADDRNOTAVAIL for a source it does not have, EINVAL once the group's
        # last source is gone (no membership left to look in).
        assert caught.value.errno in (errno.EADDRNOTAVAIL, errno.EINVAL)
        receiver.join_multicast_source(group, "127.0.0.2", "lo")
        allowed.sendto(b"y", (group, port))
        other.sendto(b"b", (group, port))
        received = log.expect("receive", 2)
        assert [event[1] for event in received] == [b"a", b"b"]
        assert received[1][2][1] == other.getsockname()[1]
    finally:
        allowed.close()
        other.close()


class PacketInfoRecorder(UdpRecorder):
    """Records ("receive", data, address, context) without packet info and
    ("receive_info", data, address, info, context) with it."""

    def udp_socket_did_receive_with_packet_info(self, sock, data, address, info, context):
        self._record("receive_info", data, address, info, context)


@pytest.mark.parametrize("host_queue", [False, True], ids=["loop-thread", "host-queue"])
def test_packet_info_gives_each_datagrams_destination_and_interface(udp, host_queue):
    queue = socketkit.HostQueue() if host_queue else None
    log = PacketInfoRecorder()
    receiver = udp(log, queue=queue)
    receiver.bind_to_port(0)
    port = receiver.local_port_ipv4
    assert receiver.receives_packet_info is False
    receiver.begin_receiving()

    def wait(kind, count):
        if queue is not None:
            pump(queue, lambda: len(log.of(kind)) >= count)
        return log.expect(kind, count)

    sender = multicast_sender("127.0.0.1")
    try:
        sender.sendto(b"before", ("127.0.0.1", port))
        assert wait("receive", 1)[0][1] == b"before"
        receiver.receives_packet_info = True
        assert receiver.receives_packet_info is True
        group = "239.255.42.78"
        receiver.join_multicast_group(group, "lo")
        expected = [(b"one", "127.0.0.1"), (b"three", "127.0.0.3"), (b"group", group)]
        for data, destination in expected:
            sender.sendto(data, (destination, port))
        received = wait("receive_info", 3)
        lo = socket.if_nametoindex("lo")
        assert [(event[1], event[3].destination) for event in received] == expected
        assert all(event[3].interface_index == lo and event[3].interface_name == "lo" for event in received)
        assert all(event[2] == ("127.0.0.1", sender.getsockname()[1]) for event in received)
        assert isinstance(received[0][3], socketkit.PacketInfo)
        receiver.receives_packet_info = False
        sender.sendto(b"after", ("127.0.0.1", port))
        assert [event[1] for event in wait("receive", 2)] == [b"before", b"after"]
    finally:
        sender.close()


def test_packet_info_without_the_method_goes_to_did_receive(udp):
    log = UdpRecorder()
    receiver = udp(log)
    receiver.receives_packet_info = True  # before the descriptors are made
    receiver.bind_to_interface("127.0.0.1", 0)
    receiver.begin_receiving()
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sender:
        sender.sendto(b"plain", ("127.0.0.1", receiver.local_port))
        assert log.expect("receive")[0][1] == b"plain"


UDP_SEGMENT, UDP_GRO = 103, 104  # linux/udp.h (the socket module has no names for them)


def test_receive_offload_splits_what_a_python_gso_sender_sent(udp):
    """A Python socket sends 1000 bytes with UDP_SEGMENT 100; the kernel coalesces them for
    a receiver with receive offload (UDP_GRO), which hands over the ten datagrams."""
    log = UdpRecorder()
    receiver = udp(log)
    assert receiver.receive_offload is False
    receiver.receive_offload = True
    assert receiver.receive_offload is True
    receiver.bind_to_interface("127.0.0.1", 0)
    receiver.begin_receiving()
    data = bytes(i // 100 + 1 for i in range(1000))
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sender:
        sender.setsockopt(socket.SOL_UDP, UDP_SEGMENT, 100)
        sender.sendto(data, ("127.0.0.1", receiver.local_port))
        received = log.expect("receive", 10)
    assert [event[1] for event in received] == [data[i:i + 100] for i in range(0, 1000, 100)]


def test_send_segment_size_reaches_a_python_receiver_as_datagrams(udp):
    """SocketKit sends 1000 bytes with a segment size of 100: a Python socket (no GRO)
    receives ten datagrams; a Python socket with UDP_GRO one buffer of 1000 with the
    segment size in its control message."""
    sender = udp(UdpRecorder())
    with pytest.raises(socketkit.BadParamError):
        sender.send_segment_size = 70000
    sender.send_segment_size = 100
    assert sender.send_segment_size == 100
    data = bytes(range(250)) * 4
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as plain, \
            socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as coalescing:
        for receiver in (plain, coalescing):
            receiver.bind(("127.0.0.1", 0))
            receiver.settimeout(10)
        coalescing.setsockopt(socket.SOL_UDP, UDP_GRO, 1)
        sender.send_to_address(data, plain.getsockname(), timeout=5, tag=1)
        assert [plain.recv(2000) for _ in range(10)] == [data[i:i + 100] for i in range(0, 1000, 100)]
        sender.send_to_address(data, coalescing.getsockname(), timeout=5, tag=2)
        whole, ancillary, _, _ = coalescing.recvmsg(65536, 64)
        assert whole == data
        assert [(level, kind) for level, kind, _ in ancillary] == [(socket.SOL_UDP, UDP_GRO)]
        assert int.from_bytes(ancillary[0][2], sys.byteorder) == 100
