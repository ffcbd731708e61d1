"""`lower-custom-partitioning`: resolve `hlopt.custom_partitioning` ahead of time.

The annotation names its partitioner by a stable key. The pass finds the
shardings of the annotation's operands and results (Shardy propagation on a
copy of the module), hands them to the partitioner as plain data
(`PartitionRequest`), and gets back the per-device body as StableHLO text with
the shardings it wants (`PartitionPlan`). The body is spliced in as an
`sdy.manual_computation` (target=shardy) or between `@SPMDFullToShardShape`
and `@SPMDShardToFullShape` custom calls (target=gspmd, which also rewrites
every `sdy.sharding` of the module into `mhlo.sharding`). Nothing in the
output refers to a Python object.

Partitioners are found by key: first among those registered in this process
(`register_partitioner`), else by importing `module` and looking up
`qualname` of a `module:qualname` key.
"""

from __future__ import annotations

import dataclasses
import importlib
import itertools
import math
import re
from collections.abc import Callable, Sequence
from typing import ClassVar, Literal, Protocol

from hlopt.passes.base import Pass, PassError
from hlopt.passes.dtypes import DTYPE_NAMES
from hlopt.passes.mlir import func, ir, passmanager, sdy, stablehlo

TARGET = "hlopt.custom_partitioning"

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
        """The mesh of a `#sdy.mesh` attribute."""
        mesh = sdy.MeshAttr(attr)
        axes = tuple((a.name, a.size) for a in map(sdy.MeshAxisAttr, mesh.axes))
        ids = tuple(mesh.device_ids)
        return cls(axes, () if ids == tuple(range(math.prod(s for _, s in axes))) else ids)

    def attribute_text(self) -> str:
        """`#sdy.mesh<["x"=2, "y"=4]>` (with `device_ids` when they are not iota)."""
        axes = ", ".join(f'"{name}"={size}' for name, size in self.axes)
        ids = f", device_ids=[{', '.join(map(str, self.device_ids))}]" if self.device_ids else ""
        return f"#sdy.mesh<[{axes}]{ids}>"


@dataclasses.dataclass(frozen=True)
class TensorSpec:
    """Shape, dtype (a numpy name) and sharding (None: nothing propagated) of one value."""

    shape: tuple[int, ...]
    dtype: str
    sharding: DimShardings | None

    def describe(self) -> str:
        """`float32[8, 16] sharded [{"x"}, {}]` for error messages."""
        dims = ", ".join("{" + ", ".join(f'"{a}"' for a in d) + "}" for d in self.sharding or ())
        where = f" sharded [{dims}]" if self.sharding is not None else ""
        return f"{self.dtype}{list(self.shape)}{where}"


@dataclasses.dataclass(frozen=True)
class PartitionRequest:
    """What the pass knows about one annotation, as plain data."""

    key: str
    static_args: str
    in_tree: str
    out_tree: str
    mesh: MeshSpec
    operands: tuple[TensorSpec, ...]
    results: tuple[TensorSpec, ...]


@dataclasses.dataclass(frozen=True)
class PartitionPlan:
    """A partitioner's answer: a module whose public `@main` is the per-device body."""

    mesh: MeshSpec
    body: str
    operand_shardings: tuple[DimShardings, ...]
    result_shardings: tuple[DimShardings, ...]


class Partitioner(Protocol):
    """What a key resolves to: turns a `PartitionRequest` into a `PartitionPlan`."""

    def partition_ir(self, request: PartitionRequest) -> PartitionPlan: ...


_PARTITIONERS: dict[str, Partitioner] = {}


def register_partitioner(key: str, partitioner: Partitioner) -> None:
    """Make `partitioner` the one the pass uses for annotations with `key`."""
    _PARTITIONERS[key] = partitioner


def registered_partitioner(key: str) -> Partitioner | None:
    """The partitioner registered under `key` in this process, if any."""
    return _PARTITIONERS.get(key)


def resolve_partitioner(key: str) -> Partitioner:
    """The partitioner registered under `key`, else `qualname` imported from `module`."""
    found = _PARTITIONERS.get(key)
    if found is not None:
        return found
    module_name, _, qualname = key.partition(":")
    if not qualname or "<locals>" in qualname or "#" in qualname:
        raise LookupError(f"'{key}' is not registered in this process and cannot be imported")
    try:
        obj = importlib.import_module(module_name)
    except ImportError as e:
        raise LookupError(f"'{key}' is not registered and importing '{module_name}' failed: {e}") from None
    for part in qualname.split("."):
        obj = getattr(obj, part, None)
    found = _PARTITIONERS.get(key)
    if found is None and hasattr(obj, "partition_ir"):
        found = obj
    if found is None:
        raise LookupError(f"'{key}' names no custom partitioning after importing '{module_name}'")
    return found


def _tensor_type(t: ir.Type) -> ir.RankedTensorType:
    return ir.RankedTensorType(t)


def _dtype_name(t: ir.Type) -> str:
    element = str(_tensor_type(t).element_type)
    return DTYPE_NAMES.get(element, element)


def describe_type(t: ir.Type) -> str:
    """`float32[8, 16]` for `tensor<8x16xf32>`."""
    return f"{_dtype_name(t)}{list(_tensor_type(t).shape)}"


def dim_shardings(attr: ir.Attribute) -> tuple[str, DimShardings]:
    """(mesh symbol, per-dimension axes) of a `#sdy.sharding`."""
    sharding = sdy.TensorShardingAttr(attr)
    dims = []
    for dim in map(sdy.DimensionShardingAttr, sharding.dimension_shardings):
        axes = []
        for axis in map(sdy.AxisRefAttr, dim.axes):
            if axis.sub_axis_info is not None:
                raise PassError(f"sub-axis shardings ({attr}) are not supported by lower-custom-partitioning")
            axes.append(axis.name)
        dims.append(tuple(axes))
    return str(sharding.mesh_or_ref).lstrip("@"), tuple(dims)


def sharding_text(mesh_name: str, dims: DimShardings) -> str:
    """`<@mesh, [{"x"}, {}]>`: the body of a `#sdy.sharding` for `dims`."""
    return "<@" + mesh_name + ", [" + ", ".join("{" + ", ".join(f'"{a}"' for a in d) + "}" for d in dims) + "]>"


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


def hlo_sharding(mesh: MeshSpec, dims: DimShardings) -> str:
    """The `mhlo.sharding` string of `dims` on `mesh` (the tile assignment GSPMD reads)."""
    sizes = mesh.axis_sizes
    names = [name for name, _ in mesh.axes]
    used = [a for d in dims for a in d]
    if not used:
        return "{replicated}"
    order = used + [a for a in names if a not in used]
    tiles = [math.prod(sizes[a] for a in d) for d in dims]
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
        devices = _transpose(list(range(math.prod(dims))), dims, perm)
    else:
        devices = [int(v) for v in match[4].split(",")]
    return tuple(shape if match[5] else shape + [1]), tuple(devices)


def dims_from_hlo_sharding(mesh: MeshSpec, rank: int, text: str) -> DimShardings | None:
    """The per-dimension mesh axes whose tile assignment on `mesh` is the `mhlo.sharding` `text`."""
    if text.strip() == "{replicated}":
        return ((),) * rank
    wanted = tile_assignment(text)
    if wanted is None:
        return None
    names = [name for name, _ in mesh.axes]
    for placement in itertools.product(range(rank + 1), repeat=len(names)):
        groups = [[a for a, d in zip(names, placement) if d == dim] for dim in range(rank)]
        for orders in itertools.product(*(itertools.permutations(g) for g in groups)):
            if tile_assignment(hlo_sharding(mesh, tuple(orders))) == wanted:
                return tuple(orders)
    return None


def _import_gspmd(module: ir.Operation, mesh: MeshSpec) -> None:
    """Give a module lowered for GSPMD the Shardy form that propagation reads (on a copy)."""
    first = _module_ops(module)[0]
    with ir.InsertionPoint(first), module.location:
        sdy.MeshOp("mesh", ir.Attribute.parse(mesh.attribute_text()))

    def shardy(text: ir.Attribute, t: ir.Type) -> ir.Attribute | None:
        dims = dims_from_hlo_sharding(mesh, _tensor_type(t).rank, ir.StringAttr(text).value)
        return None if dims is None else ir.Attribute.parse("#sdy.sharding" + sharding_text("mesh", dims))

    shardings: list[ir.Operation] = []

    def visit(o: ir.Operation) -> ir.WalkResult:
        if o.name == "func.func":
            function_type = ir.FunctionType(ir.TypeAttr(o.attributes["function_type"]).value)
            for attr_name, types in (("arg_attrs", function_type.inputs), ("res_attrs", function_type.results)):
                if attr_name in o.attributes:
                    dicts = []
                    for d, t in zip(ir.ArrayAttr(o.attributes[attr_name]), types):
                        entries = {n.name: n.attr for n in ir.DictAttr(d)}
                        found = shardy(entries["mhlo.sharding"], t) if "mhlo.sharding" in entries else None
                        if found is not None:
                            entries["sdy.sharding"] = found
                        dicts.append(ir.DictAttr.get(entries))
                    o.attributes[attr_name] = ir.ArrayAttr.get(dicts)
        elif (o.name == "stablehlo.custom_call" and "mhlo.sharding" in o.attributes
              and ir.StringAttr(o.attributes["call_target_name"]).value == "Sharding"):
            shardings.append(o)
        return ir.WalkResult.ADVANCE

    module.walk(visit)
    for o in shardings:
        found = shardy(o.attributes["mhlo.sharding"], o.results[0].type)
        if found is not None:
            with ir.InsertionPoint(o), o.location:
                constraint = sdy.ShardingConstraintOp(o.operands[0], found)
            _replace(o, [constraint.result])


def gspmd_form(module: ir.Operation) -> bool:
    """True for a module lowered for GSPMD: `mhlo.sharding` attributes and no `sdy.mesh`."""
    found = {"sdy.mesh": False, "mhlo.sharding": False}

    def visit(o: ir.Operation) -> ir.WalkResult:
        found["sdy.mesh"] |= o.name == "sdy.mesh"
        found["mhlo.sharding"] |= "mhlo.sharding" in o.attributes or any(
            "mhlo.sharding" in ir.DictAttr(d)
            for name in ("arg_attrs", "res_attrs") if o.name == "func.func" and name in o.attributes
            for d in ir.ArrayAttr(o.attributes[name]))
        return ir.WalkResult.ADVANCE

    module.walk(visit)
    return found["mhlo.sharding"] and not found["sdy.mesh"]


def _annotations(module: ir.Operation) -> list[ir.Operation]:
    found: list[ir.Operation] = []

    def visit(op: ir.Operation) -> ir.WalkResult:
        if op.name == "stablehlo.custom_call" and ir.StringAttr(op.attributes["call_target_name"]).value == TARGET:
            found.append(op)
        return ir.WalkResult.ADVANCE

    module.walk(visit)
    return found


def _config(op: ir.Operation) -> dict[str, ir.Attribute]:
    config = ir.DictAttr(op.attributes["backend_config"])
    return {name: config[name] for name in ("key", "static_args", "in_tree", "out_tree", "mesh") if name in config}


def _string(attr: ir.Attribute) -> str:
    return ir.StringAttr(attr).value


def _body_name(op: ir.Operation) -> str:
    return ir.FlatSymbolRefAttr(ir.ArrayAttr(op.attributes["called_computations"])[0]).value


_INDEX = "hlopt.partition_index"

# (operand shardings, result shardings) of one annotation; None where nothing was propagated.
Found = tuple[list[ir.Attribute | None], list[ir.Attribute | None]]


def propagated_shardings(module: ir.Operation, gspmd_mesh: MeshSpec | None = None) -> dict[int, Found]:
    """Operand and result `#sdy.sharding`s of each annotation (by walk index) after Shardy propagation.

    A module in GSPMD form is first given Shardy's form on `gspmd_mesh`.
    """
    copy = module.clone()
    if gspmd_mesh is not None:
        _import_gspmd(copy.operation, gspmd_mesh)
    for i, op in enumerate(_annotations(copy.operation)):
        op.attributes[_INDEX] = ir.IntegerAttr.get(ir.IntegerType.get_signless(64), i)
    table = ir.SymbolTable(copy.operation)
    if "main" not in table:  # Shardy's pipeline aborts the process without a @main
        public = [o for o in _module_ops(copy.operation) if o.name == "func.func"
                  and ir.StringAttr(ir.SymbolTable.get_visibility(o)).value == "public"]
        if public:
            old = ir.SymbolTable.get_symbol_name(public[0]).value
            table.replace_all_symbol_uses(old, "main", copy.operation)
            ir.SymbolTable.set_symbol_name(public[0], "main")
    pm = passmanager.PassManager.parse("builtin.module(inline,sdy-propagation-pipeline)")
    pm.run(copy.operation)
    found: dict[int, Found] = {}
    for op in _annotations(copy.operation):
        index = ir.IntegerAttr(op.attributes[_INDEX]).value
        shardings = ([_value_sharding(v) for v in op.operands], _op_shardings(op, len(op.results)))
        if index in found and _texts(found[index]) != _texts(shardings):
            raise PassError("custom_partitioning is reached with two different operand shardings "
                            "(its function is called twice); give each call its own function", op.location)
        found[index] = shardings
    copy.operation.erase()
    return found


def _texts(shardings: Found) -> list[list[str]]:
    return [[str(s) for s in side] for side in shardings]


def _op_shardings(op: ir.Operation, count: int) -> list[ir.Attribute | None]:
    if "sdy.sharding" not in op.attributes:
        return [None] * count
    return list(sdy.TensorShardingPerValueAttr(op.attributes["sdy.sharding"]).shardings)


def _value_sharding(value: ir.Value) -> ir.Attribute | None:
    owner = value.owner
    if isinstance(owner, ir.Block):
        parent = owner.owner
        if parent.operation.name != "func.func" or "arg_attrs" not in parent.attributes:
            return None
        attrs = ir.DictAttr(ir.ArrayAttr(parent.attributes["arg_attrs"])[ir.BlockArgument(value).arg_number])
        return attrs["sdy.sharding"] if "sdy.sharding" in attrs else None
    op = owner.operation if hasattr(owner, "operation") else owner
    return _op_shardings(op, len(op.results))[ir.OpResult(value).result_number]


@dataclasses.dataclass(frozen=True)
class LowerCustomPartitioning(Pass):
    """Resolve every `hlopt.custom_partitioning` into manual per-device code.

    Before:
        %0 = stablehlo.custom_call @hlopt.custom_partitioning(%x) {called_computations = [@my_fft_body],
               backend_config = {key = "mod:my_fft", mesh = #sdy.mesh<["x"=8]>, ...}} : ...
    After (target=shardy):
        %0 = sdy.manual_computation(%x) in_shardings=[<@mesh, [{"x"}, {}]>]
               out_shardings=[<@mesh, [{"x"}, {}]>] manual_axes={"x"} (%arg1: tensor<8x64xcomplex<f32>>) {
          %1 = stablehlo.fft %arg1, type = FFT, length = [64] : ...
          sdy.return %1 : ...
        } : ...
    After (target=gspmd): `@Sharding` / `@SPMDFullToShardShape` / body /
    `@Sharding {manual}` / `@SPMDShardToFullShape` with `mhlo.sharding` strings.
    """

    name: ClassVar[str] = "lower-custom-partitioning"
    target: Literal["shardy", "gspmd"] = "shardy"

    def apply(self, module: ir.Operation) -> None:
        annotations = _annotations(module)
        meshes = [MeshSpec.from_attribute(_config(op)["mesh"]) for op in annotations if "mesh" in _config(op)]
        gspmd_mesh = None
        if meshes and gspmd_form(module):
            if self.target == "shardy":
                raise PassError("the module holds GSPMD shardings (it was lowered with jax_use_shardy_partitioner "
                                "off): use lower-custom-partitioning{target=gspmd}", annotations[0].location)
            gspmd_mesh = meshes[0]
        if annotations:
            shardings = propagated_shardings(module, gspmd_mesh) if meshes else {}
            splicer = _Splicer(module, self.target)
            for index, op in enumerate(annotations):
                with op.location:
                    splicer.lower(op, shardings.get(index))
            splicer.finish()
        if self.target == "gspmd":
            with module.location:
                to_gspmd(module)


class _Splicer:
    """Replaces annotations with their partitioned bodies inside one module."""

    def __init__(self, module: ir.Operation, target: str):
        self.module = module
        self.target = target
        self.symbols = ir.SymbolTable(module)
        self.bodies: set[str] = set()
        self.count = 0
        self.next_channel = 1 + max(_channel_handles(module), default=0)

    def lower(self, op: ir.Operation, found: Found | None) -> None:
        config = _config(op)
        body = _body_name(op)
        self.bodies.add(body)
        if "mesh" not in config:  # one device: nothing to partition
            with ir.InsertionPoint(op), op.location:
                call = func.CallOp([r.type for r in op.results], ir.FlatSymbolRefAttr.get(body), list(op.operands))
            _replace(op, list(call.results))
            return
        key = _string(config["key"])
        mesh = MeshSpec.from_attribute(config["mesh"])
        operand_attrs, result_attrs = found
        request = PartitionRequest(
            key=key,
            static_args=_string(config["static_args"]),
            in_tree=_string(config["in_tree"]),
            out_tree=_string(config["out_tree"]),
            mesh=mesh,
            operands=tuple(_spec(v.type, a) for v, a in zip(op.operands, operand_attrs)),
            results=tuple(_spec(r.type, a) for r, a in zip(op.results, result_attrs)),
        )
        where = f"custom_partitioning '{key}' with operands ({', '.join(s.describe() for s in request.operands)})"
        try:
            partitioner = resolve_partitioner(key)
        except LookupError as e:
            raise PassError(f"cannot resolve custom partitioner: {e}", op.location) from None
        try:
            plan = partitioner.partition_ir(request)
        except Exception as e:  # noqa: BLE001 - the user's partitioner: report it with the op's location
            raise PassError(f"{where}: the partitioner raised {type(e).__name__}: {e}", op.location) from e
        local_in = self._local_types(op.operands, plan.operand_shardings, plan.mesh, where, "operand", op)
        local_out = self._local_types(op.results, plan.result_shardings, plan.mesh, where, "result", op)
        main = self._import_body(plan.body, op, where, local_in, local_out)
        if self.target == "shardy":
            self._manual_computation(op, plan, main, local_in)
        else:
            self._gspmd(op, plan, main)
        main.operation.erase()

    def _local_types(self, values: Sequence[ir.Value], shardings: Sequence[DimShardings], mesh: MeshSpec,
                     where: str, what: str, op: ir.Operation) -> list[ir.Type]:
        if len(shardings) != len(values):
            raise PassError(f"{where}: partition returned {len(shardings)} {what} shardings for "
                            f"{len(values)} {what}s", op.location)
        types = []
        for i, (v, dims) in enumerate(zip(values, shardings)):
            t = _tensor_type(v.type)
            unknown = [a for d in dims for a in d if a not in mesh.axis_sizes]
            if len(dims) != t.rank or unknown:
                raise PassError(f"{where}: {what} {i} sharding {list(dims)} does not fit "
                                f"{describe_type(t)} on mesh {mesh.attribute_text()}", op.location)
            shape = local_shape(t.shape, dims, mesh)
            if shape is None:
                raise PassError(f"{where}: {what} {i} {describe_type(t)} is not divisible by its sharding "
                                f"{list(dims)} on mesh {mesh.attribute_text()}", op.location)
            types.append(ir.RankedTensorType.get(shape, t.element_type))
        return types

    def _import_body(self, text: str, op: ir.Operation, where: str, local_in: list[ir.Type],
                     local_out: list[ir.Type]) -> func.FuncOp:
        """Parse the body module, rename and move its functions here; return its `@main`."""
        body = ir.Module.parse(text, self.module.context)
        table = ir.SymbolTable(body.operation)
        main = table["main"]
        got_in, got_out = list(main.type.inputs), list(main.type.results)
        if [str(t) for t in got_in] != [str(t) for t in local_in] or [str(t) for t in got_out] != [str(t) for t in local_out]:
            raise PassError(
                f"{where}: lower_fn takes ({', '.join(map(describe_type, got_in))}) and returns "
                f"({', '.join(map(describe_type, got_out))}) but the shardings from partition need "
                f"({', '.join(map(describe_type, local_in))}) -> ({', '.join(map(describe_type, local_out))})",
                op.location)
        prefix = f"{_body_name(op)}_part{self.count}"
        self.count += 1
        for inner in list(body.body.operations):
            name = inner.attributes["sym_name"].value if "sym_name" in inner.attributes else None
            if inner.operation.name == "sdy.mesh" or name is None:
                inner.operation.erase()
            elif name != "main":
                new = f"{prefix}_{name}"
                table.replace_all_symbol_uses(name, new, body.operation)
                inner.attributes["sym_name"] = ir.StringAttr.get(new)
        self._renumber_channels(body.operation)
        for inner in list(body.body.operations):
            if inner.attributes["sym_name"].value != "main":
                inner.operation.move_after(_module_ops(self.module)[-1])
        return main

    def _renumber_channels(self, op: ir.Operation) -> None:
        def visit(o: ir.Operation) -> ir.WalkResult:
            if "channel_handle" in o.attributes:
                old = stablehlo.ChannelHandle(o.attributes["channel_handle"])
                o.attributes["channel_handle"] = stablehlo.ChannelHandle.get(self.next_channel, old.channel_type)
                self.next_channel += 1
            return ir.WalkResult.ADVANCE

        op.walk(visit)

    def _mesh_symbol(self, mesh: MeshSpec) -> str:
        existing = []
        for o in _module_ops(self.module):
            if o.name == "sdy.mesh":
                name = ir.StringAttr(o.attributes["sym_name"]).value
                existing.append(name)
                if MeshSpec.from_attribute(o.attributes["mesh"]) == mesh:
                    return name
        name, n = "mesh", 0
        while name in existing:
            n += 1
            name = f"mesh_{n}"
        first = _module_ops(self.module)[0]
        with ir.InsertionPoint(first), self.module.location:
            sdy.MeshOp(name, ir.Attribute.parse(mesh.attribute_text()))
        return name

    def _manual_computation(self, op: ir.Operation, plan: PartitionPlan, main: func.FuncOp,
                            local_in: list[ir.Type]) -> None:
        mesh_name = self._mesh_symbol(plan.mesh)

        def per_value(dims_list: Sequence[DimShardings]) -> ir.Attribute:
            return ir.Attribute.parse(
                "#sdy.sharding_per_value<[" + ", ".join(sharding_text(mesh_name, d) for d in dims_list) + "]>")

        axes = ", ".join(f'"{name}"' for name, _ in plan.mesh.axes)
        with ir.InsertionPoint(op), op.location:
            manual = sdy.ManualComputationOp(
                [r.type for r in op.results], list(op.operands),
                per_value(plan.operand_shardings), per_value(plan.result_shardings),
                ir.Attribute.parse(f"#sdy<manual_axes{{{axes}}}>"))
            block = manual.body.blocks.append(*local_in)
        _inline_into(main, block, list(block.arguments), sdy.ReturnOp)
        _replace(op, list(manual.results))

    def _gspmd(self, op: ir.Operation, plan: PartitionPlan, main: func.FuncOp) -> None:
        entry = main.entry_block
        with ir.InsertionPoint(op), op.location:
            locals_ = []
            for v, dims, arg in zip(op.operands, plan.operand_shardings, entry.arguments):
                full = _sharding_call("Sharding", v, v.type, hlo_sharding(plan.mesh, dims))
                locals_.append(_sharding_call("SPMDFullToShardShape", full, arg.type, "{manual}"))
        returned = _inline_before(main, op, locals_)
        with ir.InsertionPoint(op), op.location:
            outs = []
            for v, r, dims in zip(returned, op.results, plan.result_shardings):
                manual = _sharding_call("Sharding", v, v.type, "{manual}")
                outs.append(_sharding_call("SPMDShardToFullShape", manual, r.type, hlo_sharding(plan.mesh, dims)))
        _replace(op, outs)

    def finish(self) -> None:
        """Erase the annotations' body functions, and private functions only they called."""
        candidates = set(self.bodies)
        pending = list(self.bodies)
        while pending:
            found = _callees(self.symbols[pending.pop()].operation) - candidates
            candidates |= found
            pending.extend(found)
        while True:
            used = _callees(self.module)
            dead = sorted(n for n in candidates - used
                          if ir.StringAttr(ir.SymbolTable.get_visibility(self.symbols[n].operation)).value == "private")
            if not dead:
                return
            for name in dead:
                self.symbols.erase(self.symbols[name])
                candidates.discard(name)


def _callees(op: ir.Operation) -> set[str]:
    """Symbols that `func.call`s and `called_computations` inside `op` refer to."""
    used: set[str] = set()

    def visit(o: ir.Operation) -> ir.WalkResult:
        if o.name == "func.call":
            used.add(ir.FlatSymbolRefAttr(o.attributes["callee"]).value)
        if "called_computations" in o.attributes:
            used.update(ir.FlatSymbolRefAttr(a).value for a in ir.ArrayAttr(o.attributes["called_computations"]))
        return ir.WalkResult.ADVANCE

    op.walk(visit)
    return used


def _module_ops(module: ir.Operation) -> list[ir.Operation]:
    return [o.operation for o in module.regions[0].blocks[0].operations]


def _spec(t: ir.Type, attr: ir.Attribute | None) -> TensorSpec:
    shape = tuple(_tensor_type(t).shape)
    return TensorSpec(shape, _dtype_name(t), None if attr is None else dim_shardings(attr)[1])


def _sharding_call(target: str, value: ir.Value, result: ir.Type, sharding: str) -> ir.Value:
    op = stablehlo.CustomCallOp([result], [value], target, backend_config=ir.StringAttr.get(""))
    op.attributes["mhlo.sharding"] = ir.StringAttr.get(sharding)
    return op.result


def _replace(op: ir.Operation, values: Sequence[ir.Value]) -> None:
    for old, new in zip(op.results, values, strict=True):
        old.replace_all_uses_with(new)
    op.erase()


def _inline_into(main: func.FuncOp, block: ir.Block, args: Sequence[ir.Value], terminator: Callable) -> None:
    """Move the ops of `main` into `block`, its arguments replaced by `args`, ending with `terminator`."""
    entry = main.entry_block
    ret = list(entry.operations)[-1]
    with ir.InsertionPoint(block), ret.location:
        end = terminator(list(ret.operands))
    for old, new in zip(entry.arguments, args):
        old.replace_all_uses_with(new)
    for o in list(entry.operations)[:-1]:
        o.operation.move_before(end.operation)


def _inline_before(main: func.FuncOp, anchor: ir.Operation, args: Sequence[ir.Value]) -> list[ir.Value]:
    """Move the ops of `main` before `anchor`, its arguments replaced by `args`; return what it returned."""
    entry = main.entry_block
    ops = list(entry.operations)
    for old, new in zip(entry.arguments, args):
        old.replace_all_uses_with(new)
    for o in ops[:-1]:
        o.operation.move_before(anchor)
    return list(ops[-1].operands)


def _channel_handles(module: ir.Operation) -> list[int]:
    found: list[int] = []

    def visit(o: ir.Operation) -> ir.WalkResult:
        if "channel_handle" in o.attributes:
            found.append(stablehlo.ChannelHandle(o.attributes["channel_handle"]).handle)
        return ir.WalkResult.ADVANCE

    module.walk(visit)
    return found


def to_gspmd(module: ir.Operation) -> None:
    """Rewrite Shardy's sharding attributes and constraints into GSPMD's `mhlo.sharding` form."""
    meshes = {
        ir.StringAttr(o.attributes["sym_name"]).value: MeshSpec.from_attribute(o.attributes["mesh"])
        for o in _module_ops(module) if o.name == "sdy.mesh"
    }

    def hlo(attr: ir.Attribute) -> ir.StringAttr:
        mesh_name, dims = dim_shardings(attr)
        if mesh_name not in meshes:
            raise PassError(f"sharding {attr} names a mesh that the module does not define")
        return ir.StringAttr.get(hlo_sharding(meshes[mesh_name], dims))

    constraints: list[ir.Operation] = []

    def visit(o: ir.Operation) -> ir.WalkResult:
        if o.name == "func.func":
            for attr_name in ("arg_attrs", "res_attrs"):
                if attr_name in o.attributes:
                    o.attributes[attr_name] = ir.ArrayAttr.get(
                        [_convert_dict(ir.DictAttr(d), hlo) for d in ir.ArrayAttr(o.attributes[attr_name])])
        elif o.name == "sdy.sharding_constraint":
            constraints.append(o)
        elif o.name.startswith("sdy.") and o.name != "sdy.mesh":
            raise PassError(f"'{o.name}' has no GSPMD form; lower-custom-partitioning{{target=gspmd}} "
                            "handles argument/result shardings and sharding constraints only", o.location)
        else:
            if "sdy.sharding" in o.attributes:
                per_value = [hlo(s) for s in sdy.TensorShardingPerValueAttr(o.attributes["sdy.sharding"]).shardings]
                o.attributes["mhlo.sharding"] = per_value[0] if len(per_value) == 1 else ir.StringAttr.get(
                    "{" + ", ".join(s.value for s in per_value) + "}")
            for name in [a for a in o.attributes if a.startswith("sdy.")]:
                del o.attributes[name]
        return ir.WalkResult.ADVANCE

    module.walk(visit)
    for o in constraints:
        with ir.InsertionPoint(o), o.location:
            new = _sharding_call("Sharding", o.operands[0], o.results[0].type, hlo(o.attributes["sharding"]).value)
        _replace(o, [new])
    for o in _module_ops(module):
        if o.name == "sdy.mesh":
            o.erase()


def _convert_dict(attrs: ir.DictAttr, hlo: Callable[[ir.Attribute], ir.StringAttr]) -> ir.DictAttr:
    entries = {}
    for named in attrs:
        if named.name == "sdy.sharding":
            entries["mhlo.sharding"] = hlo(named.attr)
        elif not named.name.startswith("sdy."):
            entries[named.name] = named.attr
    return ir.DictAttr.get(entries)
