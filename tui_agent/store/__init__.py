"""SQLite schema, migrations and queries; nothing above SQL lives here."""

from .db import Store, StoreError, data_dir_for, default_path, open_store
from .environment import EnvironmentStop
from .runs import Claim, FenceRefused, RunNotFound

__all__ = ["Claim", "EnvironmentStop", "FenceRefused", "RunNotFound", "Store", "StoreError", "data_dir_for", "default_path",
           "open_store"]
