"""Schema, migrations and queries, for SQLite (db.py) and PostgreSQL (postgres.py); nothing above SQL lives
here, and nothing above it asks which database serves it."""

from .base import DatabaseError, FenceRefused, Store, StoreError
from .db import data_dir_for, default_path, open_store
from .environment import EnvironmentStop
from .runs import Claim, RunNotFound

__all__ = ["Claim", "DatabaseError", "EnvironmentStop", "FenceRefused", "RunNotFound", "Store", "StoreError",
           "data_dir_for", "default_path", "open_store"]
