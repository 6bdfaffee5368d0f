"""DESIGN.md's layering rule: the engine never imports textual."""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "tui_agent"
ENGINE = ["runtime", "store", "models", "agents", "sim", "operate.py"]


def _engine_files():
    for part in ENGINE:
        path = PACKAGE / part
        if path.is_dir():
            yield from sorted(path.rglob("*.py"))
        elif path.exists():
            yield path


def _imports(path: Path):
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module


def test_engine_modules_never_import_textual():
    files = list(_engine_files())
    assert any(f.name == "operate.py" for f in files) and any("store" in f.parts for f in files)
    offenders = [f"{f.relative_to(PACKAGE)}: {name}" for f in files for name in _imports(f)
                 if name == "textual" or name.startswith("textual.")]
    assert offenders == []


def test_the_checker_sees_a_textual_import(tmp_path):
    sample = tmp_path / "bad.py"
    sample.write_text("import os\nfrom textual.app import App\n")
    assert "textual.app" in list(_imports(sample))
