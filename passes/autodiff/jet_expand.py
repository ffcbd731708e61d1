"""`jet-expand`: Taylor-mode differentiation of StableHLO functions.

The rules per op are those of the op table (`hlopt.passes.autodiff.table`); this module is
jet-expand's plug-in on the function-transform driver (`hlopt.passes.rewrite.transform`,
which walks the blocks, caches the generated functions and finds what reaches
what): it keeps the series of every value, grows loops, branches, calls and
general reductions by their coefficients, and turns `hlopt.jet` annotations
into calls of the generated functions.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from typing import ClassVar

from hlopt.passes.ir import annotation_names, builders
from hlopt.passes.autodiff import jet_directions
from hlopt.passes.base import SYMBOL_NAME, Pass, PassError, PassOptionError, option
from hlopt.passes.ir.annotation_names import CUSTOM_JVP, LINEAR_SOLVE, STOP_GRADIENT
from hlopt.passes.autodiff.jet_rules import (Directions, Growth, JetBuilder, Series, coefficients, growth_of, has_reduction_rule, has_series,
                                    remove_stop_gradients, split_results)
from hlopt.passes.mlir import func, ir, stablehlo
from hlopt.passes.autodiff import table
from hlopt.passes.target import PORTABLE
from hlopt.passes.rewrite.patterns import Pattern, PatternSet
from hlopt.passes.rewrite.transform import (ModuleTransform, RuleTable, branch_carried, erase_dead, is_pure_op, live_values,
                                    loop_carried, uses_any, walk)
from hlopt.passes.ir.walk import CallGraph, call_target, callee_of

ANNOTATION = annotation_names.JET
# The largest order jet-expand builds: a rule's work grows as K^2 (Cauchy products) to
# K^3 (Faa di Bruno), and the annotation carries K+1 values per primal.
MAX_ORDER = 64
# The most ops jet-expand may build in one module, charged before each jet function is built
# as what the rule of each op of its source emits at its order (`rule_growth`: K for
# the linear rules, 5 K^2 for products and ODEs, K^3 / 2 for power and lgamma). The order
# cap alone does not bound the work: nested jets multiply, K^2 per level (a 7 KB module of
# three nested order-64 jets ran for minutes and died past 5 GB), and 255 lgamma ops at
# order 64 build 20 times what ops x K^2 counts.
MAX_WORK = 1 << 21
RULE_TABLE = table.pass_rules("jet", table.TABLE, table.CALLS)


def rule_growth(name: str) -> Growth:
    """How the ops jet-expand emits for op `name` grow with the order (`jet_rules.growth_of` of its rule)."""
    return growth_of(RULE_TABLE.by_name.get(name))


def _is_pure(op: ir.Operation) -> bool:
    """A StableHLO/CHLO op with results and without regions or side effects (or a jet
    marker): dead when its results are."""
    if op.name == "stablehlo.custom_call":
        return call_target(op) in (STOP_GRADIENT, CUSTOM_JVP, LINEAR_SOLVE)
    return is_pure_op(op) and not op.regions


def known_zero(ins: Sequence[Series]) -> frozenset[tuple[int, int]]:
    """The (i, k) of the series `ins` known to be zero: coefficients k >= 1 that are None,
    and (i, 0) where the primal is a constant +0 (a jet function reads it as one; not -0,
    whose sign an op such as atan2 or 1/x may read)."""
    return frozenset((i, k) for i, s in enumerate(ins) for k in range(len(s))
                     if (s[k] is None if k else _plus_zero(s[0])))


def _plus_zero(v: ir.Value) -> bool:
    value = builders.splat_constant(v)
    return value == 0 and math.copysign(1.0, value) > 0


class FunctionJet:
    """The series of every value of one function being expanded, and the block walker.

    Per-op algebra is in the op table; control flow and custom_jvp markers, which
    need the series of values outside the op or the jets of callees, are expanded here
    (`STRUCTURE`, keyed by op name, or by target for custom calls)."""

    STRUCTURE: ClassVar[RuleTable[Callable[["FunctionJet", ir.Operation, list[Series]], list[Series]]]]

    def __init__(self, module: "ModuleJet", order: int, directions: Directions | None = None,
                 linear: bool = False):
        self.module = module
        self.order = order
        self.builder = JetBuilder(order, directions, zero_primals_vanish=linear)
        self.series: dict[ir.Value, Series] = {}

    def series_of(self, value: ir.Value) -> Series:
        return self.series.get(value) or [value] + [None] * self.order

    def record(self, value: ir.Value, series: Series) -> None:
        if any(t is not None for t in series[1:]):
            self.series[value] = series

    def carries(self, value: ir.Value) -> bool:
        """Whether `value` has a series (a coefficient not known to be zero)."""
        return value in self.series

    def expand_block(self, block: ir.Block, arg_series: Sequence[Series]) -> list[Series]:
        """Add the coefficient ops of every op in `block`; the series of its terminator's operands."""
        for arg, s in zip(block.arguments, arg_series):
            self.record(arg, s)
        return [self.series_of(v) for v in walk(block, self.expand_op)]

    def expand_op(self, op: ir.Operation, after: ir.Operation) -> None:
        ins = [self.series_of(v) for v in op.operands]
        if not uses_any(op, self.carries):
            return
        if not any(builders.is_differentiable(r.type) and builders.has_uses(r) for r in op.results):
            return
        structure = self.STRUCTURE.lookup(op)
        rule = RULE_TABLE.lookup(op)
        if structure is None and rule is None:
            raise PassError(f"jet-expand: no Taylor rule for '{op.name}'", op.location)
        with ir.InsertionPoint(after), op.location:
            outs = structure(self, op, ins) if structure is not None else rule(self.builder, op, ins)
            outs = [None if s is None else self.builder.settle(s) for s in outs]
        replaced = False
        for result, s in zip(op.results, outs):
            if s is None:
                continue
            if s[0] != result:
                result.replace_all_uses_with(s[0])
                replaced = True
            self.record(s[0], s)
        if replaced:
            op.erase()

    def finish_block(self, block: ir.Block, outs: Sequence[Series], which: Sequence[int]) -> None:
        """Rebuild the terminator: the primals, then the K coefficients of each of `which`."""
        term = list(block.operations)[-1].operation
        with ir.InsertionPoint(term), term.location:
            builders.TERMINATORS[term.name]([s[0] for s in outs] + coefficients(self.builder, outs, which))
        term.erase()

    def drop_dead_results(self, block: ir.Block, live: frozenset[int]) -> None:
        """Return zeros for the results of `block` not in `live` and erase what became dead."""
        term = list(block.operations)[-1].operation
        with ir.InsertionPoint(term), term.location:
            for i, v in enumerate(list(term.operands)):
                if i not in live and not builders.is_zero_constant(v):
                    term.operands[i] = self.builder.zeros(v)
        erase_dead(block, _is_pure)

    # --- control flow -------------------------------------------------------

    def expand_while(self, op: ir.Operation, ins: list[Series]) -> list[Series]:
        """Loop state gains the coefficients of every value that may carry a series."""
        b = self.builder
        body = op.regions[1].blocks[0]
        carried = loop_carried(op, self.carries)
        which = [i for i, c in enumerate(carried) if c]
        operands = list(op.operands) + coefficients(b, ins, which)
        types = [v.type for v in operands]
        new = builders.regrown(op, operands, types, regions=2)
        builders.move_block(op.regions[0].blocks[0], new.regions[0], types)
        new_body = builders.move_block(body, new.regions[1], types)
        outs = self.expand_block(new_body, split_results(b, list(new_body.arguments), carried))
        self.finish_block(new_body, outs, which)
        return split_results(b, list(new.results), carried)

    def expand_branches(self, op: ir.Operation, ins: list[Series]) -> list[Series]:
        """case / if: every branch returns the coefficients of the results any branch differentiates."""
        blocks = [r.blocks[0] for r in op.regions]
        carried = branch_carried(op, self.carries)
        which = [i for i, c in enumerate(carried) if c]
        types = [r.type for r in op.results] + [self.builder.coefficient_type(op.results[i].type, k)
                                                for i in which for k in range(1, self.order + 1)]
        new = builders.regrown(op, list(op.operands), types, regions=len(blocks))
        for region, block in zip(new.regions, blocks):
            moved = builders.move_block(block, region, [])
            self.finish_block(moved, self.expand_block(moved, []), which)
        return split_results(self.builder, list(new.results), carried)

    def expand_call(self, op: ir.Operation, ins: list[Series]) -> list[Series]:
        """A call of the callee's jet, specialized to the coefficients known to be zero."""
        callee = callee_of(op)
        zero = known_zero(ins)
        b = self.builder
        name, zero_out = self.module.jet_function(callee, self.order, zero, op.location, directions=b.directions,
                                                  linear=b.zero_primals_vanish)
        operands = [s[0] for s in ins] + coefficients(b, ins, range(len(ins)))
        types = [r.type for r in op.results] + [b.coefficient_type(r.type, k)
                                                for r in op.results for k in range(1, self.order + 1)]
        outs = split_results(self.builder, builders.call(name, operands, types), [True] * len(op.results))
        return [[s[0]] + [None if (i, k) in zero_out else s[k] for k in range(1, self.order + 1)]
                for i, s in enumerate(outs)]

    def expand_reduction(self, op: ir.Operation, ins: list[Series]) -> list[Series]:
        """reduce / reduce_window: by the rule of its body's kind (add, multiply, max, min:
        `jet_rules`), any other body (e.g. the variadic reduction a multiply reduction
        becomes in a jet, met again by the outer jet of nested jets) by the fold of the
        body's own jet. A reduction folds its body g, associative and commutative with the
        init values as identity, over the elements; jets compose as the functions do, so
        the jet of the fold is the fold of jet(g) over the elements' series, jet(g) is
        associative and commutative, and (init, 0, ..., 0) is its identity. The op grows by
        the coefficients of its differentiable operands and results, and its body becomes
        the standard jet of g on scalars. In a batched or collapsed jet the operands are
        spread along the directions as for multiply reductions (`JetBuilder.spread`)."""
        if has_reduction_rule(op):
            return RULE_TABLE.by_name[op.name](self.builder, op, ins)
        b, K, n = self.builder, self.order, len(op.results)
        values, inits = ins[:n], ins[n:]
        if any(has_series(s) for s in inits):
            raise PassError(f"jet-expand: no Taylor rule for {op.name} with a general body and an init value "
                            "with a series", op.location)
        carried = [builders.is_differentiable(r.type) for r in op.results]
        which = [i for i, c in enumerate(carried) if c]
        operands = [s[0] for s in values] + coefficients(b, values, which)
        likes = list(op.operands[:n]) + [op.operands[i] for i in which for _ in range(K)]
        types = [op.results[i].type for i in range(n)] + [op.results[i].type for i in which for _ in range(K)]
        attributes = {}
        if b.directions is not None:
            size = b.directions.size
            operands = [b.spread(v, like, size) for v, like in zip(operands, likes)]
            types = [b.coefficient_type(t, 1) for t in types]
            attributes = jet_directions.lead_attributes(op, size)
        zeros = [builders.splat(0, inits[i][0].type) for i in which for _ in range(K)]
        new = builders.regrown(op, operands + [s[0] for s in inits] + zeros, types, regions=1)
        for name, attr in attributes.items():
            new.attributes[name] = attr
        donor = op.clone(ip=ir.InsertionPoint.current)  # the body, moved into the new op; the op may stay
        body = donor.regions[0].blocks[0]
        scalars = [a.type for a in body.arguments[:n]]
        half = scalars + [scalars[i] for i in which for _ in range(K)]
        block = new.regions[0].blocks.append(*half, *half)
        for inner in list(body.operations):
            block.append(inner.operation)
        for i in range(n):
            body.arguments[i].replace_all_uses_with(block.arguments[i])
            body.arguments[n + i].replace_all_uses_with(block.arguments[len(half) + i])
        donor.erase()
        scalar_jet = FunctionJet(self.module, K)
        args = list(block.arguments)
        for series in (split_results(scalar_jet.builder, args[:len(half)], carried)
                       + split_results(scalar_jet.builder, args[len(half):], carried)):
            scalar_jet.record(series[0], series)
        outs = scalar_jet.expand_block(block, [])
        scalar_jet.finish_block(block, outs, which)
        results = split_results(b, list(new.results), carried)
        if b.directions is not None:  # the grown op's primals carry the axis; the op's own stay
            results = [[r] + s[1:] for r, s in zip(op.results, results)]
        return results

    def expand_custom_jvp(self, op: ir.Operation, ins: list[Series]) -> list[Series]:
        """A custom_jvp function by its own rule: y' = jvp(x, x'), so the coefficients
        1..K of y are those 0..K-1 of the order-(K-1) jet of @tangents along (x, x'),
        divided by their index (a direct call of @tangents at K = 1). The primal stays
        the marker, removed with the others when every jet is built. In a batched or
        collapsed jet, the same along each direction (`_custom_jvp_directions`)."""
        _, tangents = self.module.check_custom_jvp(op)
        if self.builder.directions is not None:
            return self._custom_jvp_directions(op, ins, tangents)
        outs = [self.builder.series(v) for v in op.results]
        for j, coefficients_j in self._custom_jvp_series(op, ins, tangents).items():
            outs[j] = [op.results[j]] + coefficients_j
        return outs

    def _custom_jvp_series(self, op: ir.Operation, ins: list[Series], tangents: str) -> dict[int, list]:
        """Coefficients 1..K (None: zero) of each inexact result of the custom_jvp marker `op`
        along one direction: `ins` are standard series (no directions axis)."""
        K = self.order
        b = JetBuilder(K)
        inexact_in = [i for i, s in enumerate(ins) if builders.is_differentiable(s[0].type)]
        inexact_out = [j for j, r in enumerate(op.results) if builders.is_differentiable(r.type)]
        # (primal, K-1 coefficients) of each argument of @tangents: x, then x' = sum (j+1) x_{j+1} t^j
        args = [(s[:K], s[0]) for s in ins] + [([b.scale(ins[i][j + 1], j + 1) for j in range(K)], ins[i][0])
                                              for i in inexact_in]
        out_types = [op.results[j].type for j in inexact_out]
        primals = [b.materialize(a[0], like) for a, like in args]
        if K == 1:
            g = [[v] for v in builders.call(tangents, primals, out_types)]
        else:
            zero = frozenset((n, k) for n, (a, _) in enumerate(args) for k in range(1, K) if a[k] is None)
            name, zero_out = self.module.jet_function(tangents, K - 1, zero, op.location)
            results = builders.call(name, primals + [b.materialize(a[k], like) for a, like in args for k in range(1, K)],
                                    out_types + [t for t in out_types for _ in range(K - 1)])
            n = len(out_types)
            g = [[results[m]] + [None if (m, k) in zero_out else results[n + m * (K - 1) + k - 1] for k in range(1, K)]
                 for m in range(n)]
        return {j: [b.scale(g[m][k - 1], 1.0 / k) for k in range(1, K + 1)] for m, j in enumerate(inexact_out)}

    def _custom_jvp_directions(self, op: ir.Operation, ins: list[Series], tangents: str) -> list[Series]:
        """The custom_jvp marker `op` in a batched or collapsed jet, by its own rule, in one
        jet of @tangents along all the directions at once. y'(t) = jvp(x(t), x'(t)), and
        the rule is linear in its tangents, so t y'(t) = jvp(x(t), t x'(t)): the series of
        t x'(t), (0, x_1, 2 x_2, ..., K x_K), has a zero primal, which every direction
        shares, and the series of t y'(t) is (0, y_1, 2 y_2, ..., K y_K). So the order-K
        jet of @tangents along (x, t x') in the jet's own directions (the collapsed K-th
        included: it is linear in the inputs' K-th, as every coefficient K is) gives
        y_k as its coefficient k divided by k. Its terms are linear in the series of t x',
        which starts at order 1, so coefficient k needs those of @tangents in x to order
        k - 1 only: the body prepared for jets of one order less (`hlopt.taylor`) is exact."""
        b, K = self.builder, self.order
        inexact_in = [i for i, s in enumerate(ins) if builders.is_differentiable(s[0].type)]
        inexact_out = [j for j, r in enumerate(op.results) if builders.is_differentiable(r.type)]
        args = list(ins) + [[b.zeros(ins[i][0])] + b.scaled_derivative(ins[i])[1:] for i in inexact_in]
        zero = known_zero(args)
        name, zero_out = self.module.jet_function(tangents, K, zero, op.location, directions=b.directions,
                                                  linear=True)
        out_types = [op.results[j].type for j in inexact_out]
        results = builders.call(name, [a[0] for a in args] + coefficients(b, args, range(len(args))),
                                out_types + [b.coefficient_type(t, k) for t in out_types for k in range(1, K + 1)])
        z = split_results(b, results, [True] * len(out_types))
        outs = [b.series(v) for v in op.results]
        for m, j in enumerate(inexact_out):
            outs[j] = [op.results[j]] + [None if (m, k) in zero_out else b.scale(z[m][k], 1.0 / k)
                                         for k in range(1, K + 1)]
        return outs

    def expand_linear_solve(self, op: ir.Operation, ins: list[Series]) -> list[Series]:
        """A custom_linear_solve x = S(b), S the solve of the linear map v -> M(c, v) (the
        matvec, of constants c), by its structure: M(c(t), x(t)) = b(t) order by order is
        M(c_0, x_k) + [coefficient k of M(c(t), x(t)) without x_k] = b_k, so

            x_k = S(b_k - r_k),  r_k = coefficient k of the order-k jet of M along
                                       (c_0..c_k; x_0..x_{k-1}, 0),

        each solve with the primal's own factorization (S's constants; their series are
        not followed, as JAX's JVP rule of the solve does not follow them). In a batched
        or collapsed jet, the directions of one order are one solve with them stacked
        (the order-1 jet of S along them: S is linear in b), r_k is the jet of M in the
        jet's directions, and the collapsed K-th (a weighted sum over the directions,
        linear in b_K and r_K) is one plain solve. The primal stays the marker, a call of
        @solve once every jet is built. Where the matvec is linear in v as its jet sees it
        (its contract), this is nested jax.jvp's result; a matvec whose derivative in v
        is not its action (a stop_gradient on v) gives the implicit function of the
        matvec as written instead."""
        matvec, solve, m, s = self.module.check_linear_solve(op)
        b, K, d = self.builder, self.order, self.builder.directions
        consts, factors, rhs = ins[:m], ins[m:m + s], ins[m + s:]
        xs = [b.series(r) for r in op.results]
        if b.zero_primals_vanish and all(builders.is_zero_constant(bi[0]) for bi in rhs):  # x_0 = S(0) = 0
            for x in xs:
                x[0] = builders.splat(0, x[0].type)
        for k in range(1, K + 1):
            lead = d is not None and not (d.collapsed and k == K)
            jb = JetBuilder(k, d if d is None or not lead else Directions(d.size))
            r = [None] * len(xs)
            if any(c[j] is not None for c in consts for j in range(1, k + 1)):
                series = [c[:k + 1] for c in consts] + [x[:k] + [None] for x in xs]
                r = [y[k] for y in self._call_jet(matvec, series, jb, op.location)]
            t = [b.sub(bi[k], ri) for bi, ri in zip(rhs, r)]
            if all(v is None for v in t):
                continue
            if lead:  # the rows of order k at once: the solve of the map applied to each row
                t = [b.coefficient(ti, bi[0], k) for ti, bi in zip(t, rhs)]
                names = [self.module.rows_function(matvec, m, d.size, op.location),
                         self.module.rows_function(solve, s, d.size, op.location, at_primal=True)]
            else:
                t = [b.materialize(ti, bi[0]) if d is None else
                     builders.reshape(b.coefficient(ti, bi[0], k), builders.shape_of(bi[0])) for ti, bi in zip(t, rhs)]
                names = [matvec, solve]
            # a marker again, so that an enclosing jet differentiates the solve by this rule
            at = [bi[0] for bi in rhs] if lead else []  # the rows' solve is taken at the primal's right-hand sides
            marker = builders.regrown(op, [c[0] for c in consts] + [f[0] for f in factors] + at + t,
                                      [v.type for v in t])
            marker.attributes["called_computations"] = ir.ArrayAttr.get([ir.FlatSymbolRefAttr.get(n) for n in names])
            x_k = list(marker.results)
            if d is not None and not lead:
                x_k = [builders.reshape(v, [1, *builders.shape_of(v)]) for v in x_k]
            for x, v in zip(xs, x_k):
                x[k] = v
        return xs

    def _call_jet(self, name: str, ins: list[Series], b: JetBuilder, location: ir.Location) -> list[Series]:
        """The series of the results of `@name` along the series `ins` (of `b`'s order and
        directions): a call of its jet specialized to the coefficients known to be zero."""
        K = b.order
        zero = known_zero(ins)
        jet, zero_out = self.module.jet_function(name, K, zero, location, directions=b.directions,
                                                 linear=self.builder.zero_primals_vanish)
        results = self.module.signature(name)[1]
        values = builders.call(jet, [s[0] for s in ins] + coefficients(b, ins, range(len(ins))),
                               results + [b.coefficient_type(t, k) for t in results for k in range(1, K + 1)])
        outs = split_results(b, values, [True] * len(results))
        return [[y[0]] + [None if (i, k) in zero_out else y[k] for k in range(1, K + 1)] for i, y in enumerate(outs)]


FunctionJet.STRUCTURE = RuleTable(by_target={CUSTOM_JVP: FunctionJet.expand_custom_jvp,
                                              LINEAR_SOLVE: FunctionJet.expand_linear_solve}, by_name={
    "stablehlo.reduce": FunctionJet.expand_reduction,
    "stablehlo.reduce_window": FunctionJet.expand_reduction,
    "stablehlo.while": FunctionJet.expand_while,
    "stablehlo.case": FunctionJet.expand_branches,
    "stablehlo.if": FunctionJet.expand_branches,
    "func.call": FunctionJet.expand_call,
})


class ModuleJet(ModuleTransform):
    """Generates `@NAME_jetK` functions in one module and expands its annotations."""

    pass_name = "jet-expand"
    annotation = ANNOTATION

    def __init__(self, module: ir.Operation):
        super().__init__(module)
        self.work = 0  # ops charged so far against MAX_WORK
        self.inlined_work: dict[int, dict[str, int]] = {}  # order -> what each function's jet builds, inlined

    def charge_calls(self, name: str, order: int, location: ir.Location | None) -> None:
        """Refuse (PassError) the jet of `@name` if, once every call in it is inlined (as hlopt-default's
        `inline` and XLA do), its rules would build more than MAX_WORK ops: a function that calls another
        twice doubles that, which `charge` (once per jet function) does not count."""
        if order not in self.inlined_work:
            graph = CallGraph.of(self.module, lambda op_name: rule_growth(op_name).ops(order))
            calls, cycle = graph.post_order()
            if cycle is not None:
                raise PassError(f"jet-expand: {cycle[1]}", cycle[0].location)
            self.inlined_work[order] = graph.inlined_ops(calls)
        built = self.inlined_work[order].get(name, 0)
        if built > MAX_WORK:
            raise PassError(f"jet-expand: the order-{order} jet of @{name} would build about {built:.3g} ops once "
                            f"its calls are inlined, past the budget of {MAX_WORK} ops per module; call a function "
                            "once per loop iteration (stablehlo.while) instead of repeating calls, or lower the "
                            "order", location)

    def charge(self, src: ir.Operation, name: str, order: int, location: ir.Location | None) -> None:
        """Count the ops the jet of `@name` will build (each op's rule's growth at `order`,
        `rule_growth`) against MAX_WORK; a PassError past it."""
        ops = builders.nested_ops(src)
        built = sum(rule_growth(op.name).ops(order) for op in ops)
        self.work += built
        if self.work > MAX_WORK:
            raise PassError(f"jet-expand: the order-{order} jet of @{name} ({len(ops)} ops, after its own jets) "
                            f"would build about {built} ops, {self.work} in all, past the budget of {MAX_WORK} "
                            "ops per module; lower the order or the nesting of jets", location)

    def rows_function(self, name: str, constants: int, size: int, location: ir.Location | None,
                      at_primal: bool = False) -> str:
        """`@name`, linear in its arguments after the first `constants`, applied to each row
        of those arguments given with a leading axis of `size`: the function of (constants,
        rows) giving coefficient 1 of `@name`'s jet along `size` directions at zero there,
        the constants' series zero. With `at_primal`, the jet is taken at given values of
        those arguments, which come after the constants (a solve whose control flow reads
        its right-hand side, e.g. cg, is linear near the primal's, not at zero)."""
        return self.generate(("rows", name, constants, size, at_primal),
                             lambda: self._build_rows(name, constants, size, location, at_primal))

    def _build_rows(self, name: str, constants: int, size: int, location: ir.Location | None, at_primal: bool) -> str:
        b = JetBuilder(1, Directions(size))
        inputs, results = self.signature(name, location)
        jet, _ = self.jet_function(name, 1, frozenset((i, 1) for i in range(constants)), location,
                                   directions=b.directions)
        given = inputs[:len(inputs) if at_primal else constants]
        rows_in = given + [b.coefficient_type(t, 1) for t in inputs[constants:]]
        rows_out = [b.coefficient_type(t, 1) for t in results]
        new_name = builders.unique_symbol(self.names, f"{name}_rows{size}")
        with ir.InsertionPoint(self.body), location or ir.Location.unknown():
            fn = func.FuncOp(new_name, ir.FunctionType.get(rows_in, rows_out))
            fn.attributes["sym_visibility"] = ir.StringAttr.get("private")
            block = fn.add_entry_block()
            with ir.InsertionPoint(block):
                args = list(block.arguments)
                primals = args[:len(given)] + [b.zeros_like(t) for t in inputs[len(given):]]
                coefficients_in = [b.zeros_like(b.coefficient_type(t, 1)) for t in inputs[:constants]] + args[len(given):]
                out = builders.call(jet, primals + coefficients_in, results + rows_out)
                func.ReturnOp(out[len(results):])
        self.funcs[new_name] = fn.operation
        return new_name

    def jet_function(self, name: str, order: int, zero: frozenset = frozenset(),
                     location: ir.Location | None = None, public: bool = False,
                     live: frozenset | None = None, directions: Directions | None = None,
                     linear: bool = False) -> tuple[str, frozenset]:
        """The name of the order-`order` jet of `@name` whose coefficient arguments
        `(i, k)` in `zero` are known to be zero (k = 0: the primal argument i, which the
        function then reads as a zero constant), and the `(i, k)` of its results known zero.
        With `live` (indices into its results), the other results are returned as zeros
        and not computed. With `directions`, coefficients carry the directions axis
        (`JetBuilder.coefficient_type`). With `linear`, the function is one that JAX requires
        to be linear in the arguments whose primal is zero (a custom_jvp rule's tangents, along
        t x'(t)): there a product with a zero primal adds no terms (also where the other factor's
        coefficient is not finite) and a linear solve of zero right-hand sides is zero without a
        solve, as the contract of `custom_linear_solve` has it (an unconverged iterative solve
        from a non-zero guess is affine, not linear, and is not exempt)."""
        key = (name, order, zero, live, directions, linear)
        return self.generate(key, lambda: self._build_jet(key, location, public))

    def _build_jet(self, key: tuple, location: ir.Location | None, public: bool) -> tuple[str, frozenset]:
        name, order, zero, live, directions, linear = key
        check_order(order, location)
        src = self.function(name, location)
        self.expand_annotations(src)
        self.charge(src, name, order, location)
        inputs, results = self.signature(name)
        new_name, new = self.new_function(name, f"{name}_jet{order}", public)
        self.generated[key] = (new_name, frozenset())  # what a call of it met while building it reads

        block = new.regions[0].blocks[0]
        fj = FunctionJet(self, order, directions, linear)
        coeff_types = [fj.builder.coefficient_type(t, k) for t in inputs for k in range(1, order + 1)]
        coeffs = [block.add_argument(t, new.location) for t in coeff_types]
        arg_series = [
            [block.arguments[i]] + [None if (i, k) in zero or not builders.is_differentiable(t) else coeffs[i * order + k - 1]
                                    for k in range(1, order + 1)]
            for i, t in enumerate(inputs)
        ]
        with ir.InsertionPoint.at_block_begin(block), new.location:  # a primal known to be zero: a constant
            for i in sorted(i for i, k in zero if k == 0):
                arg_series[i][0] = builders.splat(0, inputs[i])
                block.arguments[i].replace_all_uses_with(arg_series[i][0])
                fj.record(arg_series[i][0], arg_series[i])
        outs = fj.expand_block(block, arg_series)
        zero_out = frozenset((i, k) for i, s in enumerate(outs) for k in range(1, order + 1) if s[k] is None)
        fj.finish_block(block, outs, range(len(outs)))
        if live is not None:
            fj.drop_dead_results(block, live)
        with new.context:
            new.attributes["function_type"] = ir.TypeAttr.get(ir.FunctionType.get(
                inputs + coeff_types,
                results + [fj.builder.coefficient_type(t, k) for t in results for k in range(1, order + 1)]))
        return new_name, zero_out

    def expand_annotation(self, op: ir.Operation) -> None:
        callee, order, directions = self.check_annotation(op)
        n_in = len(self.signature(callee)[0])
        b = JetBuilder(order, directions)
        zero = known_zero([[s[0]] + [None if builders.is_zero_constant(v) else v for v in s[1:]]
                           for s in split_results(b, op.operands, [True] * n_in)])
        used = live_values(op.block, _is_pure)
        live = frozenset(i for i, r in enumerate(op.results) if r in used)
        self.charge_calls(callee, order, op.location)
        name, _ = self.jet_function(callee, order, zero, op.location,
                                    live=None if len(live) == len(op.results) else live, directions=directions)
        kth_in = self._collapsed_kth(n_in, order, b)
        kth_out = self._collapsed_kth(len(op.results) // (order + 1), order, b)
        with ir.InsertionPoint(op), op.location:
            operands = [b.coefficient(v, v, order) if kth_in(i) else v for i, v in enumerate(op.operands)]
            types = [b.coefficient_type(r.type, order) if kth_out(i) else r.type for i, r in enumerate(op.results)]
            call = builders.call(name, operands, types)
            results = [builders.reshape(v, builders.shape_of(v)[1:]) if kth_out(i) else v for i, v in enumerate(call)]
        for old, new in zip(op.results, results):
            old.replace_all_uses_with(new)
        op.erase()

    @staticmethod
    def _collapsed_kth(n: int, order: int, b: JetBuilder) -> Callable[[int], bool]:
        """Whether value i of a primal-major list (n primals, then `order` coefficients
        each) is a collapsed K-th coefficient (without the directions axis at the annotation)."""
        collapsed = b.directions is not None and b.directions.collapsed
        return lambda i: collapsed and i >= n and (i - n) % order == order - 1

    def _marker_functions(self, op: ir.Operation, target: str, roles: Sequence[str]) -> tuple:
        """A marker's failure constructor, the names of its called functions (one per role)
        and their signatures, after checking `called_computations` names them."""

        def fail(message: str) -> PassError:
            return PassError(f"jet-expand: @{target} {message}", op.location)

        computations = _attribute(op.attributes, "called_computations")
        if not isinstance(computations, ir.ArrayAttr) or len(computations) != len(roles) or \
                not all(isinstance(c, ir.FlatSymbolRefAttr) for c in computations):
            raise fail(f"needs called_computations = [{', '.join('@' + r for r in roles)}]")
        names = [c.value for c in computations]
        return fail, names, [self.signature(name, op.location) for name in names]

    def check_custom_jvp(self, op: ir.Operation) -> tuple[str, str]:
        """The primal and tangent functions of a custom_jvp marker, after checking their types."""

        fail, (primal, tangents), ((p_inputs, p_results), (t_inputs, t_results)) = \
            self._marker_functions(op, CUSTOM_JVP, ("primal", "tangents"))
        operands, results = [v.type for v in op.operands], [r.type for r in op.results]
        if p_inputs != operands or p_results != results:
            raise fail(f"needs @{primal} to take its operands and give its results")
        if t_inputs != operands + [t for t in operands if builders.is_differentiable(t)] or \
                t_results != [t for t in results if builders.is_differentiable(t)]:
            raise fail(f"needs @{tangents} to take its operands and the tangents of the floating-point ones, "
                       "and give the tangents of its floating-point results")
        return primal, tangents

    def check_linear_solve(self, op: ir.Operation) -> tuple[str, str, int, int]:
        """The matvec and solve functions of a linear_solve marker and the numbers of their
        constants among its operands, after checking their types."""

        fail, (matvec, solve), ((m_inputs, m_results), (s_inputs, s_results)) = \
            self._marker_functions(op, LINEAR_SOLVE, ("matvec", "solve"))
        operands, results = [v.type for v in op.operands], [r.type for r in op.results]
        n = len(results)
        m, s = len(m_inputs) - n, len(s_inputs) - n
        if m < 0 or s < 0 or m + s + n != len(operands) or m_inputs != operands[:m] + results or \
                s_inputs != operands[m:m + s] + operands[m + s:] or s_results != results or \
                m_results != operands[m + s:]:
            raise fail(f"needs its operands to be @{matvec}'s constants, @{solve}'s constants and the right-hand "
                       f"sides, @{matvec} to take its constants and the solutions and give the right-hand sides, "
                       f"and @{solve} to take its constants and the right-hand sides and give its results")
        return matvec, solve, m, s

    def remove_markers(self) -> None:
        """Replace every custom_jvp marker by a call of its primal function, every
        linear_solve marker by a call of its solve, and every
        stop_gradient marker by its operand unless vjp-expand still needs it: what is left
        of them once the jets are built."""
        PatternSet(Pattern("stablehlo.custom_call", self._primal_call), erase_feeders=False).apply(self.module)
        remove_stop_gradients(self.module, "jet-expand")

    def _primal_call(self, op: ir.Operation) -> list[ir.Value] | None:
        """A custom_jvp marker's call of its primal function, a linear_solve marker's of its
        solve; None for any other custom call."""
        if call_target(op) == LINEAR_SOLVE:
            _, solve, m, _ = self.check_linear_solve(op)
            return builders.call(solve, list(op.operands[m:]), [r.type for r in op.results])
        if call_target(op) != CUSTOM_JVP:
            return None
        primal, _ = self.check_custom_jvp(op)
        return builders.call(primal, list(op.operands), [r.type for r in op.results])

    def check_annotation(self, op: ir.Operation) -> tuple[str, int, Directions | None]:
        """The callee, order and directions of the `hlopt.jet` annotation `op`, after
        checking its config and that its operands and results are the callee's primals
        followed by `order` coefficients per primal, of the primal's type (standard),
        with a leading axis of size R (`directions = R`), or so for coefficients
        1..K-1 and without it for the K-th (`collapsed = true`)."""

        def fail(message: str) -> PassError:
            return PassError(f"jet-expand: @{ANNOTATION} {message}", op.location)

        config = _attribute(op.attributes, "backend_config")
        if not isinstance(config, ir.DictAttr):
            raise fail("needs backend_config = {order = K : i64} (a dictionary)")
        unknown = sorted(a.name for a in config if a.name not in CONFIG_KEYS)
        if unknown:
            raise fail(f"backend_config has unknown key '{_brief(unknown[0])}' (it takes {', '.join(CONFIG_KEYS)})")
        if "order" not in config:
            raise fail("backend_config needs 'order' (backend_config = {order = K : i64})")
        order_attr = _attribute(config, "order")
        if not isinstance(order_attr, ir.IntegerAttr):
            got = "an attribute the MLIR bindings cannot read" if order_attr is None else _brief(str(order_attr))
            raise fail(f"'order' must be an integer, got {got}")
        order = order_attr.value
        check_order(order, op.location)
        computations = _attribute(op.attributes, "called_computations")
        if not isinstance(computations, ir.ArrayAttr) or len(computations) != 1 or \
                not isinstance(computations[0], ir.FlatSymbolRefAttr):
            raise fail("needs called_computations = [@f], one function")
        callee = computations[0].value
        inputs, results = self.signature(callee, op.location)
        n = len(inputs)
        if len(op.operands) != n * (order + 1):
            raise fail(f"of order {order} of @{callee} needs {n * (order + 1)} operands (the {n} primal(s), "
                       f"then {order} coefficient(s) per primal), got {len(op.operands)}")
        directions = _directions(config, order, list(op.operands[n:]), inputs, fail)
        b = JetBuilder(order, directions)
        for what, values, primal_types in (("operand", list(op.operands), inputs), ("result", list(op.results), results)):
            n = len(primal_types)
            if len(values) != n * (order + 1):
                raise fail(f"of order {order} of @{callee} needs {n * (order + 1)} {what}s (the {n} primal(s), "
                           f"then {order} coefficient(s) per primal), got {len(values)}")
            collapsed_kth = self._collapsed_kth(n, order, b)
            want = primal_types + [b.coefficient_type(t, k) for t in primal_types for k in range(1, order + 1)]
            for i, (v, t) in enumerate(zip(values, want)):
                t = primal_types[(i - n) // order] if collapsed_kth(i) else t
                if v.type != t:
                    raise fail(f"{what} {i} has type {_brief(str(v.type))}, @{callee} needs {_brief(str(t))}")
        return callee, order, directions


CONFIG_KEYS = ("order", "directions", "collapsed", "weights")


def _directions(config: ir.DictAttr, order: int, coefficients: list[ir.Value], primal_types: list[ir.Type],
                fail: Callable[[str], PassError]) -> Directions | None:
    """The directions of an annotation's config: None (standard), `directions = R`
    (batched), or `collapsed = true` with R read from coefficient 1 of the first
    primal and optional `weights = array<f64: w_1, ..., w_R>` (R >= 2)."""
    collapsed_attr = _attribute(config, "collapsed")
    if "collapsed" in config and not isinstance(collapsed_attr, ir.BoolAttr):
        raise fail("'collapsed' must be true or false")
    collapsed = "collapsed" in config and collapsed_attr.value
    weights = None
    if "weights" in config:
        attr = _attribute(config, "weights")
        if not collapsed:
            raise fail("'weights' needs collapsed = true")
        if not isinstance(attr, ir.DenseF64ArrayAttr):
            raise fail("'weights' must be array<f64: ...>, one weight per direction")
        weights = tuple(float(w) for w in attr)
        if not all(math.isfinite(w) for w in weights) or not any(weights):
            raise fail(f"'weights' must be finite and not all zero, got {_brief(str(attr))}")
    if "directions" in config:
        attr = _attribute(config, "directions")
        if collapsed:
            raise fail("takes 'directions' (a batched jet) or 'collapsed' (R read from the coefficients), not both")
        if not isinstance(attr, ir.IntegerAttr) or attr.value < 1:
            raise fail(f"'directions' must be a positive integer, got {_brief(str(attr))}")
        return Directions(attr.value)
    if not collapsed:
        return None
    if order > 1 and primal_types:
        t = ir.RankedTensorType(coefficients[0].type)
        if t.rank != ir.RankedTensorType(primal_types[0]).rank + 1:
            raise fail(f"collapsed: coefficients 1..{order - 1} need a leading directions axis, "
                       f"operand {len(primal_types)} has type {_brief(str(t))}")
        size = t.shape[0]
    else:
        size = len(weights) if weights is not None else 1
    if weights is not None and (len(weights) != size or size < 2):
        raise fail(f"collapsed: 'weights' needs one weight per direction and at least 2 ({size} direction(s), "
                   f"{len(weights)} weight(s)); scale the result for one direction")
    return Directions(size, True, weights)


def check_order(order: int, location: ir.Location | None) -> None:
    """Refuse an order outside 1..MAX_ORDER."""
    if not 1 <= order <= MAX_ORDER:
        raise PassError(f"jet-expand: the order must be between 1 and {MAX_ORDER}, got {_brief(str(order))}",
                        location)


def _attribute(attributes: ir.OpAttributeMap | ir.DictAttr, name: str) -> ir.Attribute | None:
    """The attribute `name`, or None if it is absent or unreadable (a complex dense one)."""
    try:
        return attributes[name] if name in attributes else None
    except TypeError:
        return None


def _brief(text: str, limit: int = 60) -> str:
    """`text`, cut to `limit` characters for an error message."""
    return text if len(text) <= limit else text[:limit] + "..."


@dataclasses.dataclass(frozen=True)
class JetExpand(Pass):
    """Expand `hlopt.jet` annotations into calls of generated Taylor-mode functions.

    A jet function of order K (1 <= K <= 64) takes the primals, then K plain Taylor
    coefficients (y^(k)/k!) per primal, and returns the primal results, then K
    coefficients per result. With `func=NAME order=K` it also builds `@NAME_jetK`
    from any function. Inside the jets, `hlopt.jet.stop_gradient` markers are zero
    series, `hlopt.jet.custom_jvp` markers follow their JVP rule and
    `hlopt.jet.linear_solve` markers (a `custom_linear_solve`) the structure of the
    solve, order by order from solves with the primal's factorization; at the end the
    first become their operand, the second a call of their primal function and the
    third a call of their solve.

        %r:3 = stablehlo.custom_call @hlopt.jet(%x, %x1, %x2)
                 {called_computations = [@f], backend_config = {order = 2 : i64}}
        func.func private @f(%x: tensor<f32>) -> tensor<f32> { %y = stablehlo.sine %x ... }

    becomes

        %r:3 = func.call @f_jet2(%x, %x1, %x2)
        func.func private @f_jet2(%x, %x1, %x2) {
          %y = stablehlo.sine %x          // y0
          %c = stablehlo.cosine %x
          %y1 = x1 * c                     // y1 = x1 cos(x)
          ...                              // y2 = (2 x2 cos(x) - x1 x1 sin(x)) / 2
        }
    """

    name: ClassVar[str] = "jet-expand"
    platforms: ClassVar[tuple[str, ...]] = PORTABLE
    func: str = option("", pattern=SYMBOL_NAME, what="a function name")
    order: int = option(0, low=1, high=MAX_ORDER)

    def __post_init__(self) -> None:
        if bool(self.func) != bool(self.order):
            given, missing = ("func", "order") if self.func else ("order", "func")
            raise PassOptionError(f"pass 'jet-expand': option '{given}' needs '{missing}' "
                                  "(jet-expand{func=NAME order=K})")

    def apply(self, module: ir.Operation) -> None:
        jets = ModuleJet(module)
        if self.func:
            jets.charge_calls(self.func, self.order, None)
            jets.jet_function(self.func, self.order, public=True)
        jets.expand_all()
        jets.remove_markers()
