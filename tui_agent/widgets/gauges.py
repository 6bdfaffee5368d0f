"""Budget gauges: one bar per dimension with a ceiling (or any use), the soft threshold marked with a
`│`, the bar in the theme's warning colour once past soft and its error colour at the ceiling (the same
colours as the runs table's BUDGET column); under them, dim, the forecast (tui_agent/services/forecast.py): where
the burn rate leads and the rate itself. A default ceiling (runtime/agent.py `run_budget`) says `default`
after its figures; a run that opted out of the defaults says `unbounded` in the error colour."""

from __future__ import annotations

from rich.text import Text
from textual.reactive import reactive
from textual.widget import Widget

from ..format import amount, bar, count
from ..runtime.agent import BUDGET_DIMENSIONS, UNBOUNDED
from ..services.forecast import BURN, PROJECTION, burn_parts, projection_parts
from .theme import OFFLINE, Palette, follow_theme, palette, style

SOFT, CEILING = "text-warning", "text-error"
LABELS = {"steps": "steps", "model_calls": "calls", "input_tokens": "tok in", "output_tokens": "tok out",
          "cost_usd": "cost", "tool_calls": "tools", "effects": "effects", "wall_s": "wall"}
LABEL_WIDTH = max(len(label) for label in LABELS.values())


def level_style(fraction: float | None, soft: float | None, crossed: bool = False,
                colours: Palette = OFFLINE) -> str:
    """Default below soft, the warning colour from soft, the error colour (bold) at the ceiling."""
    if fraction is None:
        return ""
    if fraction >= 1:
        return style(colours, CEILING, bold=True)
    if crossed or (soft is not None and fraction >= soft):
        return style(colours, SOFT)
    return ""


def gauge_line(label: str, used: float, *, limit: float | None, soft: float | None = None, width: int = 40,
               name: str = "", crossed: bool = False, stopped: bool = False, default: bool = False,
               unbounded: bool = False, label_width: int = LABEL_WIDTH, colours: Palette = OFFLINE) -> Text:
    """One gauge as a line of `width` cells: label, bar with the soft mark, used/limit and percent.
    `stopped`: the run stopped on this dimension (its next use would pass the ceiling): the label is red.
    `default`: the ceiling is the default one (`default` follows, dim); `unbounded`: the run opted out of
    the defaults, so a dimension without a ceiling says `unbounded` in the error colour."""
    figures = f"{amount(name, used)}/{amount(name, limit)}" if limit else amount(name, used)
    fraction = (used / limit) if limit else None
    percent = "" if fraction is None else "<1%" if 0 < fraction < 0.01 else f"{fraction:.0%}"
    tail = f" {figures:>{max(len(figures), 11)}} {percent:>4}"
    marker = " default" if default and limit else ""
    bar_width = max(4, width - label_width - 1 - len(tail) - len(marker))
    level = level_style(fraction, soft, crossed, colours)
    line = Text(no_wrap=True, overflow="ellipsis")
    line.append(f"{label:<{label_width}}", style=style(colours, CEILING, bold=True) if stopped else None)
    line.append(" ")
    if fraction is None and unbounded:
        line.append(f"{UNBOUNDED:<{bar_width}}"[:bar_width], style=style(colours, CEILING, bold=True))
    elif fraction is None:
        line.append(f"{'no ceiling':<{bar_width}}"[:bar_width], style="dim italic")
    else:
        filled = min(bar_width, round(min(fraction, 1.0) * bar_width))
        if fraction > 0 and filled == 0:
            filled = 1                      # any use shows
        mark = min(bar_width - 1, round(soft * bar_width)) if soft else None
        cells = ["█" if cell < filled else "░" for cell in range(bar_width)]
        runs: list[tuple[str, str | None]] = []
        cell_style: str | None
        for cell, char in enumerate(cells):
            if cell == mark:
                char, cell_style = "│", (f"bold {level}" if cell < filled else "bold")
            else:
                cell_style = (level or None) if cell < filled else "dim"
            if runs and runs[-1][1] == cell_style:
                runs[-1] = (runs[-1][0] + char, cell_style)
            else:
                runs.append((char, cell_style))
        for chars, cell_style in runs:
            line.append(chars, style=cell_style)
    line.append(tail, style=level or None)
    if marker:
        line.append(marker, style="dim")
    return line


def forecast_lines(fc: dict | None, width: int) -> list[Text]:
    """The forecast under the gauges, dim, or none before the first step.

    First what lies ahead at this rate ("at this rate: cost ceiling at step 41 of 60 · finish ≈ $0.31 in 4m
    12s"), then the burn rate, each one line when it fits `width` and its phrases carried onto the next line
    when it does not."""
    lines = []
    for prefix, parts in ((PROJECTION, projection_parts(fc)), (BURN, burn_parts(fc))):
        line = ""
        for part in parts:
            if not line:
                line = prefix + part
            elif len(line) + 3 + len(part) <= width:
                line += " · " + part
            else:
                lines.append(line)
                line = "  " + part
        if line:
            lines.append(line)
    return [Text(line, style="dim", no_wrap=True, overflow="ellipsis") for line in lines]


def gauge_rows(budget: dict) -> list[tuple[str, dict]]:
    """The dimensions worth a line: those with a ceiling first, then any other that was used."""
    dims = budget["dimensions"]
    limited = [(n, dims[n]) for n in BUDGET_DIMENSIONS if n in dims and dims[n]["limit"]]
    used = [(n, dims[n]) for n in BUDGET_DIMENSIONS if n in dims and not dims[n]["limit"] and dims[n]["used"]]
    return limited + used


class BudgetGauges(Widget):
    """All of a run's gauges, redrawn to the widget's width. `set_budget(report["budget"])`."""

    DEFAULT_CSS = "BudgetGauges { height: auto; }"

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self.budget: dict = {"soft": None, "on_exhaust": None, "dimensions": {}}
        self.stopped: str | None = None

    def on_mount(self) -> None:
        follow_theme(self, self.refresh)

    def set_budget(self, budget: dict, stopped: str | None = None) -> None:
        """Show `budget`, repainting only when it or `stopped` changed.

        `stopped` is the dimension the run stopped on (its reason `budget:<dimension>`), if any."""
        if budget != self.budget or stopped != self.stopped:
            width = max(20, self.content_size.width)
            was = len(self.lines(width))      # a gauge or a forecast line came or went: the height changes
            self.budget, self.stopped = budget, stopped
            self.refresh(layout=len(self.lines(width)) != was)

    def lines(self, width: int) -> list[Text]:
        soft, colours = self.budget.get("soft"), palette(self.app)
        unbounded = bool(self.budget.get("unbounded"))
        rows = [gauge_line(LABELS.get(name, name), row["used"], limit=row["limit"], soft=soft, width=width, name=name,
                           crossed=row.get("soft_crossed", False), stopped=name == self.stopped,
                           default=row.get("default", False), unbounded=unbounded, colours=colours)
                for name, row in gauge_rows(self.budget)]
        if unbounded:  # first, and red: nothing but the ceilings above (if any) stops this run
            rows.insert(0, Text(f"{UNBOUNDED}: opted out of the default ceilings", no_wrap=True,
                                overflow="ellipsis", style=style(colours, CEILING, bold=True)))
        if not rows:
            return [Text("no ceilings and nothing used yet", style="dim")]
        read, written = self.budget.get("cache_read_tokens"), self.budget.get("cache_write_tokens")
        if read or written:  # the prompt cache's share of the input tokens, priced apart
            rows.append(Text(f"{'cache':<{LABEL_WIDTH}} read {count(read or 0)} · written "
                             f"{count(written or 0)} of tok in", style="dim", no_wrap=True, overflow="ellipsis"))
        notes = []
        if soft:
            notes.append(f"│ soft {soft:.0%}")
        if self.budget.get("bounds") == "legacy":   # made before default ceilings: none apply to it
            notes.append("no default ceilings (an older run)")
        if self.budget.get("on_exhaust"):
            notes.append(f"at a ceiling: {self.budget['on_exhaust']}")
        if self.budget.get("unpriced_model_calls"):
            notes.append(f"{self.budget['unpriced_model_calls']} call(s) without a price")
        if self.budget.get("possibly_billed_usd"):  # first: money that may be gone matters more than the key
            notes.insert(0, f"{amount('cost_usd', self.budget['possibly_billed_usd'])} possibly billed")
        if self.stopped:
            notes.insert(0, f"stopped on {LABELS.get(self.stopped, self.stopped)}")
        if notes:
            rows.append(Text(" · ".join(notes), style="dim", no_wrap=True, overflow="ellipsis"))
        return rows + forecast_lines(self.budget.get("forecast"), width)

    def get_content_height(self, container, viewport, width: int) -> int:
        return len(self.lines(width))

    def render(self) -> Text:
        return Text("\n").join(self.lines(max(20, self.content_size.width)))

    @property
    def plain(self) -> str:
        return "\n".join(line.plain for line in self.lines(60))


class StepBar(Widget):
    """Step i of n as a bar of the gauges' cells across its width.

    It is one widget, where a Textual ProgressBar is three and a timer, which the run screen paid for at every
    opening."""

    DEFAULT_CSS = "StepBar { height: 1; }"
    done: reactive[int] = reactive(0)
    total: reactive[int] = reactive(1)

    def render(self) -> Text:
        tone = "text-success" if self.done >= self.total else "text-primary"
        return Text(bar(self.done, self.total, max(1, self.size.width)), style=style(palette(self.app), tone))
