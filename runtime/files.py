"""Executable files: `Compiled.save` / `hlopt.load`, `Compiled.serialize` / `hlopt.deserialize`.

A file is a container (runtime/container.py) authenticated with the user's
key (runtime/keys.py). Its manifest records the format version, the
jax/jaxlib versions, the platform and its version, the device count, the
program's signature (pytrees, avals, static arguments, mesh), its input and
output shardings, its build flags and its pipeline; its sections are the
PJRT executable and the post-pass module as a StableHLO portable artifact
(which carries the signature too, as the attribute `hlopt.signature`).

Trust: the native code of the executable section reaches PJRT only from a
file whose MAC verifies under this user's key. Such a file is loaded as it
is, without parsing its module. Any other file is refused, or with
`trust="portable"` compiled from its portable artifact after the checks of
runtime/portable.py and a comparison of the manifest with the module. A
file written by another jaxlib, platform (version) or process count is
recompiled from its portable artifact with a warning. Either way, what PJRT
holds is compared with the manifest before the first call: parameter and
result counts and ranks, devices and shardings.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import jaxlib
from jax.sharding import NamedSharding

from hlopt.compiler.jax_compat import api_boundary, layout_rank
from hlopt.compiler.program import Signature, aval_str, module_to_bytecode, parse_module
from hlopt.compiler.stages import AnnotationError, check_no_annotations
from hlopt.passes.mlir import current_stablehlo_version, deserialize_portable_artifact, ir, serialize_portable_artifact
from hlopt.runtime import container, encoding
from hlopt.runtime.compile import compile_program, program_devices
from hlopt.runtime.container import Container, ExecutableFileError
from hlopt.runtime.errors import warn_in_user_code
from hlopt.runtime.executable import Compiled, _physical_aval
from hlopt.runtime.outputs import write_atomically
from hlopt.runtime.keys import ENV_KEY, Key, KeyFileError, describe_key, key_file_path, user_key
from hlopt.runtime.pjrt import BuildFlags, get_client, load_executable
from hlopt.runtime.portable import PortableCheckError, check_portable, scan_artifact

FORMAT = "hlopt-executable"
SECTIONS = ("executable", "module")
TRUST_LEVELS = ("signed", "portable")
SIGNATURE_ATTR = "hlopt.signature"
MAGICS = {"module": b"ML\xefR"}  # MLIR bytecode


class RecompileWarning(UserWarning):
    """A file was compiled from its portable artifact: another jaxlib or platform, or not authenticated.

    Example:
      >>> import warnings
      >>> import hlopt
      >>> issubclass(hlopt.RecompileWarning, UserWarning)
      True
    """

    __module__ = "hlopt"  # raised and printed as users import it


def _platform() -> dict[str, Any]:
    """What an executable is specific to: a file that differs in any of it is recompiled."""
    client = get_client()
    return {"jaxlib_version": jaxlib.__version__, "platform": client.platform,
            "platform_version": client.platform_version, "process_count": jax.process_count()}


def serialize(compiled: Compiled) -> bytes:
    """The bytes of `compiled`'s executable file, authenticated with this user's key."""
    try:
        signature = encoding.encode_signature(compiled.signature)
    except encoding.EncodingError as e:
        raise ValueError(f"cannot serialize {compiled.signature.name}: {e}") from None
    key = user_key()
    manifest = {
        "format": FORMAT,
        **_platform(),
        "jax_version": jax.__version__,
        "stablehlo_version": current_stablehlo_version(),
        "device_count": compiled.signature.num_devices,
        "signature": signature,
        "in_shardings": [encoding.encode_spec(s) for s in compiled.in_shardings],
        "out_shardings": [encoding.encode_spec(s) for s in compiled.out_shardings],
        "flags": BuildFlags.of(compiled.module, compiled.signature.use_shardy).encode(),
        "pipeline": compiled.pipeline,
        "in_names": list(compiled.signature.in_names),
    }
    sections = {
        "executable": get_client().serialize_executable(compiled.executable),
        "module": compiled.artifact or _artifact(compiled.module, signature),
    }
    return container.pack(manifest, sections, key)


def _artifact(module: ir.Module, signature: dict[str, Any]) -> bytes:
    """`module` as a portable artifact that also names the signature (the module itself is unchanged)."""
    copy = parse_module(module_to_bytecode(module))
    with copy.context:
        copy.operation.attributes[SIGNATURE_ATTR] = ir.StringAttr.get(json.dumps(signature, sort_keys=True))
    return serialize_portable_artifact(copy)


def save(compiled: Compiled, path: str | os.PathLike) -> None:
    """Write `compiled`'s executable file to `path` (atomically, keeping an existing file's mode:
    runtime/outputs.py's `write_atomically`)."""
    write_atomically(path, serialize(compiled))


def _sections_for(trust: str, source: str) -> Callable[[bool], tuple[str, ...]]:
    """What to read of a file: all of an authenticated one; of another, the module if `trust` is portable."""
    if trust not in TRUST_LEVELS:
        raise ValueError(f"trust must be one of {', '.join(map(repr, TRUST_LEVELS))}, not {trust!r}")

    def wanted(authenticated: bool) -> tuple[str, ...]:
        if authenticated:
            return SECTIONS
        if trust == "portable":
            return ("module",)
        raise _unauthenticated(source)

    return wanted


def _key() -> Key | None:
    try:
        return user_key(create=False)
    except KeyFileError as e:
        raise ExecutableFileError(f"cannot check executable files: {e}") from None


def read_file(path: str | os.PathLike, *, sections: tuple[str, ...] = ()) -> tuple[Container, str]:
    """A file's checked manifest (and `sections`, if their checksums hold) and what its MAC says.

    Nothing is loaded: this is what `hlopt inspect` shows.
    """
    try:
        key = user_key(create=False)
        problem = None if key is not None else describe_key()
    except KeyFileError as e:
        key, problem = None, str(e)
    found = container.read_path(path, str(path), FORMAT, SECTIONS, key, lambda authenticated: sections, MAGICS)
    if found.authenticated:
        verdict = f"verified with {key.source}"
    elif problem is not None:
        verdict = f"not checked: {problem}"
    else:
        verdict = (f"DOES NOT VERIFY with {key.source}: written under another key, or changed since; "
                   "it loads only with trust='portable' (compiled from its StableHLO)")
    return found, verdict


@api_boundary
def deserialize(data: bytes, source: str = "<bytes>", *, trust: str = "signed") -> Compiled:
    """The `Compiled` held by an executable file's bytes (what `Compiled.serialize` returns).

    Args:
      data: the bytes.
      source: a name for the bytes in error messages.
      trust: as for `hlopt.load`.

    Returns:
      The `Compiled` program.

    Raises:
      ExecutableFileError: the bytes are damaged, forged, foreign or not signed under your key.

    Example:
      >>> import jax.numpy as jnp
      >>> import hlopt
      >>> data = hlopt.jit(lambda x: -x).lower(jnp.ones(2)).compile().serialize()
      >>> hlopt.deserialize(data)(jnp.ones(2)).tolist()
      [-1.0, -1.0]
    """
    wanted = _sections_for(trust, source)
    return _compiled(container.read_bytes(data, source, FORMAT, SECTIONS, _key(), wanted, MAGICS), source)


@api_boundary
def load(path: str | os.PathLike, *, trust: str = "signed") -> Compiled:
    """The `Compiled` program in the executable file at `path` (written by `Compiled.save`).

    Args:
      path: the file.
      trust: `"signed"` (the default) loads only a file whose MAC verifies under this user's
        key and runs its native code; `"portable"` compiles any other file from its StableHLO
        portable artifact, never running its native code (with a `RecompileWarning`).

    Returns:
      The `Compiled` program.

    Raises:
      ExecutableFileError: the file is damaged, forged, foreign or not signed under your key.

    Example:
      >>> import os, tempfile
      >>> import jax.numpy as jnp
      >>> import hlopt
      >>> path = os.path.join(tempfile.mkdtemp(), "double.hlx")
      >>> hlopt.jit(lambda x: 2 * x).lower(jnp.ones(2)).compile().save(path)
      >>> hlopt.load(path)(jnp.ones(2)).tolist()
      [2.0, 2.0]
    """
    wanted = _sections_for(trust, str(path))
    return _compiled(container.read_path(path, str(path), FORMAT, SECTIONS, _key(), wanted, MAGICS), str(path))


def _compiled(found: Container, source: str) -> Compiled:
    """The program of a file read under its trust level: loaded if authenticated, else compiled (portable)."""
    manifest, sections = found.manifest, found.sections
    check_manifest(manifest, source)
    try:
        signature = encoding.decode_signature(manifest["signature"], named=found.authenticated)
        in_specs = _specs(manifest.get("in_shardings"), len(signature.in_avals), "in_shardings")
        out_specs = _specs(manifest.get("out_shardings"), len(signature.out_avals), "out_shardings")
        flags = BuildFlags.decode(manifest.get("flags"), len(signature.out_avals))
        signature = dataclasses.replace(signature, in_names=encoding.decode_in_names(manifest.get("in_names"),
                                                                                     len(signature.in_avals)))
    except (encoding.EncodingError, ValueError) as e:
        raise ExecutableFileError(f"{source}: manifest: {e}") from None
    if manifest["device_count"] != signature.num_devices:
        raise ExecutableFileError(f"{source}: the manifest says {manifest['device_count']} devices "
                                  f"but its mesh has {signature.num_devices}")
    here = _platform()
    stale = {k: manifest[k] for k in here if manifest[k] != here[k]}
    if found.authenticated and not stale:
        devices = program_devices(signature)
        try:
            executable = load_executable(sections["executable"], devices, flags.options(devices))
        except Exception as e:  # noqa: BLE001 - PJRT reports failures as several types
            raise ExecutableFileError(f"{source}: PJRT cannot load the executable section: "
                                      f"{_first_line(e)}") from None
        artifact = sections["module"]
        module: ir.Module | Callable[[], ir.Module] = lambda: _parse_artifact(artifact, source, True)[0]
    else:
        why = (f"written by {', '.join(f'{k} {v!r}' for k, v in stale.items())} "
               f"(this process has {', '.join(f'{k} {here[k]}' for k in stale)})" if stale
               else "not authenticated (trust='portable')")
        warn_in_user_code(f"{source}: {why}; compiling it from its portable artifact", RecompileWarning)
        module = _portable_module(sections["module"], manifest, signature, flags, source, found.authenticated)
        try:
            executable = compile_program(module, signature)
        except Exception as e:  # noqa: BLE001 - XLA reports failures as several types
            raise ExecutableFileError(f"{source}: XLA cannot compile the module section: {_first_line(e)}") from None
    check_loaded(executable, signature, source)
    compiled = Compiled(executable, signature, module, manifest["pipeline"], artifact=sections["module"])
    _check_shardings(compiled.in_shardings, in_specs, signature.in_avals, "input", source)
    _check_shardings(compiled.out_shardings, out_specs, signature.out_avals, "output", source)
    return compiled


def _unauthenticated(source: str) -> ExecutableFileError:
    if os.environ.get(ENV_KEY) or key_file_path().exists():
        why = f"its MAC does not verify with {describe_key()}: it was written under another key, or changed since"
    else:
        why = (f"it was written under another user's or machine's key, and this user has none to check it with "
               f"({ENV_KEY} is not set and {key_file_path()} does not exist)")
    return ExecutableFileError(
        f"{source}: {why}. Share the key between the machines that share files (HLOPT_KEY), or, "
        "if you trust its source, load it with trust='portable' (compiled from its StableHLO, "
        "never running its native code)")


def check_file(path: str | os.PathLike, *, trust: str) -> None:
    """Refuse (ExecutableFileError) a file `load(path, trust=trust)` would refuse before it needs devices."""
    found = container.read_path(path, str(path), FORMAT, SECTIONS, _key(), _sections_for(trust, str(path)), MAGICS)
    if not found.authenticated:
        _check_artifact(*_parse_artifact(found.sections["module"], str(path), False), found.manifest, str(path))


def module_section(found: Container, source: str) -> ir.Module:
    """The module section of a file read by `read_file` (checked first in another process if unauthenticated)."""
    return _parse_artifact(found.sections["module"], source, found.authenticated)[0]


def check_manifest(manifest: dict[str, Any], source: str) -> None:
    """The fields every reader relies on have their types."""
    for key in ("jaxlib_version", "platform", "platform_version", "pipeline"):
        if not isinstance(manifest.get(key), str):
            raise ExecutableFileError(f"{source}: the manifest has no valid '{key}'")
    for key in ("device_count", "process_count"):
        if type(manifest.get(key)) is not int or manifest[key] < 1:
            raise ExecutableFileError(f"{source}: the manifest has no valid '{key}'")
    if not isinstance(manifest.get("signature"), dict):
        raise ExecutableFileError(f"{source}: the manifest has no valid 'signature'")


def _portable_module(artifact: bytes, manifest: dict[str, Any], signature: Signature, flags: BuildFlags,
                     source: str, authenticated: bool) -> ir.Module:
    """The module section, checked against the manifest (and, unauthenticated, by runtime/portable.py)."""
    module, recorded = _parse_artifact(artifact, source, authenticated)
    if not authenticated:
        _check_artifact(module, recorded, manifest, source)
    _check_module(module, signature, manifest["device_count"], source)
    if flags != BuildFlags.of(module, signature.use_shardy):
        raise ExecutableFileError(f"{source}: the manifest does not match the module: its build flags differ")
    return module


def _parse_artifact(artifact: bytes, source: str, authenticated: bool) -> tuple[ir.Module, str | None]:
    """The module of a portable artifact, and the signature it records (removed from the module).
    An unauthenticated artifact is first read in another process (`scan_artifact`)."""
    if not authenticated:
        try:
            scan_artifact(artifact)
        except PortableCheckError as e:
            raise ExecutableFileError(f"{source}: refused to read the module section: {e}") from None
    try:
        module = deserialize_portable_artifact(artifact)
    except Exception as e:  # noqa: BLE001 - MLIR reports a bad artifact with several types
        raise ExecutableFileError(f"{source}: the module section is not a StableHLO portable artifact: "
                                  f"{_first_line(e)}") from None
    attrs = module.operation.attributes
    if SIGNATURE_ATTR not in attrs:
        return module, None
    try:
        recorded = ir.StringAttr(attrs[SIGNATURE_ATTR]).value
    except ValueError:
        recorded = None
    del attrs[SIGNATURE_ATTR]
    return module, recorded


def _check_artifact(module: ir.Module, recorded: str | None, manifest: dict[str, Any], source: str) -> None:
    """What an unauthenticated module must pass: runtime/portable.py, and the signature it records."""
    try:
        check_portable(module)
    except PortableCheckError as e:
        raise ExecutableFileError(f"{source}: refused to compile the module section: {e}") from None
    try:
        same = recorded is not None and json.loads(recorded) == manifest.get("signature")
    except ValueError:
        same = False
    if not same:
        raise ExecutableFileError(f"{source}: the manifest does not match the module: "
                                  "the signature the module records differs from the manifest's")


def check_loaded(executable: Any, sig: Signature, source: str) -> None:
    """What PJRT holds must take and return what the manifest lists, on the devices it lists."""

    def lie(message: str) -> ExecutableFileError:
        return ExecutableFileError(f"{source}: the manifest does not match the executable: {message}")

    for what, layouts, avals in (("input", executable.get_parameter_layouts(), sig.param_avals),
                                 ("output", executable.get_output_layouts(), sig.out_avals)):
        if len(layouts) != len(avals):
            raise lie(f"{len(avals)} {what}s listed, the executable has {len(layouts)}")
        for i, (layout, aval) in enumerate(zip(layouts, avals)):
            rank = layout_rank(layout)
            if rank != len(_physical_aval(aval).shape):
                raise lie(f"{what} {i} is listed as {aval_str(aval)}, the executable's has rank {rank}")
    here = jax.process_index()
    want = [d.id for d in program_devices(sig) if d.process_index == here]
    got = [d.id for d in executable.local_devices()]
    if got != want:
        raise lie(f"it runs on devices {got[:16]}, the manifest's program on {want[:16]}")


def _first_line(e: BaseException) -> str:
    lines = str(e).strip().splitlines()
    return lines[0][:300] if lines else type(e).__name__


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
    for what, types, avals in (("input", ftype.inputs, sig.param_avals), ("output", ftype.results, sig.out_avals)):
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
