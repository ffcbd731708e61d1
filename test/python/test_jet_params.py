"""hlopt.jet rebuilds the parameters of higher-order primitives (their jaxprs prepared
for Taylor mode) with the types JAX gave them: one case per primitive (cond, while,
scan, custom_jvp, custom_vjp, custom_linear_solve, pjit), each checked for the
parameter types and, through `hlopt.jet`, against nested jax.jvp in float64.

custom_linear_solve (under `jnp.linalg.solve`, `inv`, `det`, `slogdet`, `cg`)
crashed here (`'tuple' object has no attribute 'solve'`): its `jaxprs` is a named
tuple. Its lowering also drops the dependence on the matrix (JAX factors a
stop_gradient'ed matrix and differentiates by the solve's JVP rule), so the jet
follows that rule, as for custom_jvp.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import jax.scipy.sparse.linalg as jsp_linalg
import numpy as np
import pytest
from jax import lax

import hlopt
from hlopt.taylor import for_taylor

from support.references import taylor_by_nested_jvp

ORDER = 3


def _sg(x):
    return x + lax.stop_gradient(x) * 0.0


def _cond(x):
    return lax.cond(x.sum() > 0, lambda v: jnp.sin(_sg(v)) * v, lambda v: jnp.cos(v), x)


def _while(x):
    def body(c):
        i, v = c
        return i + 1, jnp.tanh(_sg(v)) + x

    return lax.while_loop(lambda c: c[0] < 3, body, (0, x))[1]


def _scan(x):
    return lax.scan(lambda c, w: (jnp.sin(_sg(c)) * w, c * c), x, jnp.arange(3.0)[:, None] + x)[0]


@jax.custom_jvp
def _softplus(x):
    return jnp.logaddexp(_sg(x), 0.0)


_softplus.defjvp(lambda p, t: (_softplus(p[0]), t[0] * jax.nn.sigmoid(p[0])))


def _custom_jvp(x):
    return _softplus(x) * x


def _plain_vjp_function(x):
    return jnp.sin(_sg(x)) * x


_custom_vjp_fn = jax.custom_vjp(_plain_vjp_function)
_custom_vjp_fn.defvjp(lambda x: (_plain_vjp_function(x), x), lambda x, ct: (ct * (jnp.cos(x) * x + jnp.sin(x)),))


def _custom_vjp(x):
    return _custom_vjp_fn(x)


def _matrix(x):
    n = x.shape[0]
    return jnp.outer(x, x) * 0.1 + jnp.diag(2.0 + jnp.cos(x)) + jnp.eye(n) * 3.0


def _linear_solve(x):
    a = _matrix(x)
    return lax.custom_linear_solve(lambda v: a @ _sg(v), x * x, solve=lambda mv, b: jnp.linalg.solve(a, b),
                                   symmetric=False)


def _pjit(x):
    return jax.jit(lambda v: jnp.exp(_sg(v)) * v)(x)


CASES: dict[str, tuple[Callable, str]] = {
    "cond": (_cond, "cond"),
    "while": (_while, "while"),
    "scan": (_scan, "scan"),
    "custom_jvp": (_custom_jvp, "custom_jvp_call"),
    "custom_vjp": (_custom_vjp, "custom_vjp_call"),
    "custom_linear_solve": (_linear_solve, "custom_linear_solve"),
    "pjit": (_pjit, "jit"),
}
# what nested jax.jvp differentiates: a custom_vjp function's primal (jvp refuses the function)
REFERENCE = {"custom_vjp": _plain_vjp_function}


def _equations(jaxpr, name: str) -> list:
    """Every equation of primitive `name` in `jaxpr` and its sub-jaxprs."""
    jaxpr = getattr(jaxpr, "jaxpr", jaxpr)
    found = []
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == name:
            found.append(eqn)
        for v in eqn.params.values():
            for sub in (v if isinstance(v, tuple) else (v,)):
                if hasattr(sub, "eqns") or hasattr(getattr(sub, "jaxpr", None), "eqns"):
                    found += _equations(sub, name)
    return found


def _x() -> np.ndarray:
    return np.array([0.3, -0.7, 1.1])


@pytest.mark.parametrize("name", sorted(CASES))
def test_rebuilt_parameters_keep_their_types(name):
    """Preparing the body (budget 0 keeps custom_jvp and custom_linear_solve as they are,
    budget 2 turns them into markers) changes the sub-jaxprs (a stop_gradient in each)
    and rebuilds every other parameter with the type it had."""
    fun, primitive = CASES[name]
    jaxpr = jax.make_jaxpr(fun)(_x())
    before = _equations(jaxpr, primitive)[0]  # the outermost one
    for budget in (0, 2):
        after = _equations(for_taylor(jaxpr, budget, {}), primitive)
        if not after:
            assert budget and primitive in ("custom_jvp_call", "custom_linear_solve")
            continue
        assert after[0] is not before, "the stop_gradient inside should have rebuilt the equation"
        assert set(after[0].params) == set(before.params)
        for key, value in before.params.items():
            assert type(after[0].params[key]) is type(value), (name, key)
            if hasattr(value, "_fields"):
                assert after[0].params[key]._fields == value._fields


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.float64) if n == "custom_linear_solve" else n
                                  for n in sorted(CASES)])  # its solve: LU in float64
def test_jet_through_each_primitive_matches_nested_jvp(name):
    fun, _ = CASES[name]
    with jax.enable_x64(True):
        x = _x()
        series = [np.array([1.0, 0.5, -0.25]), np.array([0.2, 0.0, 0.1]), np.zeros(3)]
        p, s = hlopt.jet(fun, (x,), (series,), factorial_scaled=False)
        want = taylor_by_nested_jvp(REFERENCE.get(name, fun), [x], [series], ORDER)
    for k, (g, w) in enumerate(zip([p, *s], want)):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-10, atol=1e-12, err_msg=f"order {k}")


def _spd(x):
    return _matrix(x) @ _matrix(x).T


LINALG: dict[str, Callable] = {
    "solve": lambda x: jnp.linalg.solve(_matrix(x), jnp.sin(x)),
    "inv": lambda x: jnp.linalg.inv(_matrix(x)),
    "det": lambda x: jnp.linalg.det(_matrix(jnp.concatenate([x, x * x]))),
    "slogdet": lambda x: jnp.linalg.slogdet(_matrix(x))[1],
    "cg": lambda x: jsp_linalg.cg(_spd(x), x + 1.0, tol=1e-14, maxiter=50)[0],
}


@pytest.mark.parametrize("name", [n if n == "cg" else pytest.param(n, marks=pytest.mark.float64)  # cg: products
                                  for n in sorted(LINALG)])
def test_linear_solves_inside_jet(name):
    """The crash of issue 26 (n >= 4 for det) and the solve's dependence on the matrix."""
    fun = LINALG[name]
    with jax.enable_x64(True):
        x = _x()
        series = [np.array([1.0, 0.5, -0.25]), np.array([0.2, 0.0, 0.1]), np.array([0.0, 0.3, 0.0])]
        p, s = hlopt.jet(fun, (x,), (series,), factorial_scaled=False)
        want = taylor_by_nested_jvp(fun, [x], [series], ORDER)
    tol = 1e-7 if name == "cg" else 1e-10
    for k, (g, w) in enumerate(zip([p, *s], want)):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=tol, atol=tol, err_msg=f"order {k}")


@pytest.mark.float64
@pytest.mark.parametrize("name", ["slogdet", "inv", "solve"])
def test_linear_solves_inside_laplacian(name):
    fun = LINALG[name]
    with jax.enable_x64(True):
        x = _x()
        got = hlopt.laplacian(lambda v: jnp.sum(fun(v)))(x)
        want = jax.jit(lambda y: jnp.trace(jax.hessian(lambda v: jnp.sum(fun(v)))(y)))(x)
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-10)
