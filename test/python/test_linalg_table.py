"""The linear-algebra op table (passes/optable/linalg.py): adding a LAPACK-backed op is one entry.

A scratch copy of the table with one entry more, Cholesky under the scratch kernel name
`scratchpotrf` (whose float64 target, `@lapack_dscratchpotrf_ffi`, is jaxlib's dpotrf
kernel registered with XLA under that name), gives that target its Taylor rule (against
nested jax.jvp of the real op), its reverse-mode rule (against jax.vjp) and its portable
allowlist check (wrong operand or result types refused, the right ones accepted); the
table without the entry refuses the target in each. float64 inside `jax.enable_x64(True)`.
"""

from __future__ import annotations

import dataclasses
import functools
import re

import jax
import jaxlib.lapack
import numpy as np
import pytest
from jax import lax

from hlopt.compiler.program import parse_module
from hlopt.passes.autodiff import linalg_rules, table
from hlopt.passes.optable import linalg
from hlopt.passes.optable.kernel_types import I32
from hlopt.passes.optable.linalg import UPLO, LinalgOp, LinalgTable, matrix
from hlopt.runtime import portable
from hlopt.runtime.portable import PortableCheckError, check_portable

from support import op_tables
from support.linalg_cases import assert_series, jet_of_module, random_array, seeded_rng
from support.references import taylor_by_nested_jvp
from support.vjp_harness import hlopt_vjp, jax_vjp

# The one entry: its spelling, its record of rules, the attributes and types its kernel takes.
SCRATCH = LinalgOp("cholesky under a scratch name", "Cholesky", ("scratchpotrf",), chars=(UPLO,),
                   types=matrix(lambda b, m, n, t, r: [(b + [m, n], t), (b, I32)], square=True))
TARGET = "lapack_dscratchpotrf_ffi"
ORDER = 3


@functools.cache
def _register_scratch_kernel() -> None:
    """Make XLA run jaxlib's dpotrf kernel for calls to TARGET."""
    kernels = {name: capsule for name, capsule, _ in jaxlib.lapack.registrations()["cpu"]}
    jax.ffi.register_ffi_target(TARGET, kernels["lapack_dpotrf_ffi"], platform="cpu")


@pytest.fixture
def scratch_table(monkeypatch):
    """The table with SCRATCH, read by the rules and the allowlist for the test (the op table's
    custom calls built from it, as they are from the shipped one at import)."""
    scratch = LinalgTable([*linalg.TABLE.entries, SCRATCH])
    monkeypatch.setattr(linalg, "TABLE", scratch)
    monkeypatch.setattr(portable, "CUSTOM_CALLS", portable.custom_calls(scratch))
    op_tables.install(monkeypatch, calls=table.call_table(linear_algebra_table=scratch))
    _register_scratch_kernel()


def _cholesky(a):
    spd = a @ a.T + 2.0 * np.eye(a.shape[-1])
    return lax.linalg.cholesky(spd, symmetrize_input=False)


def _scratch_text(primals) -> str:
    """`_cholesky` as jax lowers it for the CPU, its LAPACK call renamed to the scratch target."""
    text = jax.jit(_cholesky).lower(*primals).as_text()
    assert text.count("@lapack_dpotrf_ffi(") == 1
    return text.replace("@lapack_dpotrf_ffi(", f"@{TARGET}(")


def _case():
    rng = seeded_rng("scratch table")
    primals = [random_array(rng, (4, 4), np.float64)]
    return primals, [[random_array(rng, (4, 4), np.float64) for _ in range(ORDER)]]


def test_every_entry_names_a_record_and_gives_the_allowlist_its_targets():
    for entry in linalg.TABLE.entries:
        assert issubclass(getattr(linalg_rules, entry.record), linalg_rules.Record), entry.meaning
    lapack = {t: c for t, c in portable.CUSTOM_CALLS.items() if t.startswith("lapack_")}
    assert set(lapack) == set(linalg.TABLE.targets)
    for target, (entry, _) in linalg.TABLE.targets.items():
        assert lapack[target].chars == entry.chars, target


def test_a_spelling_of_two_entries_is_refused():
    with pytest.raises(ValueError, match="lapack_spotrf_ffi spells 'cholesky under a scratch name' and another"):
        LinalgTable([*linalg.TABLE.entries, dataclasses.replace(SCRATCH, kernels=("potrf",))])


def _call_module(operand: str, results: str, config: str = "{uplo = 76 : ui8}") -> str:
    return (f"func.func @main(%a: {operand}) -> {operand} {{\n"
            f"  %0:2 = stablehlo.custom_call @{TARGET}(%a) {{mhlo.backend_config = {config}}} : ({operand}) -> "
            f"({results})\n  return %a : {operand}\n}}")


REFUSED = {
    "element type": (("tensor<4x4xf32>", "tensor<4x4xf32>, tensor<i32>"),
                     "operand tensor<4x4xf32> is not a batch of square f64 matrices"),
    "not square": (("tensor<4x3xf64>", "tensor<4x3xf64>, tensor<i32>"),
                   "operand tensor<4x3xf64> is not a batch of square f64 matrices"),
    "result smaller than the kernel writes": (
        ("tensor<4x4xf64>", "tensor<2x2xf64>, tensor<i32>"),
        "results (tensor<2x2xf64>, tensor<i32>); the kernel writes (tensor<4x4xf64>, tensor<i32>)"),
    "attribute it does not read": (("tensor<4x4xf64>", "tensor<4x4xf64>, tensor<i32>", "{uplo = 76 : ui8, lda = 4}"),
                                   "has attributes {lda, uplo}; its kernel reads exactly {uplo}"),
    "character it does not accept": (("tensor<4x4xf64>", "tensor<4x4xf64>, tensor<i32>", "{uplo = 88 : ui8}"),
                                     "has uplo = 88 : ui8; its kernel accepts 76 : ui8 (L) or 85 : ui8 (U)"),
}


@pytest.mark.parametrize("case", list(REFUSED))
def test_scratch_entry_gives_the_allowlist_check(case, scratch_table):
    args, match = REFUSED[case]
    with pytest.raises(PortableCheckError, match=re.escape(f"custom call to '{TARGET}' {match}")):
        check_portable(parse_module(_call_module(*args)))
    check_portable(parse_module(_call_module("tensor<2x4x4xf64>", "tensor<2x4x4xf64>, tensor<2xi32>")))


def test_scratch_entry_gives_the_taylor_rule(scratch_table):
    with jax.enable_x64(True):
        primals, series = _case()
        got = jet_of_module(_scratch_text(primals), primals, series, ORDER)
        want = taylor_by_nested_jvp(_cholesky, primals, series, ORDER)
    assert_series(got, want, 1e-9, "scratch cholesky")


def test_scratch_entry_gives_the_reverse_mode_rule(scratch_table):
    with jax.enable_x64(True):
        primals, _ = _case()
        ct = random_array(seeded_rng("scratch cotangent"), (4, 4), np.float64)
        got = hlopt_vjp(_scratch_text(primals), primals, [ct])
        want = jax_vjp(_cholesky, primals, [ct])
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-9, atol=1e-12)


def test_without_the_entry_the_target_has_no_rules_and_is_refused():
    with jax.enable_x64(True):
        primals, series = _case()
        text = _scratch_text(primals)
        with pytest.raises(Exception, match=re.escape(f"jet-expand: no Taylor rule for 'stablehlo.custom_call' @{TARGET}")):
            jet_of_module(text, primals, series, 1)
        with pytest.raises(Exception, match=re.escape(f"vjp-expand: no reverse-mode rule for 'stablehlo.custom_call' "
                                                      f"@{TARGET}")):
            hlopt_vjp(text, primals, primals)
    with pytest.raises(PortableCheckError, match=re.escape(f"custom call to '{TARGET}', which is not on hlopt's list")):
        check_portable(parse_module(text))
