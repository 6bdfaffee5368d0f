"""Workers: who holds what. One row per run a worker holds (a worker holding none still gets a
row); the heartbeat age and lease time left tick every half second even when nothing was written.
Start, stop (SIGTERM) and kill -9 act through operate.py; the worker always runs in its own process."""

from __future__ import annotations

import subprocess

from rich.text import Text
from textual.binding import Binding
from textual.widgets import DataTable

from .. import operate
from ..format import ago, skew
from ..format import column_span as span
from ..runtime.clock import now
from ..runtime.liveness import ahead_by, label, on_this_host, worker_state
from ..runtime.worker import worker_name
from ..states import WorkerState
from ..store import Store
from ..store.workers import workers_listing
from ..widgets.safe import safe
from ..widgets.theme import Palette, palette, style
from .modals import ConfirmModal
from .table import TableScreen

TICK_S = 0.5
COLUMNS = [("NAME", "name"), ("PID", "pid"), ("STATE", "state"), ("HEARTBEAT", "heartbeat"), ("RUN", "run"),
           ("LEASE LEFT", "lease"), ("FENCE", "fence")]
LATE = "text-warning"         # a heartbeat or lease to look at: ahead of this clock, silent, nearly out
STATE_TONES = {WorkerState.ALIVE: "text-success", WorkerState.CLOCK_AHEAD: LATE, WorkerState.SILENT: LATE,
               WorkerState.DEAD: "text-error", WorkerState.STOPPED: "foreground-muted"}
ORDER = {state: i for i, state in enumerate(WorkerState)}
NONE = Text("–", style="dim")


def stop_worker(store: Store, pid: int, kill: bool = False) -> None:
    """operate.stop_worker as an action of the session (which hands every action its store): a signal only."""
    operate.stop_worker(pid, kill=kill)


def _row_key(worker: str, run_id: str | None) -> str:
    return f"{worker}/{run_id or ''}"


class WorkersScreen(TableScreen):
    COLUMNS = COLUMNS
    TABLE_ID = "workers"
    STRIP_ID = "worker-strip"
    BINDINGS = [
        Binding("plus", "start", "Start worker", key_display="+"),
        Binding("t", "stop", "Stop (SIGTERM)"),
        Binding("K", "kill", "Kill -9", key_display="K"),
        Binding("escape", "app.pop_screen", "Back"),
    ]

    def __init__(self) -> None:
        super().__init__()
        self._workers: list[dict] = []
        self._rows: list[tuple[str, dict, dict | None]] = []    # (row key, worker, held run or None)
        self._shown: dict[tuple[str, str], Text] = {}            # what each ticking cell shows now
        self._follow: str | None = None                          # a worker just started: select it once it shows

    def on_mount(self) -> None:
        self.reload_now()
        self.table.focus()
        self.set_interval(TICK_S, self.tick)

    # -- data -----------------------------------------------------------------------------------

    def load(self, store: Store) -> list[dict]:
        return workers_listing(store)

    def show(self, workers: list[dict]) -> None:
        """Repaint the workers read in one batch, keeping the cursor on the same worker."""
        table = self.table
        selected_key, selected_worker = self._selected()
        old_index = table.cursor_row
        at, colours = now(), palette(self.app)
        workers.sort(key=lambda w: ORDER[worker_state(w, at)])      # stable: newest first inside each state
        self._workers = workers
        self._rows = []
        for worker in workers:
            for held in worker["runs"] or [None]:
                self._rows.append((_row_key(worker["name"], held and held["id"]), worker, held))
        self._shown = {}
        keys = [key for key, _, _ in self._rows]
        with self.app.batch_update():
            table.clear()
            for key, worker, held in self._rows:
                cells = self._cells(worker, held, at, colours)
                self._shown.update({(key, column): cell for column, cell in cells.items()})
                table.add_row(*(cells[column] for _, column in COLUMNS), key=key)
            target = None
            if self._follow and any(w["name"] == self._follow for w in workers):
                target = next(i for i, (_, w, _) in enumerate(self._rows) if w["name"] == self._follow)
                self._follow = None
            elif selected_key in keys:
                target = keys.index(selected_key)
            elif selected_worker and any(w["name"] == selected_worker for w in workers):
                target = next(i for i, (_, w, _) in enumerate(self._rows) if w["name"] == selected_worker)
            elif self._rows:
                target = min(old_index, len(self._rows) - 1)
            if target is not None:
                table.move_cursor(row=target, animate=False)
        self._summarize(at)
        self._explain(at)

    @staticmethod
    def _cells(worker: dict, held: dict | None, at: float, colours: Palette) -> dict[str, Text]:
        """Every cell of one row; continuation rows (a second run of the same worker) leave the worker's own
        columns empty."""
        state = worker_state(worker, at)
        first = held is None or held is worker["runs"][0]
        if ahead_by(worker, at) is not None:
            beat = style(colours, LATE)
        elif state == WorkerState.SILENT:
            beat = style(colours, LATE, bold=True)
        else:
            beat = "" if state == WorkerState.ALIVE else "dim"
        cells = {
            "name": safe(Text(worker["name"], style="" if first else "dim")),
            "pid": Text(str(worker["pid"]) if first else ""),
            "state": Text(label(state) if first else "",
                          style=style(colours, STATE_TONES[state], bold=state != WorkerState.STOPPED)),
            "heartbeat": Text(ago(worker["heartbeat_at"], at) if first else "", style=beat),
        }
        if held is None:
            cells.update(run=NONE.copy(), lease=NONE.copy(), fence=NONE.copy())
            return cells
        left = (held["lease_expires_at"] or 0) - at
        if left > 0:
            cells["run"] = safe(f"{held['id']} {held['agent']}")
            cells["lease"] = Text(f"{span(left)}", style=style(colours, LATE) if left < worker["lease_s"] / 3 else "")
        else:
            cells["run"] = Text.assemble(held["id"], " ", ("(lease expired)", style(colours, LATE)))
            cells["lease"] = NONE.copy()
        cells["fence"] = Text(str(held["fence"]))
        return cells

    def tick(self) -> None:
        """Every half second: ages, states and leases move on even when nothing was written."""
        for process in self.session.spawned:
            process.poll()                  # reap a worker this app started, so its exit shows
        if not self.is_current:
            return
        table, at, colours = self.table, now(), palette(self.app)
        for key, worker, held in self._rows:
            for column, cell in self._cells(worker, held, at, colours).items():
                if self._shown.get((key, column)) != cell:
                    self._shown[(key, column)] = cell
                    table.update_cell(key, column, cell, update_width=True)
        self._summarize(at)
        self._explain(at)

    def _summarize(self, at: float) -> None:
        states = [worker_state(w, at) for w in self._workers]
        held = sum(len(w["runs"]) for w in self._workers)
        figures = [f"{states.count(s)} {label(s)}" for s in ORDER if states.count(s)]
        mine = sum(1 for p in self.session.spawned if p.returncode is None)
        text = (f"Workers · {self.session.label} · " + (" · ".join(figures) or "none yet")
                + f" · {held} run{'s' * (held != 1)} held" + (f" · {mine} mine" if mine else ""))
        self.summary.text = text

    def _explain(self, at: float) -> None:
        worker = self.selected_worker()
        if worker is None:
            self.strip.text = ("No workers yet: + starts one in its own process (the TUI never runs agent code "
                               "itself); it claims the queued runs of this database.")
            return
        state = worker_state(worker, at)
        name = worker["name"]
        process = self._process(worker)
        exited = "" if process is None or process.returncode is None else \
            f" · exited with {self._exit(process.returncode)}"
        head = (f"{name} · {label(state)} · started{' here' if process else ''} {ago(worker['started_at'], at)}"
                f"{exited} · pid {worker['pid']} on {worker['host']} · lease {span(worker['lease_s'])}"
                + (f" · concurrency {worker['concurrency']}" if worker["concurrency"] != 1 else ""))
        if worker.get("log"):
            head += f" · log {worker['log']}"
        clock = skew(worker.get("clock_skew_s"))
        if clock:
            head += f" · its clock differs from the database's: {clock}"
        self.strip.text = f"{head}\n{self._situation(worker, state, at)}"

    @staticmethod
    def _situation(worker: dict, state: str, at: float) -> str:
        """What the selected worker's state means for its runs, and which key acts on it."""
        runs = ", ".join(f"{r['id']} (fence {r['fence']})" for r in worker["runs"])
        ahead = ahead_by(worker, at)
        late = f", {span(ahead)} late (its clock ran ahead)" if ahead else ""
        if state == WorkerState.STOPPED:
            return f"stopped {ago(worker['stopped_at'], at)} and handed its runs back"
        if state == WorkerState.DEAD:
            return ("gone without saying goodbye (killed or crashed)" + (f"; {runs}: " if runs else "; ")
                    + "a worker on this host takes its runs over once nothing of it is left, else as their leases "
                    f"run out{late}")
        if state == WorkerState.CLOCK_AHEAD:
            assert ahead is not None   # ahead_by judges by worker_state's clock
            return (f"its heartbeat is stamped {span(ahead)} ahead of this clock (TUI_AGENT_NOW?): leases assume "
                    f"one clock, so if it dies its runs wait {span(ahead)} longer · t stops it and hands its runs "
                    "back now")
        if state == WorkerState.SILENT:
            return (f"no heartbeat for {span(at - worker['heartbeat_at'])} (lease {span(worker['lease_s'])}): hung "
                    "or dead; its runs are claimable again · K kills it")
        return (f"holds {runs}" if runs else "holds no run; it claims the next due one") + \
            " · t stops it and hands its runs back · K kills it like a crash"

    @staticmethod
    def _exit(code: int) -> str:
        return f"signal {-code}" if code < 0 else f"code {code}"

    def _process(self, worker: dict) -> subprocess.Popen | None:
        if not on_this_host(worker):
            return None
        return next((p for p in self.session.spawned if p.pid == worker["pid"]), None)

    def _selected(self) -> tuple[str | None, str | None]:
        key = self.selected_key() if self._rows else None
        return (key, key.split("/", 1)[0]) if key else (None, None)

    def selected_worker(self) -> dict | None:
        key, _ = self._selected()
        return next((w for k, w, _ in self._rows if k == key), None)

    # -- events ---------------------------------------------------------------------------------

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        self._explain(now())

    # -- actions --------------------------------------------------------------------------------

    def action_start(self) -> None:
        session, name = self.session, worker_name()

        def started(process: subprocess.Popen) -> None:
            session.spawned.append(process)
            self._follow = name

        session.act(operate.start_worker, session.durability, session.agent_modules, name,
                    done=lambda p: f"{name} started (pid {p.pid})", then=started)

    def _signalable(self) -> dict | None:
        """The selected worker, if a signal can reach it from here."""
        worker = self.selected_worker()
        if worker is None:
            self.notify("no worker selected: + starts one", severity="warning")
            return None
        state = worker_state(worker, now())
        if state in (WorkerState.STOPPED, WorkerState.DEAD):
            self.notify(f"{worker['name']} has {'stopped' if state == WorkerState.STOPPED else 'gone'} already",
                        severity="warning")
            return None
        if not on_this_host(worker):
            self.notify(f"{worker['name']} runs on {worker['host']}; stop it there", severity="warning")
            return None
        return worker

    def action_stop(self) -> None:
        worker = self._signalable()
        if worker is not None:
            self.session.act(stop_worker, worker["pid"],
                         done=f"{worker['name']}: SIGTERM sent (pid {worker['pid']}); it finishes its step, "
                              "hands its runs back and stops")

    def action_kill(self) -> None:
        worker = self._signalable()
        if worker is None:
            return
        name, pid = worker["name"], worker["pid"]

        def confirmed(yes: bool | None) -> None:
            if yes:
                self.session.act(stop_worker, pid, kill=True,
                             done=f"{name} killed (SIGKILL, pid {pid}); a worker on this host takes its runs over "
                                  "once nothing of it is left, else when their leases run out")

        self.app.push_screen(ConfirmModal(f"Kill {name}?", f"Kill {name} with SIGKILL? A worker on this host takes "
                                                           "its runs over once nothing of it is left, else when "
                                                           "their leases run out",
                                          "Kill it (SIGKILL)", "Keep it running"), confirmed)
