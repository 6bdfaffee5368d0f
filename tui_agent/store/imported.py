"""Runs that another database holds, brought here by `tui-agent import` to be read, diffed, replayed and forked.

One `imported_runs` row each. Their source may still resume them, so nothing here moves them on: no worker
claims them (`NOT_IMPORTED`, in every claim's and requeue's condition) and every person's action but a fork
refuses them (operate.py asks `mark`). A run taken over with `import --adopt` has no row: it is this database's.
Why: docs/operating.md, "One run, anywhere: export and import"."""

from __future__ import annotations

from collections.abc import Iterable

from .base import Connection

# A condition on a runs row (its `id`): the run is this database's to run.
NOT_IMPORTED = "id NOT IN (SELECT run_id FROM imported_runs)"


def mark(conn: Connection, run_ids: Iterable[str], source: str, exported_at: float, at: float) -> None:
    """Inside the import's write: `run_ids` are for reading here, `source` holding them."""
    for run_id in run_ids:
        conn.execute("INSERT INTO imported_runs (run_id, source, exported_at, imported_at) VALUES (?, ?, ?, ?)",
                     (run_id, source, exported_at, at))


def imported(conn: Connection, run_id: str) -> dict | None:
    """Where the run was imported from ({source, exported_at, imported_at}, epoch seconds), or None when it is this
    database's own."""
    row = conn.execute("SELECT source, exported_at, imported_at FROM imported_runs WHERE run_id = ?",
                       (run_id,)).fetchone()
    if row is None:
        return None
    return {"source": row[0], "exported_at": row[1], "imported_at": row[2]}
