# SPDX-License-Identifier: MIT
"""Loop groups stopping while other threads still use them (issue 26.3-26.5)."""
import ctypes
import gc
import socket
import sys
import threading
import time

import socketkit
from socketkit import _ffi


class Hammer:
    """Threads that queue Socket.perform calls on one socket, each at most `budget` times,
    with at most `backlog` calls queued and not yet run."""

    def __init__(self, sock: socketkit.Socket, budget: int, backlog: int) -> None:
        self.sock = sock
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.accepted = 0
        self.ran = 0
        self.threads = [threading.Thread(target=self._run, args=(budget, backlog)) for _ in range(3)]
        for thread in self.threads:
            thread.start()

    def _ran(self, descriptors: socketkit.Descriptors) -> None:
        with self.lock:
            self.ran += 1

    def _run(self, budget: int, backlog: int) -> None:
        for _ in range(budget):
            if self.stop.is_set():
                return
            while self.accepted - self.ran > backlog and not self.stop.is_set():
                time.sleep(0)
            try:
                self.sock.perform(self._ran)
            except socketkit.BadConfigError:
                return  # the loop is stopping: calls are refused from now on
            with self.lock:
                self.accepted += 1

    def finish(self) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(20)
            assert not thread.is_alive()


# A perform function in native code (sched_yield, which ignores its arguments): the loop
# runs it without taking the GIL, so the loop stops as quickly as in a C program.
_NATIVE_NOTHING = _ffi.PERFORM_FUNCTION(ctypes.cast(ctypes.CDLL(None).sched_yield, ctypes.c_void_p).value)


def test_a_wake_up_never_writes_to_a_descriptor_the_loop_closed():
    """26.3: a thread that decided to wake a loop wrote to its eventfd after letting go of
    the lock, when the loop may have closed it and the number gone to someone else (here:
    one of the socket pairs a thread keeps making and reading)."""
    stop = threading.Event()
    stray = []

    def reuse_descriptors():
        while not stop.is_set():
            pairs = [socket.socketpair() for _ in range(8)]
            for pair in pairs:
                for side in pair:
                    side.setblocking(False)
                    try:
                        stray.append(side.recv(64))
                    except BlockingIOError:
                        pass
                for side in pair:
                    side.close()

    def queue_calls(handle):
        for _ in range(100):
            if _ffi.lib.sk_socket_perform(handle, _NATIVE_NOTHING, None) < 0:
                return

    # The threads hand the GIL to each other often, so that rounds are quick.
    interval = sys.getswitchinterval()
    sys.setswitchinterval(0.00005)
    reuser = threading.Thread(target=reuse_descriptors)
    reuser.start()
    try:
        deadline = time.monotonic() + 4
        while time.monotonic() < deadline and not stray:
            group = socketkit.LoopGroup(1)
            sock = socketkit.Socket(loop_group=group)
            callers = [threading.Thread(target=queue_calls, args=(sock.handle,)) for _ in range(3)]
            for caller in callers:
                caller.start()
            group.close()
            for caller in callers:
                caller.join(20)
            sock.close()
    finally:
        stop.set()
        reuser.join(20)
        sys.setswitchinterval(interval)
    assert stray == []


def test_callers_that_keep_queueing_cannot_hold_a_loop_group_close_off():
    """26.4: the loop stopped only once its task queue was empty, and accepted tasks after
    the stop was requested, so callers that kept queueing held close() off."""
    group = socketkit.LoopGroup(1)
    sock = socketkit.Socket(loop_group=group)
    # The threads hand the GIL to each other often: with the default interval the loop
    # thread, once it has the GIL, runs its whole batch before a caller gets it back, and
    # the queue runs empty.
    interval = sys.getswitchinterval()
    sys.setswitchinterval(0.00005)
    try:
        hammer = Hammer(sock, budget=1 << 40, backlog=2000)
        while hammer.accepted < 200:
            time.sleep(0.001)
        # The oracle is order, not duration: close() returns while the callers are still
        # calling. Without the bound it would last as long as they do: a watchdog ends them
        # after 60 s, so that the check below fails instead of hanging the run.
        closed = threading.Event()
        watchdog = threading.Thread(target=lambda: closed.wait(60) or hammer.stop.set())
        watchdog.start()
        group.close()
        callers_were_stopped = hammer.stop.is_set()
        closed.set()
        watchdog.join()
        hammer.finish()
    finally:
        sys.setswitchinterval(interval)
    assert not callers_were_stopped, "close() returned only once the watchdog stopped the callers"
    sock.close()


def test_events_handed_to_a_stopped_loop_still_arrive(recorder):
    """Refused tasks lose nothing: callbacks moved from a serial queue to the loop while one
    ran there still arrive (socket_did_disconnect among them) although the loop stopped
    in between; they run on the serial queue's thread once the loop is done."""
    group = socketkit.LoopGroup(1)
    queue = socketkit.SerialQueue()
    inside = threading.Event()
    proceed = threading.Event()

    def hold(sock, data, tag):
        inside.set()
        proceed.wait(20)

    recorder.on_read = hold
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    sock = socketkit.Socket(recorder, queue=queue, loop_group=group)
    sock.connect_to_host("127.0.0.1", listener.getsockname()[1])
    peer, _ = listener.accept()
    sock.read(tag=1)
    peer.sendall(b"x")
    assert inside.wait(20)
    sock.queue = None
    group.close()  # the disconnect waits behind the running read
    proceed.set()
    assert isinstance(recorder.disconnect_error(), socketkit.BadConfigError)
    sock.close()
    queue.close()
    peer.close()
    listener.close()


class _UdpRecorder:
    def __init__(self) -> None:
        self.condition = threading.Condition()
        self.events = []

    def _record(self, *event):
        with self.condition:
            self.events.append(event)
            self.condition.notify_all()

    def udp_socket_did_send(self, sock, tag):
        self._record("sent", tag)

    def udp_socket_did_close(self, sock, error):
        self._record("closed", type(error).__name__ if error else None)

    def wait_for(self, event, timeout=20.0):
        with self.condition:
            return self.condition.wait_for(lambda: event in self.events, timeout)


def test_a_udp_socket_with_a_send_timer_released_after_its_group():
    """26.5: a UDP socket that had a send timer, released after its group, cancelled the
    timer in the stopped loop's structures from the releasing thread."""
    peer = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    peer.bind(("127.0.0.1", 0))
    group = socketkit.LoopGroup(1)
    recorder = _UdpRecorder()
    sock = socketkit.UdpSocket(recorder, loop_group=group)
    sock.send_to_address(b"abc", peer.getsockname(), timeout=5, tag=7)
    assert recorder.wait_for(("sent", 7))
    group.close()
    assert recorder.wait_for(("closed", "ClosedError"))
    sock.release()
    del sock
    gc.collect()
    assert peer.recv(16) == b"abc"
    peer.close()
