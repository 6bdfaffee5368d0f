"""Saved filters: a name for the words of a filter (tui_agent/filters.py), kept in the database so that every
TUI on it offers them in its palette and `filter ls` lists them. The words are kept as given and read again at
each use, so an age in them (`since:3d`) stays relative."""

from __future__ import annotations

from .base import Store, decoding


def save(store: Store, name: str, words: str, now: float) -> bool:
    """Keep `words` under `name`; True when it replaced the words that name had."""
    with store.write() as conn:
        replaced = conn.execute("UPDATE saved_filters SET words = ? WHERE name = ?", (words, name)).rowcount == 1
        if not replaced:
            conn.execute("INSERT INTO saved_filters (name, words, created_at) VALUES (?, ?, ?)", (name, words, now))
    return replaced


def forget(store: Store, name: str) -> bool:
    """Remove the filter named `name`; False when there was none."""
    with store.write() as conn:
        return conn.execute("DELETE FROM saved_filters WHERE name = ?", (name,)).rowcount == 1


def listing(store: Store) -> list[dict]:
    """Every saved filter ({name, words, created_at}), by name."""
    with decoding("saved_filters"):
        return list(store.query("SELECT name, words, created_at FROM saved_filters ORDER BY name"))
