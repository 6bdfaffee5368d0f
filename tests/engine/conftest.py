"""Fixtures only the engine tests use; the shared ones are in tests/conftest.py."""

import time

import pytest


@pytest.fixture
def local_zone(monkeypatch):
    """Local time is New York's (UTC-5 in November, UTC-4 in summer): a local day or an ISO date's midnight is not
    UTC's."""
    monkeypatch.setenv("TZ", "America/New_York")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()
