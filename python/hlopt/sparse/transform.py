"""Sparse-aware `grad`, `value_and_grad`, `jacfwd`, `jacrev` and `jacobian` (as in JAX's
sparse module): differentiating with respect to a `BCOO` argument
differentiates its data buffer only, and the result is a `BCOO` with the argument's indices.
"""

from __future__ import annotations

import functools
import itertools
import operator
from collections.abc import Callable, Sequence
from typing import Any

import jax

from hlopt.compiler.jax_compat import concrete_or_error
from hlopt.sparse.bcoo import BCOO


def _is_sparse(x: Any) -> bool:
    return isinstance(x, BCOO)


def _argnums_tuple(argnums: int | Sequence[int]) -> tuple[int, ...]:
    def index(a: Any) -> int:
        return concrete_or_error(operator.index, a, "argnums of a sparse-aware transform")

    return (index(argnums),) if not isinstance(argnums, Sequence) else tuple(index(a) for a in argnums)


def _chunks(counts: Sequence[int]) -> list[range]:
    """Consecutive ranges of the given lengths."""
    starts = [0, *itertools.accumulate(counts)]
    return [range(a, b) for a, b in zip(starts, starts[1:])]


def _flatten_for_sparse_ad(fun: Callable, argnums: int | Sequence[int], args: tuple[Any, ...]):
    """`fun` over the flat buffers of `args`, the flat argnums to differentiate (a BCOO's data
    buffer only), the flat buffers, and a function rebuilding the gradients in the shape of `args`."""
    argnums_tup = _argnums_tuple(argnums)
    for a in argnums_tup:
        if not 0 <= a < len(args):
            raise ValueError(f"argnums {argnums!r} out of range for a function called with {len(args)} "
                             "positional arguments")
    # Two flattenings: args -> leaves that are BCOOs or dense, then -> dense buffers.
    leaves1, tree1 = jax.tree.flatten(args, is_leaf=_is_sparse)
    per_arg1 = _chunks([child.num_leaves for child in tree1.children()])
    argnums1 = [i for a in argnums_tup for i in per_arg1[a]]
    bufs, tree2 = jax.tree.flatten(leaves1)
    per_leaf2 = _chunks([child.num_leaves for child in tree2.children()])
    differentiated = [nums[:1] if _is_sparse(leaf) else nums for leaf, nums in zip(leaves1, per_leaf2)]
    argnums_flat = tuple(i for leaf in argnums1 for i in differentiated[leaf])

    def fun_flat(*flat: Any, **kwargs: Any) -> Any:
        return fun(*jax.tree.unflatten(tree1, jax.tree.unflatten(tree2, flat)), **kwargs)

    def rebuild(leaf: int, grad: jax.Array) -> Any:
        leaf_bufs, tree = jax.tree.flatten(leaves1[leaf])
        make = lambda g: jax.tree.unflatten(tree, [g, *leaf_bufs[1:]])  # noqa: E731 - vmapped below
        for _ in range(grad.ndim - leaf_bufs[0].ndim):  # leading output dims of a Jacobian
            make = jax.vmap(make)
        return make(grad)

    def postprocess(grads: Sequence[jax.Array]) -> Any:
        leaf_grads: list[Any] = [None] * tree1.num_leaves
        for leaf, grad in zip(argnums1, grads, strict=True):
            leaf_grads[leaf] = rebuild(leaf, grad)
        grad_tree = jax.tree.unflatten(tree1, leaf_grads)
        grad_tree = tuple(g for g in grad_tree if jax.tree.leaves(g))
        return grad_tree[0] if len(grad_tree) == 1 else grad_tree

    return fun_flat, argnums_flat, bufs, postprocess


def _sparse_aware(transform: Callable, fun: Callable, argnums: int | Sequence[int], has_aux: bool,
                  kwargs: dict[str, Any], *, with_value: bool = False) -> Callable:
    """`transform` (jax.grad, jacfwd, ...) of `fun` with BCOO arguments differentiated through their data."""
    transform(fun, argnums=argnums, has_aux=has_aux, **kwargs)  # JAX's checks of the arguments, up front
    _argnums_tuple(argnums)

    @functools.wraps(fun)
    def wrapped(*args: Any, **fun_kwargs: Any) -> Any:
        fun_flat, argnums_flat, bufs, postprocess = _flatten_for_sparse_ad(fun, argnums, args)
        out = transform(fun_flat, argnums=argnums_flat, has_aux=has_aux, **kwargs)(*bufs, **fun_kwargs)
        if with_value:
            value, grads = out
            return value, postprocess(grads)
        if has_aux:
            return postprocess(out[0]), out[1]
        return postprocess(out)

    return wrapped


def value_and_grad(fun: Callable, argnums: int | Sequence[int] = 0, has_aux: bool = False,
                   **kwargs: Any) -> Callable[..., tuple[Any, Any]]:
    """`jax.value_and_grad` where the gradient with respect to a BCOO is a BCOO with its indices.

    Args:
      fun: the function to differentiate.
      argnums: the argument(s) to differentiate in.
      has_aux: as in `jax.value_and_grad`.
      **kwargs: passed to `jax.value_and_grad`.

    Returns:
      A function returning `(value, gradient)`.

    Example:
      >>> a = sparse.BCOO.fromdense(jnp.array([[1.0, 0.0], [0.0, 2.0]]))
      >>> value, g = sparse.value_and_grad(lambda a: (a.data**2).sum())(a)
      >>> float(value), g.data.tolist()
      (5.0, [2.0, 4.0])
    """
    return _sparse_aware(jax.value_and_grad, fun, argnums, has_aux, kwargs, with_value=True)


def grad(fun: Callable, argnums: int | Sequence[int] = 0, has_aux: bool = False, **kwargs: Any) -> Callable:
    """`jax.grad` where the gradient with respect to a BCOO is a BCOO with its indices.

    Args:
      fun: the function to differentiate.
      argnums: the argument(s) to differentiate in.
      has_aux: as in `jax.grad`.
      **kwargs: passed to `jax.grad`.

    Returns:
      A function returning the gradient; for a `BCOO` argument a `BCOO` of its sparsity.

    Example:
      >>> a = sparse.BCOO.fromdense(jnp.array([[1.0, 0.0], [0.0, 2.0]]))
      >>> g = sparse.grad(lambda a: (a @ jnp.array([3.0, 4.0])).sum())(a)
      >>> g.todense().tolist()
      [[3.0, 0.0], [0.0, 4.0]]
    """
    return _sparse_aware(jax.grad, fun, argnums, has_aux, kwargs)


def jacfwd(fun: Callable, argnums: int | Sequence[int] = 0, has_aux: bool = False, **kwargs: Any) -> Callable:
    """`jax.jacfwd` where the Jacobian with respect to a BCOO is a BCOO with its indices and the
    output dims as leading batch dims (dense outputs only, as JAX).

    Args:
      fun: the function to differentiate.
      argnums: the argument(s) to differentiate in.
      has_aux: as in `jax.jacfwd`.
      **kwargs: passed to `jax.jacfwd`.

    Returns:
      A function returning the Jacobian.

    Example:
      >>> a = sparse.BCOO.fromdense(jnp.array([[1.0, 0.0], [0.0, 2.0]]))
      >>> j = sparse.jacfwd(lambda a: a @ jnp.array([3.0, 4.0]))(a)
      >>> j.shape, j.todense()[1].tolist()
      ((2, 2, 2), [[0.0, 0.0], [0.0, 4.0]])
    """
    return _sparse_aware(jax.jacfwd, fun, argnums, has_aux, kwargs)


def jacrev(fun: Callable, argnums: int | Sequence[int] = 0, has_aux: bool = False, **kwargs: Any) -> Callable:
    """`jacfwd` by reverse mode (`jax.jacrev`), with the same arguments; `jacobian` is this function.

    Example:
      >>> a = sparse.BCOO.fromdense(jnp.array([[1.0, 0.0], [0.0, 2.0]]))
      >>> rows = sparse.jacobian(lambda a: sparse.todense(a).sum(1))(a)    # row sums
      >>> rows.todense()[1].tolist()
      [[0.0, 0.0], [0.0, 1.0]]
    """
    return _sparse_aware(jax.jacrev, fun, argnums, has_aux, kwargs)


jacobian = jacrev
