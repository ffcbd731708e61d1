"""The function-transform driver (`hlopt.passes.rewrite.transform`) that jet-expand, vjp-expand and
check-key-reuse plug into: rule lookup, walking, reach, liveness, one-shot rewrites, the module."""

from __future__ import annotations

import pytest

from hlopt.compiler.program import parse_module
from hlopt.passes.rewrite import transform
from hlopt.passes.base import PassError
from hlopt.passes.analyses.check_key_reuse import KeyReuseAnalysis
from hlopt.passes.autodiff.jet_expand import ModuleJet
from hlopt.passes.mlir import get_context, ir, stablehlo
from hlopt.passes.autodiff.vjp_expand import ModuleVjp
from hlopt.passes.ir.walk import call_target, walk_ops

LOOP = """
func.func @f(%x: tensor<f32>, %c: tensor<f32>, %n: tensor<i32>) -> (tensor<i32>, tensor<f32>, tensor<f32>, tensor<f32>) {
  %zero = stablehlo.constant dense<0> : tensor<i32>
  %one = stablehlo.constant dense<1.0> : tensor<f32>
  %r:4 = stablehlo.while(%i = %zero, %a = %x, %b = %one, %k = %c) : tensor<i32>, tensor<f32>, tensor<f32>, tensor<f32>
    cond {
      %p = stablehlo.compare LT, %i, %n : (tensor<i32>, tensor<i32>) -> tensor<i1>
      stablehlo.return %p : tensor<i1>
    } do {
      %s = stablehlo.sine %a : tensor<f32>
      %m = stablehlo.multiply %b, %a : tensor<f32>
      %i1 = stablehlo.add %i, %i : tensor<i32>
      stablehlo.return %i1, %s, %m, %k : tensor<i32>, tensor<f32>, tensor<f32>, tensor<f32>
    }
  return %r#0, %r#1, %r#2, %r#3 : tensor<i32>, tensor<f32>, tensor<f32>, tensor<f32>
}
"""

BRANCH = """
func.func @f(%x: tensor<f32>, %y: tensor<f32>, %p: tensor<i1>) -> (tensor<f32>, tensor<f32>, tensor<i32>) {
  %r:3 = "stablehlo.if"(%p) ({
    %s = stablehlo.sine %x : tensor<f32>
    %j = stablehlo.constant dense<1> : tensor<i32>
    stablehlo.return %s, %y, %j : tensor<f32>, tensor<f32>, tensor<i32>
  }, {
    %j = stablehlo.constant dense<2> : tensor<i32>
    stablehlo.return %y, %y, %j : tensor<f32>, tensor<f32>, tensor<i32>
  }) : (tensor<i1>) -> (tensor<f32>, tensor<f32>, tensor<i32>)
  return %r#0, %r#1, %r#2 : tensor<f32>, tensor<f32>, tensor<i32>
}
"""

DEAD = """
func.func @f(%x: tensor<f32>) -> tensor<f32> {
  %dead = stablehlo.cosine %x : tensor<f32>
  %deader = stablehlo.negate %dead : tensor<f32>
  %live = stablehlo.sine %x : tensor<f32>
  %m = stablehlo.custom_call @effect(%x) : (tensor<f32>) -> tensor<f32>
  %r:2 = stablehlo.while(%a = %live, %b = %x) : tensor<f32>, tensor<f32>
    cond {
      %p = stablehlo.compare LT, %a, %b : (tensor<f32>, tensor<f32>) -> tensor<i1>
      stablehlo.return %p : tensor<i1>
    } do {
      %unused = stablehlo.exponential %a : tensor<f32>
      stablehlo.return %a, %b : tensor<f32>, tensor<f32>
    }
  return %r#0 : tensor<f32>
}
"""

FUNCS = """
func.func @f(%x: tensor<f32>) -> tensor<f32> {
  %y = stablehlo.custom_call @ann(%x) : (tensor<f32>) -> tensor<f32>
  %z = func.call @g(%y) : (tensor<f32>) -> tensor<f32>
  return %z : tensor<f32>
}
func.func private @g(%x: tensor<f32>) -> tensor<f32> {
  %y = stablehlo.custom_call @ann(%x) : (tensor<f32>) -> tensor<f32>
  %z = stablehlo.custom_call @other(%y) : (tensor<f32>) -> tensor<f32>
  return %z : tensor<f32>
}
func.func private @ext(%x: tensor<f32>) -> tensor<f32>
"""


def parse(text: str) -> ir.Module:
    return parse_module(text)


def func_block(module: ir.Module, name: str = "f") -> ir.Block:
    for op in module.body.operations:
        if ir.StringAttr(op.attributes["sym_name"]).value == name:
            return op.regions[0].blocks[0]
    raise KeyError(name)


def op_named(module: ir.Module, name: str) -> ir.Operation:
    (op,) = walk_ops(module.operation, name)
    return op


def test_rule_table_looks_custom_calls_up_by_target_then_by_name():
    table = transform.RuleTable(by_name={"stablehlo.custom_call": "any call", "stablehlo.sine": "sine"},
                                by_target={"ann": "annotation"})
    module = parse(FUNCS + """
func.func @h(%x: tensor<f32>) -> tensor<f32> {
  %s = stablehlo.sine %x : tensor<f32>
  %c = stablehlo.cosine %s : tensor<f32>
  return %c : tensor<f32>
}""")
    found = {(op.name, call_target(op)): table.lookup(op) for op in walk_ops(module.operation)
             if op.name.startswith("stablehlo.")}
    assert found == {("stablehlo.custom_call", "ann"): "annotation", ("stablehlo.custom_call", "other"): "any call",
                     ("stablehlo.sine", None): "sine", ("stablehlo.cosine", None): None}
    assert transform.RuleTable({"stablehlo.sine": 1}).lookup(op_named(module, "func.call")) is None


def test_walk_hands_each_op_and_its_successor_in_order_and_returns_the_terminator_operands():
    module = parse(DEAD)
    block = func_block(module)
    seen = []
    returned = transform.walk(block, lambda op, after: seen.append((op.name, after.name)))
    names = [op.name for op in transform.block_ops(block)]
    assert seen == list(zip(names[:-1], names[1:]))
    assert names[-1] == "func.return"
    assert returned == list(transform.block_ops(block)[-1].operands)


def test_walk_visits_the_ops_taken_before_the_first_visit_when_a_visit_replaces_its_op():
    module = parse(DEAD)
    block = func_block(module)
    before = [op.name for op in transform.block_ops(block)]
    visited: list[str] = []

    def visit(op: ir.Operation, after: ir.Operation) -> None:
        visited.append(op.name)
        if op.name == "stablehlo.sine":
            with ir.InsertionPoint(after), op.location:
                new = stablehlo.CosineOp(op.operands[0])
            op.results[0].replace_all_uses_with(new.result)
            op.erase()

    with get_context():
        transform.walk(block, visit)
    assert visited == before[:-1]  # not the cosine the visit built
    after = [op.name for op in transform.block_ops(block)]
    assert after == [n if n != "stablehlo.sine" else "stablehlo.cosine" for n in before]


def test_reach_through_a_loop_is_a_fixpoint_over_its_body():
    module = parse(LOOP)
    x, c, n = func_block(module).arguments
    loop = op_named(module, "stablehlo.while")
    # %a starts from x; %b starts as a constant but multiplies %a in the body; the counter
    # is an integer; %k is carried unchanged from c, which is not known
    assert transform.loop_carried(loop, lambda v: v == x) == [False, True, True, False]
    assert transform.loop_carried(loop, lambda v: v == c) == [False, False, False, True]
    assert transform.loop_carried(loop, lambda v: v == n) == [False] * 4


def test_reach_through_branches_and_captures():
    module = parse(BRANCH)
    x, y, p = func_block(module).arguments
    branch = op_named(module, "stablehlo.if")
    assert transform.branch_carried(branch, lambda v: v == x) == [True, False, False]
    assert transform.branch_carried(branch, lambda v: v == y) == [True, True, False]
    assert transform.captures(branch, lambda v: v == x) and not transform.captures(branch, lambda v: v == p)
    assert transform.uses_any(branch, lambda v: v == p)
    assert transform.reaches(branch.regions[1].blocks[0], [], lambda v: v == y) == [True, True, False]


def test_live_values_are_what_an_impure_op_needs():
    module = parse(DEAD)
    block = func_block(module)
    x = block.arguments[0]
    ops = {op.name: op for op in transform.block_ops(block)}
    live = transform.live_values(block, transform.is_pure_op)
    assert x in live and ops["stablehlo.sine"].results[0] in live
    assert ops["stablehlo.cosine"].results[0] not in live


@pytest.mark.parametrize("nested", [False, True])
def test_erase_dead_erases_pure_unused_ops_last_first_and_nested_blocks_on_request(nested):
    module = parse(DEAD)
    transform.erase_dead(func_block(module), lambda op: transform.is_pure_op(op) and not op.regions, nested)
    names = [op.name for op in walk_ops(module.operation)]
    assert "stablehlo.cosine" not in names and "stablehlo.negate" not in names
    assert "stablehlo.custom_call" in names and "stablehlo.while" in names and "stablehlo.sine" in names
    assert ("stablehlo.exponential" in names) != nested


class Recorder(transform.ModuleTransform):
    pass_name = "test-pass"
    annotation = "ann"

    def __init__(self, module):
        super().__init__(module)
        self.expanded: list[str] = []

    def expand_annotation(self, op):
        self.expanded.append(ir.StringAttr(op.parent.attributes["sym_name"]).value)


def test_module_transform_expands_each_function_once_however_reached():
    module = parse(FUNCS)
    with get_context():
        t = Recorder(module.operation)
        t.expand_annotations(t.funcs["g"])
        t.expand_all()
        t.expand_annotations(t.funcs["g"])
    assert t.expanded == ["g", "f"]


def test_module_transform_generates_once_per_key_and_names_copies_apart():
    module = parse(FUNCS)
    built = []
    with get_context():
        t = Recorder(module.operation)
        first = t.generate(("g", 1), lambda: built.append(1) or t.new_function("g", "g_copy", False)[0])
        again = t.generate(("g", 1), lambda: built.append(2) or "unused")
        other = t.generate(("g", 2), lambda: t.new_function("g", "g_copy", True)[0])
    assert (first, again, other, built) == ("g_copy", "g_copy", "g_copy_1", [1])
    assert t.signature("g_copy_1") == t.signature("g")
    assert "g_copy_1" in t.names and "g_copy" in str(module)


@pytest.mark.parametrize("name, message", [("missing", "test-pass: no function @missing in the module"),
                                           ("ext", "test-pass: @ext is a declaration without a body")])
def test_module_transform_refuses_a_function_it_cannot_read(name, message):
    with get_context():
        t = Recorder(parse(FUNCS).operation)
        with pytest.raises(PassError, match=message):
            t.signature(name)


def test_the_three_passes_are_plug_ins_of_the_driver():
    module = parse(FUNCS)
    with get_context():
        plugins = [ModuleJet(module.operation), ModuleVjp(module.operation),
                   KeyReuseAnalysis(module.operation, False)]
    assert all(isinstance(p, transform.ModuleTransform) for p in plugins)
    assert [p.pass_name for p in plugins] == ["jet-expand", "vjp-expand", "check-key-reuse"]
    assert [p.annotation for p in plugins] == ["hlopt.jet", "hlopt.vjp", ""]
    assert "ext" in plugins[0].funcs and "ext" not in plugins[2].funcs  # a declaration is an unknown call
