"""vjp-expand beyond the per-rule table: ops JAX does not emit (from StableHLO text), the
partitioner's annotations on 8 devices, the annotation, the residual policy, and errors."""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import hlopt
from hlopt.compiler.program import parse_module
from hlopt.passes.base import PassError
from hlopt.compiler.stages import AnnotationError, Lowered
from hlopt.runtime.compile import compile_lowered

from support.references import vjp_of_a_jet
from support.vjp_harness import _signature, assert_cotangents_close, hlopt_vjp, jax_vjp, random_cotangents

rng = np.random.default_rng(0)
X4 = rng.normal(size=4).astype(np.float32)
Y4 = rng.normal(size=4).astype(np.float32)


def _check(module_or_fun, reference, primals, rtol=2e-6, mesh=None):
    cts = random_cotangents(reference, primals, np.random.default_rng(1))
    got = hlopt_vjp(module_or_fun, primals, cts, mesh=mesh)
    assert_cotangents_close(got, jax_vjp(reference, primals, cts), primals, rtol, "vjp")


# StableHLO that JAX's lowering never produces, against jax.vjp of the same computation.
MODULES = {
    "logistic": ("""
func.func @main(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = stablehlo.logistic %x : tensor<4xf32>
  return %0 : tensor<4xf32>
}""", jax.nn.sigmoid, (X4,)),
    "chlo_tan": ("""
func.func @main(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = chlo.tan %x : tensor<4xf32> -> tensor<4xf32>
  return %0 : tensor<4xf32>
}""", jnp.tan, (X4 / 3,)),
    "chlo_conj": ("""
func.func @main(%x: tensor<4xf32>, %y: tensor<4xf32>) -> tensor<4xf32> {
  %z = stablehlo.complex %x, %y : tensor<4xcomplex<f32>>
  %c = chlo.conj %z : tensor<4xcomplex<f32>> -> tensor<4xcomplex<f32>>
  %w = stablehlo.multiply %c, %z : tensor<4xcomplex<f32>>
  %p = stablehlo.multiply %c, %c : tensor<4xcomplex<f32>>
  %s = stablehlo.add %w, %p : tensor<4xcomplex<f32>>
  %i = stablehlo.imag %s : (tensor<4xcomplex<f32>>) -> tensor<4xf32>
  %r = stablehlo.real %s : (tensor<4xcomplex<f32>>) -> tensor<4xf32>
  %o = stablehlo.add %i, %r : tensor<4xf32>
  return %o : tensor<4xf32>
}""", lambda x, y: (lambda z: jnp.imag(jnp.conj(z) * z + jnp.conj(z) ** 2) + jnp.real(jnp.conj(z) * z + jnp.conj(z) ** 2))(
        lax.complex(x, y)), (X4, Y4)),
    "if": ("""
func.func @main(%x: tensor<4xf32>, %y: tensor<4xf32>) -> tensor<4xf32> {
  %z = stablehlo.constant dense<0.0> : tensor<f32>
  %s = stablehlo.reduce(%x init: %z) applies stablehlo.add across dimensions = [0] : (tensor<4xf32>, tensor<f32>) -> tensor<f32>
  %p = stablehlo.compare GT, %s, %z : (tensor<f32>, tensor<f32>) -> tensor<i1>
  %r = "stablehlo.if"(%p) ({
    %e = stablehlo.sine %x : tensor<4xf32>
    %m = stablehlo.multiply %e, %y : tensor<4xf32>
    stablehlo.return %m : tensor<4xf32>
  }, {
    %e = stablehlo.exponential %y : tensor<4xf32>
    stablehlo.return %e : tensor<4xf32>
  }) : (tensor<i1>) -> tensor<4xf32>
  return %r : tensor<4xf32>
}""", lambda x, y: lax.cond(jnp.sum(x) > 0, lambda: jnp.sin(x) * y, lambda: jnp.exp(y)), (X4, Y4)),
    "clamp_rank0_bounds": ("""
func.func @main(%lo: tensor<f32>, %x: tensor<4xf32>, %hi: tensor<f32>) -> tensor<4xf32> {
  %0 = stablehlo.clamp %lo, %x, %hi : (tensor<f32>, tensor<4xf32>, tensor<f32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}""", lambda lo, x, hi: lax.clamp(jnp.broadcast_to(lo, x.shape), x, jnp.broadcast_to(hi, x.shape)),
        (np.float32(-0.3), X4, np.float32(0.5))),
    "select_rank0_predicate": ("""
func.func @main(%x: tensor<4xf32>, %y: tensor<4xf32>) -> tensor<4xf32> {
  %z = stablehlo.constant dense<0.0> : tensor<f32>
  %s = stablehlo.reduce(%x init: %z) applies stablehlo.add across dimensions = [0] : (tensor<4xf32>, tensor<f32>) -> tensor<f32>
  %p = stablehlo.compare LT, %s, %z : (tensor<f32>, tensor<f32>) -> tensor<i1>
  %m = stablehlo.multiply %x, %y : tensor<4xf32>
  %r = stablehlo.select %p, %m, %y : tensor<i1>, tensor<4xf32>
  return %r : tensor<4xf32>
}""", lambda x, y: jnp.where(jnp.sum(x) < 0, x * y, y), (X4, Y4)),
    "reduce_window_mul_2d": ("""
func.func @main(%x: tensor<3x4xf32>) -> tensor<2x3xf32> {
  %one = stablehlo.constant dense<1.0> : tensor<f32>
  %0 = "stablehlo.reduce_window"(%x, %one) <{window_dimensions = array<i64: 2, 2>}> ({
  ^bb0(%a: tensor<f32>, %b: tensor<f32>):
    %m = stablehlo.multiply %a, %b : tensor<f32>
    stablehlo.return %m : tensor<f32>
  }) : (tensor<3x4xf32>, tensor<f32>) -> tensor<2x3xf32>
  return %0 : tensor<2x3xf32>
}""", lambda x: x[:-1, :-1] * x[1:, :-1] * x[:-1, 1:] * x[1:, 1:],
        (np.array([[1.5, 0.0, -0.7, 2.0], [0.3, 0.0, 1.1, -1.2], [0.9, 1.3, 0.0, 0.4]], np.float32),)),
    # jet-expand's stacked dot: coefficients concatenated, one dot_general, its result
    # sliced apart. The slices' cotangents meet (one concatenation), the unused ones are
    # zero (the dots read the cotangent unpadded), the middle piece leaves a gap.
    "stacked_dot_pieces": ("""
func.func @main(%a: tensor<2x3xf32>, %b: tensor<1x3xf32>, %w: tensor<3x4xf32>) -> (tensor<2x4xf32>, tensor<1x4xf32>) {
  %s = stablehlo.concatenate %a, %b, dim = 0 : (tensor<2x3xf32>, tensor<1x3xf32>) -> tensor<3x3xf32>
  %d = stablehlo.dot_general %s, %w, contracting_dims = [1] x [0] : (tensor<3x3xf32>, tensor<3x4xf32>) -> tensor<3x4xf32>
  %p = stablehlo.slice %d [0:2, 0:4] : (tensor<3x4xf32>) -> tensor<2x4xf32>
  %q = stablehlo.slice %d [2:3, 0:4] : (tensor<3x4xf32>) -> tensor<1x4xf32>
  %t = stablehlo.tanh %p : tensor<2x4xf32>
  return %t, %q : tensor<2x4xf32>, tensor<1x4xf32>
}""", lambda a, b, w: (lambda d: (jnp.tanh(d[:2]), d[2:]))(jnp.concatenate([a, b]) @ w),
        (rng.normal(size=(2, 3)).astype(np.float32), rng.normal(size=(1, 3)).astype(np.float32),
         rng.normal(size=(3, 4)).astype(np.float32))),
    "stacked_dot_one_piece_used": ("""
func.func @main(%a: tensor<2x3xf32>, %b: tensor<1x3xf32>, %w: tensor<3x4xf32>) -> tensor<1x4xf32> {
  %s = stablehlo.concatenate %a, %b, dim = 0 : (tensor<2x3xf32>, tensor<1x3xf32>) -> tensor<3x3xf32>
  %d = stablehlo.dot_general %s, %w, contracting_dims = [1] x [0] : (tensor<3x3xf32>, tensor<3x4xf32>) -> tensor<3x4xf32>
  %q = stablehlo.slice %d [2:3, 0:4] : (tensor<3x4xf32>) -> tensor<1x4xf32>
  %e = stablehlo.exponential %q : tensor<1x4xf32>
  return %e : tensor<1x4xf32>
}""", lambda a, b, w: jnp.exp((jnp.concatenate([a, b]) @ w)[2:]),
        (rng.normal(size=(2, 3)).astype(np.float32), rng.normal(size=(1, 3)).astype(np.float32),
         rng.normal(size=(3, 4)).astype(np.float32))),
    "rhs_free_slices_with_a_gap": ("""
func.func @main(%x: tensor<2x3x5xf32>, %w: tensor<2x5x4xf32>) -> (tensor<2x3x1xf32>, tensor<2x3x2xf32>) {
  %d = stablehlo.dot_general %x, %w, batching_dims = [0] x [0], contracting_dims = [2] x [1] : (tensor<2x3x5xf32>, tensor<2x5x4xf32>) -> tensor<2x3x4xf32>
  %p = stablehlo.slice %d [0:2, 0:3, 0:1] : (tensor<2x3x4xf32>) -> tensor<2x3x1xf32>
  %q = stablehlo.slice %d [0:2, 0:3, 2:4] : (tensor<2x3x4xf32>) -> tensor<2x3x2xf32>
  %s = stablehlo.sine %q : tensor<2x3x2xf32>
  return %p, %s : tensor<2x3x1xf32>, tensor<2x3x2xf32>
}""", lambda x, w: (lambda d: (d[..., :1], jnp.sin(d[..., 2:])))(jnp.einsum("bij,bjk->bik", x, w)),
        (rng.normal(size=(2, 3, 5)).astype(np.float32), rng.normal(size=(2, 5, 4)).astype(np.float32))),
    "rhs_free_middle_slice": ("""
func.func @main(%x: tensor<2x3x5xf32>, %w: tensor<2x5x4xf32>) -> tensor<2x3x2xf32> {
  %d = stablehlo.dot_general %x, %w, batching_dims = [0] x [0], contracting_dims = [2] x [1] : (tensor<2x3x5xf32>, tensor<2x5x4xf32>) -> tensor<2x3x4xf32>
  %q = stablehlo.slice %d [0:2, 0:3, 1:3] : (tensor<2x3x4xf32>) -> tensor<2x3x2xf32>
  %s = stablehlo.sine %q : tensor<2x3x2xf32>
  return %s : tensor<2x3x2xf32>
}""", lambda x, w: jnp.sin(jnp.einsum("bij,bjk->bik", x, w)[..., 1:3]),
        (rng.normal(size=(2, 3, 5)).astype(np.float32), rng.normal(size=(2, 5, 4)).astype(np.float32))),
    "while_counting_down": ("""
func.func @main(%x: tensor<4xf32>) -> tensor<4xf32> {
  %c0 = stablehlo.constant dense<2> : tensor<i32>
  %r:2 = stablehlo.while(%i = %c0, %y = %x) : tensor<i32>, tensor<4xf32>
    cond {
      %n = stablehlo.constant dense<5> : tensor<i32>
      %p = stablehlo.compare GT, %n, %i : (tensor<i32>, tensor<i32>) -> tensor<i1>
      stablehlo.return %p : tensor<i1>
    } do {
      %c1 = stablehlo.constant dense<1> : tensor<i32>
      %j = stablehlo.add %c1, %i : tensor<i32>
      %s = stablehlo.sine %y : tensor<4xf32>
      %b = stablehlo.multiply %s, %x : tensor<4xf32>
      stablehlo.return %j, %b : tensor<i32>, tensor<4xf32>
    }
  return %r#1 : tensor<4xf32>
}""", lambda x: jnp.sin(jnp.sin(jnp.sin(x) * x) * x) * x, (X4,)),
}


@pytest.mark.parametrize("name", list(MODULES))
def test_stablehlo_module_matches_jax_vjp(name):
    text, reference, primals = MODULES[name]
    _check(text, reference, list(primals))


def test_known_trip_count_is_taped_and_read_backward():
    """`N > i` from 2 to 5 is a known trip count: a 3-row tape, no recomputation loop."""
    text = MODULES["while_counting_down"][0]
    out = Lowered(parse_module(text), _signature([X4], [X4])).apply("vjp-expand{func=main}").as_text()
    vjp = out[out.index("@main_vjp"):]
    assert "tensor<3x4xf32>" in vjp
    assert vjp.count("stablehlo.while") == 2, vjp  # forward (with tape) and backward, none nested


@pytest.fixture
def gspmd():
    previous = jax.config.jax_use_shardy_partitioner
    jax.config.update("jax_use_shardy_partitioner", False)
    yield
    jax.config.update("jax_use_shardy_partitioner", previous)


def _mesh():
    return jax.make_mesh((8,), ("x",), axis_types=(jax.sharding.AxisType.Auto,))


def test_shard_map_gspmd(gspmd):
    """SPMDFullToShardShape / SPMDShardToFullShape are crossed the other way."""
    mesh = _mesh()

    def f(x):
        return jax.shard_map(lambda b: jnp.sin(b) * b.sum(), mesh=mesh, in_specs=P("x"), out_specs=P("x"))(x)

    x = np.arange(16, dtype=np.float32).reshape(8, 2) / 7
    assert "@SPMDFullToShardShape" in hlopt.lower(f, x, mesh=mesh).as_text()
    _check(f, f, [x], mesh=mesh)


@pytest.mark.parametrize("shardy", [False, True], ids=["gspmd", "shardy"])
def test_sharding_constraint(shardy):
    """GSPMD lowers the constraint to a @Sharding custom call, Shardy to sdy.sharding_constraint:
    either is applied to the cotangent."""
    previous = jax.config.jax_use_shardy_partitioner
    jax.config.update("jax_use_shardy_partitioner", shardy)
    try:
        mesh = _mesh()

        def f(x):
            return jax.lax.with_sharding_constraint(jnp.sin(x), NamedSharding(mesh, P("x"))) * x

        x = np.arange(16, dtype=np.float32).reshape(8, 2) / 7
        assert ("sdy.sharding_constraint" if shardy else "@Sharding") in hlopt.lower(f, x, mesh=mesh).as_text()
        _check(f, f, [x], mesh=mesh)
    finally:
        jax.config.update("jax_use_shardy_partitioner", previous)


def _pass_error(f, *args, **kwargs) -> PassError:
    """The PassError that vjp-expand{func=main} raises on `f` (its location is the op's), kept as the context of
    the PipelineError it is reported as."""
    with pytest.raises(hlopt.PipelineError) as info:
        hlopt.lower(f, *args, **kwargs).apply("vjp-expand{func=main}")
    assert isinstance(info.value.__context__, PassError), info.value
    assert "\n" not in str(info.value)
    return info.value.__context__


def test_shard_map_shardy_is_refused_at_its_location():
    mesh = _mesh()

    def f(x):
        return jax.shard_map(jnp.sin, mesh=mesh, in_specs=P("x"), out_specs=P("x"))(x)

    error = _pass_error(f, np.ones((8, 2), np.float32), mesh=mesh)
    assert str(error).endswith("error: vjp-expand: no reverse-mode rule for 'sdy.manual_computation'"), error
    assert re.search(rf'test_vjp_expand\.py"?:{f.__code__.co_firstlineno + 1}:', str(error.location)), error.location


def test_op_without_rule_is_reported_at_its_location():
    def f(x):
        return lax.conv_general_dilated(x.reshape(1, 1, 4), x[:3].reshape(1, 1, 3), (1,), "SAME")

    error = _pass_error(f, X4)
    assert str(error).endswith("error: vjp-expand: no reverse-mode rule for 'stablehlo.convolution'"), error
    assert re.search(rf'test_vjp_expand\.py"?:{f.__code__.co_firstlineno + 1}:', str(error.location)), error.location


def test_undifferentiated_ops_need_no_rule():
    """An op without a rule is fine where nothing differentiated flows through it."""
    def f(x, y):
        return jnp.sin(x) * jnp.fft.fft(y).real

    cts = [np.ones(4, np.float32)]
    with pytest.raises(hlopt.PipelineError, match="stablehlo.fft"):
        hlopt_vjp(f, [X4, Y4], cts)
    got = hlopt_vjp(lambda x: f(x, Y4), [X4], cts)
    assert_cotangents_close(got, jax_vjp(lambda x: f(x, Y4), [X4], cts), [X4], 2e-6, "fft of a constant")


def test_leftover_annotation_is_refused_naming_the_pass():
    text = """
func.func @main(%x: tensor<4xf32>, %ct: tensor<4xf32>) -> tensor<4xf32> {
  %g = stablehlo.custom_call @hlopt.vjp(%x, %ct) {api_version = 4 : i32, called_computations = [@f], backend_config = {}} : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %g : tensor<4xf32>
}
func.func private @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = stablehlo.sine %x : tensor<4xf32>
  return %0 : tensor<4xf32>
}"""
    lowered = Lowered(parse_module(text), _signature([X4, X4], [X4]), backend=compile_lowered)
    with pytest.raises(AnnotationError, match="run the 'vjp-expand' pass first"):
        lowered.compile("")
    got = np.asarray(lowered.compile()(X4, Y4)[0])
    np.testing.assert_allclose(got, Y4 * np.cos(X4), rtol=1e-6)


def test_vjp_of_a_jet_through_the_default_pipeline():
    """The backward of a jet: an hlopt.vjp over a function that holds an hlopt.jet, as the
    Python side will emit it (jet-expand runs first in hlopt-default)."""
    text = vjp_of_a_jet("""
  %0 = stablehlo.tanh %x : tensor<4xf32>
  %1 = stablehlo.multiply %0, %x : tensor<4xf32>
  return %1 : tensor<4xf32>
""")

    def second(x, v):  # the second Taylor coefficient of t -> f(x + t v): f''(x) v^2 / 2
        f = lambda x: jnp.tanh(x) * x  # noqa: E731
        return jax.jvp(lambda x: jax.jvp(f, (x,), (v,))[1], (x,), (v,))[1] / 2

    ct = np.linspace(-1, 1, 4).astype(np.float32)
    lowered = Lowered(parse_module(text), _signature([X4, Y4, ct], [X4, Y4]), backend=compile_lowered)
    got = [np.asarray(v) for v in lowered.compile()(X4, Y4, ct)]
    want = jax_vjp(second, [X4, Y4], [ct])
    assert_cotangents_close(got, want, [X4, Y4], 2e-5, "vjp of a jet")


def test_vjp_of_a_vjp_is_a_second_derivative():
    """Reverse over reverse through two annotations: with g(x, s) = s f'(x), the vjp of g
    for cotangent v is (s H v, v . f'(x))."""
    text = """
func.func @main(%x: tensor<4xf32>, %v: tensor<4xf32>) -> (tensor<4xf32>, tensor<f32>) {
  %one = stablehlo.constant dense<1.0> : tensor<f32>
  %h:2 = stablehlo.custom_call @hlopt.vjp(%x, %one, %v) {api_version = 4 : i32, called_computations = [@grad], backend_config = {}} : (tensor<4xf32>, tensor<f32>, tensor<4xf32>) -> (tensor<4xf32>, tensor<f32>)
  return %h#0, %h#1 : tensor<4xf32>, tensor<f32>
}
func.func private @grad(%x: tensor<4xf32>, %s: tensor<f32>) -> tensor<4xf32> {
  %g = stablehlo.custom_call @hlopt.vjp(%x, %s) {api_version = 4 : i32, called_computations = [@f], backend_config = {}} : (tensor<4xf32>, tensor<f32>) -> tensor<4xf32>
  return %g : tensor<4xf32>
}
func.func private @f(%x: tensor<4xf32>) -> tensor<f32> {
  %0 = stablehlo.sine %x : tensor<4xf32>
  %1 = stablehlo.multiply %0, %x : tensor<4xf32>
  %2 = stablehlo.multiply %1, %x : tensor<4xf32>
  %z = stablehlo.constant dense<0.0> : tensor<f32>
  %3 = stablehlo.reduce(%2 init: %z) applies stablehlo.add across dimensions = [0] : (tensor<4xf32>, tensor<f32>) -> tensor<f32>
  return %3 : tensor<f32>
}"""

    def f(x):
        return jnp.sum(jnp.sin(x) * x * x)

    lowered = Lowered(parse_module(text), _signature([X4, Y4], [X4, np.float32(0)]), backend=compile_lowered)
    hv, vg = (np.asarray(v) for v in lowered.compile()(X4, Y4))
    np.testing.assert_allclose(hv, jax.jvp(jax.grad(f), (X4,), (Y4,))[1], rtol=2e-5, atol=1e-6)
    np.testing.assert_allclose(vg, np.dot(Y4, jax.grad(f)(X4)), rtol=2e-5, atol=1e-6)


def test_deviations_from_jax_are_as_documented():
    """What the lowered computation cannot tell: stop_gradient is gone, relu at 0 is a tie of
    maximum (1/2), and cummax gives a tied window's cotangent to its first maximum."""
    x = np.array([0.0, 1.5, -2.0, 0.0], np.float32)
    ones = [np.ones(4, np.float32)]
    got = hlopt_vjp(lambda x: lax.stop_gradient(jnp.sin(x)) * x, [x], ones)[0]
    np.testing.assert_allclose(got, np.sin(x) + x * np.cos(x), rtol=1e-6)  # JAX: sin(x)
    got = hlopt_vjp(jax.nn.relu, [x], ones)[0]
    np.testing.assert_array_equal(got, [0.5, 1.0, 0.0, 0.5])  # JAX: [0, 1, 0, 0]
    ties = np.array([1.0, 1.0, 0.5, 1.0], np.float32)
    got = hlopt_vjp(lax.cummax, [ties], ones)[0]
    np.testing.assert_array_equal(got, [4.0, 0.0, 0.0, 0.0])  # every prefix's maximum is the first 1
