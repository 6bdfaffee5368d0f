"""`tui-agent demo`: a separate database rebuilt by EXECUTING real nightly-report runs with the
scripted model and injected crashes, so every row on screen is something the runtime really did."""

from __future__ import annotations

import shutil
import subprocess
import time
from datetime import datetime, timedelta
from pathlib import Path

from . import operate
from .runtime import faults
from .runtime.clock import now
from .runtime.faults import SimulatedCrash
from .runtime.registry import Registry
from .runtime.worker import execute
from .store import data_dir_for, open_store
from .store.runs import claim_run

LEASE_S = 0.5


def demo_path(user_db: Path) -> Path:
    return user_db.with_name("demo.db")


def _work(db: Path, registry: Registry, run_id: str, crash_at: str | None = None) -> None:
    """Take one worker turn in this process, as a worker process would take it.

    A crash drops the store. `crash_at` is POINT or POINT:N, as TUI_AGENT_CRASH_AT takes it."""
    store = open_store(db)
    claim = claim_run(store, run_id, "w-demo", LEASE_S, now())
    assert claim is not None, run_id   # the demo's run is queued and nothing else claims it
    if crash_at:
        faults.arm(*faults.parse(crash_at, "the demo's crash point"))
    try:
        execute(store, registry, claim=claim)
    except SimulatedCrash:
        return
    finally:
        faults.disarm()
    store.close()


def build(db: Path, registry: Registry, progress=lambda message: None, wait=time.sleep) -> dict[str, str]:
    """Rebuild the demo database; returns the run ids by role. The running one is left queued for the
    worker process the TUI starts. `wait` lets a test with a frozen clock move it instead of sleeping."""
    for path in (db, Path(f"{db}-wal"), Path(f"{db}-shm")):
        path.unlink(missing_ok=True)
    shutil.rmtree(data_dir_for(db), ignore_errors=True)
    store = open_store(db)
    today = datetime.fromtimestamp(now()).date()
    day = (today - timedelta(days=1)).isoformat()
    plan = [
        ("succeeded", {"date": (today - timedelta(days=2)).isoformat()}, {}, None),
        ("failed", {"date": day, "team": "ops", "sources": ["sales", "weather"]}, {}, None),
        ("parked on cost", {"date": day, "team": "finance"}, {"cost_usd": 0.002}, None),
        ("waiting for approval", {"date": day, "team": "leads", "approve": True}, {}, None),
        ("sleeping until tomorrow", {"date": today.isoformat(), "team": "europe",
                                     "send_at": (datetime.fromtimestamp(now()).astimezone()
                                                 + timedelta(days=1)).replace(
                                         hour=7, minute=0, second=0, microsecond=0).isoformat()}, {}, None),
        ("outcome unknown", {"date": day, "team": "support", "service": "every", "lookup": False}, {}, "after-do"),
    ]
    roles = {}
    for role, request, budget, crash in plan:
        progress(f"running: {role}")
        run_id, _ = operate.start(store, registry, agent_name="nightly-report", request=request, model="scripted",
                                  budget=budget)
        _work(db, registry, run_id, crash)
        if crash:                       # the crashed worker's lease runs out; the next worker reconciles
            wait(LEASE_S + 0.1)
            _work(db, registry, run_id)
        roles[role] = run_id
    progress("running: refactor-imports over 200 files, crashed at file 140")
    roles["refactor crashed"] = _refactor(db, store, registry, progress)
    if shutil.which("git"):
        progress("running: patch on its sample repository, up to the approval of its pull request")
        roles["patch waiting for approval"], _ = operate.start(store, registry, agent_name="patch", request={},
                                                               model="scripted")
        _work(db, registry, roles["patch waiting for approval"])
    else:
        progress("git is not installed: the demo has no patch run")
    progress("queueing the run the demo worker will work")
    roles["running"], _ = operate.start(store, registry, agent_name="nightly-report",
                                        request={"date": today.isoformat(), "team": "platform", "delay_s": 4},
                                        model="scripted")   # scripted: a demo never spends a key
    store.close()
    return roles


def _refactor(db: Path, store, registry: Registry, progress) -> str:
    """A refactor-imports run over a generated tree of 200 files, killed after file 140.

    The tree is its own small git repository when git is here. The run is left for the demo worker to finish
    once the lease has run out."""
    tree = refactor_sample(data_dir_for(db) / "refactor-sample", 200)
    if not _committed(tree):
        progress("git is not installed: the refactor demo edits a plain folder in place")
    run_id, _ = operate.start(store, registry, agent_name="refactor-imports",
                              request={"root": str(tree), "from": "@/utils/cn", "to": "~/lib/cn"}, model="scripted")
    _work(db, registry, run_id, "after-step-commit:143")     # settings, worktree, find-files, then 140 files
    return run_id


def refactor_sample(root: Path, count: int) -> Path:
    """`count` small components that import the seed job's alias `@/utils/cn`, and a helper that does not."""
    for i in range(count):
        folder = root / "src" / "components" / f"group{i // 20:02d}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"Widget{i:03d}.tsx").write_text(
            f'import {{ cn }} from "@/utils/cn";\nimport {{ useState }} from "react";\n\n'
            f"export function Widget{i:03d}() {{\n  const [on, setOn] = useState(false);\n"
            f'  return <button className={{cn("widget", on && "on")}} onClick={{() => setOn(!on)}}>{i}</button>;\n}}\n')
    (root / "src" / "lib").mkdir(parents=True, exist_ok=True)
    (root / "src" / "lib" / "cn.ts").write_text(
        "export const cn = (...names: unknown[]) => names.filter(Boolean).join(' ');\n")
    return root


def _committed(tree: Path) -> bool:
    """Make `tree` a git repository with one commit; False when there is no git here."""
    git = ["git", "-c", "user.name=tui-agent demo", "-c", "user.email=demo@localhost", "-c", "init.defaultBranch=main"]
    try:
        for args in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "the sample app"]):
            subprocess.run([*git, *args], cwd=tree, check=True, capture_output=True)
    except (OSError, subprocess.CalledProcessError):
        return False
    return True
