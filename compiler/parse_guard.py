"""Parsing MLIR text from users: refuse what would crash or stall MLIR's parser, before it runs.

MLIR's parser recurses once per level of nesting (a type inside a type, an
attribute inside an attribute, an op's region inside another op's region, a
location inside a location) on the C stack, and so do the printer, the
verifier and the passes after it. On the 8 MiB main-thread stack of Linux,
parsing and printing died with SIGSEGV at about 3,800 nested regions,
5,700 nested dictionaries, 6,500 nested arrays and 15,000 nested types
(measured with jaxlib 0.10.2; `test/python/test_hostile_ir.py` has the
search). A dimension list (`tensor<1x1x...xf32>`) takes time quadratic in
its length: 16,000 sizes take seconds, 100,000 minutes.

XLA:CPU's compiler recurses too: it died at 203 nested `stablehlo.while`
or `stablehlo.if` regions.

`check_text` scans the text once, in linear time, and refuses
- more than `MAX_NESTING` brackets (`(`, `[`, `{`, `<`) open at once, a
  seventh of the lowest depth that crashed the parser;
- more than `MAX_REGION_NESTING` braces open at once (regions and
  dictionaries), half the depth that crashed XLA;
- a dimension list of more than `MAX_RANK` sizes (numpy allows 64 dimensions).
Real programs stay far below: a jax module with nested loops, callsite
locations and dictionary attributes nests a few dozen brackets deep.

`parse_source` checks, then parses; every refusal is one line,
`file:line:col: error: ...`. MLIR bytecode is not accepted from users: its
reader does not recurse, but nothing can measure a parsed module's nesting
without recursing, so a deep one would crash whatever touched it next.
"""

from __future__ import annotations

import re

from hlopt.compiler.pipeline import format_mlir_error
from hlopt.passes.base import shorten
from hlopt.passes.mlir import get_context, ir

MAX_NESTING = 512
MAX_REGION_NESTING = 100
MAX_RANK = 256

BYTECODE_MAGIC = b"ML\xefR"

# Strings and comments (skipped whole), arrows and >= (not brackets), and brackets.
_TOKENS = re.compile(r'"(?:[^"\\\n]|\\.)*"?|//[^\n]*|->|>=|[(\[{<]|[)\]}>]')
_OPENERS = frozenset("([{<")
_CLOSERS = frozenset(")]}>")
# MAX_RANK + 1 sizes in a row, starting where a dimension list can start.
_LONG_DIMENSIONS = re.compile(r"(?<![0-9?x])(?:(?:[0-9]++|\?)x){%d}" % (MAX_RANK + 1))


class ParseError(ValueError):
    """User text that hlopt refuses to parse or MLIR cannot parse; one line per error, with the location."""


def _position(text: str, offset: int) -> str:
    line = text.count("\n", 0, offset) + 1
    return f"{line}:{offset - text.rfind(chr(10), 0, offset)}"


def check_text(text: str, filename: str = "-") -> None:
    """Raise ParseError if `text` nests deeper than MAX_NESTING (MAX_REGION_NESTING braces) or has a
    dimension list longer than MAX_RANK."""
    depth = braces = 0
    for match in _TOKENS.finditer(text):
        token = match.group()
        if token in _OPENERS:
            depth += 1
            braces += token == "{"
            if depth > MAX_NESTING or braces > MAX_REGION_NESTING:
                what = (f"{MAX_NESTING} levels of nesting (types, attributes, regions, locations)"
                        if depth > MAX_NESTING else f"{MAX_REGION_NESTING} nested regions or dictionaries")
                raise ParseError(
                    f"{filename}:{_position(text, match.start())}: error: more than {what}; hlopt refuses "
                    "input this deep because MLIR's parser and XLA's compiler would overflow the stack"
                )
        elif token in _CLOSERS:
            depth -= depth > 0
            braces -= token == "}" and braces > 0
    long = _LONG_DIMENSIONS.search(text)
    if long:
        raise ParseError(
            f"{filename}:{_position(text, long.start())}: error: a shape with more than {MAX_RANK} dimensions; "
            "hlopt refuses it because MLIR parses dimension lists in quadratic time"
        )


def decode_source(data: bytes, filename: str = "-") -> str:
    """The MLIR text in `data`; ParseError for bytecode and for bytes that are not UTF-8."""
    if data.startswith(BYTECODE_MAGIC):
        raise ParseError(f"{filename}: error: MLIR bytecode is not accepted here; give the module as text")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ParseError(f"{filename}: error: not UTF-8 text (byte {e.start} is {data[e.start]:#04x})") from None


def parse_source(source: str | bytes, filename: str = "-") -> ir.Module:
    """Parse MLIR text from a user into the hlopt context, after `check_text`; errors name `filename`."""
    if isinstance(source, bytes):
        source = decode_source(source, filename)
    check_text(source, filename)
    with get_context():
        try:
            return ir.Module.parse(source)
        except ir.MLIRError as e:
            raise ParseError(shorten(re.sub(r"^-:", f"{filename}:", format_mlir_error(e), flags=re.M))) from None
