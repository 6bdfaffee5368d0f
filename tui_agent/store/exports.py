"""`tui-agent export RUN... -o FILE` and `tui-agent import FILE [--adopt]`: chosen runs carried to another database.

An export is a new tui-agent SQLite database of the runs, their ancestry and their artifacts (`export_runs`),
to be read, diffed, replayed and forked there (`--db FILE` opens it as it is). An import checks the file first,
then loads it in one transaction, refused on a clash of run ids or ledger keys (`import_runs`).
Why: docs/operating.md, "One run, anywhere: export and import"."""

from __future__ import annotations

import json
import os
import sqlite3
import tempfile
from collections.abc import Sequence
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

from ..agents.files import shown
from ..errors import UserError
from ..output_file import refusal
from ..runtime.clock import iso, now
from ..states import TERMINAL, EventKind, RunStatus
from . import Store, artifacts, open_store
from .base import is_url
from .copying import (
    Artifacts,
    Fresh,
    Table,
    Tally,
    copy_pages,
    move_counter,
    open_target,
    pages,
    read_snapshot,
    tables,
    writing,
)
from .db import read_only
from .events import add_event
from .host import this_host
from .imported import mark
from .runs import lineage, resolve_run
from .schema import SCHEMA_VERSION

EXPORT_META = "export"   # the meta row that makes a database an export: {runs, ancestry, source, exported_at}
# Tables that name a run but are this database's business, not the run's, and so stay behind.
LEFT_OUT = {
    "notices": "who was called about a run: a database's own people (the target calls its own)",
    "let_go": "a worker's fence bookkeeping, meaningless to another database's workers",
    "imported_runs": "where a run came from: the file's own meta says so, and the target marks its import",
}
_CHUNK = 500   # values in one IN (...) list


def exported_tables() -> list[Table]:
    """The tables an export carries, in the schema's order: runs, and every table with a run_id, but LEFT_OUT."""
    return [t for t in tables() if (t.name == "runs" or "run_id" in t.columns) and t.name not in LEFT_OUT]


@dataclass(frozen=True)
class Carried:
    """What an export wrote or an import loaded.

    It holds the runs asked for (`named`), the runs they were forked from (`ancestry`), those taken over
    (`adopted`), the rows and artifacts per table (copying.Tally.counts), and the export's source and time."""

    named: list[str]
    ancestry: list[str]
    counts: dict[str, int]
    source: str
    exported_at: float
    adopted: tuple[str, ...] = ()


# --- export ---------------------------------------------------------------------------------------------------

def export_runs(source: Store, run_refs: Sequence[str], output: str, force: bool = False) -> Carried:
    """Write the runs `run_refs` name (any unique prefixes), with their ancestry, to the new SQLite file `output`.

    An export is a copy (copying.py): every row naming the runs in the tables `exported_tables` lists (the run, its
    checkpoint, journal, effects, model calls and request parts, approvals and events), and their artifacts as rows
    of its `artifacts` table (store/artifacts.py IN_TABLE_META), so the one file is all of it. Its meta row `export`
    says which runs were asked for, from which database and when. The source is read in one snapshot; the file is
    made in a temporary folder beside `output` and linked into place once whole. A file that exists is replaced
    only with `force`, whole or not at all."""
    named = list(dict.fromkeys(resolve_run(source, ref) for ref in run_refs))
    out = Path(output)
    if out.is_dir():
        raise UserError(f"-o {output} is a folder; name a file in it, such as {out / 'runs.export.db'}")
    if os.path.lexists(out) and not force:
        raise UserError(f"-o {output} already exists; nothing was written; pass --force to replace it")
    try:
        with tempfile.TemporaryDirectory(prefix=".tui-agent-export-", dir=out.parent) as folder:
            made = Path(folder) / "export.db"
            target = open_target(str(made))
            try:
                carried = _export_into(source, target, named, output)
            finally:
                target.close()
            if force:
                os.replace(made, out)
            else:
                os.link(made, out)   # never over a file that appeared meanwhile
    except FileExistsError:
        raise UserError(f"-o {output} already exists; nothing was written; pass --force to replace it") from None
    except OSError as e:
        refused = refusal(e, output)
        if refused is None:
            raise
        raise refused from None
    return carried


def _export_into(source: Store, target: Store, named: list[str], output: str) -> Carried:
    files = Artifacts(source, target)
    tally = Tally(0, None, files)
    with read_snapshot(source):
        runs = list(dict.fromkeys(run for each in named for run in lineage(source, each)))
        carried = Carried(named, [run for run in runs if run not in named], {}, _label(source), now())
        with writing(source, target, tally, f"nothing was written to {output}", into=output):
            artifacts.keep_in_table(target)
            target.conn.execute("INSERT INTO meta (key, value) VALUES (?, ?)", (EXPORT_META, json.dumps(
                {"runs": named, "ancestry": carried.ancestry, "source": carried.source,
                 "exported_at": carried.exported_at})))
            for table in exported_tables():
                column = "id" if table.name == "runs" else "run_id"
                high = max(copy_pages(target, table, pages(source, table, f"{column} = ?", (run,)), tally)
                           for run in runs)
                if table.identity:
                    move_counter(target, table, high)
            if files.in_table:
                for _ in files.rows(runs):
                    pass
    return Carried(**{**carried.__dict__, "counts": tally.counts()})


def _label(store: Store) -> str:
    """The database an export comes from, as another machine's reader can tell it: a URL without its password, or
    this host's name and the file's absolute path."""
    if is_url(store.path):
        return str(store.path)
    return f"{this_host()}:{shown(os.path.abspath(store.path))}"


# --- import ---------------------------------------------------------------------------------------------------

def read_export(path: str) -> dict:
    """The `export` meta of the file at `path`, once it is checked to be a whole export of this schema version.

    Otherwise a UserError says what the file is. Nothing is written: the file is read through SQLite's read-only
    connection."""
    file = Path(path)
    if not file.is_file():
        raise UserError(f"{path} is {'a folder' if file.is_dir() else 'not there'}; name a file tui-agent export made")
    try:
        _refuse_cut_short(file)   # before any connection of this process to the file: open() is safe only then
        with closing(read_only(file)) as conn:
            found = conn.execute("PRAGMA quick_check(1)").fetchone()[0]
            if found != "ok":
                raise sqlite3.DatabaseError(" ".join(found.split()))
            meta = dict(conn.execute("SELECT key, value FROM meta").fetchall())
    except sqlite3.Error as e:
        raise UserError(f"{path} is not a whole tui-agent export ({_said(e)}); nothing was imported; make it "
                        "again with tui-agent export RUN -o FILE") from None
    version = str(meta.get("schema_version"))
    if not version.isdigit():
        raise UserError(f"{path} is a SQLite database but not tui-agent's (its meta has no schema version); "
                        "nothing was imported")
    if int(version) != SCHEMA_VERSION:
        later = int(version) > SCHEMA_VERSION
        raise UserError(f"{path} was exported by {'a newer' if later else 'an older'} tui-agent (schema version "
                        f"{version}, this one imports {SCHEMA_VERSION}); nothing was imported; "
                        + ("upgrade tui-agent" if later else f"upgrade the file first (tui-agent db migrate {path})"))
    if EXPORT_META not in meta:
        raise UserError(f"{path} is a tui-agent database, not an export (tui-agent copy copies a whole database); "
                        "nothing was imported")
    return json.loads(meta[EXPORT_META])


def _said(error: sqlite3.Error) -> str:
    text = str(error)
    return "not a SQLite database" if "not a database" in text else "no meta table" if "no such table" in text \
        else text


def _refuse_cut_short(file: Path) -> None:
    """A SQLite file shorter than the pages its header counts was cut short (a copy or a download that stopped).
    The count is valid when the header says so (its version-valid-for number is its change counter)."""
    with open(file, "rb") as f:
        header = f.read(100)
    if len(header) < 100 or not header.startswith(b"SQLite format 3\0"):
        return   # SQLite says what it is
    size = int.from_bytes(header[16:18], "big")
    size, pages = 65536 if size == 1 else size, int.from_bytes(header[28:32], "big")
    wal = Path(f"{file}-wal")
    if header[24:28] == header[92:96] and not (wal.exists() and wal.stat().st_size) and \
            file.stat().st_size < size * pages:
        raise sqlite3.DatabaseError(f"cut short: {file.stat().st_size:,} of its {size * pages:,} bytes are there")


def open_export(path: str, adopt: bool = False) -> tuple[Store, dict]:
    """The export at `path` as a store that only reads, and its meta. read_export checks the file first. With
    `adopt`, it is refused unless each run it was made of is ended or parked in it."""
    meta = read_export(path)
    store = open_store(path, create=False)
    try:
        store.read_only()
        if adopt:
            _refuse_unadoptable(store, meta["runs"], path)
    except BaseException:
        store.close()
        raise
    return store, meta


def import_runs(source: Store, meta: dict, *, target: Store, file: str, adopt: bool, who: str) -> Carried:
    """Load the export `source` into `target` in one transaction.

    Its `meta` is read from `file`, as open_export gave them: the file must be a SQLite database that export made,
    at this schema version, whole (every page its header counts is there, and quick_check passes), and open_export
    refused what cannot be adopted. A clash of run ids or ledger keys (an effect's key, a run's `start --key`)
    refuses it, with nothing written: two ledgers that disagree about one effect cannot be merged. Run ids are
    kept, so every path and reference stays valid; the rows' own numbers (events, effects, approvals) are drawn
    from the target's counters. Each run is marked imported (store/imported.py): for reading, never for resuming,
    since its source may still run it. `who` adopts the runs asked for at export when `adopt` says so: only when
    each is ended or parked in the file, with an event saying its source must not resume it; the runs they were
    forked from come for reading."""
    at = now()
    files = Artifacts(source, target)
    tally = Tally(0, None, files)
    carried = Carried(list(meta["runs"]), list(meta["ancestry"]), {}, meta["source"], meta["exported_at"],
                      tuple(meta["runs"]) if adopt else ())
    with read_snapshot(source):
        runs = [run for (run,) in source.conn.execute("SELECT id FROM runs ORDER BY created_at, id")]
        with writing(source, target, tally, "nothing was imported", into=str(target.path)):
            why = _clash(source, target, runs)
            if why:
                raise UserError(f"cannot import {file}: {why}; nothing was imported")
            for table in exported_tables():
                fresh = Fresh(target, table) if table.identity else None
                copy_pages(target, table, pages(source, table), tally, fresh)
                if fresh:
                    fresh.done()
            for _ in files.rows():
                pass
            mark(target.conn, [run for run in runs if run not in carried.adopted], carried.source,
                 carried.exported_at, at)
            for run in carried.adopted:
                add_event(target.conn, run, at=at, kind=EventKind.ADOPTED,
                          message=f"adopted by {who} from {carried.source} (exported {iso(carried.exported_at)},"
                          f" imported from {shown(file)}): this database runs it now, and {carried.source} must not"
                          " resume it (both would do its pending effects)", worker=who)
    return Carried(**{**carried.__dict__, "counts": tally.counts()})


def _refuse_unadoptable(source: Store, named: list[str], file: str) -> None:
    for run, status in source.conn.execute(
            f"SELECT id, status FROM runs WHERE id IN ({', '.join('?' * len(named))}) ORDER BY id", named):
        if status not in TERMINAL and status != RunStatus.PARKED:
            raise UserError(f"cannot adopt {run}: it is {status} in {shown(file)}, and only an ended or parked run can "
                            "be taken over (its source may still be running it); import it without --adopt to read, "
                            "replay or fork it; nothing was imported")


def _chunks(values: list) -> list[list]:
    return [values[i:i + _CHUNK] for i in range(0, len(values), _CHUNK)]


def _clash(source: Store, target: Store, runs: list[str]) -> str | None:
    """Why the file's runs cannot join the target's, or None. It runs inside the target's write. The reasons are a
    run id the target has, an effect key its ledger holds, or a run key that names another run."""
    def first(sql: str, values: list) -> tuple | None:
        for chunk in _chunks(values):
            found = target.conn.execute(sql.format(marks=", ".join("?" * len(chunk))), chunk).fetchone()
            if found:
                return found
        return None

    if found := first("SELECT id FROM runs WHERE id IN ({marks}) ORDER BY id LIMIT 1", runs):
        return (f"run {found[0]} is in {target.path} already (imported before?); import into another database, or "
                "export again without it")
    keys = [key for (key,) in source.conn.execute("SELECT DISTINCT key FROM effects ORDER BY key")]
    if found := first("SELECT key, state, run_id FROM effects WHERE key IN ({marks}) ORDER BY key, id LIMIT 1", keys):
        return (f"the effect key {found[0]!r} is in the ledger of {target.path} already ({found[1]} in run "
                f"{found[2]}), and two ledgers that disagree about one effect cannot be merged")
    run_keys = [key for (key,) in source.conn.execute("SELECT run_key FROM runs WHERE run_key IS NOT NULL")]
    if found := first("SELECT run_key, id FROM runs WHERE run_key IN ({marks}) ORDER BY run_key LIMIT 1", run_keys):
        return f"the run key {found[0]!r} (start --key) names run {found[1]} in {target.path} already"
    return None
