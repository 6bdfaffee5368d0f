"""Two runs side by side, for `tui-agent diff A B` and the run screen's `d`.

The current journals are aligned by position, a page at a time; each row says what differs, a fork's copied rows
are one `shared` row, and `first_divergence` looks for the first row whose names or results differ. Free of
textual. The comparison rules and why: docs/architecture.md, section 9 (The TUI), "The diff's rules".
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import UserError
from ..filters import Filter
from ..format import duration_ms, wall_s
from ..paging import every
from ..report import runs_page
from ..runtime.results import decode, parse
from ..safe_text import json_text
from ..states import EntryKind
from ..store import Store, artifacts
from ..store.journal import PAGE, checkpoint_for, journal_page
from ..store.rows import RunRow
from ..store.runs import get_run, recorded_positions, resolve_run
from ..strict_json import finite

DURATION_SHARE = 0.10        # durations differ by more than this share of the longer one ...
DURATION_S = 0.005           # ... and by more than this many seconds
COST_EPSILON = 1e-8          # dollars: a millionth of a cent
BEFORE, AFTER = 5, 15        # the CLI's default window: entries before and from the first divergence
TOTALS = (("cost_usd", "cost"), ("input_tokens", "input tokens"), ("output_tokens", "output tokens"),
          ("steps", "steps"), ("wall_s", "wall time"))
WHY = {"name": "the names differ", "result": "the results differ", "only_a": "only A has an entry",
       "only_b": "only B has an entry"}


@dataclass(frozen=True)
class Pair:
    """Two runs to compare: their rows as read when the diff opened, the fork relation, and `shared_until`,
    the positions below which a row may be the very entry a fork copied (0 when neither is the other's fork)."""

    a: RunRow
    b: RunRow
    fork: dict | None           # {"parent": id, "child": id, "fork_step": n}
    shared_until: int


def pair(store: Store, a_ref: str, b_ref: str) -> Pair:
    """The two runs named by id or unique prefix (an unknown or ambiguous one is a UserError: exit 2)."""
    a_id, b_id = resolve_run(store, a_ref), resolve_run(store, b_ref)
    if a_id == b_id:
        raise UserError(f"{a_ref!r} and {b_ref!r} are the same run ({a_id}); name two runs")
    return pair_of(store, a_id, b_id)


def pair_of(store: Store, a_id: str, b_id: str) -> Pair:
    a, b = get_run(store, a_id), get_run(store, b_id)
    fork, shared = None, 0
    for parent, child in ((a, b), (b, a)):
        if child["parent_id"] == parent["id"]:
            assert child["fork_step"] is not None   # store.runs.fork writes parent_id and fork_step together
            fork = {"parent": parent["id"], "child": child["id"], "fork_step": child["fork_step"]}
            # a restarted fork no longer holds the copies (a restarted parent is caught by comparing rows)
            shared = child["fork_step"] if child["generation"] == 1 else 0
    return Pair(a, b, fork, shared)


def refreshed(store: Store, p: Pair) -> Pair:
    """The same two runs as they stand now (a run moves on, or restarts in a new generation)."""
    return pair_of(store, p.a["id"], p.b["id"])


# -- totals ---------------------------------------------------------------------------------------


def totals(store: Store, run_id: str) -> dict[str, float]:
    """What a run has used, from `checkpoints_now` (the folded counters plus the tail)."""
    checkpoint = checkpoint_for(store, run_id)
    return {name: checkpoint.get(f"used_{name}") or 0 for name, _ in TOTALS}


def totals_differ(a: dict, b: dict) -> list[str]:
    """The totals that differ: cost by more than COST_EPSILON, wall time by the duration rule, counts at all."""
    differ = []
    for name, _ in TOTALS:
        if name == "cost_usd":
            changed = _cost_differs(a[name], b[name])
        elif name == "wall_s":
            changed = _duration_differs(a[name], b[name])
        else:
            changed = a[name] != b[name]
        if changed:
            differ.append(name)
    return differ


def money(value: float) -> str:
    """Dollars precise enough for a scripted model's costs: $0.19, $0.0005, $0.000006, $0."""
    if value == 0:
        return "$0"
    return f"${value:.2f}" if value >= 0.01 else "$" + f"{value:.6f}".rstrip("0").rstrip(".")


def shown_total(name: str, value: float) -> str:
    if name == "cost_usd":
        return money(value)
    if name == "wall_s":
        return wall_s(value)
    return f"{value:,.0f}"


def shown_delta(name: str, a: float, b: float) -> str:
    """B - A, signed."""
    delta = b - a
    sign = "+" if delta > 0 else "-" if delta < 0 else "±"
    return sign + shown_total(name, abs(delta))


# -- entries --------------------------------------------------------------------------------------


def _cost_differs(a: float | None, b: float | None) -> bool:
    if a is None or b is None:
        return (a is None) != (b is None)
    return abs(a - b) > COST_EPSILON


def _duration_differs(a: float | None, b: float | None) -> bool:
    if a is None or b is None:
        return (a is None) != (b is None)
    gap = abs(a - b)
    return gap > DURATION_S and gap > DURATION_SHARE * max(a, b)


def _without_id(text: str) -> Any:
    value = parse(text)
    if isinstance(value, dict):
        value.pop("id", None)
    return value


def same_result(a: dict, b: dict, store: Store) -> bool:
    """Whether two journal rows recorded the same result (see the module's rules)."""
    if a["artifact"] is None and b["artifact"] is None:
        if a["result"] == b["result"]:
            return True
        if a["kind"] == EntryKind.MODEL == b["kind"] and a["result"] is not None and b["result"] is not None:
            return _without_id(a["result"]) == _without_id(b["result"])
        return False
    if a["artifact"] is None or b["artifact"] is None:
        return False            # one result over the artifact threshold, the other under it
    if a["artifact"] == b["artifact"]:
        return True
    try:
        first, second = artifacts.load(store, a["artifact"]), artifacts.load(store, b["artifact"])
        if a["kind"] == EntryKind.MODEL == b["kind"]:
            return _without_id(first.decode("utf-8")) == _without_id(second.decode("utf-8"))
        return first == second
    except OSError:
        return False            # an artifact that cannot be read is not known to be the same


def _identical(a: dict, b: dict) -> bool:
    """The very same recorded entry (a fork's copy of its parent's row), not edited on either side."""
    return not a.get("edited") and not b.get("edited") and all(
        a[k] == b[k] for k in ("name", "kind", "result", "artifact", "started_at", "duration_s", "cost_usd"))


def aligned(store: Store, position: int, a: dict | None, b: dict | None, p: Pair) -> dict:
    """One aligned row: the two journal rows at `position` (either may be None) and what differs."""
    if a is None or b is None:
        return {"position": position, "a": a, "b": b, "shared": False, "why": "only_b" if a is None else "only_a",
                "differs": {"name": False, "result": False, "cost": False, "duration": False}}
    shared = position < p.shared_until and _identical(a, b)
    differs = {"name": a["name"] != b["name"],
               "result": not shared and not same_result(a, b, store),
               "cost": _cost_differs(a["cost_usd"], b["cost_usd"]),
               "duration": _duration_differs(a["duration_s"], b["duration_s"])}
    why = "name" if differs["name"] else "result" if differs["result"] else None
    return {"position": position, "a": a, "b": b, "shared": shared, "why": why, "differs": differs}


def _range(store: Store, run: Mapping[str, Any], first: int, count: int) -> dict[int, dict]:
    rows = journal_page(store, run["id"], generation=run["generation"], after=first - 1 if first else None, limit=count)
    return {row["position"]: row for row in rows}


def end_of(store: Store, p: Pair) -> int:
    """One past the last position either run has (two primary-key seeks)."""
    return max(recorded_positions(store.conn, run["id"], run["generation"]) for run in (p.a, p.b))


def aligned_page(store: Store, p: Pair, after: int | None = None, limit: int = PAGE,
                 newest_first: bool = False) -> list[dict]:
    """A page of aligned rows by position, in the shape `paging.Window` and `paging.every` fetch: the rows after
    position `after` (before it, newest first, when `newest_first`; from the start, or the end, when None).
    Each run's journal is read for the same position range, `limit` rows at most."""
    if newest_first:
        end = end_of(store, p) if after is None else after
        first = max(0, end - limit)
        count = end - first
    else:
        first = 0 if after is None else after + 1
        count = limit
    if count <= 0:
        return []
    a, b = _range(store, p.a, first, count), _range(store, p.b, first, count)
    rows = [aligned(store, position, a.get(position), b.get(position), p) for position in sorted(a.keys() | b.keys())]
    return rows[::-1] if newest_first else rows


def rows_of(store: Store, p: Pair, first: int = 0, page: int = PAGE) -> Iterator[dict]:
    """Every aligned row from position `first` on, read a page at a time."""
    return every(lambda after, limit, _: aligned_page(store, p, first - 1 if after is None and first else after,
                                                      limit), lambda row: row["position"], page)


def first_divergence(store: Store, p: Pair, cancelled: Callable[[], bool] = lambda: False,
                     page: int = PAGE) -> dict | None:
    """The first position where the names or the results differ or only one run has an entry, as
    {position, why, message}; None when the runs are the same entry for entry. Read a page at a time, and
    stops early (None) when `cancelled()` says so between rows."""
    for row in rows_of(store, p, page=page):
        if cancelled():
            return None
        if row["why"]:
            return divergence_of(row)
    return None


def divergence_of(row: dict) -> dict:
    a, b, why = row["a"], row["b"], row["why"]
    if why == "name":
        said = f"A called {a['name']!r} where B called {b['name']!r}"
    elif why == "result":
        said = f"{a['name']!r} returned another result"
    elif why == "only_a":
        said = f"only A has an entry here ({a['name']!r}); B has none from here on"
    else:
        said = f"only B has an entry here ({b['name']!r}); A has none from here on"
    return {"position": row["position"], "why": why, "message": said}


def search(db_path: Path | str, durability: str, a_id: str, b_id: str, cancelled: Callable[[], bool]) -> dict | None:
    """`first_divergence` on a connection of its own, read-only (the TUI's thread worker: a sqlite3 connection
    belongs to the thread that opened it)."""
    from ..store import open_store

    store = open_store(db_path, durability, create=False)
    try:
        store.read_only()
        return first_divergence(store, pair_of(store, a_id, b_id), cancelled)
    finally:
        store.close()


def results_at(store: Store, row: dict) -> tuple[Any, Any]:
    """The two decoded results of an aligned row (artifacts read: for the one entry selected)."""
    a, b = (None if side is None else decode(store, side["result"], side["artifact"]) for side in (row["a"], row["b"]))
    return a, b


# -- the other run: what `d` on the run screen offers ---------------------------------------------


def candidates(store: Store, run_id: str, limit: int = 30) -> list[dict]:
    """Runs to compare `run_id` with: its parent first (a fork's), then its own forks, then the other runs of
    the same agent, newest first; `limit` at most, read from the newest runs of that agent (bounded reads)."""
    run = get_run(store, run_id)
    found: list[dict] = []
    if run["parent_id"]:
        parent = get_run(store, run["parent_id"])
        found.append({**_candidate(parent), "kind": "parent",
                      "relation": f"its parent (forked at #{run['fork_step']})"})
    forks, others = [], []
    for row in runs_page(store, limit=limit * 4, where=Filter(agent=run["agent"])):
        if row["id"] in (run_id, run["parent_id"]):
            continue
        if row["parent_id"] == run_id:
            forks.append({**_candidate(row), "kind": "fork", "relation": f"a fork of it at #{row['fork_step']}"})
        else:
            others.append({**_candidate(row), "kind": None, "relation": ""})
    return (found + forks + others)[:limit]


def _candidate(run: Mapping[str, Any]) -> dict:
    return {"id": run["id"], "agent": run["agent"], "status": run["status"], "reason": run["reason"],
            "created_at": run["created_at"]}


def resolve(store: Store, ref: str) -> str:
    """A run id from an id or unique prefix (UserError otherwise): the picker's typed answer."""
    return resolve_run(store, ref)


# -- what the CLI prints --------------------------------------------------------------------------


def _side(store: Store, run: Mapping[str, Any]) -> dict:
    return {"id": run["id"], "agent": run["agent"], "agent_version": run["agent_version"], "status": run["status"],
            "reason": run["reason"], "generation": run["generation"], "parent_id": run["parent_id"],
            "fork_step": run["fork_step"], "entries": recorded_positions(store.conn, run["id"], run["generation"])}


def _entry(row: dict | None) -> dict | None:
    if row is None:
        return None
    return {"name": row["name"], "kind": row["kind"], "duration_ms": round(row["duration_s"] * 1000, 3),
            "cost_usd": row["cost_usd"], "attempts": row["attempts"], "edited": bool(row.get("edited"))}


def entry_json(row: dict) -> dict:
    """An aligned row as `diff --json` lists it."""
    return {"position": row["position"], "shared": row["shared"], "why": row["why"], "differs": row["differs"],
            "a": _entry(row["a"]), "b": _entry(row["b"])}


def window(divergence: dict | None, every_entry: bool) -> tuple[int, int | None] | None:
    """The positions printed: (first, last or None for all), None for none (same runs, no --all)."""
    if every_entry:
        return 0, None
    if divergence is None:
        return None
    return max(0, divergence["position"] - BEFORE), divergence["position"] + AFTER - 1


def _window_rows(store: Store, p: Pair, span: tuple[int, int | None] | None) -> Iterator[dict]:
    if span is None:
        return iter(())
    first, last = span
    if last is None:
        return rows_of(store, p, first)
    return iter(aligned_page(store, p, first - 1 if first else None, last - first + 1))


def summary(store: Store, p: Pair, divergence: dict | None) -> dict:
    """The JSON object without its entries."""
    a_totals, b_totals = totals(store, p.a["id"]), totals(store, p.b["id"])
    found = None
    if divergence is not None:
        found = dict(divergence)
        row = aligned_page(store, p, divergence["position"] - 1 if divergence["position"] else None, 1)[0]
        a_result, b_result = results_at(store, row)
        found["a"] = None if row["a"] is None else {"name": row["a"]["name"], "result": a_result}
        found["b"] = None if row["b"] is None else {"name": row["b"]["name"], "result": b_result}
    return {"a": _side(store, p.a), "b": _side(store, p.b), "fork": p.fork, "same": divergence is None,
            "totals": {"a": a_totals, "b": b_totals, "differ": totals_differ(a_totals, b_totals)},
            "first_divergence": found}


def json_lines(store: Store, p: Pair, divergence: dict | None, every_entry: bool) -> Iterator[str]:
    """`diff --json`: one object, its entries (the window, or every one with --all) written as they are read."""
    head = summary(store, p, divergence)
    span = window(divergence, every_entry)
    head["window"] = None if span is None else {"first": span[0], "last": span[1]}
    text = json_text(finite(head), indent=2, allow_nan=False)
    yield text[:-2] + ',\n  "entries": ['
    held = None                  # one row behind, so that every row but the last ends with a comma
    for row in _window_rows(store, p, span):
        if held is not None:
            yield f"    {held},"
        held = json_text(finite(entry_json(row)), allow_nan=False)
    if held is not None:
        yield f"    {held}"
    yield "  ]\n}"


EDITED = "✎"
NAME_W = 26


def side_text(row: dict | None, width: int = NAME_W) -> str:
    """An entry as one cell: name (✎ when a person edited it), duration, cost."""
    if row is None:
        return f"{'—':<{width}} {'':>8} {'':>8}"
    name = row["name"] + (f" {EDITED}" if row.get("edited") else "")
    name = name if len(name) <= width else name[: width - 1] + "…"
    cost = money(row["cost_usd"]) if row["cost_usd"] is not None else ("$?" if row["kind"] == EntryKind.MODEL else "")
    return f"{name:<{width}} {duration_ms(row['duration_s'] * 1000):>8} {cost:>8}"


def flags_text(row: dict, short: bool = False) -> str:
    """What differs in a row, in words: `result cost time`, `only A has an entry` (`only A`, short)."""
    if row["shared"]:
        return "same entry (before the fork point)"
    if row["why"] in ("only_a", "only_b"):
        return WHY[row["why"]].removesuffix(" has an entry") if short else WHY[row["why"]]
    return " ".join(name if name != "duration" else "time" for name, on in row["differs"].items() if on)


def line_of(row: dict, divergence: dict | None) -> str:
    mark = ">" if divergence and divergence["position"] == row["position"] else " "
    if row["shared"]:
        return f"{mark}{row['position']:>6}  {side_text(row['a'])}   = shared"
    return f"{mark}{row['position']:>6}  {side_text(row['a'])}   {side_text(row['b'])}   {flags_text(row)}".rstrip()


def _clip(value: Any, width: int = 100) -> str:
    text = json_text(value, default=str)
    return text if len(text) <= width else text[: width - 1] + "…"


def text_lines(store: Store, p: Pair, divergence: dict | None, every_entry: bool) -> Iterator[str]:
    """`diff` as text: the two runs, the totals, the first divergence, then the entries of the window (every
    entry with --all, a page at a time)."""
    head = summary(store, p, divergence)
    for label, side in (("A", head["a"]), ("B", head["b"])):
        relation = ""
        if p.fork and p.fork["child"] == side["id"]:
            relation = f" · fork of {'A' if label == 'B' else 'B'} at #{p.fork['fork_step']}"
        yield (f"{label}  {side['id']}  {side['agent']} v{side['agent_version']}  {side['status']}"
               + (f": {side['reason']}" if side["reason"] else "")
               + f"  · {side['entries']:,} entries (generation {side['generation']}){relation}")
    yield ""
    t = head["totals"]
    yield f"{'':<14} {'A':>12} {'B':>12} {'B - A':>12}"
    for name, label in TOTALS:
        a, b = t["a"][name], t["b"][name]
        yield (f"{label:<14} {shown_total(name, a):>12} {shown_total(name, b):>12} {shown_delta(name, a, b):>12}"
               + ("  differs" if name in t["differ"] else ""))
    yield ""
    found = head["first_divergence"]
    if found is None:
        yield (f"the same entry for entry ({max(head['a']['entries'], head['b']['entries']):,} entries: names and "
               "results)")
        if not every_entry:
            return
    else:
        yield f"first divergence: #{found['position']} ({WHY[found['why']]}): {found['message']}"
        for label in ("a", "b"):
            if found[label] is not None:
                yield f"  {label.upper()}  {_clip(found[label]['result'])}"
    span = window(divergence, every_entry)
    yield ""
    yield f"{'':1}{'POS':>6}  {'A':<{NAME_W + 18}}   {'B':<{NAME_W + 18}}   DIFFERS"
    for row in _window_rows(store, p, span):
        yield line_of(row, divergence)
    if span is not None and span[1] is not None and span[1] + 1 < end_of(store, p):
        yield f"  … (diff {p.a['id']} {p.b['id']} --all prints every entry)"
