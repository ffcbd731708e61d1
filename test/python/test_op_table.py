"""The op table (passes/autodiff/table.py): one entry per op gives its rules, and every op JAX can emit
has its rules or a reason.

Scratch entries: per family (zero, linear, bilinear, derivative formula) an op that the
shipped table has is taken out of a scratch copy, which makes jet-expand and vjp-expand
refuse it by name, and put back as ONE entry, from which the standard jet (against nested
jax.jvp), the collapsed jet of a Laplacian (its directions rule; against the trace of
jax.hessian) and the vjp (against jax.vjp) all follow.

A scratch custom call: XLA runs jaxlib's LAPACK triangular solve for calls to a scratch
target, and one entry of the custom-call table keyed on that target (the linear family:
linear in the right-hand side, whose transpose is the solve with the transposed matrix)
gives it its jet (against nested jax.jvp) and its vjp (against jax.vjp); without the entry
both passes refuse the call, naming the target.

Coverage: every StableHLO and CHLO op of jaxlib's MLIR bindings (the ops JAX can emit)
has, for jet-expand and for vjp-expand, a rule or the table's reason why not.
"""

from __future__ import annotations

import functools
import re

import jax
import jax.numpy as jnp
import jaxlib.lapack
import numpy as np
import pytest
from jax import lax
from jaxlib.mlir.dialects import chlo, stablehlo

import hlopt
from hlopt.passes.autodiff.jet_expand import FunctionJet
from hlopt.passes.optable import derivatives
from hlopt.passes.autodiff import table
from hlopt.passes.mlir import ir
from hlopt.passes.optable.derivatives import op
from hlopt.runtime import portable

from support import op_tables
from support.linalg_cases import assert_series, jet_of_module
from support.references import taylor_by_nested_jvp
from support.vjp_harness import hlopt_vjp, jax_vjp

ORDER = 3
_W = np.random.default_rng(5).normal(size=(5, 4)) / 2


def _without(name: str, *added: table.OpEntry, formulas: derivatives.Table = derivatives.DERIVATIVES):
    """A scratch op table: the shipped entries but op `name`'s, then `added`."""
    return table.build([e for e in table.ENTRIES if name not in e.names] + list(added), formulas)


def _sine_formulas(with_sine: bool) -> derivatives.Table:
    """The shipped derivative formulas with sine's left out, or written again as one entry."""
    scratch = {n: d for n, d in derivatives.DERIVATIVES.items() if n != "stablehlo.sine"}
    if with_sine:
        derivatives.def_deriv("stablehlo.sine", lambda x, y: op("stablehlo.cosine", x), table=scratch)
    return scratch


# family -> (op, function of x in R^5 that holds it, the table without the op, with it as one entry)
FAMILIES = {
    "zero": ("stablehlo.floor", lambda x: jnp.floor(3 * x) * jnp.sin(x),
             lambda: _without("stablehlo.floor"), lambda: _without("stablehlo.floor", table.zero("stablehlo.floor"))),
    "linear": ("stablehlo.negate", lambda x: jnp.tanh(-(x @ _W)),
               lambda: _without("stablehlo.negate"),
               lambda: _without("stablehlo.negate", table.linear("stablehlo.negate"))),
    "bilinear": ("stablehlo.multiply", lambda x: jnp.tanh(x @ _W) * jnp.sin(x @ _W),
                 lambda: _without("stablehlo.multiply"),
                 lambda: _without("stablehlo.multiply", table.bilinear("stablehlo.multiply"))),
    "derivative": ("stablehlo.sine", lambda x: jnp.sin(jnp.tanh(x) @ _W),
                   lambda: table.build(table.ENTRIES, _sine_formulas(False)),
                   lambda: table.build(table.ENTRIES, _sine_formulas(True))),
}


def _inputs(seed: int):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=5)
    return x, [0.5 * rng.normal(size=5) for _ in range(ORDER)], rng


@pytest.mark.parametrize("family", list(FAMILIES))
def test_without_its_entry_an_op_is_refused_by_name(family, monkeypatch):
    name, fun, without, _ = FAMILIES[family]
    x, series, rng = _inputs(1)
    op_tables.install(monkeypatch, without())
    with jax.enable_x64(True):
        ct = np.asarray(rng.normal(size=np.shape(fun(x))))
        with pytest.raises(hlopt.PipelineError, match=f"no Taylor rule for '{name}'"):
            hlopt.jet(fun, (x,), (series,))
        with pytest.raises(hlopt.PipelineError, match=f"no reverse-mode rule for '{name}'"):
            hlopt_vjp(fun, [x], [ct])


@pytest.mark.parametrize("family", list(FAMILIES))
def test_one_entry_gives_the_jet_the_collapsed_jet_and_the_vjp(family, monkeypatch):
    name, fun, _, with_entry = FAMILIES[family]
    x, series, rng = _inputs(2)
    scratch = with_entry()
    assert scratch[name] is not table.TABLE[name] and scratch[name].family == family  # the scratch entry
    op_tables.install(monkeypatch, scratch)
    with jax.enable_x64(True):
        p, s = hlopt.jet(fun, (x,), (series,), factorial_scaled=False)
        ref = taylor_by_nested_jvp(fun, [x], [series], ORDER)
        for k, (got, want) in enumerate(zip([p, *s], ref)):
            np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-10, atol=1e-12,
                                       err_msg=f"{name}: jet, order {k}")
        point = rng.normal(size=5)
        laplacian = np.asarray(hlopt.laplacian(fun)(point))
        hessian = jax.hessian(fun)(point)
        np.testing.assert_allclose(laplacian, np.trace(np.asarray(hessian), axis1=-2, axis2=-1),
                                   rtol=1e-10, atol=1e-12, err_msg=f"{name}: collapsed jet (laplacian)")
        ct = rng.normal(size=np.shape(p))
        np.testing.assert_allclose(hlopt_vjp(fun, [x], [ct])[0], jax_vjp(fun, [x], [ct])[0], rtol=1e-12,
                                   atol=1e-14, err_msg=f"{name}: vjp")


# --- a custom call: one entry of the custom-call table, keyed on its target -----------------

CALL_TARGET = "scratch_dtrsm"  # jaxlib's lapack_dtrsm_ffi kernel, registered with XLA under this name
_L = np.tril(np.random.default_rng(7).normal(size=(4, 4))) + 3 * np.eye(4)


@functools.cache
def _register_scratch_solve() -> None:
    kernels = {name: capsule for name, capsule, _ in jaxlib.lapack.registrations()["cpu"]}
    jax.ffi.register_ffi_target(CALL_TARGET, kernels["lapack_dtrsm_ffi"], platform="cpu")


def _solve(b):
    return lax.linalg.triangular_solve(_L, b, left_side=True, lower=True)


def _solve_text(b) -> str:
    """`_solve` as jax lowers it for the CPU (a LAPACK call), its target renamed to the scratch one."""
    text = jax.jit(_solve).lower(b).as_text()
    assert text.count("@lapack_dtrsm_ffi(") == 1
    return text.replace("@lapack_dtrsm_ffi(", f"@{CALL_TARGET}(")


def _solve_transposed(b, call: ir.Operation, ct: ir.Value) -> list:
    """The cotangent of the right-hand side: the call on `ct` with the matrix transposed (`trans_x`
    N -> T); the matrix is a constant of the program, whose cotangent no one asks for."""
    new = call.clone(ip=ir.InsertionPoint.current)
    new.operands[1] = ct
    config = {a.name: a.attr for a in ir.DictAttr(call.attributes["mhlo.backend_config"])}
    assert chr(ir.IntegerAttr(config["trans_x"]).value) == "N"
    config["trans_x"] = ir.IntegerAttr.get(ir.IntegerType.get_unsigned(8), ord("T"))
    new.attributes["mhlo.backend_config"] = ir.DictAttr.get(config)
    return [None, new.result]


SCRATCH_CALL = table.linear(CALL_TARGET, 1, transpose=_solve_transposed)


def _solve_case():
    rng = np.random.default_rng(11)
    return rng.normal(size=(4, 2)), [rng.normal(size=(4, 2)) for _ in range(ORDER)], rng.normal(size=(4, 2))


def test_one_entry_gives_a_custom_call_its_jet_and_vjp(monkeypatch):
    _register_scratch_solve()
    # the runtime's allowlist checks the scratch target as the kernel's own (test_linalg_table.py checks it)
    monkeypatch.setitem(portable.CUSTOM_CALLS, CALL_TARGET, portable.CUSTOM_CALLS["lapack_dtrsm_ffi"])
    op_tables.install(monkeypatch, calls={**table.CALLS, **table.build([SCRATCH_CALL], {})})
    with jax.enable_x64(True):
        b, series, ct = _solve_case()
        text = _solve_text(b)
        got = jet_of_module(text, [b], [series], ORDER)
        want = taylor_by_nested_jvp(_solve, [b], [series], ORDER)
        assert_series(got, want, 1e-12, "scratch solve")
        (got_ct,) = hlopt_vjp(text, [b], [ct])
        (want_ct,) = jax_vjp(_solve, [b], [ct])
    np.testing.assert_allclose(got_ct, want_ct, rtol=1e-12, atol=1e-12)


def test_without_its_entry_a_custom_call_is_refused_by_target():
    assert CALL_TARGET not in table.CALLS
    with jax.enable_x64(True):
        b, series, ct = _solve_case()
        text = _solve_text(b)
        with pytest.raises(Exception, match=re.escape(f"jet-expand: no Taylor rule for 'stablehlo.custom_call' "
                                                      f"@{CALL_TARGET} (a custom call's rules are an entry of CALL_ENTRIES")):
            jet_of_module(text, [b], [series], 1)
        with pytest.raises(Exception, match=re.escape(f"vjp-expand: no reverse-mode rule for 'stablehlo.custom_call' "
                                                      f"@{CALL_TARGET} (a custom call's rules are an entry of CALL_ENTRIES")):
            hlopt_vjp(text, [b], [ct])


def test_two_entries_for_one_op_are_refused():
    with pytest.raises(ValueError, match="two entries for 'chlo.tan'"):
        table.build([*table.ENTRIES, table.zero("chlo.tan")])


def test_a_formula_for_an_op_with_another_entry_is_refused():
    # chlo.bessel_i1e's entry says no rule is written yet: a formula for it would be skipped silently
    scratch = dict(derivatives.DERIVATIVES)
    derivatives.def_deriv("chlo.bessel_i1e", lambda x, y: x, table=scratch)
    with pytest.raises(ValueError, match=re.escape(
            "'chlo.bessel_i1e' has a derivative formula (hlopt.passes.optable.derivatives) and a none entry "
            f"'chlo.bessel_i1e' of the table ({table.NOT_YET})")):
        table.build(table.ENTRIES, scratch)
    assert _without("chlo.bessel_i1e", formulas=scratch)["chlo.bessel_i1e"].family == "derivative"


# --- coverage ------------------------------------------------------------------------

def jax_ops() -> set[str]:
    """Every op of the StableHLO and CHLO dialects of jaxlib's MLIR bindings."""
    return {cls.OPERATION_NAME for module in (stablehlo, chlo) for cls in vars(module).values()
            if isinstance(getattr(cls, "OPERATION_NAME", None), str)}


def coverage(names: set[str], ops: dict[str, table.OpEntry]) -> dict[str, dict[str, str]]:
    """Per op, per transform ("jet", "vjp"): "rule" or the table's reason why not; "MISSING"
    where the table has neither, "STALE: ..." where it gives a reason for a rule it has."""
    report = {}
    for name in sorted(names):
        entry = ops.get(name)
        row = {}
        for kind in ("jet", "vjp"):
            has_rule = entry is not None and getattr(entry, kind) is not None
            why = entry.why.get(kind) if entry is not None else None
            if kind == "jet" and why == table.STRUCTURE and name in FunctionJet.STRUCTURE.by_name:
                has_rule, why = True, None
            row[kind] = ("STALE: " + why if why else "rule") if has_rule else why or "MISSING"
        report[name] = row
    return report


def _problems(report: dict[str, dict[str, str]]) -> list[str]:
    return [f"{name} {kind}: {what}" for name, row in report.items() for kind, what in row.items()
            if what == "MISSING" or what.startswith("STALE")]


def test_every_op_jax_emits_has_its_rules_or_a_reason():
    report = coverage(jax_ops(), table.TABLE)
    assert len(report) > 150  # the dialects were found
    assert not _problems(report), "\n".join(_problems(report))
    assert report["stablehlo.sine"] == {"jet": "rule", "vjp": "rule"}
    assert report["stablehlo.while"] == {"jet": "rule", "vjp": "rule"}  # jet-expand's walker
    assert report["stablehlo.fft"] == {"jet": "rule", "vjp": table.NOT_YET}
    assert report["stablehlo.and"]["vjp"] == table.NOT_DIFFERENTIABLE


def test_an_op_without_rule_or_reason_is_named():
    scratch = {n: e for n, e in table.TABLE.items() if n != "stablehlo.popcnt"}
    stale = dict(scratch, **{"stablehlo.sine": table.OpEntry("stablehlo.sine", "custom",
                                                             jet=table.TABLE["stablehlo.sine"].jet, why={"jet": "y"})})
    assert _problems(coverage(jax_ops(), scratch)) == ["stablehlo.popcnt jet: MISSING", "stablehlo.popcnt vjp: MISSING"]
    assert "stablehlo.sine jet: STALE: y" in _problems(coverage(jax_ops(), stale))


def test_every_entry_of_the_table_names_an_op_jax_emits_or_one_hlopt_adds():
    """Spellings and entries that are not StableHLO/CHLO: func.call and Shardy's sharding constraint."""
    assert set(table.TABLE) - jax_ops() == {"func.call", "sdy.sharding_constraint"}
