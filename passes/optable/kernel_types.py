"""The operand and result types a custom call's kernel takes, in the form the portable allowlist checks.

A kernel trusts its buffers (a result smaller than its operand would be written past its end),
so `runtime/portable.py` checks every allowlisted call's types with a `Check`: the kernel's
operand and result types and its decoded attributes in, what is wrong (a phrase that follows
"custom call to @target") or None out. The LAPACK kernels' checks are entries of the
linear-algebra table (`linalg`); hlopt's own kernels' are in the runtime.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from hlopt.passes.mlir import ir

Types = Sequence[ir.RankedTensorType]
Config = dict[str, str]  # a kernel's attributes, decoded: name -> the character (or decimal number) it holds
Check = Callable[[Types, Types, Config], str | None]
Shapes = list[tuple[list[int], str]]  # (shape, element type) per value

I32 = "i32"
FLOAT_TYPES = ("f32", "f64", "complex<f32>", "complex<f64>")


def tensor(t: ir.RankedTensorType) -> tuple[list[int], str]:
    """The shape and element type (as MLIR prints it) of `t`."""
    return list(t.shape), str(t.element_type)


def types_text(types: Types) -> str:
    """`types` as a message shows them: `(tensor<4x4xf32>, tensor<i32>)`."""
    return "(" + ", ".join(str(t) for t in types) + ")"


def shapes_text(shapes: Shapes) -> str:
    """`shapes` as `types_text` shows the types they describe."""
    return "(" + ", ".join(f"tensor<{''.join(f'{d}x' for d in s)}{e}>" for s, e in shapes) + ")"
