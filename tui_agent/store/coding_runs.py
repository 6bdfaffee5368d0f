"""Reads for the worktrees the coding agents made (worktrees.py): the step results among runs' first journal entries
that may name a worktree, the runs by id, and a run's family of forks."""

from __future__ import annotations

from collections.abc import Iterator

from .base import Connection
from .imported import NOT_IMPORTED
from .runs import lineage

WITHIN = 8   # a coding agent records its worktree among its run's first entries
_NAMING = ("SELECT j.run_id, j.result FROM runs r JOIN {table} j ON j.run_id = r.id AND j.generation = r.generation"
           f" AND j.position < {WITHIN} WHERE j.kind = 'step' AND j.result LIKE '%\"worktree\":%' AND r.{NOT_IMPORTED}")


def naming_worktrees(conn: Connection, run_ids: list[str] | None = None) -> Iterator[tuple[str, str]]:
    """The (run id, step result) of each early step whose result mentions a worktree.

    The steps are among the first WITHIN entries of a run's current generation, of every run (none imported) or
    of `run_ids`: a few index seeks per run."""
    among = ""
    params: tuple[str, ...] = ()
    if run_ids is not None:
        among, params = f" AND r.id IN ({', '.join('?' * len(run_ids))})", tuple(run_ids)
    sql = " UNION ALL ".join(_NAMING.format(table=table) + among for table in ("journal_rows", "journal_tail"))
    yield from conn.execute(sql, params * 2)


def runs_shown(conn: Connection, run_ids: list[str]) -> list[dict]:
    """The runs' id, agent, status and reason, oldest first."""
    rows = conn.execute(f"SELECT id, agent, status, reason FROM runs WHERE id IN ({', '.join('?' * len(run_ids))})"
                        " ORDER BY created_at, id", run_ids)
    return [dict(zip(("id", "agent", "status", "reason"), row)) for row in rows]


def family(store, run_id: str) -> list[str]:
    """The run, the runs it was forked from, and every run forked from the first of them, at any depth: the runs
    that may go on in one worktree."""
    root = lineage(store, run_id)[-1]
    rows = store.conn.execute("WITH RECURSIVE kin(id) AS (SELECT ? UNION SELECT r.id FROM runs r JOIN kin ON"
                              " r.parent_id = kin.id) SELECT id FROM kin", (root,))
    return [row[0] for row in rows]
