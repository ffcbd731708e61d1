"""Shardings as plain data, and their two text forms: Shardy's `#sdy.sharding` and GSPMD's `mhlo.sharding`.

A tensor's sharding is `DimShardings`: for each dimension, the mesh axes it
is split over, major first. On a `MeshSpec` (named axes and the logical
device order) it encodes as `<@mesh, [{"x"}, {}]>` for Shardy and as a tile
assignment for GSPMD, where the devices of the mesh, transposed so that the
used axes come first (in dimension order) and the others last, are laid out
over the tiles and a trailing replication dimension:

    x=2, y=4;  dims [("y",), ()]  ->  {devices=[4,1,2]<=[2,4]T(1,0) last_tile_dim_replicate}

`dims_from_hlo_sharding` decodes a tile assignment back to `DimShardings`.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Sequence

from hlopt.passes.mlir import ir, sdy

# One tensor's sharding: for each dimension, the mesh axes it is split over (major first).
DimShardings = tuple[tuple[str, ...], ...]


@dataclasses.dataclass(frozen=True)
class MeshSpec:
    """A device mesh as plain data: named axes and the logical device order."""

    axes: tuple[tuple[str, int], ...]
    device_ids: tuple[int, ...] = ()  # empty: iota

    @property
    def size(self) -> int:
        """The number of devices."""
        return math.prod(size for _, size in self.axes)

    @property
    def axis_sizes(self) -> dict[str, int]:
        """Axis name -> size."""
        return dict(self.axes)

    @property
    def ids(self) -> tuple[int, ...]:
        """The logical device ids in mesh order."""
        return self.device_ids or tuple(range(self.size))

    @classmethod
    def from_attribute(cls, attr: ir.Attribute) -> "MeshSpec":
        """The mesh of a `#sdy.mesh` attribute (ValueError for any other attribute)."""
        mesh = sdy.MeshAttr(attr)
        axes = tuple((a.name, a.size) for a in map(sdy.MeshAxisAttr, mesh.axes))
        ids = tuple(mesh.device_ids)
        return cls(axes, () if ids == tuple(range(math.prod(s for _, s in axes))) else ids)

    def attribute_text(self) -> str:
        """`#sdy.mesh<["x"=2, "y"=4]>` (with `device_ids` when they are not iota)."""
        axes = ", ".join(f'"{name}"={size}' for name, size in self.axes)
        ids = f", device_ids=[{', '.join(map(str, self.device_ids))}]" if self.device_ids else ""
        return f"#sdy.mesh<[{axes}]{ids}>"


def local_shape(shape: Sequence[int], dims: DimShardings, mesh: MeshSpec) -> tuple[int, ...] | None:
    """The per-device shape, or None when a dimension does not divide evenly."""
    sizes = mesh.axis_sizes
    out = []
    for n, axes in zip(shape, dims, strict=True):
        parts = math.prod(sizes[a] for a in axes)
        if n % parts:
            return None
        out.append(n // parts)
    return tuple(out)


# --- Shardy ----------------------------------------------------------------------


def dim_shardings(attr: ir.Attribute) -> tuple[str, DimShardings]:
    """(mesh symbol, per-dimension axes) of a `#sdy.sharding`; ValueError for sub-axis shardings."""
    sharding = sdy.TensorShardingAttr(attr)
    dims = []
    for dim in map(sdy.DimensionShardingAttr, sharding.dimension_shardings):
        axes = []
        for axis in map(sdy.AxisRefAttr, dim.axes):
            if axis.sub_axis_info is not None:
                raise ValueError(f"sub-axis shardings ({attr}) are not supported")
            axes.append(axis.name)
        dims.append(tuple(axes))
    return str(sharding.mesh_or_ref).lstrip("@"), tuple(dims)


def sharding_text(mesh_name: str, dims: DimShardings) -> str:
    """`<@mesh, [{"x"}, {}]>`: the body of a `#sdy.sharding` for `dims`."""
    return "<@" + mesh_name + ", [" + ", ".join("{" + ", ".join(f'"{a}"' for a in d) + "}" for d in dims) + "]>"


# --- GSPMD -----------------------------------------------------------------------


def hlo_sharding(mesh: MeshSpec, dims: DimShardings) -> str:
    """The `mhlo.sharding` string of `dims` on `mesh` (the tile assignment GSPMD reads)."""
    sizes = mesh.axis_sizes
    names = [name for name, _ in mesh.axes]
    used = [a for d in dims for a in d]
    tiles = [math.prod(sizes[a] for a in d) for d in dims]
    if math.prod(tiles) == 1:  # only size-1 axes, if any: nothing is split
        return "{replicated}"
    order = used + [a for a in names if a not in used]
    replicate = math.prod(sizes[a] for a in names if a not in used)
    shape = tiles + ([replicate] if replicate > 1 else [])
    suffix = " last_tile_dim_replicate" if replicate > 1 else ""
    perm = [names.index(a) for a in order]
    tile_dims = ",".join(map(str, shape))
    if not mesh.device_ids:
        if perm == sorted(perm):
            return f"{{devices=[{tile_dims}]<=[{mesh.size}]{suffix}}}"
        mesh_dims = ",".join(str(s) for _, s in mesh.axes)
        return f"{{devices=[{tile_dims}]<=[{mesh_dims}]T({','.join(map(str, perm))}){suffix}}}"
    devices = _transpose(list(mesh.ids), [s for _, s in mesh.axes], perm)
    return f"{{devices=[{tile_dims}]{','.join(map(str, devices))}{suffix}}}"


def _transpose(flat: list[int], shape: list[int], perm: list[int]) -> list[int]:
    """`flat` (row-major, `shape`) transposed by `perm`, flattened again."""
    strides = [math.prod(shape[i + 1 :]) for i in range(len(shape))]
    new_shape = [shape[p] for p in perm]
    out = []
    for index in range(len(flat)):
        rest, old = index, 0
        for dim in reversed(range(len(new_shape))):
            rest, coord = divmod(rest, new_shape[dim])
            old += coord * strides[perm[dim]]
        out.append(flat[old])
    return out


_TILED = re.compile(r"\{devices=\[([\d,]+)\](?:<=\[([\d,]+)\](?:T\(([\d,]+)\))?|([\d,]+))"
                    r"( last_tile_dim_replicate)?\}")


def tile_assignment(text: str) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """(tile counts with a trailing replication count, devices) of a tiled `mhlo.sharding`, else None."""
    match = _TILED.fullmatch(text.strip())
    if match is None:
        return None
    shape = [int(v) for v in match[1].split(",")]
    if match[2]:
        dims = [int(v) for v in match[2].split(",")]
        perm = [int(v) for v in match[3].split(",")] if match[3] else list(range(len(dims)))
        if sorted(perm) != list(range(len(dims))):
            return None
        devices = _transpose(list(range(math.prod(dims))), dims, perm)
    else:
        devices = [int(v) for v in match[4].split(",")]
    return tuple(shape if match[5] else shape + [1]), tuple(devices)


def dims_from_hlo_sharding(mesh: MeshSpec, rank: int, text: str) -> DimShardings | None:
    """The per-dimension mesh axes whose tile assignment on `mesh` is the `mhlo.sharding` `text`.

    None when `text` is no tile assignment of `mesh`'s devices by whole axes.
    The devices are laid out in the order of `hlo_sharding`'s transposed mesh,
    so an axis's stride in that order is where the device one step along it
    (and at 0 on every other axis) appears; sorting the axes by stride gives the
    order, and the tile counts cut it into dimensions.
    """
    if text.strip() == "{replicated}":
        return ((),) * rank
    wanted = tile_assignment(text)
    if wanted is None or len(wanted[0]) != rank + 1:
        return None
    tiles, devices = wanted
    if sorted(devices) != sorted(mesh.ids) or math.prod(tiles) != mesh.size:
        return None
    position = {device: i for i, device in enumerate(devices)}
    sizes = [size for _, size in mesh.axes]
    strides = [math.prod(sizes[i + 1 :]) for i in range(len(sizes))]
    split = [(name, size) for name, size in mesh.axes if size > 1]  # size-1 axes split nothing
    order = sorted(split, key=lambda axis: -position[mesh.ids[strides[mesh.axes.index(axis)]]])
    dims: list[tuple[str, ...]] = []
    for count in tiles[:rank]:
        axes: list[str] = []
        while count > 1 and order and count % order[0][1] == 0:
            name, size = order.pop(0)
            axes.append(name)
            count //= size
        if count != 1:
            return None
        dims.append(tuple(axes))
    found = tuple(dims)
    return found if tile_assignment(hlo_sharding(mesh, found)) == wanted else None
