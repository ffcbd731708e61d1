"""What both command-line tools share: errors as one line with exit status 1, and `--version`."""

from __future__ import annotations

import argparse
import sys
import traceback
from collections.abc import Callable
from typing import Any


class UsageError(Exception):
    """Bad command-line input: reported as one line, exit status 1."""


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
        message = str(e).strip() or type(e).__name__
        if ": error:" not in message.split("\n", 1)[0]:
            expected = isinstance(e, (UsageError, ValueError, TypeError, OSError, RuntimeError, LookupError))
            message = f"{prog}: error: {message if expected else f'{type(e).__name__}: {message}'}"
        if debug:  # the call chain behind the location
            message = "\n".join([message, *getattr(e, "notes", [])])
        from hlopt.passes.locations import shorten

        print(shorten(message), file=sys.stderr)
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
