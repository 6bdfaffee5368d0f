"""write_atomic: a file written whole or not at all, its mode kept, a new file created the same way; a link is
never read, written through or replaced, a FIFO never opened."""

import os

import pytest

from tui_agent.agents.files import NotRegular, read_regular, walked, write_atomic
from tui_agent.runtime import faults
from tui_agent.runtime.faults import SimulatedCrash


def test_an_existing_file_keeps_its_mode_and_a_new_one_is_created_whole(tmp_path):
    script = tmp_path / "run.sh"
    script.write_text("old\n")
    script.chmod(0o755)
    write_atomic(tmp_path, "run.sh", b"new\n")
    assert script.read_bytes() == b"new\n" and script.stat().st_mode & 0o777 == 0o755
    fresh = tmp_path / "fresh.py"
    write_atomic(tmp_path, "fresh.py", b"x = 1\n")
    assert fresh.read_bytes() == b"x = 1\n" and fresh.stat().st_mode & 0o777 == 0o644
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fresh.py", "run.sh"]


def test_a_crash_before_the_rename_leaves_no_new_file(tmp_path):
    faults.arm("mid-write")
    try:
        with pytest.raises(SimulatedCrash):
            write_atomic(tmp_path, "fresh.py", b"x = 1\n")
    finally:
        faults.disarm()
    assert list(tmp_path.iterdir()) == []      # in-process the copy is removed on the way out


def test_a_copy_a_kill_left_behind_is_removed_by_the_next_write(tmp_path):
    target = tmp_path / "mod.py"
    target.write_text("old\n")
    (tmp_path / ".mod.py.tui-agent.tmp").write_text("a longer half-written copy")   # what kill -9 leaves
    (tmp_path / ".other.py.tui-agent.tmp").write_text("x")    # another file's: not ours to touch
    write_atomic(tmp_path, "mod.py", b"new\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == [".other.py.tui-agent.tmp", "mod.py"]
    assert target.read_bytes() == b"new\n"      # the stale copy was made anew, not appended to


def test_a_link_is_never_read_written_through_or_replaced_and_a_fifo_never_opened(tmp_path):
    outside = tmp_path / "outside.py"
    outside.write_text("kept\n")
    tree = tmp_path / "tree"
    (tree / "pkg").mkdir(parents=True)
    (tree / "pkg" / "link.py").symlink_to(outside)
    (tree / "linked").symlink_to(tmp_path)
    os.mkfifo(tree / "pkg" / "pipe.py")
    for name, said in [("pkg/link.py", "pkg/link.py is a symbolic link to"), ("linked/outside.py", "not a folder"),
                       ("pkg/pipe.py", "pkg/pipe.py is a FIFO")]:
        with pytest.raises(NotRegular, match=said):
            read_regular(tree, name)
        with pytest.raises(NotRegular, match=said):
            write_atomic(tree, name, b"new\n", make_folders=True)
    assert outside.read_text() == "kept\n" and os.readlink(tree / "pkg" / "link.py") == str(outside)
    (tree / "pkg" / ".mod.py.tui-agent.tmp").symlink_to(outside)   # planted where the temporary copy goes
    write_atomic(tree, "pkg/mod.py", b"new\n")
    assert outside.read_text() == "kept\n" and (tree / "pkg" / "mod.py").read_bytes() == b"new\n"
    assert read_regular(tree, "pkg/mod.py") == b"new\n"
    files, others = walked(tree)
    assert files == ["pkg/mod.py"]
    assert others == {"pkg/link.py": f"a symbolic link to {outside}", "linked": f"a symbolic link to {tmp_path}",
                      "pkg/pipe.py": "a FIFO"}
    with pytest.raises(ValueError, match="outside the tree"):
        read_regular(tree, "../outside.py")
