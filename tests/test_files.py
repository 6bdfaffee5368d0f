"""write_atomic: a file written whole or not at all, its mode kept, a new file created the same way."""

import pytest

from tui_agent.agents.files import write_atomic
from tui_agent.runtime import faults
from tui_agent.runtime.faults import SimulatedCrash


def test_an_existing_file_keeps_its_mode_and_a_new_one_is_created_whole(tmp_path):
    script = tmp_path / "run.sh"
    script.write_text("old\n")
    script.chmod(0o755)
    write_atomic(script, b"new\n")
    assert script.read_bytes() == b"new\n" and script.stat().st_mode & 0o777 == 0o755
    fresh = tmp_path / "fresh.py"
    write_atomic(fresh, b"x = 1\n")
    assert fresh.read_bytes() == b"x = 1\n" and fresh.stat().st_mode & 0o777 == 0o644
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fresh.py", "run.sh"]


def test_a_crash_before_the_rename_leaves_no_new_file(tmp_path):
    fresh = tmp_path / "fresh.py"
    faults.arm("mid-write")
    try:
        with pytest.raises(SimulatedCrash):
            write_atomic(fresh, b"x = 1\n")
    finally:
        faults.disarm()
    assert list(tmp_path.iterdir()) == []      # in-process the copy is removed on the way out


def test_a_copy_a_kill_left_behind_is_removed_by_the_next_write(tmp_path):
    target = tmp_path / "mod.py"
    target.write_text("old\n")
    (tmp_path / ".mod.py.tui-agent.tmp").write_text("a longer half-written copy")   # what kill -9 leaves
    (tmp_path / ".other.py.tui-agent.tmp").write_text("x")    # another file's: not ours to touch
    write_atomic(target, b"new\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == [".other.py.tui-agent.tmp", "mod.py"]
    assert target.read_bytes() == b"new\n"      # the stale copy was truncated, not appended to
