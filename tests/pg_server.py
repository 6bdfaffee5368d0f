"""PostgreSQL fixtures for the tests, on a throwaway server (tests/pg_cluster.py).

`pg_server` (session) starts one server per test process (each pytest-xdist worker has its own) and yields the base
URL `postgresql://postgres@127.0.0.1:PORT`; it is stopped and removed at the end. `pg_url` (function) creates a
fresh empty database per test and yields its URL; it is dropped afterwards.

Registered for every test through `pytest_plugins` in tests/conftest.py. A test process that never asks for
`pg_server` starts nothing. Without the binaries under /usr/lib/postgresql/*/bin the fixtures skip the test
(.ci/run installs them).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from pg_cluster import (
    SKIP_REASON,
    PgServer,
    create_database,
    drop_database,
    find_bin_dir,
)


@pytest.fixture(scope="session")
def pg_server() -> Iterator[str]:
    """The base URL of this test process's own PostgreSQL server: postgresql://postgres@127.0.0.1:PORT."""
    bin_dir = find_bin_dir()
    if bin_dir is None:
        pytest.skip(SKIP_REASON)
    server = PgServer(bin_dir)
    try:
        server.start()
        yield server.url
    finally:
        server.stop()


@pytest.fixture
def pg_url(pg_server: str) -> Iterator[str]:
    """A fresh, empty database of its own for this test: postgresql://postgres@127.0.0.1:PORT/t_<random>.
    Dropped afterwards, with any connection the test left open."""
    name = create_database(pg_server)
    try:
        yield f"{pg_server}/{name}"
    finally:
        drop_database(pg_server, name)
