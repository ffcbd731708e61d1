"""Partitioners that the lit tests' annotations name by key (`lit_partitioners:<name>`)."""

import jax
from jax.sharding import NamedSharding, PartitionSpec as P

import hlopt


def _rows(mesh, arg_shapes, result_shape):
    spec = arg_shapes[0].sharding.spec
    rows = NamedSharding(mesh, P(spec[0] if spec else None))
    return mesh, lambda x: x * 2, rows, (rows,)


@hlopt.custom_partitioning
def double(x):
    return x * 2


double.def_partition(_rows, sharding_rule="i j -> i j")


def _matmul(mesh, arg_shapes, result_shape):
    a = arg_shapes[0].sharding.spec
    i, k = (tuple(a) + (None, None))[:2]

    def lower_fn(a, b):
        return jax.lax.psum(a @ b, k) if k else a @ b

    return (mesh, lower_fn, NamedSharding(mesh, P(i)),
            (NamedSharding(mesh, P(i, k)), NamedSharding(mesh, P(k))))


@hlopt.custom_partitioning
def matmul(a, b):
    return a @ b


matmul.def_partition(_matmul, sharding_rule="i k, k j -> i j", reduction_factors=("k",))


def _refuse(mesh, arg_shapes, result_shape):
    raise ValueError("this layout is not supported")


@hlopt.custom_partitioning
def broken(x):
    return x


broken.def_partition(_refuse, sharding_rule="i j -> i j")


def _columns_out(mesh, arg_shapes, result_shape):
    return mesh, lambda x: x, NamedSharding(mesh, P(None, "x")), (NamedSharding(mesh, P("x")),)


@hlopt.custom_partitioning
def uneven(x):
    return x


uneven.def_partition(_columns_out, sharding_rule="i j -> i j")
