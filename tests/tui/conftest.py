"""Fixtures and the demo's two-store parametrization that only the TUI tests use; the shared ones are in
tests/conftest.py."""

import inspect
import time
from pathlib import Path

import pytest
from helpers import settled
from tui_fixture import build_once, copied, thaw

from tui_agent.store import open_store


def pytest_generate_tests(metafunc):
    """A module marked `demo_on_both` runs each test that takes `demo` once on each store, but a test marked
    `layout_only` (keys, layout, dialogs' buttons: no read or write that the module's other tests do not make on
    both stores) on the SQLite demo only."""
    if ("demo" in metafunc.fixturenames and metafunc.definition.get_closest_marker("demo_on_both") is not None
            and metafunc.definition.get_closest_marker("layout_only") is None):
        metafunc.parametrize("demo", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)], indirect=True)


@pytest.fixture
def demo_store(demo):
    """The test's copy of the demo database, opened as a store of its own (not the app's connection)."""
    s = open_store(demo[0])
    yield s
    s.close()


@pytest.fixture
def snap_compare(snap_compare):
    """pytest-textual-snapshot's snap_compare, but each key is pressed, and the picture taken, once the app has
    settled: a read a key starts (a filter, a re-read) answers on the app's reader thread, which the plugin's own
    pauses do not wait for, so without this a loaded machine photographs the screen before the answer is painted."""

    def compare(app, press=(), run_before=None, **options):
        async def before(pilot):
            if run_before is not None:
                result = run_before(pilot)
                if inspect.isawaitable(result):
                    await result
            await settled(pilot)
            for key in press:          # as a person types: each key once the screen has answered the last
                await pilot.press(key)
                await settled(pilot)

        return snap_compare(app, run_before=before, **options)

    return compare


@pytest.fixture(scope="session")
def snapshot_template(tmp_path_factory) -> tuple[Path, dict[str, str], object]:
    """The snapshot tests' fixture database (tui_fixture.py: executed demo runs, frozen clock, seeded ids),
    built once per session: (its folder, the run ids by role, the seeded ids' state after the build). A test
    takes a copy (tui_fixture.copied)."""
    folder = tmp_path_factory.mktemp("snapshot-fixture")
    roles, state = build_once(folder)
    return folder, roles, state


@pytest.fixture
def snapshot_roles(snapshot_template, tmp_path, monkeypatch):
    """A copy of the snapshot fixture database in the current folder, in UTC: the run ids by role.

    Times on screen are local, so the zone is pinned for snapshots to match anywhere; the frozen clock is thawed
    after the test."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    folder, roles, state = snapshot_template
    copied(folder, state, tmp_path)   # as build_fixture(tmp_path) leaves it, built once per session
    yield roles
    thaw()
    monkeypatch.undo()
    time.tzset()
