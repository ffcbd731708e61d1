"""`xla-cpu-ynn-fusion` (opt-in): the compile option it records reaches XLA:CPU, changes no values,
and yields to the user's own choice; `hlopt-default` records none, so `hlopt.jit` and `jax.jit`
compile with the same options.

The option it records (`xla_cpu_experimental_ynn_fusion_type=LIBRARY_FUSION_TYPE_INDIVIDUAL_DOT`)
shows in XLA's optimized HLO: the program of a sum over rows of 12 has a YNNPACK fusion without
it and none with it, however the module is compiled (`hlopt.jit`, `Lowered.compile`, the cache,
a file recompiled from its portable artifact). A `compiler_options=` entry or an `XLA_FLAGS`
flag naming the option wins; the persistent cache keeps the two programs apart; a module from
a file cannot record other options.
"""

from __future__ import annotations

import re
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import hlopt
from hlopt.passes.mlir import ir
from hlopt.passes.registry import PIPELINES
from hlopt.passes.xla_cpu import ynn_fusion
from hlopt.runtime import cache as cache_mod
from hlopt.runtime.compile import program_options

DEFAULT = PIPELINES["hlopt-default"]
WITH = DEFAULT + ",xla-cpu-ynn-fusion"  # the opt-in step, after the passes whose reductions it weighs
WITHOUT = DEFAULT
RECORDED = ((ynn_fusion.OPTION, ynn_fusion.WITHOUT_REDUCE),)
WITH_REDUCE = {ynn_fusion.OPTION: "LIBRARY_FUSION_TYPE_INDIVIDUAL_DOT,LIBRARY_FUSION_TYPE_REDUCE"}


def squared_norms(r):
    """Per point, the sum of squares of its 12 coordinates: a reduction over rows of 12 (more
    than xla-cpu-sum-as-dot adds as slices)."""
    return jnp.sum(r * r, axis=-1)


R = jax.random.normal(jax.random.key(0), (4096, 12), jnp.float32)


def ynn_fusions(compiled) -> int:
    return len(re.findall(r"%ynn_fusion[.\d]* = ", compiled.as_text()))


def electrons_log_psi(x):
    """A small determinant wavefunction of 4 electrons in 3D: norms summed over x, y, z, an MLP
    of them, an envelope, log|det|."""
    r = x.reshape(4, 3)
    norm = jnp.sqrt(jnp.sum(r * r, -1, keepdims=True) + 1e-2)
    h = jnp.tanh(jnp.concatenate([r, norm, r - jnp.mean(r, 0)], -1) @ W1)
    phi = (h @ W2) * jnp.exp(-norm * jnp.linspace(0.8, 1.2, 4))
    return jnp.linalg.slogdet(phi)[1]


W1 = jax.random.normal(jax.random.key(1), (7, 16)) / 3
W2 = jax.random.normal(jax.random.key(2), (16, 4)) / 4


def test_option_reaches_the_executable():
    """With the step the sum's program has no YNNPACK fusion; without it, one."""
    lowered = hlopt.lower(squared_norms, R)
    assert "hlopt.compiler_options" in lowered.apply(WITH, platform="cpu").as_text()
    assert "hlopt.compiler_options" not in lowered.apply(WITHOUT, platform="cpu").as_text()
    with_step, without_step = lowered.compile(WITH), lowered.compile(WITHOUT)
    assert ynn_fusions(without_step) == 1 and ynn_fusions(with_step) == 0
    assert ynn_fusions(hlopt.jit(squared_norms).lower(R).compile(WITH)) == 0
    assert ynn_fusions(lowered.apply(WITH, platform="cpu").compile(pipeline="")) == 0  # applied, then compiled (hlopt compile -v)
    np.testing.assert_allclose(with_step(R), without_step(R), rtol=1e-6)
    np.testing.assert_allclose(with_step(R), np.sum(np.asarray(R, np.float64) ** 2, -1), rtol=1e-5)


def test_a_long_row_reduction_keeps_the_fusion():
    """A max over rows of 1024, which the fusion runs faster: nothing is recorded."""
    x = jax.random.normal(jax.random.key(3), (64, 1024), jnp.float32)
    lowered = hlopt.lower(lambda v: jnp.max(v, axis=1), x)
    assert "hlopt.compiler_options" not in lowered.apply(WITH, platform="cpu").as_text()
    assert ynn_fusions(lowered.compile(WITH)) == 1


def test_users_options_win():
    """A compiler_options entry naming the option, given to the jit or to compile, replaces the recorded one."""
    assert ynn_fusions(hlopt.jit(squared_norms, compiler_options=WITH_REDUCE).lower(R).compile(WITH)) == 1
    assert ynn_fusions(hlopt.lower(squared_norms, R).compile(WITH, compiler_options=WITH_REDUCE)) == 1
    other = {"xla_cpu_enable_fast_math": False}  # an option about something else: the recorded one stays
    assert ynn_fusions(hlopt.jit(squared_norms, compiler_options=other).lower(R).compile(WITH)) == 0


def test_xla_flags_naming_the_option_win(monkeypatch):
    """`XLA_FLAGS` naming the option (as users turn YNNPACK off) keeps the recorded one out:
    the process's own setting applies (here XLA's default, read when jax started)."""
    monkeypatch.setenv("XLA_FLAGS", f"--xla_force_host_platform_device_count=8 --{ynn_fusion.OPTION}="
                       "LIBRARY_FUSION_TYPE_INDIVIDUAL_DOT,LIBRARY_FUSION_TYPE_REDUCE")
    with cache_mod.using_cache_dir(None):
        assert ynn_fusions(hlopt.lower(squared_norms, R).compile(WITH)) == 1


def test_program_options():
    """The recorded option joins the user's on CPU only, after theirs; a bare name in XLA_FLAGS counts."""
    module = hlopt.lower(squared_norms, R).apply(WITH, platform="cpu").module
    assert ynn_fusion.recorded_options(module.operation) == RECORDED
    assert program_options(module, "cpu") == RECORDED
    assert program_options(module, "cuda") == ()
    fast = (("xla_cpu_enable_fast_math", False),)
    assert program_options(module, "cpu", fast) == (fast[0], RECORDED[0])  # sorted by name
    mine = ((ynn_fusion.OPTION, ""),)
    assert program_options(module, "cpu", mine) == mine
    plain = hlopt.lower(squared_norms, R).apply(WITHOUT, platform="cpu").module
    assert program_options(plain, "cpu", fast) == fast


@pytest.mark.parametrize("entry", ['{xla_dump_to = "/tmp/anywhere"}', f'{{{ynn_fusion.OPTION} = ""}}',
                                   f"{{{ynn_fusion.OPTION} = 1 : i32}}", '"not a dictionary"',
                                   # a key that reads back as the option's name, cut at its NUL byte
                                   f'{{"{ynn_fusion.OPTION}\\00--xla_dump_to=/tmp" = "{ynn_fusion.WITHOUT_REDUCE}"}}',
                                   f'{{"{ynn_fusion.OPTION}\\00x" = "{ynn_fusion.WITHOUT_REDUCE}", '
                                   f'{ynn_fusion.OPTION} = "{ynn_fusion.WITHOUT_REDUCE}"}}'])
def test_only_recordable_options_are_honoured(entry):
    """A module (say from an unauthenticated file) that records anything hlopt's passes never
    record is refused, not compiled with it."""
    with ir.Context():
        module = ir.Module.parse(f"module attributes {{{ynn_fusion.ATTRIBUTE} = {entry}}} {{}}")
        with pytest.raises(ValueError, match="hlopt.compiler_options"):
            program_options(module, "cpu")


def test_the_cache_keeps_the_programs_apart(tmp_path):
    """With and without the step are two entries; a hit serves the program compiled with the option,
    and a program compiled from a post-pass module (files, `compile_program`) is keyed by its options."""
    from hlopt.runtime.compile import compile_program

    with cache_mod.using_cache_dir(tmp_path / "cache"):
        lowered = hlopt.lower(squared_norms, R)
        first = lowered.compile(WITH)
        assert (hlopt.cache_info().hits, hlopt.cache_info().misses) == (0, 1)
        without_step = lowered.compile(WITHOUT)
        assert (hlopt.cache_info().hits, hlopt.cache_info().misses) == (0, 2)
        hit = hlopt.lower(squared_norms, R).compile(WITH)
        assert (hlopt.cache_info().hits, hlopt.cache_info().misses) == (1, 2)
        assert ynn_fusions(first) == ynn_fusions(hit) == 0 and ynn_fusions(without_step) == 1
        signature = lowered.signature
        recorded, plain = lowered.apply(WITH, platform="cpu").module, lowered.apply(WITHOUT, platform="cpu").module
        compile_program(recorded, signature)
        compile_program(plain, signature)
        assert (hlopt.cache_info().hits, hlopt.cache_info().misses) == (1, 4)
        compile_program(lowered.apply(WITH, platform="cpu").module, signature)
        assert (hlopt.cache_info().hits, hlopt.cache_info().misses) == (2, 4)


def test_a_file_recompiled_from_its_artifact_keeps_the_option(monkeypatch, tmp_path):
    """The portable artifact carries the module attribute: a file loaded with trust="portable" is
    compiled with the option, as it was saved."""
    monkeypatch.setenv("HLOPT_KEY", "key A " * 8)
    compiled = hlopt.jit(squared_norms).lower(R).compile(WITH)
    data = compiled.serialize()
    monkeypatch.setenv("HLOPT_KEY", "key B " * 8)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", hlopt.RecompileWarning)
        loaded = hlopt.deserialize(data, trust="portable")
    assert ynn_fusions(loaded) == 0
    np.testing.assert_allclose(loaded(R), compiled(R), rtol=1e-6)


def test_hlopt_operations_inside_jax_jit_leave_no_attribute():
    """Under plain `jax.jit` (and `jax.export`) an hlopt operation's plain StableHLO is merged into
    jax's module: the attribute does not come with it, and jax compiles with its own options."""
    f = jax.vmap(hlopt.laplacian(lambda y: jnp.sum(squared_norms(y.reshape(-1, 12)) ** 2)))
    xs = jax.random.normal(jax.random.key(4), (512, 24))
    assert "hlopt.compiler_options" in hlopt.lower(f, xs).apply(WITH, platform="cpu").as_text()
    assert "hlopt.compiler_options" not in jax.jit(f).lower(xs).as_text()
    assert "hlopt.compiler_options" not in jax.export.export(jax.jit(f))(xs).mlir_module()
    np.testing.assert_allclose(jax.jit(f)(xs), hlopt.jit(f)(xs), rtol=1e-5)


def test_same_numbers_with_and_without_the_step():
    """A determinant wavefunction's kinetic energy and its weight gradient in float64: the program
    compiled with the option the step records (YNNPACK's reduce fusion off) and the one without
    agree, and both agree with the Hessian trace."""
    with jax.enable_x64(True):
        xs = jax.random.normal(jax.random.key(5), (64, 12), jnp.float64)

        def energies(laplacian):
            return lambda w: jax.vmap(lambda x: laplacian(lambda y: electrons_log_psi(y) * w)(x))(xs)

        def hessian_trace(f):
            return lambda x: jnp.trace(jax.hessian(f)(x))

        kinetic = energies(hlopt.laplacian)
        gradient = jax.grad(lambda w: jnp.mean(kinetic(w) ** 2))
        w = jnp.float64(1.3)
        for fun, reference in ((kinetic, energies(hessian_trace)),
                               (gradient, jax.grad(lambda v: jnp.mean(energies(hessian_trace)(v) ** 2)))):
            lowered = hlopt.lower(fun, w)
            with_step = lowered.compile(compiler_options=dict(RECORDED))(w)
            without_step = lowered.compile()(w)
            want = jax.jit(reference)(w)
            scale = float(np.max(np.abs(want)))
            np.testing.assert_allclose(with_step, without_step, rtol=0, atol=1e-12 * scale)
            np.testing.assert_allclose(with_step, want, rtol=0, atol=1e-9 * scale)


def test_hlopt_default_compiles_what_jax_jit_compiles():
    """`hlopt-default` records no option: the wavefunction's kinetic energy under `hlopt.jit` and
    under plain `jax.jit` has the same YNNPACK fusions, and the option, given to either path's
    `compiler_options`, takes every reduction out of them on both."""
    xs = jax.random.normal(jax.random.key(6), (512, 12), jnp.float32)
    f = jax.vmap(hlopt.laplacian(electrons_log_psi))
    assert "hlopt.compiler_options" not in hlopt.lower(f, xs).apply(DEFAULT, platform="cpu").as_text()
    ours, theirs = hlopt.jit(f).lower(xs).compile(), jax.jit(f).lower(xs).compile()
    assert ynn_fusions(ours) == ynn_fusions(theirs) > 0
    off = dict(RECORDED)
    assert ynn_fusions(hlopt.jit(f, compiler_options=off).lower(xs).compile()) == \
        ynn_fusions(jax.jit(f).lower(xs).compile(compiler_options=off)) < ynn_fusions(ours)
    np.testing.assert_allclose(ours(xs), theirs(xs), rtol=1e-4, atol=1e-4)
