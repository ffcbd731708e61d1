"""`xla-cpu-ynn-fusion` (opt-in, not in `hlopt-default`): a module whose reductions XLA:CPU's YNNPACK
reduce fusion runs slowly is compiled without that fusion.

The option it records reaches only programs that `hlopt.jit` or `Lowered.compile` compiles; an
hlopt operation inside plain `jax.jit` cannot set it, so `hlopt-default` leaves it out and both
paths compile with the same options. Either path can set it itself, with the same
`compiler_options={"xla_cpu_experimental_ynn_fusion_type": "LIBRARY_FUSION_TYPE_INDIVIDUAL_DOT"}`
given to `hlopt.jit` or `jax.jit` (or their `.lower(...).compile(...)`); this pass, added after
the other tuning passes (`pipeline="hlopt-default,xla-cpu-ynn-fusion"`), records it only where
the module's reductions gain.

XLA:CPU hands every floating `reduce` (add, max, min), with the
elementwise ops that feed it, to a YNNPACK reduce fusion (the XLA option
`xla_cpu_experimental_ynn_fusion_type`, by default YNNPACK's dots plus
`LIBRARY_FUSION_TYPE_REDUCE`). Whether that beats XLA's own loops depends on the
run of contiguous elements each result sums, the reduced trailing dimensions:

- short rows (2 to 8 elements, such as the sums over x, y, z of
  bench/wavefunction.py's electron coordinates): the fusion's per-row overhead
  dominates and it is slower than XLA's own loops; rows of 16 are about even;
- long rows (32 elements or more, such as a max over rows for softmax or
  logsumexp): the fusion's vectorised inner loop makes it faster;
- a sum over leading dimensions only (no trailing one summed): the fusion walks
  the operand with strided rows and is slower (`xla-cpu-sum-as-dot` makes most of
  those dot_generals before this pass runs).

`bench/xla_cpu_tuning.py` measures this on the other benchmarks' workloads;
its records are in bench/results/.

The option is one per executable, so this pass weighs the module's reductions:
it records `LIBRARY_FUSION_TYPE_INDIVIDUAL_DOT` (YNNPACK's dots kept, its reduce
fusion off) when the elements of the reductions the fusion runs slowly (rows of
at most `SHORT_ROW` elements, or leading dimensions) outweigh
`FAST_PER_SLOW` (1/4) of those of the long-row reductions it runs faster (per
element, the fusion loses several times more on a short row than it gains on a
long one, so a few short rows outweigh many long ones). Reductions
of fewer than `MIN_ELEMENTS` (4096) elements, which XLA:CPU keeps out of the fusion,
count for neither; a module with no other floating reduction is left alone.

The choice is a module attribute, `hlopt.compiler_options` (`ATTRIBUTE`), a
dictionary of XLA option names to values; the runtime (runtime/compile.py) adds
it to the compile options when it compiles for CPU, under the user's own (a
`compiler_options=` entry or an `XLA_FLAGS` flag naming the option wins). Only
the options and values of `RECORDABLE` are honoured, so a module from an
unauthenticated file cannot set others.

    module {
      func.func @main(%x: tensor<24x128x8x3xf32>) -> tensor<24x128x8xf32> {
        %s = stablehlo.reduce(%x init: %zero) applies stablehlo.add across dimensions = [3] ...

becomes

    module attributes {hlopt.compiler_options =
        {xla_cpu_experimental_ynn_fusion_type = "LIBRARY_FUSION_TYPE_INDIVIDUAL_DOT"}} {
      ...
"""

from __future__ import annotations

import math
from collections.abc import Collection
from typing import ClassVar

from hlopt.passes.ir import builders
from hlopt.passes.base import Pass
from hlopt.passes.mlir import ir
from hlopt.passes.ir.walk import walk_ops

# The module attribute that carries XLA options chosen by the tuning passes.
ATTRIBUTE = "hlopt.compiler_options"
OPTION = "xla_cpu_experimental_ynn_fusion_type"
WITHOUT_REDUCE = "LIBRARY_FUSION_TYPE_INDIVIDUAL_DOT"
# option -> the values a module may record; the runtime honours nothing else.
RECORDABLE: dict[str, tuple[str, ...]] = {OPTION: (WITHOUT_REDUCE,)}

# A reduction whose summed rows (its reduced trailing dimensions) hold at most this many elements
# runs slower in the YNNPACK fusion; one over longer rows runs faster.
SHORT_ROW = 16
# What an element of a long-row reduction weighs against one of a slow reduction.
FAST_PER_SLOW = 0.25
# XLA:CPU hands a reduction to the fusion only from this many operand elements.
MIN_ELEMENTS = 4096
_YNN_REDUCERS = ("stablehlo.add", "stablehlo.maximum", "stablehlo.minimum")


def _row(shape: list[int], dims: set[int]) -> int:
    """The elements of the contiguous run each result reduces: the product of the reduced trailing dims."""
    row = 1
    for d in reversed(range(len(shape))):
        if d not in dims:
            break
        row *= shape[d]
    return row


def ynn_weights(module: ir.Operation, leaving_out: Collection[ir.Operation] = ()) -> tuple[int, int]:
    """(elements of reductions YNNPACK's fusion runs slowly, elements of those it runs faster),
    leaving out the reductions `leaving_out` (ones a pass is about to replace)."""
    slow = fast = 0
    for op in walk_ops(module, "stablehlo.reduce"):
        if op in leaving_out or len(op.operands) != 2 or builders.reducer_kind(op) not in _YNN_REDUCERS:
            continue
        x = op.operands[0]
        if not (builders.is_differentiable(x.type) and isinstance(builders.elem_of(x), ir.FloatType)):
            continue
        shape = builders.shape_of(x)
        row = _row(shape, set(ir.DenseI64ArrayAttr(op.attributes["dimensions"])))
        size = math.prod(shape)
        if size < MIN_ELEMENTS:
            continue
        if row <= SHORT_ROW:  # a short row, or leading dimensions only (row 1)
            slow += size
        else:
            fast += size
    return slow, fast


def reduce_fusion_off(module: ir.Operation, leaving_out: Collection[ir.Operation] = ()) -> bool:
    """Whether `module`'s reductions (but `leaving_out`) are mostly ones YNNPACK's reduce fusion
    runs slowly, so that the module is compiled without it."""
    slow, fast = ynn_weights(module, leaving_out)
    return slow > 0 and slow >= FAST_PER_SLOW * fast


def record_reduce_fusion_off(module: ir.Operation) -> None:
    """Record on `module` (`ATTRIBUTE`) that XLA:CPU compiles it without YNNPACK's reduce fusion."""
    options = {}
    if ATTRIBUTE in module.attributes and isinstance(module.attributes[ATTRIBUTE], ir.DictAttr):
        options = {named.name: named.attr for named in module.attributes[ATTRIBUTE]}
    options[OPTION] = ir.StringAttr.get(WITHOUT_REDUCE)
    module.attributes[ATTRIBUTE] = ir.DictAttr.get(options)


def recorded_options(module: ir.Operation) -> tuple[tuple[str, str], ...]:
    """The XLA options `module` records (`ATTRIBUTE`), sorted; raises ValueError for an entry
    outside `RECORDABLE`, not a string, or whose name holds a NUL byte."""
    if ATTRIBUTE not in module.attributes:
        return ()
    attr = module.attributes[ATTRIBUTE]
    if not isinstance(attr, ir.DictAttr):
        raise ValueError(f"the module attribute {ATTRIBUTE} is not a dictionary: {str(attr)[:80]}")
    found: dict[str, str] = {}
    for named in attr:
        name, value = named.name, named.attr
        text = ir.StringAttr(value).value if isinstance(value, ir.StringAttr) else None
        # A name with a NUL byte reads back cut short at it: honour only a name that is the key
        # itself, once (a cut name may read as the same name as a genuine key beside it).
        if text is None or text not in RECORDABLE.get(name, ()) or name not in attr or name in found:
            raise ValueError(f"the module attribute {ATTRIBUTE} sets {name} = {str(value)[:80]}, "
                             f"which hlopt's passes never record")
        found[name] = text
    return tuple(sorted(found.items()))


class YnnFusion(Pass):
    """Turn YNNPACK's reduce fusion off where it runs slowly (opt-in: not in `hlopt-default`; run it
    after the other tuning passes).

    Backend: XLA:CPU's YNNPACK reduce fusion runs reductions over short rows or leading dimensions
    slower than XLA's own loops; benchmark: `bench/xla_cpu_tuning.py`.

    Record on the module that XLA:CPU should compile it without YNNPACK's reduce fusion (the XLA
    option `xla_cpu_experimental_ynn_fusion_type` set to `LIBRARY_FUSION_TYPE_INDIVIDUAL_DOT`) when
    its floating reductions (of 4096 elements or more) are mostly ones that fusion runs slowly: rows
    of at most 16 elements, or leading dimensions only. `hlopt.jit`'s runtime adds the option when it
    compiles for CPU; the user's own wins. Plain `jax.jit` never sees it: give it the same option in
    its `compiler_options` for the same program.

        %s = stablehlo.reduce(%x init: %zero) applies stablehlo.add across dimensions = [3]
             : (tensor<24x128x8x3xf32>, tensor<f32>) -> tensor<24x128x8xf32>

    puts on the module

        attributes {hlopt.compiler_options =
                    {xla_cpu_experimental_ynn_fusion_type = "LIBRARY_FUSION_TYPE_INDIVIDUAL_DOT"}}
    """

    name: ClassVar[str] = "xla-cpu-ynn-fusion"
    platforms: ClassVar[tuple[str, ...]] = ("cpu",)

    def apply(self, module: ir.Operation) -> None:
        if reduce_fusion_off(module):
            record_reduce_fusion_off(module)
