"""The op table: one entry per StableHLO/CHLO op and per custom-call target, read by jet-expand and vjp-expand.

An entry (`OpEntry`) declares what hlopt knows to differentiate an op: its family,
its Taylor rule (jet-expand), its directions rule (the op on coefficients with a
leading directions axis, for batched and collapsed jets), its reverse-mode rule
(vjp-expand), its other spellings, and why a rule is missing where one is. The
family gives the rules unless the entry names its own, as JAX's jet.py and ad.py
build theirs (`deflinear`, `defbilinear`, `def_deriv`):

    zero("stablehlo.floor")            # no coefficients, no cotangent
    linear("stablehlo.negate")         # the op on each coefficient; its transpose is the
                                       # op on the cotangent; directions: elementwise
    linear("stablehlo.slice", 0, transpose=vjp.slice_, directions=lead.slice_)
    bilinear("stablehlo.multiply")     # the Cauchy product; the cotangent times the other operand
    custom("stablehlo.divide", jet_rule=jet.divide, vjp_rule=vjp.divide)

The entries are written in two lists: `ENTRIES`, the ops', and `CALL_ENTRIES`, the custom
calls', each named by the `call_target_name` of a `stablehlo.custom_call`, with entries of the
same families:

    linear("Sharding", 0, directions=lead.identity, jet_of=jet.one_operand, vjp_rule=...)

`build` makes them the tables the passes read, `TABLE` (keyed on op names) and `CALLS` (keyed
on targets). A custom call takes its target's entry of `CALLS`; a target without one meets the
`stablehlo.custom_call` entry of `TABLE`, which refuses it by name.

An op of the derivative family is one formula in `hlopt.passes.optable.derivatives`
(f'(x), from which jet-expand solves the ODE y' = f'(x) x' and vjp-expand takes
ct f'(x)); `build` gives every formula an entry unless the table has one for it
(to add spellings or replace one rule). Every spelling of a linear-algebra meaning of
`hlopt.passes.optable.linalg` (`stablehlo.cholesky` in `TABLE`, the LAPACK targets in
`CALLS`) has an entry whose rules are those of `linalg_rules`.

The rules are the functions of this folder's rule modules (`jet_rules`, `jet_directions`,
`vjp_rules`, `linalg_rules`); a directions rule is needed by the rules that apply the
op itself to coefficients (the linear and bilinear families), the others build with
the jet builder's arithmetic, which carries the directions axis itself.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping

from hlopt.passes.autodiff import jet_directions as lead
from hlopt.passes.autodiff import jet_rules as jet
from hlopt.passes.autodiff import vjp_rules as vjp
from hlopt.passes.ir import annotation_names, builders
from hlopt.passes.mlir import ir
from hlopt.passes.optable import derivatives, linalg
from hlopt.passes.rewrite.transform import RuleTable

Transpose = Callable[[vjp.VjpBuilder, ir.Operation, ir.Value], list[vjp.Term]]


@dataclasses.dataclass(frozen=True)
class OpEntry:
    """What hlopt knows to differentiate op `name` (and its `spellings`): its `family`
    (zero, linear, bilinear, derivative, custom, none), its Taylor rule `jet`, its
    `directions` rule (None where the jet rule needs none: see the module docstring),
    its reverse-mode rule `vjp`, per missing rule ("jet", "vjp") why (`why`), and the JAX
    primitive that `hlopt.jet` bodies bind as this one op (`kept_from`: JAX lowers it to
    other ops, whose series are less accurate)."""

    name: str
    family: str
    jet: jet.Rule | None = None
    directions: lead.Apply | None = None
    vjp: vjp.Rule | None = None
    spellings: tuple[str, ...] = ()
    why: Mapping[str, str] = dataclasses.field(default_factory=dict)
    kept_from: str = ""

    @property
    def names(self) -> tuple[str, ...]:
        return (self.name, *self.spellings)


def _entry(name: str, family: str, why: Mapping[str, str] | None, **fields) -> OpEntry:
    """An entry of `family` whose rules are `fields`, but those that `why` says are missing
    (without a Taylor rule, no directions rule either)."""
    why = why or {}
    for kind in why:
        fields[kind] = None
    if "jet" in why:
        fields["directions"] = None
    return OpEntry(name, family, why=why, **fields)


def zero(name: str, *, spellings: tuple[str, ...] = ()) -> OpEntry:
    """A piecewise-constant op (or one without differentiable operands): zero Taylor
    coefficients, no cotangent."""
    return OpEntry(name, "zero", jet=jet.zero, vjp=vjp.zero, spellings=spellings)


def linear(name: str, *positions: int, transpose: Transpose = vjp.reapply, vjp_rule: vjp.Rule | None = None,
           directions: lead.Apply = lead.elementwise, jet_of: Callable[[jet.Rule], jet.Rule] | None = None,
           jet_rule: jet.Rule | None = None, spellings: tuple[str, ...] = (),
           why: Mapping[str, str] | None = None) -> OpEntry:
    """An op linear in its operands at `positions` (all if none given; the others, indices
    say, keep their primal): the op on each coefficient, through `directions` in a batched
    jet; reverse mode by `transpose(b, op, ct)` (JAX's `deflinear2`; by default the op on
    the cotangent, for an op that is its own adjoint), or the whole rule `vjp_rule`.
    `jet_of` wraps the linear Taylor rule (reductions and scatters are linear for some
    bodies only); `jet_rule` replaces it."""
    rule = jet_rule or jet.linear(*positions, directions=directions)
    return _entry(name, "linear", why, jet=jet_of(rule) if jet_of else rule, directions=directions,
                  vjp=vjp_rule or vjp.linear(transpose), spellings=spellings)


def bilinear(name: str, *, vjp_rule: vjp.Rule = vjp.bilinear, directions: lead.Apply = lead.elementwise,
             why: Mapping[str, str] | None = None) -> OpEntry:
    """An op bilinear in its two operands: the Cauchy product of the series, through
    `directions` in a batched jet; reverse mode by `vjp_rule` (by default the op of the
    cotangent and the other operand, for a symmetric elementwise op: JAX's `defbilinear`)."""
    return _entry(name, "bilinear", why, jet=jet.bilinear(directions), directions=directions, vjp=vjp_rule)


def derivative(name: str, formulas: derivatives.Table = derivatives.DERIVATIVES, *,
               jet_rule: jet.Rule | None = None, spellings: tuple[str, ...] = (), kept_from: str = "") -> OpEntry:
    """An elementwise op with the formula `formulas[name]` for f'(x): the ODE y' = f'(x) x'
    solved on series, and ct f'(x); `jet_rule` replaces the first."""
    return OpEntry(name, "derivative", jet=jet_rule or jet.derivative_rule(name, formulas),
                   vjp=vjp.derivative_rule(name, formulas), spellings=spellings, kept_from=kept_from)


def custom(name: str, *, jet_rule: jet.Rule | None = None, vjp_rule: vjp.Rule | None = None,
           spellings: tuple[str, ...] = (), why: Mapping[str, str] | None = None) -> OpEntry:
    """An op with rules of its own (piecewise ops, compositions, structure, custom calls)."""
    return _entry(name, "custom", why, jet=jet_rule, vjp=vjp_rule, spellings=spellings)


def without_rules(why: str, *names: str) -> list[OpEntry]:
    """Ops hlopt does not differentiate, each with the reason."""
    return [OpEntry(name, "none", why={"jet": why, "vjp": why}) for name in names]


def build(entries: Iterable[OpEntry], formulas: derivatives.Table = derivatives.DERIVATIVES) -> dict[str, OpEntry]:
    """Op name (every spelling) -> entry: `entries`, and a derivative entry for each formula of
    `formulas` that no entry names (an entry of `entries` keeps the formula it was made
    with). Two entries for one name are an error, and so is a formula for an op whose entry
    is not of the derivative family (the formula would never be read)."""
    table: dict[str, OpEntry] = {}

    def add(entry: OpEntry) -> None:
        for n in entry.names:
            if n in table:
                raise ValueError(f"op table: two entries for '{n}' ({table[n].family} and {entry.family}); "
                                 "keep one")
            table[n] = entry

    for entry in entries:
        add(entry)
    for name in formulas:
        entry = table.get(name)
        if entry is None:
            add(derivative(name, formulas))
        elif entry.family != "derivative":
            reason = "; ".join(sorted(set(entry.why.values()))) or "its own rules"
            raise ValueError(f"op table: '{name}' has a derivative formula (hlopt.passes.optable.derivatives) "
                             f"and a {entry.family} entry '{entry.name}' of the table ({reason}); keep one: "
                             "drop the entry to use the formula, or drop the formula")
    return table


def rules(table: Mapping[str, OpEntry], kind: str) -> dict[str, Callable]:
    """Op name -> its rule of `kind` ("jet", "directions" or "vjp"), for the ops with one."""
    return {name: getattr(e, kind) for name, e in table.items() if getattr(e, kind) is not None}


def linear_algebra(spellings: Iterable[str]) -> list[OpEntry]:
    """An entry per spelling (StableHLO op or LAPACK custom-call target) of a meaning of
    `hlopt.passes.optable.linalg`: `linalg_rules` builds the meaning's record from the op."""
    return [custom(name, jet_rule=jet.linear_algebra, vjp_rule=vjp.linear_algebra) for name in spellings]


def pass_rules(kind: str, ops: Mapping[str, OpEntry], calls: Mapping[str, OpEntry]) -> RuleTable:
    """The rules of `kind` ("jet" or "vjp") a pass reads: a custom call's by its target from
    `calls`, any other op's by its name from `ops` (whose `stablehlo.custom_call` entry
    refuses a target without an entry)."""
    return RuleTable(rules(ops, kind), rules(calls, kind))


# --- reasons for rules hlopt does not have ------------------------------------------

NOT_DIFFERENTIABLE = ("integer or boolean results, which carry no derivative: jet-expand and vjp-expand "
                      "pass such ops by")
NOT_EMITTED = "JAX does not emit it (it lowers the operation to other StableHLO ops)"
IMPLICIT_BROADCAST = "CHLO's implicitly broadcasting form, which JAX does not emit (it broadcasts explicitly)"
DYNAMIC = "a dynamic shape, which JAX emits for symbolic shapes only; hlopt's passes take static shapes"
COLLECTIVE = "communication across devices: no rule written; a collective inside a differentiated body is refused"
EFFECT = "a side effect or token: not part of the functions hlopt differentiates"
QUANTIZED = "quantized values carry no derivative"
NOT_YET = "no rule written yet; the pass names the op when it meets one"
STRUCTURE = "jet-expand's walker expands its regions (FunctionJet.STRUCTURE), not a rule of this table"


ENTRIES: list[OpEntry] = [
    # zero: piecewise constant, or no differentiable operand
    *(zero(name) for name in ("stablehlo.sign", "stablehlo.floor", "stablehlo.ceil", "stablehlo.round_nearest_afz",
                              "stablehlo.round_nearest_even", "stablehlo.compare", "stablehlo.iota",
                              "stablehlo.constant")),
    # linear
    linear("stablehlo.add", jet_rule=jet.add, vjp_rule=vjp.add),
    linear("stablehlo.subtract", jet_rule=jet.subtract, vjp_rule=vjp.subtract),
    linear("stablehlo.negate"),
    linear("chlo.conj"),
    linear("stablehlo.reduce_precision", why={"jet": NOT_YET}),
    linear("sdy.sharding_constraint", 0, directions=lead.identity),
    linear("stablehlo.convert", 0, vjp_rule=vjp.convert),
    linear("stablehlo.real", 0, transpose=lambda b, op, ct: [builders.complex_(ct, b.zeros(ct))]),
    linear("stablehlo.imag", 0, transpose=lambda b, op, ct: [builders.complex_(b.zeros(ct), builders.neg(ct))]),
    linear("stablehlo.complex", 0, 1, transpose=lambda b, op, ct: [builders.real(ct), builders.neg(builders.imag(ct))]),
    linear("stablehlo.fft", 0, why={"vjp": NOT_YET}),
    linear("stablehlo.reshape", 0,
           transpose=lambda b, op, ct: [builders.reshape(ct, builders.shape_of(op.operands[0]))]),
    linear("stablehlo.broadcast_in_dim", 0, transpose=vjp.broadcast_in_dim, directions=lead.broadcast_in_dim),
    linear("stablehlo.transpose", 0, transpose=vjp.transpose, directions=lead.transpose),
    linear("stablehlo.reverse", 0, transpose=lambda b, op, ct: [builders.reverse(ct, vjp.i64s(op, "dimensions"))],
           directions=lead.reverse),
    linear("stablehlo.slice", 0, transpose=vjp.slice_, directions=lead.slice_),
    linear("stablehlo.concatenate", transpose=vjp.concatenate, directions=lead.concatenate),
    linear("stablehlo.pad", 0, 1, vjp_rule=vjp.pad, directions=lead.pad),
    linear("stablehlo.dynamic_slice", 0, vjp_rule=vjp.dynamic_slice, directions=lead.dynamic_slice),
    linear("stablehlo.dynamic_update_slice", 0, 1, vjp_rule=vjp.dynamic_update_slice,
           directions=lead.dynamic_update_slice),
    linear("stablehlo.gather", 0, vjp_rule=vjp.gather, directions=lead.gather),
    linear("stablehlo.select", 1, 2, vjp_rule=vjp.select, directions=lead.select),
    linear("stablehlo.scatter", 0, 2, vjp_rule=vjp.scatter, directions=lead.scatter, jet_of=jet.scatter_of),
    linear("stablehlo.reduce", 0, 1, vjp_rule=vjp.reduce, directions=lead.reduce_add, jet_of=jet.reduce_like),
    linear("stablehlo.reduce_window", 0, 1, vjp_rule=vjp.reduce_window, directions=lead.reduce_window_add,
           jet_of=jet.reduce_like),
    # bilinear
    bilinear("stablehlo.multiply"),
    bilinear("stablehlo.dot_general", vjp_rule=vjp.dot_general, directions=lead.dot_general),
    bilinear("stablehlo.convolution", directions=lead.convolution, why={"vjp": NOT_YET}),
    # derivative (every other formula of derivatives.DERIVATIVES gets its entry in `build`)
    derivative("stablehlo.tan", spellings=("chlo.tan",)),
    derivative("chlo.square", jet_rule=jet.square),
    derivative("stablehlo.logistic", kept_from="logistic"),  # JAX spells it 1 / (1 + exp(-x)), NaN where exp overflows
    # piecewise, compositions, structure
    custom("stablehlo.divide", jet_rule=jet.divide, vjp_rule=vjp.divide),
    custom("stablehlo.atan2", jet_rule=jet.atan2, vjp_rule=vjp.atan2),
    custom("stablehlo.power", jet_rule=jet.power, vjp_rule=vjp.power),
    custom("stablehlo.abs", jet_rule=jet.abs_, vjp_rule=vjp.abs_),
    custom("stablehlo.remainder", jet_rule=jet.remainder, vjp_rule=vjp.remainder),
    custom("stablehlo.maximum", jet_rule=jet.maximum, vjp_rule=vjp.choose),
    custom("stablehlo.minimum", jet_rule=jet.minimum, vjp_rule=vjp.choose),
    custom("stablehlo.clamp", jet_rule=jet.clamp, vjp_rule=vjp.clamp),
    custom("stablehlo.sort", jet_rule=jet.sort, vjp_rule=vjp.sort),
    custom("chlo.top_k", vjp_rule=vjp.top_k, why={"jet": NOT_YET}),
    custom("stablehlo.optimization_barrier", vjp_rule=vjp.optimization_barrier, why={"jet": NOT_YET}),
    custom("stablehlo.while", vjp_rule=vjp.while_, why={"jet": STRUCTURE}),
    custom("stablehlo.case", vjp_rule=vjp.branches, spellings=("stablehlo.if",), why={"jet": STRUCTURE}),
    custom("func.call", vjp_rule=vjp.call, why={"jet": STRUCTURE}),
    custom("stablehlo.custom_call", jet_rule=jet.unknown_call, vjp_rule=vjp.unknown_call),  # rules by target: CALLS
    *linear_algebra(linalg.TABLE.ops),
    # no rules
    *without_rules(NOT_DIFFERENTIABLE, *(f"stablehlo.{n}" for n in (
        "and", "or", "not", "xor", "shift_left", "shift_right_arithmetic", "shift_right_logical", "popcnt",
        "count_leading_zeros", "is_finite", "partition_id", "replica_id", "rng_bit_generator")),
        "chlo.is_inf", "chlo.is_neg_inf", "chlo.is_pos_inf", "chlo.mulhi"),
    *without_rules(NOT_EMITTED, *(f"stablehlo.{n}" for n in (
        "broadcast", "dot", "einsum", "unary_einsum", "torch_index_select", "map", "tuple", "get_tuple_element",
        "rng", "batch_norm_grad", "batch_norm_inference", "batch_norm_training")),
        "chlo.constant", "chlo.constant_like", "chlo.scan", "chlo._asin_acos_kernel"),
    *without_rules(IMPLICIT_BROADCAST, *(f"chlo.broadcast_{n}" for n in (
        "add", "and", "atan2", "compare", "complex", "divide", "maximum", "minimum", "multiply", "next_after", "or",
        "polygamma", "power", "remainder", "select", "shift_left", "shift_right_arithmetic", "shift_right_logical",
        "subtract", "xor", "zeta"))),
    *without_rules(DYNAMIC, *(f"stablehlo.{n}" for n in (
        "dynamic_broadcast_in_dim", "dynamic_conv", "dynamic_gather", "dynamic_iota", "dynamic_pad",
        "dynamic_reshape", "real_dynamic_slice", "get_dimension_size", "set_dimension_size"))),
    *without_rules(COLLECTIVE, *(f"stablehlo.{n}" for n in (
        "all_gather", "all_reduce", "all_to_all", "collective_broadcast", "collective_permute", "reduce_scatter",
        "async_start", "async_done", "cross-replica-sum"))),
    *without_rules(EFFECT, *(f"stablehlo.{n}" for n in (
        "after_all", "create_token", "infeed", "outfeed", "send", "recv"))),
    *without_rules(QUANTIZED, "stablehlo.uniform_quantize", "stablehlo.uniform_dequantize"),
    *without_rules(NOT_YET, "stablehlo.select_and_scatter", "stablehlo.composite", "chlo.bessel_i1e", "chlo.zeta",
                   "chlo.next_after", "chlo.ragged_dot"),
    *without_rules("a terminator: the walkers rebuild it with its region", "stablehlo.return"),
    *without_rules("it reinterprets bits, which has no derivative", "stablehlo.bitcast_convert"),
]

TABLE: dict[str, OpEntry] = build(ENTRIES)

# The custom calls, one entry per `call_target_name`: the rules `stablehlo.custom_call` takes for it
# (`call_table` adds the LAPACK targets of the linear-algebra table).
CALL_ENTRIES: list[OpEntry] = [
    custom(annotation_names.STOP_GRADIENT, jet_rule=jet.stop_gradient, vjp_rule=vjp.stop_gradient),
    # the partitioner's annotations: a sharding applies to the coefficients and the cotangent as
    # to the value; the shard_map boundary is crossed the other way in reverse mode
    linear("Sharding", 0, directions=lead.identity, jet_of=jet.one_operand,
           vjp_rule=vjp.one_operand(vjp.linear(vjp.reapply))),
    *(linear(name, 0, directions=lead.identity, jet_of=jet.one_operand,
             vjp_rule=vjp.one_operand(vjp.cross_shard_boundary))
      for name in ("SPMDFullToShardShape", "SPMDShardToFullShape")),
]


def call_table(entries: Iterable[OpEntry] = CALL_ENTRIES,
               linear_algebra_table: linalg.LinalgTable = linalg.TABLE) -> dict[str, OpEntry]:
    """Custom-call target -> entry: `entries`, and one for each LAPACK target of `linear_algebra_table`."""
    return build([*entries, *linear_algebra(linear_algebra_table.targets)], {})


CALLS: dict[str, OpEntry] = call_table()
