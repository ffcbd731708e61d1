"""Every key of every rule table and lowering table has a numeric test and a lit case.

Tables: jet-expand's, vjp-expand's and the directions-batched/collapsed rules of the op table
(passes/autodiff/table.py), the derivative table it reads (passes/optable/derivatives.py),
the LAPACK kinds of the linear-algebra rules, the custom-call table's other targets, the annotations each lowering pass
lowers (base.ANNOTATIONS) and the passes themselves (each XLA:CPU tuning pass
has its lit test and is compared with and without it in test_xla_cpu_tuning.py).
The BCOO op records are checked the same way in test_bcoo_records.py.

The numeric tests are the cases of test_jet_rules.py and test_derivatives.py (against nested jax.jvp),
test_vjp_rules.py (against jax.vjp) and the StableHLO spellings of test_linalg_rules.py (their tables in
support/jet_cases.py, vjp_cases.py and linalg_cases.py): an op is covered when the StableHLO of some case
holds it. A lit case is a test/lit/jet-expand (or jet-collapse) / vjp-expand input that
holds the op. A new rule without both fails here, by name; `GAPS` lists the keys that
lack one today, and fails once a gap is closed (remove it then).
"""

from __future__ import annotations

import functools
import pathlib
import re

import jax
import numpy as np

from hlopt.passes.autodiff import table
from hlopt.passes.optable import derivatives, linalg
from hlopt.passes import base, registry

from support import jet_cases, linalg_cases, vjp_cases

LIT = pathlib.Path(__file__).resolve().parents[1] / "lit"
OP = re.compile(r"\b((?:stablehlo|chlo|sdy|func)\.[a-z_0-9]+)\b")

# (table, what is missing) -> keys, each with why
FOREIGN = "jax 0.10 does not emit it (lax.logistic, jnp.tan lower to other ops); the rule is for other producers"
SHARDING = "numeric tests on 8 devices in test_sharded.py, not read here"
CUSTOM = "custom calls (sharding, stop_gradient) are tested in test_sharded.py and test_jet_edges.py"
NO_LIT = "no lit case yet"
GAPS: dict[tuple[str, str], dict[str, str]] = {
    ("jet", "numeric"): {"chlo.tan": FOREIGN, "chlo.conj": "jnp.conj lowers to real/imag/complex", "stablehlo.logistic": FOREIGN, "sdy.sharding_constraint": SHARDING,
                         "stablehlo.custom_call": CUSTOM},
    ("jet", "lit"): dict.fromkeys((
        "chlo.conj", "sdy.sharding_constraint", "stablehlo.abs", "stablehlo.ceil", "stablehlo.clamp",
        "stablehlo.fft", "stablehlo.gather", "stablehlo.minimum", "stablehlo.remainder", "stablehlo.reverse", "stablehlo.round_nearest_afz", "stablehlo.round_nearest_even",
        "stablehlo.sign"), NO_LIT),
    ("vjp", "numeric"): {"chlo.tan": FOREIGN, "stablehlo.logistic": FOREIGN, "sdy.sharding_constraint": SHARDING,
                         "stablehlo.custom_call": CUSTOM, "chlo.conj": "jnp.conj lowers to real/imag/complex",
                         "stablehlo.if": "jax lowers lax.cond to stablehlo.case"},
    ("vjp", "lit"): dict.fromkeys((
        "chlo.conj", "chlo.top_k", "sdy.sharding_constraint", "stablehlo.abs", "stablehlo.atan2", "stablehlo.ceil",
        "stablehlo.minimum", "stablehlo.optimization_barrier", "stablehlo.power", "stablehlo.reduce_precision", "stablehlo.remainder",
        "stablehlo.round_nearest_afz", "stablehlo.round_nearest_even", "stablehlo.sign"), NO_LIT),
}


GAPS.update({
    ("derivatives", "numeric"): {"chlo.tan": FOREIGN, "stablehlo.logistic": FOREIGN},
    ("derivatives", "lit"): {},
    ("directions", "lit"): dict.fromkeys((
        "chlo.conj", "sdy.sharding_constraint", "stablehlo.complex", "stablehlo.fft", "stablehlo.gather", "stablehlo.imag",
        "stablehlo.real", "stablehlo.reduce_window", "stablehlo.reverse", "stablehlo.scatter",
        "stablehlo.select"), NO_LIT),
    ("linalg", "lit"): {},
    ("calls", "lit"): {
        "vjp: Sharding": "numeric in test_vjp_expand.py (GSPMD's sharding constraint); no lit case yet",
        **dict.fromkeys((f"{kind}: {target}" for kind in ("jet", "vjp")
                         for target in ("SPMDFullToShardShape", "SPMDShardToFullShape")),
                        "numeric in test_vjp_expand.py (shard_map under GSPMD); no lit case yet")},
    ("annotations", "lit"): {},
    ("passes", "lit"): {},
    ("tuning", "numeric"): {},
})


def _ops(text: str) -> set[str]:
    return set(OP.findall(text))


@functools.cache
def jet_numeric() -> set[str]:
    found = set()
    with jax.enable_x64(True):
        for name, (fun, _, _) in jet_cases.CASES.items():
            primals, _ = jet_cases.case_inputs(name)
            found |= _ops(jax.jit(fun).lower(*primals).as_text())
        for fun, lo, hi in jet_cases.TABLE_CASES.values():
            found |= _ops(jax.jit(fun).lower(np.linspace(lo, hi, 3)).as_text())
        found |= _linalg_spellings(linalg_cases.SPELLINGS)
    return found


def _linalg_spellings(spellings) -> set[str]:
    """The ops of the StableHLO spellings of linear algebra (other platforms') that test_linalg_rules checks."""
    found = set()
    for name, platform in spellings:
        primals, _ = linalg_cases.case_inputs(name, np.float64, ())
        found |= _ops(linalg_cases.spelling_text(name, platform, primals))
    return found


@functools.cache
def vjp_numeric() -> set[str]:
    found = set()
    with jax.enable_x64(True):
        for group, (cases, shape) in vjp_cases.GROUPS.items():
            inputs = [vjp_cases.case_inputs(cases, n, shape, "float64") for n in cases]
            f = vjp_cases.batched([cases[n][0] for n in cases], [len(i) for i in inputs])
            found |= _ops(jax.jit(f).lower(*[x for i in inputs for x in i]).as_text())
        found |= _linalg_spellings(linalg_cases.VJP_SPELLINGS)
    return found


def lit_ops(*folders: str) -> set[str]:
    return set().union(*(_ops(p.read_text()) for folder in folders for p in (LIT / folder).glob("*.mlir")))


def _missing(table: str, what: str, keys: set[str], covered: set[str]) -> None:
    missing = keys - covered
    known = GAPS[(table, what)]
    new = sorted(missing - set(known))
    closed = sorted(set(known) - missing)
    assert not new, f"{table} rules without a {what} test: {', '.join(new)}"
    assert not closed, f"{table} rules listed in GAPS but now covered by a {what} test: {', '.join(closed)}"


def test_every_jet_rule_has_a_numeric_test():
    _missing("jet", "numeric", set(table.rules(table.TABLE, "jet")), jet_numeric())


def test_every_jet_rule_has_a_lit_case():
    _missing("jet", "lit", set(table.rules(table.TABLE, "jet")), lit_ops("jet-expand", "jet-collapse"))


def test_every_vjp_rule_has_a_numeric_test():
    _missing("vjp", "numeric", set(table.rules(table.TABLE, "vjp")), vjp_numeric())


def test_every_vjp_rule_has_a_lit_case():
    _missing("vjp", "lit", set(table.rules(table.TABLE, "vjp")), lit_ops("vjp-expand"))


def test_a_missing_case_is_named():
    fake = {"stablehlo.sine", "chlo.made_up"}
    try:
        _missing("jet", "numeric", fake | set(GAPS[("jet", "numeric")]), jet_numeric())
    except AssertionError as e:
        assert "chlo.made_up" in str(e) and "stablehlo.sine" not in str(e)
    else:
        raise AssertionError("a rule without a test went unnoticed")
    assert np.all([OP.findall('%0 = "stablehlo.reduce_window"(%x)') == ["stablehlo.reduce_window"]])


def test_every_derivative_has_a_numeric_test():
    _missing("derivatives", "numeric", set(derivatives.DERIVATIVES), jet_numeric() | vjp_numeric())


def test_every_derivative_has_a_lit_case():
    _missing("derivatives", "lit", set(derivatives.DERIVATIVES), lit_ops("jet-expand", "jet-collapse", "vjp-expand"))


def test_every_directions_rule_has_a_lit_case():
    """Numeric: test_linalg_rules' and test_pde's directions-batched and collapsed jets against standard jets."""
    files = [p for folder in ("jet-collapse", "jet-expand") for p in (LIT / folder).glob("*.mlir")
             if "directions" in p.read_text()]
    _missing("directions", "lit", set(table.rules(table.TABLE, "directions")), set().union(*(_ops(p.read_text()) for p in files)))


LAPACK_KIND = re.compile(r"lapack_[sdcz]([a-z]+)_ffi")


def test_every_lapack_kind_has_a_lit_case_for_both_transforms():
    """Numeric: test_linalg_rules runs every kind (OPS) against nested jvp and jax.vjp."""
    kinds = {k for e in linalg.TABLE.entries for k in (*e.kernels, *e.complex_kernels)}
    folders = ("jet-expand", "vjp-expand")
    found = {f"{folder}: {k}" for folder in folders for p in (LIT / folder).glob("*.mlir")
             for k in LAPACK_KIND.findall(p.read_text())}
    _missing("linalg", "lit", {f"{folder}: {k}" for folder in folders for k in kinds}, found)


def test_every_custom_call_rule_has_a_lit_case():
    """The custom-call table's own entries (its LAPACK targets are checked by kind above): a lit file
    that runs the pass (`jet-expand`, `vjp-expand`) on a call to the target."""
    runs = {"jet": re.compile(r"RUN:.*\bjet-expand\b"), "vjp": re.compile(r"RUN:.*\bvjp-expand\b")}
    targets = {e.name for e in table.CALL_ENTRIES}
    texts = [p.read_text() for p in LIT.rglob("*.mlir")]
    found = {f"{kind}: {t}" for kind, run in runs.items() for text in texts if run.search(text)
             for t in targets if re.search(r"@" + re.escape(t) + r"\(", text)}
    _missing("calls", "lit", {f"{kind}: {t}" for kind in runs for t in targets if getattr(table.CALLS[t], kind)},
             found)


def test_every_annotation_has_a_lit_case_of_its_pass():
    found = set()
    for target, pass_name in base.ANNOTATIONS.items():
        texts = [p.read_text() for p in (LIT / pass_name).glob("*.mlir")]
        pattern = re.compile(r"@" + re.escape(target) + (r"\w" if target.endswith(".") else r"\b(?![.\w])"))
        if any(pattern.search(t) for t in texts):
            found.add(target)
    _missing("annotations", "lit", set(base.ANNOTATIONS), found)


def test_every_pass_has_a_lit_test_that_runs_it():
    runs = {p.read_text().split("\n", 1)[0] for p in LIT.rglob("*.mlir")}
    runs |= {line for p in LIT.rglob("*.mlir") for line in p.read_text().splitlines() if "RUN:" in line}
    found = {name for name in registry.PASSES if any(re.search(r"\b" + re.escape(name) + r"\b", r) for r in runs)}
    _missing("passes", "lit", set(registry.PASSES), found)


def test_every_tuning_pass_is_compared_with_and_without_it():
    source = (pathlib.Path(__file__).parent / "test_xla_cpu_tuning.py").read_text()
    uses_the_tuple = "DEFAULT_TUNING" in source
    found = set(registry.DEFAULT_TUNING) if uses_the_tuple else {n for n in registry.DEFAULT_TUNING if n in source}
    _missing("tuning", "numeric", set(registry.DEFAULT_TUNING), found)
