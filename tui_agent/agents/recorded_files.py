"""The files a refactor-imports run has recorded, checked against its tree on every claim.

Each file's step records the sha256 of the content it left there. Before a claim writes anything new, and
again once it has named its commit, every recorded file is read back; one that no longer holds its recorded
content parks the run (reason environment), so a run never commits or checks a partial rewrite. See
`RecordedFiles` for what is rewritten again and what is left to the user."""

from __future__ import annotations

import hashlib
import shlex
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ..errors import ParkRun
from ..runtime.context import Context
from .files import NotRegular, read_regular, write_atomic
from .imports_rewrite import Unworkable, rewrite

CHECKED = ("rewritten", "already done")   # the step results that record a file's content
PARKED = "parked-about-its-tree"   # in the run's artifact folder: the last park was about its tree


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _names(names: list[str], shown: int = 3) -> str:
    more = f" and {len(names) - shown} more" if len(names) > shown else ""
    return ", ".join(names[:shown]) + more


class RecordedFiles:
    """The recorded file steps a claim replays (`add` each), then `settle` once before anything new is written.

    `settle` goes on, writes again what a resume allowed, or parks. The digest is what `sha256sum FILE` prints.
    A file back at its content from before the rewrite (as `git checkout -- .`, `git reset --hard` or a worktree
    made again leave it) is rewritten again, but only by the claim after a person resumed the run from a park
    about its tree, which said so: the rewrite is exact and idempotent, and the digest proves the same bytes come
    back. Outside git the tree is the user's own, so a file edited after its rewrite that imports the old module no
    more is theirs, not a difference. A run recorded before the digests is not checked and says so in its events."""

    def __init__(self, ctx: Context, place: dict, old: str, new: str) -> None:
        self.ctx, self.place, self.old, self.new = ctx, place, old, new
        self.tree = Path(place["tree"])
        self.results: list[dict] = []
        self.unchecked = 0
        self.settled = False
        self.note = ctx.artifact_dir / PARKED

    def add(self, result: dict) -> None:
        if result.get("status") not in CHECKED:
            return
        if "sha256" in result:
            self.results.append(result)
        else:
            self.unchecked += 1

    @contextmanager
    def parking(self) -> Iterator[None]:
        """A park raised inside is about the run's tree: the claim after the resume may rewrite again."""
        try:
            yield
        except ParkRun:
            self.note.parent.mkdir(parents=True, exist_ok=True)
            self.note.touch()   # lost in a power cut, the next claim parks again: the safe way round
            raise

    def settle(self) -> None:
        """Check, once per claim, that every recorded file holds its recorded content. If not, park, naming what
        differs; on the claim after such a park was resumed, rewrite again the files back at their old content."""
        if self.settled:
            return
        self.settled = True
        if self.unchecked:
            self.ctx.event(f"{self.unchecked} of the files this run recorded have no content digest (recorded by "
                           "an older tui-agent), so they are not checked against the tree")
        undone, gone, changed = {}, [], []
        for result in self.results:
            name = result["path"]
            try:
                data = read_regular(self.tree, name)
            except FileNotFoundError:
                gone.append(name)
                continue
            except (NotRegular, OSError):   # a link, a folder or an unreadable file where the recorded file was
                changed.append(name)
                continue
            if sha256(data) == result["sha256"]:
                continue
            try:
                again = rewrite(data, name, self.old, self.new)
            except Unworkable:
                again = None
            if again is not None and sha256(again.data) == result["sha256"]:
                undone[name] = again.data
            elif again is not None and not again.changes and not self.place["git"]:
                continue   # edited in place after the rewrite, which it keeps: the user's own tree, their edit
            else:
                changed.append(name)
        if undone and not gone and not changed and self.note.exists():
            for name, data in undone.items():
                write_atomic(self.tree, name, data)
            self.ctx.event(f"rewrote again {len(undone)} recorded file(s) that were back to their content from "
                           f"before the rewrite ({_names(list(undone))}), as the park said")
            undone = {}
        if not (undone or gone or changed):
            self.note.unlink(missing_ok=True)
            return
        with self.parking():
            raise ParkRun(self._why(list(undone), gone, changed))

    def _why(self, undone: list[str], gone: list[str], changed: list[str]) -> str:
        count = len(undone) + len(gone) + len(changed)
        parts = []
        if undone:
            parts.append(f"{len(undone)} {_is(undone)} back to {_its(undone)} content from before the rewrite "
                         f"({_names(undone)})")
        if gone:
            parts.append(f"{_names(gone)} {_is(gone)} gone")
        if changed:
            parts.append(f"{_names(changed)} changed since the run wrote {'it' if len(changed) == 1 else 'them'}")
        why = (f"{count} of the {len(self.results)} files this run recorded no longer "
               f"{'holds' if count == 1 else 'hold'} what it wrote there: " + "; ".join(parts))
        lost = gone + changed
        again = f"the run rewrites {'it' if count == 1 else 'them'} again when resumed"
        if not lost:
            return f"{why}; {again}"
        if self.place["git"]:
            paths = " ".join(shlex.quote(name) for name in lost) if len(lost) <= 10 else "."
            back = (f"put back {_its(lost)} committed content (git -C {shlex.quote(str(self.tree))} checkout -- "
                    f"{paths})")
        else:
            back = f"put back {_its(lost)} content from before this run"
        return f"{why}; {back}, and {again}"


def _is(names: list[str]) -> str:
    return "is" if len(names) == 1 else "are"


def _its(names: list[str]) -> str:
    return "its" if len(names) == 1 else "their"
