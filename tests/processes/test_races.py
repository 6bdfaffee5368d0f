"""Two actors at once (issue 11): two people, or a person and a worker, acting on one run in the same
moment, with real processes. Each decision checks the run inside its own write transaction, so the
loser is refused with one line (exit 2) and nothing it saw a moment ago can come back."""

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import ROOT, paused_worker, registry_of, start_and_work

from tui_agent import Agent, operate
from tui_agent.runtime import faults
from tui_agent.runtime.clock import now
from tui_agent.runtime.faults import SimulatedCrash
from tui_agent.runtime.registry import load_registry
from tui_agent.runtime.worker import execute
from tui_agent.store import open_store
from tui_agent.store.approvals import approvals_for
from tui_agent.store.effects import effects_for
from tui_agent.store.runs import claim_run, events_for, get_run

TRIES = 40


class Actor:
    """A long-lived process that runs one CLI command per line it is sent (tests/fixtures/cli_actor.py),
    so two of them can be told to act within microseconds of each other."""

    def __init__(self) -> None:
        self.process = subprocess.Popen([sys.executable, "-m", "cli_actor"], cwd=ROOT, text=True, bufsize=1,
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=dict(os.environ))

    def send(self, *args: str) -> None:
        self.process.stdin.write(json.dumps(list(args)) + "\n")
        self.process.stdin.flush()

    def answer(self) -> dict:
        line = self.process.stdout.readline()
        assert line, "the actor process died"
        return json.loads(line)

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait(timeout=10)


@pytest.fixture
def actors():
    pair = [Actor(), Actor()]
    yield pair
    for actor in pair:
        actor.close()


def at_once(actors: list[Actor], first: list[str], second: list[str]) -> tuple[dict, dict]:
    """Both commands sent together, in a random order a random few hundred microseconds apart."""
    order = [(actors[0], first), (actors[1], second)]
    random.shuffle(order)
    order[0][0].send(*order[0][1])
    time.sleep(random.uniform(0, 0.0005))
    order[1][0].send(*order[1][1])
    return actors[0].answer(), actors[1].answer()


def refused(answer: dict, *words: str) -> None:
    """The loser: exit 2, one line on stderr that names what happened instead, nothing on stdout."""
    assert answer["code"] == 2, answer
    lines = answer["stderr"].strip().splitlines()
    assert len(lines) == 1, answer
    assert lines[0].startswith("tui-agent: "), answer
    assert "Traceback" not in answer["stderr"], answer
    assert not answer["stdout"], answer
    assert "nothing changed" in lines[0], lines[0]
    for word in words:
        assert word in lines[0], (word, lines[0])


def kinds_after(events: list[dict], kind: str) -> list[str]:
    last = max(i for i, e in enumerate(events) if e["kind"] == kind)
    return [e["kind"] for e in events[last + 1:]]


def asks(ctx, request):
    return {"shipped": ctx.approval("ship", "Ship it?")["approved"]}


def test_resume_and_cancel_at_once_never_bring_a_cancelled_run_back(store, actors):
    registry = registry_of(Agent(name="asks", run=asks))
    for _ in range(TRIES):
        run_id = start_and_work(store, registry, "asks", {}).run_id
        operate.park(store, run_id)
        resumed, cancelled = at_once(actors, ["resume", run_id], ["cancel", run_id])
        assert cancelled["code"] == 0, cancelled          # a parked or a queued run can always be cancelled
        run = get_run(store, run_id)
        assert (run["status"], run["reason"]) == ("cancelled", "person")
        assert kinds_after(events_for(store, run_id), "cancelled") == []   # nothing after the end
        if resumed["code"] != 0:
            refused(resumed, run_id, "is cancelled", "cancelled by")


def test_approve_and_deny_at_once_answer_the_question_once(store, actors):
    registry = registry_of(Agent(name="asks", run=asks))
    for _ in range(TRIES):
        run_id = start_and_work(store, registry, "asks", {}).run_id
        yes, no = at_once(actors, ["approve", run_id, "--note", "yes"], ["approve", run_id, "--deny", "--note", "no"])
        kinds = [e["kind"] for e in events_for(store, run_id)]
        assert kinds.count("decision") == 1, kinds
        assert kinds[-2:] == ["decision", "queued"], kinds
        assert sorted([yes["code"], no["code"]]) == [0, 2], (yes, no)
        winner, loser = (yes, no) if yes["code"] == 0 else (no, yes)
        decision = "approved" if winner is yes else "denied"
        [question] = approvals_for(store, run_id)
        assert question["decision"] == decision
        assert question["note"] == ("yes" if winner is yes else "no")
        assert f"{decision}; the run is queued again" in winner["stdout"]
        run = get_run(store, run_id)
        assert (run["status"], run["reason"]) == ("queued", "resumed")
        refused(loser, run_id, "is queued", f"ship: {decision} by")


def test_two_people_reconciling_one_unknown_effect_decide_it_once(tmp_path, store, actors):
    """--happened against --not-done on one email in doubt: one answer wins; the other is refused, so
    the email is neither confirmed and sent again nor re-queued twice."""
    registry = load_registry([])
    for i in range(TRIES // 2):
        run_id, _ = operate.start(store, registry, agent_name="nightly-report",
                                  request={"date": f"2026-10-{i + 1:02d}", "service": "every", "lookup": False})
        claim = claim_run(store, run_id, "w-1", 0.05, now())
        faults.arm("after-do")
        try:
            with pytest.raises(SimulatedCrash):
                execute(open_store(store.path), registry, claim=claim)
        finally:
            faults.disarm()
        time.sleep(0.06)                              # the dead worker's lease has run out
        claim = claim_run(store, run_id, "w-2", 60.0, now())
        assert execute(store, registry, claim=claim).status == "waiting"   # nobody can tell: a person decides
        happened, not_done = at_once(actors, ["reconcile", run_id, "send-report", "--happened"],
                                     ["reconcile", run_id, "send-report", "--not-done"])
        kinds = [e["kind"] for e in events_for(store, run_id)]
        assert kinds.count("decision") == 1, kinds
        assert kinds[-1] == "queued", kinds
        assert sorted([happened["code"], not_done["code"]]) == [0, 2], (happened, not_done)
        [effect] = effects_for(store, run_id)
        assert effect["state"] == ("confirmed" if happened["code"] == 0 else "not_done")
        refused(not_done if happened["code"] == 0 else happened, run_id, "is queued", "send-report: root says")


# -- a person against the worker's last write ---------------------------------------------------


# park and cancel are the same race on PostgreSQL (a person's decision under the exclusive lock, against the
# worker's settle under the shared one): one of them there, both on SQLite
@pytest.mark.postgres_case(action="park")
@pytest.mark.parametrize("action, status", [("park", "parked"), ("cancel", "cancelled")])
def test_park_or_cancel_racing_the_workers_final_settle_never_rewrites_an_ending(store, actors, tmp_path, action,
                                                                               status):
    """The worker stops after its last step's function returned; then it goes on (commit, check, settle)
    while a person parks or cancels. Whoever commits first wins: a succeeded run stays succeeded and the
    person is refused; or the person's stop holds, and the worker reports the run taken, not finished."""
    for i in range(TRIES // 2):
        log = tmp_path / f"calls-{i}.log"
        run_id = _start_counting(store, log)
        with paused_worker("--agents", "counting_agents", "worker", "--once", "--name", "w-1",
                           pause_at="after-step:1") as worker:
            worker.send_signal(signal.SIGCONT)
            time.sleep(random.uniform(0, 0.004))
            actors[0].send(action, run_id)
            person = actors[0].answer()
            out, err = worker.communicate(timeout=20)
        assert worker.returncode == 0, (out, err)
        run = get_run(store, run_id)
        if run["status"] == status:                    # the person's stop committed first
            assert person["code"] == 0
            assert run["reason"] == "person"
            assert run["result"] is None
            assert (run["finished_at"] is None) == (status == "parked")
            assert f"{run_id} was taken by another worker or a person; it is {status}" in out, out
            assert "succeeded" not in out
            assert kinds_after(events_for(store, run_id), status) == []
        else:                                          # the worker's ending committed first, and stays
            assert (run["status"], run["reason"]) == ("succeeded", "check_passed")
            assert [e["kind"] for e in events_for(store, run_id)][-1] == "succeeded"
            assert f"{run_id} succeeded" in out
            refused(person, run_id, "is succeeded")


def _start_counting(store, log: Path) -> str:
    return operate.start(store, load_registry(["counting_agents"]), agent_name="counting",
                         request={"log": str(log), "steps": 1})[0]
