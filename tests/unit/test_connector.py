"""The functions' connection keeper: every (re)connection within the invocation's deadline."""

from __future__ import annotations

import time

import pytest

from pgdrain.db import Connector, NoTimeLeft


class FakeConnection:
    """Stands in for pg8000 at the connect: enough for Connector.open and discard."""

    def close(self) -> None:
        pass


def test_a_connection_dropped_mid_invocation_is_reopened_within_its_deadline(monkeypatch):
    timeouts = []

    def connect(timeout=None):
        timeouts.append(timeout)
        return FakeConnection()

    connector = Connector(connect, prepare=False, server_bounds=False)
    monkeypatch.setattr(Connector, "_bound", lambda self, session, deadline: None)
    connector.open(time.monotonic() + 5)
    connector.discard()  # e.g. a transactional handler stopped mid-statement
    connector.session()
    assert len(timeouts) == 2 and all(0 < t <= 5 for t in timeouts)


def test_once_the_deadline_passed_no_connection_is_attempted(monkeypatch):
    attempts = []
    connector = Connector(lambda timeout=None: attempts.append(timeout) or FakeConnection(),
                          prepare=False, server_bounds=False)
    monkeypatch.setattr(Connector, "_bound", lambda self, session, deadline: None)
    connector.open(time.monotonic() + 0.05)
    connector.discard()
    time.sleep(0.1)
    with pytest.raises(NoTimeLeft):
        connector.session()
    assert len(attempts) == 1
