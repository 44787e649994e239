# SPDX-License-Identifier: MIT
"""The engine's log in Python's logging (socketkit.enable_logging): off by default, at the
level asked, under the socketkit logger, with a TLS failure's OpenSSL reason and a name
that does not resolve."""
import asyncio
import logging
import threading

import pytest

import socketkit
from socketkit import aio

from conftest import WAIT


class Captured(logging.Handler):
    """Every record of the socketkit loggers, and a way to wait for one."""

    def __init__(self):
        super().__init__(logging.DEBUG)
        self.records = []
        self.changed = threading.Condition()

    def emit(self, record):
        with self.changed:
            self.records.append(record)
            self.changed.notify_all()

    def matching(self, name, level, *needles):
        with self.changed:
            return [record for record in self.records if record.name == name and record.levelno == level
                    and all(needle in record.getMessage() for needle in needles)]

    def wait_for(self, name, level, *needles):
        with self.changed:
            assert self.changed.wait_for(lambda: self.matching(name, level, *needles), WAIT), \
                [(record.name, record.levelname, record.getMessage()) for record in self.records]
        return self.matching(name, level, *needles)


@pytest.fixture
def captured():
    logger = logging.getLogger("socketkit")
    handler = Captured()
    logger.addHandler(handler)
    previous = logger.level
    logger.setLevel(logging.DEBUG)
    try:
        yield handler
    finally:
        socketkit.disable_logging()
        logger.removeHandler(handler)
        logger.setLevel(previous)


def connect_to_nowhere(recorder):
    """A connection to a name that cannot resolve, until its end: the resolver's record and
    the connection's come before socket_did_disconnect."""
    sock = socketkit.Socket(recorder)
    try:
        sock.connect_to_host("log-test.invalid", 80, timeout=15)
        [(_, error)] = recorder.expect("disconnect")
        assert isinstance(error, socketkit.ResolutionError)
    finally:
        sock.close()


def test_off_by_default_and_at_the_level_asked(captured, recorder):
    assert socketkit._log.logging_level() is None
    connect_to_nowhere(recorder)
    assert captured.records == []  # the socketkit logger takes everything: nothing came

    socketkit.enable_logging(logging.INFO)
    with pytest.raises(socketkit.ResolutionError):
        socketkit.lookup_host("log-test.invalid", 80)  # on this thread, before it raises
    [record] = captured.matching("socketkit.resolver", logging.INFO, '"log-test.invalid" did not resolve', "resolution")
    assert record.subsystem == "resolver"
    assert not captured.matching("socketkit.connection", logging.DEBUG)

    socketkit.enable_logging(logging.DEBUG)
    recorder.events.clear()
    connect_to_nowhere(recorder)
    assert captured.matching("socketkit.connection", logging.DEBUG, "connecting to log-test.invalid ended", "resolution")

    socketkit.disable_logging()
    count = len(captured.records)
    recorder.events.clear()
    connect_to_nowhere(recorder)
    assert len(captured.records) == count


def test_the_default_level_is_the_socketkit_loggers(captured):
    logging.getLogger("socketkit").setLevel(logging.WARNING)
    socketkit.enable_logging()
    assert socketkit._log.logging_level() == logging.WARNING
    with pytest.raises(socketkit.ResolutionError):
        socketkit.lookup_host("log-test.invalid", 80)
    assert captured.records == []  # the resolver's record is INFO
    with pytest.raises(TypeError):
        socketkit.enable_logging("debug")


def test_a_tls_failure_is_logged_with_openssls_reason(captured, certs):
    socketkit.enable_logging(logging.INFO)

    async def handshake():
        refused = []
        async with await aio.start_server(lambda connection: connection.close(), "127.0.0.1", 0,
                                          tls=certs.server("incomplete"), on_tls_error=refused.append) as server:
            with pytest.raises(socketkit.UnknownIssuerError):
                await aio.AsyncSocket.connect("127.0.0.1", server.port, timeout=WAIT, tls=certs.client())
        aio.detach()

    asyncio.run(handshake())
    # The client's verification, and the alert the server got from it, in OpenSSL's words.
    captured.wait_for("socketkit.tls", logging.INFO, "tlsUnknownIssuer", "certificate verify failed",
                      "unable to get local issuer certificate")
    captured.wait_for("socketkit.tls", logging.INFO, "tlsFailed", "alert unknown ca")
