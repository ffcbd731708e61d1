"""`hlopt.laplacian` and `hlopt.bilaplacian`: differential operators by collapsed Taylor mode.

Both bind one collapsed `hlopt.jet` annotation (`backend_config = {order = K,
collapsed = true}`): the function's jet of order K along R directions v_r at
once, coefficients 1..K-1 carried with a leading R axis and the K-th one summed
over the directions (optionally weighted), so the primal is computed once and the
highest coefficient once instead of R times (Dangel et al., "Collapsing Taylor
Mode Automatic Differentiation", 2025). With only the first input coefficient
set to v_r, the K-th output coefficient along v_r is D^K f[v_r, ..., v_r] / K!.

- Laplacian (K = 2): sum_r v_r^T H v_r = 2 sum_r c_2(v_r). Exact: v_r the unit
  vectors of x's flattened shape; weighted: the columns of S (`weights`, shape
  x.shape + (R,)), giving tr(S S^T H); randomized: R samples with E[v v^T] = I
  ("normal" or "rademacher"), the mean (an unbiased estimate).
- Bi-Laplacian, exact: Delta^2 f = Delta(Delta f) = sum_{i,j} T_iijj (T = D^4 f;
  the partials commute), so the exact Laplacian of the exact Laplacian: a collapsed
  2-jet along the D unit vectors of the program that computes Delta f by a collapsed
  2-jet along them. Per value of f that carries (1 + D + 1) x (1 + D + 1) pieces:
  (D + 2)^2 rows through each matmul (49 at D = 5), where 4-jets need at least
  C(D + 1, 2) directions (the rank of the flattening of (x.x)^2 bounds any signed
  sum of D^4 f[v^4]), e.g. e_i and e_i +- e_j, D^2 = 25 directions at D = 5
  (D^4 f[(e_i+e_j)^4] + D^4 f[(e_i-e_j)^4] = 2 T_iiii + 2 T_jjjj + 12 T_iijj, the odd
  terms cancel): 1 + 4 D^2 = 101 rows in standard Taylor mode and 1 + 3 D^2 + 1 = 77
  collapsed. A 4-jet gains at most 4R / (3R + 1) < 4/3 from collapsing (one of its
  four coefficients), the nested 2-jets gain that on both levels.
- Bi-Laplacian, randomized (K = 4): "normal", E[D^4 f[v^4]] = 3 Delta^2 f for
  v ~ N(0, I) (Isserlis), so 8 mean_r c_4(v_r) (D^4 f[v^4] = 24 c_4(v));
  "rademacher": E[D^4 f[v^4]] = 3 Delta^2 f - 2 S_1 (S_1 = sum_i T_iiii), so
  8 mean_r c_4(v_r) plus 16 sum_i c_4(e_i) (D more directions).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from hlopt.compiler.jax_compat import api_boundary, under_transformation
from hlopt.taylor import _struct, _trace, _zero_series, jet_p, series_positions

__all__ = ["bilaplacian", "laplacian", "laplacian_and_gradient"]

DISTRIBUTIONS = ("normal", "rademacher")


def _check_options(name: str, num_samples: int | None, distribution: str) -> None:
    if distribution not in DISTRIBUTIONS:
        raise ValueError(f"hlopt.{name}: unknown distribution {distribution!r}; use 'normal' or 'rademacher'")
    if num_samples is not None and (not isinstance(num_samples, (int, np.integer)) or isinstance(num_samples, bool)
                                    or num_samples < 1):
        raise ValueError(f"hlopt.{name}: num_samples must be a positive integer, got {num_samples!r}")


def _point(name: str, args: tuple, argnums: int) -> jax.Array:
    if not isinstance(argnums, (int, np.integer)) or isinstance(argnums, bool):
        raise TypeError(f"hlopt.{name}: argnums must be an integer, got {argnums!r}")
    if not -len(args) <= argnums < len(args):
        raise ValueError(f"hlopt.{name}: argnums={argnums} is out of range for {len(args)} positional argument(s)")
    try:
        x = jnp.asarray(args[argnums])
    except TypeError:
        raise TypeError(f"hlopt.{name}: argument {argnums} must be an array, got {type(args[argnums]).__name__}") \
            from None
    if not jnp.issubdtype(x.dtype, jnp.floating):
        raise TypeError(f"hlopt.{name}: argument {argnums} must be a real floating-point array, got {x.dtype}; "
                        "convert it (x.astype(jnp.float32))")
    return x


def collapsed_jet(fun: Callable, x: jax.Array, directions: jax.Array, order: int,
                  weights: tuple[float, ...] | None = None, first: bool = False) -> Any:
    """sum_r w_r c_K(v_r): the K-th plain Taylor coefficient of `fun` at `x` along each
    direction v_r = directions[r] (the first input coefficient; the others zero),
    summed over r (weighted by `weights`), for each output leaf. With `first` (K >= 2),
    also the first coefficients c_1(v_r) = Df[v_r] the jet computes on the way, shaped
    (R,) + the leaf's shape: the pair (sum, firsts)."""
    R = directions.shape[0]
    out_tree_box = []

    def flat_fun(v):
        out = fun(v)
        leaves, tree = jax.tree_util.tree_flatten(out)
        out_tree_box.append(tree)
        return leaves

    jaxpr, consts = _trace(flat_fun, [_struct(x)])
    mode = {"directions": R, "collapsed": True, "weights": weights}
    series = [directions.astype(x.dtype)] + _zero_series([x], order, R, True)[1:]
    n = len(consts) + 1
    zeros = (*series_positions(n, order, 0, len(consts)), *series_positions(n, order, len(consts), 1)[1:])
    outs = jet_p.bind(*consts, x, *_zero_series(consts, order, R, True), *series, jaxpr=jaxpr, order=order,
                      zeros=zeros, **mode)
    n_out = len(jaxpr.out_avals)
    kth = jax.tree_util.tree_unflatten(out_tree_box[-1], [outs[n_out + i * order + order - 1] for i in range(n_out)])
    if not first:
        return kth
    return kth, jax.tree_util.tree_unflatten(out_tree_box[-1], [outs[n_out + i * order] for i in range(n_out)])


def _operator(name: str, fun: Callable, argnums: int, num_samples: int | None,
              evaluate: Callable[[Callable, jax.Array, Any], Any]):
    """The function of `fun`'s arguments computing evaluate(f, x, key) for x the argument
    `argnums` and f the function of x alone (the other arguments fixed)."""
    from hlopt.staging import jit

    def traced(args: tuple, key: Any) -> Any:
        x = _point(name, args, argnums)
        pos = argnums % len(args)
        return evaluate(lambda v: fun(*args[:pos], v, *args[pos + 1:]), x, key)

    compiled = jit(traced)

    @api_boundary  # an error below (a wrong argument, the user's function failing) loses hlopt's frames
    def operator(*args: Any, key: Any = None) -> Any:
        if num_samples is None and key is not None:
            raise TypeError(f"hlopt.{name}: key= is only for the randomized operator (num_samples=R)")
        if num_samples is not None and key is None:
            raise TypeError(f"hlopt.{name}: the randomized operator (num_samples={num_samples}) needs key=, "
                            "a jax.random key")
        _point(name, args, argnums)
        if under_transformation():  # also when only `fun` closes over a tracer
            return traced(args, key)
        return compiled(args, key)

    operator.__name__ = f"{name}_of_{getattr(fun, '__name__', 'fun')}"
    operator.__doc__ = f"The {name} of {getattr(fun, '__name__', 'fun')} in argument {argnums}."
    return operator


def _collapsed(build: Callable[[jax.Array, Any], tuple[jax.Array, tuple[float, ...] | None, float]],
               order: int) -> Callable[[Callable, jax.Array, Any], Any]:
    """evaluate(f, x, key) = scale * sum_r w_r c_K(v_r), where build(x, key) gives
    (directions, weights, scale)."""

    def evaluate(f: Callable, x: jax.Array, key: Any) -> Any:
        directions, weights, scale = build(x, key)
        out = collapsed_jet(f, x, directions, order, weights)
        return jax.tree_util.tree_map(lambda y: y * jnp.asarray(scale, y.dtype), out)

    return evaluate


def _axes(x: jax.Array) -> jax.Array:
    """The unit vectors of x's flattened shape, shaped (x.size,) + x.shape."""
    return jnp.eye(x.size, dtype=x.dtype).reshape((x.size, *x.shape))


def _samples(key: Any, distribution: str, shape: tuple, dtype: Any) -> jax.Array:
    if distribution == "normal":
        return jax.random.normal(key, shape, dtype)
    return jax.random.rademacher(key, shape, dtype)


def _folded(weights: list[float]) -> tuple[tuple[float, ...] | None, float]:
    """Weights of the collapsed sum and a scale of the result: equal weights become the scale."""
    if len(set(weights)) == 1:
        return None, weights[0]
    return tuple(weights), 1.0


def laplacian(fun: Callable, argnums: int = 0, *, weights: Any = None, num_samples: int | None = None,
              distribution: str = "normal") -> Callable:
    r"""The Laplacian of `fun` in its argument `argnums`, as a function of `fun`'s arguments.

    For each output element of `fun`, the sum of its second derivatives in the elements of
    argument `argnums` (a floating-point array of any shape),
    :math:`\Delta f = \sum_i \partial^2 f / \partial x_i^2`, from one collapsed Taylor-mode pass
    of order 2.

    Args:
      fun: the function; its outputs are arrays or pytrees of arrays.
      argnums: the argument to differentiate in.
      weights: a factor :math:`S` of shape `x.shape + (R,)`: gives
        :math:`\operatorname{tr}(S S^T H)`, :math:`H` the Hessian, instead.
      num_samples: R: the randomized estimate, the mean of :math:`v^T H v` over R directions drawn
        from `distribution`; the returned function then takes `key=` (a `jax.random` key).
      distribution: `"normal"` or `"rademacher"`.

    Returns:
      A function of `fun`'s arguments whose outputs are shaped as `fun`'s.

    Raises:
      ValueError: both `weights` and `num_samples`, or weights of the wrong shape.

    Example:
      >>> import jax.numpy as jnp
      >>> import hlopt
      >>> u = lambda x: jnp.sum(x**3)            # Laplacian: 6 * sum(x)
      >>> float(hlopt.laplacian(u)(jnp.array([1.0, 2.0])))
      18.0
    """
    _check_options("laplacian", num_samples, distribution)
    if weights is not None and num_samples is not None:
        raise ValueError("hlopt.laplacian: give weights or num_samples, not both")

    def build(x: jax.Array, key: Any) -> tuple[jax.Array, tuple[float, ...] | None, float]:
        if num_samples is not None:
            return _samples(key, distribution, (num_samples, *x.shape), x.dtype), None, 2.0 / num_samples
        if weights is not None:
            w = jnp.asarray(weights)
            if w.ndim != x.ndim + 1 or w.shape[:-1] != x.shape:
                raise ValueError(f"hlopt.laplacian: weights must have shape x.shape + (R,) = {x.shape} + (R,), "
                                 f"got {w.shape}")
            return jnp.moveaxis(w, -1, 0), None, 2.0
        return _unit_directions(x, key)

    return _operator("laplacian", fun, argnums, num_samples, _collapsed(build, order=2))


def _laplacian_and_gradient(f: Callable, x: jax.Array, key: Any) -> tuple[Any, Any]:
    """(Delta f, grad f) at `x` from one collapsed 2-jet along the unit vectors e_i: the
    sum 2 sum_i c_2(e_i), and c_1(e_i) = df/dx_i moved behind each output's shape."""
    directions, _, scale = _unit_directions(x, key)
    kth, firsts = collapsed_jet(f, x, directions, 2, first=True)
    laplacians = jax.tree_util.tree_map(lambda y: y * jnp.asarray(scale, y.dtype), kth)
    gradients = jax.tree_util.tree_map(lambda c: jnp.moveaxis(c, 0, -1).reshape((*c.shape[1:], *x.shape)), firsts)
    return laplacians, gradients


def laplacian_and_gradient(fun: Callable, argnums: int = 0) -> Callable:
    r"""The Laplacian and the gradient of `fun` in its argument `argnums`, from one pass.

    The exact Laplacian as `laplacian` gives it, and the gradient from the same collapsed
    Taylor-mode pass, whose first coefficients along the unit vectors are the partial
    derivatives: a local energy :math:`-\frac12(\Delta \log\psi + |\nabla \log\psi|^2)` needs both.

    Args:
      fun: the function; its outputs are arrays or pytrees of arrays.
      argnums: the argument to differentiate in.

    Returns:
      A function of `fun`'s arguments returning `(laplacian, gradient)`; each gradient has
      shape `output.shape + x.shape`.

    Example:
      >>> import jax.numpy as jnp
      >>> import hlopt
      >>> lap, grad = hlopt.laplacian_and_gradient(lambda x: jnp.sum(x**2))(jnp.array([1.0, 2.0]))
      >>> float(lap), grad.tolist()
      (4.0, [2.0, 4.0])
    """
    return _operator("laplacian_and_gradient", fun, argnums, None, _laplacian_and_gradient)


def _unit_directions(x: jax.Array, key: Any) -> tuple[jax.Array, None, float]:
    """The exact Laplacian's directions, weights and scale: 2 sum_i c_2(e_i)."""
    return _axes(x), None, 2.0


def _exact_bilaplacian(f: Callable, x: jax.Array, key: Any) -> Any:
    """Delta(Delta f) at `x`: the exact Laplacian of the exact Laplacian (module docstring)."""
    laplacian_of = _collapsed(_unit_directions, order=2)
    return laplacian_of(lambda y: laplacian_of(f, y, key), x, key)


def bilaplacian(fun: Callable, argnums: int = 0, *, num_samples: int | None = None,
                distribution: str = "normal") -> Callable:
    r"""The bi-Laplacian of `fun` in its argument `argnums`, as a function of `fun`'s arguments.

    :math:`\Delta^2 f = \sum_{i,j} \partial^4 f / \partial x_i^2 \partial x_j^2` for each output element.

    Exact: the Laplacian of the Laplacian, nested collapsed Taylor-mode passes of order 2.
    With `num_samples=R`: the unbiased randomized estimate from collapsed passes of order 4
    (`"normal"`: :math:`8\,\mathrm{mean}_r\, c_4(v_r)`; `"rademacher"`: that plus
    :math:`16 \sum_i c_4(e_i)`).

    Args:
      fun: the function; its outputs are arrays or pytrees of arrays.
      argnums: the argument to differentiate in.
      num_samples: R, for the randomized estimate; the returned function then takes `key=`.
      distribution: `"normal"` or `"rademacher"`.

    Returns:
      A function of `fun`'s arguments whose outputs are shaped as `fun`'s.

    Example:
      >>> import jax.numpy as jnp
      >>> import hlopt
      >>> u = lambda x: jnp.sum(x**4)            # bi-Laplacian: 24 per element
      >>> float(hlopt.bilaplacian(u)(jnp.array([0.5, -1.0, 2.0])))
      72.0
    """
    _check_options("bilaplacian", num_samples, distribution)
    if num_samples is None:
        return _operator("bilaplacian", fun, argnums, None, _exact_bilaplacian)

    def build(x: jax.Array, key: Any) -> tuple[jax.Array, tuple[float, ...] | None, float]:
        if distribution == "normal":
            return _samples(key, "normal", (num_samples, *x.shape), x.dtype), None, 8.0 / num_samples
        samples = _samples(key, "rademacher", (num_samples, *x.shape), x.dtype)
        weights, scale = _folded([8.0 / num_samples] * num_samples + [16.0] * x.size)
        return jnp.concatenate([samples, _axes(x)]), weights, scale

    return _operator("bilaplacian", fun, argnums, num_samples, _collapsed(build, order=4))
