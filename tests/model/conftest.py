"""The model-based test (machine.py) gets one database for the whole run; each example
truncates it."""

from __future__ import annotations

import pytest

from tests.model.machine import DELETED_DDL
from tests.model.model_jobs import TX_WRITES_DDL


@pytest.fixture
def model_url(database_url: str, sql) -> str:
    sql(TX_WRITES_DDL)
    sql(DELETED_DDL)
    return database_url
