"""Wide signatures are keyword-only: a function of more than five parameters takes at most two by position.

`self` and `cls` do not count, nor `*args` and `**kwargs`. The public constructors `Agent`, `Budget`,
`RetryPolicy` and `Plateau` are dataclasses, whose generated `__init__` this check does not read, so they keep
their positional fields. `POSITIONAL_ON_PURPOSE` names the functions that keep wide positional signatures, each
with its reason.
"""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent.parent / "tui_agent"
MOST = 5         # parameters a function may take with no keyword-only ones
POSITIONAL = 2   # what a wider one may take by position

POSITIONAL_ON_PURPOSE = {
    # ctx.run_command journals a step whose function this is and whose arguments are this tuple, digested as it is
    # by agents with `journal_inputs`: by keyword, every run recorded before would diverge on replay.
    "context.run_program",
}


def too_wide(source: str, module: str) -> list[str]:
    """The functions in `source` (as `module.Qualified.name`) with more than MOST parameters and more than
    POSITIONAL of them positional."""
    found = []

    def visit(node: ast.AST, prefix: str, in_class: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                args = child.args
                positional = args.posonlyargs + args.args
                if in_class and positional and positional[0].arg in ("self", "cls"):
                    positional = positional[1:]
                if len(positional) + len(args.kwonlyargs) > MOST and len(positional) > POSITIONAL:
                    found.append(f"{prefix}{child.name}")
                visit(child, f"{prefix}{child.name}.", False)
            elif isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.", True)
            else:
                visit(child, prefix, in_class)

    visit(ast.parse(source), f"{module}.", False)
    return found


def package_too_wide() -> set[str]:
    return {name for path in PACKAGE.rglob("*.py") for name in too_wide(path.read_text(), path.stem)}


def test_every_wide_signature_is_keyword_only_past_its_first_two():
    assert sorted(package_too_wide() - POSITIONAL_ON_PURPOSE) == []


def test_each_function_kept_positional_on_purpose_is_still_wide():
    assert sorted(POSITIONAL_ON_PURPOSE - package_too_wide()) == []


def test_the_checker_finds_a_planted_wide_signature_and_passes_a_keyword_only_one(tmp_path):
    planted = tmp_path / "planted.py"
    planted.write_text(
        "def wide(a, b, c, d, e, f):\n    pass\n\n"
        "def keyed(a, b, *, c, d, e, f):\n    pass\n\n"
        "def narrow(a, b, c, d, e):\n    pass\n\n"
        "class Holder:\n"
        "    def method(self, a, b, *, c, d, e):\n        pass\n\n"
        "    def wide_method(self, a, b, c, d, e, f):\n        def inner(a, b, c, *, d, e, f):\n            pass\n")
    assert too_wide(planted.read_text(), planted.stem) == [
        "planted.wide", "planted.Holder.wide_method", "planted.Holder.wide_method.inner"]
