"""passes/partitioning/sharding_codec.py: GSPMD sharding strings against JAX's, and decoding them back."""

from __future__ import annotations

import math

import jax
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from hlopt.passes.mlir import get_context, ir
from hlopt.passes.partitioning import sharding_codec as codec

DEVICES = jax.devices()


def jax_string(mesh: codec.MeshSpec, dims, rank: int) -> str:
    """JAX's HloSharding text of `dims` on a mesh of `mesh`'s shape (the reference).

    Its tile assignment holds positions in the mesh's device order; hlopt maps
    them through the mesh's `device_ids` (see `expected`).
    """
    devices = np.array(DEVICES[: mesh.size], dtype=object).reshape([s for _, s in mesh.axes])
    jmesh = Mesh(devices, tuple(name for name, _ in mesh.axes))
    spec = P(*(None if not d else d[0] if len(d) == 1 else d for d in dims))
    return str(NamedSharding(jmesh, spec)._to_xla_hlo_sharding(rank))


def expected(mesh: codec.MeshSpec, dims, rank: int):
    """The tile assignment hlopt must write: JAX's, each position mapped to its device id."""
    want = jax_string(mesh, dims, rank)
    if want == "{replicated}":
        return want
    tiles, positions = codec.tile_assignment(want)
    return tiles, tuple(mesh.ids[p] for p in positions)


@st.composite
def layouts(draw):
    """A mesh of up to 8 devices (maybe permuted, maybe with size-1 axes) and a sharding of a rank-1..3 tensor."""
    sizes = draw(st.lists(st.sampled_from([1, 2, 4]), min_size=1, max_size=4).filter(lambda s: math.prod(s) <= 8))
    names = [f"a{i}" for i in range(len(sizes))]
    n = math.prod(sizes)
    ids = tuple(draw(st.permutations(range(n)))) if draw(st.booleans()) else tuple(range(n))
    mesh = codec.MeshSpec(tuple(zip(names, sizes)), () if ids == tuple(range(n)) else ids)
    rank = draw(st.integers(1, 3))
    placement = draw(st.lists(st.integers(-1, rank - 1), min_size=len(names), max_size=len(names)))
    order = draw(st.permutations(names))
    dims = tuple(tuple(a for a in order if placement[names.index(a)] == d) for d in range(rank))
    return mesh, dims, rank


@settings(derandomize=True, max_examples=150, deadline=None)
@given(layouts())
def test_encode_is_jaxs_and_decode_inverts_it(layout):
    mesh, dims, rank = layout
    got, want = codec.hlo_sharding(mesh, dims), expected(mesh, dims, rank)
    assert got == want if want == "{replicated}" else codec.tile_assignment(got) == want
    sizes = mesh.axis_sizes
    canonical = tuple(tuple(a for a in d if sizes[a] > 1) for d in dims)  # size-1 axes split nothing
    assert codec.dims_from_hlo_sharding(mesh, rank, got) == canonical
    iota = codec.MeshSpec(mesh.axes)
    assert codec.dims_from_hlo_sharding(iota, rank, jax_string(mesh, dims, rank)) == canonical


@pytest.mark.parametrize("spec", [P("a"), P(None, "b"), P(("c", "a")), P("c", ("b", "a")), P(), P("b", "c"),
                                  P(("a", "b", "c"))])
def test_named_cases(spec):
    plain = codec.MeshSpec((("a", 2), ("b", 2), ("c", 2)))
    dims = tuple(() if e is None else (e,) if isinstance(e, str) else e for e in tuple(spec) + (None,) * (2 - len(spec)))
    want = jax_string(plain, dims, 2)
    assert codec.dims_from_hlo_sharding(plain, 2, want) == dims
    assert codec.hlo_sharding(plain, dims) == want or codec.tile_assignment(codec.hlo_sharding(plain, dims)) == codec.tile_assignment(want)
    if any(dims):  # a mesh with device_ids maps each tile's device through them
        tiles, devices = codec.tile_assignment(want)
        reversed_ids = codec.MeshSpec(plain.axes, (7, 6, 5, 4, 3, 2, 1, 0))
        assert codec.tile_assignment(codec.hlo_sharding(reversed_ids, dims)) == (tiles, tuple(7 - d for d in devices))


MESH = codec.MeshSpec((("x", 2), ("y", 4)))


@pytest.mark.parametrize("text", [
    "{maximal device=0}",
    "{manual}",
    "{devices=[2,4]<=[8]}",  # rank 2 tiles for a rank-1 tensor
    "{devices=[8]0,1,2,3,4,5,6,7,8}",  # a device the mesh does not have
    "{devices=[3,1]<=[3] last_tile_dim_replicate}",  # 3 devices on an 8-device mesh
    "{devices=[8]1,0,3,2,5,4,7,6}",  # no axis order lays the devices out this way
    "{devices=[2,4]<=[2,4]T(1,1) last_tile_dim_replicate}",  # not a permutation
    "{devices=[8]<=[8]} trailing",
])
def test_undecodable_strings_are_none(text):
    assert codec.dims_from_hlo_sharding(MESH, 1, text) is None


def test_decode_splits_axes_across_dims_and_replication():
    # x=2, y=4: dim 0 over y then... only whole axes: [y], [x] and [x, y] and replicated parts
    for dims in [(("y",), ()), ((), ("x",)), (("x", "y"), ()), (("y", "x"), ()), (("y",), ("x",))]:
        assert codec.dims_from_hlo_sharding(MESH, 2, codec.hlo_sharding(MESH, dims)) == dims
    assert codec.dims_from_hlo_sharding(MESH, 3, "{replicated}") == ((), (), ())


def test_decode_of_a_large_mesh_is_direct():
    # 2^10 devices: the search over placements and orders this replaced took (rank+1)^10 * orders steps
    axes = tuple((f"a{i}", 2) for i in range(10))
    mesh = codec.MeshSpec(axes)
    dims = (("a9", "a0"), ("a3",), (), ("a5", "a1", "a7"))
    assert codec.dims_from_hlo_sharding(mesh, 4, codec.hlo_sharding(mesh, dims)) == dims


def test_shardy_text_and_local_shape():
    with get_context():
        attr = ir.Attribute.parse("#sdy.sharding" + codec.sharding_text("mesh", (("x", "y"), ())))
        assert codec.dim_shardings(attr) == ("mesh", (("x", "y"), ()))
        with pytest.raises(ValueError, match="sub-axis"):
            codec.dim_shardings(ir.Attribute.parse('#sdy.sharding<@mesh, [{"y":(1)2}, {}]>'))
    assert codec.local_shape((16, 3), (("x", "y"), ()), MESH) == (2, 3)
    assert codec.local_shape((12, 3), (("x", "y"), ()), MESH) is None
