"""`hlopt-opt --verify-diagnostics`: the errors a pipeline reports, checked against
`expected-error` comments in its input, as mlir-opt checks them.

    // expected-error@+1 {{no Taylor rule for 'stablehlo.reduce_precision'}}
    %1 = stablehlo.reduce_precision %0, format = e5m10 : tensor<4xf32>
    %2 = stablehlo.custom_call @foo(%1) : ...   // expected-error {{no Taylor rule}}

An expectation `// expected-KIND[@LINE] {{TEXT}}` (KIND: error, warning or note)
wants a diagnostic of that kind whose message contains TEXT, on the comment's own
line, N lines below (`@+N`) or above (`@-N`), on the next line without an
expectation (`@below`) or the last one before it (`@above`), as mlir-opt reads
them; `@unknown` wants one without a location (`hlopt-opt: error: ...`). One line
may carry several expectations, and one operation several diagnostics (each is
matched by one expectation). Notes (the first use behind a reuse, the call chain
behind an error) are checked only in a chunk that expects one; there, every note
must be expected. Each `// -----` chunk of a split input
is run and checked on its own. Every diagnostic must be expected and every
expectation met; each miss is reported as an error at its line, and the exit
status is 1 if there is one. The chunks that succeed are printed, as without
--verify-diagnostics, so one run checks both the errors and the output.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable

_EXPECTED = re.compile(r"//\s*expected-(error|warning|note)(?:@(unknown|above|below|[+-]\d+))?\s*\{\{(.*?)\}\}")
_LOCATED = re.compile(r"^(?:.*?):(\d+):\d+: (error|warning|note): (.*)$")
_UNLOCATED = re.compile(r"^[\w.-]+: (error|warning|note): (.*)$")


@dataclasses.dataclass
class Diagnostic:
    """A diagnostic produced or expected: its kind, its 1-based line (None: no location)
    and its message (for an expectation, a substring of the message)."""

    kind: str
    line: int | None
    message: str


def expectations(text: str, first_line: int) -> list[Diagnostic]:
    """The `expected-*` comments of a chunk that starts at 0-based line `first_line`."""
    found: list[Diagnostic] = []
    below: list[Diagnostic] = []  # waiting for the next line without an expectation
    last_plain = None  # the last line without an expectation (1-based)
    lines = text.splitlines()
    for i, line in enumerate(lines, start=first_line + 1):
        matches = _EXPECTED.findall(line)
        if not matches:
            for e in below:
                e.line = i
            below, last_plain = [], i
        for kind, where, message in matches:
            if where == "unknown":
                target = None
            elif where == "above":
                target = last_plain
            elif where == "below":
                target = first_line + len(lines) + 1  # past the chunk, unless a line follows
            else:
                target = i + int(where or 0)
            found.append(Diagnostic(kind, target, message))
            if where == "below":
                below.append(found[-1])
    return found


def produced(error: Exception) -> list[Diagnostic]:
    """The diagnostics an exception of a pipeline reports: its message and its notes."""
    found = []
    for line in [*str(error).strip().splitlines(), *getattr(error, "notes", [])]:
        located, unlocated = _LOCATED.match(line), _UNLOCATED.match(line)
        if located:
            found.append(Diagnostic(located[2], int(located[1]), located[3]))
        elif unlocated:
            found.append(Diagnostic(unlocated[1], None, unlocated[2]))
        elif not found:
            found.append(Diagnostic("error", None, line))
    return found


def check(expected: list[Diagnostic], got: list[Diagnostic], filename: str) -> list[str]:
    """The misses of one chunk, as error lines: diagnostics nobody expected, and
    expectations no diagnostic met."""
    if not any(e.kind == "note" for e in expected):
        got = [d for d in got if d.kind != "note"]
    unmet = list(expected)
    misses = []
    for d in got:
        match = next((e for e in unmet if e.kind == d.kind and e.line == d.line and e.message in d.message), None)
        if match is None:
            where = filename if d.line is None else f"{filename}:{d.line}"
            misses.append(f"{where}: error: unexpected {d.kind}: {d.message}")
        else:
            unmet.remove(match)
    for e in unmet:
        where = filename if e.line is None else f"{filename}:{e.line}"
        misses.append(f"{where}: error: expected {e.kind} \"{e.message}\" was not produced")
    return misses


def verify_chunk(chunk: str, first_line: int, filename: str, run: Callable[[], str]) -> tuple[str | None, list[str]]:
    """Run one chunk (`run` returns its printed module) and check its diagnostics against
    its expectations: the printed module (None if the chunk failed) and the misses."""
    try:
        output, got = run(), []
    except Exception as e:  # noqa: BLE001 - every error of a chunk is a diagnostic to check
        output, got = None, produced(e)
    return output, check(expectations(chunk, first_line), got, filename)
