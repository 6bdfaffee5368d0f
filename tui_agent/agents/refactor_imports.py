"""refactor-imports: rewrite every import of one module to another across a tree, one journaled step per
file. In a git repository it works in a worktree and branch of its own and commits once at the end; a crash
at any moment leaves each file old or new, and the run goes on from the next file not recorded. Every claim
checks the recorded files still hold what their steps wrote (recorded_files.py) and that the branch is where
the run left it, and parks naming what differs."""

from __future__ import annotations

from pathlib import Path

from ..errors import ParkRun, PermanentError
from ..runtime.agent import Agent
from ..runtime.context import Context
from . import worktree
from .files import NotRegular, is_utf8, left_alone_line, read_regular, shown, sources, write_atomic
from .imports_rewrite import EXTENSIONS, Unworkable, language, mentions, rewrite
from .recorded_files import RecordedFiles, sha256

NAME = "refactor-imports"


def _settings(request: dict) -> dict:
    missing = [name for name in ("root", "from", "to") if not str(request.get(name) or "").strip()]
    if missing:
        raise PermanentError(f"give {', '.join(missing)} in the input, as in "
                             '{"root": "src", "from": "old.module", "to": "new.module"}')
    root = Path(request["root"]).expanduser().resolve()
    if not root.is_dir():
        raise PermanentError(f"root {request['root']!r} is not a folder")
    if request["from"] == request["to"]:
        raise PermanentError("from and to name the same module; nothing would change")
    return {"root": str(root), "from": request["from"], "to": request["to"]}


def _place(settings: dict, run_id: str, data_dir: str) -> dict:
    """Where the edits happen: the run's own worktree in a repository, else the folder itself."""
    root = Path(settings["root"])
    top = worktree.toplevel(root)
    if top is None:
        return {"git": False, "tree": str(root)}
    sub = root.relative_to(top.resolve()).as_posix() if root != top.resolve() else ""
    branch = worktree.branch_for("refactor", f"{settings['from']}-to-{settings['to']}", top, f"-{run_id}")
    made = worktree.create(top, (Path(data_dir) / NAME / "worktrees" / run_id).resolve(), branch)
    return {"git": True, **made, "sub": sub, "tree": str(Path(made["worktree"]) / sub)}


def _files(tree: str, old: str) -> dict:
    """The plan, recorded once: the source files that mention the old module, and what was left alone. The files are the
    regular ones that mention it at all, in a fixed order; links, FIFOs and sockets are left alone, never followed,
    opened or read. A file to rewrite whose name is not UTF-8 parks the run: the journal records names as text."""
    files, left = sources(Path(tree), EXTENSIONS)
    plan = []
    for name in files:
        try:
            if mentions(read_regular(Path(tree), name), old):
                plan.append(name)
        except NotRegular:   # swapped for something else since the walk
            left[name] = "no longer a regular file"
    unnamed = [shown(name) for name in plan if not is_utf8(name)]
    if unnamed:
        named = ", ".join(unnamed[:10]) + (f" and {len(unnamed) - 10} more" if len(unnamed) > 10 else "")
        raise ParkRun(f"{named}: not a UTF-8 name, which the run cannot record; rename each such file in {tree} to "
                      "a UTF-8 name (in a git worktree with git mv, so the commit carries the rename)")
    return {"files": plan, "left_alone": {shown(name): kind for name, kind in left.items()}}


def _rewrite_file(tree: str, name: str, old: str, new: str) -> dict:
    """One file: rewritten and renamed into place, or `already done` when it imports the old module no more
    (a crash after the rename and before this step's record)."""
    try:
        done = rewrite(read_regular(Path(tree), name), name, old, new)
    except FileNotFoundError:
        raise ParkRun(f"{name} is gone from {tree}; restore it") from None
    except NotRegular as e:
        raise ParkRun(f"{e} (in {tree}), but the run's plan holds a regular file there; put the file back") from None
    except Unworkable as e:
        raise ParkRun(f"{name}: {e}; fix it") from None
    if not done.changes:
        return {"path": name, "status": "already done", "imports": 0, "sha256": sha256(done.data)}
    write_atomic(Path(tree), name, done.data)
    return {"path": name, "status": "rewritten", "imports": done.changes, "diff": done.diff,
            "sha256": sha256(done.data)}


def refactor_imports(ctx: Context, request: dict) -> dict:
    settings = ctx.step("settings", _settings, request)
    old, new = settings["from"], settings["to"]
    place = ctx.step("worktree", _place, settings, ctx.run_id, str(ctx.data_dir))
    recorded = RecordedFiles(ctx, place, old, new)   # on every claim: never a partial rewrite committed or checked
    if place["git"]:
        with recorded.parking():
            worktree.verify(place, ctx.lineage)   # on every turn: never a silent rewrite of the wrong tree
    plan = ctx.step("find-files", _files, place["tree"], old)
    # a list: a plan recorded before links and other entries were told apart
    names, left = (plan, {}) if isinstance(plan, list) else (plan["files"], plan["left_alone"])
    if left:
        ctx.note("left-alone", left_alone_line(left))
    ctx.plan(total_steps=len(names) + 4 + bool(left))
    rewritten = []
    for i, name in enumerate(names):
        ctx.plan(next_input=names[i + 1] if i + 1 < len(names) else None)   # saved with this file's record
        replayed = ctx.replaying
        if not replayed:
            recorded.settle()
        done = ctx.step(f"file:{name}", _rewrite_file, place["tree"], name, old, new)
        if replayed:
            recorded.add(done)
        if done["status"] == "rewritten":
            rewritten.append(name)
    result = {"tree": place["tree"], "files": names, "rewritten": len(rewritten)}
    if not place["git"]:
        recorded.settle()
        return result
    if not ctx.replaying:
        recorded.settle()   # before the commit is made: it must hold every rewrite
    prefix = f"{place['sub']}/" if place["sub"] else ""
    instead = (f"to commit the branch as it is, fork from the commit step (tui-agent fork {ctx.run_id} "
               f"--from-step {ctx.position})")
    commit = ctx.step("commit", worktree.commit_once, place, ctx.lineage, [prefix + n for n in names],
                      f"Rewrite imports of {old} to {new} ({len(names)} files)")
    with recorded.parking():
        worktree.at_commit(place, commit, instead)   # the run names this commit: the branch must be at it
    recorded.settle()
    return {**result, "branch": place["branch"], "commit": commit,
            "merge": f"git -C {place['repo']} merge {place['branch']}"}


def check(ctx: Context, result: dict) -> tuple[bool, str | None]:
    """No file of the plan imports the old module any more, and the Python files compile."""
    settings = ctx.request
    for name in result["files"]:
        try:
            data = read_regular(Path(result["tree"]), name)
            if rewrite(data, name, settings["from"], settings["to"]).changes:
                return False, f"{name} still imports {settings['from']}"
        except NotRegular as e:
            return False, str(e)
        except Unworkable as e:
            return False, f"{name}: {e}"
        if language(name) == "python":
            try:
                compile(data, name, "exec", dont_inherit=True)
            except SyntaxError as e:
                return False, f"{name} does not compile: line {e.lineno}: {e.msg}"
    return True, None


AGENT = Agent(
    name=NAME,
    version="1",
    run=refactor_imports,
    check=check,
    description="rewrites every import of one module to another across a tree (Python, JS/TS), resumable; "
                "input: {root, from, to}",
)
