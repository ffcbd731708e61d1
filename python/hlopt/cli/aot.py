"""`hlopt compile`, `hlopt run`, `hlopt inspect`: executable files from the command line."""

from __future__ import annotations

import argparse
import contextlib
import importlib
import inspect
import json
import math
import os
import re
import sys
import threading
import time
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from hlopt.cli.errors import UsageError, add_context, as_flags
from hlopt.cli.opt import ALLOW_IMPORT_HELP
from hlopt.runtime.errors import ExecutableFileError
from hlopt.passes.ir.locations import did_you_mean, printable

PROGRESS_AFTER_S = 2.0
# `hlopt run` sets up as many host CPU devices as a file's program needs, up to this many.
MAX_HOST_DEVICES = 1024


# --- compile ---------------------------------------------------------------------


def add_compile_args(p: argparse.ArgumentParser) -> None:
    """`hlopt compile`'s arguments."""
    p.add_argument("target", help="pkg.module:function, or a .mlir file")
    p.add_argument("--arg", action="append", default=[], metavar="TYPE",
                   help="an argument's type, e.g. f32[128,8] or int32[], or a .npz of its arrays (dicts nested by "
                        "'/' in their names, as flax's flatten_dict(params, sep='/') writes) (one per argument, in order)")
    p.add_argument("--mesh", help="a device mesh, e.g. x=4,y=2")
    p.add_argument("--in-sharding", action="append", default=[], metavar="SPEC",
                   help="one per argument: dims separated by ',', each an axis, axes joined by '+', or _ "
                        "(e.g. x,_ or x+y); '' is replicated")
    p.add_argument("--out-sharding", action="append", default=[], metavar="SPEC", help="one per result")
    p.add_argument("-p", "--pipeline", default="hlopt-default", help="the pipeline to run before compiling (as hlopt-opt -p)")
    p.add_argument("--host-devices", type=int, metavar="N", help="number of host CPU devices (default: the mesh size)")
    p.add_argument("-o", "--output", required=True, help="the executable file to write")
    p.add_argument("-v", "--verbose", action="store_true",
                   help="print each stage (lowering, each pass, PJRT compile, write) with its time on stderr")
    p.add_argument("--allow-import", action="store_true", help=ALLOW_IMPORT_HELP)


def parse_arg(text: str) -> Any:
    """An `--arg`: a type (`parse_arg_type`) or a .npz file (`npz_arg`)."""
    return npz_arg(text) if text.endswith(".npz") else parse_arg_type(text)


def npz_arg(path: str) -> Any:
    """The argument a .npz file describes: dicts nested by its arrays' `/`-separated names (as
    `flax.traverse_util.flatten_dict(params, sep="/")` names them) of each array's shape and dtype."""
    import jax
    import numpy as np

    try:
        with np.load(path, allow_pickle=False) as z:
            specs = {k: jax.ShapeDtypeStruct(z[k].shape, z[k].dtype) for k in z.files}
    except (OSError, ValueError, EOFError) as e:
        raise UsageError(f"cannot read --arg '{path}': {e}") from None
    tree: dict[str, Any] = {}
    for key, spec in specs.items():
        *groups, leaf = key.split("/")
        node = tree
        for group in groups:
            node = node.setdefault(group, {})
            if not isinstance(node, dict):
                raise UsageError(f"--arg '{path}': '{key}' lies inside the array '{group}'")
        if leaf in node:
            raise UsageError(f"--arg '{path}': '{key}' is both an array and a group of arrays")
        node[leaf] = spec
    return tree


def parse_arg_type(text: str) -> Any:
    """`f32[128,8]` -> ShapeDtypeStruct((128, 8), float32)."""
    import jax

    from hlopt.passes.ir.dtypes import DTYPES, SHORT_NAMES, dtype_name
    from hlopt.runtime.encoding import dtype_from_name

    m = re.fullmatch(r"\s*([a-z0-9_]+)\s*\[\s*([0-9,\s]*)\]\s*", text)
    if not m:
        raise UsageError(f"cannot parse argument type '{text}': expected e.g. f32[128,8] or int32[]")
    name = dtype_name(m.group(1))
    if name is None:
        raise UsageError(f"unknown dtype '{m.group(1)}' in '{text}'"
                         + (did_you_mean(m.group(1), [*DTYPES, *SHORT_NAMES])
                            or f" (e.g. {', '.join(list(SHORT_NAMES)[:8])}, ...)"))
    dims = tuple(int(d) for d in m.group(2).replace(" ", "").split(",") if d)
    return jax.ShapeDtypeStruct(dims, dtype_from_name(name))


def mesh_axes(text: str) -> tuple[list[str], list[int]]:
    """`x=4,y=2` -> (['x', 'y'], [4, 2])."""
    names, sizes = [], []
    for part in text.split(","):
        m = re.fullmatch(r"\s*([A-Za-z_][A-Za-z0-9_]*)\s*=\s*([0-9]+)\s*", part)
        if not m or int(m.group(2)) < 1:
            raise UsageError(f"cannot parse mesh '{text}': expected e.g. x=4,y=2")
        names.append(m.group(1))
        sizes.append(int(m.group(2)))
    return names, sizes


def parse_mesh(text: str) -> Any:
    """`x=4,y=2` -> a Mesh over the first 8 devices."""
    import jax
    import numpy as np
    from jax.sharding import Mesh

    names, sizes = mesh_axes(text)
    needed, devices = math.prod(sizes), jax.devices()
    if needed > len(devices):
        raise UsageError(f"mesh '{text}' needs {needed} devices but {len(devices)} are available "
                         f"(on CPU: --host-devices {needed})")
    return Mesh(np.array(devices[:needed], dtype=object).reshape(sizes), tuple(names))


def parse_spec(text: str) -> Any:
    """`x,_` -> P('x', None); `x+y` -> P(('x', 'y'),); '' -> P()."""
    from jax.sharding import PartitionSpec

    dims = []
    for part in [p.strip() for p in text.split(",")] if text.strip() else []:
        if part in ("_", "None", ""):
            dims.append(None)
        elif re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*(\+[A-Za-z_][A-Za-z0-9_]*)*", part):
            axes = tuple(part.split("+"))
            dims.append(axes if len(axes) > 1 else axes[0])
        else:
            raise UsageError(f"cannot parse sharding '{text}': expected axes like x,_ or x+y")
    return PartitionSpec(*dims)


def _functions_of(module_name: str) -> str:
    """` (mymodel defines predict, loss: 'mymodel:predict')`: the functions the module `module_name` defines, or ''
    when it names no importable module or the module defines none."""
    if not re.fullmatch(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*", module_name):
        return ""
    try:
        module = importlib.import_module(module_name)
    except Exception:  # noqa: BLE001 - any failure of the user's module only costs the hint
        return ""
    names = [name for name, obj in vars(module).items()
             if inspect.isfunction(obj) and obj.__module__ == module_name and not name.startswith("_")]
    return f" ({module_name} defines {', '.join(names)}: '{module_name}:{names[0]}')" if names else ""


def import_function(target: str) -> Any:
    """The function named by `pkg.module:qualname` (the current directory is importable)."""
    from hlopt.passes.registry import import_object

    module_name, _, qualname = target.partition(":")
    if module_name.endswith(".py"):
        dotted = module_name[:-3].replace(os.sep, ".").strip(".")
        raise UsageError(f"'{target}' names a file; name its module (did you mean '{dotted}:{qualname}'?)")
    _cwd_importable()
    try:
        obj = import_object(target)
    except ValueError:
        raise UsageError(f"'{target}' is neither a .mlir file nor pkg.module:function: name the function "
                         f"after a colon{_functions_of(target)}") from None
    except ImportError as e:
        raise _not_found(module_name, e) from None
    except AttributeError as e:
        names = [k for k, v in vars(sys.modules.get(module_name, sys)).items() if callable(v) and not k.startswith("_")]
        raise UsageError(f"{e}{did_you_mean(qualname, names)}") from None
    if not callable(obj):
        raise UsageError(f"'{target}' is not callable")
    return obj


def _cwd_importable() -> None:
    """Let the modules of the current directory be imported, as `python -m` does."""
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())


def _not_found(module_name: str, error: ImportError) -> Exception:
    """Where hlopt looked for the module `module_name` (or its package) that `error` did not find, and what
    to do; `error` itself when it was raised inside that module (located there)."""
    missing = error.name
    if missing is None or not (module_name == missing or module_name.startswith(missing + ".")):
        return error
    parent, _, leaf = missing.rpartition(".")
    if parent:
        package = sys.modules.get(parent)
        where = ", ".join(getattr(package, "__path__", [])) or "?"
        return UsageError(f"cannot import '{module_name}': package '{parent}' ({where}) has no module '{leaf}'")
    pythonpath = os.environ.get("PYTHONPATH", "")
    return UsageError(f"cannot import '{module_name}': no {missing}.py or {missing}/ in the working directory "
                      f"({os.getcwd()}) or on PYTHONPATH ({pythonpath or 'not set'}); run hlopt from the folder that "
                      f"holds it, or add that folder to PYTHONPATH (PYTHONPATH=/path/to/folder hlopt ...)")


def lower_mlir(path: str, args: list[Any], mesh: Any) -> Any:
    """A `Lowered` from a .mlir file; its signature comes from `@main`."""
    import jax

    from hlopt.cli.opt import read_source
    from hlopt.compiler.parse_guard import parse_source
    from hlopt.compiler.program import Signature
    from hlopt.compiler.stages import Lowered
    from hlopt.runtime.compile import compile_lowered
    from hlopt.passes.mlir import get_context, ir
    from hlopt.compiler.program import aval_str
    from hlopt.passes.ir.dtypes import DTYPE_NAMES
    from hlopt.runtime.encoding import dtype_from_name
    from hlopt.runtime.files import main_function

    data = read_source(path)
    module = parse_source(data, path)
    main = main_function(module)
    if main is None:
        raise UsageError(f"{path}: no func.func @main to compile")
    def aval(t: ir.Type, what: str) -> Any:
        with get_context():
            try:
                rt = ir.RankedTensorType(t)
            except ValueError:
                rt = None
            if rt is None or not rt.has_static_shape:
                raise UsageError(f"{path}: @main's {what} has type {t}; only static shapes can be compiled")
        if str(rt.element_type) not in DTYPE_NAMES:
            raise UsageError(f"{path}: @main's {what} has unsupported element type {rt.element_type}")
        return jax.core.ShapedArray(tuple(rt.shape), dtype_from_name(DTYPE_NAMES[str(rt.element_type)]))

    ftype = ir.FunctionType(ir.TypeAttr(main.attributes["function_type"]).value)
    in_avals = tuple(aval(t, f"argument {i}") for i, t in enumerate(ftype.inputs))
    out_avals = tuple(aval(t, f"result {i}") for i, t in enumerate(ftype.results))
    if args and [aval_str(a) for a in args] != [aval_str(a) for a in in_avals]:
        raise UsageError(f"--arg gives {', '.join(aval_str(a) for a in args)} but {path}'s @main takes "
                         f"{', '.join(aval_str(a) for a in in_avals)}")
    attrs = module.operation.attributes
    partitions = ir.IntegerAttr(attrs["mhlo.num_partitions"]).value if "mhlo.num_partitions" in attrs else 1
    if partitions != (1 if mesh is None else mesh.size):
        raise UsageError(f"{path} is partitioned for {partitions} device(s): give a --mesh of that size")
    leaves = lambda n: jax.tree_util.tree_structure(tuple(range(n)) if n != 1 else 0)  # noqa: E731
    signature = Signature(
        in_tree=jax.tree_util.tree_structure((tuple(range(len(in_avals))), {})),
        in_avals=in_avals,
        out_tree=leaves(len(out_avals)),
        out_avals=out_avals,
        mesh=mesh,
        use_shardy=b"mhlo.sharding" not in data,
        name=Path(path).stem,
    )
    return Lowered(module, signature, backend=compile_lowered)


def check_arg_count(fun: Any, target: str, given: Sequence[str]) -> None:
    """Refuse as many `--arg` as `fun` cannot be called with, naming the parameters that need one and the form."""
    import inspect

    try:
        signature = inspect.signature(fun)
    except (TypeError, ValueError):
        return  # a builtin without a signature: jax says what is wrong
    try:
        signature.bind(*given)
    except TypeError:
        params = [p.name for p in signature.parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty]
        example = " ".join(f"--arg <{name}>" for name in params)
        raise UsageError(f"{target.partition(':')[2] or target} takes {_count(len(params), 'argument')} "
                         f"({', '.join(params)}), {len(given)} --arg {'was' if len(given) == 1 else 'were'} given: "
                         f"give one --arg per argument, in order, each a type (f32[8,4], int32[]) or a .npz of a pytree's "
                         f"arrays: hlopt compile {target} {example} -o out.hlx") from None


@contextlib.contextmanager
def tracing_context(fun: Any, target: str, given: Sequence[str]) -> Iterator[None]:
    """Where an `--arg` is a pytree's .npz, an error the user's function raises while traced ends with
    which `--arg` each parameter got (`while tracing predict with params = f32[2,3], x = params.npz`):
    a .npz given in another parameter's place fails inside the user's code, or a library's, with a
    message that names neither. (An array type in the wrong place shows in the error's shapes.)"""
    import inspect

    from hlopt.compiler.pipeline import PipelineError

    try:
        yield
    except (UsageError, PipelineError):
        raise
    except Exception as e:
        if not any(text.endswith(".npz") for text in given):
            raise
        try:
            names = [p.name for p in inspect.signature(fun).parameters.values()
                     if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        except (TypeError, ValueError):
            names = []
        names += [f"argument {i}" for i in range(len(names), len(given))]
        pairs = ", ".join(f"{name} = {text}" for name, text in zip(names, given))
        add_context(e, f"while tracing {target.partition(':')[2] or target} with {pairs}: --arg gives the "
                       "arguments in order")
        raise


@contextlib.contextmanager
def progress(what: str) -> Iterator[None]:
    """Say on stderr that `what` is running if it takes longer than PROGRESS_AFTER_S."""
    start = time.perf_counter()
    timer = threading.Timer(PROGRESS_AFTER_S, lambda: print(f"hlopt: {what}...", file=sys.stderr, flush=True))
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()
        elapsed = time.perf_counter() - start
        if elapsed >= PROGRESS_AFTER_S:
            print(f"hlopt: {what}: done in {elapsed:.1f} s", file=sys.stderr, flush=True)


def stage_line(name: str, seconds: float) -> None:
    """`hlopt: NAME: 0.12 s` on stderr, as a stage of `hlopt compile -v` finishes."""
    print(f"hlopt: {name}: {seconds:.2f} s", file=sys.stderr, flush=True)


@contextlib.contextmanager
def stage(name: str, verbose: bool) -> Iterator[None]:
    """With `verbose`, print the stage `name` with its time once it is done."""
    start = time.perf_counter()
    yield
    if verbose:
        stage_line(name, time.perf_counter() - start)


def set_host_devices(count: int) -> None:
    """Ask for `count` host CPU devices; only possible before jax starts its backends."""
    import jax

    try:
        jax.config.update("jax_num_cpu_devices", count)
    except RuntimeError:
        pass  # backends already running: the device count check reports a shortage


def cmd_compile(args: argparse.Namespace) -> int:
    """Lower, compile and save; print what was written."""
    import hlopt
    from hlopt.compiler.pipeline import parse_pipeline
    from hlopt.passes.ir.locations import source_name
    from hlopt.runtime.compile import compile_lowered

    parse_pipeline(args.pipeline)  # refused before the program is imported or traced
    if args.host_devices or args.mesh:
        set_host_devices(args.host_devices or math.prod(mesh_axes(args.mesh)[1]))
    arg_types = [parse_arg(a) for a in args.arg]
    mesh = parse_mesh(args.mesh) if args.mesh else None
    in_shardings = tuple(parse_spec(s) for s in args.in_sharding) or None
    out_shardings = tuple(parse_spec(s) for s in args.out_sharding) or None
    if (in_shardings or out_shardings) and mesh is None:
        raise UsageError("--in-sharding and --out-sharding need a --mesh")
    is_mlir = args.target.endswith(".mlir")
    if is_mlir and (in_shardings or out_shardings):
        raise UsageError("a .mlir file carries its own shardings; drop --in-sharding/--out-sharding")
    # errors in a .mlir file's text are located in the file
    with source_name(args.target) if is_mlir else contextlib.nullcontext():
        if is_mlir:
            with stage(f"reading {args.target}", args.verbose):
                lowered = lower_mlir(args.target, arg_types, mesh)
        else:
            with stage(f"importing {args.target.partition(':')[0]}", args.verbose):
                fun = import_function(args.target)
            check_arg_count(fun, args.target, args.arg)
            if in_shardings is not None and len(in_shardings) != len(arg_types):
                raise UsageError(f"{len(in_shardings)} --in-sharding for {len(arg_types)} --arg")
            if out_shardings is not None and len(out_shardings) == 1:
                out_shardings = out_shardings[0]
            with stage(f"lowering {args.target}", args.verbose), tracing_context(fun, args.target, args.arg):
                lowered = hlopt.lower(fun, *arg_types, mesh=mesh, in_shardings=in_shardings,
                                      out_shardings=out_shardings)
            lowered.backend = compile_lowered  # the file is signed: every custom call must be on the list
        if args.verbose:  # pass by pass, then PJRT (the persistent cache is consulted for PJRT only)
            from hlopt.runtime.compile import program_devices

            after = lowered.apply(args.pipeline, platform=program_devices(lowered.signature)[0].platform,
                                  progress=lambda name, s: stage_line(f"pass {name}", s),
                                  import_partitioners=args.allow_import)
            with stage("PJRT compile", True):
                compiled = after.compile(pipeline="")
        else:
            with progress(f"compiling {lowered.signature.name}"):
                compiled = lowered.compile(args.pipeline, import_partitioners=args.allow_import)
    with stage(f"writing {args.output}", args.verbose):
        compiled.save(args.output)
    print(f"wrote {args.output} ({Path(args.output).stat().st_size} bytes): {compiled.signature.describe()}")
    return 0


# --- run ---------------------------------------------------------------------------


def add_run_args(p: argparse.ArgumentParser) -> None:
    """`hlopt run`'s arguments."""
    p.add_argument("file", help="an executable file written by hlopt compile or Compiled.save")
    p.add_argument("positional", nargs="*", help=argparse.SUPPRESS)  # refused with the --input form
    p.add_argument("--input", action="append", default=[], metavar="FILE",
                   help="a .npy (one argument) or .npz (arrays named as hlopt inspect names the inputs, else in order); "
                        "in argument order")
    p.add_argument("--output", help="write the results to this file, as a .npz (keys are the output paths), "
                                    "replacing it atomically (a link there is replaced, its target untouched)")
    add_trust_arg(p, "signed")
    add_import_arg(p)


IMPORT_HELP = ("import MODULE before loading, so that the pytree classes the file's arguments and results hold "
               "(equinox.nn, flax.nnx, your own module's) are known and can be rebuilt; repeatable")


def add_import_arg(p: argparse.ArgumentParser) -> None:
    """`--import MODULE`, repeatable."""
    p.add_argument("--import", dest="imports", action="append", default=[], metavar="MODULE", help=IMPORT_HELP)


def import_modules(names: Sequence[str]) -> None:
    """Import each `--import` module (the current directory is importable, as for hlopt compile's target)."""
    import importlib

    if names:
        _cwd_importable()
    for name in names:
        try:
            importlib.import_module(name)
        except ImportError as e:
            raise _not_found(name, e) from None


def add_trust_arg(p: argparse.ArgumentParser, default: str | None) -> None:
    """`--trust signed|portable`."""
    p.add_argument("--trust", choices=["signed", "portable"], default=default,
                   help="signed: only files whose MAC verifies under your key (HLOPT_KEY or ~/.config/hlopt/key); "
                        "portable: compile any other file from its StableHLO, never running its native code"
                        + ("" if default else "; inspect then also runs that level's checks that need no devices "
                                              "(exit status 1 if the file fails them)"))


_MAX_NPY_HEADER = 10000  # numpy's own default limit on the header it parses


def read_inputs(paths: list[str], avals: list[Any], program: str, names: Sequence[str] = ()) -> list[Any]:
    """The arrays of .npy and .npz files, each checked against the program's input it fills.

    A .npz whose members are named as the program's inputs (`names`, as `hlopt inspect`
    prints them) fills those inputs, .npy files the rest in order; otherwise every array
    fills the next input, with a warning when a member's name is not numpy's default
    (`arr_0`, ...). Each file is opened once, and only if it is a regular file; the number
    of arrays (from the .npy magic or the zip directory) is checked first, then each
    header's shape and dtype (and a zip member's size) against `avals` before any data is
    read, and no more than those bytes are read, so a zip bomb or a lying header costs
    nothing. Never unpickles. Raises ExecutableFileError.
    """
    with contextlib.ExitStack() as stack:
        entries = [(path, f, info) for path, f, members in (_input_source(stack, path) for path in paths)
                   for info in ([None] if members is None else members)]
        if len(entries) != len(avals):
            named = f" ({', '.join(names)})" if names else ""
            raise ExecutableFileError(f"{program} takes {_count(len(avals), 'array')}{printable(named)}, "
                                      f"{len(entries)} {'was' if len(entries) == 1 else 'were'} given (--input)")
        return [_read_entry(*entry, aval, program, i)
                for i, (entry, aval) in enumerate(zip(_by_name(entries, names), avals))]


def _by_name(entries: list[tuple[str, Any, Any]], names: Sequence[str]) -> list[tuple[str, Any, Any]]:
    """`entries` (path, file, .npz member or None) in input order: see `read_inputs`."""
    aliases = _path_aliases(names)
    members = {aliases.get(m, m): entry for entry in entries
               if (info := entry[2]) is not None and (m := info.filename.removesuffix(".npy"))}
    if members and names and len(members) == sum(e[2] is not None for e in entries) and set(members) <= set(names):
        unnamed = iter([e for e in entries if e[2] is None])
        return [members[n] if n in members else next(unnamed) for n in names]
    strays = [m for m in members if not re.fullmatch(r"arr_[0-9]+", m)]
    if strays:
        print(f"hlopt: warning: .npz arrays {printable(', '.join(strays[:4]))} are not named as the program's "
              f"inputs ({printable(', '.join(names[:8]))}): each array fills the next input in order",
              file=sys.stderr)
    return entries


def _path_aliases(names: Sequence[str]) -> dict[str, str]:
    """Input names by their `/`-joined dict keys inside their argument (`params['layer']['w']` as
    `layer/w`, as an .npz given to `hlopt compile --arg` names it), where that names one input."""
    paths: dict[str, list[str]] = {}
    for name in names:
        m = re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*((?:\['[^'\[\]]*'\])+)", name)
        if m:
            paths.setdefault("/".join(re.findall(r"\['([^']*)'\]", m.group(1))), []).append(name)
    return {path: found[0] for path, found in paths.items() if len(found) == 1}


def _read_entry(path: str, f: Any, info: Any, aval: Any, program: str, index: int) -> Any:
    """The array of a .npy file (`info` None) or of the member `info` of the open .npz `f`."""
    import zipfile
    import zlib

    if info is None:
        return _read_npy(f, aval, path, f"input '{printable(path)}'", program, index, os.fstat(f.fileno()).st_size)
    where = f"input '{printable(path)}', array '{printable(info.filename)}'"
    try:
        with f.open(info) as member:
            return _read_npy(member, aval, path, where, program, index, info.file_size)
    except (zipfile.BadZipFile, zipfile.LargeZipFile, NotImplementedError, EOFError, OSError, ValueError,
            RuntimeError, zlib.error) as e:
        if isinstance(e, ExecutableFileError):
            raise
        raise ExecutableFileError(f"input '{printable(path)}' is not a valid .npz file: {printable(e)}") from None


def _input_source(stack: contextlib.ExitStack, path: str) -> tuple[str, Any, Any]:
    """(path, the open file, None) for a .npy file; (path, its open ZipFile, its members) for a .npz."""
    import zipfile

    f = stack.enter_context(_open_input(path))
    magic = f.read(6)
    f.seek(0)
    if magic == b"\x93NUMPY":
        return path, f, None
    if magic[:4] != b"PK\x03\x04":
        raise ExecutableFileError(f"input '{printable(path)}' is neither a .npy nor a .npz file")
    try:
        z = stack.enter_context(zipfile.ZipFile(f))
        members = z.infolist()
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, ValueError, EOFError) as e:
        raise ExecutableFileError(f"input '{printable(path)}' is not a valid .npz file: {printable(e)}") from None
    for info in members:  # np.savez and np.savez_compressed store or deflate them, never encrypt them
        encrypted = info.flag_bits & 0x1
        if encrypted or info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
            how = "encrypted" if encrypted else f"compressed with zip method {info.compress_type}"
            raise ExecutableFileError(f"input '{printable(path)}', array '{printable(info.filename)}' is {how}; "
                                      "numpy's .npz members are stored or deflated, never encrypted")
    return path, z, members


@contextlib.contextmanager
def _open_input(path: str) -> Iterator[Any]:
    """`path` opened for reading if it is a regular file (never a FIFO or a device, which could block)."""
    import stat

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except (OSError, ValueError) as e:
        raise ExecutableFileError(f"cannot read input '{printable(path)}': {getattr(e, 'strerror', None) or e}") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise ExecutableFileError(f"input '{printable(path)}' is not a regular file")
    with os.fdopen(fd, "rb") as f:
        yield f


def _read_npy(f: Any, aval: Any, path: str, where: str, program: str, index: int, size: int) -> Any:
    """The array of the .npy stream `f` (`size` bytes), if its header says it is `aval`; else ExecutableFileError."""
    import numpy as np

    from hlopt.runtime.files import _physical_aval

    want = _physical_aval(aval)
    readers = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}
    try:
        version = np.lib.format.read_magic(f)
        if version not in readers:
            raise ValueError(f"format version {version[0]}.{version[1]} (1.0 and 2.0 are read)")
        shape, fortran, dtype = readers[version](f, max_header_size=_MAX_NPY_HEADER)
    except (ValueError, OSError, SyntaxError, TypeError) as e:
        raise ExecutableFileError(f"{where}: not a valid .npy header: {printable(e)}") from None
    if dtype.hasobject or tuple(shape) != tuple(want.shape) or dtype != want.dtype:
        same_shape = not dtype.hasobject and tuple(shape) == tuple(want.shape)
        convert = f": save it as {want.dtype.name}, `a.astype(np.{want.dtype.name})`" if same_shape else ""
        raise ExecutableFileError(
            f"{where} holds {printable(dtype)}{list(shape)} but {program} takes {want.dtype.name}"
            f"{list(want.shape)} as input {index}{convert}")
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if size - f.tell() != nbytes:
        raise ExecutableFileError(f"{where}: its data is {size - f.tell()} bytes, its header says {nbytes}")
    data = f.read(nbytes)
    if len(data) != nbytes:
        raise ExecutableFileError(f"{where}: its data is shorter than its header says")
    return np.frombuffer(data, dtype).reshape(shape, order="F" if fortran else "C").copy()


def leaf_names(tree: Any) -> list[str]:
    """`a.0`-style names of a pytree's leaves (`out` for a lone leaf)."""
    import jax

    names = []
    for path, _ in jax.tree_util.tree_flatten_with_path(tree)[0]:
        parts = [str(getattr(k, "key", getattr(k, "idx", getattr(k, "name", k)))) for k in path]
        names.append(".".join(parts) or "out")
    return names


def _count(n: int, noun: str) -> str:
    """`1 array`, `4 arrays`."""
    return f"{n} {noun}{'' if n == 1 else 's'}"


def cmd_run(args: argparse.Namespace) -> int:
    """Load a file, run it on the inputs, print or save the results."""
    import jax
    import numpy as np

    import hlopt.saved  # noqa: F401 - the node classes a signature may hold
    from hlopt.runtime import files, outputs

    if args.positional:
        given = " ".join(f"--input {printable(path)}" for path in [*args.input, *args.positional])
        raise UsageError(f"inputs are given with --input, one per .npy or .npz, in argument order: "
                         f"hlopt run {printable(args.file)} {given}")
    import_modules(args.imports)
    found, _ = files.read_file(args.file)
    files.check_manifest(found.manifest, args.file)
    count = found.manifest["device_count"]
    if count > MAX_HOST_DEVICES:
        raise UsageError(f"{args.file}: the program runs on {count} devices; hlopt run sets up at most "
                         f"{MAX_HOST_DEVICES} host devices")
    if count > 1:
        set_host_devices(count)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        compiled = files.load(args.file, trust=args.trust)
    for w in caught:
        print(f"hlopt: warning: {as_flags(printable(w.message))}", file=sys.stderr)
    sig = compiled.signature
    inputs = read_inputs(args.input, list(sig.in_avals), printable(sig.name), sig.in_names)
    dynamic, _ = jax.tree_util.tree_unflatten(sig.in_tree, inputs)
    out = compiled(*dynamic)
    names = leaf_names(out)
    leaves = [np.asarray(x) for x in jax.tree_util.tree_leaves(out)]
    if args.output:
        data = outputs.results_npz(names, leaves)
        written = args.output if args.output.endswith(".npz") else args.output + ".npz"  # as np.savez names it
        outputs.write_atomically(written, data)
        print(f"wrote {printable(written)}: {', '.join(printable(n) for n in outputs.npz_names(data))}")
    else:
        for name, value in zip(names, leaves):
            print(f"{printable(name)}: {value.dtype.name}{list(value.shape)}\n{np.array2string(value, threshold=64)}")
    return 0


# --- inspect -----------------------------------------------------------------------


def add_inspect_args(p: argparse.ArgumentParser) -> None:
    """`hlopt inspect`'s arguments."""
    p.add_argument("file", help="an executable file")
    p.add_argument("--ir", action="store_true", help="also print the post-pass module")
    p.add_argument("--json", action="store_true", help="print the manifest as JSON")
    add_trust_arg(p, None)
    add_import_arg(p)


def describe(manifest: dict[str, Any], size: int, path: str, mac: str, authenticated: bool = False) -> str:
    """A readable summary of a checked manifest (no device is needed); every field from the file escaped."""
    import jax

    import hlopt.saved  # noqa: F401 - the node classes a signature may hold
    from hlopt.compiler.program import aval_str
    from hlopt.runtime import encoding

    p = printable
    try:
        sig = manifest["signature"]
        in_tree = encoding.decode_tree(sig["in_tree"], named=authenticated)
        out_tree = encoding.decode_tree(sig["out_tree"], named=authenticated)
        in_avals = [encoding.decode_aval(a) for a in sig["in_avals"]]
        out_avals = [encoding.decode_aval(a) for a in sig["out_avals"]]
        in_names = (encoding.decode_in_names(manifest.get("in_names"), len(in_avals))  # files before it: paths
                    or leaf_names(jax.tree_util.tree_unflatten(in_tree, [0] * len(in_avals))[0]))
        out_names = leaf_names(jax.tree_util.tree_unflatten(out_tree, [0] * len(out_avals)))
        mesh = sig.get("mesh")
        width = max(16, *map(len, [*in_names, *out_names]))
        lines = [
            f"file:       {p(path)} ({size} bytes, format version {manifest['format_version']})",
            f"MAC:        {as_flags(p(mac))}",
            f"program:    {p(sig['name'])}",
            f"written by: jax {p(manifest.get('jax_version'))}, jaxlib {p(manifest['jaxlib_version'])}, "
            f"platform {p(manifest['platform'])} {p(manifest['platform_version'])}, "
            f"StableHLO {p(manifest.get('stablehlo_version'))}",
            f"devices:    {manifest['device_count']}" + (
                "" if not mesh else f", mesh {' '.join(f'{p(n)}={s}' for n, s in zip(mesh['axis_names'], mesh['shape']))} "
                f"({p(', '.join(map(str, mesh['axis_types'])))}), device ids {p(mesh['device_ids'][:64])}"),
            f"partitioner: {'shardy' if sig['use_shardy'] else 'gspmd'}",
            f"pipeline:   {p(manifest['pipeline']) or '(none)'}",
            "inputs:",
            *[f"  {p(n):{width}s} {aval_str(a):20s} {p(encoding.spec_str(s))}"
              for n, a, s in zip(in_names, in_avals, manifest["in_shardings"])],
            "outputs:",
            *[f"  {p(n):{width}s} {aval_str(a):20s} {p(encoding.spec_str(s))}"
              for n, a, s in zip(out_names, out_avals, manifest["out_shardings"])],
        ]
        if sig["static_args"]:
            lines.append("static arguments: " + ", ".join(
                f"{i}={p(repr(encoding.decode_static(v, named=authenticated)))}" for i, v in sig["static_args"]))
    except (encoding.EncodingError, KeyError, TypeError, ValueError, AttributeError) as e:
        raise UsageError(f"{path}: cannot describe the program's signature: {p(e)} (`--json` shows the manifest)") from None
    lines.append("sections:")
    lines += [f"  {s['name']:12s} {s['size']:>10d} bytes  sha256 {s['sha256']}" for s in manifest["sections"]]
    return "\n".join(map(p, lines))  # each line escaped whole, whatever field a forger filled


def cmd_inspect(args: argparse.Namespace) -> int:
    """Print a file's manifest and whether its MAC verifies (its module with --ir); with --trust, load-check it."""
    import hlopt.saved  # noqa: F401 - the node classes a signature may hold
    from hlopt.runtime import files

    import_modules(args.imports)
    found, mac = files.read_file(args.file, sections=files.SECTIONS)
    if args.json:
        print(json.dumps(dict(found.manifest, mac=mac), indent=2, sort_keys=True))
    else:
        print(describe(found.manifest, found.size, args.file, mac, found.authenticated))
    if args.ir:
        print(files.module_section(found, args.file))
    if args.trust:
        files.check_file(args.file, trust=args.trust)
        print(f"passes the checks of --trust {args.trust} (those that need no devices)")
    return 0
