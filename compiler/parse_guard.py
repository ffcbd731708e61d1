"""Parsing MLIR text from users: refuse what would crash or stall MLIR's parser, before it runs.

MLIR's parser recurses once per level of nesting (a type inside a type, an
attribute inside an attribute, an op's region inside another op's region, a
location inside a location) on the C stack, and so do the printer, the
verifier and the passes after it: nesting a few thousand levels deep overflows
the main thread's stack and kills the process with SIGSEGV. Aliases nest
without deep brackets: a chain `#a1 = [#a0]`, `#a2 = [#a1]`, ... is as deep
as its length for the printer. XLA:CPU's compiler recurses over nested
`stablehlo.while` and `stablehlo.if` regions and overflows at a few hundred.
A dimension list (`tensor<1x1x...xf32>`) takes the parser time quadratic in
its length. `python -m support.nesting_limits` (run in test/python) finds the
depths at which the installed jaxlib crashes; test_hostile_ir.py checks that
each is refused.

`check_text` scans the text in linear time (vectorized over its bytes) and
refuses
- more than `MAX_NESTING` brackets (`(`, `[`, `{`, `<`) open at once,
  counting an alias as deep as its definition: a few times below the lowest
  depth at which the parser or printer crashes;
- more than `MAX_REGION_NESTING` braces open at once (regions and
  dictionaries): below the depth at which XLA crashes;
- a dimension list of more than `MAX_RANK` sizes (numpy allows 64 dimensions).
Real programs stay far below: a jax module with nested loops, callsite
locations and dictionary attributes nests a few dozen brackets deep.

`parse_source` checks, then parses; every refusal is one line,
`file:line:col: error: ...`. MLIR bytecode is not accepted from users: its
reader does not recurse, but nothing can measure a parsed module's nesting
without recursing, so a deep one would crash whatever touched it next.
"""

from __future__ import annotations

import bisect
import dataclasses
import re

import numpy as np

from hlopt.compiler.pipeline import PipelineError, mlir_pipeline_error
from hlopt.passes.ir.locations import error_line, source_name
from hlopt.passes.mlir import get_context, ir

MAX_NESTING = 512
MAX_REGION_NESTING = 100
MAX_RANK = 256
MAX_SOURCE_BYTES = 1 << 30  # the largest MLIR text hlopt-opt and `hlopt compile` read

BYTECODE_MAGIC = b"ML\xefR"

# Strings and comments: no brackets or aliases inside. As in MLIR's lexer (mlir/lib/AsmParser/Lexer.cpp), a
# comment ends at '\n' or '\r', a string at its closing quote (or, an error, at '\n', '\v', '\f').
_SKIPPED = re.compile(rb'"(?:[^"\\\n\v\f]|\\[^\n\v\f])*"?|//[^\n\r]*')
# An escape in a quoted string: \", \\, \n, \t or two hex digits (a byte).
_STRING_ESCAPE = re.compile(rb'\\(["\\nt]|[0-9A-Fa-f]{2})')
_ESCAPED = {b'"': b'"', b"\\": b"\\", b"n": b"\n", b"t": b"\t"}
# Alias names (`#name`, `!name`) with the `=` that follows one where it is defined.
_ALIAS = re.compile(rb"([#!][A-Za-z_][\w$.]*)([ \t]*=)?")
# +1 for an opening bracket, -1 for a closing one; the same for braces alone.
_BRACKETS = np.zeros(256, np.int32)
_BRACKETS[list(b"([{<")], _BRACKETS[list(b")]}>")] = 1, -1
_BRACES = np.zeros(256, np.int32)
_BRACES[ord("{")], _BRACES[ord("}")] = 1, -1
_DIMENSION_CHARS = np.zeros(256, bool)
_DIMENSION_CHARS[list(b"0123456789?x[]")] = True
_SIZE_LAST = np.zeros(256, bool)  # the last character of a size
_SIZE_LAST[list(b"0123456789?]")] = True
_WHITESPACE = np.zeros(256, bool)  # what MLIR's lexer skips between tokens
_WHITESPACE[list(b" \t\n\r\0")] = True
_LINE_ENDS = np.zeros(256, bool)
_LINE_ENDS[list(b"\n\r")] = True


class ParseError(PipelineError):
    """User text that hlopt refuses to parse or MLIR cannot parse; one line per error, with the location."""


@dataclasses.dataclass
class _Alias:
    """One alias definition (`#a = [...]`, `!t = tuple<...>`, `#loc1 = loc(...)`) and the aliases it uses."""

    start: int
    end: int
    deepest: int
    uses: list[tuple[int, bytes]] = dataclasses.field(default_factory=list)  # (brackets open, alias name)


def check_text(text: str, filename: str = "-") -> None:
    """Raise ParseError if `text` nests deeper than MAX_NESTING (MAX_REGION_NESTING braces) or has a
    dimension list longer than MAX_RANK, or a quoted string (a symbol name, a string attribute, a
    location's file) whose escaped bytes are not UTF-8: hlopt and the MLIR bindings read them as text.

    Vectorized over the bytes: the brackets open at each byte are the prefix
    sums of +1 per opener and -1 per closer, clamped at zero. An alias nests as
    deep as its definition wherever it is used, so a chain of aliases, each
    wrapping the one before, nests without a deep bracket.
    """
    data = text.encode("utf-8")
    codes = np.frombuffer(data, np.uint8)
    skipped = np.zeros(len(codes), bool)
    comments = np.zeros(len(codes), bool)
    for match in _SKIPPED.finditer(data):
        skipped[match.start():match.end()] = True
        if data[match.start()] != ord('"'):
            comments[match.start():match.end()] = True
        elif b"\\" in match.group():
            _check_utf8(match.group()[1:-1], data, match.start(), filename)
    counted = ~skipped  # the '>' of '->' and of '>=' closes nothing
    counted[1:] &= ~((codes[1:] == ord(">")) & (codes[:-1] == ord("-")))
    counted[:-1] &= ~((codes[:-1] == ord(">")) & (codes[1:] == ord("=")))
    depth = _open_brackets(np.where(counted, _BRACKETS[codes], 0))
    braces = _open_brackets(np.where(counted, _BRACES[codes], 0))
    nesting = f"more than {MAX_NESTING} levels of nesting (types, attributes, regions, locations)"
    too_deep = [(int(np.argmax(levels > limit)), what) for levels, limit, what in (
        (depth, MAX_NESTING, nesting),
        (braces, MAX_REGION_NESTING, f"more than {MAX_REGION_NESTING} nested regions or dictionaries"),
    ) if len(levels) and levels.max() > limit]
    if too_deep:
        raise _too_deep(data, filename, *min(too_deep))  # the first place in the text
    _check_aliases(data, codes, skipped, depth, filename, nesting)
    _check_rank(data, codes, counted, comments, filename)


def _check_utf8(quoted: bytes, data: bytes, offset: int, filename: str) -> None:
    """Refuse a string whose escapes spell bytes that are not UTF-8."""
    raw = _STRING_ESCAPE.sub(lambda m: _ESCAPED.get(m[1]) or bytes([int(m[1], 16)]), quoted)
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ParseError(error_line(f"{filename}:{_position(data, offset)}",
                                    f"a quoted name or string whose escaped bytes are not UTF-8 (byte {e.start} is "
                                    f"{raw[e.start]:#04x}); names must be UTF-8 text")) from None


def _check_rank(data: bytes, codes: np.ndarray, counted: np.ndarray, comments: np.ndarray, filename: str) -> None:
    """Refuse a dimension list (`1x?x8x`..., `[4]x4x` in a scalable vector) of more than MAX_RANK sizes.

    A list is a run of digits, '?', 'x' and square brackets in the text read
    as MLIR's lexer reads it: the whitespace and comments between its tokens
    dropped (`1 x 2 x f32` and `1x//\r2xf32` are lists too).
    """
    kept = np.flatnonzero(~comments & ~_WHITESPACE[codes])
    tokens = codes[kept]
    dimension = _DIMENSION_CHARS[tokens] & counted[kept]
    size_end = np.zeros(len(tokens), bool)  # an 'x' right after a size
    size_end[1:] = (tokens[1:] == ord("x")) & dimension[:-1] & _SIZE_LAST[tokens[:-1]]
    run = np.cumsum(~dimension)
    sizes = np.bincount(run[size_end], minlength=1) if size_end.any() else np.zeros(1, np.int64)
    if sizes.max() > MAX_RANK:
        start = kept[min(int(np.argmax(run == np.argmax(sizes))) + 1, len(kept) - 1)]
        raise ParseError(error_line(
            f"{filename}:{_position(data, int(start))}",
            f"a shape with more than {MAX_RANK} dimensions; hlopt refuses it because MLIR parses dimension "
            "lists in quadratic time"))


def _open_brackets(steps: np.ndarray) -> np.ndarray:
    """Brackets open after each byte: the walk of the steps clamped at zero (S_i - min(0, min_j<=i S_j))."""
    walk = np.cumsum(steps, dtype=np.int32)
    return walk - np.minimum.accumulate(np.minimum(walk, 0))


def _check_aliases(data: bytes, codes: np.ndarray, skipped: np.ndarray, depth: np.ndarray, filename: str,
                   nesting: str) -> None:
    """Refuse an alias, or a use of one, that nests deeper than MAX_NESTING."""
    found = [(m.start(), m.group(1), bool(m.group(2))) for m in _ALIAS.finditer(data) if not skipped[m.start()]]
    if not found:
        return
    offsets = np.array([offset for offset, _, _ in found])
    defines = np.array([define for _, _, define in found]) & (depth[offsets] == 0)
    if not defines.any():
        return
    # a definition ends with the first line end ('\n' or '\r') after it with no bracket open
    line_ends = np.append(np.flatnonzero(_LINE_ENDS[codes] & (depth == 0)), len(codes))
    starts = offsets[defines]
    ends = line_ends[np.searchsorted(line_ends, starts)]
    deepest = np.maximum.reduceat(np.append(depth, 0), np.stack([starts, ends]).T.ravel())[::2]
    definitions = {found[i][1]: _Alias(int(start), int(end), int(d))
                   for i, start, end, d in zip(np.flatnonzero(defines), starts, ends, deepest)}
    by_start = sorted(definitions.values(), key=lambda a: a.start)
    def_starts = [a.start for a in by_start]
    top: list[tuple[int, bytes, int]] = []
    for (offset, name, _), define in zip(found, defines):
        if define:
            continue
        at = bisect.bisect_right(def_starts, offset) - 1
        if at >= 0 and offset < by_start[at].end:
            by_start[at].uses.append((int(depth[offset]), name))  # a definition starts with no bracket open
        else:
            top.append((offset, name, int(depth[offset])))
    full = _alias_depths(definitions)
    for alias in by_start:
        if full[id(alias)] > MAX_NESTING:
            raise _too_deep(data, filename, alias.start, f"this alias holds {nesting}")
    for offset, name, open_brackets in top:
        if name in definitions and open_brackets + full[id(definitions[name])] > MAX_NESTING:
            raise _too_deep(data, filename, offset, nesting)


def _alias_depths(aliases: dict[bytes, _Alias]) -> dict[int, int]:
    """How deep each alias definition nests with the aliases it uses, by id.

    A depth-first walk with an explicit stack (alias chains are as long as the
    input); a cycle, which MLIR rejects, counts its back edge as flat.
    """
    full: dict[int, int] = {}
    expanded: set[int] = set()
    for root in aliases.values():
        stack = [root]
        while stack:
            alias = stack[-1]
            if id(alias) in full:
                stack.pop()
            elif id(alias) not in expanded:
                expanded.add(id(alias))
                stack.extend(aliases[name] for _, name in alias.uses
                             if name in aliases and id(aliases[name]) not in expanded)
            else:
                stack.pop()
                full[id(alias)] = max([alias.deepest] + [
                    depth + full.get(id(aliases[name]), 0) for depth, name in alias.uses if name in aliases])
    return full


def _position(data: bytes, offset: int) -> str:
    """`line:col` of a byte offset, both from 1."""
    line, line_start = data.count(b"\n", 0, offset) + 1, data.rfind(b"\n", 0, offset)
    return f"{line}:{offset - line_start}"


def _too_deep(data: bytes, filename: str, offset: int, what: str) -> ParseError:
    return ParseError(error_line(
        f"{filename}:{_position(data, offset)}",
        f"{what}; hlopt refuses input this deep because MLIR's parser and XLA's compiler would overflow the stack"))


def decode_source(data: bytes, filename: str = "-") -> str:
    """The MLIR text in `data`; ParseError for bytecode and for bytes that are not UTF-8."""
    if data.startswith(BYTECODE_MAGIC):
        raise ParseError(error_line(filename, "MLIR bytecode is not accepted here; give the module as text"))
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ParseError(error_line(filename, f"not UTF-8 text (byte {e.start} is {data[e.start]:#04x})")) from None


def parse_source(source: str | bytes, filename: str = "-") -> ir.Module:
    """Parse MLIR text from a user into the hlopt context, after `check_text`; errors name `filename`."""
    if isinstance(source, bytes):
        source = decode_source(source, filename)
    check_text(source, filename)
    with get_context(), source_name(filename):
        try:
            return ir.Module.parse(source)
        except ir.MLIRError as e:
            error = mlir_pipeline_error(e)
            raise ParseError(error.args[0], error.notes) from None
