"""The pattern driver (`hlopt.passes.rewrite.patterns`): a rewrite is one rule in one pattern set."""

from __future__ import annotations

from typing import ClassVar

import pytest

from hlopt.compiler.program import parse_module
from hlopt.passes.ir.walk import walk_ops
from hlopt.passes.mlir import get_context, ir, stablehlo
from hlopt.passes.base import PassError
from hlopt.passes.rewrite.patterns import ERASE, MAX_WALKS, Pattern, PatternPass, PatternSet, Plan
from hlopt.passes.xla_cpu.dot_operand_order import DotOperandOrder

# -(-x) and a dot_general whose result is transposed to swap its free dimensions
PROGRAM = """
func.func @main(%x: tensor<8x3xf32>, %y: tensor<8x5xf32>) -> (tensor<8x3xf32>, tensor<5x3xf32>) {
  %n = stablehlo.negate %x : tensor<8x3xf32>
  %nn = stablehlo.negate %n : tensor<8x3xf32>
  %d = stablehlo.dot_general %x, %y, contracting_dims = [0] x [0] : (tensor<8x3xf32>, tensor<8x5xf32>) -> tensor<3x5xf32>
  %t = stablehlo.transpose %d, dims = [1, 0] : (tensor<3x5xf32>) -> tensor<5x3xf32>
  return %nn, %t : tensor<8x3xf32>, tensor<5x3xf32>
}
"""


def _negated(v: ir.Value) -> list[ir.Value] | None:
    """[x] when `v` is `-x`, else None."""
    negate = isinstance(v, ir.OpResult) and v.owner.name == "stablehlo.negate"
    return [v.owner.operation.operands[0]] if negate else None


# the scratch rule: one line
DOUBLE_NEGATE = PatternSet(Pattern("stablehlo.negate", lambda op: _negated(op.operands[0])))


def _names(module: ir.Module) -> list[str]:
    return [op.name for op in walk_ops(module.operation)]


def test_a_one_line_rule_in_a_scratch_set_rewrites_and_erases_what_fed_only_the_op():
    module = parse_module(PROGRAM)
    with get_context():
        replaced = DOUBLE_NEGATE.apply(module.operation)
    assert len(replaced) == 1 and "stablehlo.negate" not in _names(module)
    returned = list(module.body.operations[0].regions[0].blocks[0].operations)[-1]
    assert returned.operands[0] == module.body.operations[0].regions[0].blocks[0].arguments[0]


def test_a_rule_added_to_a_copy_of_a_tuning_pass_set_runs_beside_the_pass_rules():
    class Scratch(PatternPass):
        name: ClassVar[str] = "scratch-tuning"
        platforms: ClassVar[tuple[str, ...]] = ("cpu",)
        PATTERNS: ClassVar[PatternSet] = DotOperandOrder.PATTERNS + DOUBLE_NEGATE

    module = parse_module(PROGRAM)
    with get_context():
        Scratch().apply(module.operation)
    names = _names(module)
    assert "stablehlo.negate" not in names  # the scratch rule
    assert "stablehlo.transpose" not in names  # the pass's own rule
    (dot,) = walk_ops(module.operation, "stablehlo.dot_general")
    args = module.body.operations[0].regions[0].blocks[0].arguments
    assert list(dot.operands) == [args[1], args[0]]
    # the pass's own set is unchanged
    assert [p.names for p in DotOperandOrder.PATTERNS.patterns] == [("stablehlo.transpose",)]


def test_the_first_rule_that_matches_wins_and_a_rule_that_gives_none_leaves_the_op():
    seen: list[str] = []

    def refuse(op: ir.Operation) -> None:
        seen.append("refuse")
        return None

    def take(op: ir.Operation) -> list[ir.Value]:
        seen.append("take")
        return [op.operands[0]]

    def never(op: ir.Operation) -> list[ir.Value]:
        raise AssertionError("a later rule ran after one matched")

    module = parse_module(PROGRAM)
    with get_context():
        PatternSet(Pattern(("stablehlo.transpose", "stablehlo.negate"), refuse), Pattern("stablehlo.negate", take),
                   Pattern("stablehlo.negate", never)).apply(module.operation)
    # two negates and a transpose offered to `refuse`; the negates then to `take`
    assert seen.count("refuse") == 3 and seen.count("take") == 2
    assert "stablehlo.transpose" in _names(module) and "stablehlo.negate" not in _names(module)


def test_without_erase_feeders_only_the_replaced_ops_go():
    module = parse_module(PROGRAM)
    with get_context():
        PatternSet(Pattern("stablehlo.negate", lambda op: _negated(op.operands[0])),
                   erase_feeders=False).apply(module.operation)
    # the outer negate replaced by the inner one's result: the inner one stays, erased by nothing
    assert _names(module).count("stablehlo.negate") == 1


def test_erase_removes_an_unused_op():
    module = parse_module(PROGRAM.replace("return %nn, %t", "return %x, %t"))
    with get_context():
        PatternSet(Pattern("stablehlo.negate", lambda op: ERASE if not list(op.results[0].uses) else None)
                   ).apply(module.operation)
    assert "stablehlo.negate" not in _names(module)


def _cancelled_with_its_reader(op: ir.Operation) -> list[None] | None:
    """For -x read by a negate: that negate's uses take x, and the op gives None (its reader rewritten)."""
    use = next(iter(op.results[0].uses), None)
    if use is None or use.owner.name != "stablehlo.negate":
        return None
    use.owner.result.replace_all_uses_with(op.operands[0])
    return [None]


def test_a_rule_that_rewrote_the_readers_of_a_result_gives_none_and_they_go_with_the_op():
    module = parse_module(PROGRAM)
    with get_context():
        replaced = PatternSet(Pattern("stablehlo.negate", _cancelled_with_its_reader),
                              erase_feeders=False).apply(module.operation)
    assert len(replaced) == 1 and "stablehlo.negate" not in _names(module)
    block = module.body.operations[0].regions[0].blocks[0]
    assert list(block.operations)[-1].operands[0] == block.arguments[0]


def test_none_for_a_result_an_op_without_results_still_reads_is_an_error_naming_it():
    module = parse_module(PROGRAM)
    outer = lambda op: [None] if isinstance(op.operands[0], ir.OpResult) else None  # noqa: E731
    with get_context(), pytest.raises(ValueError, match="gave None for a result that func.return still reads"):
        PatternSet(Pattern("stablehlo.negate", outer)).apply(module.operation)


def test_a_rule_error_reaches_the_caller():
    def refuse(op: ir.Operation) -> None:
        raise PassError("scratch: refused", op.location)

    module = parse_module(PROGRAM)
    with get_context(), pytest.raises(PassError, match="scratch: refused"):
        PatternSet(Pattern("stablehlo.transpose", refuse)).apply(module.operation)


def test_a_rule_that_gives_the_wrong_number_of_values_is_an_error_naming_the_op():
    module = parse_module(PROGRAM)
    with get_context(), pytest.raises(ValueError, match="stablehlo.transpose gave 2 values for an op of 1 results"):
        PatternSet(Pattern("stablehlo.transpose", lambda op: [op.operands[0], op.operands[0]])).apply(module.operation)


def _twice_negated(op: ir.Operation) -> list[ir.Value]:
    """-(-x) for the `stablehlo.abs` x: a scratch rule whose output DOUBLE_NEGATE rewrites."""
    return [stablehlo.negate(stablehlo.negate(op.operands[0]))]


ABS_PROGRAM = """
func.func @main(%x: tensor<8x3xf32>) -> tensor<8x3xf32> {
  %a = stablehlo.abs %x : tensor<8x3xf32>
  return %a : tensor<8x3xf32>
}
"""


def _scratch_pass(patterns: PatternSet | tuple[PatternSet, ...], fixpoint: bool = False) -> PatternPass:
    class Scratch(PatternPass):
        name: ClassVar[str] = "scratch-walks"
        platforms: ClassVar[tuple[str, ...]] = ("cpu",)
        PATTERNS: ClassVar[PatternSet | tuple[PatternSet, ...]] = patterns
        FIXPOINT: ClassVar[bool] = fixpoint

    return Scratch()


@pytest.mark.parametrize("patterns, fixpoint, left", [
    # one set, one walk: the negates built during the walk are not offered to it
    (PatternSet(Pattern("stablehlo.abs", _twice_negated)) + DOUBLE_NEGATE, False, 2),
    # sets applied one after another: the second walk meets what the first built
    ((PatternSet(Pattern("stablehlo.abs", _twice_negated)), DOUBLE_NEGATE), False, 0),
    # one set walked until a walk rewrites nothing
    (PatternSet(Pattern("stablehlo.abs", _twice_negated)) + DOUBLE_NEGATE, True, 0),
])
def test_a_pass_applies_its_sets_in_order_and_with_fixpoint_again_until_nothing_changes(patterns, fixpoint, left):
    module = parse_module(ABS_PROGRAM)
    with get_context():
        _scratch_pass(patterns, fixpoint).apply(module.operation)
    names = _names(module)
    assert "stablehlo.abs" not in names and names.count("stablehlo.negate") == left


def test_a_fixpoint_pass_whose_rule_rewrites_its_own_output_stops_with_an_error_naming_it():
    # |x| -> ||x|| at the |x| of the argument: one op more each walk, for ever
    grow = PatternSet(Pattern("stablehlo.abs", lambda op: None if isinstance(op.operands[0], ir.OpResult) else
                              [stablehlo.abs(stablehlo.abs(op.operands[0]))]))
    module = parse_module(ABS_PROGRAM)
    with get_context(), pytest.raises(PassError, match=f"scratch-walks: its patterns still rewrote the module "
                                                       f"after {MAX_WALKS} walks"):
        _scratch_pass(grow, fixpoint=True).apply(module.operation)


NESTED_PROGRAM = """
func.func @main(%x: tensor<8x3xf32>) -> tensor<8x3xf32> {
  %n = stablehlo.negate %x : tensor<8x3xf32>
  %nn = stablehlo.negate %n : tensor<8x3xf32>
  %e = stablehlo.exponential %nn : tensor<8x3xf32>
  return %e : tensor<8x3xf32>
}
"""


def test_a_plan_finds_an_op_whose_operand_an_earlier_rewrite_changed_where_a_set_of_ops_does_not():
    module = parse_module(NESTED_PROGRAM)
    with get_context():
        (exp,) = walk_ops(module.operation, "stablehlo.exponential")
        plan: Plan[str] = Plan()
        plan[exp] = "log"
        ops = {exp}
        found: list[tuple[bool, str | None, bool]] = []

        def planned(op: ir.Operation) -> list[ir.Value] | None:
            found.append((op in plan, plan.get(op), op in ops))
            return [stablehlo.log(op.operands[0])] if plan.get(op) == "log" else None

        (DOUBLE_NEGATE + PatternSet(Pattern("stablehlo.exponential", planned))).apply(module.operation)
    # the double negate went first, so the exponential reads %x now: the set of ops misses it
    assert found == [(True, "log", False)]
    assert "stablehlo.log" in _names(module) and "stablehlo.exponential" not in _names(module)


def test_a_plan_refuses_an_op_without_results():
    module = parse_module(PROGRAM)
    with get_context():
        (ret,) = walk_ops(module.operation, "func.return")
        with pytest.raises(ValueError, match="func.return has none"):
            Plan()[ret] = 1
