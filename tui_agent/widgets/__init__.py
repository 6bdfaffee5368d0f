"""Widgets, one module per family."""
