"""Executable files: `Compiled.save` / `hlopt.load`, `Compiled.serialize` / `hlopt.deserialize`.

A file is a container (runtime/container.py) whose manifest records the
format version, the jax/jaxlib versions, the platform and its version, the
device count, the program's signature (pytrees, avals, static arguments,
mesh), its input and output shardings and its pipeline, and whose sections
are the PJRT executable and the post-pass module as a StableHLO portable
artifact. Loading checks every checksum, then checks the manifest against
the module, and only then hands the executable to PJRT (XLA warns that
loading alone may run code, and PJRT aborts the process on an executable
partitioned for another device count); then it checks the manifest against
what PJRT loaded (parameter and result counts, shardings). A file written by
another jaxlib, platform (version) or process count is recompiled from its
portable artifact.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import Any

import jax
import jaxlib
from jax.sharding import NamedSharding

from hlopt.compiler.program import Signature, aval_str
from hlopt.compiler.stages import AnnotationError, check_no_annotations
from hlopt.passes.mlir import current_stablehlo_version, deserialize_portable_artifact, ir, serialize_portable_artifact
from hlopt.runtime import container, encoding
from hlopt.runtime.compile import compile_program, program_devices, program_options
from hlopt.runtime.container import ExecutableFileError
from hlopt.runtime.executable import Compiled
from hlopt.runtime.pjrt import get_client, load_executable

FORMAT = "hlopt-executable"
SECTIONS = ("executable", "module")


class RecompileWarning(UserWarning):
    """A file from another jaxlib or platform version was recompiled from its portable artifact."""


def _platform() -> dict[str, Any]:
    """What an executable is specific to: a file that differs in any of it is recompiled."""
    client = get_client()
    return {"jaxlib_version": jaxlib.__version__, "platform": client.platform,
            "platform_version": client.platform_version, "process_count": jax.process_count()}


def serialize(compiled: Compiled) -> bytes:
    """The bytes of `compiled`'s executable file."""
    try:
        signature = encoding.encode_signature(compiled.signature)
    except encoding.EncodingError as e:
        raise ValueError(f"cannot serialize {compiled.signature.name}: {e}") from None
    manifest = {
        "format": FORMAT,
        **_platform(),
        "jax_version": jax.__version__,
        "stablehlo_version": current_stablehlo_version(),
        "device_count": compiled.signature.num_devices,
        "signature": signature,
        "in_shardings": [encoding.encode_spec(s) for s in compiled.in_shardings],
        "out_shardings": [encoding.encode_spec(s) for s in compiled.out_shardings],
        "pipeline": compiled.pipeline,
    }
    sections = {
        "executable": get_client().serialize_executable(compiled.executable),
        "module": serialize_portable_artifact(compiled.module),
    }
    return container.pack(manifest, sections)


def save(compiled: Compiled, path: str | os.PathLike) -> None:
    """Write `compiled`'s executable file to `path` (atomically: a temporary file, then a rename)."""
    data = serialize(compiled)
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        tmp.write_bytes(data)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def read_file(data: bytes, source: str) -> tuple[dict[str, Any], dict[str, bytes]]:
    """The checked manifest and sections of an executable file; nothing is loaded."""
    manifest, sections = container.unpack(data, source, FORMAT, SECTIONS)
    for key in ("jaxlib_version", "platform", "platform_version", "pipeline"):
        if not isinstance(manifest.get(key), str):
            raise ExecutableFileError(f"{source}: the manifest has no valid '{key}'")
    for key in ("device_count", "process_count"):
        if type(manifest.get(key)) is not int or manifest[key] < 1:
            raise ExecutableFileError(f"{source}: the manifest has no valid '{key}'")
    return manifest, sections


def deserialize(data: bytes, source: str = "<bytes>") -> Compiled:
    """The `Compiled` held by an executable file's bytes; raises ExecutableFileError if damaged."""
    manifest, sections = read_file(data, source)
    try:
        signature = encoding.decode_signature(manifest.get("signature"))
        in_specs = _specs(manifest.get("in_shardings"), len(signature.in_avals), "in_shardings")
        out_specs = _specs(manifest.get("out_shardings"), len(signature.out_avals), "out_shardings")
    except encoding.EncodingError as e:
        raise ExecutableFileError(f"{source}: manifest: {e}") from None
    if manifest["device_count"] != signature.num_devices:
        raise ExecutableFileError(f"{source}: the manifest says {manifest['device_count']} devices "
                                  f"but its mesh has {signature.num_devices}")
    try:
        module = deserialize_portable_artifact(sections["module"])
    except Exception as e:  # noqa: BLE001 - MLIR reports a bad artifact with several types
        raise ExecutableFileError(f"{source}: the module section is not a StableHLO portable artifact: "
                                  f"{_first_line(e)}") from None
    _check_module(module, signature, manifest["device_count"], source)
    here = _platform()
    stale = {k: manifest[k] for k in here if manifest[k] != here[k]}
    if stale:
        warnings.warn(
            f"{source}: written by {', '.join(f'{k} {v}' for k, v in stale.items())} "
            f"(this process has {', '.join(f'{k} {here[k]}' for k in stale)}); "
            "recompiling it from its portable artifact",
            RecompileWarning,
            stacklevel=3,
        )
        executable = compile_program(module, signature)
    else:
        devices = program_devices(signature)
        options = program_options(module, devices, signature.use_shardy)
        try:
            executable = load_executable(sections["executable"], devices, options)
        except Exception as e:  # noqa: BLE001 - PJRT reports failures as several types
            raise ExecutableFileError(f"{source}: PJRT cannot load the executable section: "
                                      f"{_first_line(e)}") from None
    _check_counts(executable, signature, source)
    compiled = Compiled(executable, signature, module, manifest["pipeline"])
    _check_shardings(compiled.in_shardings, in_specs, signature.in_avals, "input", source)
    _check_shardings(compiled.out_shardings, out_specs, signature.out_avals, "output", source)
    return compiled


def load(path: str | os.PathLike) -> Compiled:
    """The `Compiled` in the executable file at `path`; raises ExecutableFileError if damaged."""
    try:
        data = Path(path).read_bytes()
    except OSError as e:
        raise ExecutableFileError(f"cannot read '{path}': {e.strerror}") from None
    return deserialize(data, str(path))


def _check_counts(executable: Any, sig: Signature, source: str) -> None:
    """The executable PJRT holds must take and return as many arrays as the manifest lists."""
    for what, count, avals in (("input", len(executable.get_parameter_layouts()), sig.in_avals),
                               ("output", len(executable.get_output_layouts()), sig.out_avals)):
        if count != len(avals):
            raise ExecutableFileError(f"{source}: the manifest does not match the executable: "
                                      f"{len(avals)} {what}s listed, the executable has {count}")


def _first_line(e: BaseException) -> str:
    lines = str(e).strip().splitlines()
    return lines[0] if lines else type(e).__name__


def _specs(data: Any, count: int, what: str) -> list[Any]:
    if not isinstance(data, list) or len(data) != count:
        raise encoding.EncodingError(f"'{what}' does not list one sharding for each of the {count} values")
    return [None if s is None else encoding.decode_spec(s) for s in data]


def main_function(module: ir.Module) -> ir.Operation | None:
    """The public `@main` of `module`, or None."""
    for op in module.body.operations:
        if op.operation.name == "func.func" and ir.StringAttr(op.attributes["sym_name"]).value == "main":
            return op.operation
    return None


def _check_module(module: ir.Module, sig: Signature, device_count: int, source: str) -> None:
    """The manifest must describe the module: same inputs, outputs and device count."""

    def lie(message: str) -> ExecutableFileError:
        return ExecutableFileError(f"{source}: the manifest does not match the module: {message}")

    main = main_function(module)
    if main is None:
        raise lie("the module has no @main function")
    ftype = ir.FunctionType(ir.TypeAttr(main.attributes["function_type"]).value)
    for what, types, avals in (("input", ftype.inputs, sig.in_avals), ("output", ftype.results, sig.out_avals)):
        if len(types) != len(avals):
            raise lie(f"{len(avals)} {what}s listed, @main has {len(types)}")
        for i, (t, aval) in enumerate(zip(types, avals)):
            if str(t) != encoding.tensor_type(aval):
                raise lie(f"{what} {i} is listed as {aval_str(aval)}, @main has {t}")
    for i, (listed, recorded) in enumerate(zip(_result_paths(sig.out_tree), _result_infos(main))):
        if recorded is not None and listed != recorded:
            raise lie(f"output {i} is listed as {listed}, @main returns it as {recorded}")
    attrs = module.operation.attributes
    partitions = ir.IntegerAttr(attrs["mhlo.num_partitions"]).value if "mhlo.num_partitions" in attrs else 1
    if partitions != device_count:
        raise lie(f"{device_count} devices listed, the module is partitioned for {partitions}")
    try:
        check_no_annotations(module)
    except AnnotationError as e:
        raise ExecutableFileError(f"{source}: {e}") from None


def _result_paths(out_tree: Any) -> list[str]:
    """`result['a'][0]`-style paths of the outputs, as jax writes them into `jax.result_info`."""
    def entry(k: Any) -> str:
        if isinstance(k, jax.tree_util.DictKey):
            return f"[{k.key!r}]"
        if isinstance(k, jax.tree_util.GetAttrKey):
            return f".{k.name}"
        return f"[{getattr(k, 'idx', getattr(k, 'key', k))}]"

    skeleton = jax.tree_util.tree_unflatten(out_tree, [0] * out_tree.num_leaves)
    return ["result" + "".join(map(entry, path)) for path, _ in jax.tree_util.tree_flatten_with_path(skeleton)[0]]


def _result_infos(main: ir.Operation) -> list[str | None]:
    """The `jax.result_info` of each result of `@main` (None where there is none)."""
    if "res_attrs" not in main.attributes:
        return []
    infos = []
    for attrs in ir.ArrayAttr(main.attributes["res_attrs"]):
        attrs = ir.DictAttr(attrs)
        infos.append(ir.StringAttr(attrs["jax.result_info"]).value if "jax.result_info" in attrs else None)
    return infos


def _check_shardings(actual: list[Any], specs: list[Any], avals: Any, what: str, source: str) -> None:
    """The shardings the manifest lists must be those of the loaded executable."""
    for i, (sharding, spec, aval) in enumerate(zip(actual, specs, avals)):
        if not isinstance(sharding, NamedSharding):
            ok = spec is None
        else:
            try:
                ok = spec is not None and sharding.is_equivalent_to(NamedSharding(sharding.mesh, spec), len(aval.shape))
            except ValueError:  # the spec names axes the mesh does not have
                ok = False
        if not ok:
            raise ExecutableFileError(
                f"{source}: the manifest does not match the executable: {what} {i} is listed with "
                f"sharding {spec}, the executable has {getattr(sharding, 'spec', 'a single device')}"
            )
