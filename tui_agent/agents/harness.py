"""harness: the loop developers run as a shell script, made recoverable.

A fresh coding agent works one task of a plan per iteration in a worktree of its own; the plan, the progress
log, the rules and git carry the continuity, and an oracle it cannot edit decides. Each iteration is seed
001's: load, select, reserve, act with oracle and commit (one effect keyed `harness:<run id>:<task id>`),
continue. Why: docs/architecture.md, section 8.1 (The harness agent: seed 001's iteration)."""

from __future__ import annotations

import functools
import itertools
import json
from pathlib import Path
from typing import Any

from ..errors import EffectDeclined, ParkRun, PermanentError
from ..runtime.agent import PATIENCE_S, Agent, RetryPolicy
from ..runtime.context import Context, programs_started, run_program
from ..runtime.outcomes import ACTIONS, Suspend
from ..runtime.plateau import Plateau, PlateauDetector
from ..states import Reason, RunStatus, budget_reason
from . import harness_check, harness_env, harness_plan, worktree
from .files import NotRegular, parts_of, read_regular, write_atomic
from .harness_sample import CHECK as SAMPLE_CHECK
from .harness_sample import SAMPLE_MARK, sample_repo, script
from .oracle import ORACLE, oracle_pattern, restore
from .patch import built_in_script, own_worktree, propose, tools_for

NAME = "harness"
AGENT_LOG_LIMIT = 16 * 1024   # the coding agent's output kept in the journal (all of it is an artifact)
LIMITS = "harness-limits.json"           # ceilings a person raised (`tui-agent harness limit`), among the artifacts
REFUSED = "harness-environment.json"     # the identifiers the last park refused: resuming accepts them
FIELDS = {"repo", "name", "plan", "progress", "rules", "worker", "check", "oracle", "timeout_s", "max_iterations",
          "max_files_changed", "plateau", "progress_tail", "env", "propose", "max_turns"}
PLATEAU = {"unchanged": 3, "shrinking": 3, "same_failure": 3, "action": "escalate"}
SYSTEM = ("You are one iteration of a loop that works a plan, one task per iteration, in a git worktree. Do the task "
          "you are given with the tools, then end your turn with one short paragraph saying what you changed. The "
          "harness runs the check and decides; the tests are the oracle and are not yours to edit.")


# -- the request --------------------------------------------------------------------------------------------------


def _args(value: Any, field: str) -> list[str]:
    if not (isinstance(value, list) and value and all(isinstance(a, str) for a in value)):
        raise PermanentError(f"{field} must be a list of arguments, such as [\"python\", \"-m\", \"pytest\", \"-q\"]")
    return value


def _count(value: Any, field: str, default: int | None) -> int | None:
    if value is None:
        return default
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise PermanentError(f"{field} must be a whole number of at least 1, not {value!r}")
    return value


def _inside(repo: Path, name: Any, field: str) -> str:
    try:
        return "/".join(parts_of(str(name)))
    except ValueError:
        raise PermanentError(f"{field} must be a path inside the repository {repo}, not {name!r}") from None


def _worker(value: Any) -> dict:
    worker = value or {"model": "default"}
    if not isinstance(worker, dict) or ("command" in worker) == ("model" in worker):
        raise PermanentError('worker must be {"command": [ARGS...]} (a command-line coding agent) or '
                             '{"model": MODEL} (the built-in model-and-tools loop)')
    if "command" in worker:
        _args(worker["command"], "worker.command")
        if worker.get("version_command") is not None:
            _args(worker["version_command"], "worker.version_command")
        if worker.get("cost_from") not in (None, "claude-json"):
            raise PermanentError("worker.cost_from must be \"claude-json\" (what `claude -p --output-format json` "
                                 "prints), or absent: each iteration then counts as an unpriced call")
    elif not isinstance(worker["model"], str):
        raise PermanentError('worker.model must be a model id, such as "claude-sonnet-4-5", or "default"')
    return worker


def _settings(request: dict, data_dir: str) -> dict:
    unknown = sorted(set(request) - FIELDS)
    if unknown:
        raise PermanentError(f"the harness has no field {', '.join(unknown)}; its fields: {', '.join(sorted(FIELDS))}")
    sample = not request.get("repo")
    repo = sample_repo(Path(data_dir)) if sample else Path(request["repo"]).expanduser().resolve()
    if not repo.is_dir():
        raise PermanentError(f"repo {request['repo']!r} is not a folder")
    check = request.get("check") or (SAMPLE_CHECK if sample else None)
    if check is None:
        raise PermanentError("give the check, the oracle the harness runs after each iteration, as {\"check\": [ARGS"
                             "...]}, such as [\".venv/bin/python\", \"-m\", \"pytest\", \"-q\"] (tui-agent's own "
                             "Python is not your project's)")
    plateau = {**PLATEAU, **(request.get("plateau") or {})}
    if set(plateau) != set(PLATEAU) or plateau["action"] not in ACTIONS:
        raise PermanentError(f"plateau takes unchanged, shrinking, same_failure (counts) and action "
                             f"({', '.join(ACTIONS)}); got {request.get('plateau')!r}")
    for field in ("unchanged", "shrinking", "same_failure"):
        _count(plateau[field], f"plateau.{field}", None)
    timeout = request.get("timeout_s", 1800)
    if not isinstance(timeout, (int, float)) or isinstance(timeout, bool) or not 0 < timeout < 10 ** 7:
        raise PermanentError(f"timeout_s must be a number of seconds, not {timeout!r}")
    env = request.get("env") or []
    if not (isinstance(env, list) and all(isinstance(n, str) and n for n in env)):
        raise PermanentError("env must be a list of environment variable names (their values are never recorded)")
    return {"repo": str(repo), "sample": sample, "name": request.get("name"), "worker": _worker(request.get("worker")),
            "check": _args(check, "check"), "oracle": list(request.get("oracle") or ORACLE),
            "plan": _inside(repo, request.get("plan", "PLAN.md"), "plan"),
            "progress": _inside(repo, request.get("progress", "PROGRESS.md"), "progress"),
            "rules": _inside(repo, request.get("rules", "RULES.md"), "rules"),
            "timeout_s": float(timeout), "max_iterations": _count(request.get("max_iterations"), "max_iterations", 50),
            "max_files_changed": _count(request.get("max_files_changed"), "max_files_changed", None),
            "plateau": plateau, "progress_tail": _count(request.get("progress_tail"), "progress_tail", 20),
            "env": env, "propose": bool(request.get("propose")),
            "max_turns": _count(request.get("max_turns"), "max_turns", 30)}


def _place(settings: dict, run_id: str, data_dir: str) -> dict:
    repo = Path(settings["repo"])
    top = worktree.toplevel(repo)
    if top is None:
        raise PermanentError(f"the harness works on a git repository; {repo} is not in one")
    try:
        plan = worktree.git("show", f"HEAD:{settings['plan']}", cwd=top)
    except worktree.GitFailed:
        raise PermanentError(f"{top} has no {settings['plan']} in its last commit: the run starts from the committed "
                             f"plan (tui-agent harness init {top} writes starter files, and prints how to commit "
                             "them)") from None
    words = settings["name"] or harness_plan.heading(plan) or "plan"
    return own_worktree(repo, NAME, words=words, run_id=run_id, data_dir=data_dir,
                        holder="another harness run of this plan")


# -- the worktree -------------------------------------------------------------------------------------------------


def _own(settings: dict) -> list[str]:
    return [settings["plan"], settings["progress"], settings["rules"]]


def _read(tree: Path, name: str) -> str:
    try:
        return read_regular(tree, name).decode("utf-8")
    except FileNotFoundError:
        return ""
    except (NotRegular, UnicodeDecodeError) as e:
        raise ParkRun(f"{name} in the worktree {tree} cannot be read as text ({e}); make it a UTF-8 file") from None


def _dirty(tree: Path) -> list[str]:
    """What the working tree holds that its last commit does not (tracked changes and files git does not ignore)."""
    changed = worktree.git("diff", "--name-only", "--no-renames", "-z", "HEAD", cwd=tree)
    new = worktree.git("ls-files", "--others", "--exclude-standard", "-z", cwd=tree)
    return sorted({name for name in (changed + "\0" + new).split("\0") if name})


def _rollback(tree: Path) -> list[str]:
    """Go back to the last good commit, removing every change and every file git does not ignore. The last good commit
    is the branch's head, since a failed iteration never commits. Returns what was there."""
    left = _dirty(tree)
    if left:
        worktree.git("reset", "--hard", "-q", "HEAD", cwd=tree)
        worktree.git("clean", "-fdq", cwd=tree)
    return left


def _names(names: list[str], most: int = 5) -> str:
    return ", ".join(names[:most]) + (f" and {len(names) - most} more" if len(names) > most else "")


# -- Load and Select ----------------------------------------------------------------------------------------------


def _load(ctx: Context, s: dict, *, place: dict, iteration: int, accepted: dict, known: dict | None) -> dict:
    tree = Path(place["worktree"])
    edited = _dirty(tree)
    if edited:   # a person's edits, made between iterations (the plan, the rules): the harness commits them
        worktree.commit(place, ctx.run_id, None, f"Changes made in the worktree before iteration {iteration}",
                        {"Tui-Agent-Edited-By": "a person"})
        ctx.event(f"iteration {iteration}: committed the changes found in the worktree ({_names(edited)}), made "
                  "between iterations")
    plan = _read(tree, s["plan"])
    try:
        tasks = harness_plan.tasks(plan)
    except harness_plan.PlanError as e:
        raise ParkRun(f"{s['plan']}: {e} (in the worktree {tree})") from None
    if not tasks:
        raise ParkRun(f"{s['plan']} in the worktree {tree} has no task (a line `- [ ] text`); add one")
    ids = harness_env.identify(ctx, s, tree)
    differ = harness_env.changes(accepted, ids)
    if differ:
        refused = _refused(ctx)
        if refused != ids:
            ctx.save_artifact(REFUSED, json.dumps(ids))
            raise ParkRun(f"the environment changed since the run last accepted it: {'; '.join(differ)}. Put it "
                          "back, or resume to go on with it as it is now")
        ctx.event(f"iteration {iteration}: went on with the environment as it is now, as resumed: {'; '.join(differ)}")
    head = worktree.git("rev-parse", "HEAD", cwd=tree)
    todo = [t for t in tasks if not t.done]
    task = todo[0] if todo else None
    if task is not None and known is not None and known["head"] == head:
        check = known["check"]   # the last good commit's, already known (none left: the last check runs anew)
    else:
        check = harness_check.run_check(ctx, "check", tree, s["check"], s["timeout_s"])
        _rollback(tree)   # what the check left behind (a cache, a report) is not a person's edit
    return {"iteration": iteration, "task": task.as_dict() if task else None,
            "place": [tasks.index(task) + 1, len(tasks)] if task else None, "done": len(tasks) - len(todo),
            "total": len(tasks), "plan": [[t.text, t.done] for t in tasks], "digest": harness_plan.digest(plan),
            "head": head, "ids": ids,
            "accepted": differ or None, "check": check}


def _refused(ctx: Context) -> dict | None:
    try:
        return json.loads(ctx.read_artifact(str(ctx.artifact_dir / REFUSED)))
    except FileNotFoundError:
        return None


def _task(load: dict) -> harness_plan.Task:
    """The selected task as the load recorded it."""
    task = load["task"]
    return harness_plan.Task(task["id"], task["text"], task["done"], -1, task["check"])


# -- Reserve ------------------------------------------------------------------------------------------------------


def _limits(ctx: Context, s: dict) -> dict:
    """The harness's ceilings: the request's, with those a person raised since (`tui-agent harness limit`)."""
    try:
        raised = json.loads(ctx.read_artifact(str(ctx.artifact_dir / LIMITS)))
    except FileNotFoundError:
        raised = {}
    return {"max_iterations": raised.get("max_iterations", s["max_iterations"]),
            "max_files_changed": raised.get("max_files_changed", s["max_files_changed"])}


def _reserve(ctx: Context, s: dict, place: dict, loop: Loop) -> None:
    """Check, before an iteration starts, that the run may start another. This happens at the live edge only. It checks
    the harness's own ceilings, the soft budget threshold, and whether the next iteration fits what the budget has left
    (estimated from the ones before)."""
    limits = _limits(ctx, s)
    raise_it = f"raise it with tui-agent harness limit {ctx.run_id} --{{}} N (that resumes the run)"
    if loop.iterations >= limits["max_iterations"]:
        raise Suspend(RunStatus.PARKED, Reason.LIMIT_ITERATIONS, f"limit max_iterations reached: {loop.iterations} "
                      f"iterations of {limits['max_iterations']}; " + raise_it.format("max-iterations"))
    if limits["max_files_changed"] is not None:
        changed = [n for n in worktree.git("diff", "--name-only", place["base"], "HEAD", cwd=Path(place["worktree"]))
                   .splitlines() if n not in _own(s)]
        if len(changed) >= limits["max_files_changed"]:
            raise Suspend(RunStatus.PARKED, Reason.LIMIT_FILES_CHANGED, f"limit max_files_changed reached: the branch "
                          f"changes {len(changed)} files, of {limits['max_files_changed']} allowed; "
                          + raise_it.format("max-files-changed"))
    budget = ctx.budget
    soft = [d for d, limit in budget.limits.items() if limit and budget.used[d] >= budget.soft * limit]
    if soft:
        raise Suspend(RunStatus.PARKED, budget_reason(soft[0]), f"{budget.describe(soft[0])}: no new iteration is "
                      f"started; raise it with tui-agent resume {ctx.run_id} --budget {soft[0]}=VALUE")
    needs = {}
    for dimension, field in (("cost_usd", "cost_usd"), ("wall_s", "seconds")):
        before = [o[field] for o in loop.outcomes if o.get(field) is not None][-3:]
        if before:   # the mean of the last three iterations that say
            needs[dimension] = sum(before) / len(before)
    if "command" in s["worker"]:
        needs["model_calls"] = 1
    budget.admit(**needs)


# -- Act, Oracle and Commit ---------------------------------------------------------------------------------------


def _prompt(ctx: Context, s: dict, place: dict, load: dict, failure: str | None) -> str:
    tree = Path(place["worktree"])
    plan = _read(tree, s["plan"])
    task = next((t for t in harness_plan.tasks(plan) if t.id == load["task"]["id"]), None) or _task(load)
    if harness_plan.digest(plan) != load["digest"]:
        ctx.event(f"iteration {load['iteration']}: plan rot: {s['plan']} changed since the iteration was selected "
                  f"(digest {load['digest']} -> {harness_plan.digest(plan)}); task {task.id} is worked as selected")
    names = {"plan": s["plan"], "progress": s["progress"], "rules": s["rules"]}
    where = f"Working tree: {tree}" + (f" {SAMPLE_MARK}" if s["sample"] else "")
    return where + "\n\n" + harness_plan.prompt(
        plan, task, place=tuple(load["place"]),
        progress_tail=harness_plan.tail(_read(tree, s["progress"]), s["progress_tail"]), rules=_read(tree, s["rules"]),
        failure=failure, names=names)


def _rolled_back(ctx: Context, tree: Path, iteration: int) -> None:
    left = _rollback(tree)
    if left:
        ctx.event(f"iteration {iteration}: rolled back what an earlier attempt left in the worktree "
                  f"({_names(left)}) to {worktree.git('rev-parse', '--short', 'HEAD', cwd=tree)}, the last good "
                  "commit; the iteration runs again with a fresh worker")


def _act(ctx: Context, s: dict, *, place: dict, load: dict, failure: str | None, key: str) -> dict:
    """The effect's `do` for a command-line coding agent: the whole iteration."""
    tree, iteration = Path(place["worktree"]), load["iteration"]
    _rolled_back(ctx, tree, iteration)
    prompt = _prompt(ctx, s, place, load, failure)
    command = s["worker"]["command"]
    argv = [arg.replace("{prompt}", prompt) for arg in command]
    given = any("{prompt}" in arg for arg in command)
    ran = run_program(ctx, "coding agent", argv, tree, None if given else prompt, None, s["timeout_s"],
                      AGENT_LOG_LIMIT)
    cost = harness_check.claude_cost(ran["stdout"]) if s["worker"].get("cost_from") == "claude-json" else None
    said = [line for line in ran["stdout"].splitlines() if line.strip()]
    agent = {"exit": ran["exit"], "seconds": ran["duration_s"], "log": ran["stdout_artifact"],
             "errors": ran["stderr_artifact"], "claim": said[-1][:200] if said else "", "cost_usd": cost}
    return _judge(ctx, s, place=place, load=load, key=key, agent=agent)


def _prepare(ctx: Context, s: dict, place: dict, load: dict, failure: str | None) -> dict:
    """Before the built-in model worker's turns: the rollback, and its prompt (journaled, so a replay asks the same)."""
    _rolled_back(ctx, Path(place["worktree"]), load["iteration"])
    return {"prompt": _prompt(ctx, s, place, load, failure)}


def _restored_own(tree: Path, names: list[str]) -> list[str]:
    """The harness's own files put back as the last good commit has them; returns those that differed."""
    differed = sorted(set(_dirty(tree)) & set(names))
    tracked = [n for n in differed if worktree.git("ls-files", "--", n, cwd=tree)]
    if tracked:
        worktree.git("checkout", "HEAD", "--", *tracked, cwd=tree)
    for name in set(differed) - set(tracked):
        (tree / name).unlink()
    return differed


def _judge(ctx: Context, s: dict, *, place: dict, load: dict, key: str, agent: dict) -> dict:
    """The Oracle and Commit phases of an iteration. The oracle's files and the harness's own are restored and the
    checks run, then comes one commit with the task ticked and its progress entry, or a rollback and a decline."""
    tree, iteration, task = Path(place["worktree"]), load["iteration"], _task(load)
    gamed = restore(tree, place["base"], oracle_pattern(s["oracle"]))
    if gamed:
        ctx.event(f"iteration {iteration}: test gaming: the coding agent changed {_names(gamed)}, the oracle's: "
                  "restored from the base commit before the check")
    own = _restored_own(tree, _own(s))
    if own:
        ctx.event(f"iteration {iteration}: the coding agent changed {_names(own)} itself: restored (the harness "
                  "ticks the plan and writes the progress log)")
    worktree.git("add", "-A", cwd=tree)
    stat = worktree.git("diff", "--cached", "--shortstat", "HEAD", cwd=tree)
    numbers = worktree.git("diff", "--cached", "--numstat", "HEAD", cwd=tree).splitlines()
    lines = sum(int(a) + int(d) for a, d, _ in (n.split("\t", 2) for n in numbers) if a.isdigit() and d.isdigit())
    files = worktree.git("diff", "--cached", "--name-only", "HEAD", cwd=tree).splitlines()
    own_check = harness_check.run_check(ctx, "task check", tree, task.check, s["timeout_s"]) if task.check else None
    whole = harness_check.run_check(ctx, "check", tree, s["check"], s["timeout_s"])
    verdict = own_check or whole
    broke = harness_check.regressions(load["check"], whole)
    outcome = {"iteration": iteration, "task_id": task.id, "task": task.text, "idempotency_key": key,
               "plan_digest": load["digest"], "diff": stat, "diff_lines": lines, "files": files,
               "passing_before": load["check"]["passing"], "passing": whole["passing"], "failing": whole["failing"],
               "fingerprint": verdict["fingerprint"], "check": whole, "task_check": own_check, "gamed": gamed,
               "own_edits": own, "agent": agent, "cost_usd": agent.get("cost_usd"),
               "seconds": agent.get("seconds")}
    if verdict["passed"] and not broke:
        return _commit(ctx, s, place=place, load=load, task=task, outcome=outcome)
    if verdict["passed"]:
        outcome.update(status="blocked", why=f"it broke {len(broke)} test(s) that passed before: {_names(broke)}")
    else:
        outcome.update(status="open", why=f"the check failed: {verdict['fingerprint']}")
    _rollback(tree)
    raise EffectDeclined(f"task {task.id} stays open ({outcome['why']}); rolled back", outcome)


def _commit(ctx: Context, s: dict, *, place: dict, load: dict, task: harness_plan.Task, outcome: dict) -> dict:
    tree = Path(place["worktree"])
    plan = _read(tree, s["plan"])
    found = next(t for t in harness_plan.tasks(plan) if t.id == task.id)
    cost = outcome["cost_usd"]
    verdict = f"passed: {_passing(outcome)}"
    entry = harness_plan.entry(task, tuple(load["place"]), iteration=load["iteration"], verdict=verdict,
                               diff=outcome["diff"],
                               cost="unpriced (the coding agent reported no cost)" if cost is None else f"${cost:.4f}")
    write_atomic(tree, s["plan"], harness_plan.ticked(plan, found).encode("utf-8"))
    write_atomic(tree, s["progress"], harness_plan.appended(_read(tree, s["progress"]), entry).encode("utf-8"),
                 make_folders=True)
    ctx.event(f"iteration {load['iteration']}: task {task.id} done ({verdict}); committing it")   # fenced: still ours
    commit = worktree.commit(place, ctx.run_id, [s["plan"], s["progress"]], f"{task.text}\n\n{verdict}",
                             {"Tui-Agent-Task": task.id, "Tui-Agent-Iteration": str(load["iteration"])})
    _rollback(tree)   # what the checks left behind, never staged
    return {**outcome, "status": "done", "why": verdict, "commit": commit}


def _passing(outcome: dict) -> str:
    before, after = outcome.get("passing_before"), outcome.get("passing")
    if before is None or after is None:
        return "the check passes"
    return f"{before} -> {after} tests passing"


def _committed(place: dict, lineage: tuple[str, ...], load: dict) -> dict | None:
    """The effect's lookup: the task's commit on the branch, made by this run (or one it was forked from)."""
    commit = worktree.marked(place, lineage, {"Tui-Agent-Task": load["task"]["id"]})
    if commit is None:
        return None
    return {"iteration": load["iteration"], "task_id": load["task"]["id"], "task": load["task"]["text"],
            "status": "done", "why": "found on the branch by its trailers", "commit": commit, "found_by": "lookup",
            "plan_digest": load["digest"], "cost_usd": None, "seconds": None, "diff_lines": None}


# -- Continue -----------------------------------------------------------------------------------------------------


class Loop:
    """What the loop knows of its iterations so far, rebuilt by replaying them. That is the plan's revision, the
    outcomes, the identifiers accepted, the last check known for a commit, and the three no-progress triggers."""

    def __init__(self, s: dict, ids: dict) -> None:
        self.s, self.accepted = s, ids
        self.known: dict | None = None   # the last good commit's head and check
        self.outcomes: list[dict] = []
        self.revision, self.digest = 0, None
        self._fresh()

    def _fresh(self) -> None:
        p = self.s["plateau"]
        self.detector = PlateauDetector(Plateau(repeats=p["unchanged"], failures=p["same_failure"],
                                                action=p["action"]))
        self.shrinks, self.last_lines = 0, None

    @property
    def iterations(self) -> int:
        return len(self.outcomes)

    def loaded(self, load: dict) -> None:
        if load["digest"] != self.digest:
            self.revision, self.digest = self.revision + 1, load["digest"]
        self.accepted = load["ids"]
        self.known = {"head": load["head"], "check": load["check"]}

    def failure(self, task_id: str) -> str | None:
        """How the last iteration of this task failed, for the next worker's prompt."""
        last = next((o for o in reversed(self.outcomes) if o.get("task_id") == task_id), None)
        if last is None or last["status"] == "done":
            return None
        check = last.get("task_check") or last.get("check") or {}
        return f"{last['why']}\n\n{check.get('summary', '')}".strip()

    def ended(self, outcome: dict, done: int) -> str | None:
        """One iteration's outcome; returns a plateau's description when one is reached now."""
        self.outcomes.append(outcome)
        if outcome["status"] == "done":
            self.known = {"head": outcome["commit"], "check": outcome["check"]} if outcome.get("check") else None
            self._fresh()
            return None
        if outcome["status"] == "blocked":
            return f"task {outcome['task_id']} is blocked: {outcome['why']} (iteration {outcome['iteration']}, " \
                   "rolled back)"
        state = (done, outcome["passing"], outcome["failing"], outcome["fingerprint"])
        unchanged = self.detector.progress(state)
        same = self.detector.failure(outcome["fingerprint"]) if outcome["fingerprint"] else None
        lines = outcome["diff_lines"]
        self.shrinks = self.shrinks + 1 if self.last_lines is not None and lines < self.last_lines else 0
        self.last_lines = lines
        shrinking = None
        if self.shrinks >= self.s["plateau"]["shrinking"]:
            shrinking, self.shrinks = f"the diff shrank {self.shrinks} iterations in a row (to {lines} lines)", 0
        found = unchanged and f"the oracle's state did not change for {self.s['plateau']['unchanged']} iterations"
        return found or (same and f"the check failed the same way {self.s['plateau']['same_failure']} times in a "
                                  f"row: {outcome['fingerprint']}") or shrinking


# -- the run ------------------------------------------------------------------------------------------------------


def harness(ctx: Context, request: dict) -> dict:
    s = ctx.step("settings", _settings, request, str(ctx.data_dir))
    if "model" in s["worker"] and not s["sample"] and built_in_script(ctx):
        raise ParkRun(f"without ANTHROPIC_API_KEY the built-in model worker works only on the sample repository; "
                      f"set the key on the worker, or give a command-line coding agent for {s['repo']}: "
                      "{\"worker\": {\"command\": [...]}}")
    place = ctx.step("worktree", _place, s, ctx.run_id, str(ctx.data_dir))
    worktree.verify(place, ctx.lineage)
    tree = Path(place["worktree"])
    loop = Loop(s, ctx.within(None).step("environment", harness_env.identify, ctx, s, tree))
    for iteration in itertools.count(1):
        worktree.verify(place, ctx.lineage)
        load = ctx.within(None).step(f"iteration {iteration}: load", _load, ctx, s, place=place, iteration=iteration,
                                     accepted=loop.accepted, known=loop.known)
        loop.loaded(load)
        ctx.plan(revision=loop.revision)
        if load["task"] is None:
            break
        ctx.plan(next_input=_record(ctx, load))   # the seed's intent record, saved with the iteration's effect
        if not ctx.replaying:
            _reserve(ctx, s, place, loop)
        outcome = _iteration(ctx, s, place, load, loop)
        ctx.plan(next_input=_record(ctx, load, outcome))
    final = load["check"]
    result = {"branch": place["branch"], "worktree": place["worktree"], "head": load["head"],
              "tasks": {"done": load["done"], "total": load["total"]}, "iterations": loop.iterations,
              "final_check": {k: final[k] for k in ("passed", "exit", "passing", "failing", "output")}}
    if s["propose"] and final["passed"]:
        again = (f"to be asked again about the branch as it is, fork from the last load (tui-agent fork "
                 f"{ctx.run_id} --from-step {ctx.position - 1})")
        worktree.at_commit(place, load["head"], again)
        pr = propose(ctx, place, commit=load["head"],
                     title=harness_plan.heading(_read(tree, s["plan"])) or place["branch"],
                     body=f"{load['done']} tasks of the plan, each verified by the check.", again=again,
                     verdict=f"All {load['total']} tasks are done and the whole check passes.")
        result["pull_request"] = pr["number"]
    return result


def _record(ctx: Context, load: dict, outcome: dict | None = None) -> dict:
    """The checkpoint's next input, seed 001's checkpoint record, which the TUI's run screen shows.

    It holds the task selected, its status (`pending` while its iteration runs), key and artifacts, the tasks done
    of the plan's, and the plan's tasks as [text, ticked] each (the one done in this iteration ticked)."""
    task, status = load["task"], outcome["status"] if outcome else "pending"
    done = status == "done"
    return {"task_id": task["id"], "status": status, "idempotency_key": f"harness:{ctx.run_id}:{task['id']}",
            "artifacts": [a for a in ((outcome or {}).get("commit"), ((outcome or {}).get("agent") or {}).get("log"))
                          if a], "iteration": load["iteration"], "tasks": [load["done"] + done, load["total"]],
            "plan": [[text, ticked or (done and text == task["text"])] for text, ticked in load.get("plan") or ()]}


def _iteration(ctx: Context, s: dict, place: dict, load: dict, loop: Loop) -> dict:
    """Act, Oracle, Commit and Continue for one iteration; returns its outcome (a plateau suspends the run)."""
    live = not ctx.replaying
    key = f"harness:{ctx.run_id}:{load['task']['id']}"
    failure = loop.failure(load["task"]["id"])
    name = f"iteration {load['iteration']}"
    effect = functools.partial(ctx.effect, name, key=key, lookup=lambda k: _committed(place, ctx.lineage, load),
                               service="the harness branch", timeout_s=None)
    if "command" in s["worker"]:
        at = ctx.position
        outcome = effect(do=lambda k: _act(ctx, s, place=place, load=load, failure=failure, key=k))
        starts = programs_started(ctx, at, "coding agent")
        cost = outcome.get("cost_usd")
        ctx.spent(f"{name}: spend", model_calls=max(starts, 1), cost_usd=cost,
                  unpriced_calls=max(starts, 1) - 1 if cost is not None else 0)
    else:
        prompt = ctx.within(None).step(f"{name}: prepare", _prepare, ctx, s, place, load, failure)["prompt"]
        command = _task(load).check or s["check"]
        done = ctx.agent_loop(name, system=SYSTEM, messages=[{"role": "user", "content": prompt}],
                              tools=tools_for(Path(place["worktree"]), place["base"], oracle_pattern(s["oracle"]),
                                              command),
                              model=None if s["worker"]["model"] == "default" else s["worker"]["model"],
                              max_turns=s["max_turns"])
        text = [b.get("text", "") for b in done["final"].get("content", []) if b.get("type") == "text"]
        agent = {"claim": " ".join(text)[:200], "turns": done["turns"], "cost_usd": done["cost_usd"],
                 "seconds": None}
        outcome = effect(do=lambda k: _judge(ctx, s, place=place, load=load, key=k, agent=agent))
    found = loop.ended(outcome, load["done"])
    if found and live:
        action = s["plateau"]["action"]
        raise Suspend(ACTIONS[action], Reason.PLATEAU, f"plateau: {found} ({action}); add a rule with tui-agent "
                      f"harness rule {ctx.run_id} \"...\" (it resumes the run), or resume it as it is")
    return outcome


def _final_check(ctx: Context, result: dict) -> tuple[bool, str]:
    """The harness decides the ending: every task done, and the whole check passing on the last commit."""
    tasks, final = result["tasks"], result["final_check"]
    if tasks["done"] != tasks["total"]:
        return False, f"{tasks['total'] - tasks['done']} of {tasks['total']} tasks are open"
    return final["passed"], f"the whole check {'passes' if final['passed'] else 'fails'} (exit {final['exit']})"


AGENT = Agent(
    name=NAME,
    version="1",
    run=harness,
    script=script,
    check=_final_check,
    # every back-off (a coding agent past its timeout, a model call refused) waits with no worker held
    retry=RetryPolicy(attempts=3, base_s=1.0, cap_s=60.0, wait_over_s=0.0, patience_s=PATIENCE_S),
    description="works a plan (PLAN.md) one task per iteration with a fresh coding agent in a worktree of its "
                "own, the check deciding; input: {repo, check, worker, ...} (none: its sample repository)",
)
