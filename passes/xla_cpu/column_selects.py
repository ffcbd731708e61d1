"""`xla-cpu-column-selects`: selects and and/or reduces over a few trailing index columns,
written the way XLA:CPU runs them fastest.

lower-bcoo emits the plain forms: a row mask broadcast over the index columns selects between
two index arrays (`passes/sparse/index.py`'s `where`), and an entry's columns are combined by a reduce. On
XLA:CPU:

- a select whose predicate is a row mask broadcast over the trailing (column) dim becomes, in
  the loop XLA:CPU emits, a branch per entry (LLVM's loop unswitching hoists the loop-invariant
  predicate out of the column loop), which mispredicts on irregular masks (bcoo_slice);
  one select per column has no branch. Selects of integer arrays of at most
  `MAX_COLUMNS` columns are split;
- a reduce with and/or over at most `MAX_COLUMNS` columns becomes a chain of elementwise ops,
  which XLA:CPU fuses into its consumer (a reduce is a loop of its own);
- `select(any(flags != 0), fill, idx)` broadcast over the columns (squeeze's padding of the
  entries out of range in a squeezed dim) becomes a gather from the stack `[idx, fill]` at the
  or of the flags read unsigned (clamped to 1 when not 0): pure data movement, so a program
  made of it stays under the size below which PJRT's CPU client runs a program on the calling
  thread (a compare and select per entry does not, and the hand-off to a worker thread costs
  more than the work).

The values are the same with and without this pass (test_bcoo_records checks it).
"""

from __future__ import annotations

from typing import ClassVar

from hlopt.passes.ir import builders as b
from hlopt.passes.mlir import ir
from hlopt.passes.rewrite.patterns import ERASE, Pattern, PatternPass, PatternSet

Value = ir.Value

# The most trailing columns a select is split over, or a reduce unrolled over (index columns).
MAX_COLUMNS = 8

# The init value of each reduce kind (i1 true reads as 1 or -1, by the attribute's signedness).
_IDENTITY = {"stablehlo.and": (1, -1), "stablehlo.or": (0,)}


def _owner(v: Value, name: str) -> ir.Operation | None:
    if isinstance(v, ir.OpResult) and v.owner.operation.name == name:
        return v.owner.operation
    return None


def _row_mask(pred: Value) -> Value | None:
    """`ok[...]` when `pred[..., S]` is `ok` broadcast over a new trailing dim; else None."""
    op = _owner(pred, "stablehlo.broadcast_in_dim")
    if op is None:
        return None
    ok = op.operands[0]
    rank = len(b.shape_of(ok))
    dims = list(ir.DenseI64ArrayAttr(op.attributes["broadcast_dimensions"]))
    if dims != list(range(rank)) or len(b.shape_of(pred)) != rank + 1 or b.shape_of(pred)[:rank] != b.shape_of(ok):
        return None
    return ok


def _column(v: Value, k: int) -> Value:
    """`v[..., k]`, read from the op that built `v` where that is a column stack or a constant."""
    shape = b.shape_of(v)
    lead, last = shape[:-1], len(shape) - 1
    splat = b.int_constant(v)
    if splat is not None:
        return b.full(lead, splat, b.elem_of(v))
    one = _owner(v, "stablehlo.reshape")
    if one is not None and shape[-1] == 1 and b.shape_of(one.operands[0]) == lead:
        return one.operands[0]
    stack = _owner(v, "stablehlo.concatenate")
    if stack is not None and ir.IntegerAttr(stack.attributes["dimension"]).value == last and all(
            b.shape_of(x)[-1] == 1 for x in stack.operands):
        part = stack.operands[k]
        unstacked = _owner(part, "stablehlo.reshape")
        if unstacked is not None and b.shape_of(unstacked.operands[0]) == lead:
            return unstacked.operands[0]
        return b.reshape(part, lead)
    spread = _owner(v, "stablehlo.broadcast_in_dim")
    if spread is not None and list(ir.DenseI64ArrayAttr(spread.attributes["broadcast_dimensions"])) == [last]:
        const = _owner(spread.operands[0], "stablehlo.constant")
        if const is not None and b.shape_of(spread.operands[0]) == [shape[-1]]:
            return b.full(lead, ir.DenseIntElementsAttr(const.attributes["value"])[k], b.elem_of(v))
    return b.reshape(b.slice_dim(v, last, k, k + 1), lead)


def _nonzero_flags(ok: Value) -> Value | None:
    """`flags[..., F]` when `ok` is `reduce_or(flags != 0)` over the trailing dim; else None."""
    reduce = _owner(ok, "stablehlo.reduce")
    if reduce is None or _reduce_kind(reduce) != "stablehlo.or":
        return None
    compare = _owner(reduce.operands[0], "stablehlo.compare")
    if compare is None or str(compare.attributes["comparison_direction"]) != "#stablehlo<comparison_direction NE>":
        return None
    flags, zero = compare.operands
    if not isinstance(b.elem_of(flags), ir.IntegerType) or b.int_constant(zero) != 0:
        return None
    return flags


def _reduce_kind(op: ir.Operation) -> str | None:
    """and/or of a one-operand reduce over the trailing dim of at most MAX_COLUMNS, from its identity."""
    if len(op.operands) != 2:
        return None
    x, init = op.operands
    shape = b.shape_of(x)
    kind = b.reducer_kind(op)
    if (kind not in _IDENTITY or list(ir.DenseI64ArrayAttr(op.attributes["dimensions"])) != [len(shape) - 1]
            or not 0 < shape[-1] <= MAX_COLUMNS or b.int_constant(init) not in _IDENTITY[kind]):
        return None
    return kind


def _chain(x: Value, kind: str) -> Value:
    """`x[..., S]` combined over its columns by a chain of `kind` ops."""
    result = _column(x, 0)
    for k in range(1, b.shape_of(x)[-1]):
        result = b.COMBINERS[kind.removeprefix("stablehlo.")](result, _column(x, k))
    return result


def _gather_rows(flags: Value, on_true: Value, on_false: Value) -> Value:
    """`on_false[..., K]` where every `flags[..., F]` is 0, else `on_true`: a gather from the stack
    `[on_false, on_true]` at the or of the flags read unsigned, which the gather clamps to 1."""
    lead = b.shape_of(on_false)[:-1]
    n = len(lead)
    index = b.convert(flags, b.unsigned(b.elem_of(flags)))
    index = _chain(index, "stablehlo.or") if b.shape_of(flags)[-1] <= MAX_COLUMNS else b.reduce(index, [n], "or")
    table = b.concat([b.reshape(v, [1, *b.shape_of(v)]) for v in (on_false, on_true)], 0)
    return b.gather(table, b.reshape(index, [*lead, 1]), offset_dims=[n], collapsed_slice_dims=[0],
                    operand_batching_dims=range(1, n + 1), start_indices_batching_dims=range(n), start_index_map=[0],
                    index_vector_dim=n, slice_sizes=[1] * (n + 1) + [b.shape_of(on_false)[-1]])


def _split_select(op: ir.Operation) -> list[Value] | None:
    """The row-mask select `op` over at most `MAX_COLUMNS` integer columns as one select per column
    (or, for `any(flags != 0)`, a gather); None for any other select."""
    pred, on_true, on_false = op.operands
    ok = _row_mask(pred)
    shape = b.shape_of(on_true)
    if ok is None or not isinstance(b.elem_of(on_true), ir.IntegerType) or not 0 < shape[-1] <= MAX_COLUMNS:
        return None
    flags = _nonzero_flags(ok)
    if flags is not None:
        return [_gather_rows(flags, on_true, on_false)]
    picked = [b.select(ok, _column(on_true, k), _column(on_false, k)) for k in range(shape[-1])]
    return [b.concat([b.reshape(p, [*shape[:-1], 1]) for p in picked], len(shape) - 1)]


def _unrolled_reduce(op: ir.Operation) -> list[Value] | None:
    """The and/or reduce `op` of i1 columns as a chain of elementwise ops; `ERASE` for a reduce nothing
    reads any more (one the gather form replaced); None for any other reduce."""
    if next(iter(op.results[0].uses), None) is None:
        return ERASE
    kind = _reduce_kind(op)
    if kind is None or b.elem_of(op.operands[0]) != b.i1():
        return None
    return [_chain(op.operands[0], kind)]


class ColumnSelects(PatternPass):
    """Split row-mask selects over index columns per column.

    Backend: XLA:CPU branches per entry on a select whose predicate is a row mask broadcast over
    index columns, and runs a reduce as a loop of its own; benchmark: `bench/sparse.py`
    (bcoo_slice, squeeze).

    Row-mask selects over index columns split per column (or, for `any(flags != 0)`, a gather),
    then small and/or reduces over the columns unrolled.

        %m = stablehlo.broadcast_in_dim %ok, dims = [0] : (tensor<5xi1>) -> tensor<5x2xi32>
        %r = stablehlo.select %m, %idx, %fill : tensor<5x2xi1>, tensor<5x2xi32>

    becomes one `select %ok, %idx[:, k], %fill[:, k] : tensor<5xi1>, tensor<5xi32>` per column,
    stacked by a concatenate.
    """

    name: ClassVar[str] = "xla-cpu-column-selects"
    platforms: ClassVar[tuple[str, ...]] = ("cpu",)
    # The selects first, then, in a walk of their own, the reduces: the gather form of a select reads the
    # reduce it replaces.
    PATTERNS: ClassVar[tuple[PatternSet, ...]] = (PatternSet(Pattern("stablehlo.select", _split_select)),
                                                  PatternSet(Pattern("stablehlo.reduce", _unrolled_reduce)))
