"""State colours from the Textual theme, for Rich text. CSS colours a widget, but a DataTable cell, an
OptionList prompt or a line in a Static is Rich Text carrying its own style: it is built with the theme's
colours by name (`palette(app)`), and its screen builds it again when the theme changes (`follow_theme`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from weakref import WeakKeyDictionary

from textual.app import App
from textual.color import Color, ColorParseError
from textual.dom import DOMNode

Palette = Mapping[str, str]    # theme variable name -> a Rich colour ("" for the terminal's own)

# The theme variables state colours use, and what Rich text built without an app shows for each (tests,
# anything rendered outside the TUI): the fixed colours the TUI used before it followed the theme.
OFFLINE: Palette = {"foreground": "", "text-primary": "#4aa3ff", "text-secondary": "#3cc6c6",
                    "text-warning": "#ffb000", "text-muted": "#8a8a8a", "text-success": "#4ec94e",
                    "text-error": "#ff5f5f", "foreground-muted": "dim"}

_palettes: WeakKeyDictionary[App, tuple[str, Palette]] = WeakKeyDictionary()


def palette(app: App) -> Palette:
    """The current theme's colours for OFFLINE's variables, made opaque on the theme's surface."""
    cached = _palettes.get(app)
    if cached is None or cached[0] != app.theme:
        variables = app.get_css_variables()
        ground = Color.parse(variables["surface"])
        cached = app.theme, {name: _opaque(variables.get(name, ""), ground) for name in OFFLINE}
        _palettes[app] = cached
    return cached[1]


def _opaque(value: str, ground: Color) -> str:
    """Rich has no alpha: "auto 60%" or "#e0e0e099" become the colour they show on `ground`; an ANSI
    theme's "ansi_default" becomes the terminal's own colour."""
    try:
        if value.startswith("auto"):
            alpha = value.partition(" ")[2].rstrip("%")
            colour = ground.get_contrast_text(float(alpha) / 100 if alpha else 1.0)
        else:
            colour = Color.parse(value)
    except (ColorParseError, ValueError):
        return ""
    return "" if colour.ansi is not None else (ground + colour).hex


def style(colours: Palette, tone: str, bold: bool = False) -> str:
    """A Rich style in the colour of the theme variable `tone`."""
    return " ".join(part for part in ("bold" if bold else "", colours.get(tone, "")) if part)


def follow_theme(node: DOMNode, repaint: Callable[[], object]) -> None:
    """Call `repaint` whenever the app's theme changes (from `node`'s on_mount); what it returns is dropped."""
    def changed(_theme: str) -> None:
        repaint()
    node.watch(node.app, "theme", changed, init=False)
