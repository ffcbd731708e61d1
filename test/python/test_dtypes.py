"""passes/ir/dtypes.py, the one dtype table, against JAX's own dtype -> MLIR type mapping."""

from __future__ import annotations

import jax
import ml_dtypes
import numpy as np
import pytest
from jax.interpreters import mlir as jax_mlir

from hlopt.passes.ir.dtypes import DTYPE_NAMES, DTYPES, SHORT_NAMES, dtype_name
from hlopt.passes.partitioning.lower_custom_partitioning import describe_type
from hlopt.passes.mlir import get_context, ir
from hlopt.runtime.encoding import dtype_from_name


@pytest.mark.parametrize("name", list(DTYPES))
def test_element_type_is_jaxs(name):
    dtype = dtype_from_name(name)
    assert dtype.name == name
    with jax_mlir.make_ir_context(), ir.Location.unknown():
        want = str(jax_mlir.dtype_to_ir_type(dtype))
    assert DTYPES[name] == want
    with get_context(), ir.Location.unknown():
        t = ir.RankedTensorType.get([2, 3], ir.Type.parse(DTYPES[name]))
        assert describe_type(t) == f"{name}[2, 3]"


def test_tables_agree():
    assert len(DTYPE_NAMES) == len(DTYPES)  # one name per element type
    assert set(SHORT_NAMES.values()) <= set(DTYPES)
    assert {n for n in DTYPES if getattr(ml_dtypes, n, None) is None} <= set(np.sctypeDict)
    assert dtype_name("f32") == dtype_name("float32") == "float32"
    assert dtype_name("s4") == "int4" and dtype_name("q7") is None and dtype_name("float8_e4m3b11fnuz") is None
    assert jax.numpy.dtype(dtype_from_name("bfloat16")) == jax.numpy.bfloat16
