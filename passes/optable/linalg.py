"""The linear-algebra op table: one entry per meaning, read by the autodiff rules and the portable allowlist.

An entry (`LinalgOp`) declares what hlopt knows of one meaning (Cholesky, a triangular
solve, LU, eigh, QR, the Householder product, SVD):

- its spellings: the LAPACK custom calls JAX emits on CPU, `@lapack_{s,d,c,z}KERNEL_ffi`
  (the kernel's name may differ for complex elements: `syevd` / `heevd`), and the StableHLO
  op other platforms use (`stablehlo.cholesky`);
- its rules: the name of the record of `passes/autodiff/linalg_rules.py` that reads a call's
  attributes and holds the Taylor rule (`jet-expand`, batched and collapsed jets included)
  and the reverse-mode rule (`vjp-expand`); the op table (`passes/autodiff/table.py`) gives
  every spelling those rules;
- what `trust="portable"` checks of a call (`runtime/portable.py`): the `ui8` character
  attributes its kernel reads and the characters each accepts, and its operand and result
  types for each element type.

Adding a LAPACK-backed op is one entry of `TABLE` (and a record for a new meaning).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from typing import Optional

from hlopt.passes.ir.walk import call_target
from hlopt.passes.mlir import ir
from hlopt.passes.optable.kernel_types import FLOAT_TYPES, I32, Check, Config, Shapes, Types, shapes_text, \
    tensor, types_text

ELEMENTS = dict(zip("sdcz", FLOAT_TYPES))  # LAPACK's prefix -> the element type of its kernel's matrices
_REAL = {"f32": "f32", "f64": "f64", "complex<f32>": "f32", "complex<f64>": "f64"}


@dataclasses.dataclass(frozen=True)
class Char:
    """A `ui8` attribute a kernel reads as a character: its name, the characters the kernel
    accepts, and the one the rules take when a call leaves it out."""

    name: str
    accepted: str
    default: str


UPLO = Char("uplo", "LU", "L")
SIDE = Char("side", "LR", "L")
TRANS = Char("trans_x", "NTC", "N")
DIAG = Char("diag", "NU", "N")
EIGH_MODE = Char("mode", "NV", "V")
SVD_MODE = Char("mode", "SAN", "S")

TypeCheck = Callable[[str, str], Check]  # (element type, its real type) -> the check of one kernel's types
Results = Callable[[list[int], int, int, str, str], Shapes]  # (batch, m, n, element, real) -> the results


@dataclasses.dataclass(frozen=True)
class LinalgOp:
    """One linear-algebra meaning: its spellings, its record of rules and its allowlist check."""

    meaning: str
    record: str  # the class of passes/autodiff/linalg_rules.py holding its jet and vjp rules
    kernels: tuple[str, ...]  # LAPACK's names of its kernel, `lapack_{s,d}KERNEL_ffi` (and c, z unless below)
    types: TypeCheck  # its kernel's operand and result types, per element type
    chars: tuple[Char, ...] = ()  # the attributes its kernel reads
    complex_kernels: tuple[str, ...] = ()  # the kernels' names for complex elements, where they differ
    stablehlo: tuple[str, ...] = ()  # the StableHLO / CHLO ops that spell it

    def targets(self) -> dict[str, str]:
        """Each custom-call target that spells this meaning -> the element type of its matrices."""
        return {f"lapack_{prefix}{kernel}_ffi": element for prefix, element in ELEMENTS.items()
                for kernel in (self.complex_kernels if prefix in "cz" and self.complex_kernels else self.kernels)}

    def check(self, element: str) -> Check:
        """The check of the types of a call whose matrices hold `element`."""
        return self.types(element, _REAL[element])

    def read_chars(self, op: ir.Operation) -> Config:
        """The characters the call `op` holds in its `mhlo.backend_config`, each missing one its default."""
        attrs = op.attributes
        config = ir.DictAttr(attrs["mhlo.backend_config"]) if "mhlo.backend_config" in attrs else None
        return {c.name: chr(ir.IntegerAttr(config[c.name]).value) if config is not None and c.name in config
                else c.default for c in self.chars}


class LinalgTable:
    """Entries found by spelling: `targets` (custom-call target -> entry, element type) and `ops`."""

    def __init__(self, entries: Iterable[LinalgOp]):
        self.entries = tuple(entries)
        self.targets: dict[str, tuple[LinalgOp, str]] = {}
        self.ops: dict[str, LinalgOp] = {}
        for entry in self.entries:
            spellings = [(self.targets, t, (entry, e)) for t, e in entry.targets().items()]
            for index, name, value in spellings + [(self.ops, n, entry) for n in entry.stablehlo]:
                if name in self.targets or name in self.ops:
                    raise ValueError(f"linear-algebra table: {name} spells {entry.meaning!r} and another entry; "
                                     "give each spelling to one meaning")
                index[name] = value

    def find(self, op: ir.Operation) -> Optional[LinalgOp]:
        """The entry `op` spells, or None."""
        if op.name in self.ops:
            return self.ops[op.name]
        found = self.targets.get(call_target(op) or "")
        return None if found is None else found[0]


# --- the kernels' types ---------------------------------------------------------------------


def matrix(results: Results, square: bool = False) -> TypeCheck:
    """A kernel of one batched matrix `a[*b, m, n]` (`square`: m = n) whose results follow from it."""

    def types(element: str, real: str) -> Check:
        def check(operands: Types, outs: Types, config: Config) -> str | None:
            if len(operands) != 1:
                return f"takes 1 operand, not {len(operands)}"
            shape, elt = tensor(operands[0])
            if elt != element or len(shape) < 2 or (square and shape[-1] != shape[-2]):
                return f"operand {operands[0]} is not a batch of {'square ' if square else ''}{element} matrices"
            want = results(shape[:-2], shape[-2], shape[-1], element, real)
            if [tensor(t) for t in outs] != want:
                return f"results {types_text(outs)}; the kernel writes {shapes_text(want)}"
            return None

        return check

    return types


def pair(fits: Callable[[list[int], list[int], Config], str | None], writes: int) -> TypeCheck:
    """A kernel of two batched operands of the matrices' type that writes over operand `writes`;
    `fits` names what their shapes miss."""

    def types(element: str, real: str) -> Check:
        def check(operands: Types, outs: Types, config: Config) -> str | None:
            if len(operands) != 2:
                return f"takes 2 operands, not {len(operands)}"
            (a, ea), (b, eb) = tensor(operands[0]), tensor(operands[1])
            problem = None if ea == eb == element else f"{element} tensors"
            problem = problem or fits(a, b, config)
            if problem is not None:
                return f"operands {types_text(operands)} are not {problem}"
            if [tensor(t) for t in outs] != [tensor(operands[writes])]:
                return f"results {types_text(outs)}; the kernel writes {operands[writes]}"
            return None

        return check

    return types


def _trsm_fits(a: list[int], x: list[int], config: Config) -> str | None:
    k = "m" if config["side"] == "L" else "n"
    ok = len(a) >= 2 and len(x) == len(a) and a[:-2] == x[:-2] and a[-1] == a[-2] == x[-2 if k == "m" else -1]
    return None if ok else f"a square a[*b, k, k] and x[*b, m, n] with k = {k} (side {config['side']})"


def _householder_fits(a: list[int], tau: list[int], config: Config) -> str | None:
    ok = len(a) >= 2 and len(tau) == len(a) - 1 and tau[:-1] == a[:-2] and tau[-1] <= a[-1] <= a[-2]
    return None if ok else "a[*b, m, n] and tau[*b, k] with k <= n <= m"


def _svd_results(b: list[int], m: int, n: int, element: str, real: str, full: bool) -> Shapes:
    """(a, s[*b, p], u[*b, m, r], vt[*b, c, n], info[*b]), p = min(m, n), r = c = p (thin) or m, n (`full`)."""
    p = min(m, n)
    return [(b + [m, n], element), (b + [p], real), (b + [m, m if full else p], element),
            (b + [n if full else p, n], element), (b, I32)]


def _svd(element: str, real: str) -> Check:
    """gesdd / gesvd: thin vectors in mode S, full ones in mode A, either in mode N (none written)."""
    thin, full = (matrix(lambda *shape, full=full: _svd_results(*shape, full))(element, real) for full in (False, True))

    def check(operands: Types, outs: Types, config: Config) -> str | None:
        modes = {"S": (thin,), "A": (full,), "N": (thin, full)}
        problems = [rule(operands, outs, config) for rule in modes[config["mode"]]]
        return None if None in problems else f"{problems[0]} in mode {config['mode']}"

    return check


# --- the table ------------------------------------------------------------------------------

TABLE = LinalgTable([
    LinalgOp("cholesky", "Cholesky", ("potrf",), chars=(UPLO,), stablehlo=("stablehlo.cholesky",),
             types=matrix(lambda b, m, n, t, r: [(b + [m, n], t), (b, I32)], square=True)),
    LinalgOp("triangular solve", "TriangularSolve", ("trsm",), chars=(SIDE, UPLO, TRANS, DIAG),
             stablehlo=("stablehlo.triangular_solve",), types=pair(_trsm_fits, writes=1)),
    LinalgOp("lu", "LU", ("getrf",),
             types=matrix(lambda b, m, n, t, r: [(b + [m, n], t), (b + [min(m, n)], I32), (b, I32)])),
    LinalgOp("eigh", "Eigh", ("syevd",), complex_kernels=("heevd",), chars=(EIGH_MODE, UPLO),
             types=matrix(lambda b, m, n, t, r: [(b + [m, n], t), (b + [n], r), (b, I32)], square=True)),
    LinalgOp("qr", "QR", ("geqrf",), types=matrix(lambda b, m, n, t, r: [(b + [m, n], t), (b + [min(m, n)], t)])),
    LinalgOp("householder product", "HouseholderProduct", ("orgqr",), complex_kernels=("ungqr",),
             types=pair(_householder_fits, writes=0)),
    LinalgOp("svd", "SVD", ("gesdd", "gesvd"), chars=(SVD_MODE,), types=_svd),
])
