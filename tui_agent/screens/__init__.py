"""Screens, one module each; they read through store queries and act through operate.py."""
