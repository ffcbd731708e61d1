"""Sphinx configuration of hlopt's documentation (Sphinx + MyST-NB, as JAX and flax build theirs).

Build: `python -m sphinx -W --keep-going -b html docs docs/_build/html` (warnings are errors). The
tutorials under `tutorials/` are MyST notebooks: the build runs each in a fresh kernel and renders its
output, and a cell that raises fails the build.
"""

import os
import re
import sys

from pygments.lexer import RegexLexer, bygroups
from pygments.token import Comment, Keyword, Name, Number, Operator, Punctuation, String, Text

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..")))
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import hlopt  # noqa: E402

project = "hlopt"
author = "the hlopt authors"
copyright = f"2026, {author}"
release = version = hlopt.__version__
extensions = ["myst_nb", "sphinx_design", "sphinx.ext.autodoc", "sphinx.ext.napoleon"]
exclude_patterns = ["_build"]
myst_heading_anchors = 3
myst_enable_extensions = ["dollarmath", "amsmath", "colon_fence"]
autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autodoc_class_signature = "separated"  # a class's constructor is shown only where users call it (below)
napoleon_google_docstring = True
napoleon_numpy_docstring = False

nb_execution_mode = "force"  # every build runs the tutorials; nothing is cached in the tree
nb_execution_timeout = 120
nb_execution_raise_on_error = True
nb_execution_in_temp = True  # files a tutorial writes land in a temporary folder
nb_execution_show_tb = True
html_theme = "furo"
html_title = f"hlopt {release}"
templates_path: list[str] = []


class MlirLexer(RegexLexer):
    """Enough of MLIR's syntax to colour StableHLO listings (Pygments has no MLIR lexer)."""

    name = "MLIR"
    aliases = ["mlir"]
    tokens = {
        "root": [
            (r"//.*?$", Comment.Single),
            (r'"(\\\\|\\"|[^"])*"', String),
            (r"%[\w.#:$-]+", Name.Variable),
            (r"@[\w.$-]+", Name.Function),
            (r"#[\w.]+", Name.Attribute),
            (r"\b(func\.func|func\.call|return|module|attributes|private|public|call)\b", Keyword),
            (r"\b(tensor|complex|f16|bf16|f32|f64|i1|i8|i16|i32|i64|ui32|index)\b", Keyword.Type),
            (r"([a-z_]+)(\.)([a-z_.]+)", bygroups(Name.Builtin, Punctuation, Name.Builtin)),
            (r"-?\d+(\.\d+)?(e[+-]?\d+)?", Number),
            (r"[=:<>()\[\]{},x*+-]", Operator),
            (r"\s+", Text),
            (r".", Text),
        ]
    }


_CODE = re.compile(r"(:\w+:`[^`\n]*`)|(?<!`)`([^`\n]+)`(?!`)(\w?)")  # a role (:math:`x`) stays as it is


def code_spans_as_literals(app, what, name, obj, options, lines):
    """hlopt's docstrings write code as `name` (Markdown): make each a reST literal,
    also where a letter follows (`Array`s); formulas are :math:`...`."""
    for i, line in enumerate(lines):
        lines[i] = _CODE.sub(lambda m: m[1] or f"``{m[2]}``" + (f"\\ {m[3]}" if m[3] else ""), line)


def constructors_where_users_call_them(app, what, name, obj, skip, options):
    """Separated class signatures list `__new__` and `__init__` under every class: keep only the
    `__init__` that api.md asks for (`:special-members: __init__`, the classes users build), not the
    internal arguments of the objects hlopt hands out (`Lowered`, `Compiled`, its errors)."""
    if name == "__new__":
        return True
    if name == "__init__":
        return "__init__" not in (getattr(options, "special_members", None) or ())
    return None


def setup(app):
    app.add_lexer("mlir", MlirLexer)
    app.connect("autodoc-process-docstring", code_spans_as_literals)
    app.connect("autodoc-skip-member", constructors_where_users_call_them)
