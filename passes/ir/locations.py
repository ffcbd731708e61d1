"""Source locations of MLIR operations: parse them, pick the user's frame, format it.

Every error hlopt prints starts with `file:line:col:` at the innermost frame
of a location that lies in the user's own code. A location is a tree of file
positions (`"f.py":3:4`, with an optional `to` range), names
(`"jit(f)/add"(child)`), call sites (`callsite(callee at caller)`) and fused
locations; JAX writes the Python call stack of each op as nested call sites,
innermost first. Frames in hlopt's and jax's own files are dropped when a
frame of the user's code remains; the full chain is available as `note:`
lines (`call_chain`), which the command-line tools print under `--debug`.
An error line is `error_line(where, message)`; `shorten` caps every line an
error prints (a rank-100000 type or a huge name echoed from the input).

A module parsed from text without its own locations is located in the buffer
`-`; `source_name` says which file that text came from.

    loc(callsite("h"("bad.py":4:11 to :73) at "flat_fun"(".../hlopt/jet.py":143:14)))
    -> bad.py:4:11
"""

from __future__ import annotations

import contextlib
import difflib
import functools
import importlib.util
import os
import re
import sys
import threading
from collections.abc import Iterable, Iterator

from hlopt.passes.mlir import ir

Frame = tuple[str, int, int]  # (file, line, column)
Frames = tuple[Frame, ...]  # innermost first

# The buffer name MLIR gives text parsed from a string.
PARSED_TEXT = "-"

_state = threading.local()


@contextlib.contextmanager
def source_name(name: str) -> Iterator[None]:
    """While active, locations in the parsed-text buffer `-` are reported in file `name`."""
    saved = getattr(_state, "name", None)
    _state.name = name
    try:
        yield
    finally:
        _state.name = saved


# --- parsing ------------------------------------------------------------------

_TOKEN = re.compile(r'\s*(?:"((?:[^"\\]|\\.)*)"|(callsite|fused|unknown)|(.))')
_POSITION = re.compile(r":(\d+):(\d+)(?: to (?:\d+)?:\d+)?")
_ESCAPE = re.compile(r'\\(["\\]|[0-9A-Fa-f]{2})')


def _unescape(text: str) -> str:
    return _ESCAPE.sub(lambda m: m[1] if len(m[1]) == 1 else chr(int(m[1], 16)), text)


def _parse(text: str, i: int) -> tuple[tuple, int]:
    """The location at `text[i:]` as a tuple tree, and where it ends.

    ("file", name, line, col), ("name", name, child or None), ("callsite",
    callee, caller), ("fused", [children]) or ("unknown",).
    """
    m = _TOKEN.match(text, i)
    quoted, word, _ = m.groups()
    i = m.end()
    if quoted is not None:
        quoted = _unescape(quoted)
        pos = _POSITION.match(text, i)
        if pos is not None:
            return ("file", quoted, int(pos.group(1)), int(pos.group(2))), pos.end()
        if text.startswith("(", i):
            child, i = _parse(text, i + 1)
            return ("name", quoted, child), text.index(")", i) + 1
        return ("name", quoted, None), i
    if word == "callsite":
        callee, i = _parse(text, i + 1)
        i = text.index(" at ", i) + 4
        caller, i = _parse(text, i)
        return ("callsite", callee, caller), text.index(")", i) + 1
    if word == "fused":
        if text.startswith("<", i):
            i = _skip_bracketed(text, i, "<", ">")
        i = text.index("[", i) + 1
        children = []
        while not text.startswith("]", i):
            child, i = _parse(text, i)
            children.append(child)
            i = len(text) - len(text[i:].lstrip(", "))
        return ("fused", children), i + 1
    return ("unknown",), i


def _skip_bracketed(text: str, i: int, open_: str, close: str) -> int:
    depth = 0
    while True:
        if text[i] == open_:
            depth += 1
        elif text[i] == close:
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1


def _tree(loc: ir.Location | str) -> tuple | None:
    """The parsed tree of `loc`, None for a syntax this parser does not know."""
    text = str(loc)
    try:
        return _parse(text, 4 if text.startswith("loc(") else 0)[0]
    except (AttributeError, IndexError, ValueError, RecursionError):
        return None


def _strip_names(node: tuple | None) -> tuple | None:
    while node is not None and node[0] == "name":
        node = node[2]
    return node


def _innermost_name(node: tuple | None) -> str | None:
    name = None
    while node is not None and node[0] == "name":
        name, node = node[1], node[2]
    return name


def _frames(node: tuple | None, elsewhere: frozenset[str]) -> list[Frame]:
    node = _strip_names(node)
    if node is None or node[0] == "unknown":
        return []
    if node[0] == "file":
        return [(node[1], node[2], node[3])]
    if node[0] == "fused":
        return next((f for f in (_frames(c, elsewhere) for c in node[1]) if f), [])
    callee, caller = node[1], node[2]
    first_use = _strip_names(callee)
    if first_use is not None and (
        first_use[0] == "callsite"
        or (first_use[0] == "file" and (_innermost_name(callee) or "").rsplit(".", 1)[-1] in elsewhere)
    ):
        return _frames(caller, elsewhere)
    return _frames(callee, elsewhere) + _frames(caller, elsewhere)


def source_frames(loc: ir.Location | str, elsewhere: frozenset[str] = frozenset()) -> Frames:
    """The source frames of `loc`, innermost first: `(file, line, col)` each.

    JAX lowers some computations once per module and locates later uses at
    `callsite(<frames of the first use> at <frames of this use>)`; the first
    use's frames are a callsite themselves, or one frame of a function named
    in `elsewhere` (jitted functions lowered to other `func.func`s). Only the
    frames of this use count. Repeated frames are listed once.
    """
    frames = _frames(_tree(loc), elsewhere)
    return tuple(f for i, f in enumerate(frames) if i == 0 or f != frames[i - 1])


# --- whose code a frame is in ---------------------------------------------------


@functools.cache
def hlopt_dirs() -> tuple[str, ...]:
    """The folders of hlopt's own packages (`hlopt`, `hlopt.compiler`, `hlopt.passes`, `hlopt.runtime`)."""
    passes = os.path.dirname(os.path.abspath(__file__))
    root = os.path.dirname(passes)  # the repository (editable install) or the installed `hlopt` folder
    dirs = [passes, os.path.join(root, "compiler"), os.path.join(root, "runtime")]
    dirs += list(getattr(sys.modules.get("hlopt"), "__path__", []))
    return tuple(dict.fromkeys(os.path.realpath(d) for d in dirs))


@functools.cache
def _library_dirs() -> tuple[str, ...]:
    """The folders of hlopt's own packages and of jax and jaxlib, each ending in a separator."""
    dirs = list(hlopt_dirs())
    for name in ("jax", "jaxlib"):
        spec = importlib.util.find_spec(name)  # finds the package without importing it
        if spec is not None and spec.submodule_search_locations:
            dirs += list(spec.submodule_search_locations)
    return tuple(dict.fromkeys(os.path.join(form(d), "") for d in dirs for form in (os.path.abspath, os.path.realpath)))


@functools.lru_cache(maxsize=1024)
def in_library(path: str) -> bool:
    """True for a file of hlopt's or jax's own code (not the user's).

    Only the text of `path` is compared: a location comes from the module (a
    file may hold any string there, NUL bytes included), so it is never looked
    up on disk.
    """
    if not path.startswith("/"):
        return False
    return os.path.normpath(path).startswith(_library_dirs())


def user_frame(frames: Frames) -> Frame | None:
    """The innermost frame in the user's code; the innermost frame if every one is a library's."""
    return next((f for f in frames if not in_library(f[0])), frames[0] if frames else None)


# --- formatting ------------------------------------------------------------------

# The longest line an error prints: longer lines (a rank-100000 type, a huge
# attribute or name echoed from the input) keep their start and end.
ERROR_LINE_LIMIT = 1000


def printable(value: object) -> str:
    """`str(value)` with every control, format and other non-printable character escaped (\\x1b, \\u202e)."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in str(value))


def shorten(text: str, limit: int = ERROR_LINE_LIMIT) -> str:
    """`text` with every line longer than `limit` characters cut to its start and end around a count."""
    lines = str(text).split("\n")
    for i, line in enumerate(lines):
        if len(line) > limit:
            keep = (limit - 40) // 2
            lines[i] = f"{line[:keep]} ...[{len(line) - 2 * keep} characters]... {line[-keep:]}"
    return "\n".join(lines)


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """` (did you mean 'x'?)` naming the choices closest to the misspelled `word` (difflib's
    measure), or '' when none is close."""
    close = difflib.get_close_matches(word, list(dict.fromkeys(choices)), n=2, cutoff=0.75)
    return f" (did you mean {' or '.join(repr(c) for c in close)}?)" if close else ""


def error_line(where: str | None, message: str) -> str:
    """`where: error: message` (just `message` without a place), every line capped by `shorten`."""
    return shorten(message if where is None else f"{where}: error: {message}")



def format_frame(frame: Frame) -> str:
    """`file:line:col`, with the parsed-text buffer named as `source_name` says."""
    file, line, col = frame
    if file == PARSED_TEXT:
        file = getattr(_state, "name", None) or file
    return f"{printable(file)}:{line}:{col}"


def format_frames(frames: Frames) -> str | None:
    """`file:line:col` of the frame in the user's code (see `user_frame`), None without frames."""
    frame = user_frame(frames)
    return None if frame is None else format_frame(frame)


def format_location(loc: ir.Location | str) -> str:
    """`file:line:col` of `loc`'s frame in the user's code; its name, or `<unknown>`, without one."""
    where = format_frames(source_frames(loc))
    if where is not None:
        return where
    tree = _tree(loc)
    return _innermost_name(tree) if tree is not None and tree[0] == "name" else "<unknown>"


def call_chain(loc: ir.Location | str) -> list[str]:
    """`note:` lines for the frames of `loc` besides the one `format_location` reports."""
    frames = source_frames(loc)
    chosen = user_frame(frames)
    if chosen is None:
        return []
    at = frames.index(chosen)
    return [f"{format_frame(f)}: note: {'called from here' if i > at else 'in library code here'}"
            for i, f in enumerate(frames) if i != at]
