"""Journal rows and the checkpoint: the per-step hot path, one fenced transaction per step."""

from __future__ import annotations

from dataclasses import dataclass

from .db import Store
from .runs import check_fence

_INSERT = ("INSERT INTO journal (run_id, generation, position, name, kind, result, artifact, attempts,"
           " started_at, duration_s, fence) VALUES (?, ?, ?, ?, 'step', ?, ?, ?, ?, ?, ?)")
_CHECKPOINT = ("UPDATE checkpoints SET current_step = ?, total_steps = ?, next_input = ?, plan_revision = ?,"
               " used_steps = used_steps + 1, updated_at = ? WHERE run_id = ?")


@dataclass
class Checkpoint:
    """The fixed-size row of where a run is; lists (completed steps, errors) live in the journal and events."""

    schema_version: int
    generation: int
    current_step: int
    total_steps: int | None
    next_input: str | None
    plan_revision: int


def load_checkpoint(store: Store, run_id: str) -> Checkpoint:
    row = store.conn.execute("SELECT schema_version, generation, current_step, total_steps, next_input,"
                             " plan_revision FROM checkpoints WHERE run_id = ?", (run_id,)).fetchone()
    return Checkpoint(*row)


def load_entries(store: Store, run_id: str, generation: int) -> list[tuple[int, str, str | None, str | None]]:
    """(position, name, result JSON, artifact path) for one generation, in position order."""
    return store.conn.execute("SELECT position, name, result, artifact FROM journal"
                              " WHERE run_id = ? AND generation = ? ORDER BY position",
                              (run_id, generation)).fetchall()


def commit_step(store: Store, run_id: str, generation: int, fence: int, position: int, name: str,
                result: str | None, artifact: str | None, attempts: int, started_at: float, duration_s: float,
                checkpoint: Checkpoint, now: float, lease_until: float) -> None:
    """The step's journal row, the checkpoint and the lease renewal, in one transaction that checks the fence."""
    with store.write() as conn:
        check_fence(conn, run_id, fence, now, lease_until)
        conn.execute(_INSERT, (run_id, generation, position, name, result, artifact, attempts, started_at,
                               duration_s, fence))
        conn.execute(_CHECKPOINT, (position + 1, checkpoint.total_steps, checkpoint.next_input,
                                   checkpoint.plan_revision, now, run_id))


def journal_for(store: Store, run_id: str) -> list[dict]:
    return list(store.db.query(
        "SELECT generation, position, name, kind, result, artifact, attempts, started_at, duration_s, fence"
        " FROM journal WHERE run_id = ? ORDER BY generation, position", (run_id,)))


def checkpoint_for(store: Store, run_id: str) -> dict:
    return next(iter(store.db.query("SELECT * FROM checkpoints WHERE run_id = ?", (run_id,))), {})
