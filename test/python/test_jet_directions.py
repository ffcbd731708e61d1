"""`jet_directions.lead_sum`: the constants of a product summed over its directions axis leave
the sum, multiplied into one where that is exact."""

from __future__ import annotations

import numpy as np
import pytest

from hlopt.passes.ir import builders
from hlopt.passes.autodiff import jet_directions
from hlopt.passes.mlir import get_context, ir

SOURCE = """
func.func @f(%x: tensor<4x3xf32>, %y: tensor<3xf32>) -> tensor<3xf32> {
  return %y : tensor<3xf32>
}
"""


def _summed(build):
    """The ops that the sum over the directions of `build(x, y)` (x: 4 directions x 3, y: 3)
    builds, the splat constants they multiply by, in order, and the module."""
    with get_context(), ir.Location.unknown():
        module = ir.Module.parse(SOURCE)
        func = module.body.operations[0]
        block = func.regions[0].blocks[0]
        ret = block.operations[len(block.operations) - 1]
        x, y = block.arguments
        with ir.InsertionPoint(ret):
            v = build(x, y)
            built = len(block.operations) - 1
            total = jet_directions.lead_sum(v)
        ret.operands[0] = total
        assert module.operation.verify()
        ops, constants = [], []
        for op in list(block.operations)[built:]:  # those lead_sum built
            ops.append(op.name)
            if op.name == "stablehlo.multiply":
                value = builders.splat_constant(op.operands[1])
                if value is not None:
                    constants.append(value)
        return ops, constants, str(module)


def _splat(c, like):
    return builders.splat(c, like.type)


def _along(y, like):
    return builders.broadcast(y, builders.shape_of(like), [1])


@pytest.mark.parametrize("factors, want", [
    ((2.0, 0.5), []),            # a square's 2 and the ODE step's 1/2 cancel
    ((2.0, 0.75), [1.5]),        # a power of two times any constant: one exact constant
    ((3.0, 0.25, 0.5), [0.375]),
    ((3.0, 1 / 3), [3.0, 1 / 3]),  # neither a power of two: both kept, in order
    ((-2.0, -0.5), []),
])
def test_constants_of_a_summed_product_are_multiplied_where_exact(factors, want):
    def build(x, y):
        v = builders.mul(x, _along(y, x))
        for c in factors:
            v = builders.mul(v, _splat(c, x))
        return v

    ops, constants, text = _summed(build)
    assert ops.count("stablehlo.reduce") == 1, text
    np.testing.assert_allclose(constants, np.float32(want), rtol=0)
    assert "stablehlo.reduce(%arg0 init:" in text  # the sum of x alone
    assert "stablehlo.broadcast_in_dim" not in ops  # y is not broadcast again


def test_a_constant_summed_to_one_is_that_constant():
    """A product of constants alone whose sum over the 4 directions is 1 (0.5 * 0.5 * 4): a splat 1."""
    ops, constants, text = _summed(lambda x, y: builders.mul(_splat(0.5, x), _splat(0.5, x)))
    assert "stablehlo.reduce" not in ops, text
    assert "dense<1.000000e+00> : tensor<3xf32>" in text, text
