"""The text engine of refactor-imports: every import form rewritten exactly, everything else byte for byte
as it was, Python files that would not parse refused, and a second pass never finding anything to do."""

import random
from pathlib import Path

import pytest

from tui_agent.agents.imports_rewrite import (
    EXTENSIONS,
    Rewrite,
    Unworkable,
    language,
    mentions,
    rewrite,
)


def py(text: str, old: str = "OLD", new: str = "NEW", path: str = "m.py") -> Rewrite:
    return rewrite(text.encode(), path, old, new)


def js(text: str, old: str = "OLD", new: str = "NEW", path: str = "m.ts") -> Rewrite:
    return rewrite(text.encode(), path, old, new)


# --- language and mentions ----------------------------------------------------------------------------------

def test_language_by_extension():
    assert language("a/b.py") == "python"
    assert language(Path("stubs/x.pyi")) == "python"
    for ext in (".js", ".jsx", ".mjs", ".cjs", ".ts", ".tsx"):
        assert language(f"src/c{ext}") == "js"
    assert language("types.d.ts") == "js"
    assert language("README.md") is None
    assert language("Makefile") is None
    assert set(EXTENSIONS) == {".py", ".pyi", ".js", ".jsx", ".mjs", ".cjs", ".ts", ".tsx"}


def test_mentions():
    assert mentions(b"from acme_old import x\n", "acme_old")
    assert mentions(b"# acme_old\n", "acme_old")                     # a cheap filter: comments count
    assert not mentions(b"import acme\nimport old\n", "acme_old")
    assert mentions(b'import { cn } from "@/utils/cn"', "@/utils/cn")
    assert not mentions(b'import { cn } from "@/lib/cn"', "@/utils/cn")
    assert mentions(b"import pkg . utils\n", "pkg.utils")              # legal Python, so not filtered out
    assert not mentions(b"import pkg\n", "pkg.utils")
    assert mentions("x = 'caf\u00e9'\n".encode(), "caf\u00e9")


def test_unknown_extension_is_unworkable():
    with pytest.raises(Unworkable, match="not a Python or JavaScript"):
        rewrite(b"import OLD\n", "notes.txt", "OLD", "NEW")


# --- Python: what is rewritten --------------------------------------------------------------------------------

PY_REWRITTEN = [
    ("import OLD\n", "import NEW\n", 1),
    ("import OLD.sub\n", "import NEW.sub\n", 1),
    ("import OLD.sub as x\n", "import NEW.sub as x\n", 1),
    ("import OLD as o\n", "import NEW as o\n", 1),
    ("import os, OLD, OLD.sub as y\n", "import os, NEW, NEW.sub as y\n", 2),
    ("import OLD.a as p, sys, OLD\n", "import NEW.a as p, sys, NEW\n", 2),
    ("from OLD import a, b\n", "from NEW import a, b\n", 1),
    ("from OLD.sub import (a,\n b)\n", "from NEW.sub import (a,\n b)\n", 1),
    ("from OLD.sub.deep import *\n", "from NEW.sub.deep import *\n", 1),
    ("from OLD import OLD\n", "from NEW import OLD\n", 1),                 # the imported name stays
    ("import  OLD . sub\n", "import  NEW . sub\n", 1),
    ("from   OLD  .  sub   import x\n", "from   NEW  .  sub   import x\n", 1),
    ("from \\\n    OLD import a\n", "from \\\n    NEW import a\n", 1),
    ("import os; import OLD\n", "import os; import NEW\n", 1),
    ("x = 1; from OLD import y; import OLD.z\n", "x = 1; from NEW import y; import NEW.z\n", 2),
    ("import OLD  # import OLD\n", "import NEW  # import OLD\n", 1),
    ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from OLD import T\n",
     "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from NEW import T\n", 1),
    ("if True: import OLD\n", "if True: import NEW\n", 1),
    ("try:\n    import OLD\nexcept ImportError:\n    OLD = None\nelse: from OLD import x\n",
     "try:\n    import NEW\nexcept ImportError:\n    OLD = None\nelse: from NEW import x\n", 2),
    ("def f():\n    class A:\n        import OLD.sub as s\n    return A\n",
     "def f():\n    class A:\n        import NEW.sub as s\n    return A\n", 1),
    ("async def f():\n    import OLD\n    return [x async for x in g()]\n",
     "async def f():\n    import NEW\n    return [x async for x in g()]\n", 1),
    ("match x:\n    case 1: import OLD\n", "match x:\n    case 1: import NEW\n", 1),
    ("from __future__ import annotations\nimport OLD", "from __future__ import annotations\nimport NEW", 1),
]


@pytest.mark.parametrize("before,after,count", PY_REWRITTEN)
def test_python_forms_rewritten(before, after, count):
    done = py(before)
    assert done.data.decode() == after
    assert done.changes == count
    again = rewrite(done.data, "m.py", "OLD", "NEW")
    assert again.changes == 0 and again.data == done.data and again.diff == ""


PY_LEFT_ALONE = [
    "import OLDER\n",
    "import OLD_x\n",
    "from OLDX import y\n",
    "import xOLD\n",
    "import x.OLD\n",
    "from x.OLD import y\n",
    "from .OLD import a\n",
    "from ..OLD.sub import a\n",
    "from ...OLD import a\n",
    "from . import OLD\n",
    "from pkg import OLD\n",
    "from pkg import (OLD,\n    OLD_x)\n",
    "import os as OLD\n",
    "# import OLD\n",
    "x = 'import OLD'\n",
    'x = "from OLD import a"\n',
    '"""Docstring.\n\nimport OLD\nfrom OLD import a\n"""\n',
    "def f():\n    '''\n    import OLD\n    '''\n",
    "x = f'{1}import OLD'\n",
    "m = __import__('OLD')\n",
    "import importlib\nm = importlib.import_module('OLD')\n",
    "OLD = 1\nprint(OLD)\n",
    "x = (yield_ for yield_ in OLD)\n",
    "def g():\n    yield from OLD\n",
    "try:\n    pass\nexcept E as e:\n    raise OLD from e\n",
    "patch('OLD.thing')\n",
]


@pytest.mark.parametrize("text", PY_LEFT_ALONE)
def test_python_left_alone(text):
    data = text.encode()
    done = rewrite(data, "m.py", "OLD", "NEW")
    assert done == Rewrite(data, 0, "")


# --- Python: a dotted OLD -------------------------------------------------------------------------------------

def test_python_dotted_old():
    before = ("import pkg.utils\n"
              "import pkg.utils.x\n"
              "import pkg . utils . y as why\n"
              "from pkg.utils import a\n"
              "from pkg.utils.deep import b\n"
              "from pkg import utils\n"
              "import pkg\n"
              "import pkg.utilsx\n"
              "from pkg.util import c\n"
              "import pkg.other.utils\n")
    after = ("import pkg.helpers\n"
             "import pkg.helpers.x\n"
             "import pkg.helpers . y as why\n"
             "from pkg.helpers import a\n"
             "from pkg.helpers.deep import b\n"
             "from pkg import utils\n"
             "import pkg\n"
             "import pkg.utilsx\n"
             "from pkg.util import c\n"
             "import pkg.other.utils\n")
    done = py(before, "pkg.utils", "pkg.helpers")
    assert done.data.decode() == after
    assert done.changes == 5
    assert py(after, "pkg.utils", "pkg.helpers").changes == 0


def test_python_to_a_dotted_new_and_back():
    done = py("import OLD.sub\nfrom OLD import a\n", "OLD", "x.y.z")
    assert done.data == b"import x.y.z.sub\nfrom x.y.z import a\n"
    back = rewrite(done.data, "m.py", "x.y.z", "OLD")
    assert back.data == b"import OLD.sub\nfrom OLD import a\n" and back.changes == 2


def test_pyi_files_are_python():
    assert rewrite(b"from OLD import T as T\n", "stubs.pyi", "OLD", "NEW").data == b"from NEW import T as T\n"


# --- Python: bytes kept ---------------------------------------------------------------------------------------

def test_python_crlf_kept_byte_for_byte():
    data = b'"""Doc."""\r\nimport os\r\nfrom OLD import (\r\n    a,\r\n    b,\r\n)\r\nx = "OLD"\r\n'
    done = rewrite(data, "m.py", "OLD", "NEW")
    assert done.data == data.replace(b"from OLD", b"from NEW")
    assert done.changes == 1


def test_python_mixed_line_endings_kept():
    data = b"import os\r\nimport OLD\nimport sys\rfrom OLD.x import y\r\n# OLD\n\x0cimport OLD.z\n"
    done = rewrite(data, "m.py", "OLD", "NEW")
    assert done.data == b"import os\r\nimport NEW\nimport sys\rfrom NEW.x import y\r\n# OLD\n\x0cimport NEW.z\n"
    assert done.changes == 3


def test_python_bom_kept_and_non_ascii_untouched():
    data = "\ufeff# caf\u00e9 \u2014 OLD\nimport OLD  # \u00fc\ns = '\u65e5\u672c OLD'\n".encode()
    assert data.startswith(b"\xef\xbb\xbf")
    done = rewrite(data, "m.py", "OLD", "NEW")
    assert done.data == "\ufeff# caf\u00e9 \u2014 OLD\nimport NEW  # \u00fc\ns = '\u65e5\u672c OLD'\n".encode()


def test_python_no_final_newline_and_tabs_kept():
    data = b"if x:\n\timport OLD\n\tpass\t\nimport OLD"
    assert rewrite(data, "m.py", "OLD", "NEW").data == b"if x:\n\timport NEW\n\tpass\t\nimport NEW"


# --- Python: refusals -----------------------------------------------------------------------------------------

def test_not_utf8_is_unworkable():
    data = b"import OLD\nx = 'caf\xe9'\n"
    with pytest.raises(Unworkable) as e:
        rewrite(data, "m.py", "OLD", "NEW")
    assert str(e.value) == "not UTF-8 (byte 0xe9 at offset 19)"
    with pytest.raises(Unworkable, match=r"not UTF-8 \(byte 0xff at offset 5\)"):
        rewrite(b"\xef\xbb\xbfab\xff", "m.ts", "OLD", "NEW")   # the offset counts the BOM


@pytest.mark.parametrize("new", ["my-mod", "1b", "a b", "x.", "class"])
def test_edit_that_would_not_parse_is_unworkable(new):
    with pytest.raises(Unworkable) as e:
        py("import os\nimport OLD\n", new=new)
    assert str(e.value).startswith("would not parse after the edit: line 2: ")
    assert "\n" not in str(e.value)


def test_edit_that_parses_to_something_else_is_unworkable():
    with pytest.raises(Unworkable, match="would change more than the names of imported modules"):
        py("import OLD\n", new="a, b")


def test_file_that_did_not_parse_before_is_unworkable():
    with pytest.raises(Unworkable) as e:
        py("import OLD\ndef f(:\n    pass\n")
    assert str(e.value).startswith("does not parse: line 2: ")
    with pytest.raises(Unworkable, match="does not parse"):
        py("import OLD\nif x:\nimport y\n")
    with pytest.raises(Unworkable, match="does not parse"):    # even with nothing to rewrite
        py("x = (\n")
    with pytest.raises(Unworkable) as e:
        py("import OLD\x00\n")
    assert str(e.value).startswith("does not parse: ") and "null bytes" in str(e.value)


def test_rewrite_that_would_never_be_done_is_unworkable():
    with pytest.raises(Unworkable, match="still imports OLD"):
        py("import OLD\n", new="OLD.inner")
    with pytest.raises(Unworkable, match="still imports a.b"):
        py("import a.b.b\n", old="a.b", new="a")
    assert py("import a.b.c\n", old="a.b", new="a").data == b"import a.c\n"   # only where it would recur


def test_same_old_and_new_changes_nothing():
    assert py("import OLD\n", new="OLD") == Rewrite(b"import OLD\n", 0, "")


def test_nothing_to_do_returns_the_input():
    data = b"import os\n"
    done = rewrite(data, "m.py", "OLD", "NEW")
    assert done.data is data and done.changes == 0 and done.diff == ""


# --- JavaScript / TypeScript ----------------------------------------------------------------------------------

JS_REWRITTEN = [
    ("import x from 'OLD';\n", "import x from 'NEW';\n", 1),
    ('import {a} from "OLD/sub";\n', 'import {a} from "NEW/sub";\n', 1),
    ("import * as m from 'OLD'\n", "import * as m from 'NEW'\n", 1),
    ("import 'OLD';\n", "import 'NEW';\n", 1),
    ("import\"OLD/polyfill\"\n", "import\"NEW/polyfill\"\n", 1),
    ("export {a} from 'OLD';\n", "export {a} from 'NEW';\n", 1),
    ('export * from "OLD/x";\n', 'export * from "NEW/x";\n', 1),
    ("export * as ns from 'OLD';\n", "export * as ns from 'NEW';\n", 1),
    ("import type {T} from 'OLD';\n", "import type {T} from 'NEW';\n", 1),
    ("import type T from 'OLD';\n", "import type T from 'NEW';\n", 1),
    ("export type { T } from 'OLD/types';\n", "export type { T } from 'NEW/types';\n", 1),
    ("import x, { y as z } from 'OLD';\n", "import x, { y as z } from 'NEW';\n", 1),
    ("import {\n  a,\n  b\n} from 'OLD';\n", "import {\n  a,\n  b\n} from 'NEW';\n", 1),
    ("import data from 'OLD/data.json' with { type: 'json' };\n",
     "import data from 'NEW/data.json' with { type: 'json' };\n", 1),
    ("const x = require('OLD');\n", "const x = require('NEW');\n", 1),
    ('const { y } = require("OLD/sub");\n', 'const { y } = require("NEW/sub");\n', 1),
    ("const a = require ( 'OLD' );\n", "const a = require ( 'NEW' );\n", 1),
    ("import x = require('OLD');\n", "import x = require('NEW');\n", 1),
    ("const m = await import('OLD');\n", "const m = await import('NEW');\n", 1),
    ('const m = import("OLD/sub").then(f);\n', 'const m = import("NEW/sub").then(f);\n', 1),
    ("type T = typeof import('OLD');\n", "type T = typeof import('NEW');\n", 1),
    ("import a from 'OLD'; import b from 'OLD/b'; const c = require('OLD')\n",
     "import a from 'NEW'; import b from 'NEW/b'; const c = require('NEW')\n", 3),
    ("  import x from 'OLD/a/b/c.js'\n", "  import x from 'NEW/a/b/c.js'\n", 1),
]


@pytest.mark.parametrize("before,after,count", JS_REWRITTEN)
def test_js_forms_rewritten(before, after, count):
    done = js(before)
    assert done.data.decode() == after
    assert done.changes == count
    assert rewrite(done.data, "m.ts", "OLD", "NEW").changes == 0


JS_LEFT_ALONE = [
    "// import x from 'OLD'\n",
    "/* import x from 'OLD' */\n",
    "/**\n * const x = require('OLD');\n * import('OLD')\n */\n",
    "const s = 'OLD';\n",
    "const s = \"import x from 'OLD'\";\n",
    "const t = `OLD`;\n",
    "const m = import(`OLD`);\n",
    "const r = require(`OLD/sub`);\n",
    "jest.mock('OLD');\n",
    "jest.mock('OLD', () => ({}));\n",
    "const p = require.resolve('OLD');\n",
    "const q = module.require('OLD');\n",
    "x.import('OLD');\n",
    "a.import\n'OLD'\n",
    "declare module 'OLD' {\n  export const x: number;\n}\n",
    "/// <reference types=\"OLD\" />\n",
    "import x from 'OLDX';\n",
    "import x from 'OLD-old';\n",
    "import x from './OLD';\n",
    "import x from 'x/OLD';\n",
    "import x from 'OLD.js';\n",
    "const a = require('OLD' + suffix);\n",
    "const o = { from: 'OLD', import: 'OLD' };\n",
    "const re = /from 'OLD'/g;\n",
    "if (a) /import 'OLD'/.test(s);\n",
    "const t = `${x} import a from 'OLD'`;\n",
    "import x from '@/OLD';\n",
]


@pytest.mark.parametrize("text", JS_LEFT_ALONE)
def test_js_left_alone(text):
    data = text.encode()
    assert rewrite(data, "m.js", "OLD", "NEW") == Rewrite(data, 0, "")


def test_js_scanner_resumes_after_comments_strings_templates_and_regexes():
    before = ("#!/usr/bin/env node\n"
              "/* a block comment with a ' quote\n   and \" another, over lines: import 'OLD' */\n"
              "const tpl = `line one 'OLD'\n${ a ? `inner ${ {k: 'OLD'}.k }` : '}' }\n import x from 'OLD'`;\n"
              "const re = /[/'\"]OLD\\//g, half = 4 / 2 / 1;\n"
              "const s = 'it\\'s \"OLD\"', d = \"\\\"OLD\";\n"
              "import a from 'OLD';\n"
              "// a comment with a ' quote\n"
              "const b = require(\"OLD/b\");\n")
    after = before.replace("import a from 'OLD'", "import a from 'NEW'").replace(
        'require("OLD/b")', 'require("NEW/b")')
    done = js(before, path="cli.mjs")
    assert done.data.decode() == after
    assert done.changes == 2


def test_js_import_inside_template_interpolation_is_code():
    before = "const m = `${await import('OLD')}`;\n"
    assert js(before).data == b"const m = `${await import('NEW')}`;\n"


def test_js_regexes_and_unterminated_things_do_not_crash():
    for text in ["const r = /unterminated\nimport a from 'OLD'\n",
                 "const s = 'unterminated\nimport a from 'OLD'\n",
                 "let x = a / b / c; import a from 'OLD'\n",
                 "x = `never closed ${ import a from 'OLD'\n",
                 "/* never closed import a from 'OLD'\n",
                 "import a from 'OLD", "'", "/", "`", "${", "}"]:
        done = js(text)
        assert done.changes in (0, 1)
    assert js("const r = /unterminated\nimport a from 'OLD'\n").changes == 1
    assert js("let x = a / b / c; import a from 'OLD'\n").changes == 1


def test_js_crlf_mixed_and_bom_kept():
    data = b"\xef\xbb\xbfimport a from 'OLD';\r\nimport b from \"OLD/x\";\n// 'OLD'\r\nconst c = require('OLD')\r"
    done = rewrite(data, "m.js", "OLD", "NEW")
    assert done.data == (b"\xef\xbb\xbfimport a from 'NEW';\r\nimport b from \"NEW/x\";\n// 'OLD'\r\n"
                         b"const c = require('NEW')\r")
    assert done.changes == 3


def test_js_new_that_cannot_be_quoted_is_unworkable():
    with pytest.raises(Unworkable, match="cannot be written between ' quotes"):
        js("import a from 'OLD';\n", new="it's")
    assert js('import a from "OLD";\n', new="it's").data == b'import a from "it\'s";\n'


def test_js_rewrite_that_would_never_be_done_is_unworkable():
    with pytest.raises(Unworkable, match="still imports OLD"):
        js("import a from 'OLD';\n", new="OLD/inner")


SEED_BEFORE = """\
import * as React from "react";
import { cn } from "@/utils/cn";
import { cnx } from "@/utils/cnx";
import legacy from "@/utils/cn-old";
import { part } from '@/utils/cn/part';
import type { ClassValue } from "@/utils/cn";

// import { cn } from "@/utils/cn";
export function Button({ className, ...props }: Props) {
  const label = "@/utils/cn";
  return (
    <button className={cn("px-2 py-1", className)} data-x='@/utils/cn' {...props}>
      Don't import from "@/utils/cn" here // really
    </button>
  );
}
"""

SEED_AFTER = """\
import * as React from "react";
import { cn } from "~/lib/cn";
import { cnx } from "@/utils/cnx";
import legacy from "@/utils/cn-old";
import { part } from '~/lib/cn/part';
import type { ClassValue } from "~/lib/cn";

// import { cn } from "@/utils/cn";
export function Button({ className, ...props }: Props) {
  const label = "@/utils/cn";
  return (
    <button className={cn("px-2 py-1", className)} data-x='@/utils/cn' {...props}>
      Don't import from "@/utils/cn" here // really
    </button>
  );
}
"""


def test_seed_case_tsx():
    done = rewrite(SEED_BEFORE.encode(), "src/components/Button.tsx", "@/utils/cn", "~/lib/cn")
    assert done.data.decode() == SEED_AFTER
    assert done.changes == 3
    assert rewrite(done.data, "src/components/Button.tsx", "@/utils/cn", "~/lib/cn").changes == 0
    assert mentions(SEED_BEFORE.encode(), "@/utils/cn")


# --- the diff -------------------------------------------------------------------------------------------------

def test_diff_headers_and_lines():
    before = "a = 1\nb = 2\nc = 3\nimport OLD\nd = 4\ne = 5\nf = 6\ng = 7\n"
    done = py(before, path="pkg/mod.py")
    assert done.diff == ("--- a/pkg/mod.py\n"
                         "+++ b/pkg/mod.py\n"
                         "@@ -1,7 +1,7 @@\n"
                         " a = 1\n b = 2\n c = 3\n"
                         "-import OLD\n"
                         "+import NEW\n"
                         " d = 4\n e = 5\n f = 6\n")


def test_diff_without_final_newline():
    done = js("const x = 1;\nimport a from 'OLD'", path="a.js")
    assert done.diff == ("--- a/a.js\n+++ b/a.js\n@@ -1,2 +1,2 @@\n const x = 1;\n"
                         "-import a from 'OLD'\n\\ No newline at end of file\n"
                         "+import a from 'NEW'\n\\ No newline at end of file\n")


def test_diff_keeps_crlf_lines_and_each_line_ends():
    done = rewrite(b"import OLD\r\nx = 1\r\n", "w.py", "OLD", "NEW")
    assert done.diff == "--- a/w.py\n+++ b/w.py\n@@ -1,2 +1,2 @@\n-import OLD\r\n+import NEW\r\n x = 1\r\n"


# --- property: random files -----------------------------------------------------------------------------------

def _py_templates(old: str, new: str):
    """(lines before, lines after, how many imports of old) for one planted snippet; a line that changes is
    marked by a True in the fourth item at its position."""
    last = old.split(".")[-1]
    parent = ".".join(old.split(".")[:-1]) or "pkg"
    matching = [
        (["import {o}"], 1),
        (["import {o}.sub{n}"], 1),
        (["import {o}.sub as alias{n}"], 1),
        (["import os, {o}, {o}.deep as d{n}"], 2),
        (["from {o} import a{n}, b{n}"], 1),
        (["from {o}.sub import (a{n},", "    b{n})"], 1),
        (["from {o}.x.y import *"], 1),
        (["x{n} = 1; import {o}"], 1),
        (["if TYPE_CHECKING:", "    from {o} import T{n}"], 1),
        (["try:", "    import {o}.fast as impl{n}", "except ImportError:", "    impl{n} = None"], 1),
        (["def f{n}():", "    from {o} import g", "    return g"], 1),
    ]
    other = [
        ["import {o}ER"],
        ["import {o}_x"],
        ["from {o}X import y{n}"],
        ["import x{o}"],
        ["from .{o} import a{n}"],
        ["from ..{o}.sub import a{n}"],
        ["from " + parent + " import " + last],
        ["# import {o}"],
        ["s{n} = 'import {o}'"],
        ["s{n} = \"from {o} import a\"  # from {o} import b"],
        ['"""', "import {o}", "from {o} import x", '"""'],
        ["m{n} = __import__('{o}')"],
        ["m{n} = importlib.import_module('{o}')"],
        ["v{n} = {n} * 2"],
        ["def h{n}(x):", "    return x  # {o}"],
    ]
    return matching, other


def _js_templates():
    matching = [
        (["import x{n} from '{o}';"], 1),
        (["import {{ a{n} }} from \"{o}/sub\";"], 1),
        (["import * as m{n} from '{o}';"], 1),
        (["import '{o}/side';"], 1),
        (["export {{ a{n} }} from '{o}';"], 1),
        (["export * from \"{o}/x\";"], 1),
        (["import type {{ T{n} }} from '{o}';"], 1),
        (["const r{n} = require('{o}/sub');"], 1),
        (["const d{n} = await import(\"{o}\");"], 1),
        (["import {{", "  a{n},", "  b{n},", "}} from '{o}';"], 1),
        (["const p{n} = require('{o}'), q{n} = require(\"{o}/y\");"], 2),
    ]
    other = [
        ["// import x from '{o}'"],
        ["/* require('{o}') */"],
        ["/**", " * import x from '{o}';", " */"],
        ["const s{n} = \"{o}\";"],
        ["const t{n} = `{o}`;"],
        ["jest.mock('{o}');"],
        ["import z{n} from '{o}x';"],
        ["import z{n} from '{o}-old';"],
        ["import q{n} from './{o}';"],
        ["const re{n} = /from '{o}'/;"],
        ["const msg{n} = \"import x from '{o}'\";"],
        ["const el{n} = <p title=\"{o}\">{{v}}</p>;"],
        ["export const v{n} = {n} / 2;"],
    ]
    return matching, other


def _random_file(rng: random.Random, kind: str, old: str, new: str):
    """Lines of a random file, the expected lines after the rewrite, which lines may change, the count."""
    matching, other = _py_templates(old, new) if kind == "python" else _js_templates()
    before, after, may_change, planted = [], [], set(), 0
    if kind == "python":
        before.append("from typing import TYPE_CHECKING")
        after.append(before[-1])
    for n in range(rng.randint(0, 12)):
        if rng.random() < 0.45:
            lines, count = rng.choice(matching)
            planted += count
            for line in lines:
                old_line, new_line = line.format(o=old, n=n), line.format(o=new, n=n)
                if old_line != new_line:
                    may_change.add(len(before))
                before.append(old_line)
                after.append(new_line)
        else:
            for line in rng.choice(other):
                before.append(line.format(o=old, n=n))
                after.append(before[-1])
    return before, after, may_change, planted


def _join(lines: list[str], endings: list[str]) -> str:
    return "".join(line + end for line, end in zip(lines, endings))


def _ending(line: bytes) -> bytes:
    return line[len(line.rstrip(b"\r\n")):]


CASES = [("python", "m.py", "acme_old", "acme_new"), ("python", "m.py", "pkg.utils", "pkg.helpers"),
         ("python", "m.pyi", "o", "brand.new.place"),
         ("js", "m.tsx", "@/utils/cn", "~/lib/cn"), ("js", "m.ts", "acme_old", "acme_new"),
         ("js", "m.mjs", "lodash", "lodash-es")]


@pytest.mark.parametrize("kind,path,old,new", CASES)
def test_random_files(kind, path, old, new):
    rng = random.Random(f"{kind}-{old}")
    for _ in range(40):
        before, after, may_change, planted = _random_file(rng, kind, old, new)
        style = rng.choice(["\n", "\r\n", "mixed"])
        endings = [rng.choice(["\n", "\r\n"]) if style == "mixed" else style for _ in before]
        if endings and rng.random() < 0.2:
            endings[-1] = ""                                    # no newline at the end
        bom = "\ufeff" if rng.random() < 0.1 else ""
        data = (bom + _join(before, endings)).encode()
        expected = (bom + _join(after, endings)).encode()

        done = rewrite(data, path, old, new)
        assert done.data == expected, data
        # (a) only lines holding an import of old differ, and each keeps its line ending
        old_lines, new_lines = data.splitlines(keepends=True), done.data.splitlines(keepends=True)
        assert len(old_lines) == len(new_lines)
        changed = {i for i, (a, b) in enumerate(zip(old_lines, new_lines)) if a != b}
        assert changed <= may_change
        for i in changed:
            assert _ending(old_lines[i]) == _ending(new_lines[i])
        # (b) a second rewrite changes nothing
        again = rewrite(done.data, path, old, new)
        assert again.changes == 0 and again.data == done.data and again.diff == ""
        # (c) as many changes as planted imports
        assert done.changes == planted
        assert (done.diff == "") == (planted == 0)
        if planted:
            assert done.diff.startswith(f"--- a/{path}\n+++ b/{path}\n")
            assert mentions(data, old)
