"""Run `vjp-expand{func=main}` on a lowered JAX function (or a StableHLO module) and call
the generated `@main_vjp` through hlopt's runtime, next to `jax.vjp` of the same function."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh

import hlopt
from hlopt.compiler.program import Signature, parse_module
from hlopt.compiler.stages import Lowered
from hlopt.passes.mlir import ir
from hlopt.runtime.compile import compile_lowered


def _as_entry(module: ir.Module, name: str) -> None:
    """Make `@name` the public `@main` (the old `@main` becomes private `@main_primal`)."""
    funcs = {ir.StringAttr(op.attributes["sym_name"]).value: op for op in module.body.operations
             if op.operation.name == "func.func"}
    with module.context:
        funcs["main"].attributes["sym_name"] = ir.StringAttr.get("main_primal")
        funcs["main"].attributes["sym_visibility"] = ir.StringAttr.get("private")
        funcs[name].attributes["sym_name"] = ir.StringAttr.get("main")


def _signature(args: Sequence[Any], outs: Sequence[Any], mesh: Mesh | None = None) -> Signature:
    def avals(xs):
        return tuple(jax.core.ShapedArray(np.shape(x), np.asarray(x).dtype) for x in xs)

    return Signature(in_tree=jax.tree_util.tree_flatten((tuple(args), {}))[1], in_avals=avals(args),
                     out_tree=jax.tree_util.tree_flatten(tuple(outs))[1], out_avals=avals(outs), mesh=mesh,
                     use_shardy=bool(jax.config.jax_use_shardy_partitioner))


def compile_vjp(module: ir.Module, primals: Sequence[Any], cts: Sequence[Any],
                pipeline: str = "hlopt-default", mesh: Mesh | None = None) -> Any:
    """`@main_vjp` of `module` (after `vjp-expand{func=main}`) compiled as a program of
    (primals, cotangents) -> input cotangents."""
    after = Lowered(module, _signature(primals, primals, mesh)).apply("vjp-expand{func=main}")
    _as_entry(after.module, "main_vjp")
    return Lowered(after.module, _signature([*primals, *cts], primals, mesh), backend=compile_lowered).compile(pipeline)


def hlopt_vjp(f: Callable | str, primals: Sequence[Any], cts: Sequence[Any],
              pipeline: str = "hlopt-default", mesh: Mesh | None = None) -> list[np.ndarray]:
    """The input cotangents by hlopt: `f` is a JAX function or the text of a module with `@main`."""
    module = parse_module(f) if isinstance(f, str) else hlopt.lower(f, *primals, mesh=mesh).module
    return [np.asarray(v) for v in compile_vjp(module, primals, cts, pipeline, mesh)(*primals, *cts)]


def jax_vjp(f: Callable, primals: Sequence[Any], cts: Sequence[Any]) -> list[np.ndarray]:
    """The input cotangents by `jax.vjp` (flat cotangents for a flat or tuple output)."""
    def pull(p, c):
        out, back = jax.vjp(f, *p)
        leaves, tree = jax.tree_util.tree_flatten(out)
        return back(jax.tree_util.tree_unflatten(tree, list(c)))

    return [np.asarray(v) for v in jax.jit(pull)(list(primals), list(cts))]


def output_shapes(f: Callable, primals: Sequence[Any]) -> list[jax.ShapeDtypeStruct]:
    return jax.tree_util.tree_leaves(jax.eval_shape(f, *primals))


def random_cotangents(f: Callable, primals: Sequence[Any], rng: np.random.Generator) -> list[np.ndarray]:
    """One random cotangent per output leaf (complex outputs get complex ones)."""
    out = []
    for s in output_shapes(f, primals):
        v = rng.normal(size=s.shape)
        if jnp.issubdtype(s.dtype, jnp.complexfloating):
            v = v + 1j * rng.normal(size=s.shape)
        out.append(np.asarray(v).astype(s.dtype))
    return out


def assert_cotangents_close(got: Sequence[np.ndarray], want: Sequence[np.ndarray], primals: Sequence[Any],
                            rtol: float, what: str) -> None:
    """Ours against the reference; integer inputs must get zeros of their own dtype (JAX: float0)."""
    assert len(got) == len(primals), f"{what}: {len(got)} cotangents for {len(primals)} inputs"
    for i, (g, w, p) in enumerate(zip(got, want, primals)):
        p = np.asarray(p)
        assert g.shape == p.shape and g.dtype == p.dtype, f"{what}: input {i}: {g.dtype}{g.shape} vs {p.dtype}{p.shape}"
        if not jnp.issubdtype(p.dtype, jnp.inexact):
            np.testing.assert_array_equal(g, np.zeros_like(p), err_msg=f"{what}: input {i} (integer)")
            continue
        scale = max(1.0, float(np.max(np.abs(w)))) if w.size else 1.0
        # A cotangent that cancels to near zero carries the rounding of its largest terms: a few
        # ulps of the scale, whichever order the backend sums in (XLA:CPU's kernels differ by CPU).
        atol = max(rtol * 1e-2, 8 * float(np.finfo(p.dtype).eps)) * scale
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol, err_msg=f"{what}: input {i}")
