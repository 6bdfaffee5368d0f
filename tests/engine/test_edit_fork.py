"""Edit and fork: a recorded step result or model reply edited by a person, then a fork from that position with
the edit in place of the recorded entry (operate.fork_edited, store.runs.fork with an EditedEntry), through
`tui-agent fork RUN --edit N` (an editor, or --result) and the private file the editor is given (editing.py)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from edit_fork_agents import Counter, decider, journal_rows, leftovers, make_editor, planner, replacement
from helpers import dump, ok, registry_of, start_and_work, work

from tui_agent import Agent, operate, tool
from tui_agent.errors import UserError
from tui_agent.runtime.results import ARTIFACT_THRESHOLD
from tui_agent.services import editing
from tui_agent.store import artifacts
from tui_agent.store.runs import events_for, get_run


def parent_unchanged(before: list[str], after: list[str], parent: str, child: str) -> None:
    """Nothing of the database was removed or changed by the fork; what it added belongs to the child, but for
    the one event on the parent that names the child."""
    assert set(before) <= set(after), sorted(set(before) - set(after))
    added = set(after) - set(before)
    for line in added:
        assert child in line, line
    assert [line for line in added if "INSERT INTO \"events\"" in line and f"'{parent}'" in line.split(",")[1]] \
        != [], "the parent's event naming the fork"


# -- the store and operate.py -------------------------------------------------------------------------------


def test_an_edited_model_reply_is_what_the_fork_acts_on_and_nothing_before_it_runs_again(store):
    counter, asked = Counter(), []
    registry = registry_of(decider(counter, asked))
    parent = start_and_work(store, registry, "decider", {})
    assert parent.result == {"did": "acted on 'ship it'"}
    assert counter.calls == {"fetch": 1, "act": 1} and asked == [0]
    entry = operate.recorded_entry(store, parent.run_id, 1)
    assert (entry["name"], entry["kind"], entry["result"]["content"][0]["text"]) == ("decide", "model", "ship it")
    before = dump(store.path)

    reply = {**entry["result"], "content": [{"type": "text", "text": "hold it"}]}
    child = operate.fork_edited(store, parent.run_id, position=1, result=reply)

    parent_unchanged(before, dump(store.path), parent.run_id, child)
    done = work(store, registry, child)
    assert done.status == "succeeded", done.error
    assert done.result == {"did": "acted on 'hold it'"}, "the fork acted on the edited reply"
    assert counter.calls == {"fetch": 1, "act": 2}, "fetch was kept, not run again; act ran anew"
    assert asked == [0], "the model was not asked again: the edited reply stood in its place"
    rows = journal_rows(store, child)
    assert [(r["name"], r["edited"]) for r in rows] == [("fetch", None), ("decide", 1), ("act", None)]
    assert (rows[1]["attempts"], rows[1]["cost_usd"]) == (1, None)
    assert journal_rows(store, parent.run_id)[1]["cost_usd"] is not None, "the parent's reply kept its cost"
    assert get_run(store, child)["parent_id"] == parent.run_id
    messages = [(e["kind"], e["message"]) for e in events_for(store, child)]
    assert any(kind == "edited" and "#1 decide" in message and parent.run_id in message
               for kind, message in messages), messages
    assert any(f"forked into {child} at position 1 with #1 decide edited" in e["message"]
               for e in events_for(store, parent.run_id))


def test_an_edited_step_result_changes_what_follows(store):
    counter = Counter()
    registry = registry_of(planner(counter))
    parent = start_and_work(store, registry, "planner", {})
    assert parent.result == {"done": [0, 1]}
    child = operate.fork_edited(store, parent.run_id, position=1, result={"files": 4})
    done = work(store, registry, child)
    assert done.result == {"done": [0, 1, 2, 3]}
    assert counter.calls == {"setup": 1, "plan": 1, "file 0": 2, "file 1": 2, "file 2": 1, "file 3": 1}
    checkpoint = store.conn.execute("SELECT current_step, used_steps FROM checkpoints_now WHERE run_id = ?",
                                    (child,)).fetchone()
    assert checkpoint == (6, 4), "the kept and edited entries are not counted against the fork's budget"


def test_the_fork_checkpoint_starts_after_the_edited_entry_and_counts_none_of_the_kept_ones(store):
    registry = registry_of(planner(Counter()))
    parent = start_and_work(store, registry, "planner", {})
    child = operate.fork_edited(store, parent.run_id, position=1, result={"files": 1})
    checkpoint = store.conn.execute("SELECT current_step, used_steps FROM checkpoints_now WHERE run_id = ?",
                                    (child,)).fetchone()
    plain = operate.fork(store, parent.run_id, 1)
    assert store.conn.execute("SELECT current_step, used_steps FROM checkpoints_now WHERE run_id = ?",
                              (plain,)).fetchone() == (1, 0)
    assert checkpoint == (2, 0)


def test_a_large_edited_result_is_the_forks_own_artifact(store):
    big = "a" * (ARTIFACT_THRESHOLD + 100)

    def run(ctx, request):
        blob = ctx.step("blob", lambda: big)
        return {"first": ctx.step("first", lambda: blob[0]), "size": len(blob)}

    registry = registry_of(Agent(name="blobby", run=run))
    parent = start_and_work(store, registry, "blobby", {})
    recorded, _ = journal_rows(store, parent.run_id)
    parent_bytes = artifacts.load(store, recorded["artifact"])

    child = operate.fork_edited(store, parent.run_id, position=0, result="b" * (ARTIFACT_THRESHOLD + 7))

    row = journal_rows(store, child)[0]
    assert row["result"] is None and row["artifact"].startswith(f"artifacts/{child}/"), row
    assert json.loads(artifacts.load(store, row["artifact"])) == "b" * (ARTIFACT_THRESHOLD + 7)
    assert artifacts.load(store, recorded["artifact"]) == parent_bytes, "the parent's artifact was not written"
    assert work(store, registry, child).result == {"first": "b", "size": ARTIFACT_THRESHOLD + 7}


def test_a_small_edit_of_a_large_result_sits_in_the_row(store):
    registry = registry_of(Agent(name="blobby", run=lambda ctx, r: ctx.step("blob", lambda: "x" * 40_000)))
    parent = start_and_work(store, registry, "blobby", {})
    child = operate.fork_edited(store, parent.run_id, position=0, result="short")
    row = journal_rows(store, child)[0]
    assert (row["result"], row["artifact"], row["edited"]) == ('"short"', None, 1)


def test_an_agent_loop_turn_edited_to_call_another_tool(store):
    """A turn of an agent loop is a model reply like any other: edited to ask for another tool, the fork runs that
    tool and the loop goes on from the next entry; the tool result the parent recorded is not kept."""
    looked_up = []

    @tool
    def lookup(city: str) -> str:
        """The weather in a city."""
        looked_up.append(city)
        return f"sunny in {city}"

    def script(messages, max_tokens, index):
        results = [b for b in messages[-1]["content"] if isinstance(b, dict) and b.get("type") == "tool_result"]
        if results:
            return f"done: {results[0]['content']}"
        return {"stop_reason": "tool_use",
                "content": [{"type": "tool_use", "id": "toolu_1", "name": "lookup", "input": {"city": "Oslo"}}]}

    registry = registry_of(Agent(name="weather", script=script, run=lambda ctx, r: ctx.agent_loop(
        "w", tools=[lookup], messages=[{"role": "user", "content": "weather?"}], max_tokens=50)["final"]))
    parent = start_and_work(store, registry, "weather", {})
    assert parent.result["content"][0]["text"] == "done: sunny in Oslo" and looked_up == ["Oslo"]
    reply = operate.recorded_entry(store, parent.run_id, 0)["result"]
    asks_bergen = {**reply, "content": [{**reply["content"][0], "input": {"city": "Bergen"}}]}
    with pytest.raises(UserError, match="a tool's result is what the tool returned"):
        operate.recorded_entry(store, parent.run_id, 1)

    done = work(store, registry, operate.fork_edited(store, parent.run_id, position=0, result=asks_bergen))
    assert done.result["content"][0]["text"] == "done: sunny in Bergen"
    assert looked_up == ["Oslo", "Bergen"]


@pytest.mark.parametrize("kind", ["effect", "sleep", "progress", "failure", "approval"])
def test_only_a_step_or_a_model_reply_can_be_edited(store, kind):
    def run(ctx, request):
        ctx.step("first", lambda: 1)
        if kind == "effect":
            ctx.effect("send", key="k:1", do=lambda key: {"sent": key})
        elif kind == "sleep":
            ctx.sleep("nap", 0)
        elif kind == "progress":
            ctx.progress(3)
        elif kind == "failure":
            ctx.failure(ValueError("nope"))
        else:
            ctx.approval("ship", "Ship it?")
        return {}

    registry = registry_of(Agent(name="mixed", run=run))
    parent = start_and_work(store, registry, "mixed", {})
    if kind == "approval":
        operate.approve(store, parent.run_id)
        work(store, registry, parent.run_id)
    (entry,) = [r for r in journal_rows(store, parent.run_id) if r["position"] == 1]
    assert entry["kind"] == kind
    runs = store.conn.execute("SELECT count(*) FROM runs").fetchone()[0]
    with pytest.raises(UserError) as refused:
        operate.recorded_entry(store, parent.run_id, 1)
    assert f"{parent.run_id} #1 {entry['name']} ({kind}): " in str(refused.value)
    assert "only a step's result or a model reply can be edited" in str(refused.value)
    with pytest.raises(UserError, match="only a step's result or a model reply can be edited"):
        operate.fork_edited(store, parent.run_id, position=1, result={"anything": True})
    assert store.conn.execute("SELECT count(*) FROM runs").fetchone()[0] == runs
    if kind == "effect":
        assert "decided through reconcile" in str(refused.value)


@pytest.mark.parametrize(("reply", "words"), [
    (["not", "an", "object"], "must be a JSON object"),
    ({"role": "user", "content": []}, '"role": "assistant"'),
    ({"content": [{"type": "text", "text": "x"}]}, '"role": "assistant"'),
    ({"role": "assistant", "content": "hold it"}, '"content" must be a list of blocks (it is a string)'),
    ({"role": "assistant", "content": ["hold it"]}, 'must be an object with a "type"'),
])
def test_an_edited_model_reply_must_stay_a_reply(store, reply, words):
    registry = registry_of(decider(Counter(), []))
    parent = start_and_work(store, registry, "decider", {})
    with pytest.raises(UserError) as refused:
        operate.fork_edited(store, parent.run_id, position=1, result=reply)
    assert words in str(refused.value)
    assert "\n" not in str(refused.value)
    assert store.conn.execute("SELECT count(*) FROM runs").fetchone()[0] == 1


def test_an_unchanged_result_forks_nothing_but_key_order_alone_is_no_change(store):
    registry = registry_of(decider(Counter(), []))
    parent = start_and_work(store, registry, "decider", {})
    recorded = operate.recorded_entry(store, parent.run_id, 1)["result"]
    reordered = dict(reversed(list(recorded.items())))
    with pytest.raises(UserError, match="the same as the recorded one: nothing to fork"):
        operate.fork_edited(store, parent.run_id, position=1, result=reordered)
    with pytest.raises(UserError, match="nothing to fork"):
        operate.fork_edited(store, parent.run_id, position=0, result={"rows": 3})
    assert operate.fork_edited(store, parent.run_id, position=0, result={"rows": 3.0}), \
        "3.0 is another JSON value than 3"


def test_the_fork_is_refused_when_the_parent_no_longer_holds_the_entry_that_was_edited(store):
    registry = registry_of(decider(Counter(), []))
    parent = start_and_work(store, registry, "decider", {})
    reply = {"role": "assistant", "content": [{"type": "text", "text": "hold it"}]}
    with pytest.raises(UserError, match="#1 is no longer the fetch of generation 1"):
        operate.fork_edited(store, parent.run_id, position=1, result=reply, name="fetch", generation=1)
    with pytest.raises(UserError, match="no longer the decide of generation 0"):
        operate.fork_edited(store, parent.run_id, position=1, result=reply, name="decide", generation=0)
    with pytest.raises(UserError, match="no entry #7"):
        operate.fork_edited(store, parent.run_id, position=7, result=reply)
    with pytest.raises(UserError, match="its entries are #0 to #2"):
        operate.recorded_entry(store, parent.run_id, 7)
    assert operate.fork_edited(store, parent.run_id, position=1, result=reply, name="decide", generation=1)


def test_a_value_json_cannot_hold_is_refused(store):
    registry = registry_of(planner(Counter()))
    parent = start_and_work(store, registry, "planner", {})
    with pytest.raises(UserError, match="not JSON-serialisable"):
        operate.fork_edited(store, parent.run_id, position=1, result={"files": float("nan")})


def test_a_fork_of_an_edited_fork_keeps_the_mark(store):
    registry = registry_of(planner(Counter()))
    parent = start_and_work(store, registry, "planner", {})
    child = operate.fork_edited(store, parent.run_id, position=1, result={"files": 1})
    work(store, registry, child)
    grandchild = operate.fork(store, child, 3)
    assert [r["edited"] for r in journal_rows(store, grandchild)] == [None, 1, None]


# -- editing.py: the private file ------------------------------------------------------------------------------


@pytest.fixture
def private_tmp(tmp_path, monkeypatch) -> Path:
    """tempfile's folder for this test (and TMPDIR for its subprocesses), to look for leftovers in."""
    import tempfile

    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    monkeypatch.setenv("TMPDIR", str(tmp))
    monkeypatch.delenv("VISUAL", raising=False)
    return tmp


def test_the_editor_gets_a_0600_file_in_a_0700_folder_which_is_removed_after(tmp_path, private_tmp, monkeypatch):
    command, record = make_editor(tmp_path, replacement(tmp_path, '{"b": 2}'))
    monkeypatch.setenv("EDITOR", command)
    os.umask(0o000)          # a careless umask must not widen the file or the folder
    try:
        text = editing.edit_text('{"a": 1}\n', "r-1-summary.json")
    finally:
        os.umask(0o022)
    seen = json.loads(record.read_text())
    assert (seen["mode"], seen["folder_mode"]) == (0o600, 0o700)
    assert seen["text"] == '{"a": 1}\n' and seen["name"] == "r-1-summary.json"
    assert seen["args"] == 4, "the quoted path with a space stayed one argument: no shell split it"
    assert text == '{"b": 2}'
    assert not Path(seen["path"]).exists() and not Path(seen["path"]).parent.exists()
    assert leftovers(private_tmp) == []


@pytest.mark.parametrize("action", ["fail", "keep-invalid", "missing-editor"])
def test_the_private_folder_is_removed_whatever_happens(tmp_path, private_tmp, monkeypatch, action):
    if action == "missing-editor":
        monkeypatch.setenv("EDITOR", str(tmp_path / "no-such-editor"))
        with pytest.raises(UserError, match="was not found"):
            editing.edit_text("{}")
    else:
        command, record = make_editor(tmp_path, "fail" if action == "fail" else replacement(tmp_path, "{oops"))
        monkeypatch.setenv("EDITOR", command)
        if action == "fail":
            with pytest.raises(UserError, match="exited with status 3; nothing was forked"):
                editing.edit_text("{}")
        else:
            with pytest.raises(UserError, match="not valid JSON .* at line 1 column 2"):
                editing.parse_edited(editing.edit_text("{}"))
        assert not Path(json.loads(record.read_text())["path"]).parent.exists()
    assert leftovers(private_tmp) == []


def test_which_editor(tmp_path, monkeypatch):
    assert editing.editor_command({"VISUAL": "code --wait", "EDITOR": "nano"}) == ["code", "--wait"]
    assert editing.editor_command({"VISUAL": " ", "EDITOR": "'my ed' -x"}) == ["my ed", "-x"]
    with pytest.raises(UserError, match="does not split"):
        editing.editor_command({"EDITOR": "'unclosed"})
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", str(bin_dir))
    with pytest.raises(UserError, match="set EDITOR"):
        editing.editor_command({})
    (bin_dir / "vi").write_text("#!/bin/sh\n")
    (bin_dir / "vi").chmod(0o755)
    assert editing.editor_command({}) == [str(bin_dir / "vi")]


def test_parse_edited_says_line_and_column_and_refuses_nan_and_empty():
    with pytest.raises(UserError, match=r"\(Extra data at line 3 column 2\); nothing was forked"):
        editing.parse_edited('{\n  "a": 1\n}}')
    with pytest.raises(UserError, match="not a finite number"):
        editing.parse_edited('{"a": NaN}')
    with pytest.raises(UserError, match="is empty; nothing was forked"):
        editing.parse_edited("  \n")
    assert editing.parse_edited('{"a": [1, 2.5]}') == {"a": [1, 2.5]}


# -- the CLI, in real processes --------------------------------------------------------------------------------


def _runs(store) -> int:
    return store.conn.execute("SELECT count(*) FROM runs").fetchone()[0]


def _one_line_error(done, words: str) -> None:
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert words in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr, done.stderr
    assert done.stdout == ""


def test_cli_edit_opens_the_editor_on_the_recorded_reply_then_forks(store, tmp_path, private_tmp, tui_agent):
    counter, asked = Counter(), []
    registry = registry_of(decider(counter, asked))
    parent = start_and_work(store, registry, "decider", {})
    reply = operate.recorded_entry(store, parent.run_id, 1)["result"]
    edited = {**reply, "content": [{"type": "text", "text": "ask again tomorrow"}]}
    command, record = make_editor(tmp_path, replacement(tmp_path, json.dumps(edited, indent=1)))

    done = ok(tui_agent("fork", parent.run_id[:6], "--edit", "1",
                        env={"EDITOR": command, "VISUAL": "", "TMPDIR": str(private_tmp)}))

    child = done.stdout.strip()
    assert child.startswith("r-") and child != parent.run_id and done.stderr == ""
    seen = json.loads(record.read_text())
    assert json.loads(seen["text"]) == reply, "the editor was given the recorded reply"
    assert seen["name"] == f"{parent.run_id}-1-decide.json"
    assert (seen["mode"], seen["folder_mode"]) == (0o600, 0o700)
    assert not Path(seen["path"]).parent.exists() and leftovers(private_tmp) == []
    assert work(store, registry, child).result == {"did": "acted on 'ask again tomorrow'"}
    assert counter.calls == {"fetch": 1, "act": 2} and asked == [0]
    assert [r["edited"] for r in journal_rows(store, child)] == [None, 1, None]


def test_cli_result_forks_without_an_editor(store, tmp_path, tui_agent):
    registry = registry_of(planner(Counter()))
    parent = start_and_work(store, registry, "planner", {})
    child = ok(tui_agent("fork", parent.run_id, "--edit", "1", "--result", '{"files": 3}',
                         env={"EDITOR": "false", "VISUAL": "false"})).stdout.strip()
    (tmp_path / "plan.json").write_text('{"files": 1}')
    from_file = ok(tui_agent("fork", parent.run_id, "--edit", "1", "--result", f"@{tmp_path / 'plan.json'}")
                   ).stdout.strip()
    assert work(store, registry, child).result == {"done": [0, 1, 2]}
    assert work(store, registry, from_file).result == {"done": [0]}


def test_cli_from_step_still_forks(store, tui_agent):
    registry = registry_of(planner(Counter()))
    parent = start_and_work(store, registry, "planner", {})
    child = ok(tui_agent("fork", parent.run_id, "--from-step", "2")).stdout.strip()
    assert [r["edited"] for r in journal_rows(store, child)] == [None, None]


def test_cli_refusals_are_one_line_and_exit_2(store, tmp_path, private_tmp, tui_agent):
    def run(ctx, request):
        ctx.step("first", lambda: {"n": 1})
        ctx.effect("send", key="k:1", do=lambda key: {"sent": key})
        return {}

    registry = registry_of(Agent(name="sender", run=run))
    parent = start_and_work(store, registry, "sender", {}).run_id
    runs = _runs(store)
    same = make_editor(tmp_path / "keep", "keep")[0]
    invalid = make_editor(tmp_path / "invalid", replacement(tmp_path, '{\n  "n": 2,\n}'))[0]
    failing = make_editor(tmp_path / "fail", "fail")[0]
    env = {"VISUAL": "", "TMPDIR": str(private_tmp)}
    empty_path = tmp_path / "empty-bin"
    empty_path.mkdir()

    _one_line_error(tui_agent("fork", parent, "--edit", "1", "--result", "{}"), "decided through reconcile")
    _one_line_error(tui_agent("fork", parent, "--edit", "0", env={**env, "EDITOR": invalid}),
                    "the edited result is not valid JSON (")
    _one_line_error(tui_agent("fork", parent, "--edit", "0", env={**env, "EDITOR": invalid}), "at line 3 column 1)")
    _one_line_error(tui_agent("fork", parent, "--edit", "0", env={**env, "EDITOR": same}),
                    "the same as the recorded one: nothing to fork")
    _one_line_error(tui_agent("fork", parent, "--edit", "0", env={**env, "EDITOR": failing}),
                    "exited with status 3; nothing was forked")
    _one_line_error(tui_agent("fork", parent, "--edit", "0", "--result", "[1,"), "--result is not valid JSON")
    _one_line_error(tui_agent("fork", parent, "--edit", "0",
                              env={"EDITOR": "", "VISUAL": "", "PATH": str(empty_path)}), "set EDITOR")
    _one_line_error(tui_agent("fork", parent, "--edit", "5", "--result", "{}"), "no entry #5")
    _one_line_error(tui_agent("fork", parent), "give --from-step N")
    _one_line_error(tui_agent("fork", parent, "--edit", "0", "--from-step", "0"), "not both")
    _one_line_error(tui_agent("fork", parent, "--from-step", "0", "--result", "{}"), "--result goes with --edit")
    assert _runs(store) == runs, "nothing was forked"
    assert leftovers(private_tmp) == []
