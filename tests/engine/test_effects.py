"""The effect ledger's state machine, transition by transition (docs/architecture.md section 6.4)."""

import json

import pytest
from helpers import registry_of

from tui_agent import Agent, RetryPolicy, operate
from tui_agent.errors import EffectNotDone, ParkRun, UserError
from tui_agent.runtime import faults
from tui_agent.runtime.clock import now
from tui_agent.runtime.faults import SimulatedCrash
from tui_agent.runtime.worker import execute
from tui_agent.store import open_store
from tui_agent.store.effects import effects_for
from tui_agent.store.journal import checkpoint_for, journal_for
from tui_agent.store.runs import claim_run, events_for, get_run

HOUR = 3600.0


class Service:
    """A fake service with idempotency keys: it can deduplicate, answer lookups, time out after acting."""

    def __init__(self, dedupe: bool = False):
        self.dedupe = dedupe
        self.delivered: list[str] = []
        self.requests: list[str] = []
        self.lookups: list[str] = []
        self.memory: dict[str, dict] = {}
        self.timeout_after_acting = 0   # how many next requests act, then raise as if the reply was lost
        self.refuse = 0                 # how many next requests refuse (EffectNotDone)
        self.lookup_down = 0            # how many next lookups fail
        self.unreachable = 0            # how many next requests fail before the service acts (a dropped connection)
        self.closed = False             # refuse (ParkRun) until a person opens it

    def send(self, key: str) -> dict:
        self.requests.append(key)
        if self.unreachable:
            self.unreachable -= 1
            raise PermissionError("connection refused by the proxy")
        if self.refuse:
            self.refuse -= 1
            raise EffectNotDone("mailbox full")
        if self.closed:
            raise ParkRun("the mailbox is closed until its owner opens it")
        if not (self.dedupe and key in self.memory):
            self.delivered.append(key)
            self.memory[key] = {"id": len(self.delivered)}
        if self.timeout_after_acting:
            self.timeout_after_acting -= 1
            raise TimeoutError("the reply never came")
        return self.memory[key]

    def lookup(self, key: str):
        self.lookups.append(key)
        if self.lookup_down:
            self.lookup_down -= 1
            raise ConnectionError("lookup service unreachable")
        return self.memory.get(key)


@pytest.fixture(autouse=True)
def no_faults():
    yield
    faults.disarm()


class World:
    """One database, one service and an agent whose single effect is configurable per test."""

    def __init__(self, db_path, service, use_lookup=True, dedupe_ttl_s=None, lookup_ttl_s=24 * HOUR,
                 retry=RetryPolicy(3, base_s=0.001, cap_s=0.002)):
        self.db_path, self.service = db_path, service
        self.store = open_store(db_path)
        self.fences = []

        def agent_run(ctx, request):
            ctx.step("prepare", lambda: "ready")

            def do(key):
                self.fences.append(ctx.fence)
                return service.send(key)

            sent = ctx.effect("send", key=request["key"], do=do,
                              lookup=service.lookup if use_lookup else None,
                              dedupe_ttl_s=dedupe_ttl_s, lookup_ttl_s=lookup_ttl_s, service="fake")
            return {"sent": sent}

        self.registry = registry_of(Agent(name="fx", run=agent_run, retry=retry))

    def start(self, key="report:2026-11-28:team"):
        return operate.start(self.store, self.registry, agent_name="fx", request={"key": key})[0]

    def work(self, run_id, worker="w-1", lease_s=30.0):
        claim = claim_run(self.store, run_id, worker, lease_s, now())
        assert claim is not None, get_run(self.store, run_id)
        return execute(self.store, self.registry, claim=claim)

    def crash(self, run_id, point):
        """A worker dies at `point`; the store is reopened as a fresh process would."""
        faults.arm(point)
        with pytest.raises(SimulatedCrash):
            self.work(run_id)
        faults.disarm()
        self.store = open_store(self.db_path)

    def effect(self, run_id):
        (row,) = effects_for(self.store, run_id)
        return row

    def messages(self, run_id):
        return [e["message"] for e in events_for(self.store, run_id)]


def test_intended_attempted_confirmed_in_one_pass(db_path):
    world = World(db_path, Service())
    run_id = world.start()
    outcome = world.work(run_id)
    assert outcome.status == "succeeded"
    row = world.effect(run_id)
    assert (row["state"], row["attempts"], row["key"], row["service"]) == ("confirmed", 1, "report:2026-11-28:team",
                                                                          "fake")
    assert (row["has_lookup"], row["lookup_ttl_s"], row["dedupe_ttl_s"]) == (1, 24 * HOUR, None)
    assert json.loads(row["result"]) == {"id": 1}
    assert journal_for(world.store, run_id)[-1]["kind"] == "effect"
    assert checkpoint_for(world.store, run_id)["used_effects"] == 1
    assert world.service.delivered == ["report:2026-11-28:team"]
    assert world.fences == [1], "do sees the run's fence"


def test_the_intended_row_is_committed_before_the_first_attempt(db_path):
    world = World(db_path, Service())
    run_id = world.start()
    world.crash(run_id, "after-intended")
    row = world.effect(run_id)
    assert (row["state"], row["attempts"]) == ("intended", 0)
    assert world.service.requests == []


def test_attempted_is_committed_before_do_is_called(db_path):
    world = World(db_path, Service())
    run_id = world.start()
    world.crash(run_id, "after-attempted")
    row = world.effect(run_id)
    assert (row["state"], row["attempts"], row["attempted_by"]) == ("attempted", 1, "w-1")
    assert world.service.requests == []


def test_a_crash_after_intended_attempts_normally_on_resume(db_path, clock):
    world = World(db_path, Service())
    run_id = world.start()
    world.crash(run_id, "after-intended")
    clock.advance(31)
    assert world.work(run_id, "w-2").status == "succeeded"
    assert world.service.delivered == ["report:2026-11-28:team"]
    assert world.effect(run_id)["attempts"] == 1


def test_a_resumed_attempted_effect_becomes_unknown_and_a_lookup_confirms_it(db_path, clock):
    world = World(db_path, Service())
    run_id = world.start()
    world.crash(run_id, "after-do")            # the service acted; nothing was recorded
    assert world.effect(run_id)["state"] == "attempted"
    clock.advance(31)
    outcome = world.work(run_id, "w-2")
    assert outcome.status == "succeeded"
    assert outcome.result == {"sent": {"id": 1}}
    assert world.service.delivered == ["report:2026-11-28:team"], "not sent again"
    assert world.service.lookups == ["report:2026-11-28:team"]
    messages = world.messages(run_id)
    assert any("outcome unknown: the worker stopped after attempt 1 (by w-1)" in m for m in messages)
    assert any("the service has the key: confirmed without doing it again" in m for m in messages)
    assert world.effect(run_id)["state"] == "confirmed"


def test_a_lookup_that_finds_nothing_inside_its_window_means_not_done_and_sends_again(db_path, clock):
    world = World(db_path, Service())
    run_id = world.start()
    world.crash(run_id, "after-attempted")     # do never ran
    clock.advance(31)
    assert world.work(run_id, "w-2").status == "succeeded"
    assert world.service.lookups == ["report:2026-11-28:team"]
    assert world.service.delivered == ["report:2026-11-28:team"]
    assert world.effect(run_id)["attempts"] == 2
    assert any("not done; doing it again with the same key" in m for m in world.messages(run_id))


def test_a_lookup_past_its_window_proves_nothing_and_waits_for_a_person(db_path, clock):
    world = World(db_path, Service(), lookup_ttl_s=HOUR)
    run_id = world.start()
    world.crash(run_id, "after-attempted")
    clock.advance(2 * HOUR)
    outcome = world.work(run_id, "w-2")
    assert (outcome.status, outcome.reason) == ("waiting", "reconcile")
    assert world.service.requests == []
    assert world.service.lookups == ["report:2026-11-28:team"]
    assert world.effect(run_id)["state"] == "unknown"
    assert "lookup window (1h) has passed" in world.messages(run_id)[-1]


def test_an_exception_from_do_is_unknown_never_a_blind_retry(db_path):
    service = Service()
    service.timeout_after_acting = 1
    world = World(db_path, service, use_lookup=False)
    outcome = world.work(world.start())
    assert (outcome.status, outcome.reason) == ("waiting", "reconcile")
    assert service.requests == ["report:2026-11-28:team"], "sent once, never again without knowing"
    assert world.effect(outcome.run_id)["state"] == "unknown"
    assert any("outcome unknown: do raised TimeoutError" in m for m in world.messages(outcome.run_id))


def test_an_exception_from_do_is_reconciled_through_the_lookup(db_path):
    service = Service()
    service.timeout_after_acting = 1
    world = World(db_path, service)
    outcome = world.work(world.start())
    assert outcome.status == "succeeded"
    assert service.delivered == ["report:2026-11-28:team"]
    assert len(service.requests) == 1


def test_without_lookup_a_deduplicating_service_gets_the_same_key_again_inside_its_window(db_path, clock):
    service = Service(dedupe=True)
    world = World(db_path, service, use_lookup=False, dedupe_ttl_s=24 * HOUR)
    run_id = world.start()
    world.crash(run_id, "after-do")
    clock.advance(31)
    assert world.work(run_id, "w-2").status == "succeeded"
    assert service.requests == ["report:2026-11-28:team"] * 2, "resent with the same key"
    assert service.delivered == ["report:2026-11-28:team"], "and the service ignored the repeat"
    assert any("sending again with the same key" in m for m in world.messages(run_id))


def test_without_lookup_past_the_dedupe_window_a_person_decides(db_path, clock):
    service = Service(dedupe=True)
    world = World(db_path, service, use_lookup=False, dedupe_ttl_s=HOUR)
    run_id = world.start()
    world.crash(run_id, "after-do")
    clock.advance(2 * HOUR)
    outcome = world.work(run_id, "w-2")
    assert (outcome.status, outcome.reason) == ("waiting", "reconcile")
    assert service.requests == ["report:2026-11-28:team"]


def test_without_lookup_or_dedupe_a_person_decides(db_path, clock):
    world = World(db_path, Service(), use_lookup=False)
    run_id = world.start()
    world.crash(run_id, "after-do")
    clock.advance(31)
    outcome = world.work(run_id, "w-2")
    assert (outcome.status, outcome.reason) == ("waiting", "reconcile")
    assert get_run(world.store, run_id)["status"] == "waiting"
    assert "tui-agent reconcile" in world.messages(run_id)[-1]


def test_a_refusal_is_not_done_and_the_retry_policy_sends_again_with_the_same_key(db_path):
    service = Service()
    service.refuse = 2
    world = World(db_path, service)
    outcome = world.work(world.start())
    assert outcome.status == "succeeded"
    assert service.requests == ["report:2026-11-28:team"] * 3
    assert service.delivered == ["report:2026-11-28:team"]
    assert world.effect(outcome.run_id)["attempts"] == 3
    refusals = [m for m in world.messages(outcome.run_id) if "the service refused it" in m]
    assert len(refusals) == 2
    assert "sending again with the same key" in refusals[0]


def test_refusals_past_the_retry_policy_fail_the_run(db_path):
    service = Service()
    service.refuse = 5
    world = World(db_path, service)
    run_id = world.start()
    outcome = world.work(run_id)
    assert (outcome.status, outcome.reason) == ("failed", "error")
    assert "EffectNotDone: mailbox full" in outcome.error
    assert len(service.requests) == 3
    assert world.effect(run_id)["state"] == "not_done"
    assert service.delivered == []


@pytest.mark.parametrize("failing, status", [(2, "succeeded"), (5, "failed")])
def test_a_do_that_keeps_raising_is_looked_up_and_sent_again_only_as_the_retry_policy_allows(db_path, failing, status):
    service = Service()
    service.unreachable = failing
    world = World(db_path, service)
    run_id = world.start()
    outcome = world.work(run_id)
    assert outcome.status == status, outcome.error
    assert len(service.requests) == 3, "the policy's three attempts, never more"
    assert len(service.lookups) == min(failing, 3), "each raise is looked up before sending again"
    assert service.delivered == (["report:2026-11-28:team"] if status == "succeeded" else [])
    assert world.effect(run_id)["state"] == ("confirmed" if status == "succeeded" else "not_done")
    if status == "failed":
        assert outcome.reason == "error" and "PermissionError: connection refused by the proxy" in outcome.error
        assert "no attempts left" in world.messages(run_id)[-2]


def test_a_do_that_keeps_raising_at_a_deduplicating_service_waits_for_a_person_after_the_policys_attempts(db_path):
    service = Service(dedupe=True)
    service.unreachable = 5
    world = World(db_path, service, use_lookup=False, dedupe_ttl_s=24 * HOUR)
    outcome = world.work(world.start())
    assert (outcome.status, outcome.reason) == ("waiting", "reconcile")
    assert len(service.requests) == 3
    assert world.effect(outcome.run_id)["state"] == "unknown"
    assert "on each of its 3 attempts" in world.messages(outcome.run_id)[-1]
def test_a_do_that_parks_did_nothing_and_resume_sends_again_with_the_same_key(db_path):
    service = Service()
    service.closed = True
    world = World(db_path, service)
    run_id = world.start()
    outcome = world.work(run_id)
    assert (outcome.status, outcome.reason) == ("parked", "environment")
    assert outcome.message == f"parked: the mailbox is closed until its owner opens it; then tui-agent resume {run_id}"
    assert (world.effect(run_id)["state"], service.delivered) == ("not_done", [])
    assert "send: not done: the mailbox is closed until its owner opens it" in world.messages(run_id)
    service.closed = False
    operate.resume(world.store, run_id)
    assert world.work(run_id).status == "succeeded"
    row = world.effect(run_id)
    assert (row["state"], row["attempts"]) == ("confirmed", 2)
    assert service.requests == ["report:2026-11-28:team"] * 2 and service.delivered == ["report:2026-11-28:team"]


def test_a_key_confirmed_by_another_run_is_not_done_again(db_path):
    world = World(db_path, Service())
    first = world.work(world.start())
    second = world.work(world.start())
    assert second.status == "succeeded"
    assert second.result == first.result
    assert world.service.requests == ["report:2026-11-28:team"]
    row = world.effect(second.run_id)
    assert (row["state"], row["done_by"], row["attempts"]) == ("confirmed", first.run_id, 0)
    assert any(f"already confirmed by run {first.run_id}" in m for m in world.messages(second.run_id))


def test_a_key_in_doubt_in_another_run_makes_this_one_wait(db_path):
    world = World(db_path, Service())
    first = world.start()
    world.crash(first, "after-attempted")
    outcome = world.work(world.start(), "w-2")
    assert (outcome.status, outcome.reason) == ("waiting", "reconcile")
    assert f"is in doubt in run {first}" in world.messages(outcome.run_id)[-1]
    assert world.service.requests == []


def test_deciding_the_key_in_doubt_lets_the_run_that_waited_on_it_go_on(db_path, clock):
    world = World(db_path, Service(), use_lookup=False)
    first = world.start()
    world.crash(first, "after-do")                        # the service acted; nobody recorded it
    second = world.work(world.start(), "w-2")
    assert second.reason == "reconcile"
    clock.advance(31)
    assert world.work(first, "w-3").reason == "reconcile"  # no lookup, no dedupe: a person decides
    operate.reconcile_happened(world.store, first, effect_ref="send", result={"id": 1})
    assert get_run(world.store, second.run_id)["status"] == "queued"
    assert f"was decided in run {first}" in world.messages(second.run_id)[-1]
    assert world.work(second.run_id, "w-4").status == "succeeded"
    assert world.service.requests == ["report:2026-11-28:team"], "the second run reused the decided result"


@pytest.mark.parametrize("ended_by", ["abandon", "cancel"])
@pytest.mark.parametrize("decision", ["not_done", "happened"])
def test_a_key_left_in_doubt_by_a_run_that_ended_is_decided_in_the_run_that_waits_on_it(db_path, clock, ended_by,
                                                                                       decision):
    world = World(db_path, Service(), use_lookup=False)
    first = world.start()
    world.crash(first, "after-attempted")                 # attempted, and nobody knows whether it went out
    if ended_by == "abandon":
        clock.advance(31)
        assert world.work(first, "w-3").reason == "reconcile"
        operate.abandon(world.store, first, "send")
    else:
        operate.cancel_run(world.store, first)            # a cancel while the effect was attempted
    second = world.work(world.start(), "w-2")
    assert (second.status, second.reason) == ("waiting", "reconcile")
    assert world.messages(second.run_id)[-1] == (
        f"needs a person: send key report:2026-11-28:team is in doubt in run {first}, which has ended without "
        f"deciding it; decide with tui-agent reconcile {second.run_id} send --happened | --not-done | --abandon")

    if decision == "not_done":
        operate.reconcile_not_done(world.store, second.run_id, effect_ref="send")
    else:
        operate.reconcile_happened(world.store, second.run_id, effect_ref="send", result={"id": 7})
    assert world.work(second.run_id, "w-4").status == "succeeded"
    assert world.service.requests == (["report:2026-11-28:team"] if decision == "not_done" else [])
    row = world.effect(first)
    assert (row["state"], row["note"]) == (
        "not_done" if decision == "not_done" else "confirmed", f"decided in run {second.run_id}")
    assert get_run(world.store, first)["status"] == "cancelled"   # the ended run stays ended
    assert any(m.startswith(f"send: key report:2026-11-28:team decided in run {second.run_id}: ")
               for m in world.messages(first)), world.messages(first)


def test_a_changed_key_at_a_recorded_effect_fails_clearly(db_path, clock):
    world = World(db_path, Service())
    run_id = world.start("k1")
    world.crash(run_id, "after-intended")
    with world.store.write() as conn:
        conn.execute("UPDATE runs SET request = ? WHERE id = ?", (json.dumps({"key": "k2"}), run_id))
    clock.advance(31)
    outcome = world.work(run_id, "w-2")
    assert outcome.status == "failed"
    assert "recorded with key 'k1'" in outcome.error
    assert world.service.requests == []


# -- a person's decisions ---------------------------------------------------------------------

def _waiting_after_do(db_path, clock, service=None):
    world = World(db_path, service or Service(), use_lookup=False)
    run_id = world.start()
    world.crash(run_id, "after-do")
    clock.advance(31)
    assert world.work(run_id, "w-2").status == "waiting"
    return world, run_id


def test_a_person_says_it_happened(db_path, clock):
    world, run_id = _waiting_after_do(db_path, clock)
    operate.reconcile_happened(world.store, run_id, effect_ref="send", result={"id": 1}, note="saw it")
    assert (get_run(world.store, run_id)["status"], get_run(world.store, run_id)["reason"]) == ("queued", "resumed")
    outcome = world.work(run_id, "w-3")
    assert outcome.status == "succeeded"
    assert outcome.result == {"sent": {"id": 1}}
    assert world.service.requests == ["report:2026-11-28:team"], "not sent again"
    row = world.effect(run_id)
    assert (row["state"], row["note"]) == ("confirmed", "saw it")
    assert row["decided_by"]
    assert any("says it happened (saw it)" in m for m in world.messages(run_id))


def test_a_person_says_it_did_not_happen(db_path, clock):
    world, run_id = _waiting_after_do(db_path, clock)
    operate.reconcile_not_done(world.store, run_id, effect_ref="send")
    assert world.effect(run_id)["state"] == "not_done"
    assert world.work(run_id, "w-3").status == "succeeded"
    assert world.service.requests == ["report:2026-11-28:team"] * 2
    assert world.effect(run_id)["attempts"] == 2


def test_asking_needs_a_lookup(db_path, clock):
    world, run_id = _waiting_after_do(db_path, clock)
    with pytest.raises(UserError, match="has no lookup"):
        operate.reconcile_ask(world.store, run_id, "send")


def test_asking_the_service_has_the_next_worker_look_the_key_up(db_path, clock):
    service = Service()
    service.lookup_down = 1
    world = World(db_path, service)
    run_id = world.start()
    world.crash(run_id, "after-do")
    clock.advance(31)
    assert world.work(run_id, "w-2").status == "waiting"     # the lookup failed: a person is asked
    assert "the lookup failed (ConnectionError" in world.messages(run_id)[-1]
    operate.reconcile_ask(world.store, run_id, "send", note="try again")
    outcome = world.work(run_id, "w-3")
    assert outcome.status == "succeeded", "the service still had it"
    assert world.service.lookups == ["report:2026-11-28:team"] * 2


PATIENT = RetryPolicy(3, base_s=0.001, cap_s=0.002, patience_s=60.0)


def test_a_lookup_that_cannot_reach_its_service_is_asked_again_within_the_patience(db_path, clock):
    service = Service()
    world = World(db_path, service, retry=PATIENT)
    run_id = world.start()
    world.crash(run_id, "after-do")
    service.lookup_down = 2        # the network is away for two tries, then back
    clock.advance(31)
    assert world.work(run_id, "w-2").status == "succeeded"
    assert service.lookups == ["report:2026-11-28:team"] * 3 and service.delivered == ["report:2026-11-28:team"]
    assert world.effect(run_id)["state"] == "confirmed"
    asked_again = [m for m in world.messages(run_id) if "asking the service again" in m]
    assert len(asked_again) == 2 and "ConnectionError: lookup service unreachable" in asked_again[0], asked_again


def test_a_lookup_unreachable_past_the_patience_waits_for_a_person(db_path, clock):
    service = Service()
    world = World(db_path, service, retry=PATIENT)
    run_id = world.start()
    world.crash(run_id, "after-do")
    service.lookup_down = 1
    clock.advance(61)              # the attempt is older than the patience: the lookup is not asked again
    assert world.work(run_id, "w-2").status == "waiting"
    assert "has not reached its service for 1m, past the retry policy's patience" in world.messages(run_id)[-1]
    assert service.lookups == ["report:2026-11-28:team"] and service.delivered == ["report:2026-11-28:team"]


def test_abandoning_cancels_the_run_and_keeps_the_doubt_on_record(db_path, clock):
    world, run_id = _waiting_after_do(db_path, clock)
    fence = get_run(world.store, run_id)["fence"]
    operate.abandon(world.store, run_id, "send", note="not worth it")
    run = get_run(world.store, run_id)
    assert (run["status"], run["reason"], run["fence"]) == ("cancelled", "person", fence + 1)
    assert world.effect(run_id)["state"] == "unknown"


def test_decisions_are_refused_while_a_worker_holds_the_run_or_after_it_ended(db_path, clock):
    world = World(db_path, Service())
    run_id = world.start()
    world.crash(run_id, "after-do")             # running, lease not expired
    with pytest.raises(UserError, match="w-1 holds it"):
        operate.reconcile_happened(world.store, run_id, effect_ref="send")
    done = world.work(world.start("other"))
    with pytest.raises(UserError, match="has ended"):
        operate.reconcile_not_done(world.store, done.run_id, effect_ref="send")


def test_an_effect_is_named_or_numbered(db_path, clock):
    world, run_id = _waiting_after_do(db_path, clock)
    with pytest.raises(UserError, match="has no effect 'mail'"):
        operate.reconcile_happened(world.store, run_id, effect_ref="mail")
    operate.reconcile_happened(world.store, run_id, effect_ref="1")   # position 1: "prepare" is position 0
    assert world.effect(run_id)["state"] == "confirmed"


def test_a_person_may_decide_for_a_dead_worker_once_its_lease_ended(db_path, clock):
    world = World(db_path, Service(), use_lookup=False)
    run_id = world.start()
    world.crash(run_id, "after-do")
    stale_fence = get_run(world.store, run_id)["fence"]
    clock.advance(31)
    operate.reconcile_happened(world.store, run_id, effect_ref="send", result={"id": 1})
    run = get_run(world.store, run_id)
    assert (run["status"], run["fence"], run["worker"]) == ("queued", stale_fence + 1, None)
    assert world.work(run_id, "w-2").status == "succeeded"
    assert world.service.requests == ["report:2026-11-28:team"]
