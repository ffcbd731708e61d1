"""Platforms: each pass declares its own, the driver runs a platform's pass only for a module compiled for
it, exports for a TPU made on this CPU machine hold no CPU-only custom call and no CPU tuning, and every
product hlopt builds carries the program's precision."""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import export
from jax.experimental import jet as jax_jet

import hlopt
from hlopt.cli.opt import main
from hlopt.passes.base import Pass
from hlopt.passes.mlir import get_context, ir
from hlopt.passes.registry import DEFAULT_LOWERINGS, DEFAULT_TUNING, OPT_IN_TUNING, all_passes
from hlopt.passes.target import PLATFORMS, PORTABLE, Target

pytestmark = pytest.mark.usefixtures("x64_module")
RNG = np.random.default_rng(0)
W1, W2 = RNG.standard_normal((3, 8)), RNG.standard_normal((8, 1))
A = np.tril(RNG.standard_normal((4, 4))) + 4 * np.eye(4)
B = RNG.standard_normal((4, 3))
X = RNG.standard_normal(3)


def _mlp(w1, w2, x):
    return jnp.sum(jnp.tanh(x @ w1) @ w2)


def _solve(a, b):
    return jax.scipy.linalg.solve_triangular(a, b, lower=True)


def _slogdet(x):
    return jnp.linalg.slogdet(jnp.outer(x, x) + jnp.diag(1.0 + x * x))[1]


# name -> (function, arguments): hlopt.laplacian, hlopt.jet, slogdet Laplacians, jets of triangular
# solves, and the weight gradient of a Laplacian (vjp-expand's products of the matmuls).
PROGRAMS = {
    "laplacian": (lambda x: hlopt.laplacian(lambda y: _mlp(W1, W2, y))(x), (X,)),
    "jet": (lambda x, v: hlopt.jet(jnp.sin, (x,), ((v, v),))[1][1], (X, X)),
    "slogdet_laplacian": (lambda x: hlopt.laplacian(_slogdet)(x), (X,)),
    "jet_of_solve": (lambda a, b: hlopt.jet(_solve, (a, b), ((a, a), (b, b)))[1][1], (A, B)),
    "laplacian_weight_gradient": (jax.grad(lambda w1: hlopt.laplacian(lambda y: _mlp(w1, W2, y))(X)), (W1,)),
}
LU = {"slogdet_laplacian"}  # programs with an LU factorization, which a TPU computes in float32 only


def test_every_pass_declares_its_platforms():
    assert not hasattr(Pass, "platforms")  # no default a pass could inherit unawares
    for name, cls in all_passes().items():
        if name.startswith("xla-cpu-"):
            assert cls.platforms == ("cpu",), name
        elif name.startswith("tpu-"):
            assert cls.platforms == ("tpu",), name
        else:
            assert cls.platforms == PORTABLE, name
        assert tuple(cls.platforms) == PORTABLE or set(cls.platforms) <= set(PLATFORMS), name


def test_which_targets_run_a_pass():
    assert Target().runs(PORTABLE) and Target(("tpu", "cpu")).runs(PORTABLE)
    assert Target(("cpu",)).runs(("cpu",)) and not Target(("tpu",)).runs(("cpu",))
    assert not Target().runs(("cpu",))  # none: portable IR
    assert not Target(("cpu", "tpu")).runs(("cpu",))  # several platforms: only portable passes
    assert Target(("cpu",), local=False).runs(("cpu",)) and Target(("cpu",), kernels=True).runs(("cpu",), True)
    assert not Target(("cpu",), local=False, kernels=True).runs(("cpu",), calls_runtime=True)  # an export runs without hlopt
    assert not Target(("cpu",)).runs(("cpu",), calls_runtime=True)  # the kernels are not built


@pytest.fixture(scope="module")
def lowered_programs():
    """Each program lowered by hlopt and made plain StableHLO by the portable lowerings alone."""
    lowerings = ",".join([*DEFAULT_LOWERINGS, "inline", "cse"])
    return {name: hlopt.lower(f, *args).apply(lowerings) for name, (f, args) in PROGRAMS.items()}


@pytest.mark.parametrize("platform", ["tpu", "none"])
def test_cpu_passes_leave_other_targets_alone(lowered_programs, platform):
    changed = set()
    for name, lowered in lowered_programs.items():
        before = lowered.as_text()
        for p in (*DEFAULT_TUNING, *OPT_IN_TUNING):
            if platform == "none" or p.startswith("xla-cpu-"):  # a TPU target is the TPU passes' own
                assert lowered.apply(p, platform=platform).as_text() == before, (name, p)
            if lowered.apply(p, platform="cpu").as_text() != before:
                changed.add(p)
    assert {"xla-cpu-sum-as-dot", "xla-cpu-stack-dots"} <= changed  # the programs do give them work on CPU


def test_unknown_platform_is_refused(capsys):
    with pytest.raises(ValueError, match="unknown platform 'gpu': use one of cpu, tpu, cuda, rocm, none"):
        hlopt.lower(jnp.sin, X).apply("hlopt-default", platform="gpu")
    with pytest.raises(SystemExit):
        main(["--platform", "gpu", "-"])
    assert "invalid choice: 'gpu'" in capsys.readouterr().err


def _exported(fun, args, *platforms: str) -> export.Exported:
    with jax.default_matmul_precision("highest"):
        return export.export(jax.jit(fun), platforms=platforms)(*args)


def _ones_dots(text: str) -> list[str]:
    """The dot_generals with a constant operand of ones: sums xla-cpu-sum-as-dot made products."""
    ones = set(re.findall(r"(%\w+) = stablehlo.constant dense<1\.0+e\+00>", text))
    return [line for line in text.splitlines() if "stablehlo.dot_general" in line
            and ones & set(re.findall(r"%\w+", line.split("=", 1)[1]))]


@pytest.mark.parametrize("name", PROGRAMS)
def test_tpu_export_is_portable_and_cpu_export_runs(name):
    fun, args = PROGRAMS[name]
    tpu = _exported(fun, args, "tpu").mlir_module()
    targets = set(re.findall(r"custom_call @([\w.]+)", tpu))
    assert not {t for t in targets if t.startswith(("lapack_", "hlopt"))}, targets
    assert not _ones_dots(tpu) and "hlopt.compiler_options" not in tpu
    cpu = _exported(fun, args, "cpu")
    with jax.default_device(jax.devices("cpu")[0]), jax.default_matmul_precision("highest"):  # also beside a TPU
        np.testing.assert_allclose(cpu.call(*args), jax.jit(fun)(*args), rtol=1e-12, atol=1e-12)


def test_cpu_export_is_tuned_for_cpu():
    fun, args = PROGRAMS["laplacian"]
    assert _ones_dots(_exported(fun, args, "cpu").mlir_module())  # the sum over directions, as a product


@pytest.mark.parametrize("name", [pytest.param(name, marks=[pytest.mark.float64] if name in LU else [])
                                  for name in PROGRAMS if name != "jet"])  # a jet of sin has no product
def test_every_product_carries_the_programs_precision(name):
    """Under default_matmul_precision('highest') every dot_general hlopt's rules and passes emit is
    HIGHEST: in TPU and CPU exports, and in the program hlopt.jit compiles."""
    fun, args = PROGRAMS[name]
    with jax.default_matmul_precision("highest"):
        texts = [_exported(fun, args, p).mlir_module() for p in ("tpu", "cpu")]
        texts.append(str(hlopt.jit(fun).lower(*args).compile().module))
    for text in texts:
        dots = [line for line in text.splitlines() if "stablehlo.dot_general" in line]
        assert dots and all("precision = [HIGHEST, HIGHEST]" in d for d in dots), dots


def _nested_ops(op: ir.Operation):
    for region in op.regions:
        for block in region.blocks:
            for inner in block.operations:
                yield inner.operation
                yield from _nested_ops(inner.operation)


def _custom_calls_per_platform(exported: export.Exported) -> dict[str, set[str]]:
    """The custom calls each platform of a multi-platform export runs, for a program whose only
    platform-dependent part is one hlopt operation: `@main` picks a rule index by the platform index
    (one `stablehlo.case`), then calls that rule's function (a second one)."""
    with get_context():
        module = ir.Module.parse(exported.mlir_module())
        table = ir.SymbolTable(module.operation)

        def reached(name: str, targets: set[str]) -> set[str]:
            for op in _nested_ops(table[name].operation):
                if op.name == "stablehlo.custom_call":
                    targets.add(ir.StringAttr(op.attributes["call_target_name"]).value)
                elif op.name == "func.call":
                    reached(ir.FlatSymbolRefAttr(op.attributes["callee"]).value, targets)
            return targets

        choose, rules = [op for op in _nested_ops(table["main"].operation) if op.name == "stablehlo.case"]
        calls = {}
        for platform, region in zip(exported.platforms, choose.regions):
            index = list(region.blocks[0].operations)[-1].operands[0].owner
            rule = int(ir.DenseIntElementsAttr(index.attributes["value"])[0])
            call, = [op.operation for op in rules.regions[rule].blocks[0].operations
                     if op.operation.name == "func.call"]
            calls[platform] = reached(ir.FlatSymbolRefAttr(call.attributes["callee"]).value, set())
        return calls


@pytest.mark.parametrize("name, reference", [
    ("slogdet_laplacian", lambda x: jnp.trace(jax.hessian(_slogdet)(x))),
    ("laplacian", lambda x: jnp.trace(jax.hessian(lambda y: _mlp(W1, W2, y))(x))),
])
def test_export_for_cpu_and_tpu_runs_on_cpu_with_a_portable_tpu_branch(name, reference):
    fun, args = PROGRAMS[name]
    exported = export.deserialize(_exported(fun, args, "cpu", "tpu").serialize())
    assert exported.platforms == ("cpu", "tpu")
    with jax.default_matmul_precision("highest"):
        np.testing.assert_allclose(exported.call(*args), jax.jit(reference)(*args), rtol=1e-12)
    calls = _custom_calls_per_platform(exported)  # the CPU and TPU programs differ: one branch each
    assert not {t for t in calls["tpu"] if t.startswith(("lapack_", "hlopt"))}, calls
    if name == "slogdet_laplacian":
        assert {t for t in calls["cpu"] if t.startswith("lapack_")}, calls  # XLA:CPU's LU, as jax lowers it


def test_export_for_platforms_whose_programs_agree_calls_one_function():
    fun, args = PROGRAMS["jet"]  # a jet of sin: no platform tunes or lowers it differently
    exported = _exported(fun, args, "cpu", "tpu", "cuda")
    assert "stablehlo.case" not in exported.mlir_module()
    want = jax_jet.jet(jnp.sin, (X,), ((X, X),))[1][1]
    np.testing.assert_allclose(export.deserialize(exported.serialize()).call(*args), want, rtol=1e-12)
