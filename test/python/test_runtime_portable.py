"""trust="portable": files from another key compile from their StableHLO, after runtime/portable.py's checks.

Genuine programs (LAPACK kernels, the GSPMD partitioner's markers, meshes)
written under one key give JAX's numbers under another; hand-made modules
with custom calls XLA would trust blindly, host transfers or tensors larger
than memory are refused before XLA sees them. Nothing here reaches native
code from a file: a fixture fails the test if PJRT is asked to load one.
"""

from __future__ import annotations

import re
import warnings

import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl
import numpy as np
from jax import lax
import pytest

import hlopt
from hlopt.compiler.program import parse_module
from hlopt.passes.mlir import ir
from hlopt.runtime import files
from hlopt.runtime.portable import PortableCheckError, check_portable

from support import forge, fresh_worker

RNG = np.random.default_rng(11)


@pytest.fixture
def other_key(monkeypatch):
    """Write under key A, then make key B this process's key: every file is foreign."""
    monkeypatch.setattr(files, "load_executable", lambda *a, **k: pytest.fail("native code was handed to PJRT"))
    monkeypatch.setenv("HLOPT_KEY", "key A " * 8)

    def swap() -> None:
        monkeypatch.setenv("HLOPT_KEY", "key B " * 8)

    return swap


def portable(data: bytes) -> hlopt.Compiled:
    with pytest.raises(hlopt.ExecutableFileError, match="MAC does not verify"):
        hlopt.deserialize(data)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", hlopt.RecompileWarning)
        return hlopt.deserialize(data, trust="portable")


def spd(n: int, dtype, batch=()) -> np.ndarray:
    a = RNG.standard_normal((*batch, n, n))
    if np.issubdtype(dtype, np.complexfloating):
        a = a + 1j * RNG.standard_normal((*batch, n, n))
    return (a @ np.conj(np.swapaxes(a, -1, -2)) + n * np.eye(n)).astype(dtype)


LINALG = {
    "cholesky": (jnp.linalg.cholesky, lambda dt: (spd(4, dt, (2,)),)),
    "lu_factor": (jsl.lu_factor, lambda dt: (RNG.standard_normal((5, 3)).astype(dt),)),
    "qr tall complete": (lambda a: tuple(jnp.linalg.qr(a, mode="complete")),
                         lambda dt: (RNG.standard_normal((5, 3)).astype(dt),)),
    "qr wide": (lambda a: tuple(jnp.linalg.qr(a)), lambda dt: (RNG.standard_normal((2, 3, 5)).astype(dt),)),
    "eigh": (lambda a: tuple(jnp.linalg.eigh(a)), lambda dt: (spd(4, dt),)),
    "solve_triangular left": (lambda a, b: jsl.solve_triangular(a, b, lower=True),
                              lambda dt: (np.tril(spd(4, dt)), RNG.standard_normal((4, 3)).astype(dt))),
    "solve_triangular right": (lambda a, b: jsl.solve_triangular(a, b.T, lower=False, trans=1).T,
                               lambda dt: (np.triu(spd(4, dt)), RNG.standard_normal((3, 4)).astype(dt))),
    "inv": (jnp.linalg.inv, lambda dt: (spd(3, dt),)),
    "svd thin": (lambda a: tuple(jnp.linalg.svd(a, full_matrices=False)),
                 lambda dt: (RNG.standard_normal((2, 5, 3)).astype(dt),)),
    "svd full": (lambda a: tuple(jnp.linalg.svd(a)), lambda dt: (RNG.standard_normal((3, 5)).astype(dt),)),
    "svd values": (lambda a: jnp.linalg.svd(a, compute_uv=False), lambda dt: (RNG.standard_normal((5, 3)).astype(dt),)),
    "svd qr": (lambda a: tuple(lax.linalg.svd(a, full_matrices=False, algorithm=lax.linalg.SvdAlgorithm.QR)),
               lambda dt: (RNG.standard_normal((3, 5)).astype(dt),)),
}


@pytest.mark.parametrize("dtype", [np.float32, np.complex64])
@pytest.mark.parametrize("name", list(LINALG))
def test_lapack_programs_load_portably(name, dtype, other_key):
    fun, make = LINALG[name]
    args = make(dtype)
    compiled = hlopt.lower(fun, *args).compile()
    assert "lapack_" in str(compiled.module)
    data = compiled.serialize()
    other_key()
    got = portable(data)(*args)
    for g, w in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(jax.jit(fun)(*args)), strict=True):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-4, atol=1e-4)


def test_gspmd_markers_load_portably(other_key):
    fun, reference, (x,), kwargs, pipeline = fresh_worker.program("markers")
    compiled = hlopt.lower(fun, x, **kwargs).compile(pipeline)
    assert "SPMDFullToShardShape" in str(compiled.module)
    data = compiled.serialize()
    other_key()
    loaded = portable(data)
    np.testing.assert_allclose(loaded(x), reference(x), rtol=1e-6)
    assert loaded.out_shardings[0].spec == compiled.out_shardings[0].spec


HOSTILE = {
    "result smaller than the kernel writes": (
        '%0:2 = stablehlo.custom_call @lapack_spotrf_ffi(%a) {mhlo.backend_config = {uplo = 76 : ui8}}'
        ' : (tensor<4x4xf32>) -> (tensor<2x2xf32>, tensor<i32>)',
        "results (tensor<2x2xf32>, tensor<i32>); the kernel writes (tensor<4x4xf32>, tensor<i32>)"),
    "not square": (
        '%0:2 = stablehlo.custom_call @lapack_spotrf_ffi(%r) {mhlo.backend_config = {uplo = 76 : ui8}}'
        ' : (tensor<4x3xf32>) -> (tensor<4x3xf32>, tensor<i32>)',
        "is not a batch of square f32 matrices"),
    "wrong element type": (
        '%0:3 = stablehlo.custom_call @lapack_dgetrf_ffi(%a) {api_version = 4 : i32}'
        ' : (tensor<4x4xf32>) -> (tensor<4x4xf32>, tensor<4xi32>, tensor<i32>)',
        "is not a batch of f64 matrices"),
    "untyped api": (
        '%0:3 = stablehlo.custom_call @lapack_sgetrf_ffi(%a) {api_version = 2 : i32}'
        ' : (tensor<4x4xf32>) -> (tensor<4x4xf32>, tensor<4xi32>, tensor<i32>)',
        "is not a typed (FFI) call: api_version 2 and no mhlo.backend_config dictionary"),
    "unknown target": (
        '%0 = stablehlo.custom_call @my_kernel(%a) {api_version = 4 : i32} : (tensor<4x4xf32>) -> tensor<4x4xf32>',
        "custom call to 'my_kernel', which is not on hlopt's list of checked targets"),
    "trsm side": (
        '%0 = stablehlo.custom_call @lapack_strsm_ffi(%a, %r) {mhlo.backend_config = '
        '{diag = 78 : ui8, side = 82 : ui8, trans_x = 78 : ui8, uplo = 76 : ui8}} : (tensor<4x4xf32>, tensor<4x3xf32>) '
        '-> tensor<4x3xf32>',
        "are not a square a[*b, k, k] and x[*b, m, n] with k = n"),
    "attributes twice, disagreeing": (
        '%0 = stablehlo.custom_call @lapack_strsm_ffi(%a, %r) {api_version = 4 : i32, backend_config = '
        '{diag = 78 : ui8, side = 82 : ui8, trans_x = 78 : ui8, uplo = 76 : ui8}, mhlo.backend_config = '
        '{diag = 78 : ui8, side = 76 : ui8, trans_x = 78 : ui8, uplo = 76 : ui8}} : (tensor<4x4xf32>, tensor<4x3xf32>) '
        '-> tensor<4x3xf32>',
        "carries its attributes twice, as mhlo.backend_config and as backend_config"),
    "attributes twice, agreeing": (
        '%0:2 = stablehlo.custom_call @lapack_spotrf_ffi(%a) {api_version = 4 : i32, backend_config = '
        '{uplo = 76 : ui8}, mhlo.backend_config = {uplo = 76 : ui8}} : (tensor<4x4xf32>) -> (tensor<4x4xf32>, tensor<i32>)',
        "carries its attributes twice"),
    "opaque string config": (
        '%0:2 = stablehlo.custom_call @lapack_spotrf_ffi(%a) {backend_config = "uplo=L"}'
        ' : (tensor<4x4xf32>) -> (tensor<4x4xf32>, tensor<i32>)',
        "has a backend_config that is not a dictionary"),
    "attribute the kernel does not read": (
        '%0:2 = stablehlo.custom_call @lapack_spotrf_ffi(%a) {mhlo.backend_config = {lda = 2 : ui8, uplo = 76 : ui8}}'
        ' : (tensor<4x4xf32>) -> (tensor<4x4xf32>, tensor<i32>)',
        "has attributes {lda, uplo}; its kernel reads exactly {uplo}"),
    "attribute missing": (
        '%0 = stablehlo.custom_call @lapack_strsm_ffi(%a, %r) {mhlo.backend_config = '
        '{side = 76 : ui8, trans_x = 78 : ui8, uplo = 76 : ui8}} : (tensor<4x4xf32>, tensor<4x3xf32>) -> tensor<4x3xf32>',
        "has attributes {side, trans_x, uplo}; its kernel reads exactly {diag, side, trans_x, uplo}"),
    "attributes on a kernel that reads none": (
        '%0:3 = stablehlo.custom_call @lapack_sgetrf_ffi(%a) {mhlo.backend_config = {uplo = 76 : ui8}}'
        ' : (tensor<4x4xf32>) -> (tensor<4x4xf32>, tensor<4xi32>, tensor<i32>)',
        "has attributes {uplo}; its kernel reads exactly {none}"),
    "character the kernel does not accept": (
        '%0:2 = stablehlo.custom_call @lapack_spotrf_ffi(%a) {mhlo.backend_config = {uplo = 88 : ui8}}'
        ' : (tensor<4x4xf32>) -> (tensor<4x4xf32>, tensor<i32>)',
        "has uplo = 88 : ui8; its kernel accepts 76 : ui8 (L) or 85 : ui8 (U)"),
    "attribute of another type": (
        '%0:3 = stablehlo.custom_call @lapack_ssyevd_ffi(%a) {mhlo.backend_config = {mode = 86 : i32, uplo = 76 : ui8}}'
        ' : (tensor<4x4xf32>) -> (tensor<4x4xf32>, tensor<4xf32>, tensor<i32>)',
        "has mode = 86 : i32; its kernel accepts 78 : ui8 (N) or 86 : ui8 (V)"),
    "batch rank lie": (
        '%0:2 = stablehlo.custom_call @lapack_spotrf_ffi(%a) {mhlo.backend_config = {uplo = 76 : ui8}, '
        'mhlo.frontend_attributes = {num_batch_dims = "1"}} : (tensor<4x4xf32>) -> (tensor<4x4xf32>, tensor<i32>)',
        'has num_batch_dims = "1"; its operands have 0 batch dimensions'),
    "orgqr tau too long": (
        '%t = stablehlo.constant dense<1.0> : tensor<5xf32>\n'
        '%0 = stablehlo.custom_call @lapack_sorgqr_ffi(%a, %t) {api_version = 4 : i32} : (tensor<4x4xf32>, tensor<5xf32>) '
        '-> tensor<4x4xf32>',
        "with k <= n <= m"),
    "svd full mode with thin vectors": (
        '%0:5 = stablehlo.custom_call @lapack_sgesdd_ffi(%r) {mhlo.backend_config = {mode = 65 : ui8}} : '
        '(tensor<4x3xf32>) -> (tensor<4x3xf32>, tensor<3xf32>, tensor<4x3xf32>, tensor<3x3xf32>, tensor<i32>)',
        "the kernel writes (tensor<4x3xf32>, tensor<3xf32>, tensor<4x4xf32>, tensor<3x3xf32>, tensor<i32>) in mode A"),
    "svd mode jax never emits": (
        '%0:5 = stablehlo.custom_call @lapack_sgesvd_ffi(%r) {mhlo.backend_config = {mode = 79 : ui8}} : '
        '(tensor<4x3xf32>) -> (tensor<4x3xf32>, tensor<3xf32>, tensor<4x3xf32>, tensor<3x3xf32>, tensor<i32>)',
        "has mode = 79 : ui8; its kernel accepts 83 : ui8 (S) or 65 : ui8 (A) or 78 : ui8 (N)"),
    "infeed": (
        '%tok = stablehlo.create_token : !stablehlo.token\n'
        '%0:2 = "stablehlo.infeed"(%tok) {infeed_config = ""} : (!stablehlo.token) -> (tensor<4x4xf32>, !stablehlo.token)',
        "stablehlo.infeed reads from the host and can block forever"),
    "attributes XLA never hands the kernel (api_version 4, mhlo.backend_config)": (
        '%0:2 = stablehlo.custom_call @lapack_spotrf_ffi(%a) {api_version = 4 : i32, mhlo.backend_config = {uplo = 76 : ui8}}'
        ' : (tensor<4x4xf32>) -> (tensor<4x4xf32>, tensor<i32>)',
        "api_version 4 with a mhlo.backend_config dictionary"),
    "dynamic shape": (
        '%n = stablehlo.constant dense<40000000000> : tensor<1xi64>\n'
        '%0 = stablehlo.dynamic_iota %n, dim = 0 : (tensor<1xi64>) -> tensor<?xf32>',
        "tensor<?xf32> with a dynamic dimension: hlopt compiles static shapes only"),
    "unranked tensor": (
        '%0 = builtin.unrealized_conversion_cast %a : tensor<4x4xf32> to tensor<*xf32>',
        "tensor<*xf32> of unknown rank"),
    "collective_permute to a device the program does not have": (
        '%0 = "stablehlo.collective_permute"(%a) {source_target_pairs = dense<[[0, 1], [1, 9000]]> : tensor<2x2xi64>, '
        'channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>} : (tensor<4x4xf32>) -> tensor<4x4xf32>',
        "stablehlo.collective_permute names device 1 in source_target_pairs; the program runs on 1 device(s)"),
    "all_gather over a group of far devices": (
        '%0 = "stablehlo.all_gather"(%a) {all_gather_dim = 0 : i64, replica_groups = dense<[[0, 1, 2, 3]]> : '
        'tensor<1x4xi64>} : (tensor<4x4xf32>) -> tensor<16x4xf32>',
        "names device 1 in replica_groups"),
    "huge tensor": (
        '%c = stablehlo.constant dense<1.0> : tensor<f32>\n'
        '%0 = stablehlo.broadcast_in_dim %c, dims = [] : (tensor<f32>) -> tensor<1000000x1000000xf32>',
        "more than this machine's"),
}


def hostile_module(body: str) -> str:
    return ("func.func @main(%a: tensor<4x4xf32>, %r: tensor<4x3xf32>) -> tensor<4x4xf32> {\n"
            f"{body}\n  return %a : tensor<4x4xf32>\n}}")


@pytest.mark.parametrize("case", list(HOSTILE))
def test_hostile_modules_are_refused(case):
    body, match = HOSTILE[case]
    with pytest.raises(PortableCheckError, match=re.escape(match)):
        check_portable(parse_module(hostile_module(body)))


def test_hostile_module_in_a_file_is_refused_before_xla(other_key, monkeypatch):
    args = (np.eye(4, dtype=np.float32), np.ones((4, 3), np.float32))
    compiled = hlopt.lower(lambda a, r: a, *args).compile()
    manifest, sections = forge.unpack(compiled.serialize())
    body, match = HOSTILE["result smaller than the kernel writes"]
    from hlopt.passes.mlir import serialize_portable_artifact

    module = parse_module(hostile_module(body))
    artifact = forge.retag(serialize_portable_artifact(module), manifest["signature"])
    forged = forge.forge(manifest, dict(sections, module=artifact))
    monkeypatch.setattr(files, "compile_program", lambda *a, **k: pytest.fail("XLA was asked to compile it"))
    other_key()
    with pytest.warns(hlopt.RecompileWarning), pytest.raises(
            hlopt.ExecutableFileError, match=f"refused to compile the module section: .*{re.escape(match[:30])}"):
        hlopt.deserialize(forged, trust="portable")


def test_other_dialects_and_called_functions_are_refused():
    text = ("func.func @main(%a: tensor<4xf32>) -> tensor<4xf32> {\n"
            "  %0 = stablehlo.custom_call @Sharding(%a) {called_computations = [@g], mhlo.sharding = \"{replicated}\"}"
            " : (tensor<4xf32>) -> tensor<4xf32>\n  return %0 : tensor<4xf32>\n}\n"
            "func.func private @g(%a: tensor<4xf32>) -> tensor<4xf32> {\n  return %a : tensor<4xf32>\n}")
    with pytest.raises(PortableCheckError, match="calls functions; it never does"):
        check_portable(parse_module(text))
    text = ("func.func @main(%a: tensor<4xf32>) -> tensor<4xf32> {\n"
            "  %0 = mhlo.add %a, %a : tensor<4xf32>\n  return %0 : tensor<4xf32>\n}")
    with pytest.raises(PortableCheckError, match="mhlo.add is not a StableHLO, CHLO, Shardy or func operation"):
        check_portable(parse_module(text))


def test_every_rule_accepts_what_jax_emits():
    """Each LAPACK target on the list, lowered by jax for f32/f64/c64/c128, passes its rule."""
    from hlopt.runtime.portable import CUSTOM_CALLS

    jax.config.update("jax_enable_x64", True)
    try:
        seen = set()
        for dtype in (np.float32, np.float64, np.complex64, np.complex128):
            for name, (fun, make) in LINALG.items():
                module = hlopt.lower(fun, *make(dtype)).module
                check_portable(module)
                seen |= {t for t in CUSTOM_CALLS if f"@{t}(" in str(module)}
    finally:
        jax.config.update("jax_enable_x64", False)
    lapack = {t for t in CUSTOM_CALLS if t.startswith("lapack_")}
    assert seen == lapack, sorted(lapack - seen)


def _lapack_calls(module) -> list:
    calls = []

    def visit(op):
        if op.name == "stablehlo.custom_call" and "lapack_" in str(op.attributes["call_target_name"]):
            calls.append(op)
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    return calls


def test_every_target_refuses_a_second_or_changed_attribute_dictionary():
    """For each LAPACK call jax emits: its attributes given twice, one more, one fewer or one changed is refused."""
    jax.config.update("jax_enable_x64", True)
    try:
        audited = set()
        for dtype in (np.float32, np.float64, np.complex64, np.complex128):
            for fun, make in LINALG.values():
                module = hlopt.lower(fun, *make(dtype)).module
                with module.context:
                    for op in _lapack_calls(module):
                        target = ir.StringAttr(op.attributes["call_target_name"]).value
                        attrs = op.attributes
                        config = ir.DictAttr(attrs["mhlo.backend_config"])
                        names = {config[i].name: config[i].attr for i in range(len(config))}
                        char = lambda c: ir.IntegerAttr.get(ir.IntegerType.get_unsigned(8), ord(c))  # noqa: E731
                        given = lambda d: {"mhlo.backend_config": ir.DictAttr.get(d)}  # noqa: E731
                        edits = [{"backend_config": config,
                                  "api_version": ir.IntegerAttr.get(ir.IntegerType.get_signless(32), 4)},
                                 given(dict(names, extra=char("L")))]
                        edits += [given({k: v for k, v in names.items() if k != n}) for n in names]
                        edits += [given(dict(names, **{n: char("X")})) for n in names]
                        for edit in edits:
                            saved = {k: attrs[k] for k in edit if k in attrs}
                            for k, v in edit.items():
                                attrs[k] = v
                            with pytest.raises(PortableCheckError, match=re.escape(target)):
                                check_portable(module)
                            for k in edit:
                                if k in saved:
                                    attrs[k] = saved[k]
                                else:
                                    del attrs[k]
                        check_portable(module)  # restored: accepted again
                        audited.add(target)
    finally:
        jax.config.update("jax_enable_x64", False)
    from hlopt.runtime.portable import CUSTOM_CALLS

    assert audited == {t for t in CUSTOM_CALLS if t.startswith("lapack_")}


def test_module_asking_for_replicas_is_refused():
    text = "module attributes {mhlo.num_replicas = 4 : i32} {\n" + hostile_module("") + "\n}"
    with pytest.raises(PortableCheckError, match="asks for 4 replicas; hlopt runs one replica"):
        check_portable(parse_module(text))


def test_parsed_text_is_checked_before_xla_compiles_it():
    """`Lowered.compile` on text applies the checks of a portable load; XLA is never asked to compile it."""
    from hlopt.compiler.stages import Lowered
    from hlopt.runtime.compile import compile_lowered

    a = np.eye(4, dtype=np.float32) * 4
    text = ("func.func @main(%a: tensor<4x4xf32>) -> tensor<NxNxf32> {\n"
            "%0:2 = stablehlo.custom_call @lapack_spotrf_ffi(%a) {mhlo.backend_config = {uplo = 76 : ui8}}"
            " : (tensor<4x4xf32>) -> (tensor<NxNxf32>, tensor<i32>)\nreturn %0#0 : tensor<NxNxf32>\n}")
    with pytest.raises(PortableCheckError, match=re.escape("the kernel writes (tensor<4x4xf32>, tensor<i32>)")):
        Lowered(parse_module(text.replace("N", "2")), hlopt.lower(lambda a: a[:2, :2], a).signature,
                backend=compile_lowered).compile()
    lowered = Lowered(parse_module(text.replace("N", "4")), hlopt.lower(lambda a: a, a).signature,
                      backend=compile_lowered)
    np.testing.assert_allclose(lowered.compile()(a), np.linalg.cholesky(a))  # the control: the same path compiles


def test_traced_programs_keep_jax_targets_off_the_list():
    """jax's own LAPACK calls outside the list (geev) compile when traced, and are refused from text."""
    a = np.array([[2.0, 1.0], [0.5, 3.0]], np.float32)
    compiled = hlopt.lower(lambda m: jnp.linalg.eigvals(m), a).compile()
    np.testing.assert_allclose(np.sort_complex(np.asarray(compiled(a))), np.sort_complex(np.linalg.eigvals(a)),
                               rtol=1e-5)
    with pytest.raises(PortableCheckError, match="geev"):
        check_portable(compiled.module)
    check_portable(compiled.module, traced=True)
