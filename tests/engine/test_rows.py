"""store/rows.py's TypedDicts name the columns their reads return, no more and no fewer."""

import pytest

from tui_agent.store import open_store, rows


@pytest.mark.parametrize("table, row", [("runs", rows.RunRow), ("checkpoints", rows.CheckpointRow),
                                        ("effects", rows.EffectRow), ("journal", rows.JournalRow)])
def test_each_row_type_has_its_tables_columns(db_path, table, row):
    store = open_store(db_path)
    try:
        columns = [c[1] for c in store.conn.execute(f"PRAGMA table_info({table})")]
    finally:
        store.close()
    assert list(row.__annotations__) == columns


def test_a_model_call_row_names_columns_of_model_calls(db_path):
    store = open_store(db_path)
    try:
        columns = {c[1] for c in store.conn.execute("PRAGMA table_info(model_calls)")}
    finally:
        store.close()
    assert set(rows.ModelCallRow.__annotations__) <= columns
