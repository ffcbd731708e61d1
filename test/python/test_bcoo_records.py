"""The BCOO op records (`hlopt.passes.bcoo`): one record per op, read by the Python primitive,
abstract evaluation, validation and lower-bcoo.

- every record has a primitive whose emitted `backend_config` validates against the record's
  signature (read back with `hlopt.passes.bcoo.read`), a numeric test here (against the dense
  computation) and a lit case in test/lit/lower-bcoo; a record without one fails by name;
- `Record.config` refuses parameters its signature does not name and fields of the wrong kind;
- a scratch op, `scale` (data times an integer `factor`), is added as ONE record in a scratch
  registry (the module-level `SCALE` below, plus its jax primitive from `rules.data_linear`):
  lowering, validation, eager calls, jit, grad and vmap all work from it, and the shipped
  registry does not know it.
"""

from __future__ import annotations

import pathlib
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import hlopt
import hlopt.sparse as hs
from hlopt.passes import bcoo
from hlopt.passes import bcoo_shapes as shapes
from hlopt.passes import builders as b
from hlopt.passes.base import PassError
from hlopt.passes.bcoo.record import DATA, INDICES, INT, Record, Signature, same_params
from hlopt.passes.walk import walk_ops
from hlopt.sparse import rules

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
    "extract": (lambda m: hs.bcoo_extract(m, jnp.asarray(X2)).todense(), X2 * MASK),
    "multiply_dense": (lambda m: hs.bcoo_multiply_dense(m, jnp.asarray(V)), (X * V)[_AT]),
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
    "dot_general": (lambda m: m @ jnp.asarray(Y), X @ Y),
    "bcsr_dot_general": (lambda m: hs.BCSR.from_bcoo(m) @ jnp.asarray(Y), X @ Y),
    "dot_general_sampled": (
        lambda m: hs.bcoo_dot_general_sampled(jnp.asarray(A), jnp.asarray(B), m.indices, dimension_numbers=DIMS),
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
# A scratch op: everything it needs is this record and its primitive.


def _lower_scale(c: bcoo.BcooOp) -> list:
    data, idx = c.operands
    factor = b.full(b.shape_of(data), c.config["factor"], b.elem_of(data))
    return [b.mul(data, factor), idx]


SCALE = Record("scale", Signature((DATA, INDICES), 2, {"factor": INT}),
               lambda c, d, i: [shapes.operand(c, d, i).data, i], _lower_scale, batched=same_params)
scale_p = rules.data_linear(SCALE, lambda ct, data, indices, *, factor, **_: ct * factor)


def _scale(m: hs.BCOO, factor: int) -> hs.BCOO:
    data, indices = scale_p.bind(m.data, m.indices, factor=factor, **m._params)
    return hs.BCOO((data, indices), shape=m.shape)


@pytest.fixture
def scratch(monkeypatch):
    monkeypatch.setattr(bcoo, "REGISTRY", bcoo.REGISTRY.with_records(SCALE))


def test_the_shipped_registry_does_not_know_the_scratch_op():
    with pytest.raises(Exception, match=r"@hlopt.bcoo.scale: unknown sparse op \(known: bcsr_dot_general, broadcast_in_dim"):
        hlopt.jit(lambda m: _scale(m, 3).todense())(M)


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
