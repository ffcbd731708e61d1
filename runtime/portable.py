"""What a module from an unauthenticated file must pass before XLA compiles it (`trust="portable"`).

A file whose MAC does not verify never has its native code handed to PJRT;
with `trust="portable"` its StableHLO is compiled instead, after these
checks on every operation:

- no function that calls itself, directly or through others, or that holds
  more than `MAX_INLINED_OPS` ops once its calls are inlined (the passes
  and XLA expand every call);
- ops from the builtin, func, stablehlo, chlo and sdy dialects only, and no
  host transfers (`infeed`, `outfeed`, `send`, `recv`): they can block forever;
- every tensor has a static shape and fits in this machine's memory (a dynamic
  dimension would be sized only by XLA, after these checks);
- collectives name only the program's devices (`replica_groups`,
  `source_target_pairs` in [0, `mhlo.num_partitions`); one replica);
- custom calls only to targets in `CUSTOM_CALLS`: the partitioner's markers
  (they never run), the LAPACK kernels jax calls on CPU (each declared, with the
  attributes and types checked here, by its entry of the linear-algebra op table,
  passes/optable/linalg.py) and hlopt's own CPU
  kernels (runtime/kernels.py: sparse products and SpGEMM, which also check every shape,
  index and count they read), each with the
  operand and result types jax gives them (a kernel trusts its buffers: a
  result smaller than its operand would be written past its end). The list
  follows `jax.export`'s targets with guaranteed stability, narrowed to those
  whose types can be checked here.

`hlopt compile`, `Lowered.compile` (runtime/compile.py) and
`trust="portable"` loads all apply these checks to the module XLA compiles;
only for a program jax traced in this process do custom calls to targets
outside the list pass (jax's lowering rules made them, e.g. LAPACK's `geev`).

Before any of that, `scan_artifact` reads the artifact in a separate process and
refuses it if that process dies or the module, printed, nests deeper than
hlopt-opt accepts in text (compiler/parse_guard.py): MLIR's bytecode reader,
its printer and writer, and XLA's compiler recurse once per level of nesting
on the C stack (the reader died at fewer than 50,000 nested array attributes,
XLA:CPU at 203 nested `case` regions), so a deep module must not be read
in this process.

The checks say what was refused and where; they do not make a hostile
program's results right, only keep its native code out and XLA's inputs
well formed.
"""

from __future__ import annotations

import dataclasses
import math
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Sequence

from hlopt.compiler.parse_guard import ParseError, check_text
from hlopt.passes.ir.locations import format_location, printable, shorten
from hlopt.passes.mlir import ir
from hlopt.passes.ir.walk import call_graph_problem
from hlopt.passes.optable import linalg
from hlopt.passes.optable.kernel_types import FLOAT_TYPES, I32, Check, Config, Types, shapes_text, tensor, \
    types_text
from hlopt.passes.optable.linalg import Char, LinalgTable
from hlopt.passes.xla_cpu import sparse_kernels
from hlopt.passes.xla_cpu.sparse_kernels import spgemm_count_runs

DIALECTS = frozenset({"builtin", "func", "stablehlo", "chlo", "sdy"})
REFUSED_OPS = {
    "stablehlo.infeed": "reads from the host and can block forever",
    "stablehlo.outfeed": "writes to the host and can block forever",
    "stablehlo.send": "sends to the host or another program and can block forever",
    "stablehlo.recv": "receives from the host or another program and can block forever",
}


_WHERE_CHARS = 160
SCAN_SECONDS = 120
_SCAN_CHILD = "from hlopt.runtime.portable import scan_child; scan_child()"


class PortableCheckError(ValueError):
    """A module from an unauthenticated file that hlopt will not compile; the message says where and why."""


@dataclasses.dataclass(frozen=True)
class Target:
    """An allowlisted custom-call target: the check of its types, the `ui8` character attributes
    its kernel reads, and its `i64` attributes (each at least 0; `Config` gives them as decimal text)."""

    rule: Check
    chars: tuple[Char, ...] = ()
    integers: tuple[str, ...] = ()  # attributes this kernel reads as i64 numbers of at least 0


_INDEX_TYPES = ("i32", "i64")
_SPGEMM_ATTRS = ("rows", "inner", "cols")

def _coo_matrix(t: ir.RankedTensorType, index: str) -> bool:
    shape, elt = tensor(t)
    return elt == index and len(shape) == 2 and shape[1] == 2


def _spgemm_count_rule(operands: Types, outs: Types, config: Config) -> str | None:
    """hlopt_spgemm_count: indices li[n, 2], ri[m, 2] -> counts[spgemm_count_runs(rows)], one integer type."""
    if len(operands) != 2 or len(outs) != 1:
        return f"takes 2 operands and returns 1 result, not {len(operands)} and {len(outs)}"
    index = tensor(operands[0])[1]
    if index not in _INDEX_TYPES or not all(_coo_matrix(t, index) for t in operands):
        return f"operands {types_text(operands)} are not i32 or i64 indices [nse, 2] of one type"
    runs = spgemm_count_runs(int(config["rows"]))
    if tensor(outs[0]) != ([runs], index):
        return f"results {types_text(outs)}; the kernel writes {shapes_text([([runs], index)])}"
    return None


def _spgemm_fill_rule(operands: Types, outs: Types, config: Config) -> str | None:
    """hlopt_spgemm_fill: (ld[n], li[n, 2], rd[m], ri[m, 2], counts[spgemm_count_runs(rows)]) -> (data[nse],
    indices[nse, 2])."""
    if len(operands) != 5 or len(outs) != 2:
        return f"takes 5 operands and returns 2 results, not {len(operands)} and {len(outs)}"
    (ld, de), (_, index) = tensor(operands[0]), tensor(operands[1])
    (rd, re), (counts, ce) = tensor(operands[2]), tensor(operands[4])
    ok = (de in FLOAT_TYPES and re == de and index in _INDEX_TYPES and ce == index
          and _coo_matrix(operands[1], index) and _coo_matrix(operands[3], index)
          and ld == tensor(operands[1])[0][:1] and rd == tensor(operands[3])[0][:1]
          and counts == [spgemm_count_runs(int(config["rows"]))])
    if not ok:
        return (f"operands {types_text(operands)} are not data[n], indices[n, 2], data[m], indices[m, 2] and "
                "counts[runs of rows] of one float or complex type and one of i32, i64")
    nse = tensor(outs[0])[0]
    if len(nse) != 1 or [tensor(t) for t in outs] != [(nse, de), (nse + [2], index)]:
        return f"results {types_text(outs)} are not data[nse] and indices[nse, 2] of the operands' types"
    return None


def _marker_rule(operands: Types, outs: Types, config: Config) -> str | None:
    if len(operands) != 1 or len(outs) != 1 or tensor(operands[0])[1] != tensor(outs[0])[1]:
        return (f"is not one operand and one result of the same element type: {types_text(operands)} -> "
                f"{types_text(outs)}")
    return None


_FLOATS = ("f32", "f64")


def _spmm_rule(operands: Types, outs: Types, config: Config) -> str | None:
    """hlopt_bcoo_spmm (runtime/native/csr.cc): data[nse], indices[nse, 2] i32, x[K] or x[K, N] -> [M] or [M, N]."""
    if len(operands) != 3 or len(outs) != 1:
        return f"takes 3 operands and returns 1 result, not {len(operands)} and {len(outs)}"
    (d, et), (i, ei), (x, ex) = (tensor(t) for t in operands)
    o, eo = tensor(outs[0])
    ok = (et in _FLOATS and et == ex == eo and ei == I32 and len(d) == 1 and i == [d[0], 2]
          and len(x) in (1, 2) and len(o) == len(x) and o[1:] == x[1:])
    return None if ok else (f"{types_text(operands)} -> {types_text(outs)} is not data[nse], indices[nse, 2] (i32), "
                            "x[K] or x[K, N] -> [M] or [M, N], all f32 or all f64")


def _sddmm_rule(operands: Types, outs: Types, config: Config) -> str | None:
    """hlopt_bcoo_sddmm (runtime/native/csr.cc): p[M, K], qt[N, K], indices[nse, 2] i32 -> [nse]."""
    if len(operands) != 3 or len(outs) != 1:
        return f"takes 3 operands and returns 1 result, not {len(operands)} and {len(outs)}"
    (p, et), (q, eq), (i, ei) = (tensor(t) for t in operands)
    o, eo = tensor(outs[0])
    ok = (et in _FLOATS and et == eq == eo and ei == I32 and len(p) == 2 and len(q) == 2 and p[1] == q[1]
          and len(i) == 2 and i[1] == 2 and o == [i[0]])
    return None if ok else (f"{types_text(operands)} -> {types_text(outs)} is not p[M, K], qt[N, K], indices[nse, 2] "
                            "(i32) -> [nse], all f32 or all f64")


def _csr_spmm_rule(operands: Types, outs: Types, config: Config) -> str | None:
    """hlopt_csr_spmm (runtime/native/csr.cc): data[nse], indices[nse] i32, indptr[M + 1] i32, x[K] or
    x[K, N] -> [M] or [M, N]."""
    if len(operands) != 4 or len(outs) != 1:
        return f"takes 4 operands and returns 1 result, not {len(operands)} and {len(outs)}"
    (d, et), (i, ei), (p, ep), (x, ex) = (tensor(t) for t in operands)
    o, eo = tensor(outs[0])
    ok = (et in _FLOATS and et == ex == eo and ei == ep == I32 and len(d) == 1 and i == d and len(x) in (1, 2)
          and len(o) == len(x) and o[1:] == x[1:] and p == [o[0] + 1])
    return None if ok else (f"{types_text(operands)} -> {types_text(outs)} is not data[nse], indices[nse], "
                            "indptr[M + 1] (i32), x[K] or x[K, N] -> [M] or [M, N], all f32 or all f64")


# hlopt's own sparse-product kernels (runtime/kernels.py), emitted by xla-cpu-sparse-kernels: they read no attributes.
HLOPT_TARGETS: dict[str, Target] = {
    sparse_kernels.SPMM: Target(_spmm_rule),
    sparse_kernels.SDDMM: Target(_sddmm_rule),
    sparse_kernels.CSR_SPMM: Target(_csr_spmm_rule),
}


def custom_calls(table: LinalgTable) -> dict[str, Target]:
    """The allowlist with the LAPACK kernels of `table`: custom-call target -> the check of its
    operand and result types and the attributes its kernel reads."""
    return {
        "Sharding": Target(_marker_rule),
        "SPMDFullToShardShape": Target(_marker_rule),
        "SPMDShardToFullShape": Target(_marker_rule),
        **{target: Target(entry.check(element), entry.chars) for target, (entry, element) in table.targets.items()},
        **HLOPT_TARGETS,
        # hlopt's SpGEMM kernels (runtime/native/spgemm.cc), called through jax.ffi.ffi_call (which gives
        # their row-major layouts); they check every index and count they read
        sparse_kernels.SPGEMM_COUNT: Target(_spgemm_count_rule, integers=_SPGEMM_ATTRS),
        sparse_kernels.SPGEMM_FILL: Target(_spgemm_fill_rule, integers=_SPGEMM_ATTRS),
    }


CUSTOM_CALLS = custom_calls(linalg.TABLE)

# Attributes that change what buffers a kernel is handed (layouts, results aliasing operands): hlopt's
# kernels read row-major buffers of their own, so a call of one that carries any is refused.
_BUFFER_ATTRS = ("operand_layouts", "result_layouts", "output_operand_aliases")


def memory_bytes() -> int:
    """This machine's physical memory: no tensor of a portable module may be larger."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return 1 << 40


def scan_artifact(artifact: bytes) -> None:
    """Refuse (PortableCheckError) an artifact this process must not read: read and measured in a child."""
    try:  # -P: the child imports hlopt as this process does, never a folder of the working directory
        proc = subprocess.run([sys.executable, "-P", "-c", _SCAN_CHILD], input=artifact, capture_output=True,
                              timeout=SCAN_SECONDS)
    except subprocess.TimeoutExpired:
        raise PortableCheckError(f"reading it took more than {SCAN_SECONDS} s") from None
    if proc.returncode < 0:
        name = signal.Signals(-proc.returncode).name if -proc.returncode in signal.valid_signals() else proc.returncode
        raise PortableCheckError(f"reading it killed the process that read it ({name}): MLIR's reader recurses "
                                 "once per level of nesting, so the module nests too deep or is malformed")
    if proc.returncode != 0:
        lines = proc.stderr.decode("utf-8", "backslashreplace").strip().splitlines()
        line = lines[-1] if lines else f"its reader exited with status {proc.returncode}"
        raise PortableCheckError(shorten(printable(line)))


def scan_child() -> None:
    """The child of `scan_artifact`: read the artifact from stdin, print it, measure the text's nesting."""
    from hlopt.passes.mlir import deserialize_portable_artifact

    try:
        module = deserialize_portable_artifact(sys.stdin.buffer.read())
        text = module.operation.get_asm(enable_debug_info=True, large_elements_limit=16)
        check_text(text, "module section")
    except ParseError as e:  # "module section:LINE:COL: error: WHAT"
        where, _, what = e.args[0].splitlines()[0].partition(": error: ")
        sys.exit(f"{what} (at {where.removeprefix('module section:')} of the module printed as text)")
    except Exception as e:  # noqa: BLE001 - MLIR reports a bad artifact with several types
        sys.exit(f"it is not a StableHLO portable artifact: {str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__}")


def check_portable(module: ir.Module, *, traced: bool = False) -> None:
    """Refuse (PortableCheckError) a module hlopt will not compile from text or an unauthenticated file.

    `traced`: the module is a program jax traced in this process, whose custom calls to targets outside
    `CUSTOM_CALLS` its own lowering rules made; they pass (those on the list are still checked).
    """
    limit, devices = memory_bytes(), _device_count(module)
    problems: list[str] = []
    sizes: dict[ir.Type, str | None] = {}  # a type's _size_problem, measured once per check

    def size_problem(t: ir.Type) -> str | None:
        if t not in sizes:
            sizes[t] = _size_problem(t, limit)
        return sizes[t]

    def visit(op: ir.Operation) -> ir.WalkResult:
        problem = op_problem(op, size_problem, devices, traced)
        if problem is None:
            return ir.WalkResult.ADVANCE
        problems.append(f"{_where(op)}: {problem}")
        return ir.WalkResult.INTERRUPT

    module.operation.walk(visit)
    calls = None if problems else call_graph_problem(module)
    if calls is not None:
        problems.append(f"{_where(calls[0])}: {calls[1]}")
    if problems:
        raise PortableCheckError(problems[0])


def op_problem(op: ir.Operation, size_problem: Callable[[ir.Type], str | None], devices: int,
               traced: bool) -> str | None:
    """What is wrong with one op of a checked module, or None: the per-op rules `check_portable`
    applies to every op it walks (sizes, dialects, refused ops, device ids, custom calls)."""
    name = op.name
    for v in list(op.results) + [a for r in op.regions for b in r.blocks for a in b.arguments]:
        problem = size_problem(v.type)
        if problem is not None:
            return f"{name} makes a {problem}"
    if name.split(".", 1)[0] not in DIALECTS:
        return f"{name} is not a StableHLO, CHLO, Shardy or func operation"
    if name in REFUSED_OPS:
        return f"{name} {REFUSED_OPS[name]}"
    if name != "stablehlo.custom_call":
        return _device_id_problem(op, devices)
    try:
        target = ir.StringAttr(op.attributes["call_target_name"]).value
        return None if traced and target not in CUSTOM_CALLS else _check_custom_call(op, target)
    except (ValueError, TypeError, KeyError, IndexError) as e:  # attributes of unexpected types
        return f"custom call with malformed attributes: {e}"


def _device_count(module: ir.Module) -> int:
    """The devices the module runs on, `mhlo.num_partitions` (hlopt runs one replica of a program)."""
    attrs = module.operation.attributes
    counts = {}
    for name in ("mhlo.num_replicas", "mhlo.num_partitions"):
        try:
            counts[name] = ir.IntegerAttr(attrs[name]).value if name in attrs else 1
        except ValueError:
            raise PortableCheckError(f"the module's {name} is {printable(attrs[name])}, not an integer") from None
    if counts["mhlo.num_replicas"] != 1:
        raise PortableCheckError(f"the module asks for {counts['mhlo.num_replicas']} replicas; "
                                 "hlopt runs one replica of a program, partitioned over its devices")
    return max(counts["mhlo.num_partitions"], 1)


# Attributes of collectives that name devices (replica, partition or global ids, all below the device
# count), and whether -1 pads their groups.
_DEVICE_ID_ATTRS = {"replica_groups": True, "source_target_pairs": False}


def _device_id_problem(op: ir.Operation, devices: int) -> str | None:
    """What names a device outside [0, devices) in a collective's attributes (XLA indexes its devices by them)."""
    for attr, padded in _DEVICE_ID_ATTRS.items():
        if attr not in op.attributes:
            continue
        try:
            ids = [int(i) for i in ir.DenseIntElementsAttr(op.attributes[attr])]
        except (ValueError, TypeError):
            return f"{op.name} has a {attr} that is not a dense integer array"
        bad = [i for i in ids if not (0 <= i < devices or (padded and i == -1))]
        if bad:
            return (f"{op.name} names device {bad[0]} in {attr}; the program runs on {devices} device(s), "
                    f"0 to {devices - 1}")
    return None


def _where(op: ir.Operation) -> str:
    """The op's location for a message, escaped and at most _WHERE_CHARS long (a call-site chain can be
    kilobytes; a forger's location names can hold escape sequences and line breaks)."""
    text = printable(format_location(op.location))
    return text if len(text) <= _WHERE_CHARS else text[: _WHERE_CHARS - 3] + "..."


def _check_custom_call(op: ir.Operation, target: str) -> str | None:
    """What is wrong with a custom call to `target`, or None."""
    known = CUSTOM_CALLS.get(target)
    if known is None:
        return (f"custom call to {printable(repr(target))}, which is not on hlopt's list of checked targets "
                "(a kernel's code is not in the file, and its operands cannot be checked)")
    call = f"custom call to {target!r}"
    if "called_computations" in op.attributes and len(ir.ArrayAttr(op.attributes["called_computations"])):
        return f"{call} calls functions; it never does"
    if target in HLOPT_TARGETS:
        given = [a for a in _BUFFER_ATTRS if a in op.attributes and len(ir.ArrayAttr(op.attributes[a]))]
        if given:
            return f"{call} sets {', '.join(given)}; hlopt's kernels take row-major buffers of their own"
    config = _kernel_config(op, target.startswith(("lapack_", "hlopt_")))
    if isinstance(config, str):
        return f"{call} {config}"
    decoded, problem = _decode_config(config, known.chars, known.integers)
    if problem is None and target.startswith("lapack_"):
        problem = _check_batch_dims(op)
    if problem is None:
        operands, results = _ranked(op.operands), _ranked(op.results)
        if operands is None or results is None:
            return f"{call} takes or returns values that are not ranked tensors"
        problem = known.rule(operands, results, decoded)
    return None if problem is None else f"{call} {problem}"


def _ranked(values: Sequence[ir.Value]) -> list[ir.RankedTensorType] | None:
    """The types of `values`, if each is a ranked tensor."""
    out = []
    for v in values:
        try:
            out.append(ir.RankedTensorType(v.type))
        except ValueError:
            return None
    return out


def _kernel_config(op: ir.Operation, typed: bool) -> ir.DictAttr | str | None:
    """The one dictionary of attributes the kernel reads (None if there is none), else what is wrong.

    jax writes them as `mhlo.backend_config` (api_version 1, `backend_config = ""`);
    StableHLO's own form is a dictionary `backend_config` with api_version 4. XLA never
    hands `mhlo.backend_config` to a kernel under api_version 4, so that pair is refused.
    XLA hands the kernel one of them; a call that carries both, or an opaque
    string, could have one checked here and the other read, so it is refused.
    """
    attrs = op.attributes
    api = ir.IntegerAttr(attrs["api_version"]).value if "api_version" in attrs else 1
    forms = []
    if "mhlo.backend_config" in attrs:
        forms.append(("mhlo.backend_config", attrs["mhlo.backend_config"]))
    if "backend_config" in attrs:
        config = attrs["backend_config"]
        if not (isinstance(config, ir.StringAttr) and ir.StringAttr(config).value == ""):
            forms.append(("backend_config", config))
    if len(forms) > 1:
        return ("carries its attributes twice, as mhlo.backend_config and as backend_config: "
                "the kernel reads one of them, so both are refused")
    if not forms:
        if typed and api != 4:
            return f"is not a typed (FFI) call: api_version {api} and no mhlo.backend_config dictionary"
        return None
    name, config = forms[0]
    if not isinstance(config, ir.DictAttr):
        return f"has a {name} that is not a dictionary (an opaque string its kernel would parse)"
    if typed and (api, name) not in ((1, "mhlo.backend_config"), (4, "backend_config")):
        return (f"is not a typed (FFI) call as XLA reads one: api_version {api} with a {name} dictionary "
                "(XLA hands its kernel mhlo.backend_config under api_version 1, backend_config under 4)")
    return ir.DictAttr(config)


def _decode_config(config: ir.DictAttr | None, chars: tuple[Char, ...],
                   integers: tuple[str, ...] = ()) -> tuple[Config, str | None]:
    """The kernel's attributes decoded, or what is wrong: exactly `chars` (each a `ui8` among the
    characters it accepts) and `integers` (each an `i64` of at least 0)."""
    names = tuple(c.name for c in chars)
    got = sorted(config[i].name for i in range(len(config))) if config is not None else []
    if got != sorted((*names, *integers)):
        want = ", ".join(sorted((*names, *integers))) or "none"
        return {}, f"has attributes {{{', '.join(got)}}}; its kernel reads exactly {{{want}}}"
    decoded = {}
    for attribute in chars:
        value = config[attribute.name]
        ok = isinstance(value, ir.IntegerAttr) and str(ir.IntegerAttr(value).type) == "ui8"
        char = chr(ir.IntegerAttr(value).value) if ok and 0 < ir.IntegerAttr(value).value < 128 else None
        if char is None or char not in attribute.accepted:
            return {}, (f"has {attribute.name} = {printable(str(value))}; its kernel accepts "
                        f"{' or '.join(f'{ord(c)} : ui8 ({c})' for c in attribute.accepted)}")
        decoded[attribute.name] = char
    for name in integers:
        value = config[name]
        ok = isinstance(value, ir.IntegerAttr) and str(ir.IntegerAttr(value).type) == "i64"
        if not ok or ir.IntegerAttr(value).value < 0:
            return {}, f"has {name} = {printable(str(value))}; its kernel reads an i64 of at least 0"
        decoded[name] = str(ir.IntegerAttr(value).value)
    return decoded, None


def _check_batch_dims(op: ir.Operation) -> str | None:
    """`num_batch_dims`, which XLA's partitioner reads to split the call, must be its operands' batch rank."""
    if "mhlo.frontend_attributes" not in op.attributes:
        return None
    frontend = ir.DictAttr(op.attributes["mhlo.frontend_attributes"])
    if "num_batch_dims" not in frontend:
        return None
    rank = max(ir.RankedTensorType(v.type).rank for v in op.operands) - 2 if len(op.operands) else 0
    value = frontend["num_batch_dims"]
    if not (isinstance(value, ir.StringAttr) and ir.StringAttr(value).value == str(rank)):
        return f"has num_batch_dims = {printable(str(value))}; its operands have {rank} batch dimensions"
    return None


def _size_problem(t: ir.Type, limit: int) -> str | None:
    """What is wrong with a value of type `t` (a dynamic shape, more than `limit` bytes), or None."""
    if isinstance(t, ir.TupleType):
        return next((p for i in range(t.num_types) if (p := _size_problem(t.get_type(i), limit))), None)
    if isinstance(t, ir.ShapedType) and not isinstance(t, ir.RankedTensorType):
        return f"{t} of unknown rank: hlopt compiles ranked, static shapes only"
    try:
        rt = ir.RankedTensorType(t)
    except ValueError:
        return None
    if not rt.has_static_shape:
        return (f"{t} with a dynamic dimension: hlopt compiles static shapes only (XLA would size it "
                "after these checks, unbounded)")
    size = math.prod(rt.shape) * _element_bits(rt.element_type) // 8
    if size > limit:
        return f"{t} of {size} bytes, more than this machine's {limit} bytes of memory"
    return None


def _element_bits(t: ir.Type) -> int:
    if isinstance(t, ir.ComplexType):
        return 2 * _element_bits(t.element_type)
    return max(8, getattr(t, "width", None) or 64)
