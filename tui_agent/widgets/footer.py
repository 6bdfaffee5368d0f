"""The footer keeps what fits: the app's keys (quit, help) and the palette key at every width, then as many
of the screen's keys as fit, most useful first (the screen's FOOTER, then the rest of its shown bindings in
their order); compact, one column a key narrower, when the screen's FOOTER keys would not fit otherwise
(a key it does not name shows only where there is room for it)."""

from __future__ import annotations

from dataclasses import replace

from rich.cells import cell_len
from textual import events
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import Footer

PALETTE_W = 12   # the palette key docked on the right: its border, key, description and padding


class KeysFooter(Footer):
    def __init__(self) -> None:
        super().__init__()
        self._offered: list[str] | None = None     # the screen's keys its BINDINGS show, found once
        self._composed: tuple | None = None         # the keys it shows now (see `_keys`)

    def on_resize(self, event: events.Resize) -> None:
        if self._fit(event.size.width):
            self.screen.refresh_bindings()

    def bindings_changed(self, screen: Screen) -> None:
        """Fit the footer again when a key came or went, through focus or a check_action.

        When that changes what shows, the bindings are signalled once more."""
        if self._fit(self.size.width or self.app.size.width):
            screen.refresh_bindings()
        else:
            super().bindings_changed(screen)

    def _keys(self) -> tuple:
        """What the footer would show: each shown binding, whether it is enabled, its tooltip."""
        return tuple((b.key, b.description, b.action, enabled, tooltip)
                     for _, b, enabled, tooltip in self.screen.active_bindings.values() if b.show)

    def compose(self):
        if self._bindings_ready:     # Textual's Footer composes nothing before the screen's first bindings signal
            self._composed = self._keys()
        yield from super().compose()

    async def recompose(self) -> None:
        """Recompose only when the keys shown changed.

        Opening a screen signals a change of bindings several times (focus, classes, a check_action), and each
        recompose rebuilds and restyles every key."""
        if not self.is_attached or self._composed is not None and self._keys() == self._composed:
            return            # (a recompose asked for just before its screen closed finds no screen)
        await super().recompose()

    def _width(self, bindings: list[Binding], compact: bool) -> int:
        """Columns the keys take in a row (the last one's trailing space may sit under the palette key)."""
        return sum(cell_len(self.app.get_key_display(b)) + cell_len(b.description) + (2 if compact else 3)
                   for b in bindings) - 1

    def _fit(self, width: int) -> bool:
        """Show the keys that fit `width`; True when what the screen shows changed."""
        screen = self.screen
        keys = screen._bindings.key_to_bindings   # Textual has no public way to change a binding's `show`
        if self._offered is None:
            self._offered = [key for key, bindings in keys.items() if any(b.show for b in bindings)]
        active = screen.active_bindings
        fixed = [a.binding for a in active.values() if a.node is not screen and a.binding.show]
        ranked = [*getattr(screen, "FOOTER", ()), *self._offered]
        candidates = [key for key in dict.fromkeys(ranked) if key in self._offered and key in active
                      and active[key].node is screen]
        room = width - PALETTE_W
        wanted = [key for key in candidates if key in getattr(screen, "FOOTER", ())] or candidates
        compact = self._width(fixed + [active[key].binding for key in wanted], False) > room
        shown: list[str] = []
        for key in candidates:
            if self._width(fixed + [active[k].binding for k in [*shown, key]], compact) <= room:
                shown.append(key)
        self.compact = compact
        changed = False
        for key in self._offered:
            show = key in shown or key not in candidates   # a key not active now shows when it comes back
            if any(b.show != show for b in keys[key]):
                keys[key] = [replace(b, show=show) for b in keys[key]]
                changed = True
        return changed
