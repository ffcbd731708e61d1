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

Partitioners are found by key among those registered in this process
(`register_partitioner`; each `hlopt.custom_partitioning` registers itself,
so importing the module that defines it is enough). Reading IR never imports
code: only inside `partitioner_imports()` (what `hlopt-opt --allow-import`,
`hlopt compile --allow-import` and `import_partitioners=True` of
`Lowered.apply`/`Lowered.compile` open) is an unregistered `module:qualname`
key imported, and never from the current directory. The sharding strings are
encoded and decoded in `sharding_codec.py`.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import ClassVar, Literal, Protocol

from hlopt.passes.base import Pass, PassError
from hlopt.passes.ir import annotation_names
from hlopt.passes.ir.dtypes import DTYPE_NAMES
from hlopt.passes.mlir import func, ir, passmanager, sdy, stablehlo
from hlopt.passes.registry import import_object
from hlopt.passes.partitioning.sharding_codec import (
    DimShardings,
    MeshSpec,
    dim_shardings,
    dims_from_hlo_sharding,
    hlo_sharding,
    local_shape,
    sharding_text,
)
from hlopt.passes.target import PORTABLE
from hlopt.passes.ir.walk import call_target, custom_calls, walk_ops
from hlopt.passes.rewrite.patterns import Pattern, PatternSet

TARGET = annotation_names.CUSTOM_PARTITIONING

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


_IMPORTS_ALLOWED: contextvars.ContextVar[bool] = contextvars.ContextVar("hlopt_partitioner_imports", default=False)


@contextlib.contextmanager
def partitioner_imports(allowed: bool = True) -> Iterator[None]:
    """Within the block, a key no partitioner of this process is registered under is imported (`allowed=False`
    leaves the setting as it is).

    The explicit opt-in to running code a module names: its `module:qualname`
    is imported from `sys.path` without the current directory, and a
    `__main__` module is never imported.
    """
    token = _IMPORTS_ALLOWED.set(True) if allowed else None
    try:
        yield
    finally:
        if token is not None:
            _IMPORTS_ALLOWED.reset(token)


def resolve_partitioner(key: str) -> Partitioner:
    """The partitioner registered under `key`; inside `partitioner_imports()`, else `qualname` imported from `module`."""
    found = _PARTITIONERS.get(key)
    if found is not None:
        return found
    module_name, _, qualname = key.partition(":")
    if not _IMPORTS_ALLOWED.get():
        raise LookupError(f"'{key}' is not registered in this process: import the module that defines it first, "
                          "or allow importing it (hlopt-opt/hlopt compile --allow-import, "
                          "import_partitioners=True in Python)")
    if not qualname or "<locals>" in qualname or "#" in qualname or "__main__" in module_name.split("."):
        raise LookupError(f"'{key}' is not registered in this process and cannot be imported")
    try:
        with _without_working_directory():
            obj = import_object(key)
    except ImportError as e:
        raise LookupError(f"'{key}' is not registered and importing '{module_name}' failed: {e}") from None
    except AttributeError:
        obj = None
    found = _PARTITIONERS.get(key)  # importing the module may have registered it
    if found is None and hasattr(obj, "partition_ir"):
        found = obj
    if found is None:
        raise LookupError(f"'{key}' names no custom partitioning after importing '{module_name}'")
    return found


@contextlib.contextmanager
def _without_working_directory() -> Iterator[None]:
    """`sys.path` without '' and the current directory (which `python -c`/`-m` put first) while importing."""
    cwd = os.path.realpath(os.getcwd())
    saved = list(sys.path)
    sys.path[:] = [p for p in saved if p and os.path.realpath(p) != cwd]
    try:
        yield
    finally:
        sys.path[:] = saved


def _tensor_type(t: ir.Type) -> ir.RankedTensorType:
    return ir.RankedTensorType(t)


def _dtype_name(t: ir.Type) -> str:
    element = str(_tensor_type(t).element_type)
    return DTYPE_NAMES.get(element, element)


def describe_type(t: ir.Type) -> str:
    """`float32[8, 16]` for `tensor<8x16xf32>`."""
    return f"{_dtype_name(t)}{list(_tensor_type(t).shape)}"


def _import_gspmd(module: ir.Operation, mesh: MeshSpec) -> None:
    """Give a module lowered for GSPMD the Shardy form that propagation reads (on a copy)."""
    first = _module_ops(module)[0]
    with ir.InsertionPoint(first), module.location:
        sdy.MeshOp("mesh", ir.Attribute.parse(mesh.attribute_text()))

    def shardy(text: ir.Attribute, t: ir.Type) -> ir.Attribute | None:
        dims = dims_from_hlo_sharding(mesh, _tensor_type(t).rank, ir.StringAttr(text).value)
        return None if dims is None else ir.Attribute.parse("#sdy.sharding" + sharding_text("mesh", dims))

    for o in walk_ops(module, "func.func"):
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

    def constraint(o: ir.Operation) -> list[ir.Value] | None:
        sharding = o.attributes["mhlo.sharding"] if call_target(o) == "Sharding" and "mhlo.sharding" in o.attributes \
            else None
        found = None if sharding is None else shardy(sharding, o.results[0].type)
        return None if found is None else [sdy.ShardingConstraintOp(o.operands[0], found).result]

    PatternSet(Pattern("stablehlo.custom_call", constraint), erase_feeders=False).apply(module)


def gspmd_form(module: ir.Operation) -> bool:
    """True for a module lowered for GSPMD: `mhlo.sharding` attributes and no `sdy.mesh`."""
    ops = walk_ops(module)
    return not any(o.name == "sdy.mesh" for o in ops) and any(
        "mhlo.sharding" in o.attributes or any(
            "mhlo.sharding" in ir.DictAttr(d)
            for name in ("arg_attrs", "res_attrs") if o.name == "func.func" and name in o.attributes
            for d in ir.ArrayAttr(o.attributes[name]))
        for o in ops)


# backend_config fields: the ones hlopt.custom_partitioning always writes, and `mesh`,
# written when the program is lowered for a mesh (without it the body is simply called).
_FIELDS = ("key", "static_args", "in_tree", "out_tree")
_FORM = ("backend_config = {key, static_args, in_tree, out_tree[, mesh]} and called_computations = [@body], "
         "as hlopt.custom_partitioning writes them")


@dataclasses.dataclass(frozen=True)
class _Annotation:
    """One `hlopt.custom_partitioning` op and its checked configuration."""

    op: ir.Operation
    key: str
    static_args: str
    in_tree: str
    out_tree: str
    mesh: MeshSpec | None
    body: str


def _annotation(op: ir.Operation, symbols: ir.SymbolTable) -> _Annotation:
    """`op`'s configuration; a PassError at `op` says what is malformed."""

    def bad(what: str) -> PassError:
        return PassError(f"malformed @{TARGET} annotation: {what}; expected {_FORM}", op.location)

    try:
        config = {n.name: n.attr for n in ir.DictAttr(op.attributes["backend_config"])}
    except (KeyError, ValueError):
        found = op.attributes["backend_config"] if "backend_config" in op.attributes else "none"
        raise bad(f"backend_config is {found}, not a dictionary") from None
    unknown = sorted(set(config) - {*_FIELDS, "mesh"})
    missing = [name for name in _FIELDS if name not in config]
    if unknown or missing:
        raise bad("; ".join([f"no '{name}'" for name in missing] + [f"unknown field '{name}'" for name in unknown]))
    strings = {}
    for name in _FIELDS:
        if not isinstance(config[name], ir.StringAttr):
            raise bad(f"'{name}' is {config[name]}, not a string")
        strings[name] = config[name].value
    if not strings["key"]:
        raise bad("'key' is empty")
    mesh = None
    if "mesh" in config:
        try:
            mesh = MeshSpec.from_attribute(config["mesh"])
        except ValueError:
            raise bad(f"'mesh' is {config['mesh']}, not a #sdy.mesh") from None
    body = _body(op, symbols, bad)
    if mesh is not None:
        for what, values in (("operand", op.operands), ("result", op.results)):
            for i, v in enumerate(values):
                if not (isinstance(v.type, ir.RankedTensorType) and v.type.has_static_shape
                        and str(v.type.element_type) in DTYPE_NAMES):
                    raise PassError(f"custom_partitioning '{strings['key']}': {what} {i} has type {v.type}; "
                                    "a partitioner is shown statically shaped tensors of the element types "
                                    f"{', '.join(DTYPE_NAMES)}", op.location)
    return _Annotation(op, mesh=mesh, body=body, **strings)


def _body(op: ir.Operation, symbols: ir.SymbolTable, bad: Callable[[str], PassError]) -> str:
    """The name of the function `op`'s `called_computations` names; it must take and return op's types."""
    refs = list(ir.ArrayAttr(op.attributes["called_computations"])) if "called_computations" in op.attributes else []
    if len(refs) != 1 or not isinstance(refs[0], ir.FlatSymbolRefAttr):
        raise bad(f"called_computations is {op.attributes['called_computations'] if refs else 'empty'}, "
                  "not one function")
    name = refs[0].value
    if name not in symbols or symbols[name].operation.name != "func.func":
        raise bad(f"called_computations names @{name}, which is not a function of this module")
    ftype = ir.FunctionType(ir.TypeAttr(symbols[name].attributes["function_type"]).value)
    want = ir.FunctionType.get([v.type for v in op.operands], [r.type for r in op.results])
    if str(ftype) != str(want):
        raise bad(f"@{name} has type {ftype} but the annotation is {want}")
    return name


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
    for i, op in enumerate(custom_calls(copy.operation, TARGET)):
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
    for op in custom_calls(copy.operation, TARGET):
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
    platforms: ClassVar[tuple[str, ...]] = PORTABLE
    target: Literal["shardy", "gspmd"] = "shardy"

    def apply(self, module: ir.Operation) -> None:
        symbols = ir.SymbolTable(module)
        annotations = [_annotation(op, symbols) for op in custom_calls(module, TARGET)]
        meshes = [a.mesh for a in annotations if a.mesh is not None]
        gspmd_mesh = None
        if meshes and gspmd_form(module):
            if self.target == "shardy":
                raise PassError("the module holds GSPMD shardings (it was lowered with jax_use_shardy_partitioner "
                                "off): use lower-custom-partitioning{target=gspmd}", annotations[0].op.location)
            gspmd_mesh = meshes[0]
        if annotations:
            shardings = propagated_shardings(module, gspmd_mesh) if meshes else {}
            splicer = _Splicer(module, self.target)

            def lower(op: ir.Operation) -> list[ir.Value] | None:
                for index, annotation in enumerate(annotations):
                    if annotation.op == op:
                        return splicer.lower(annotation, shardings.get(index))
                return None

            PatternSet(Pattern("stablehlo.custom_call", lower), erase_feeders=False).apply(module)
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

    def lower(self, annotation: _Annotation, found: Found | None) -> list[ir.Value]:
        """The values replacing the annotation's results, built before it: its body called, on one device,
        else the per-device body its partitioner gives between the shardings it gives."""
        op, body, key, mesh = annotation.op, annotation.body, annotation.key, annotation.mesh
        self.bodies.add(body)
        if mesh is None:  # one device: nothing to partition
            with ir.InsertionPoint(op), op.location:
                call = func.CallOp([r.type for r in op.results], ir.FlatSymbolRefAttr.get(body), list(op.operands))
            return list(call.results)
        operand_attrs, result_attrs = found
        request = PartitionRequest(
            key=key,
            static_args=annotation.static_args,
            in_tree=annotation.in_tree,
            out_tree=annotation.out_tree,
            mesh=mesh,
            operands=tuple(_spec(v.type, a, op) for v, a in zip(op.operands, operand_attrs)),
            results=tuple(_spec(r.type, a, op) for r, a in zip(op.results, result_attrs)),
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
        main = self._import_body(plan.body, annotation, where, local_in, local_out)
        if self.target == "shardy":
            values = self._manual_computation(op, plan, main, local_in)
        else:
            values = self._gspmd(op, plan, main)
        main.operation.erase()
        return values

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

    def _import_body(self, text: str, annotation: _Annotation, where: str, local_in: list[ir.Type],
                     local_out: list[ir.Type]) -> func.FuncOp:
        """Parse the body module, rename and move its functions here; return its `@main`."""
        op = annotation.op
        try:
            body = ir.Module.parse(text, self.module.context)
        except ir.MLIRError as e:
            raise PassError(f"{where}: the per-device body from partition does not parse: "
                            f"{str(e).strip().splitlines()[0]}", op.location) from None
        table = ir.SymbolTable(body.operation)
        if "main" not in table:
            raise PassError(f"{where}: the per-device body from partition has no @main", op.location)
        main = table["main"]
        got_in, got_out = list(main.type.inputs), list(main.type.results)
        if [str(t) for t in got_in] != [str(t) for t in local_in] or [str(t) for t in got_out] != [str(t) for t in local_out]:
            raise PassError(
                f"{where}: lower_fn takes ({', '.join(map(describe_type, got_in))}) and returns "
                f"({', '.join(map(describe_type, got_out))}) but the shardings from partition need "
                f"({', '.join(map(describe_type, local_in))}) -> ({', '.join(map(describe_type, local_out))})",
                op.location)
        prefix = f"{annotation.body}_part{self.count}"
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
        for o in walk_ops(op):
            if "channel_handle" in o.attributes:
                old = stablehlo.ChannelHandle(o.attributes["channel_handle"])
                o.attributes["channel_handle"] = stablehlo.ChannelHandle.get(self.next_channel, old.channel_type)
                self.next_channel += 1

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
                            local_in: list[ir.Type]) -> list[ir.Value]:
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
        return list(manual.results)

    def _gspmd(self, op: ir.Operation, plan: PartitionPlan, main: func.FuncOp) -> list[ir.Value]:
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
        return outs

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
    for o in walk_ops(op):
        if o.name == "func.call":
            used.add(ir.FlatSymbolRefAttr(o.attributes["callee"]).value)
        if "called_computations" in o.attributes:
            used.update(ir.FlatSymbolRefAttr(a).value for a in ir.ArrayAttr(o.attributes["called_computations"]))
    return used


def _module_ops(module: ir.Operation) -> list[ir.Operation]:
    return [o.operation for o in module.regions[0].blocks[0].operations]


def _spec(t: ir.Type, attr: ir.Attribute | None, op: ir.Operation) -> TensorSpec:
    shape = tuple(_tensor_type(t).shape)
    return TensorSpec(shape, _dtype_name(t), None if attr is None else _dims(attr, op.location)[1])


def _dims(attr: ir.Attribute, location: ir.Location) -> tuple[str, DimShardings]:
    """`dim_shardings(attr)`, its refusal a PassError at `location`."""
    try:
        return dim_shardings(attr)
    except ValueError as e:
        raise PassError(f"lower-custom-partitioning: {e}", location) from None


def _sharding_call(target: str, value: ir.Value, result: ir.Type, sharding: str) -> ir.Value:
    op = stablehlo.CustomCallOp([result], [value], target, backend_config=ir.StringAttr.get(""))
    op.attributes["mhlo.sharding"] = ir.StringAttr.get(sharding)
    return op.result


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
    return [stablehlo.ChannelHandle(o.attributes["channel_handle"]).handle
            for o in walk_ops(module) if "channel_handle" in o.attributes]


def to_gspmd(module: ir.Operation) -> None:
    """Rewrite Shardy's sharding attributes and constraints into GSPMD's `mhlo.sharding` form."""
    meshes = {
        ir.StringAttr(o.attributes["sym_name"]).value: MeshSpec.from_attribute(o.attributes["mesh"])
        for o in _module_ops(module) if o.name == "sdy.mesh"
    }

    def hlo(attr: ir.Attribute, location: ir.Location) -> ir.StringAttr:
        mesh_name, dims = _dims(attr, location)
        if mesh_name not in meshes:
            raise PassError(f"sharding {attr} names a mesh that the module does not define", location)
        return ir.StringAttr.get(hlo_sharding(meshes[mesh_name], dims))

    for o in walk_ops(module):
        if o.name == "func.func":
            for attr_name in ("arg_attrs", "res_attrs"):
                if attr_name in o.attributes:
                    o.attributes[attr_name] = ir.ArrayAttr.get(
                        [_convert_dict(ir.DictAttr(d), lambda a, o=o: hlo(a, o.location))
                         for d in ir.ArrayAttr(o.attributes[attr_name])])
        elif o.name == "sdy.sharding_constraint":
            continue  # replaced below
        elif o.name.startswith("sdy.") and o.name != "sdy.mesh":
            raise PassError(f"'{o.name}' has no GSPMD form; lower-custom-partitioning{{target=gspmd}} "
                            "handles argument/result shardings and sharding constraints only", o.location)
        else:
            if "sdy.sharding" in o.attributes:
                per_value = [hlo(s, o.location)
                             for s in sdy.TensorShardingPerValueAttr(o.attributes["sdy.sharding"]).shardings]
                o.attributes["mhlo.sharding"] = per_value[0] if len(per_value) == 1 else ir.StringAttr.get(
                    "{" + ", ".join(s.value for s in per_value) + "}")
            for name in [a for a in o.attributes if a.startswith("sdy.")]:
                del o.attributes[name]
    PatternSet(Pattern("sdy.sharding_constraint", lambda o: [
        _sharding_call("Sharding", o.operands[0], o.results[0].type, hlo(o.attributes["sharding"], o.location).value)]),
        erase_feeders=False).apply(module)
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
