"""The schema as an ordered list of forward migrations; the version is their count.

Each migration takes a sqlite-utils Database inside the caller's transaction. A new
database runs all of them; an older one runs the ones it lacks.
"""

from __future__ import annotations

import functools
import sqlite3
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:   # loaded only to migrate (store/db._migrate) or to compare (_expected)
    import sqlite_utils


def _v1(db: sqlite_utils.Database) -> None:
    db.table("meta").create({"key": str, "value": str}, pk="key")
    db.table("runs").create(
        {
            "id": str,
            "agent": str,
            "agent_version": str,
            "code_version": str,
            "request": str,          # JSON
            "run_key": str,          # caller-given dedupe key (start --key), unique when set
            "budget": str,           # JSON: the limits this run was started with
            "model": str,            # provider spec: default (until a worker resolves it), scripted[:FILE],
                                     # anthropic[:ID]
            "status": str,
            "reason": str,
            "attempt": int,
            "fence": int,
            "worker": str,
            "lease_expires_at": float,
            "wake_at": float,
            "generation": int,
            "parent_id": str,        # the run this one was forked from
            "fork_step": int,        # the parent's position where the fork starts anew
            "result": str,           # JSON, or null when it is an artifact
            "result_artifact": str,  # path relative to the data folder
            "error": str,
            "artifact_dir": str,     # relative to the data folder
            "created_at": float,
            "started_at": float,
            "updated_at": float,
            "finished_at": float,
        },
        pk="id",
        not_null=["agent", "request", "status", "attempt", "fence", "generation", "created_at", "updated_at"],
        defaults={"attempt": 0, "fence": 0, "generation": 1},
    )
    db.table("runs").create_index(["run_key"], unique=True)
    db.table("runs").create_index(["created_at", "id"])
    db.table("runs").create_index(["status", "reason", "wake_at"])
    # The runs screen's "needs you" section, keyset-paged like the rest. The WHERE is runs.NEEDS_PERSON, spelled out:
    # a migration's text is history (tests/docs/test_states.py checks the two and states.needs_person agree).
    db.execute("CREATE INDEX runs_needs_person ON runs (created_at, id) WHERE status = 'parked'"
               " OR (status = 'waiting' AND reason NOT IN ('sleep', 'retry'))")
    db.table("checkpoints").create(
        {
            "run_id": str,
            "generation": int,
            "schema_version": int,
            "current_step": int,
            "total_steps": int,
            "next_input": str,       # JSON
            "plan_revision": int,
            "used_steps": int,
            "used_model_calls": int,
            "used_input_tokens": int,
            "used_output_tokens": int,
            "used_cost_usd": float,
            "used_tool_calls": int,
            "used_effects": int,
            "used_wall_s": float,
            "unpriced_calls": int,   # model calls whose cost is unknown: never shown as a silent zero
            "step_attempts": int,    # failed attempts of the step at current_step, so a crash does not reset them
            "soft_position": int,    # the position after which the first soft budget threshold was crossed
            "soft_dimensions": str,  # JSON list: every dimension past its soft threshold
            "updated_at": float,
        },
        pk="run_id",
        foreign_keys=[("run_id", "runs", "id")],
        not_null=["generation", "schema_version", "current_step", "plan_revision"],
        defaults={
            "current_step": 0, "plan_revision": 0, "used_steps": 0, "used_model_calls": 0,
            "used_input_tokens": 0, "used_output_tokens": 0, "used_cost_usd": 0.0,
            "used_tool_calls": 0, "used_effects": 0, "used_wall_s": 0.0, "unpriced_calls": 0,
            "step_attempts": 0,
        },
    )
    # WITHOUT ROWID: the primary key is the table, so a step writes one b-tree, not a table and an index.
    db.execute("""
        CREATE TABLE journal (
            run_id TEXT NOT NULL REFERENCES runs(id),
            generation INTEGER NOT NULL,
            position INTEGER NOT NULL,
            name TEXT NOT NULL,
            kind TEXT NOT NULL,          -- step | model | effect | sleep | approval
            result TEXT,                 -- JSON, or null when it is an artifact
            artifact TEXT,               -- path relative to the data folder
            attempts INTEGER NOT NULL,
            started_at REAL,
            duration_s REAL,
            fence INTEGER NOT NULL,      -- the lease that wrote it
            cost_usd REAL,               -- a model reply's cost; null when unknown
            PRIMARY KEY (run_id, generation, position)
        ) WITHOUT ROWID""")
    db.table("effects").create(
        {
            "id": int,
            "run_id": str,
            "generation": int,
            "position": int,
            "name": str,
            "key": str,              # the idempotency key, built from what the effect means
            "state": str,            # intended | attempted | confirmed | unknown | not_done
            "attempts": int,
            "result": str,           # JSON: what do(key) or lookup(key) returned, or a person recorded
            "has_lookup": int,
            "dedupe_ttl_s": float,   # null: the service does not deduplicate keys
            "lookup_ttl_s": float,   # null: the service's lookups never forget
            "service": str,
            "done_by": str,          # another run whose confirmed effect this one reused
            "first_attempted_at": float,
            "attempted_at": float,
            "attempted_by": str,
            "fence": int,
            "decided_by": str,       # a person's reconciliation
            "decided_at": float,
            "note": str,
            "created_at": float,
            "updated_at": float,
        },
        pk="id",
        foreign_keys=[("run_id", "runs", "id")],
        not_null=["run_id", "generation", "position", "name", "key", "state", "attempts", "created_at"],
        defaults={"attempts": 0, "has_lookup": 0},
    )
    db.table("effects").create_index(["run_id", "generation", "position"], unique=True)
    db.table("effects").create_index(["key", "state"])
    db.table("workers").create(
        {
            "name": str,
            "pid": int,
            "host": str,
            "concurrency": int,
            "lease_s": float,
            "started_at": float,
            "heartbeat_at": float,   # heartbeats update this and the leases; they are not events
            "stopped_at": float,
        },
        pk="name",
        not_null=["pid", "host", "started_at", "heartbeat_at"],
    )
    db.table("approvals").create(
        {
            "id": int,
            "run_id": str,
            "generation": int,
            "position": int,
            "name": str,
            "question": str,
            "asked_at": float,
            "decision": str,         # approved | denied; null while a person has not answered
            "note": str,
            "decided_by": str,
            "decided_at": float,
        },
        pk="id",
        foreign_keys=[("run_id", "runs", "id")],
        not_null=["run_id", "generation", "position", "name", "question", "asked_at"],
    )
    db.table("approvals").create_index(["run_id", "generation", "position"], unique=True)
    db.table("events").create(
        {
            "id": int,
            "run_id": str,
            "at": float,
            "kind": str,
            "message": str,
            "worker": str,
            "fence": int,
            "schedule": str,         # set on a schedule's own events (a fire skipped, a run held back)
        },
        pk="id",
        foreign_keys=[("run_id", "runs", "id")],
        not_null=["at", "kind", "message"],
    )
    db.table("events").create_index(["run_id", "id"])
    db.table("events").create_index(["schedule", "id"])
    db.table("schedules").create(
        {
            "name": str,
            "agent": str,
            "cron": str,
            "tz": str,
            "input": str,            # JSON request for each run
            "missed": str,           # skip | once | all
            "overlap": str,          # skip | wait | allow
            "grace_s": float,        # a fire first seen later than this after its time is missed
            "enabled": int,
            "counts_from": float,    # fires at or before this never count (added, or re-enabled)
            "last_fire_at": float,   # the latest fire instant handled
            "next_fire_at": float,   # cached, so an idle worker checks schedules with one cheap read
            "pending_fire_at": float,  # overlap=wait: the one fire held until the previous run finishes
            "last_run_id": str,
            "created_at": float,
        },
        pk="name",
        not_null=["agent", "cron", "tz", "input", "missed", "overlap", "grace_s", "enabled", "counts_from",
                  "created_at"],
    )


def _v2(db: sqlite_utils.Database) -> None:
    """What it takes to tell whether the worker that attempted an effect may still be sending it."""
    # /proc/<pid>/stat field 22 (clock ticks after boot): a reused pid is not the worker that registered
    db.table("workers").add_column("pid_started", int)
    # set while the run waits because this worker's attempt may still go out (a paused or hung process)
    db.table("effects").add_column("waits_for", str)
    db.execute("""
        CREATE TABLE let_go (
            run_id TEXT NOT NULL REFERENCES runs(id),
            fence INTEGER NOT NULL,      -- the claim whose write the fence refused: it calls nothing more
            worker TEXT NOT NULL,
            at REAL NOT NULL,
            PRIMARY KEY (run_id, fence)
        ) WITHOUT ROWID""")


def _v3(db: sqlite_utils.Database) -> None:
    """Where a failed agent's code raised, not only what: its frames (JSON, innermost last)."""
    db.table("runs").add_column("traceback", str)


def _v4(db: sqlite_utils.Database) -> None:
    """The provider spec a schedule's runs are started with (`--model`). NULL on a schedule added before this:
    its runs start `scripted`, as they always did."""
    db.table("schedules").add_column("model", str)


def _v5(db: sqlite_utils.Database) -> None:
    """Each attempt of a model call, with what was asked, committed before its request is sent. A crash mid-call then
    stays visible and its reservation stays counted, since the API may have billed it. And the prompt cache's share
    of the input tokens."""
    db.execute("""
        CREATE TABLE model_calls (
            run_id TEXT NOT NULL REFERENCES runs(id),
            generation INTEGER NOT NULL,
            position INTEGER NOT NULL,
            call INTEGER NOT NULL,       -- 1, 2, ...: each attempt at this position, a crashed one included
            name TEXT NOT NULL,          -- the journal entry's name, before there is an entry
            fence INTEGER NOT NULL,      -- the lease that sent it: in flight under an older one means it died
            provider TEXT NOT NULL,      -- anthropic | scripted
            model TEXT NOT NULL,         -- the model id asked for
            state TEXT NOT NULL,         -- in_flight | answered | failed
            request TEXT NOT NULL,       -- JSON: model, max_tokens, system and tools digests, messages after N
            reserved_input INTEGER NOT NULL,   -- the worst case held against the budget while in flight,
            reserved_output INTEGER NOT NULL,  -- and for good if the worker dies (possibly billed)
            reserved_usd REAL,           -- null: the model has no price
            tokens INTEGER,              -- output tokens so far while streaming, then the reply's
            cost_usd REAL,               -- the answer's cost; null when unknown or not answered
            request_id TEXT,
            error TEXT,
            started_at REAL NOT NULL,
            updated_at REAL NOT NULL,
            PRIMARY KEY (run_id, generation, position, call)
        ) WITHOUT ROWID""")
    # the cached part of input_tokens, shown apart (cache reads cost a tenth of input, writes a quarter more)
    db.table("checkpoints").add_column("used_cache_read_tokens", int, not_null_default=0)
    db.table("checkpoints").add_column("used_cache_write_tokens", int, not_null_default=0)
    # a system prompt or tool list, stored once per run however many calls send it
    db.execute("""
        CREATE TABLE request_parts (
            run_id TEXT NOT NULL REFERENCES runs(id),
            digest TEXT NOT NULL,
            body TEXT NOT NULL,          -- JSON
            PRIMARY KEY (run_id, digest)
        ) WITHOUT ROWID""")


def _v6(db: sqlite_utils.Database) -> None:
    """The model calls still in flight, or that died so, found without reading the run's other calls. This is what
    the run screen's budget says may have been billed, at the same cost for a loop of ten turns or of 100,000."""
    db.execute("CREATE INDEX model_calls_in_flight ON model_calls (run_id, generation) WHERE state = 'in_flight'")


# A plain step writes only its journal row (one page per commit); the checkpoint row is brought up to date every
# FOLD_EVERY steps, and at once by any entry that changes more than the step count and running time (journal.py).
# The rows after the checkpoint's current_step are its tail, contiguous positions of the current generation: this
# view adds them, so every reader sees the same numbers as if each step had updated the row. A tail holds at most
# FOLD_EVERY rows, so the view costs a few index seeks per run. `tail`: the table that holds them (since v11,
# journal_tail alone).
def checkpoints_now(tail: str) -> str:
    within = f"FROM {tail} j WHERE j.run_id = c.run_id AND j.generation = c.generation AND j.position >= c.current_step"
    return f"""
    CREATE VIEW checkpoints_now AS SELECT c.run_id, c.generation, c.schema_version,
        coalesce((SELECT max(j.position) + 1 {within}), c.current_step) AS current_step,
        c.total_steps, c.next_input, c.plan_revision,
        c.used_steps + coalesce((SELECT max(j.position) + 1 {within}), c.current_step) - c.current_step AS used_steps,
        c.used_model_calls, c.used_input_tokens, c.used_output_tokens, c.used_cost_usd, c.used_tool_calls,
        c.used_effects, c.used_wall_s + (SELECT total(j.wall_s) {within}) AS used_wall_s, c.unpriced_calls,
        c.step_attempts, c.soft_position, c.soft_dimensions,
        max(c.updated_at, coalesce((SELECT max(j.started_at + j.duration_s) {within}), 0)) AS updated_at,
        c.used_cache_read_tokens, c.used_cache_write_tokens
    FROM checkpoints c"""


def _v7(db: sqlite_utils.Database) -> None:
    """A plain step commits one page, not two. The checkpoint row is folded up every few steps, and readers read the
    view that adds the journal rows past it, each with its share of running time (`wall_s`)."""
    db.execute("ALTER TABLE journal ADD COLUMN wall_s REAL")   # null: already counted in the checkpoint row
    db.execute(checkpoints_now("journal"))


def _v8(db: sqlite_utils.Database) -> None:
    """Version 8 adds what a replay and a diff compare beyond names and results.

    That is a digest of a step's arguments, for agents that opt in (`Agent(journal_inputs=True)`), and the mark of
    an entry a person edited before forking."""
    db.execute("ALTER TABLE journal ADD COLUMN inputs TEXT")      # null: the agent does not journal inputs
    db.execute("ALTER TABLE journal ADD COLUMN edited INTEGER")   # 1: a person wrote this result (edit and fork)


def _v9(db: sqlite_utils.Database) -> None:
    """Version 9 adds the notices: one row each time a run comes to need a person, and one reminder per episode.

    They are written in the transition's own transaction; `notified_*` says which process delivered it to
    `--notify` (store/notices.py). The TUI and `watch` only read them, by id."""
    db.execute("""
        CREATE TABLE notices (
            id INTEGER PRIMARY KEY AUTOINCREMENT,   -- never reused: a reader's cursor is an id
            run_id TEXT NOT NULL REFERENCES runs(id),
            kind TEXT NOT NULL,          -- needs_person | reminder
            status TEXT NOT NULL,        -- the run's status and reason as it came to need a person
            reason TEXT,
            message TEXT NOT NULL,       -- the transition's event message (text from agents: never for a shell)
            at REAL NOT NULL,
            episode INTEGER,             -- a reminder: the needs_person notice it reminds of
            notified_by TEXT,            -- the worker or tick that claimed it for its --notify command
            notified_at REAL
        )""")
    db.execute("CREATE INDEX notices_run ON notices (run_id, id)")
    db.execute("CREATE INDEX notices_undelivered ON notices (id) WHERE notified_at IS NULL")
    db.execute("CREATE UNIQUE INDEX notices_one_reminder ON notices (episode) WHERE kind = 'reminder'")
    # Runs that already need a person start their episode here, as delivered: they are not announced again,
    # but they are reminded of. The WHERE is runs.NEEDS_PERSON, spelled out (a migration's text is history).
    db.execute("""
        INSERT INTO notices (run_id, kind, status, reason, message, at, notified_by, notified_at)
        SELECT r.id, 'needs_person', r.status, r.reason,
               coalesce((SELECT e.message FROM events e WHERE e.run_id = r.id ORDER BY e.id DESC LIMIT 1), r.status),
               r.updated_at, 'migration', r.updated_at
        FROM runs r WHERE r.status = 'parked' OR (r.status = 'waiting' AND r.reason NOT IN ('sleep', 'retry'))
        ORDER BY r.created_at, r.id""")


def _v10(db: sqlite_utils.Database) -> None:
    """Artifacts kept in the database, for a server store whose workers run on several machines. A folder beside the
    database exists on none of them; store/artifacts.py decides where they go. A SQLite store keeps its artifacts as
    files, so this table stays empty there; it exists so that both dialects have one schema."""
    db.execute("""
        CREATE TABLE artifacts (
            path TEXT PRIMARY KEY,       -- relative, as the journal's artifact column names it
            content BLOB NOT NULL,
            size INTEGER NOT NULL,       -- bytes, so a listing need not read the content
            created_at REAL NOT NULL
        ) WITHOUT ROWID""")


# Version 11 in both dialects (schema_postgres runs the same): the view of both journal tables, then the rows past
# a checkpoint (runs stopped inside a tail) moved to where the view of the checkpoint now looks for them.
_V11_COLUMNS = ("run_id, generation, position, name, kind, result, artifact, attempts, started_at, duration_s, fence,"
                " cost_usd, wall_s, inputs, edited")
_V11_PAST = ("FROM journal_rows j JOIN checkpoints c ON c.run_id = j.run_id AND j.generation = c.generation"
             " AND j.position >= c.current_step")
V11_JOURNAL = [
    f"CREATE VIEW journal AS SELECT {_V11_COLUMNS} FROM journal_rows UNION ALL SELECT {_V11_COLUMNS} FROM journal_tail",
    f"INSERT INTO journal_tail ({_V11_COLUMNS})"
    f" SELECT {', '.join('j.' + name for name in _V11_COLUMNS.split(', '))} {_V11_PAST}",
    f"DELETE FROM journal_rows WHERE (run_id, generation, position) IN (SELECT j.run_id, j.generation, j.position"
    f" {_V11_PAST})",
]


def _v11(db: sqlite_utils.Database) -> None:
    """A plain step appends to a small table of its own, journal_tail, that holds only the rows past each run's
    checkpoint; a fold moves them into journal_rows. In journal_rows, keyed by run, a run's new rows land among
    other runs' and every few rows SQLite rebalanced a leaf with its neighbours (1.6 pages written per commit
    against raw sqlite3's 1.1); the tail stays a page or two, whose appends rarely rebalance. `journal`, the view
    of both, is what every reader reads."""
    db.execute("DROP VIEW checkpoints_now")
    db.execute("ALTER TABLE journal RENAME TO journal_rows")
    db.execute("""
        CREATE TABLE journal_tail (
            run_id TEXT NOT NULL REFERENCES runs(id),
            generation INTEGER NOT NULL,
            position INTEGER NOT NULL,
            name TEXT NOT NULL,
            kind TEXT NOT NULL,
            result TEXT,
            artifact TEXT,
            attempts INTEGER NOT NULL,
            started_at REAL,
            duration_s REAL,
            fence INTEGER NOT NULL,
            cost_usd REAL,
            wall_s REAL,
            inputs TEXT,
            edited INTEGER,
            PRIMARY KEY (run_id, generation, position)
        ) WITHOUT ROWID""")
    for statement in V11_JOURNAL:
        db.execute(statement)
    db.execute(checkpoints_now("journal_tail"))


def _v12(db: sqlite_utils.Database) -> None:
    """What a worker's row says of where it runs and what it can run. `host_id`: the host as its processes see
    it (the hostname with the boot id and the pid namespace, which tell a container or a rebooted machine of the
    same name apart), so that a worker on the same host can tell that another's process is verifiably gone;
    `pgid`: its process group, so that what its steps started can be found and ended before its runs are taken
    over (store/holders.py). `agents`: the names of the agents it knows (a JSON list), so that a run no worker
    knows can be said. All are NULL in a row an older tui-agent wrote: its lease decides, and it is taken to know
    every agent."""
    db.table("workers").add_column("host_id", str)
    db.table("workers").add_column("agents", str)
    db.table("workers").add_column("pgid", int)


def _v13(db: sqlite_utils.Database) -> None:
    """What a run and a schedule need from elsewhere, kept with them, and what a notice came to. `script`: the
    replies of a `--model scripted:FILE` (the file's JSON list, read once by `start` or `schedule add`), so a
    worker in any folder, on any machine, answers from it without the file; NULL for every other model and in a
    row an older tui-agent wrote (its worker reads FILE, as before). `notices.superseded`: 1 when the process that
    claimed the notice for its --notify command found that the run no longer needed a person for it (decided,
    resumed, ended) and sent nothing; NULL otherwise."""
    db.table("runs").add_column("script", str)
    db.table("schedules").add_column("script", str)
    db.table("notices").add_column("superseded", int)


def _v14(db: sqlite_utils.Database) -> None:
    """Runs another database holds, brought here by `tui-agent import` to be read, diffed, replayed and forked, but
    never resumed. The source may still run them, and both would do their pending effects. No worker claims a run
    that has a row here and no person's action moves it (store/imported.py). A run taken over with `import --adopt`
    has none."""
    db.execute("""
        CREATE TABLE imported_runs (
            run_id TEXT PRIMARY KEY REFERENCES runs(id),
            source TEXT NOT NULL,        -- the database it was exported from, as `export` named it
            exported_at REAL NOT NULL,
            imported_at REAL NOT NULL
        ) WITHOUT ROWID""")


def _v15(db: sqlite_utils.Database) -> None:
    """The ledger's promise outlives the runs that `tui-agent prune` removes. For such a run, `kept_keys` holds the
    key of every confirmed effect and the run's idempotency key, so a later run with the same meaning still finds
    them (store/effects.py `confirmed_with_key`, store/runs.py `insert_run`). `runs.pruned_at`: when prune began
    removing the run, whose rows then go in batches; nothing acts on it meanwhile (operate.py), and the next prune
    finishes what an interrupted one began. NULL on every other run."""
    db.execute("""
        CREATE TABLE kept_keys (
            kind TEXT NOT NULL,          -- effect: a confirmed effect's key | run: a run's idempotency key
            key TEXT NOT NULL,
            run_id TEXT NOT NULL,        -- the run that confirmed it, or that the key named: removed, so no reference
            name TEXT,                   -- effect: its name | run: its agent
            result TEXT,                 -- effect: what was confirmed (JSON) | run: a digest of its request
            at REAL NOT NULL,            -- when it was confirmed, or the run made
            kept_at REAL NOT NULL,       -- when prune removed the run
            PRIMARY KEY (kind, key)
        ) WITHOUT ROWID""")
    db.execute("CREATE INDEX kept_keys_run ON kept_keys (run_id)")   # a new run never takes a removed run's id
    db.table("runs").add_column("pruned_at", float)
    # the forks of a run, found without reading every run: prune keeps a run that a fork still needs
    db.execute("CREATE INDEX runs_forks ON runs (parent_id) WHERE parent_id IS NOT NULL")


# Version 16: the programs `ctx.run_command` starts (schema_postgres.py makes the same table in its dialect).
COMMANDS = """
        CREATE TABLE commands (
            id INTEGER PRIMARY KEY,
            run_id TEXT NOT NULL REFERENCES runs(id),
            generation INTEGER NOT NULL,
            position INTEGER NOT NULL,   -- the journaled call it runs inside
            name TEXT NOT NULL,
            fence INTEGER NOT NULL,      -- the lease that started it: running under an older one means it was left
            argv TEXT NOT NULL,          -- JSON list
            env TEXT NOT NULL,           -- JSON list of the names `env` set, never their values
            host_id TEXT,                -- store/host.py: the host whose processes pgid names
            pgid INTEGER NOT NULL,       -- its process group (it leads it: pgid is its pid)
            pid_started INTEGER,         -- when that process started (host.process_start): a reused pid is not it
            state TEXT NOT NULL,         -- running | ended | killed | gone
            exit INTEGER,
            started_at REAL NOT NULL,
            ended_at REAL
        )"""
COMMANDS_RUNNING = "CREATE INDEX commands_running ON commands (run_id) WHERE state = 'running'"



def _v16(db: sqlite_utils.Database) -> None:
    """Each program `ctx.run_command` starts, recorded with its process group and its start time before it runs. With
    that record (store/commands.py), the next claim of a run whose worker died kills what is left of it."""
    db.execute(COMMANDS)
    db.execute(COMMANDS_RUNNING)


# Version 17 in both dialects: what finding runs reads through, and what a model call used.
V17_INDEXES = [
    "CREATE INDEX runs_status_created ON runs (status, created_at, id)",
    "CREATE INDEX runs_agent_created ON runs (agent, created_at, id)",
    "CREATE INDEX model_calls_started ON model_calls (started_at)",
]
V17_COLUMNS = [f"ALTER TABLE model_calls ADD COLUMN {name}" for name in (
    "input_tokens INTEGER", "cache_read_tokens INTEGER", "cache_write_tokens INTEGER", "usage TEXT")]


def _v17(db: sqlite_utils.Database) -> None:
    """Version 17 adds the indexes that months of runs need, the token columns of model calls, and saved filters.

    The indexes serve the filter's status and agent words, newest first and keyset-paged (store/runs.py,
    runs_page; the time words read the (created_at, id) one), and `spend` through model_calls_started.
    Each answered model call gets what it used, beside its cost: `input_tokens` (every input token, the cached
    ones included, as the budget counts them), `cache_read_tokens`, `cache_write_tokens` and `usage` (the reply's
    usage as the API gave it, JSON, which `spend --reprice` prices by today's table), NULL for a call not
    answered. They are filled in here from the journal for the calls answered before; a reply kept as an
    artifact, or that cannot be read, stays NULL and its tokens are not counted. `saved_filters` gives a name
    to the words of a filter (tui_agent/filters.py), offered in the TUI's palette."""
    for statement in V17_COLUMNS + V17_INDEXES:
        db.execute(statement)
    db.execute("""
        CREATE TABLE saved_filters (
            name TEXT PRIMARY KEY,
            words TEXT NOT NULL,         -- the filter's words, read again each time it is used
            created_at REAL NOT NULL
        )""")
    # a valid reply only (json_valid: the CASE keeps json_type from reading one that is not)
    db.execute("""
        UPDATE model_calls SET usage = (
            SELECT json_extract(j.result, '$.usage') FROM journal j
            WHERE j.run_id = model_calls.run_id AND j.generation = model_calls.generation
              AND j.position = model_calls.position AND j.kind = 'model'
              AND CASE WHEN json_valid(j.result) THEN json_type(j.result, '$.usage') END = 'object')
        WHERE state = 'answered'""")
    read = "CAST(coalesce(json_extract(usage, '$.{}'), 0) AS INTEGER)".format
    db.execute(f"""
        UPDATE model_calls SET cache_read_tokens = {read('cache_read_input_tokens')},
            cache_write_tokens = {read('cache_creation_input_tokens')},
            input_tokens = {read('input_tokens')} + {read('cache_read_input_tokens')}
                + {read('cache_creation_input_tokens')}
        WHERE usage IS NOT NULL""")


def _v18(db: sqlite_utils.Database) -> None:
    """Version 18 adds `workers.log`, where each worker writes its log.

    That is `worker --log FILE`, and every worker the TUI starts: the file's absolute path as the worker's host
    names it, so `tui-agent workers` can say where and `tui-agent logs` print it; NULL for a worker that keeps no
    log, and in a row an older tui-agent wrote."""
    db.table("workers").add_column("log", str)


MIGRATIONS: list[Callable[[sqlite_utils.Database], None]] = [_v1, _v2, _v3, _v4, _v5, _v6, _v7, _v8, _v9, _v10, _v11,
                                                             _v12, _v13, _v14, _v15, _v16, _v17, _v18]
SCHEMA_VERSION = len(MIGRATIONS)
# Versions whose migration an older tui-agent still running on the database does not survive: its writes name
# what the migration changed (version 11: a step's INSERT into `journal`, now a view), and a run whose write
# fails that way ends failed. Such a migration waits until no worker of the database may still be running.
STOPS_OLDER = frozenset({11})

@functools.cache
def _expected() -> dict[str, tuple[str, ...]]:
    """Every table's and view's columns as this code's migrations make them (built once, in memory)."""
    import sqlite_utils

    db = sqlite_utils.Database(memory=True)
    for migration in MIGRATIONS:
        migration(db)
    # this code's own views all read: an error here is a migration's bug, so it is raised
    return {name: _columns_of(db.conn, name) for name in _names(db.conn)}


def _names(conn: sqlite3.Connection) -> list[str]:
    """Every table's and view's name, SQLite's own left out."""
    return [name for (name,) in conn.execute(
        "SELECT name FROM sqlite_master WHERE type IN ('table', 'view') AND name NOT LIKE 'sqlite_%'")]


def _columns_of(conn: sqlite3.Connection, name: str) -> tuple[str, ...]:
    """The columns of table or view `name`; an OperationalError for a view naming a column its table lacks."""
    return tuple(row[1] for row in conn.execute(f'PRAGMA table_info("{name}")'))


def _columns(conn: sqlite3.Connection) -> dict[str, tuple[str, ...] | str]:
    """Each table's and view's columns, or why they cannot be read (a view naming a column its table lacks)."""
    found: dict[str, tuple[str, ...] | str] = {}
    for name in _names(conn):
        try:
            found[name] = _columns_of(conn, name)
        except sqlite3.OperationalError as e:
            found[name] = str(e)
    return found


def differences(conn: sqlite3.Connection) -> list[str]:
    """How a database at SCHEMA_VERSION differs from what that version's migrations make. It lists the tables, views
    or columns missing, because another program changed it or a development build of tui-agent made it. Empty when it
    matches."""
    return missing_from(_columns(conn), _expected())


def missing_from(found: Mapping[str, tuple[str, ...] | str], expected: Mapping[str, tuple[str, ...]]) -> list[str]:
    """What of `expected` (each table's and view's columns) `found` lacks, one phrase each, on either dialect;
    extra tables and columns are not ours to judge."""
    said = []
    for name, columns in expected.items():
        if name not in found:
            said.append(f"no {name}")
        elif isinstance(found[name], str):
            said.append(f"{name} cannot be read ({found[name]})")
        elif missing := [column for column in columns if column not in found[name]]:
            said.append(f"{name} lacks {', '.join(missing)}")
    return said


# The layout of a checkpoint row; a run whose checkpoint says otherwise was written by other code.
CHECKPOINT_SCHEMA = 1
