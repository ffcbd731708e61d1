"""`Compiled`: a loaded PJRT executable called with the function's pytrees."""

from __future__ import annotations

import operator
import os
import re
from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np
from jax.sharding import NamedSharding, SingleDeviceSharding

from hlopt.compiler.jax_compat import api_boundary, key_shape, output_aval, partition_spec, prng_impl, result_handler
from hlopt.compiler.program import Signature, same_value
from hlopt.compiler.stages import CompiledStage
from hlopt.passes.ir.locations import shorten
from hlopt.passes.mlir import ir
from hlopt.runtime.dispatch import cpp_function


class Compiled(CompiledStage):
    """A compiled hlopt program (what `Lowered.compile`, `hlopt.load` and `hlopt.deserialize` return).

    Call it with the function's positional and keyword arguments (static positional arguments
    may be given, and must then equal the ones it was lowered with); it returns the function's
    output pytree of `jax.Array`s, sharded as the program says. `save` and `serialize` ship it as
    an executable file. It has `jax.stages.Compiled`'s attributes (`args_info`, `in_tree`,
    `out_info`, `input_shardings`, `cost_analysis()`...).

    Example:
      >>> import jax.numpy as jnp
      >>> import hlopt
      >>> compiled = hlopt.jit(lambda x: x * x).lower(jnp.ones(2)).compile()
      >>> compiled(jnp.array([2.0, 3.0])).tolist()
      [4.0, 9.0]
      >>> hlopt.deserialize(compiled.serialize())(jnp.array([4.0, 5.0])).tolist()
      [16.0, 25.0]
    """

    def __init__(self, executable: Any, signature: Signature, module: ir.Module | Callable[[], ir.Module],
                 pipeline: str, *, artifact: bytes | None = None):
        self.executable = executable
        self.signature = signature
        self._module = module  # or a function that parses it: loading need not parse what it may never use
        self.pipeline = pipeline
        self.artifact = artifact  # the module as a StableHLO portable artifact, when it came from a file
        self.devices: list[jax.Device] = list(executable.local_devices())
        mesh = signature.mesh
        if mesh is not None:
            self.devices = list(mesh.devices.flat)
        self.param_shardings = self._shardings(executable.get_parameter_shardings(), len(signature.param_avals))
        self.out_shardings = self._shardings(executable.get_output_shardings(), len(signature.out_avals))
        # One per input leaf: a leaf the program drops (keep_unused=False) is placed as nothing needs it.
        placed = dict(zip(signature.kept_inputs, self.param_shardings))
        self.in_shardings = [placed.get(i, self._shardings(None, 1)[0]) for i in range(len(signature.in_avals))]
        # As jax.jit's: outputs are committed unless the program runs where uncommitted inputs put it.
        self.committed = mesh is not None or signature.device is not None
        self._in_is_key = [_is_key(a.dtype) for a in signature.in_avals]
        self._out_is_key = [_is_key(a.dtype) for a in signature.out_avals]
        self._out_handlers = [result_handler(output_aval(_physical_aval(a), s), s, committed=self.committed)
                              for a, s in zip(signature.out_avals, self.out_shardings)]

        def run(*args: Any, **kwargs: Any) -> Any:  # a plain function: the C++ dispatch keys its cache on it
            return self._python_call(*args, **kwargs)

        # With static arguments a call may give them or not, which the C++ signature cannot express.
        self._call = run if signature.static_args else cpp_function(
            run, lambda *args, **kwargs: (run(*args, **kwargs), self))

    @property
    def module(self) -> ir.Module:
        """The post-pass StableHLO module this program was compiled from."""
        if callable(self._module):
            self._module = self._module()
        return self._module

    def _shardings(self, op_shardings: Sequence[Any] | None, count: int) -> list[jax.sharding.Sharding]:
        mesh = self.signature.mesh
        if mesh is None or op_shardings is None:
            return [SingleDeviceSharding(self.devices[0]) for _ in range(count)]
        return [NamedSharding(mesh, partition_spec(s, mesh)) for s in op_shardings]

    def __repr__(self) -> str:
        pipeline = f", after '{self.pipeline}'" if self.pipeline else ""
        return f"<hlopt.Compiled {self.signature.describe()}{pipeline}>"

    def serialize(self) -> bytes:
        """The bytes of this program's executable file; `hlopt.deserialize` reads them."""
        from hlopt.runtime.files import serialize

        return serialize(self)

    def save(self, path: str | os.PathLike) -> None:
        """Write this program's executable file to `path`; `hlopt.load` reads it."""
        from hlopt.runtime.files import save

        save(self, path)

    def as_text(self) -> str:
        """XLA's optimized HLO of the program (partitioned, for a mesh)."""
        return "\n\n".join(m.to_string() for m in self.executable.hlo_modules())

    def _dynamic_args(self, args: tuple[Any, ...]) -> tuple[Any, ...]:
        static = dict(self.signature.static_args)
        n_dynamic = len(self.signature.in_tree.children()[0].children())
        if not static or len(args) == n_dynamic:
            return args
        if len(args) != n_dynamic + len(static):
            raise TypeError(shorten(f"{_takes(self.signature, len(args))} (or {n_dynamic + len(static)} with the "
                                    "static ones)"))
        dynamic = []
        for i, a in enumerate(args):
            if i in static:
                if type(a) is not type(static[i]) or not same_value(a, static[i]):  # keyed by type, as jax.jit
                    raise ValueError(shorten(
                        f"{self.signature.name}: static argument {i} is {a!r} ({type(a).__name__}) but the "
                        f"program was compiled for {static[i]!r} ({type(static[i]).__name__}); lower it again"
                    ))
            else:
                dynamic.append(a)
        return tuple(dynamic)

    def _flatten_inputs(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Any]:
        """The argument leaves, checked against the avals the program was compiled for, as jax's `Compiled` checks them.

        A leaf must be an array or a Python scalar of the same shape and (jax's
        canonical) dtype; weak types are not told apart.
        """
        sig = self.signature
        leaves, tree = jax.tree_util.tree_flatten((self._dynamic_args(args), kwargs))
        if tree != sig.in_tree:
            raise TypeError(shorten(_structure_error(sig, self._dynamic_args(args), kwargs, tree)))
        for i, (leaf, aval) in enumerate(zip(leaves, sig.in_avals)):
            if isinstance(leaf, jax.core.Tracer):
                raise TypeError(f"{sig.name}: argument {i} is a traced value; a compiled program runs on "
                                "concrete arrays (use hlopt.jit inside jax transformations)")
            try:
                given = jax.typeof(leaf)  # jax's canonical dtype; a Python int out of range overflows
            except (TypeError, OverflowError) as e:
                raise type(e)(shorten(f"{sig.name}: argument {i}: {e}")) from None
            if given.shape != aval.shape or given.dtype != aval.dtype:
                raise TypeError(shorten(
                    f"{sig.name}: argument {i} is {_as_passed(leaf, given)} but the program was "
                    f"compiled for {_aval_name(aval.dtype, aval.shape)}"
                ))
        return leaves

    def call_flat(self, leaves: Sequence[Any]) -> Any:
        """Run on argument leaves already known to match the program's avals.

        Host values and uncommitted arrays are placed as the program needs; a
        committed array must already be placed so (jax.jit's rule).
        """
        arrays = []
        for i in self.signature.kept_inputs:
            leaf, aval, is_key, sharding = leaves[i], self.signature.in_avals[i], self._in_is_key[i], self.in_shardings[i]
            if not hasattr(leaf, "dtype"):
                leaf = np.asarray(leaf, dtype=aval.dtype)  # Python scalars, checked by _flatten_inputs
            if is_key:
                leaf = jax.random.key_data(leaf)  # the program takes the key's uint32 words
            if isinstance(leaf, jax.Array) and leaf.committed and not _placed_as(leaf, sharding):
                raise ValueError(shorten(
                    f"{self.signature.name}: argument {i} is committed to {_where(leaf.sharding)} but the "
                    f"program runs on {_where(sharding)}; move it with jax.device_put, or pass an "
                    "uncommitted array or a host value"
                ))
            if not (isinstance(leaf, jax.Array) and leaf.sharding == sharding):
                leaf = jax.device_put(leaf, sharding)
            arrays.append(leaf)
        per_output = self.executable.execute_sharded(arrays).disassemble_into_single_device_arrays()
        outs = []
        for shards, handler, is_key, aval in zip(per_output, self._out_handlers, self._out_is_key,
                                                 self.signature.out_avals):
            out = handler(shards)
            if is_key:
                out = jax.random.wrap_key_data(out, impl=prng_impl(aval.dtype))
            outs.append(out)
        return jax.tree_util.tree_unflatten(self.signature.out_tree, outs)

    @api_boundary  # an error below loses hlopt's frames
    def _python_call(self, *args: Any, **kwargs: Any) -> Any:
        return self.call_flat(self._flatten_inputs(args, kwargs))

    # Calling the instance calls `_call` with no Python frame of hlopt's in between (see JitFunction).
    __call__ = property(operator.attrgetter("_call"))


def _is_key(dtype: Any) -> bool:
    return jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key)


def _physical_aval(aval: Any) -> jax.core.ShapedArray:
    """The aval of the buffer that holds `aval` (typed keys are their uint32 words)."""
    if _is_key(aval.dtype):
        return jax.core.ShapedArray(tuple(aval.shape) + key_shape(aval.dtype), np.dtype(np.uint32))
    return jax.core.ShapedArray(tuple(aval.shape), aval.dtype, weak_type=aval.weak_type)


def _aval_name(dtype: Any, shape: Sequence[int]) -> str:
    return f"{_dtype_name(dtype)}{list(shape)}"


def _as_passed(leaf: Any, given: Any) -> str:
    """`leaf`'s type as the caller passed it (`int64[4, 3]`), with what jax makes of it when that differs."""
    own = getattr(leaf, "dtype", None)
    if own is None or _is_key(given.dtype) or np.dtype(own) == given.dtype:
        return _aval_name(given.dtype, given.shape)
    why = "" if jax.config.jax_enable_x64 else ": jax_enable_x64 is off"
    return f"{_aval_name(own, given.shape)} (which jax reads as {_dtype_name(given.dtype)}{why})"


def _dtype_name(dtype: Any) -> str:
    return getattr(dtype, "name", str(dtype))


def _placed_as(array: jax.Array, sharding: jax.sharding.Sharding) -> bool:
    try:
        return array.sharding.is_equivalent_to(sharding, array.ndim)
    except ValueError:  # shardings over different device sets
        return False


def _where(sharding: jax.sharding.Sharding) -> str:
    """A sharding as its devices and, over a mesh, its spec."""
    ids = sorted(d.id for d in sharding.device_set)
    where = f"device {ids[0]}" if len(ids) == 1 else f"devices {ids}"
    return f"{where} as {sharding.spec}" if isinstance(sharding, NamedSharding) else where



def _parameter_names(sig: Signature) -> list[str]:
    """The name of each dynamic positional parameter, read off its leaves' names (`args[i]` when unknown)."""
    names, start = [], 0
    for i, subtree in enumerate(sig.in_tree.children()[0].children()):
        leaves = sig.in_names[start:start + subtree.num_leaves]
        start += subtree.num_leaves
        names.append(re.match(r"args\[\d+\]|[^\[.]*", leaves[0]).group(0) if leaves else f"args[{i}]")
    return names


def _takes(sig: Signature, given: int) -> str:
    """`predict takes 2 arguments (w, x), 1 was given`."""
    names = _parameter_names(sig)
    return (f"{sig.name} takes {len(names)} argument{'' if len(names) == 1 else 's'} ({', '.join(names)}), "
            f"{given} {'was' if given == 1 else 'were'} given")


def _leaf_paths(tree: Any) -> list[str]:
    return [jax.tree_util.keystr(path) for path, _ in jax.tree_util.tree_flatten_with_path(tree)[0]]


def _structure_error(sig: Signature, args: tuple[Any, ...], kwargs: dict[str, Any], tree: Any) -> str:
    """What differs between the arguments given (of structure `tree`) and those the program
    was compiled for, named by parameter and path."""
    want_args, want_kwargs = sig.in_tree.children()
    if len(args) != len(want_args.children()):
        positional = set(_parameter_names(sig))
        by_name = [k for k in kwargs if k in positional]
        return _takes(sig, len(args)) + (f" (and {', '.join(by_name)} by keyword: the program takes "
                                         f"{'it' if len(by_name) == 1 else 'them'} by position)" if by_name else "")
    want_kw = jax.tree_util.tree_unflatten(want_kwargs, [0] * want_kwargs.num_leaves)
    missing, extra = sorted(set(want_kw) - set(kwargs)), sorted(set(kwargs) - set(want_kw))
    if missing or extra:
        return f"{sig.name}: " + "; ".join([f"missing keyword argument {', '.join(missing)}"] * bool(missing)
                                           + [f"unexpected keyword argument {', '.join(extra)}"] * bool(extra))
    wanted = [jax.tree_util.tree_unflatten(t, [0] * t.num_leaves) for t in want_args.children()] + list(want_kw.values())
    given = list(args) + [kwargs[k] for k in want_kw]
    for name, arg, want in zip(_parameter_names(sig) + list(want_kw), given, wanted):
        got, need = jax.tree_util.tree_structure(arg), jax.tree_util.tree_structure(want)
        if got == need:
            continue
        have, paths = _leaf_paths(arg), _leaf_paths(want)
        if paths == [""]:
            shown = ", ".join(name + p for p in have) or "no array"
            return f"{sig.name}: argument {name} is one array, but {shown} was given"
        if have == [""]:
            return (f"{sig.name}: argument {name} is one array, but the program was compiled for "
                    f"{', '.join(name + p for p in paths)}")
        missing, extra = [p for p in paths if p not in have], [p for p in have if p not in paths]
        if missing or extra:
            return f"{sig.name}: argument {name} " + " and ".join(
                [f"lacks {', '.join(name + p for p in missing)}"] * bool(missing)
                + [f"has {', '.join(name + p for p in extra)}, which the program was not compiled for"] * bool(extra))
        return f"{sig.name}: argument {name} has structure {got} but the program was compiled for {need}"
    return f"{sig.name}: arguments have structure {tree} but the program was compiled for {sig.in_tree}"
