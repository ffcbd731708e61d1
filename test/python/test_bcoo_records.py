"""The BCOO op records (`hlopt.passes.sparse.bcoo`): one record per op, read by the Python primitive,
abstract evaluation, validation and lower-bcoo.

- every record has a primitive whose emitted `backend_config` validates against the record's
  signature (read back with `hlopt.passes.sparse.bcoo.read`), a numeric test here (against the dense
  computation) and a lit case in test/lit/lower-bcoo; a record without one fails by name;
- `Record.config` refuses parameters its signature does not name and fields of the wrong kind;
- scratch ops (`support/bcoo_scratch_ops.py`: one record module, no jax) are added to a scratch
  registry: their primitives, lowering, validation, eager calls, jit, grad (through other
  ops' primitives), JVP and vmap all come from the records, and the shipped registry does not
  know them.
"""

from __future__ import annotations

import ast
import pathlib
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import hlopt
import hlopt.sparse as hs
from hlopt.passes.sparse import bcoo
from hlopt.passes.base import PassError
from hlopt.passes.ir.walk import walk_ops
from hlopt.sparse import rules

from support import bcoo_scratch_ops as scratch_ops

LIT = pathlib.Path(__file__).resolve().parents[1] / "lit" / "lower-bcoo"
DIMS = (((1,), (0,)), ((), ()))

_rng = np.random.default_rng(3)


def _sparse(shape, density=0.5):
    x = _rng.normal(size=shape).astype(np.float32)
    return np.where(_rng.random(shape) < density, x, 0).astype(np.float32)


X, X2, Y = _sparse((3, 4)), _sparse((3, 4)), _sparse((4, 5))
A, B = _sparse((3, 6), 1.0), _sparse((6, 4), 1.0)
V = _rng.normal(size=(4,)).astype(np.float32)
L1, R1 = _sparse((1, 1, 7)), _sparse((1, 1, 3), 1.0)
M, M2 = hs.BCOO.fromdense(X), hs.BCOO.fromdense(X2)
V_SPARSE = hs.BCOO.fromdense(V)
L_CONV, R_CONV = hs.BCOO.fromdense(L1), hs.BCOO.fromdense(R1)
MASK = (X != 0).astype(np.float32)
_AT = tuple(np.asarray(M.indices).T)  # M's entries, as a numpy index


def _sum_grad(d):
    """The data cotangent of sum(M @ M2.T) at M's entries: through the sampled sparse x sparse product."""
    return (hs.BCOO((d, M.indices), shape=M.shape) @ M2.T).todense().sum()


def _dense_sum_grad():
    g = np.ones((3, 3), np.float32) @ X2
    return g[_AT]


# op -> (function of the BCOOs and arrays, its dense reference)
CASES = {
    "todense": (lambda m: m.todense(), X),
    "fromdense": (lambda m: hs.BCOO.fromdense(m.todense(), nse=M.nse).todense(), X),
    "extract": (lambda m: hs.bcoo_extract(m, jax.device_put(X2)).todense(), X2 * MASK),
    "multiply_dense": (lambda m: hs.bcoo_multiply_dense(m, jax.device_put(V)), (X * V)[_AT]),
    "multiply_sparse": (lambda m: hs.bcoo_multiply_sparse(m, M2).todense(), X * X2),
    "update_layout": (lambda m: hs.bcoo_update_layout(m, n_batch=1, on_inefficient=None).todense(), X),
    "reduce_sum": (lambda m: hs.bcoo_reduce_sum(m, axes=(1,)).todense(), X.sum(1)),
    "reshape": (lambda m: hs.bcoo_reshape(m, new_sizes=(4, 3)).todense(), X.reshape(4, 3)),
    "slice": (lambda m: hs.bcoo_slice(m, start_indices=(1, 0), limit_indices=(3, 3)).todense(), X[1:3, 0:3]),
    "sort_indices": (lambda m: hs.bcoo_sort_indices(m).todense(), X),
    "squeeze": (lambda m: hs.bcoo_squeeze(hs.bcoo_reshape(m, new_sizes=(1, 3, 4)), dimensions=(0,)).todense(), X),
    "sum_duplicates": (lambda m: hs.bcoo_sum_duplicates(m, nse=M.nse).todense(), X),
    "transpose": (lambda m: hs.bcoo_transpose(m, permutation=(1, 0)).todense(), X.T),
    "gather": (lambda m: m[jnp.array([2, 0])].todense(), X[[2, 0]]),
    "dot_general": (lambda m: m @ jax.device_put(Y), X @ Y),
    "bcsr_dot_general": (lambda m: hs.BCSR.from_bcoo(m) @ jax.device_put(Y), X @ Y),
    "dot_general_sampled": (
        lambda m: hs.bcoo_dot_general_sampled(jax.device_put(A), jax.device_put(B), m.indices, dimension_numbers=DIMS),
        (A @ B)[_AT]),
    # a matrix times a sparse vector: a layout the native SpGEMM kernels leave to the annotation
    "spdot_general": (lambda m: (m @ V_SPARSE).todense(), X @ V),
    "spdot_general_sampled": (lambda m: jax.grad(_sum_grad)(m.data), _dense_sum_grad()),
    "broadcast_in_dim": (lambda m: hs.bcoo_broadcast_in_dim(m, shape=(2, 3, 4), broadcast_dimensions=(1, 2)).todense(),
                         np.broadcast_to(X, (2, 3, 4))),
    "concatenate": (lambda m: hs.bcoo_concatenate([m, M2], dimension=0).todense(), np.concatenate([X, X2])),
    "dynamic_slice": (lambda m: hs.bcoo_dynamic_slice(m, (1, 1), (2, 2)).todense(), X[1:3, 1:3]),
    "conv": (lambda m: hs.bcoo_conv_general_dilated(L_CONV, R_CONV, window_strides=(1,), padding="VALID").todense(),
             np.asarray(lax.conv_general_dilated(L1, R1, (1,), "VALID"))),
}


def _emitted(fun) -> set[str]:
    """The ops of the `hlopt.bcoo.*` annotations `fun(M)` lowers to, each read back (and checked)
    through its record, whose shape rule gives the annotation's result types."""
    module = hlopt.lower(fun, M).module
    names = set()
    with module.context:
        for op in walk_ops(module.operation, "stablehlo.custom_call"):
            if bcoo.is_bcoo_op(op):
                view = bcoo.read(op)  # checks the config against the record's signature and shape rule
                operands = [tuple(v.type.shape) for v in view.operands]
                expected = bcoo.REGISTRY[view.name].result_shapes(view.config, operands)
                assert expected == [tuple(t.shape) for t in view.result_types]
                names.add(view.name)
    return names


def test_every_record_has_a_case_and_a_lit_case():
    lit = set(re.findall(r"@hlopt\.bcoo\.([a-z_]+)\(", "".join(p.read_text() for p in LIT.glob("*.mlir"))))
    assert not sorted(set(bcoo.REGISTRY) - set(CASES)), "BCOO records without a numeric case here"
    assert not sorted(set(bcoo.REGISTRY) - lit), "BCOO records without a lit case in test/lit/lower-bcoo"


@pytest.mark.parametrize("name", sorted(CASES))
def test_emitted_config_validates_and_computes(name):
    fun, want = CASES[name]
    assert name in _emitted(fun)
    np.testing.assert_allclose(np.asarray(hlopt.jit(fun)(M)), want, rtol=1e-5, atol=1e-5)


def test_config_refuses_what_the_signature_does_not_name():
    record = bcoo.REGISTRY["squeeze"]
    operands = [(3,), (3, 2)]
    config = record.config({"shape": (1, 3), "dimensions": (0,)}, operands)
    assert config == {"shape": (1, 3), "dimensions": (0,), "n_batch": 0, "n_dense": 0, "indices_sorted": False,
                      "unique_indices": False}
    with pytest.raises(ValueError, match=r"hlopt.bcoo.squeeze: parameters \['axes'\] are not fields"):
        record.config({"shape": (1, 3), "dimensions": (0,), "axes": (0,)}, operands)
    with pytest.raises(ValueError, match="'dimensions' must be an i64 array, got 0"):
        record.config({"shape": (1, 3), "dimensions": 0}, operands)
    with pytest.raises(ValueError, match="has no 'dimensions'"):
        record.config({"shape": (1, 3)}, operands)
    # type-only parameters stay out of the config
    fromdense = bcoo.REGISTRY["fromdense"].config({"nse": 2, "n_batch": 0, "n_dense": 0, "index_dtype": np.int32},
                                                  [(3, 4)])
    assert "index_dtype" not in fromdense and fromdense["shape"] == (3, 4)


def test_a_registry_holds_each_name_once():
    with pytest.raises(ValueError, match="two records for hlopt.bcoo.squeeze"):
        bcoo.REGISTRY.with_records(bcoo.REGISTRY["squeeze"])


# ---------------------------------------------------------------------------
# Scratch ops: everything they need is one record module (support/bcoo_scratch_ops.py, which imports no
# jax); `hlopt.sparse.rules` builds their primitives, with vmap, JVP and transpose, from it.


def _scale(m: hs.BCOO, factor: int) -> hs.BCOO:
    data, indices = rules.primitive("scale").bind(m.data, m.indices, factor=factor, **m._params)
    return hs.BCOO((data, indices), shape=m.shape)


def _times_dense(m: hs.BCOO, arr) -> jax.Array:
    """The data of `m * arr` (arr dense, of m's shape) at m's indices."""
    return rules.primitive("times_dense").bind(m.data, m.indices, jax.device_put(arr), **m._params)


@pytest.fixture
def scratch(monkeypatch):
    monkeypatch.setattr(bcoo, "REGISTRY", bcoo.REGISTRY.with_records(*scratch_ops.RECORDS))


def test_the_scratch_module_is_data_for_the_jax_side():
    tree = ast.parse(pathlib.Path(scratch_ops.__file__).read_text())
    imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert not {m for m in imported if m.split(".")[0] in ("jax", "jaxlib", "hlopt") and not m.startswith(
        "hlopt.passes")}, imported
    assert "scale" not in bcoo.REGISTRY and "times_dense" not in bcoo.REGISTRY


def test_the_shipped_registry_does_not_know_the_scratch_op():
    with pytest.raises(KeyError, match="scale"):
        rules.primitive("scale")
    scale_p = rules.define(scratch_ops.SCALE)  # a primitive made outside the registry in use
    with pytest.raises(Exception, match=r"@hlopt.bcoo.scale: unknown sparse op \(known: bcsr_dot_general, broadcast_in_dim"):
        hlopt.jit(lambda m: hs.BCOO(tuple(scale_p.bind(m.data, m.indices, factor=3, **m._params)),
                                    shape=m.shape).todense())(M)


def test_a_scratch_op_is_one_record(scratch):
    text = hlopt.lower(lambda m: _scale(m, 3).todense(), M).as_text()
    assert "@hlopt.bcoo.scale" in text and "factor = 3" in text
    np.testing.assert_allclose(np.asarray(hlopt.jit(lambda m: _scale(m, 3).todense())(M)), 3 * X)
    np.testing.assert_allclose(np.asarray(_scale(M, -2).todense()), -2 * X)  # eager
    np.testing.assert_allclose(np.asarray(jax.jit(lambda m: _scale(m, 5).todense())(M)), 5 * X)  # plain jax.jit
    grad = jax.grad(lambda d: _scale(hs.BCOO((d, M.indices), shape=M.shape), 4).todense().sum())(M.data)
    np.testing.assert_allclose(np.asarray(grad), 4 * np.ones(M.nse))
    batched = hs.BCOO.fromdense(np.stack([X, X2]), n_batch=1)
    out = jax.vmap(lambda d, i: _scale(hs.BCOO((d, i), shape=(3, 4)), 2).todense())(batched.data, batched.indices)
    np.testing.assert_allclose(np.asarray(out), 2 * np.stack([X, X2]))


W = _rng.normal(size=(3, 4)).astype(np.float32)


def _dense_times(d, w):
    """The dense reference of `_times_dense`: `X * w` read at M's entries, with data `d` for X's."""
    return d * w[_AT]


def test_a_bilinear_scratch_op_differentiates_through_other_ops(scratch):
    """times_dense's transposes are declared through extract and todense: grad in each operand,
    forward and reverse, under hlopt.jit and lower-bcoo, against the dense computation."""
    want = _dense_times(np.asarray(M.data), W)
    np.testing.assert_allclose(np.asarray(_times_dense(M, W)), want, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(hlopt.jit(_times_dense)(M, W)), want, rtol=1e-6)
    lowered = hlopt.lower(_times_dense, M, W).apply("lower-bcoo").as_text()
    assert "hlopt.bcoo" not in lowered and "stablehlo.gather" in lowered

    def loss(d, w):
        return (_times_dense(hs.BCOO((d, M.indices), shape=M.shape), w) ** 2).sum()

    def dense_loss(d, w):
        return (_dense_times(d, w) ** 2).sum()

    for argnum in (0, 1):
        got = hlopt.jit(jax.grad(loss, argnums=argnum))(M.data, jax.device_put(W))
        ref = jax.grad(dense_loss, argnums=argnum)(M.data, jax.device_put(W))
        np.testing.assert_allclose(np.asarray(got), np.asarray(ref), rtol=1e-5, atol=1e-6)
    tangent = jax.jvp(loss, (M.data, jax.device_put(W)), (jnp.ones_like(M.data), jax.device_put(X2)))[1]
    ref = jax.jvp(dense_loss, (M.data, jax.device_put(W)), (jnp.ones_like(M.data), jax.device_put(X2)))[1]
    np.testing.assert_allclose(np.asarray(tangent), np.asarray(ref), rtol=1e-5)


def test_a_bilinear_scratch_op_batches(scratch):
    """vmap over the BCOO (the dense array shared, then mapped too) and grad under vmap."""
    batched = hs.BCOO.fromdense(np.stack([X, X2]), n_batch=1)
    ws = np.stack([W, 2 * W])

    def one(d, i, w):
        return _times_dense(hs.BCOO((d, i), shape=(3, 4)), w)

    out = jax.vmap(one, in_axes=(0, 0, None))(batched.data, batched.indices, W)
    dense = np.stack([X, X2])
    np.testing.assert_allclose(np.asarray(hs.BCOO((out, batched.indices), shape=(2, 3, 4)).todense()), dense * W,
                               rtol=1e-6)
    out = hlopt.jit(jax.vmap(one))(batched.data, batched.indices, ws)
    np.testing.assert_allclose(np.asarray(hs.BCOO((out, batched.indices), shape=(2, 3, 4)).todense()), dense * ws,
                               rtol=1e-6)
    grads = jax.vmap(jax.grad(lambda d, i, w: one(d, i, w).sum(), argnums=2))(batched.data, batched.indices, ws)
    np.testing.assert_allclose(np.asarray(grads), (dense != 0) * dense, rtol=1e-6)


def test_a_scratch_op_is_validated_by_its_signature(scratch):
    module = hlopt.lower(lambda m: _scale(m, 3).todense(), M).module
    with module.context:
        (op,) = [o for o in walk_ops(module.operation, "stablehlo.custom_call") if bcoo.is_bcoo_op(o)
                 and "scale" in str(o.attributes["call_target_name"])]
        config = {a.name: a.attr for a in op.attributes["backend_config"]}
        del config["factor"]
        from hlopt.passes.mlir import ir

        op.attributes["backend_config"] = ir.DictAttr.get(config)
        with pytest.raises(PassError, match=r"@hlopt.bcoo.scale: backend_config has no 'factor' \(an integer\)"):
            bcoo.read(op)


def test_the_jax_terms_implement_the_protocol():
    """Every name a record's rules may use (`hlopt.passes.sparse.bcoo.terms.Terms`) has a jax meaning."""
    from hlopt.passes.sparse.bcoo.terms import Terms

    wanted = {n for n in vars(Terms) if not n.startswith("_")}
    assert wanted and not sorted(wanted - set(vars(rules.TERMS))), "Terms members rules.TERMS lacks"


def test_every_record_that_differentiates_declares_it():
    """Every shipped op has a Derivative (its JVP and transpose come from the record alone)."""
    assert not sorted(name for name, record in bcoo.REGISTRY.items() if record.derivative is None)


LAYOUT_CASES = [  # (shape, data shape, indices shape, index dtype, the fragment of the refusal, or None)
    ((4, 3), (5,), (5, 2), np.int32, None),
    ((2, 4, 3), (1, 5), (2, 5, 2), np.int32, None),
    ((4, 3, 1), (5,), (5, 2), np.int32, "the buffers hold 0 batch, 2 sparse and 0 dense dims"),
    ((4,), (3,), (3, 2), np.int32, "does not fit an array of shape"),
    ((3, 4), (2, 5), (3, 5, 1), np.int32, "batch dimensions"),
    ((4, 300), (5,), (5, 2), np.int8, "int8 indices cannot address every sparse dim"),
]


@pytest.mark.parametrize("shape, data, indices, dtype, problem", LAYOUT_CASES)
def test_a_files_bcoo_check_is_the_constructors_layout_rule(shape, data, indices, dtype, problem):
    """The runtime's check of a BCOO node (registered by hlopt.sparse) and the BCOO constructor
    read one layout rule (hlopt.passes.sparse.shapes.layout)."""
    from hlopt.runtime.encoding import NODE_CHECKS

    check = NODE_CHECKS["hlopt.sparse.BCOO"]
    found = check({"shape": shape}, [jax.ShapeDtypeStruct(data, np.float32), jax.ShapeDtypeStruct(indices, dtype)])
    if problem is None:
        assert found is None
        hs.BCOO((np.zeros(data, np.float32), np.zeros(indices, dtype)), shape=shape)
        return
    assert problem in found
    if "cannot address" not in problem:  # the constructor refuses the same layouts
        with pytest.raises(ValueError, match=re.escape(found.split(": ", 1)[1])):
            hs.BCOO((np.zeros(data, np.float32), np.zeros(indices, dtype)), shape=shape)
