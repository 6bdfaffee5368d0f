"""The text engine of refactor-imports: rewrite every import of module OLD to NEW in one file's bytes.

Nothing else changes, byte for byte (encoding, BOM, line endings, comments and formatting all kept), for
Python (.py .pyi) and JavaScript / TypeScript (.js .jsx .mjs .cjs .ts .tsx). `rewrite` says exactly which
imports are rewritten and which are left alone. Why: docs/coding-agents.md, "refactor-imports"."""

from __future__ import annotations

import ast
import difflib
import re
import tokenize
import unicodedata
from dataclasses import dataclass
from pathlib import Path

EXTENSIONS = {".py": "python", ".pyi": "python", ".js": "js", ".jsx": "js", ".mjs": "js", ".cjs": "js",
              ".ts": "js", ".tsx": "js"}

BOM = b"\xef\xbb\xbf"


class Unworkable(Exception):
    """The file cannot be handled; str(e) says why in one line."""


@dataclass(frozen=True)
class Rewrite:
    data: bytes     # the new file content (the input itself when nothing changed)
    changes: int    # how many import specifiers were rewritten (0: nothing to do, the file is already done)
    diff: str       # a unified diff of the change (a/<path>, b/<path>, 3 lines of context); "" when no changes


def language(path: str | Path) -> str | None:
    """"python", "js" (JavaScript and TypeScript) or None, by the file's extension."""
    return EXTENSIONS.get(Path(path).suffix)


def mentions(data: bytes, old: str) -> bool:
    """The cheap first filter: could this file import `old` at all. True when the text holds `old` (or, for a
    dotted name, each of its parts: `import pkg . utils` is legal Python). False positives are fine."""
    if old.encode("utf-8") in data:
        return True
    parts = [part.strip() for part in old.split(".")]
    return len(parts) > 1 and all(part and part.encode("utf-8") in data for part in parts)


def rewrite(data: bytes, path: str, old: str, new: str) -> Rewrite:
    """`data`, the content of the file at `path`, with every import of `old` rewritten to import `new`.

    `path` says the language. Raises Unworkable when the file is not UTF-8, not a known language, a Python file
    that does not parse (before or after the edit), or when the edit could not be exact or idempotent.

    Python, found with `tokenize`, so never inside strings, comments or docstrings:
      `import OLD`, `import OLD.sub as x`, `import os, OLD` (each name of the list) and `from OLD[.sub] import ...`
      at the start of any logical line (after `;` or `:` too, in any block). The match is on whole dotted parts:
      `import OLDER`, `from OLDX import y`, `from pkg import OLD` (a name, not the module path) and relative
      imports (`from .OLD import a`: a sibling module) are left alone. Only OLD's part of the dotted name is
      replaced: `import OLD . sub` becomes `import NEW . sub`. The file must parse before the edit and after it,
      and the edited file's syntax tree must be the old one with exactly those module names swapped.
      Not rewritten: `__import__("OLD")`, `importlib.import_module("OLD")`, strings naming OLD (mock.patch
      targets, entry points), and the uses of the name a bare `import OLD` binds (`OLD.f()` stays as it is).

    JavaScript / TypeScript, found with a small scanner that skips comments, string and template literals (and,
    roughly, regex literals): the string that is the specifier of `import ... from`, `export ... from`, a
    side-effect `import '...'`, `require('...')` or `import('...')`, when it equals OLD or starts with OLD + "/".
    The quote style is kept. Not rewritten: template literals, `jest.mock('OLD')`, `require.resolve('OLD')`,
    `declare module 'OLD'`, triple-slash references. There is no JS parser here: JSX text holding a quote or
    `//` can hide an import on the same line from the scanner (never one on another line, except behind a
    backtick or `/*` in JSX text).

    Every rewrite is idempotent: a file rewritten once has nothing left to rewrite. When NEW is such that a
    rewritten specifier would import OLD again (NEW inside OLD, as `a` -> `a.b`), the file is Unworkable."""
    if not old or not new:
        raise ValueError("old and new module names must not be empty")
    lang = language(path)
    if lang is None:
        raise Unworkable(f"not a Python or JavaScript/TypeScript file (extension {Path(path).suffix!r})")
    bom = BOM if data.startswith(BOM) else b""
    try:
        text = data[len(bom):].decode("utf-8")
    except UnicodeDecodeError as e:
        offset = e.start + len(bom)
        raise Unworkable(f"not UTF-8 (byte 0x{data[offset]:02x} at offset {offset})") from None
    if old == new:
        return Rewrite(data, 0, "")
    if lang == "python":
        edits = _python_edits(text, path, old, new)
    else:
        edits = _js_edits(text, old, new)
    if not edits:
        return Rewrite(data, 0, "")
    edited = _apply(text, edits)
    if lang == "python":
        _check_python(text, edited, path, old, new)
    return Rewrite(bom + edited.encode("utf-8"), len(edits), _diff(text, edited, path))


# --- shared -----------------------------------------------------------------------------------------------

_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+\Z")


def _lines(text: str) -> list[str]:
    """The lines of `text` with their endings, split on \\r\\n, \\r and \\n only (a form feed is no line end)."""
    return _LINE.findall(text)


def _apply(text: str, edits: list[tuple[int, int, str]]) -> str:
    pieces, at = [], 0
    for start, end, replacement in sorted(edits):
        pieces += [text[at:start], replacement]
        at = end
    pieces.append(text[at:])
    return "".join(pieces)


def _diff(before: str, after: str, path: str) -> str:
    out = []
    for line in difflib.unified_diff(_lines(before), _lines(after), f"a/{path}", f"b/{path}", n=3):
        out.append(line if line.endswith(("\n", "\r")) else line + "\n\\ No newline at end of file\n")
    return "".join(out)


# --- Python -----------------------------------------------------------------------------------------------

def _nfkc(name: str) -> str:
    return unicodedata.normalize("NFKC", name)   # what the parser makes of an identifier


def _parse(text: str, path: str) -> ast.Module:
    tree = compile(text, path, "exec", ast.PyCF_ONLY_AST, dont_inherit=True)
    assert isinstance(tree, ast.Module)   # what "exec" with PyCF_ONLY_AST makes
    return tree


def _syntax(e: Exception) -> str:
    if isinstance(e, SyntaxError) and e.lineno is not None:
        return f"line {e.lineno}: {e.msg}"
    return e.msg if isinstance(e, SyntaxError) else str(e)   # e.g. null bytes, which have no line


def _python_edits(text: str, path: str, old: str, new: str) -> list[tuple[int, int, str]]:
    try:
        _parse(text, path)
    except (SyntaxError, ValueError) as e:
        raise Unworkable(f"does not parse: {_syntax(e)}") from None
    old_parts = [_nfkc(part) for part in old.split(".")]
    new_parts = new.split(".")
    lines = _lines(text)
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line))
    # A lone \r ends a line for the parser; give tokenize a \n there (same length: offsets stay the same).
    feed = iter(re.sub(r"\r(?!\n)", "\n", line) for line in lines)
    try:
        tokens = [t for t in tokenize.generate_tokens(lambda: next(feed, ""))
                  if t.type not in (tokenize.NL, tokenize.COMMENT)]
    except (tokenize.TokenError, SyntaxError) as e:
        raise Unworkable(f"could not tokenize: {_syntax(e) if isinstance(e, SyntaxError) else e.args[0]}") \
            from None

    def offset(position: tuple[int, int]) -> int:
        return starts[position[0] - 1] + position[1]

    def dotted(j: int) -> tuple[list[tokenize.TokenInfo], int]:
        """The NAME tokens of the dotted name starting at tokens[j], and the index just after it."""
        names: list[tokenize.TokenInfo] = []
        if j < len(tokens) and tokens[j].type == tokenize.NAME:
            names.append(tokens[j])
            j += 1
            while (j + 1 < len(tokens) and tokens[j].type == tokenize.OP and tokens[j].string == "."
                   and tokens[j + 1].type == tokenize.NAME):
                names.append(tokens[j + 1])
                j += 2
        return names, j

    edits: list[tuple[int, int, str]] = []

    def consider(names: list[tokenize.TokenInfo]) -> None:
        k = len(old_parts)
        if len(names) < k or [_nfkc(t.string) for t in names[:k]] != old_parts:
            return
        result = new_parts + [t.string for t in names[k:]]
        if [_nfkc(part) for part in result[:k]] == old_parts:
            raise Unworkable(f"{'.'.join(t.string for t in names)} would become {'.'.join(result)}, which still "
                             f"imports {old}: the rewrite would never be done")
        start, end = offset(names[0].start), offset(names[k - 1].end)
        if text[start:start + len(names[0].string)] != names[0].string:
            raise Unworkable(f"line {names[0].start[0]}: token positions do not match the text")
        edits.append((start, end, new))

    depth, at_start = 0, True
    for i, t in enumerate(tokens):
        if at_start and t.type == tokenize.NAME and t.string == "import":
            j = i + 1
            while True:
                names, j = dotted(j)
                if not names:
                    break
                consider(names)
                if j + 1 < len(tokens) and tokens[j].type == tokenize.NAME and tokens[j].string == "as":
                    j += 2
                if j < len(tokens) and tokens[j].type == tokenize.OP and tokens[j].string == ",":
                    j += 1
                    continue
                break
        elif at_start and t.type == tokenize.NAME and t.string == "from":
            names, j = dotted(i + 1)   # a relative import starts with "." or "...": no NAME, no names
            if names and j < len(tokens) and tokens[j].type == tokenize.NAME and tokens[j].string == "import":
                consider(names)
        at_start = False
        if t.type in (tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT):
            at_start = True
        elif t.type == tokenize.OP:
            if t.string in ("(", "[", "{"):
                depth += 1
            elif t.string in (")", "]", "}"):
                depth = max(0, depth - 1)
            elif t.string == ";" or (t.string == ":" and depth == 0):
                at_start = True   # `a; import OLD`, `if TYPE_CHECKING: import OLD`
    return edits


class _Swap(ast.NodeTransformer):
    """The syntax tree the edit should give: the old one with the module names swapped."""

    def __init__(self, old: str, new: str):
        self.old_parts = [_nfkc(p) for p in old.split(".")]
        self.new = _nfkc(new)

    def swap(self, name: str) -> str:
        parts = name.split(".")
        k = len(self.old_parts)
        if parts[:k] == self.old_parts:
            return ".".join([self.new, *parts[k:]])
        return name

    def visit_Import(self, node: ast.Import) -> ast.Import:
        for alias in node.names:
            alias.name = self.swap(alias.name)
        return node

    def visit_ImportFrom(self, node: ast.ImportFrom) -> ast.ImportFrom:
        if node.level == 0 and node.module:
            node.module = self.swap(node.module)
        return node


def _check_python(before: str, after: str, path: str, old: str, new: str) -> None:
    try:
        tree = _parse(after, path)
    except (SyntaxError, ValueError) as e:
        raise Unworkable(f"would not parse after the edit: {_syntax(e)}") from None
    expected = _Swap(old, new).visit(_parse(before, path))
    if ast.dump(expected) != ast.dump(tree):
        raise Unworkable(f"the edit would change more than the names of imported modules "
                         f"(is {new!r} a Python module name?)")


# --- JavaScript / TypeScript ------------------------------------------------------------------------------

# After these words an expression starts, so a "/" opens a regex literal.
_BEFORE_EXPRESSION = {"return", "typeof", "instanceof", "in", "of", "new", "delete", "void", "throw", "case",
                      "do", "else", "yield", "await", "extends"}
_SPACE = " \t\r\n\f\v\u00a0\ufeff\u2028\u2029"


@dataclass
class _Token:
    kind: str    # "id" (names and keywords), "num", "str", "tmpl", "regex", "punct"
    value: str   # for "str": the text between the quotes
    start: int
    end: int
    closed: bool = True   # a string ended by its quote on the same line
    condition: bool = False   # a ")" closing `if (`, `while (`, `for (`, `with (`: a regex may follow it


def _js_tokens(text: str) -> list[_Token]:
    """The code tokens of `text`, comments and whitespace left out, each template literal one token."""
    tokens: list[_Token] = []
    n = len(text)
    interpolations: list[int] = []   # for each open `${`: how many `{` are open inside it
    parens: list[bool] = []   # for each open "(": whether it follows if, while, for or with
    i = 0
    if text.startswith("#!"):
        i = _line_end(text, 0)

    def template(j: int, start: int) -> int:
        """Scan a template literal's text from j; return where the code resumes (after ` or after ${)."""
        while j < n:
            ch = text[j]
            if ch == "\\":
                j += 2
            elif ch == "`":
                tokens.append(_Token("tmpl", "", start, j + 1))
                return j + 1
            elif ch == "$" and text.startswith("{", j + 1):
                interpolations.append(0)
                tokens.append(_Token("punct", "${", j, j + 2))
                return j + 2
            else:
                j += 1
        tokens.append(_Token("tmpl", "", start, n))
        return n

    while i < n:
        c = text[i]
        if c in _SPACE:
            i += 1
        elif text.startswith("//", i):
            i = _line_end(text, i)
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            i = n if end < 0 else end + 2
        elif c in "'\"":
            j = i + 1
            while j < n and text[j] != c and text[j] not in "\r\n":
                j += 2 if text[j] == "\\" else 1
            closed = j < n and text[j] == c
            tokens.append(_Token("str", text[i + 1:j], i, j + 1 if closed else j, closed))
            i = j + 1 if closed else j
        elif c == "`":
            i = template(i + 1, i)
        elif c == "}" and interpolations and interpolations[-1] == 0:
            interpolations.pop()
            i = template(i + 1, i)
        elif c == "/" and _regex_may_start(tokens) and (regex_end := _regex_end(text, i)) is not None:
            tokens.append(_Token("regex", text[i:regex_end], i, regex_end))
            i = regex_end
        elif c.isalpha() or c in "_$":
            j = i + 1
            while j < n and (text[j].isalnum() or text[j] in "_$\u200c\u200d"):
                j += 1
            tokens.append(_Token("id", text[i:j], i, j))
            i = j
        elif c.isdigit() or (c == "." and i + 1 < n and text[i + 1].isdigit()):
            j = i + 1
            while j < n and (text[j].isalnum() or text[j] in "._"):
                j += 1
            tokens.append(_Token("num", text[i:j], i, j))
            i = j
        else:
            token = _Token("punct", c, i, i + 1)
            if interpolations and c == "{":
                interpolations[-1] += 1
            elif interpolations and c == "}":
                interpolations[-1] -= 1
            elif c == "(":
                parens.append(bool(tokens) and _is(tokens[-1], "id", "if", "while", "for", "with"))
            elif c == ")" and parens:
                token.condition = parens.pop()
            tokens.append(token)
            i += 1
    return tokens


_LINE_END = re.compile("[\r\n\u2028\u2029]")


def _line_end(text: str, i: int) -> int:
    match = _LINE_END.search(text, i)
    return match.start() if match else len(text)


def _regex_may_start(tokens: list[_Token]) -> bool:
    if not tokens:
        return True
    last = tokens[-1]
    if last.kind == "punct":
        return last.value not in ")]}" or last.condition
    return last.kind == "id" and last.value in _BEFORE_EXPRESSION


def _regex_end(text: str, i: int) -> int | None:
    """The end of the regex literal starting with the "/" at i, or None when none ends on this line."""
    j, in_class, n = i + 1, False, len(text)
    while j < n:
        ch = text[j]
        if ch in "\r\n\u2028\u2029":
            return None
        if ch == "\\":
            j += 2
            continue
        if ch == "[":
            in_class = True
        elif ch == "]":
            in_class = False
        elif ch == "/" and not in_class:
            j += 1
            while j < n and (text[j].isalnum() or text[j] in "_$"):
                j += 1
            return j
        j += 1
    return None


def _is(token: _Token | None, kind: str, *values: str) -> bool:
    return token is not None and token.kind == kind and (not values or token.value in values)


def _is_specifier(tokens: list[_Token], k: int) -> bool:
    """Whether the string tokens[k] is the module specifier of an import, export-from, require or import()."""
    def at(j: int) -> _Token | None:
        return tokens[j] if 0 <= j < len(tokens) else None

    before, before2, before3, after = at(k - 1), at(k - 2), at(k - 3), at(k + 1)
    if _is(before, "id", "from"):   # import x from '..', import {a} from, import * as m from, export * from
        return _is(before2, "id") or _is(before2, "punct", "}", "*")
    if _is(before, "id", "import"):   # import '..' (side effect), not x.import '..'
        return not _is(before2, "punct", ".")
    if _is(before, "punct", "(") and _is(before2, "id", "require", "import"):   # require('..'), import('..')
        return not _is(before3, "punct", ".") and _is(after, "punct", ")", ",")
    return False


def _js_edits(text: str, old: str, new: str) -> list[tuple[int, int, str]]:
    edits = []
    tokens = _js_tokens(text)
    for k, token in enumerate(tokens):
        if token.kind != "str" or not token.closed:
            continue
        if not (token.value == old or token.value.startswith(old + "/")) or not _is_specifier(tokens, k):
            continue
        quote = text[token.start]
        if any(ch in new for ch in (quote, "\\", "\r", "\n", "\u2028", "\u2029")):
            raise Unworkable(f"the new name {new!r} cannot be written between {quote} quotes as it is")
        result = new + token.value[len(old):]
        if result == old or result.startswith(old + "/"):
            raise Unworkable(f"{token.value} would become {result}, which still imports {old}: "
                             "the rewrite would never be done")
        edits.append((token.start + 1, token.start + 1 + len(old), new))
    return edits
