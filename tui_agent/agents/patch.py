"""patch: a coding agent that works one bug on a branch of its own until the tests it may not edit pass.

The model and tools are scoped to its worktree. Then it commits, waits for a person's approval of that commit
(its id is in the question), and opens one pull request on the local git host (an effect keyed
`pr:<repo>:<branch>`) only while the branch is at it, or parks saying what changed. patch-night starts one
keyed `patch` run per issue file that has none yet, so a schedule works the queue."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from ..errors import ParkRun, PermanentError
from ..models import Unresolved
from ..runtime.agent import Agent, Budget, Plateau
from ..runtime.context import Context
from ..runtime.loop import Calls
from ..runtime.tools import tool
from . import worktree
from .files import NotRegular, parts_of, read_regular, shown, walked, write_atomic
from .githost import AlreadyOpen, GitHost, HeadMoved
from .oracle import ORACLE, oracle_pattern, run_oracle
from .patch_sample import SAMPLE_MARK, sample_repo, script

NAME, NIGHT = "patch", "patch-night"
SYSTEM = ("You fix one bug in a git worktree. Read the code, change it with write_file, and run the tests with "
          "run_tests until they pass. The tests are the oracle: you cannot edit them. End your turn with a "
          "one-paragraph summary of the fix.")


def _settings(request: dict, data_dir: str) -> dict:
    sample = not request.get("repo")
    repo = sample_repo(Path(data_dir)) if sample else Path(request["repo"]).expanduser().resolve()
    if not repo.is_dir():
        raise PermanentError(f"repo {request['repo']!r} is not a folder")
    issue = Path(request.get("issue") or ("issues/mean-is-wrong.md" if sample else ""))
    issue = issue if issue.is_absolute() else repo / issue
    if not issue.is_file():
        raise PermanentError(f"give the bug as {{\"issue\": FILE}}, a Markdown file; {issue} is not one")
    command = request.get("test_command") or [sys.executable, "-m", "unittest"]
    if not (isinstance(command, list) and command and all(isinstance(a, str) for a in command)):
        raise PermanentError("test_command must be a list of arguments, such as [\"python\", \"-m\", \"pytest\"]")
    return {"repo": str(repo), "issue": str(issue), "issue_text": issue.read_text(encoding="utf-8"),
            "sample": sample, "test_command": command, "oracle": list(request.get("oracle") or ORACLE)}


def own_worktree(repo: Path, agent: str, *, words: str, run_id: str, data_dir: str, holder: str) -> dict:
    """A run's own worktree, under `data_dir/<agent>/worktrees/<run id>`, on a new branch from the repository's HEAD.

    The branch is `<agent>/<slug of words>`. Returns {repo, worktree, branch, base, onto}, where `onto` is the
    branch a pull request goes onto, the user's current one. A branch another run holds parks the run; `holder`
    says who that may be."""
    top = worktree.toplevel(repo)
    if top is None:
        raise PermanentError(f"{agent} works on a git repository; {repo} is not in one")
    branch = worktree.branch_for(agent, words, top)
    try:
        made = worktree.create(top, (Path(data_dir) / agent / "worktrees" / run_id).resolve(), branch)
    except worktree.GitFailed as e:   # most often: another run of the same work holds the branch in its worktree
        raise ParkRun(f"cannot make a worktree on {branch} ({e}); {holder} may hold the branch: finish or cancel "
                      "it") from None
    return {**made, "onto": worktree.current_branch(top) or "main"}   # a detached HEAD: onto main


def _place(settings: dict, run_id: str, data_dir: str) -> dict:
    return own_worktree(Path(settings["repo"]), NAME, words=f"issue-{Path(settings['issue']).stem}", run_id=run_id,
                        data_dir=data_dir, holder="another run of this bug")


def _tests_pass_on(tree: Path, commit: str, base: str, oracle: re.Pattern, command: list[str]) -> dict:
    """Run the oracle on the committed tree, so no question claims that tests pass which were never run on what it would
    ship. A failure parks the run; the step is not recorded, so resume runs the tests again."""
    result = run_oracle(tree, base, oracle, command)
    if not result["passed"]:
        last = result["output"].strip().splitlines()[-1:] or ["no output"]
        raise ParkRun(f"the tests fail on commit {commit}, which the branch holds (exit {result['exit_code']}: "
                      f"{last[0]}); fix the branch (git -C {tree} commit --amend), or fork from an earlier step "
                      "for the fix to be worked again")
    return {"passed": True, "passing": result["passing"]}


def tools_for(tree: Path, base: str, oracle: re.Pattern, command: list[str]) -> list:
    """The model's tools, scoped to the worktree.

    Only its regular files are read or written, and a link (to a file or a folder, inside or outside) is never
    followed; the oracle's files are not the model's to write."""

    def inside(path: str) -> str:
        """`path` as a name relative to the worktree, decided from the text alone (no link is resolved)."""
        name = str(Path(path).relative_to(tree)) if Path(path).is_relative_to(tree) else path
        try:
            parts = parts_of(name)
        except ValueError:   # absolute elsewhere, or up out of the worktree
            parts = None
        if parts is None or ".git" in parts:
            raise ValueError(f"{path} is outside the worktree; give a path relative to its root")
        return "/".join(parts)

    @tool
    def list_files(path: str = ".") -> str:
        """List the files under a folder of the repository (paths relative to its root)."""
        names = [shown(name) for name in walked(tree, inside(path))[0]]   # a name not UTF-8 with \x escapes
        return "\n".join(names[:500]) + ("\n(more not shown)" if len(names) > 500 else "")

    @tool
    def read_file(path: str) -> str:
        """Read one text file of the repository."""
        return read_regular(tree, inside(path)).decode("utf-8")[:50_000]

    @tool
    def search(pattern: str) -> str:
        """Find lines matching a regular expression across the repository: path:line: text."""
        found, expression = [], re.compile(pattern)
        for name in walked(tree)[0]:
            try:
                lines = read_regular(tree, name).decode("utf-8").splitlines()
            except (UnicodeDecodeError, NotRegular, OSError):
                continue
            found += [f"{shown(name)}:{i}: {line}" for i, line in enumerate(lines, 1) if expression.search(line)]
        return "\n".join(found[:200]) or "no match"

    @tool
    def write_file(path: str, content: str) -> str:
        """Write a whole file of the repository (created if new). Test files are the oracle's and refused."""
        name = inside(path)
        if oracle.match(name):
            raise ValueError(f"{name} is a test file (the oracle's); the tests are not yours to edit")
        write_atomic(tree, name, content.encode("utf-8"), make_folders=True)
        return f"wrote {name} ({len(content)} characters)"

    @tool
    def run_tests() -> str:
        """Run the repository's tests (as the base commit has them) and return the result."""
        result = run_oracle(tree, base, oracle, command)
        return f"{'PASSED' if result['passed'] else 'FAILED'} (exit {result['exit_code']})\n{result['output']}"

    return [list_files, read_file, search, write_file, run_tests]


def built_in_script(ctx: Context) -> bool:
    """Whether the run's model is Patch's own offline script, which knows the sample's bug and nothing else.

    A script of the user's own (`scripted:FILE`) or Claude may work anywhere."""
    provider = ctx.provider
    spec = provider.resolve() if isinstance(provider, Unresolved) else provider.name
    return spec in (None, "scripted")


def propose(ctx: Context, place: dict, *, commit: str, title: str, body: str, again: str, verdict: str) -> dict:
    """Ask a person to approve a pull request for `commit`, then open it on the local git host, once.

    `commit` is the one the branch is at; the question names it, with its diff stat, after `verdict`. Opening
    is an effect keyed `pr:<repo>:<branch>`, looked up on the host after a crash. The host opens it only while
    the branch is at `commit`; a branch moved meanwhile parks the run naming the change (`again`: how to be
    asked anew instead)."""
    tree = Path(place["worktree"])
    stat = ctx.step("diff-stat", worktree.git, "diff", "--stat", place["base"], commit, cwd=tree)
    ctx.approval("open-pull-request", f"Open a pull request for {place['branch']} onto {place['onto']}? "
                                      f"{verdict}\nCommit {commit}:\n{stat}")
    host = GitHost(Path(place["repo"]))

    def open_pr(key: str) -> dict:
        """The pull request for the reviewed commit alone: the host opens it only while the branch is there."""
        try:
            return host.open(place["branch"], title=title, body=body, base=place["onto"], key=key, head=commit)
        except HeadMoved as e:
            raise worktree.off_commit(place, commit, e.found, again) from None
        except AlreadyOpen as e:   # a racing worker, or our own send before a crash: here it is
            return {**e.pr, "already_open": True}

    return ctx.effect("open-pull-request", key=f"pr:{place['repo']}:{place['branch']}", do=open_pr,
                      lookup=lambda key: host.lookup(place["branch"]), service="the local git host")


def patch(ctx: Context, request: dict) -> dict:
    settings = ctx.step("settings", _settings, request, str(ctx.data_dir))
    if not settings["sample"] and built_in_script(ctx):
        raise ParkRun(f"without ANTHROPIC_API_KEY, Patch works only on its sample repository; set the key on the "
                      f"worker so Claude works on {settings['repo']}")
    place = ctx.step("worktree", _place, settings, ctx.run_id, str(ctx.data_dir))
    worktree.verify(place, ctx.lineage)
    tree, oracle, command = Path(place["worktree"]), oracle_pattern(settings["oracle"]), settings["test_command"]

    def check(ctx: Calls, messages: list[dict]) -> tuple[bool, str, int]:
        result = run_oracle(tree, place["base"], oracle, command)
        return result["passed"], result["output"][-1500:], result["passing"]

    where = f"{settings['repo']} {SAMPLE_MARK}" if settings["sample"] else settings["repo"]
    done = ctx.agent_loop("fix", system=SYSTEM, tools=tools_for(tree, place["base"], oracle, command),
                          max_tokens=4096, max_turns=30, check=check, messages=[{"role": "user", "content": (
                              f"Repository: {where}\nBranch: {place['branch']}\n\nThe bug:\n\n"
                              f"{settings['issue_text']}")}])
    if done["stopped"] != "check_passed":
        raise PermanentError(f"the tests still fail after {done['turns']} turns ({done['stopped']})")
    summary = done["final"]["content"][0].get("text", "") if done["final"]["content"] else ""
    title = f"Fix: {settings['issue_text'].splitlines()[0].lstrip('# ').strip()}"
    again = (f"to be asked again about the branch as it is, fork from the commit step (tui-agent fork "
             f"{ctx.run_id} --from-step {ctx.position})")
    commit = ctx.step("commit", worktree.commit_once, place, ctx.lineage, None, f"{title}\n\n{summary}")
    worktree.at_commit(place, commit, again)   # on every pass: the question and the pull request are for it
    if len(ctx.lineage) > 1:   # a fork's loop verdict is its parent's, on a tree this commit may have changed
        ctx.step("tests-on-commit", _tests_pass_on, tree, commit, place["base"], oracle, command)
    pr = propose(ctx, place, commit=commit, title=title, body=summary, again=again, verdict="The tests pass.")
    return {"branch": place["branch"], "commit": commit, "pull_request": pr["number"], "turns": done["turns"]}


def _night_settings(request: dict) -> dict:
    repo, issues = request.get("repo"), request.get("issues")
    if not repo or not issues:
        raise PermanentError('give {"repo": DIR, "issues": FOLDER}: one patch run per issue file in FOLDER')
    folder = Path(issues).expanduser().resolve()
    if not folder.is_dir():
        raise PermanentError(f"issues {issues!r} is not a folder")
    rest = {k: v for k, v in request.items() if k not in ("repo", "issues")}
    return {"repo": str(Path(repo).expanduser().resolve()), "issues": str(folder), "rest": rest}


def patch_night(ctx: Context, request: dict) -> dict:
    settings = ctx.step("settings", _night_settings, request)
    names = ctx.step("find-issues", lambda: sorted(p.name for p in Path(settings["issues"]).glob("*.md")))
    started = []
    for name in names:
        issue = str(Path(settings["issues"]) / name)
        run_id, created = ctx.step(f"start:{name}", ctx.start_run, NAME,
                                   {"repo": settings["repo"], "issue": issue, **settings["rest"]},
                                   key=f"patch:{settings['repo']}:{issue}")
        if created:
            started.append(run_id)
    return {"issues": len(names), "started": started}


AGENT = Agent(
    name=NAME,
    version="1",
    run=patch,
    script=script,
    budget=Budget(cost_usd=5.0, tool_calls=200, wall_s=3600),
    plateau=Plateau(repeats=5, failures=4, action="park"),
    degrade=lambda ctx: ctx.switch_model("claude-haiku-4-5"),
    description="fixes one bug on its own branch until the tests pass, then opens a pull request once approved; "
                "input: {repo, issue} (none: its sample repository)",
)
NIGHT_AGENT = Agent(name=NIGHT, version="1", run=patch_night,
                    description="starts one patch run per issue file that has none yet; input: {repo, issues}")
