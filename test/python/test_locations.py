"""passes/ir/locations.py: parsing MLIR locations, choosing the user's frame, formatting, notes."""

from __future__ import annotations

import os

import jax
import pytest

from hlopt.passes.ir import locations
from hlopt.passes.base import PassError
from hlopt.passes.ir.locations import (
    call_chain,
    format_location,
    in_library,
    source_frames,
    source_name,
    user_frame,
)
from hlopt.passes.mlir import get_context, ir

HLOPT_FILE = os.path.join(os.path.dirname(locations.__file__), "base.py")  # a file of hlopt's own
JAX_FILE = jax.__file__


def location(text: str) -> ir.Location:
    """The location `text` parsed onto an op (as a module read from a file has it)."""
    with get_context():
        module = ir.Module.parse(f"func.func @f() {{ return {text} }}")
        (ret,) = module.body.operations[0].regions[0].blocks[0].operations
        return ret.location


@pytest.mark.parametrize("text, expected", [
    ('loc("f.py":3:4)', "f.py:3:4"),
    ('loc("f.py":3:4 to 5:6)', "f.py:3:4"),
    ('loc("jit(f)/add"("a b.py":7:1 to :9))', "a b.py:7:1"),
    ('loc(callsite("g"("in.py":2:3) at "f"("out.py":9:1)))', "in.py:2:3"),
    ('loc(callsite(callsite("f"("x.py":1:1) at "w"("w.py":5:5)) at callsite("f"("x.py":4:2) at "m"("m.py":1:1))))',
     "x.py:4:2"),
    ('loc(fused["name", "z.py":8:2])', "z.py:8:2"),
    ('loc(fused<"meta">["z.py":8:2, "y.py":1:1])', "z.py:8:2"),
    ('loc("quo\\"te.py":1:2)', 'quo"te.py:1:2'),
])
def test_innermost_frame(text, expected):
    assert format_location(location(text)) == expected


@pytest.mark.parametrize("text, expected", [
    ('loc("only a name")', "only a name"),
    ("loc(unknown)", "<unknown>"),
])
def test_no_frame(text, expected):
    loc = location(text)
    assert source_frames(loc) == ()
    assert format_location(loc) == expected
    assert call_chain(loc) == []


def test_source_frames_drop_the_first_use_of_a_cached_lowering():
    text = 'loc(callsite("outer.<locals>.g"("a.py":5:1) at callsite("outer"("a.py":9:2) at "m"("m.py":1:1))))'
    loc = location(text)
    assert source_frames(loc) == (("a.py", 5, 1), ("a.py", 9, 2), ("m.py", 1, 1))
    assert source_frames(loc, frozenset({"g"})) == (("a.py", 9, 2), ("m.py", 1, 1))


def test_library_frames_are_skipped_for_the_user_frame(tmp_path):
    user = str(tmp_path / "model.py")
    text = (f'loc(callsite("helper"("{HLOPT_FILE}":10:2) at callsite("f"("{user}":4:11 to :73) '
            f'at callsite("jit"("{JAX_FILE}":3:3) at "main"("{user}":20:1)))))')
    loc = location(text)
    assert format_location(loc) == f"{user}:4:11"
    assert call_chain(loc) == [
        f"{HLOPT_FILE}:10:2: note: in library code here",
        f"{JAX_FILE}:3:3: note: called from here",
        f"{user}:20:1: note: called from here",
    ]


def test_only_library_frames_keep_the_innermost():
    loc = location(f'loc(callsite("a"("{HLOPT_FILE}":1:2) at "b"("{JAX_FILE}":3:4)))')
    assert format_location(loc) == f"{HLOPT_FILE}:1:2"
    assert call_chain(loc) == [f"{JAX_FILE}:3:4: note: called from here"]


def test_in_library():
    assert in_library(HLOPT_FILE) and in_library(JAX_FILE)
    assert in_library(os.path.join(os.path.dirname(jax.__file__), "numpy", "x.py"))
    assert not in_library(__file__)  # tests are the user's code
    assert not in_library("model.py") and not in_library("-") and not in_library("<string>")
    assert user_frame(()) is None


def test_parsed_text_is_named_by_source_name():
    loc = location("")  # no explicit location: the parsed buffer "-"
    assert format_location(loc).startswith("-:")
    with source_name("prog.mlir"):
        assert format_location(loc) == "prog.mlir:1:18"
        error = PassError("bad", loc)
    assert str(error) == "prog.mlir:1:18: error: bad"  # resolved when raised, printed later
    assert format_location(loc).startswith("-:")


@pytest.mark.parametrize("text", [
    'loc(callsite("a"("x.py":1:2) at',  # cut short
    "loc(" * 5000 + '"x.py":1:2' + ")" * 5000,  # deeper than Python's recursion limit
])
def test_malformed_or_hostile_text_gives_no_frames(text):
    assert source_frames(text) == ()
    assert format_location(text) == "<unknown>"


def test_pass_error_without_location_is_the_message():
    error = PassError("no location")
    assert str(error) == "no location" and error.notes == [] and error.where is None


def test_pass_error_defaults_to_the_enclosing_location():
    loc = location('loc("model.py":3:4)')
    with loc.context, loc:
        assert str(PassError("inside")) == "model.py:3:4: error: inside"
