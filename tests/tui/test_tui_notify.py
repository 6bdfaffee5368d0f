"""The runner calls you, in the TUI (issue 23): each run that comes to need a person after the app started rings the
bell and posts one desktop notification (and a toast), whoever made the transition; what needed a person before
it started, and changes that need nobody, ring nothing. The app only reads: it never claims an event from the
processes that deliver them to --notify."""

from __future__ import annotations

from fixtures import notify_agents
from helpers import polled, registry_of, settled, start_and_work, tui

from tui_agent import operate
from tui_agent.store import notices

REGISTRY = registry_of(notify_agents.ASKING, notify_agents.NAPPING, notify_agents.PARKING)


def _observed(app) -> tuple[list[str], list[dict]]:
    """Replace the bell and the desktop sender with recorders."""
    bells: list[str] = []
    sent: list[dict] = []
    app.bell = lambda: bells.append("bell")
    app.desktop = sent.append
    return bells, sent


async def test_the_bell_and_the_desktop_notification_once_per_event(store):
    earlier, _ = operate.start(store, REGISTRY, agent_name="napping", request={})
    operate.park(store, earlier)                                  # before the app: not announced
    napping, _ = operate.start(store, REGISTRY, agent_name="napping", request={})
    toasts: list[str] = []
    async with tui(store.path, toasts=toasts) as (app, pilot):
        bells, sent = _observed(app)
        await polled(pilot)
        await pilot.pause()
        assert bells == [] and sent == []

        operate.park(store, napping, "from another terminal")     # a person elsewhere (the CLI's path)
        asking = start_and_work(store, REGISTRY, "asking", {"question": "release?"})   # a worker
        done = start_and_work(store, REGISTRY, "napping", {"sleep_s": 60})            # needs nobody
        assert done.status == "waiting"
        await polled(pilot)
        await pilot.pause()
        assert bells == ["bell", "bell"]
        assert [(n["run_id"], n["status"], n["reason"]) for n in sent] == [
            (napping, "parked", "person"), (asking.run_id, "waiting", "approval")]
        assert "release?" in sent[1]["message"]
        assert any("from another terminal" in t and f"tui-agent resume {napping}" in t for t in toasts)

        await polled(pilot)                                                # nothing new: nothing again
        operate.start(store, REGISTRY, agent_name="napping", request={})             # a change, but nobody is needed
        await polled(pilot)
        await pilot.pause()
        assert len(bells) == 2 and len(sent) == 2

        parked = start_and_work(store, REGISTRY, "parking", {"why": "[b]no[/b] key"})   # markup is shown as text
        await polled(pilot)
        await pilot.pause()
        assert len(bells) == 3 and sent[-1]["run_id"] == parked.run_id
        assert any("[b]no[/b] key" in t for t in toasts)
    assert all(n["notified_at"] is None for n in notices.after(store, 0)[1:])   # read, never claimed


async def test_a_call_whose_need_passed_before_the_app_read_it_rings_nothing(store):
    """Decided, resumed or ended between two looks: no bell, no desktop notification, no toast; a current call
    after it still rings."""
    toasts: list[str] = []
    async with tui(store.path, toasts=toasts) as (app, pilot):
        bells, sent = _observed(app)
        asking = start_and_work(store, REGISTRY, "asking", {"question": "release?"})
        operate.approve(store, asking.run_id)                     # answered elsewhere before the app looked
        resumed, _ = operate.start(store, REGISTRY, agent_name="napping", request={})
        operate.park(store, resumed)
        operate.resume(store, resumed)
        parked, _ = operate.start(store, REGISTRY, agent_name="napping", request={})
        operate.park(store, parked, "still needed")
        await polled(pilot)
        await pilot.pause()
        assert bells == ["bell"] and [n["run_id"] for n in sent] == [parked]
        assert not any("release?" in t for t in toasts) and any("still needed" in t for t in toasts)
        assert app.notice_cursor == notices.last_id(store)       # read past, not left to ring later


async def test_an_action_taken_in_the_tui_itself_rings_too(store):
    run_id, _ = operate.start(store, REGISTRY, agent_name="napping", request={})
    async with tui(store.path) as (app, pilot):
        bells, sent = _observed(app)
        app.session.act(operate.park, run_id)
        await settled(pilot)
        await polled(pilot)
        await pilot.pause()
        assert bells == ["bell"] and [n["run_id"] for n in sent] == [run_id]


def test_the_app_sends_desktop_notifications_through_notify(db_path):
    """The default sender is the real one (the tests above replace it)."""
    from tui_agent.app import TuiAgentApp
    from tui_agent.services import notify

    app = TuiAgentApp(db_path, poll_s=None)
    try:
        assert app.desktop is notify.notify_desktop
    finally:
        app.session.close()
