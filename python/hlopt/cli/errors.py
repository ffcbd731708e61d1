"""What both command-line tools share: errors as one line with exit status 1, and `--version`."""

from __future__ import annotations

import argparse
import linecache
import os
import re
import sys
import sysconfig
import traceback
from collections.abc import Callable
from typing import Any


class UsageError(Exception):
    """Bad command-line input: reported as one line, exit status 1."""


# A note (PEP 678) that the tools' line for an error ends with, in parentheses: what the command was
# doing, in the user's terms (`while tracing predict with params = f32[2,3] ...`).
_CONTEXT = "hlopt context: "


def add_context(error: BaseException, context: str) -> None:
    """End the tools' one line for `error` with `(context)`."""
    error.add_note(_CONTEXT + context)


# The Python API's words for what the command line spells as flags: messages from the runtime name
# arguments (`trust='portable'`); the tools print them with the flag (`--trust portable`).
API_TO_FLAGS = {"trust='portable'": "--trust portable", "trust='signed'": "--trust signed"}


# A load's advice to import a module first (runtime/encoding.py), `import M before loading` or, where the
# file does not say which module, `import MODULE, the module that ..., before loading`: on the command line,
# `--import M`.
_IMPORT_BEFORE_LOADING = re.compile(r"\bimport ([A-Za-z_][\w.]*)(?:(, [^,]+),)? before loading")


def as_flags(text: str) -> str:
    """`text` with the API's argument spellings replaced by the command line's flags (API_TO_FLAGS,
    and `import M[, what M is,] before loading` as `pass --import M[, what M is]`)."""
    for words, flag in API_TO_FLAGS.items():
        text = text.replace(words, flag)
    return _IMPORT_BEFORE_LOADING.sub(lambda m: f"pass --import {m[1]}{m[2] or ''}", text)


# `file:line:col: error:` (or `<name>: error:`) in a message's first line: already located.
_LOCATED = re.compile(r"^[^\n]*: error:")
_EXPECTED = (UsageError, ValueError, TypeError, OSError, RuntimeError, LookupError, ArithmeticError, ImportError)


def _python_dirs() -> tuple[str, ...]:
    """The folders of Python's standard library and installed packages, each ending in a separator."""
    paths = sysconfig.get_paths()
    return tuple(os.path.join(os.path.realpath(paths[k]), "") for k in ("stdlib", "platstdlib", "purelib", "platlib"))


def _is_user_file(path: str) -> bool:
    from hlopt.passes.ir.locations import in_library

    return (os.path.isabs(path) and not in_library(path)
            and not os.path.realpath(path).startswith(_python_dirs()))


def _column(frame: traceback.FrameSummary) -> int:
    if frame.colno is not None:
        return frame.colno
    line = linecache.getline(frame.filename, frame.lineno or 0)
    return len(line) - len(line.lstrip()) if line.strip() else 0


def user_frames(error: BaseException) -> list[tuple[str, int, int]]:
    """`(file, line, col)` of the frames in the user's own code of `error`'s traceback, innermost first.

    Without one there, the first exception of its `__cause__` chain that has
    them gives them (JAX chains the Python stack that traced an operation to
    an error in lowering it). A SyntaxError in the user's file comes first at
    its own position. Columns are 0-based, as JAX reports Python columns; a
    frame that does not record its column (one JAX kept) gives its line's first.
    """
    cause: BaseException | None = error
    while cause is not None:
        frames = [(f.filename, f.lineno or 0, _column(f)) for f in traceback.extract_tb(cause.__traceback__)]
        if isinstance(cause, SyntaxError) and cause.filename:
            frames.append((os.path.abspath(cause.filename), cause.lineno or 0, max((cause.offset or 1) - 1, 0)))
        found = [f for f in reversed(frames) if _is_user_file(f[0])]
        if found:
            return found
        cause = cause.__cause__
    return []


def error_message(error: BaseException, prog: str, debug: bool) -> str:
    """The line (the lines under `debug`) that the tools print for `error`.

    An error already located (`file:line:col: error: ...`) stays as it is; any
    other error raised in the user's own code is located at its innermost frame
    there, its first line only (the rest, and the outer frames as `note:`
    lines, under `debug`); anything else is `prog: error: ...`.
    """
    text = (error.msg if isinstance(error, SyntaxError) else str(error)).strip() or type(error).__name__
    notes = list(getattr(error, "notes", []))
    contexts = [n.removeprefix(_CONTEXT) for n in getattr(error, "__notes__", []) if n.startswith(_CONTEXT)]
    if not _LOCATED.match(text):
        if not isinstance(error, _EXPECTED):
            text = f"{type(error).__name__}: {text}"
        frames = user_frames(error)
        first, _, rest = text.partition("\n")
        if rest.strip() and not debug:
            first += f" (`{prog} --debug` shows the rest of this message)"
        elif rest.strip():
            notes = [rest.strip(), *notes]
        first += "".join(f" ({context})" for context in contexts)
        if frames:
            file, line, col = frames[0]
            text = f"{file}:{line}:{col}: error: {first}"
            notes += [f"{f}:{n}:{c}: note: called from here" for f, n, c in frames[1:]]
        else:
            text = f"{prog}: error: {first}"
    from hlopt.passes.ir.locations import printable, shorten

    lines = [text, *notes] if debug else [text]  # each escaped: a message can quote a forger's bytes
    return shorten(as_flags("\n".join(printable(line) for line in "\n".join(lines).split("\n"))))


def run_main(body: Callable[[], int], prog: str, debug: bool) -> int:
    """Run `body`; print an exception as one line (`file:line:col: error: ...` or `prog: error: ...`).

    With `debug`, the traceback comes first and the location's call chain follows as `note:` lines.
    """
    try:
        return body()
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0
    except Exception as e:  # noqa: BLE001 - the CLI's contract: no traceback
        if debug:
            traceback.print_exc()
        print(error_message(e, prog, debug), file=sys.stderr)
        return 1


class VersionAction(argparse.Action):
    """`--version`: print `prog 0.1.0 (jax 0.10.2, jaxlib 0.10.2)` and exit (jax is not imported)."""

    def __init__(self, option_strings: list[str], dest: str, **kwargs: Any):
        super().__init__(option_strings, dest, nargs=0, help="print the versions of hlopt, jax and jaxlib, and exit")

    def __call__(self, parser: argparse.ArgumentParser, namespace: Any, values: Any, option_string: Any = None) -> None:
        import importlib.metadata

        import hlopt

        pinned = ", ".join(f"{name} {importlib.metadata.version(name)}" for name in ("jax", "jaxlib"))
        print(f"{parser.prog} {hlopt.__version__} ({pinned})")
        parser.exit()
