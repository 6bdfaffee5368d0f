"""PostgreSQL fixtures for the tests, on a throwaway server (tests/pg_cluster.py).

`pg_server` (session) starts one server per test process (each pytest-xdist worker has its own) and yields the base
URL `postgresql://postgres@127.0.0.1:PORT`; it is stopped and removed at the end. `pg_url` (function) creates a
fresh empty database per test and yields its URL; it is dropped afterwards. `pg_store_url` is the same with the
store's schema already created, cloned from a template made once per process (a clone takes 0.05 s, creating the
schema 0.12 s more, and most of the suite's PostgreSQL cases want a store, not an empty database).

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


@pytest.fixture(scope="session")
def pg_schema_template(pg_server: str) -> str:
    """The name of a database holding just the store's schema, made once per test process by `open_store` itself:
    the template `pg_store_url` clones. Nobody stays connected to it."""
    from tui_agent.store import open_store

    name = create_database(pg_server)
    open_store(f"{pg_server}/{name}").close()
    return name


def _database_of_its_own(server: str, template: str | None) -> Iterator[str]:
    name = create_database(server, template)
    try:
        yield f"{server}/{name}"
    finally:
        drop_database(server, name)


@pytest.fixture
def pg_url(pg_server: str) -> Iterator[str]:
    """A fresh, empty database of its own for this test: postgresql://postgres@127.0.0.1:PORT/t_<random>.
    Dropped afterwards, with any connection the test left open."""
    yield from _database_of_its_own(pg_server, None)


@pytest.fixture
def pg_store_url(pg_server: str, pg_schema_template: str) -> Iterator[str]:
    """A fresh database of its own for this test with the store's schema and nothing else in it, as `open_store`
    leaves a new database. Dropped afterwards, with any connection the test left open."""
    yield from _database_of_its_own(pg_server, pg_schema_template)
