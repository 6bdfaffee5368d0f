"""Looking after the database and what runs leave: doctor, config, completion, db, artifact, worktrees, pulls, prune."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from .. import completion, config, filters, operate, output_file
from ..cli_types import TEXT, VERBATIM, Whole
from ..errors import UserError
from ..format import ago, file_size
from ..runtime.clock import clock_time, iso, now
from ..states import EXIT_NOT_SUCCEEDED, EXIT_OK, TERMINAL
from ..store import Store, artifacts, default_path, open_store
from ..store import prune as prune_runs
from ..store.base import on_server
from ..store.doctor import Diagnosis, diagnose
from ..store.schema import SCHEMA_VERSION
from .group import Session, cli
from .options import asked_first, json_option
from .text import echo, json_out, print_table


@cli.command("completion")
@click.argument("shell", metavar="SHELL", type=click.Choice(completion.SHELLS))
def completion_command(shell: str) -> int:
    """Print the script that makes SHELL complete tui-agent's commands, options, run ids, agents and schedules.

    In ~/.bashrc: eval "$(tui-agent completion bash)". zsh: the same in ~/.zshrc. fish: tui-agent completion
    fish | source in ~/.config/fish/config.fish."""
    echo(completion.script(cli, shell), nl=False)
    return EXIT_OK


@cli.command()
@json_option("One JSON object")
@click.option("--full", is_flag=True, help="Run integrity_check (every index against its table), not quick_check.")
@click.pass_obj
def doctor(session: Session, as_json: bool, full: bool) -> int:
    """Check the database without changing it: damage, schema, WAL, permissions, free disk; exit 0 when
    healthy, 1 otherwise. It opens the file read-only and never creates one."""
    if session.settings.problem:   # doctor goes on: it may be what a person runs to find out what is wrong
        echo(f"tui-agent: {session.settings.problem.what}; doctor goes on without the settings it could not read",
             err=True)
    found = diagnose(session.db or default_path(), full)
    if as_json:
        json_out(found.as_json())
    else:
        _print_diagnosis(found)
    return EXIT_OK if found.healthy else EXIT_NOT_SUCCEEDED


@cli.command("config")
@click.option("--path", "path_only", is_flag=True, help="Print where the config file is (it may not exist yet).")
@json_option("One JSON object: path, exists, settings (key, value, from, where), problem")
@click.pass_context
def config_command(ctx: click.Context, path_only: bool, as_json: bool) -> int:
    """Print each setting in effect and where it came from: a flag, an environment variable, the config file (its
    line), the TUI's saved state or the default. Exit 2 when the file is bad, after naming the key and its line."""
    settings = ctx.obj.settings
    if path_only:
        echo(str(settings.path))
        return EXIT_OK
    assert ctx.parent is not None   # the command runs under the group
    rows = config.effective(ctx.parent, settings)
    if as_json:
        json_out({"path": str(settings.path), "exists": settings.exists, "settings": rows,
                   "problem": settings.problem and str(settings.problem)})
    else:
        echo(f"{settings.path}" + ("" if settings.exists else " (no such file: every setting is a default or given)"))
        shown = [(row["key"], _setting_text(row["value"]), config.said(row)) for row in rows]
        print_table((("SETTING", max(len(k) for k, _, _ in shown)),
                     ("VALUE", min(40, max(len(v) for _, v, _ in shown))), ("FROM", 0)), shown)
    if settings.problem:
        raise settings.problem
    return EXIT_OK


def _setting_text(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        return ", ".join(map(str, value)) or "-"
    return "-" if value is None else str(value).lower() if isinstance(value, bool) else \
        f"{value:g}" if isinstance(value, float) else str(value)


def _print_diagnosis(found: Diagnosis) -> None:
    echo(str(found.path))
    for check in found.checks:
        echo(f"  {'ok' if check.ok else 'FAIL':<5} {check.name:<12} {check.detail}")
        if check.advice:
            echo(f"  {'':<5} {'':<12} what to do: {check.advice}")
    failed = [check.name for check in found.checks if not check.ok]
    echo("healthy" if not failed else f"not healthy: {', '.join(dict.fromkeys(failed))}")


@cli.group("db")
def db_group() -> None:
    """Create or upgrade a database, a SQLite file or a PostgreSQL database named by a postgresql:// URL.

    Workers on several machines share a PostgreSQL database; it needs pip install 'tui-agent[postgres]'."""


@db_group.command("init")
@click.argument("where", metavar="[FILE|URL]", required=False, type=VERBATIM)
@click.pass_obj
def db_init(session: Session, where: str | None) -> int:
    """Make our schema in an empty database (or say it is there already); a database of someone else's is
    refused untouched. WHERE defaults to --db."""
    store = open_store(where or session.db, session.durability)
    try:
        if store.found_version is None:
            echo(f"created tui-agent schema version {SCHEMA_VERSION} in {store.path}")
        else:
            echo(f"{store.path} holds tui-agent schema version {SCHEMA_VERSION} already; nothing to do")
        _print_places(store)
    finally:
        store.close()
    return EXIT_OK


@db_group.command("migrate")
@click.argument("where", metavar="[FILE|URL]", required=False, type=VERBATIM)
@click.pass_obj
def db_migrate(session: Session, where: str | None) -> int:
    """Bring an existing database up to this tui-agent's schema version (a newer one is refused)."""
    store = open_store(where or session.db, session.durability, create=False)
    try:
        if store.found_version == SCHEMA_VERSION:
            echo(f"{store.path} is at schema version {SCHEMA_VERSION} already; nothing to do")
        else:
            echo(f"migrated {store.path} from schema version {store.found_version} to {SCHEMA_VERSION}")
        _print_places(store)
    finally:
        store.close()
    return EXIT_OK


@db_group.command("vacuum")
@click.option("--yes", is_flag=True, help="Rewrite without asking first.")
@click.pass_obj
def db_vacuum(session: Session, yes: bool) -> int:
    """Give a SQLite file's free pages back to the file system, asking first.

    A file made with incremental auto-vacuum (every new one) is done in short batches. An older one is rewritten
    with it (VACUUM), which holds the write lock for the whole rewrite, so every worker waits, and needs the
    file's size free twice more (the temporary folder and the database's own)."""
    store = session.existing_store
    if on_server(store.conn):
        echo("nothing to do on PostgreSQL: the server's autovacuum reuses the space that prune frees")
        return EXIT_OK
    space = prune_runs.free_space(store)
    if not space["incremental"] and not yes:
        question = (f"rewrite {store.path} ({_size(space['file_bytes'])}, {_size(space['free_bytes'])} free inside) "
                    "with incremental auto-vacuum? Every writer waits until it is done")
        if not asked_first(question, "db vacuum rewrites the whole file holding the write lock; pass --yes to do "
                            "it without a question"):
            return EXIT_OK
    done = operate.vacuum(store)
    before, after = done["before"], done["after"]
    echo(f"{store.path}: {_size(before['file_bytes'])} before, {_size(after['file_bytes'])} now"
         + ("" if before["incremental"] else "; it gives the pages prune frees back by itself from now on"))
    return EXIT_OK


def _print_places(store: Store) -> None:
    """Where a store keeps what is not rows: artifacts for every machine, the agents' data per machine."""
    root = artifacts.folder(store)
    echo("artifacts   in the database (--data DIR keeps them in a folder every machine shares)" if root is None
         else f"artifacts   {root}")
    mine = " (this machine's own: sample sources, fetch log, outbox)" if on_server(store.conn) else ""
    echo(f"data folder {store.data_dir}{mine}")


@cli.command()
@click.argument("name", metavar="PATH", type=TEXT)
@click.option("-o", "--output", metavar="FILE", type=click.Path(dir_okay=False),
              help="Save it to FILE, a new one (--force replaces one that exists).")
@click.option("--force", is_flag=True, help="With -o: replace FILE if it exists, whole or not at all.")
@click.pass_obj
def artifact(session: Session, name: str, output: str | None, force: bool) -> int:
    """Print one of a run's artifacts (a report, a large result), or save it with -o, from wherever the database
    keeps it. PATH is what show prints (artifact:artifacts/RUN/NAME, or a file's path), or the path relative to
    the artifacts' folder; nothing else is read (not a file outside the artifacts, nor the database). On a
    terminal it is shown as text with what the terminal would act on made visible; into a pipe or a file it is
    the bytes as stored."""
    try:
        data = artifacts.read(session.existing_store, name)
    except OSError as e:
        raise UserError(f"cannot read artifact {name} ({e.strerror}); tui-agent show RUN names a run's "
                        "artifacts") from None
    if output:
        output_file.save(data, output, force)
    elif sys.stdout.isatty():   # to be read, not kept: made visible as every command's text is
        echo(data.decode("utf-8", errors="backslashreplace"), nl=False)
    else:                       # into a pipe or a file, byte for byte (what -o saves)
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()
    return EXIT_OK


@cli.command("worktrees")
@click.option("--clean", is_flag=True, help="Remove the worktrees whose runs have all ended, after asking (their "
              "branches stay, so a merged branch can then be deleted with git branch -d).")
@click.option("--yes", is_flag=True, help="With --clean: remove them without asking (for scripts).")
@json_option("An array, one object per worktree: worktree, repo, branch, onto, merged, size_bytes, locked, run, "
             "agent, status, reason, runs, removable")
@click.pass_obj
def worktrees_command(session: Session, clean: bool, yes: bool, as_json: bool) -> int:
    """List the git worktrees the coding agents made, with the run working in each. They are those of any agent whose
    run records one. Each shows its run's state, whether its branch is merged into the branch it was meant for, and its
    size on disk; --clean removes those of ended runs that hold nothing a commit does not, after asking. Exit 1 when
    --clean had to keep one of an ended run (changes no commit holds, a lock)."""
    from ..services.worktrees import listing

    store = session.existing_store
    trees = listing(store)
    if clean:
        return _clean_worktrees(store, trees, yes)
    if as_json:
        json_out([tree.as_json() for tree in trees])
        return EXIT_OK
    if not trees:
        echo("no worktree of a coding agent's run (patch and refactor-imports make one in a git repository)")
        return EXIT_OK
    rows = [(tree.run["id"], tree.run["agent"], tree.branch or "(detached)",
             tree.run["status"] + (f": {tree.run['reason']}" if tree.run["reason"] else ""),
             {True: "yes", False: "no", None: "-"}[tree.merged], file_size(tree.size), tree.path) for tree in trees]
    print_table((("RUN", 11), ("AGENT", 16), ("BRANCH", max(len(row[2]) for row in rows)),
                 ("STATE", max(len(row[3]) for row in rows)), ("MERGED", 6), ("SIZE", -9), ("WORKTREE", 0)), rows)
    return EXIT_OK


def _clean_worktrees(store, trees: list, yes: bool) -> int:
    """Clean up for `worktrees --clean`, first saying which worktrees stay and why. It asks before removing the others
    (unless --yes), then removes each as operate.clean_worktrees decides it again."""
    from ..services.worktrees import branch_advice, why_not_remove

    if not trees:
        echo("no worktree of a coding agent's run is left")
        return EXIT_OK
    going = [tree for tree in trees if why_not_remove(tree) is None]
    kept = [(tree, why_not_remove(tree)) for tree in trees if tree not in going]
    if going and not yes:
        for tree in going:
            echo(f"to remove: {tree.path} ({tree.run['id']} {tree.run['status']}, {file_size(tree.size)}; its branch "
                 f"{tree.branch or '(none)'} stays)")
        question = f"Remove {len(going)} worktree(s), {file_size(sum(tree.size for tree in going))} in all?"
        try:
            if not click.confirm(question, default=False, err=True):
                echo("nothing was removed")
                going = []
        except click.Abort:   # no answer to read (a script): nothing is removed unasked
            raise UserError(f"--clean would remove {len(going)} worktree(s) and read no answer; nothing was "
                            "removed; add --yes to remove them without asking") from None
    done = operate.clean_worktrees(store, going) + kept
    for tree, why in done:
        echo(f"removed {tree.path} ({tree.run['id']} {tree.run['status']}); {branch_advice(tree)}" if why is None
             else f"kept {tree.path}: {why}")
    ended_but_kept = [tree for tree, why in done if why and all(r["status"] in TERMINAL for r in tree.runs)]
    return EXIT_NOT_SUCCEEDED if ended_but_kept else EXIT_OK


@cli.command()
@click.option("--repo", type=click.Path(file_okay=False), default=None, metavar="DIR",
              help="The repository (any folder in it); default: every one this database's coding runs worked in.")
@json_option("An array of pull requests: repo, number, state, branch, base, head, title, body, key, opened_at, "
             "closed_at (when closed)")
@click.pass_obj
def pulls(session: Session, repo: str | None, as_json: bool) -> int:
    """List the pull requests on the local git host (what patch opens, kept in the repository's
    .git/tui-agent/pulls.json), oldest first."""
    from ..services.worktrees import pulls as pulls_of
    from ..services.worktrees import repositories

    repos = [str(Path(repo).resolve())] if repo else repositories(session.existing_store)
    try:
        found = pulls_of(repos)
    except ValueError as e:
        raise UserError(f"--repo {repo}: {e}" if repo else str(e)) from None
    if as_json:
        json_out([{k: iso(v) if k in ("opened_at", "closed_at") else v for k, v in pr.items()} for pr in found])
        return EXIT_OK
    if not found:
        echo(f"no pull request in {repo}" if repo else "no pull request: no coding run of this database opened one "
             "(--repo DIR names a repository)")
        return EXIT_OK
    at = now()
    many = len({pr["repo"] for pr in found}) > 1
    print_table((("#", -4), ("STATE", 6), ("BRANCH", max(len(pr["branch"]) for pr in found)), ("BASE", 10),
                 ("HEAD", 12), ("OPENED", -10), *([("REPO", 30)] * many), ("TITLE", 0)),
                [(pr["number"], pr["state"], pr["branch"], pr["base"], (pr.get("head") or "-")[:12],
                  ago(pr["opened_at"], at), *([pr["repo"]] * many), pr["title"]) for pr in found])
    return EXIT_OK


@cli.command("prune")
@click.option("--older-than", "older_than", required=True, type=TEXT, metavar="SPAN",
              help="Remove runs that ended longer ago than this: 30d, 12h, 2w.")
@click.option("--status", "statuses", default=",".join(prune_runs.PRUNABLE), show_default=True, type=TEXT,
              metavar="STATUS,...", help="Which ended runs (comma-separated).")
@click.option("--keep-last", type=Whole(min=0), default=None, metavar="N",
              help="Keep the N newest of these runs of each agent, however old.")
@click.option("--dry-run", is_flag=True, help="Say what would be removed and kept; change nothing.")
@click.option("--yes", is_flag=True, help="Remove without asking first (for scripts and timers).")
@json_option("One JSON object: what was removed (or would be) and what was kept")
@click.pass_obj
def prune_command(session: Session, older_than: str, *, statuses: str, keep_last: int | None, dry_run: bool,
                  yes: bool, as_json: bool) -> int:
    """Remove ended runs with everything recorded for them, in short batches that let running workers' commits through.
    That is their journal, events, effects, model calls, request parts, approvals, notices and artifacts. The keys of
    their confirmed effects and their run keys are kept, so a later run with the same meaning still finds them. Never
    removed: a run that has not ended, one a fork still needs, one with an effect in doubt."""
    chosen = operate.prune_plan(session.existing_store, filters.parse_span(older_than, "--older-than"),
                                prune_runs.chosen_statuses(statuses), keep_last)
    store = session.existing_store
    what = _pruning_said(chosen)
    if dry_run or not chosen.remove:
        if as_json:
            json_out(_plan_json(chosen))
        else:
            echo((f"would remove {what}" if chosen.remove else f"nothing to remove: {what}") + _kept_said(chosen.kept))
        return EXIT_OK
    if not yes and not asked_first(f"remove {what}{_kept_said(chosen.kept)}?", f"prune would remove "
                                    f"{len(chosen.remove)} runs; pass --yes to remove them without a question, or "
                                    "--dry-run to see what it would remove"):
        return EXIT_OK
    done = operate.prune(store, chosen, _pruning_progress(len(chosen.remove)))
    if as_json:
        json_out({**_plan_json(chosen), "removed": dict(done.removed), "stayed": dict(done.stayed),
                   "kept_keys": done.keys, "artifact_bytes": done.artifact_bytes, "batches": done.batches,
                   "longest_hold_s": round(done.longest_hold_s, 4), "vacuum": done.vacuum})
        return EXIT_OK
    removed = sum(done.removed.values())
    files = f" and {_size(done.artifact_bytes)} of artifact files" if done.artifact_bytes else ""
    keys = (f"; {done.keys:,} key{'s' * (done.keys != 1)} kept, so a later run with the same meaning still finds "
            "them" if done.keys else "")
    echo(f"removed {removed:,} run{'s' * (removed != 1)}{_by_status(done.removed)}{files}{keys}; {done.batches:,} "
         f"batches, the longest held the write lock {done.longest_hold_s * 1000:.0f} ms")
    if done.stayed:
        echo(f"{sum(done.stayed.values())} changed before their turn and stay ("
             + ", ".join(f"{n} {_STAYED[why]}" for why, n in done.stayed.items()) + ")")
    if done.vacuum is not None:
        echo(_vacuum_said(done.vacuum))
    return EXIT_OK


_KEPT = {"newest": "the newest of their agent (--keep-last)", "fork": "a fork still needs",
         "doubt": "with an effect in doubt (reconcile it first)"}


_STAYED = {"changed": "resumed or no longer as chosen", "fork": "forked meanwhile", "doubt": "now in doubt"}


def _by_status(counts) -> str:
    return f" ({', '.join(f'{n:,} {status}' for status, n in counts.most_common())})" if counts else ""


def _pruning_said(chosen) -> str:
    count = len(chosen.remove)
    if not count:
        return f"no {' or '.join(chosen.chosen)} run ended before {clock_time(chosen.cutoff)}"
    return (f"{count:,} run{'s' * (count != 1)} that ended before {clock_time(chosen.cutoff)}"
            f"{_by_status(chosen.statuses)}")


def _kept_said(kept) -> str:
    return f"; kept: {', '.join(f'{n:,} {_KEPT[why]}' for why, n in kept.items())}" if kept else ""


def _plan_json(chosen) -> dict:
    return {"cutoff": iso(chosen.cutoff), "statuses": list(chosen.chosen), "remove": chosen.remove,
            "by_status": dict(chosen.statuses), "kept": dict(chosen.kept)}


def _pruning_progress(total: int) -> Callable | None:
    """`removing: N of M runs` rewritten on a terminal at most twice a second; nothing into a pipe."""
    if not sys.stderr.isatty():
        return None
    shown = {"at": time.monotonic() + 1.0}

    def progress(done) -> None:
        if time.monotonic() >= shown["at"]:
            shown["at"] = time.monotonic() + 0.5
            sys.stderr.write(f"\r\x1b[2Kremoving: {sum(done.removed.values()):,} of {total:,} runs")
            sys.stderr.flush()
    return progress


def _size(count: float) -> str:
    return f"{count / 2**20:.1f} MiB" if count >= 2**20 else f"{count / 1024:.1f} KiB" if count >= 1024 else \
        f"{count:.0f} B"


def _vacuum_said(space: dict) -> str:
    if space["incremental"]:
        return (f"gave {_size(space['returned_bytes'])} back to the file system (the file is "
                f"{_size(space['file_bytes'])})")
    return (f"{_size(space['free_bytes'])} are free inside the file, which was made without incremental auto-vacuum "
            "(by an older tui-agent): tui-agent db vacuum gives them back (it rewrites the file, holding the write "
            "lock throughout)")
