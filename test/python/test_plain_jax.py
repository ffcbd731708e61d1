"""hlopt's operations inside plain `jax.jit`, `jax.export` and JAX's persistent cache.

Each function runs through `jax.jit` (jax lowers it; each hlopt operation is
made plain StableHLO and merged in) and through `hlopt.jit` (hlopt lowers it in
annotation form and `hlopt-default` makes each operation plain the same way); both
are compared with a JAX reference in float64 and with each other.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import jet as jax_jet
from jax.experimental import sparse as jsparse
from jax.numpy.fft import fft
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

import hlopt
from hlopt import sparse as hs
from hlopt.passes.registry import PIPELINES

from support.sandbox import run_forked



@pytest.fixture(autouse=True, scope="module")
def float64():
    """float64 for this module's tests only: a global switch at import would change every later file."""
    with jax.enable_x64(True):
        yield

RNG = np.random.default_rng(25)


def f(x):
    return jnp.sum(jnp.sin(x) ** 2 * x[::-1]) + jnp.tanh(x[0] * x[1])


def f2(x):
    return jnp.exp(-jnp.sum(x**2)) * jnp.cos(x[0])


def hessian_trace(fun):
    return lambda x: jnp.trace(jax.hessian(fun)(x))


def sparse_matrix(shape=(6, 5), seed=0):
    dense = np.random.default_rng(seed).standard_normal(shape) * (np.random.default_rng(seed + 1).random(shape) < 0.4)
    return dense


def jet_ref(fun, primals, series):
    return jax_jet.jet(fun, primals, series)


X = RNG.standard_normal(5)
XS = RNG.standard_normal((3, 5))
A = sparse_matrix()
B = sparse_matrix((5, 4), seed=7)
NSE_A, NSE_B = int((A != 0).sum()), int((B != 0).sum())

# name -> (function of arrays, arguments, reference function)
CASES = {
    "laplacian": (hlopt.laplacian(f), (X,), hessian_trace(f)),
    "laplacian_f2": (hlopt.laplacian(f2), (X,), hessian_trace(f2)),
    "bilaplacian": (hlopt.bilaplacian(f2), (X,), hessian_trace(hessian_trace(f2))),
    "grad_laplacian": (jax.grad(hlopt.laplacian(f)), (X,), jax.grad(hessian_trace(f))),
    "vmap_laplacian": (jax.vmap(hlopt.laplacian(f2)), (XS,), jax.vmap(hessian_trace(f2))),
    "jvp_laplacian": (lambda x: jax.jvp(hlopt.laplacian(f), (x,), (jnp.ones_like(x),))[1], (X,),
                      lambda x: jax.jvp(hessian_trace(f), (x,), (jnp.ones_like(x),))[1]),
    "jet_order3": (lambda x, v: hlopt.jet(jnp.sin, (x,), ((v, v, v),)), (X, X[::-1]),
                   lambda x, v: jet_ref(jnp.sin, (x,), ((v, v, v),))),
    "grad_jet": (jax.grad(lambda x: hlopt.jet(f2, (x,), ((jnp.ones_like(x), x),))[1][1]), (X,),
                 jax.grad(lambda x: jet_ref(f2, (x,), ((jnp.ones_like(x), x),))[1][1])),
    "bcoo_matvec": (lambda d, v: hs.BCOO.fromdense(d, nse=NSE_A) @ v, (A, X),
                    lambda d, v: jsparse.BCOO.fromdense(d, nse=NSE_A) @ v),
    "bcoo_spspmm": (lambda a, b: (hs.BCOO.fromdense(a, nse=NSE_A) @ hs.BCOO.fromdense(b, nse=NSE_B)).todense(), (A, B),
                    lambda a, b: a @ b),
    "grad_bcoo_then_laplacian": (jax.grad(lambda d, v: hlopt.laplacian(f2)((hs.BCOO.fromdense(d, nse=NSE_A) @ v)[:5]),
                                          argnums=1), (A, X),
                                 jax.grad(lambda d, v: hessian_trace(f2)((d @ v)[:5]), argnums=1)),
}


def assert_tree_close(got, want, rtol):
    jax.tree_util.tree_map(lambda g, w: np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=rtol,
                                                                     atol=rtol), got, want)


def _same_program_text(compiled_text: str) -> str:
    """XLA's optimized HLO text without what names the program rather than what it computes: debug
    information, instruction, computation and parameter names, the order of backend_config's keys,
    and the module's header attributes (jax.jit's module states its sharding propagation)."""
    blocks = [b.strip("\n") for b in compiled_text.split("\n\n")
              if b.strip() and not re.match(r"(FileNames|FunctionNames|FileLocations|StackFrames)\n", b)]
    text = "\n\n".join(blocks)
    text = re.sub(r", metadata=\{[^{}]*\}", "", text)
    text = re.sub(r'backend_config=(\{"[^\n]*)', lambda m: "backend_config=" + _sorted_json(m[1]), text)
    text = re.sub(r"%[\w.\-]+", "%x", text)
    text = re.sub(r"[\w.\-]+(?=: \(|: [a-z]+\d*\[)", "p", text)  # parameter names in computation signatures
    return re.sub(r"^HloModule .*$", "HloModule", text, count=1, flags=re.M).strip()


def _sorted_json(text: str) -> str:
    """`text` with the JSON object it starts with printed with sorted keys."""
    value, end = json.JSONDecoder().raw_decode(text)
    return json.dumps(value, sort_keys=True) + text[end:]


@pytest.mark.parametrize("name", list(CASES))
def test_plain_jax_jit_matches_reference_and_hlopt_jit(name):
    fun, args, ref = CASES[name]
    plain = jax.jit(fun)(*args)
    assert_tree_close(plain, ref(*args), rtol=1e-10)
    assert_tree_close(plain, hlopt.jit(fun)(*args), rtol=1e-12)


@pytest.mark.parametrize("name", ["laplacian", "grad_jet", "bcoo_spspmm"])
def test_jax_module_holds_no_annotation_and_hlopt_lower_keeps_them(name):
    fun, args, _ = CASES[name]
    plain = jax.jit(fun).lower(*args).as_text()
    assert "@hlopt." not in plain, plain
    annotated = hlopt.lower(fun, *args).as_text()
    assert "stablehlo.custom_call @hlopt." in annotated, annotated


def _mlp(weights, y):
    for w in weights[:-1]:
        y = jnp.tanh(y @ w)
    return (y @ weights[-1])[0]


def _mlp_laplacian(weights, x):
    return hlopt.laplacian(lambda y: _mlp(weights, y))(x)


def test_plain_path_sees_the_constant_series_hlopt_jit_sees():
    """The zero series of closed-over weights and the identity directions are constants in jax's
    module: the per-operation passes must see them, as hlopt-default does in the whole program
    (else jet-expand keeps every term of the zero series: 23 dot_generals here instead of 8, 5 with
    the opt-in xla-cpu-stack-dots)."""
    weights = [RNG.standard_normal((5, 16)), RNG.standard_normal((16, 16)), RNG.standard_normal((16, 1))]
    plain = jax.jit(_mlp_laplacian).lower(weights, X).as_text()
    whole = hlopt.lower(_mlp_laplacian, weights, X).apply("hlopt-default", platform="cpu").as_text()
    assert plain.count("stablehlo.dot_general") == whole.count("stablehlo.dot_general") <= 8
    np.testing.assert_allclose(jax.jit(_mlp_laplacian)(weights, X), hessian_trace(lambda y: _mlp(weights, y))(X),
                               rtol=1e-10)


_MLP = [RNG.standard_normal((5, 32)), RNG.standard_normal((32, 32)), RNG.standard_normal((32, 1))]
# name -> a function whose jets have results no one reads (primals, lower orders, outputs)
UNUSED_RESULTS = {
    "vmap_laplacian": (jax.vmap(lambda x: _mlp_laplacian(_MLP, x)), (XS,)),
    "grad_laplacian": (jax.grad(lambda x: _mlp_laplacian(_MLP, x)), (X,)),
    "jet_top_order": (lambda x: hlopt.jet(lambda y: _mlp(_MLP, y), (x,), ((jnp.ones_like(x), x, x),))[1][2], (X,)),
    "jet_one_output": (lambda x: hlopt.jet(lambda y: (jnp.sin(y), _mlp(_MLP, y)), (x,), ((x, x),))[1][1][1], (X,)),
    "bilaplacian": (jax.vmap(hlopt.bilaplacian(lambda y: _mlp(_MLP, y))), (XS,)),
}


@pytest.mark.parametrize("name", list(UNUSED_RESULTS))
def test_the_jax_jit_path_drops_unread_jet_results_as_hlopt_jit_does(name):
    """jax.jit's dead-code elimination tells a jet which of its results are read (its `live`
    parameter), so hlopt's passes drop the rest before jet-expand stacks the terms of one
    dot, as hlopt.jit's elimination over the whole program does: XLA's optimized programs of
    the two paths are the same (without the rule, 112 instructions against 101 on the
    vmapped Laplacian)."""
    fun, args = UNUSED_RESULTS[name]
    plain, whole = (side.lower(*args).compile().as_text() for side in (jax.jit(fun), hlopt.jit(fun)))
    assert _same_program_text(plain) == _same_program_text(whole)
    plain, whole = jax.jit(fun), hlopt.jit(fun)
    assert_tree_close(plain(*args), whole(*args), rtol=1e-12)
    assert_tree_close(plain(*args), jax.jit(fun, keep_unused=True)(*args), rtol=1e-12)


def test_a_jet_keeps_only_the_results_jax_reads():
    from hlopt.taylor import jet_p

    jaxpr = jax.make_jaxpr(UNUSED_RESULTS["jet_top_order"][0])(X)
    from hlopt.compiler import jax_compat

    pruned, _ = jax_compat._pe.dce_jaxpr(jaxpr.jaxpr, [True])
    (eqn,) = [e for e in pruned.eqns if e.primitive is jet_p]
    assert eqn.params["live"] == (False, False, False, True) and len(eqn.outvars) == 1


def _sorted_matrix(shape, seed, dtype):
    dense = sparse_matrix(shape, seed).astype(dtype)
    m = jsparse.BCOO.fromdense(dense)
    return dense, np.asarray(m.data), np.asarray(m.indices)


def _sparse_products(shape, n_cols):
    """Row-sorted sparse x dense products (SpMV or SpMM, SDDMM) and their gradient: xla-cpu-sparse-kernels'
    rewrites."""
    def products(data, indices, x, p, q):
        a = hs.BCOO((data, indices), shape=shape, indices_sorted=True)
        sampled = hs.bcoo_dot_general_sampled(p, q, indices, dimension_numbers=(((1,), (0,)), ((), ())))
        return jnp.sin(a @ x), sampled

    def loss(data, indices, x, p, q):
        y, s = products(data, indices, x, p, q)
        return jnp.sum(y**2) + jnp.sum(jnp.cos(s))

    return {"products": products, "grad": jax.grad(loss, argnums=(0, 2, 3, 4))}


@pytest.mark.parametrize("n_cols", [None, 3])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("kind", ["products", "grad"])
def test_sparse_kernels_run_under_jax_jit_as_under_hlopt_jit(kind, dtype, n_cols):
    """On CPU, jax.jit's path makes row-sorted products calls of hlopt's kernels, as hlopt.jit does:
    the same numbers, the kernel calls in XLA's optimized HLO, and the same optimized program."""
    shape = (7, 5)
    dense, data, indices = _sorted_matrix(shape, 3, dtype)
    x = RNG.standard_normal((5,) if n_cols is None else (5, n_cols)).astype(dtype)
    p, q = RNG.standard_normal((7, 2)).astype(dtype), RNG.standard_normal((2, 5)).astype(dtype)
    fun = _sparse_products(shape, n_cols)[kind]
    args = (data, indices, x, p, q)
    plain, whole = (side.lower(*args).compile() for side in (jax.jit(fun), hlopt.jit(fun)))
    for text in (plain.as_text(), whole.as_text()):
        assert "hlopt_bcoo_spmm" in text and "hlopt_bcoo_sddmm" in text
    assert _same_program_text(plain.as_text()) == _same_program_text(whole.as_text())
    got = plain(*args)
    assert_tree_close(got, whole(*args), rtol=1e-12 if dtype == np.float64 else 1e-5)

    def reference(data, indices, x, p, q):  # jax's own BCOO, no hlopt
        a = jsparse.BCOO((data, indices), shape=shape, indices_sorted=True)
        sampled = jsparse.bcoo_dot_general_sampled(p, q, indices, dimension_numbers=(((1,), (0,)), ((), ())))
        y = jnp.sin(a @ x)
        return y, sampled

    want = (reference(*args) if kind == "products" else jax.grad(
        lambda d, x, p, q: jnp.sum(reference(d, indices, x, p, q)[0] ** 2)
        + jnp.sum(jnp.cos(reference(d, indices, x, p, q)[1])), argnums=(0, 1, 2, 3))(data, x, p, q))
    assert_tree_close(got, want, rtol=1e-10 if dtype == np.float64 else 1e-4)


def test_jax_export_and_hlopt_apply_keep_sparse_products_portable():
    shape = (7, 5)
    _, data, indices = _sorted_matrix(shape, 3, np.float64)
    fun = _sparse_products(shape, 3)["grad"]
    args = (data, indices, np.ones((5, 3)), np.ones((7, 2)), np.ones((2, 5)))
    exported = jax.export.export(jax.jit(fun))(*args).mlir_module()
    assert "custom_call @hlopt" not in exported  # no kernel call (hlopt_...) or annotation (hlopt....)
    assert "custom_call @hlopt" not in hlopt.lower(fun, *args).apply("hlopt-default").as_text()
    assert "hlopt_bcoo_spmm" in jax.jit(fun).lower(*args).as_text()  # lowered for this process's CPU


def test_hlopt_op_inside_an_inner_jax_jit_of_hlopt_jit():
    inner = jax.jit(hlopt.laplacian(f))
    outer = hlopt.jit(lambda x: inner(x) * 2)
    np.testing.assert_allclose(outer(X), 2 * hessian_trace(f)(X), rtol=1e-10)
    assert "stablehlo.custom_call @hlopt.jet" in hlopt.lower(lambda x: inner(x) * 2, X).as_text()


def exported_function(data, indices, x):
    """BCOO products (row-sorted: hlopt's CPU kernels on the jax.jit path), `hlopt.jet` and
    `hlopt.laplacian` in one function of arrays."""
    m = hs.BCOO((data, indices), shape=A.shape, indices_sorted=True)
    y = m @ x
    series = hlopt.jet(jnp.sin, (y,), ((jnp.ones_like(y), y),))[1]
    return hlopt.laplacian(f)(y[:5] * x) + jnp.sum(series[1]), (m.T @ y)


_EXPORT_SCRIPT = textwrap.dedent("""
    import json, sys
    import jax
    jax.config.update("jax_enable_x64", True)
    import numpy as np
    args = np.load(sys.argv[2])
    exported = jax.export.deserialize(open(sys.argv[1], "rb").read())
    out = exported.call(args["data"], args["indices"], args["x"])
    assert "hlopt" not in sys.modules and not any(m.startswith("hlopt.") for m in sys.modules), "hlopt imported"
    print(json.dumps([float(out[0])] + [float(v) for v in np.asarray(out[1])]))
""")


def test_jax_export_runs_where_hlopt_is_never_imported(tmp_path):
    m = hs.BCOO.fromdense(A, nse=NSE_A)
    args = (np.asarray(m.data), np.asarray(m.indices), X)
    assert "hlopt_bcoo_spmm" in jax.jit(exported_function).lower(*args).compile().as_text()
    exported = jax.export.export(jax.jit(exported_function))(*args)
    assert "custom_call @hlopt" not in exported.mlir_module()  # no kernel call (hlopt_...) or annotation (hlopt....)
    (tmp_path / "f.jax").write_bytes(exported.serialize())
    np.savez(tmp_path / "args.npz", data=args[0], indices=args[1], x=args[2])
    run = run_forked(["-c", _EXPORT_SCRIPT, str(tmp_path / "f.jax"), str(tmp_path / "args.npz")], timeout=300,
                     env={"PYTHONPATH": None}, cwd=tmp_path)  # a process that has imported jax, never hlopt
    assert run.returncode == 0, run.describe()
    got = json.loads(run.stdout)
    want = hlopt.jit(exported_function)(*args)
    np.testing.assert_allclose(got, [float(want[0]), *np.asarray(want[1])], rtol=1e-12)
    dense = lambda d, i, x: (hessian_trace(f)((A @ x)[:5] * x)  # noqa: E731
                             + jnp.sum(jet_ref(jnp.sin, (A @ x,), ((jnp.ones(6), A @ x),))[1][1]), A.T @ (A @ x))
    ref = dense(*args)
    np.testing.assert_allclose(got, [float(ref[0]), *np.asarray(ref[1])], rtol=1e-10)


_CACHE_SCRIPT = textwrap.dedent("""
    import json, sys
    import jax
    jax.config.update("jax_enable_x64", True)
    jax.config.update("jax_compilation_cache_dir", sys.argv[1])
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    events = []
    jax.monitoring.register_event_listener(lambda name, **kw: events.append(name))
    import numpy as np
    import hlopt
    from hlopt import sparse as hs
    def fun(d, x):
        m = hs.BCOO.fromdense(d, nse=8)
        m = hs.BCOO((m.data, m.indices), shape=m.shape, indices_sorted=True)  # hlopt's CPU kernel
        return hlopt.laplacian(lambda y: jax.numpy.sum(jax.numpy.sin(y) ** 2))(m @ x)
    d = np.arange(12.0).reshape(3, 4) % 3
    out = jax.jit(fun)(d, np.linspace(0.1, 1.0, 4))
    kernel = "hlopt_bcoo_spmm" in jax.jit(fun).lower(d, np.linspace(0.1, 1.0, 4)).compile().as_text()
    print(json.dumps({"value": float(out), "hits": events.count("/jax/compilation_cache/cache_hits"),
                      "kernel": kernel}))
""")


def test_jax_persistent_cache_hits_a_program_with_hlopt_ops(tmp_path):
    runs = []
    for _ in range(2):
        run = subprocess.run([sys.executable, "-c", _CACHE_SCRIPT, str(tmp_path / "cache")], capture_output=True,
                             text=True, timeout=300, cwd=tmp_path)
        assert run.returncode == 0, run.stderr
        runs.append(json.loads(run.stdout))
    assert runs[0]["hits"] == 0 and runs[1]["hits"] >= 1, runs
    assert runs[0]["value"] == runs[1]["value"] and runs[0]["kernel"] and runs[1]["kernel"]
    d = np.arange(12.0).reshape(3, 4) % 3
    want = hessian_trace(lambda y: jnp.sum(jnp.sin(y) ** 2))(d @ np.linspace(0.1, 1.0, 4))
    np.testing.assert_allclose(runs[1]["value"], want, rtol=1e-10)
    assert os.listdir(tmp_path / "cache")


# --- hlopt.custom_partitioning under plain jax.jit -------------------------------------------


def _supported(sharding, shape):
    rank = len(shape.shape)
    keep = min(len(sharding.spec), rank - 1)
    return NamedSharding(sharding.mesh, P(*(tuple(sharding.spec[:keep]) + (None,) * (rank - keep))))


def _recording_fft(seen):
    def partition(mesh, arg_shapes, result_shape):
        seen.append(arg_shapes[0].sharding.spec)
        s = _supported(arg_shapes[0].sharding, arg_shapes[0])
        return mesh, fft, s, (s,)

    op = hlopt.custom_partitioning(lambda x: fft(x))
    op.def_partition(partition=partition, sharding_rule="...i -> ...i")
    return op


def test_custom_partitioning_under_plain_jax_jit_is_partitioned_by_xla_with_the_propagated_sharding():
    mesh = Mesh(np.array(jax.devices()[:8]), ("x",))
    x = (RNG.standard_normal((8, 16)) + 1j * RNG.standard_normal((8, 16))).astype(np.complex64)
    seen = []
    op = _recording_fft(seen)
    xs = jax.device_put(x, NamedSharding(mesh, P("x")))
    out = jax.jit(op)(xs)
    np.testing.assert_allclose(out, fft(x), rtol=1e-4, atol=1e-4)
    assert seen == [P("x", None)]
    assert out.sharding.spec == P("x")
    hlo = jax.jit(op).lower(xs).compile().as_text()
    assert "all-gather" not in hlo and "all-to-all" not in hlo


def test_custom_partitioned_function_called_eagerly_evaluates_its_body():
    mesh = Mesh(np.array(jax.devices()[:8]), ("x",))
    x = RNG.standard_normal((8, 16)).astype(np.complex64)
    seen = []
    op = _recording_fft(seen)
    with jax.set_mesh(mesh):
        out = op(jax.device_put(x, NamedSharding(mesh, P("x"))))
    np.testing.assert_allclose(out, fft(x), rtol=1e-4, atol=1e-4)
    assert seen == []


# --- meshes with Explicit axes: the sharding is part of each value's type -----------------------

def sin_times(y):
    return jnp.sin(y) * y + jnp.exp(y[..., ::-1] * 0.5)


def sum_sin2(p):
    return jnp.sum(jnp.sin(p) ** 2 * p[::-1])


EXPLICIT = {  # ours, the reference, and the operation's input
    "jet2": (lambda x: hlopt.jet(sin_times, (x,), ((jnp.ones_like(x), 0.5 * x),)),
             lambda x: jax_jet.jet(sin_times, (x,), ((jnp.ones_like(x), 0.5 * x),))),
    "jet3": (lambda x: hlopt.jet(sin_times, (x,), ((x, jnp.ones_like(x), jnp.zeros_like(x)),)),
             lambda x: jax_jet.jet(sin_times, (x,), ((x, jnp.ones_like(x), jnp.zeros_like(x)),))),
    "laplacian": (lambda x: jax.vmap(hlopt.laplacian(sum_sin2))(x), lambda x: jax.vmap(hessian_trace(sum_sin2))(x)),
    "bilaplacian": (lambda x: jax.vmap(hlopt.bilaplacian(sum_sin2))(x),
                    lambda x: jax.vmap(hessian_trace(lambda p: jnp.trace(jax.hessian(sum_sin2)(p))))(x)),
}


# The per-point operators take the rows of x: jax's reference (jax.hessian) cannot differentiate a
# point whose coordinates are sharded, so they run on row-sharded inputs only.
SPECS = {"rows": P("x"), "both": P("x", "y"), "cols": P(None, "y")}
EXPLICIT_CASES = [(name, spec) for name in EXPLICIT for spec in (SPECS if name.startswith("jet") else ["rows"])]


@pytest.mark.parametrize(("name", "spec"), [(n, SPECS[s]) for n, s in EXPLICIT_CASES],
                         ids=[f"{n}-{s}" for n, s in EXPLICIT_CASES])
@pytest.mark.parametrize("side", ["jax.jit", "hlopt.jit"])
def test_operations_keep_explicit_shardings_as_the_reference(side, name, spec):
    ours, reference = EXPLICIT[name]
    mesh = jax.make_mesh((4, 2), ("x", "y"), axis_types=(jax.sharding.AxisType.Explicit,) * 2)
    x = jax.device_put(RNG.uniform(-1, 1, (8, 4)), NamedSharding(mesh, spec))
    with jax.set_mesh(mesh):
        want = jax.jit(reference)(x)
        got = (jax.jit if side == "jax.jit" else hlopt.jit)(ours)(x)
        traced, want_traced = (jax.eval_shape(fun, x) for fun in (ours, reference))  # types at trace time
    assert jax.tree.structure(got) == jax.tree.structure(want)
    for g, w, t, wt in zip(*map(jax.tree.leaves, (got, want, traced, want_traced))):
        assert g.sharding.is_equivalent_to(w.sharding, w.ndim), (g.sharding, w.sharding)
        assert padded(t.sharding.spec, t.ndim) == padded(wt.sharding.spec, wt.ndim), (t.sharding, wt.sharding)
        np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-10)


def padded(spec, ndim):
    return tuple(spec) + (None,) * (ndim - len(spec))


def _pinn_gradient(params, points, boundary):
    u = lambda x: _mlp(params, x)  # noqa: E731
    residual = jax.vmap(hlopt.laplacian(u))(points) + 1.0
    return jnp.mean(residual ** 2) + jnp.mean(jax.vmap(u)(boundary) ** 2)


def _log_psi(p, x):
    r = x.reshape(-1, 3)
    norm = jnp.sqrt(jnp.sum(r * r, -1, keepdims=True) + 1e-2)
    h = jnp.tanh(jnp.concatenate([r, norm], -1) @ p["w"])
    return jnp.linalg.slogdet((h @ p["out"]) * jnp.exp(-norm))[1]


def _kinetic_energy(p, x):
    from hlopt.pde import laplacian_and_gradient

    laplacian, gradient = laplacian_and_gradient(lambda y: _log_psi(p, y))(x)
    return -0.5 * (laplacian + jnp.sum(gradient ** 2))


def _parity_cases():
    f32 = lambda shape, seed: jnp.asarray(np.random.default_rng(seed).standard_normal(shape), jnp.float32)  # noqa: E731
    params = [f32((3, 16), 1) / 2, f32((16, 16), 3) / 4, f32((16, 1), 5) / 4]
    points, boundary = f32((4, 3), 7), f32((4, 3), 8)
    orbitals = {"w": f32((4, 8), 9) / 2, "out": f32((8, 3), 10) / 3}
    walkers = f32((4, 9), 11)
    return {
        "pinn_gradient": (jax.grad(_pinn_gradient), (params, points, boundary)),
        "laplacian": (jax.vmap(hlopt.laplacian(_mlp, argnums=1), in_axes=(None, 0)), (params, points)),
        "kinetic_energy": (jax.vmap(_kinetic_energy, in_axes=(None, 0)), (orbitals, walkers)),
    }


@pytest.mark.parametrize("name", ["pinn_gradient", "laplacian", "kinetic_energy"])
def test_hlopt_jit_and_jax_jit_compile_the_same_program_for_cpu(name):
    """`hlopt-default` makes each hlopt operation plain in a module of its own, as the plain-JAX
    lowering rule does, and leaves the program's own code to XLA: XLA's optimized programs are the
    same, instruction for instruction. Given the default pipeline's text instead of its name, the
    passes tune the whole program, the user's code around the operations included, which jax.jit
    cannot, and the PINN gradient's programs differ."""
    fun, args = _parity_cases()[name]
    cpu = jax.devices("cpu")[0]
    with jax.default_device(cpu):
        plain = _same_program_text(jax.jit(fun).lower(*args).compile().as_text())
        ours = _same_program_text(hlopt.jit(fun).lower(*args).compile().as_text())
        assert ours == plain
        if name == "pinn_gradient":
            whole = hlopt.jit(fun).lower(*args).compile(PIPELINES["hlopt-default"]).as_text()
            assert _same_program_text(whole) != plain
        assert_tree_close(hlopt.jit(fun)(*args), jax.jit(fun)(*args), rtol=1e-6)


def test_an_operation_is_made_plain_for_the_results_the_program_reads():
    """The module an operation is made plain in returns only the results the program reads, as
    jax's rule module does: the gradient's vjp returns every cotangent, of which the program
    reads the weights' alone (made plain with all of them, the tuning passes rewrote the read ones
    with the others, and a wavefunction gradient lost accuracy)."""
    from hlopt.compiler.operations import operation_module, program_operations, read_results
    from hlopt.passes.ir.walk import CallGraph, call_target
    from hlopt.passes.mlir import ir

    orbitals, walkers = _parity_cases()["kinetic_energy"][1]
    energy = lambda p, xs: jnp.mean(jax.vmap(_kinetic_energy, in_axes=(None, 0))(p, xs))  # noqa: E731
    module = hlopt.lower(jax.grad(energy), orbitals, walkers).module.operation
    with module.context:
        (vjp,) = [op for op in program_operations(module) if call_target(op) == "hlopt.vjp"]
        read = read_results(vjp)
        isolated = operation_module(vjp, module, CallGraph.of(module))
        main = ir.SymbolTable(isolated.operation)["main"]
        assert 0 < len(read) < len(vjp.results)
        assert [str(t) for t in main.type.results] == [str(r.type) for r in read]
