"""Lowering a JAX function to StableHLO in hlopt's MLIR context."""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import jax
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from hlopt.compiler.jax_compat import arg_avals, compile_args
from hlopt.compiler.program import Signature, module_to_bytecode, parse_module
from hlopt.passes.mlir import ir

_state = threading.local()


@contextlib.contextmanager
def annotations_allowed() -> Iterator[None]:
    """While active, hlopt's primitives may lower to `hlopt.*` annotations."""
    depth = getattr(_state, "depth", 0)
    _state.depth = depth + 1
    try:
        yield
    finally:
        _state.depth = depth


def annotations_enabled() -> bool:
    """True inside `hlopt.lower` / `hlopt.jit`; False inside plain `jax.jit`."""
    return getattr(_state, "depth", 0) > 0


def _named(mesh: Mesh | None, shardings: Any) -> Any:
    """PartitionSpecs (and None, with a mesh) become NamedShardings on `mesh`."""
    if shardings is None or mesh is None:
        return shardings

    def convert(s):
        if s is None:
            return NamedSharding(mesh, PartitionSpec())
        if isinstance(s, PartitionSpec):
            return NamedSharding(mesh, s)
        return s

    return jax.tree_util.tree_map(
        convert, shardings, is_leaf=lambda s: s is None or isinstance(s, PartitionSpec)
    )


def lower_function(
    fun: Callable,
    *args: Any,
    mesh: Mesh | None = None,
    in_shardings: Any = None,
    out_shardings: Any = None,
    static_argnums: int | Sequence[int] = (),
) -> tuple[ir.Module, Signature]:
    """Trace `fun` at `args` (arrays or ShapeDtypeStructs) and lower it to StableHLO."""
    if isinstance(static_argnums, int):
        static_argnums = (static_argnums,)
    static_argnums = tuple(sorted(i % len(args) if args else i for i in static_argnums))
    for i in static_argnums:
        if i >= len(args):
            raise ValueError(f"static_argnums names argument {i} but only {len(args)} were given")

    @functools.wraps(fun)
    def wrapped(*a, **k):  # a fresh function: jax's caches never mix with plain jax.jit
        return fun(*a, **k)

    jit_kwargs: dict[str, Any] = {"static_argnums": static_argnums, "keep_unused": True}
    if mesh is not None or in_shardings is not None:
        if in_shardings is None:
            dynamic = [a for i, a in enumerate(args) if i not in static_argnums]
            in_shardings = tuple(None for _ in dynamic)
        jit_kwargs["in_shardings"] = _named(mesh, in_shardings)
    if out_shardings is not None:
        jit_kwargs["out_shardings"] = _named(mesh, out_shardings)

    with annotations_allowed():
        if mesh is not None:
            with jax.set_mesh(mesh):
                lowered = jax.jit(wrapped, **jit_kwargs).lower(*args)
        else:
            lowered = jax.jit(wrapped, **jit_kwargs).lower(*args)

    options = compile_args(lowered)
    if options.get("ordered_effects") or options.get("host_callbacks"):
        raise NotImplementedError(
            f"{getattr(fun, '__name__', fun)}: side effects and host callbacks cannot be "
            "compiled ahead of time by hlopt"
        )
    module = parse_module(module_to_bytecode(lowered.compiler_ir("stablehlo")))
    in_avals = arg_avals(lowered)
    out_avals = tuple(
        jax.core.ShapedArray(s.shape, s.dtype) for s in jax.tree_util.tree_leaves(lowered.out_info)
    )
    signature = Signature(
        in_tree=lowered.in_tree,
        in_avals=in_avals,
        out_tree=lowered.out_tree,
        out_avals=out_avals,
        static_args=tuple((i, args[i]) for i in static_argnums),
        mesh=mesh,
        use_shardy=bool(jax.config.jax_use_shardy_partitioner),
        name=getattr(fun, "__name__", "fun"),
    )
    return module, signature
