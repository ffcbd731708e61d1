"""From a `Lowered` (or a post-pass module) to a `Compiled` through PJRT and the persistent cache."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import jax

from hlopt.compiler.program import Signature, module_to_bytecode, parse_module
from hlopt.compiler.stages import check_no_annotations
from hlopt.passes.mlir import ir
from hlopt.passes.target import Target
from hlopt.passes.xla_cpu.ynn_fusion import recorded_options
from hlopt.runtime.cache import CompilationCache, active_cache, cache_key, calls_user_code, stripped_bytecode
from hlopt.runtime import kernels
from hlopt.runtime.errors import warn_in_user_code
from hlopt.runtime.executable import Compiled
from hlopt.runtime.host import HostCompiled
from hlopt.runtime.portable import PortableCheckError, check_portable
from hlopt.runtime.pjrt import (
    BuildFlags,
    CompilerOptions,
    compile_with_options,
    get_client,
    load_executable,
    with_compiler_options,
)

if TYPE_CHECKING:
    from hlopt.compiler.stages import Lowered


def program_devices(signature: Signature) -> list[jax.Device]:
    """The devices a program runs on: its mesh's, else the one it is committed to, else jax's default device."""
    if signature.mesh is not None:
        return list(signature.mesh.devices.flat)
    if signature.device is not None:
        return [signature.device]
    default = jax.config.jax_default_device
    if isinstance(default, jax.Device):
        return [default]
    return [jax.devices(default)[0]]


def compile_lowered(lowered: "Lowered", pipeline: str, compiler_options: CompilerOptions = (), *,
                    traced: bool = False) -> Compiled:
    """Run `pipeline` on `lowered` and compile the result with the XLA options `compiler_options` (sorted
    pairs, `check_compiler_options`); a persistent-cache hit skips both.

    This is the `Backend` of `Lowered`s made from text (`hlopt compile` of a
    .mlir, a parsed module); `compile_traced` is that of the ones `hlopt.lower`
    makes. The module XLA compiles must first pass runtime/portable.py's checks
    (PortableCheckError): the same custom-call allowlist and type checks, static
    shapes and memory bound, and device ids as a `trust="portable"` load;
    `traced` lets custom calls to targets off the list pass (see
    `check_portable`). A program with host callbacks compiles as under `jax.jit`
    and is never cached (`hlopt.runtime.host`).
    """
    signature = lowered.signature
    if lowered.host_compile is not None:
        compiled, module = lowered.host_compile(dict(compiler_options) or None)
        return HostCompiled(compiled, module, signature, pipeline)
    cache = active_cache()
    key = None
    if cache is not None:
        bytecode = stripped_bytecode(lowered.source_module)  # never moves it: a hit does not parse
        if not calls_user_code(bytecode):
            key = cache_key(bytecode, pipeline, program_devices(signature), signature.use_shardy, get_client(),
                            compiler_options, lowered.precision)
            hit = _from_cache(cache, key, signature)
            if hit is not None:
                executable, module = hit
                return Compiled(executable, signature, module, ",".join(p for p in (lowered.pipeline, pipeline) if p))
    # platform-specific passes may rewrite; hlopt's CPU kernels are called only where they are built
    target = Target((program_devices(signature)[0].platform,), kernels=kernels.available(), precision=lowered.precision)
    after = lowered.apply(pipeline, platform=target) if pipeline else lowered
    check_no_annotations(after.module)
    try:
        check_portable(after.module, traced=traced)
    except PortableCheckError as e:
        raise PortableCheckError(f"{signature.name}: refused to compile: {e}") from None
    return Compiled(_compile(after.module, signature, cache, key, compiler_options), signature, after.module,
                    after.pipeline)


def compile_traced(lowered: "Lowered", pipeline: str, compiler_options: CompilerOptions = ()) -> Compiled:
    """`compile_lowered` for a program jax traced in this process (`hlopt.lower`'s `Backend`)."""
    return compile_lowered(lowered, pipeline, compiler_options, traced=True)


def compile_program(module: ir.Module, signature: Signature) -> Any:
    """A loaded executable of the post-pass `module`, from the cache when it holds one."""
    return _compile(module, signature, active_cache(), None)


def _compile(module: ir.Module, signature: Signature, cache: CompilationCache | None, key: str | None,
             compiler_options: CompilerOptions = ()) -> Any:
    """Compile a post-pass module with the XLA options `compiler_options` and those the module
    records (`program_options`); store it under `key` (else under the module's own key).

    PJRT gets the module with its debug locations stripped, so the executable's
    HLO carries no op metadata (op_name, source_file, source_line): loading it
    (`hlopt.load`, a cache hit) parses less. `Compiled.module`, the file's
    portable artifact and the cache entry's module keep the locations.
    """
    devices = program_devices(signature)
    flags = BuildFlags.of(module, signature.use_shardy)
    compiler_options = program_options(module, devices[0].platform, compiler_options)
    options = with_compiler_options(flags.options(devices), compiler_options)
    stripped = stripped_bytecode(module)  # what PJRT compiles (see above)
    client = get_client()
    if cache is None:
        return compile_with_options(stripped, devices, options, client)
    if key is None:
        key = cache_key(stripped, "", devices, signature.use_shardy, client, compiler_options)
        hit = _from_cache(cache, key, signature)
        if hit is not None:
            return hit[0]
    cache.record(hit=False)
    executable = compile_with_options(stripped, devices, options, client)
    try:
        cache.put(key, client.serialize_executable(executable), module_to_bytecode(module), flags)
    except OSError as e:  # a full or read-only disk costs the entry, not the compilation
        warn_in_user_code(f"hlopt: cannot write to the compilation cache {cache.directory}: {e}")
    return executable


def program_options(module: ir.Module, platform: str, compiler_options: CompilerOptions = ()) -> CompilerOptions:
    """The XLA options compiling the post-pass `module` for `platform` takes: the user's
    `compiler_options` and, on CPU, those the tuning passes recorded on the module
    (`hlopt.passes.xla_cpu.ynn_fusion.recorded_options`) that neither the user's options nor
    `XLA_FLAGS` name (the user's choice wins). Sorted pairs.

    Raises ValueError for a recorded option hlopt's passes never record.
    """
    recorded = recorded_options(module.operation)
    if platform != "cpu" or not recorded:
        return compiler_options
    named = {name for name, _ in compiler_options} | _xla_flags_names()
    return tuple(sorted([*compiler_options, *((n, v) for n, v in recorded if n not in named)]))


def _xla_flags_names() -> set[str]:
    """The option names `XLA_FLAGS` sets (`--name=value` or `--name`)."""
    return {word.lstrip("-").partition("=")[0] for word in os.environ.get("XLA_FLAGS", "").split()}


def _from_cache(cache: CompilationCache, key: str, signature: Signature) -> tuple[Any, Callable[[], ir.Module]] | None:
    """The executable (loaded) and a parser of the post-pass module of the entry under `key`, or None."""
    entry = cache.get(key, len(signature.out_avals))
    if entry is None:
        return None
    devices = program_devices(signature)
    try:
        executable = load_executable(entry.executable, devices, entry.flags.options(devices))
    except Exception:  # noqa: BLE001 - an entry PJRT cannot load is a miss, and is replaced
        return None
    if (len(executable.get_parameter_layouts()), len(executable.get_output_layouts())) != (
            len(signature.param_avals), len(signature.out_avals)):
        return None
    cache.record(hit=True)
    return executable, lambda: parse_module(entry.module)
