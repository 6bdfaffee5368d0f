"""Where a run stands, from its checkpoint row: step i of n, plan revision, next input, schema version,
and the run's result or error once it has one."""

from __future__ import annotations

import json

from rich.text import Text
from textual.reactive import reactive
from textual.widgets import Static

from ..format import stamp
from ..safe_text import json_text
from .safe import safe
from .theme import OFFLINE, Palette, style

LABEL = 12


def checkpoint_text(report: dict, colours: Palette = OFFLINE) -> Text:
    run, cp = report["run"], report["checkpoint"]
    text = Text()

    def field(label: str, value: str, style: str = "") -> None:
        text.append(f"{label:<{LABEL}}", style="dim")
        text.append(f"{value}\n", style=style)

    total = cp.get("total_steps")
    field("request", json_text(run["request"]))
    field("step", f"{cp.get('current_step', 0)}" + (f" of {total}" if total else " (total unknown)"))
    field("generation", f"{cp.get('generation')} · plan revision {cp.get('plan_revision', 0)}")
    nxt = cp.get("next_input")
    field("next input", "–" if nxt is None else json_text(nxt))
    field("schema", f"v{cp.get('schema_version')}")
    if cp.get("step_attempts"):
        field("attempts", f"{cp['step_attempts']} failed at this step")
    if cp.get("soft_position") is not None:
        field("soft", f"crossed at #{cp['soft_position']}: {', '.join(json.loads(cp['soft_dimensions'] or '[]'))}"
              if isinstance(cp.get("soft_dimensions"), str) else f"crossed at #{cp['soft_position']}",
              style(colours, "text-warning"))
    field("updated", stamp(cp.get("updated_at")))
    if run.get("parent_id"):
        field("forked", f"from {run['parent_id']} at #{run['fork_step']}")
    if run.get("wake_at"):
        field("wakes", stamp(run["wake_at"]) + " UTC")
    if run.get("error"):
        field("error", run["error"], style(colours, "text-error", bold=True))
    if run.get("result") is not None:
        field("result", json_text(run["result"])[:400], style(colours, "text-success"))
    text.rstrip()
    return text


class CheckpointView(Static):
    text: reactive[Text] = reactive(Text, init=False)    # repainted only when what it says changed

    def set_report(self, report: dict, colours: Palette = OFFLINE) -> None:
        self.text = safe(checkpoint_text(report, colours))    # the request, result and error are the run's

    def watch_text(self, text: Text) -> None:
        self.update(text)

    @property
    def plain(self) -> str:
        return self.text.plain
