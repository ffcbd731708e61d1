"""Lowering a JAX function to StableHLO in hlopt's MLIR context."""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import functools
import inspect
import operator
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import jax
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec

from hlopt.compiler.jax_compat import (
    Placement,
    arg_avals,
    build_module,
    closed_over_refs,
    compile_args,
    donated_inputs,
    locations_without,
    kept_inputs,
    lowering_placement,
    lower_per_platform,
    lowering_target,
    merge_module,
    weak_out_avals,
)
from hlopt.compiler.constant_operands import constant_positions, constants_module, use_constants
from hlopt.compiler.pipeline import run_pipeline
from hlopt.compiler.program import Signature, module_to_bytecode, parse_module
from hlopt.compiler.stages import PLAIN_PIPELINE, check_no_annotations
from hlopt.passes.ir.locations import format_location, hlopt_dirs
from hlopt.passes.mlir import func, get_context, ir
from hlopt.passes.target import Target, compiling_for
from hlopt.passes.ir.walk import call_target, walk_ops

_state = threading.local()


@contextlib.contextmanager
def annotations_allowed() -> Iterator[None]:
    """While active, hlopt's primitives may lower to `hlopt.*` annotations."""
    depth = getattr(_state, "depth", 0)
    _state.depth = depth + 1
    try:
        yield
    finally:
        _state.depth = depth


def annotations_enabled() -> bool:
    """True inside `hlopt.lower` / `hlopt.jit`; False inside plain `jax.jit`."""
    return getattr(_state, "depth", 0) > 0


# The plain StableHLO of each annotated operation module, per target it is made plain for, bytecode to bytecode, least recently used
# last: jax lowers the same operation again for each program that holds it (and grad, vmap and retracing repeat it).
_PLAIN_MEMO: collections.OrderedDict[tuple[Target, bytes], bytes] = collections.OrderedDict()
_PLAIN_MEMO_SIZE = 128
_plain_memo_lock = threading.Lock()


def clear_plain_memo() -> None:
    """Forget the operations made plain so far (benchmarks measure a first lowering with it)."""
    with _plain_memo_lock:
        _PLAIN_MEMO.clear()


def _plain_bytecode(module: ir.Module, target: Target) -> bytes:
    """The bytecode of the annotated `module` (in hlopt's context) after `PLAIN_PIPELINE`, run for
    `target`, which may rewrite `module` in place; memoized on the target and the module's bytecode."""
    key = (target, module_to_bytecode(module))
    with _plain_memo_lock:
        if key in _PLAIN_MEMO:
            _PLAIN_MEMO.move_to_end(key)
            return _PLAIN_MEMO[key]
    meshes = any(op.operation.name == "sdy.mesh" for op in module.body.operations)
    # jax's module names its meshes only once it is lowered whole: the sharding attributes of the
    # operation carry theirs inline, as those of jax's module do until then.
    with compiling_for(target):
        run_pipeline(module, PLAIN_PIPELINE + (",sdy-inline-meshes" if meshes else ""))
    check_no_annotations(module)
    for op in walk_ops(module.operation, "stablehlo.custom_call"):
        if call_target(op).startswith("hlopt."):
            raise ValueError(f"{format_location(op.location)}: error: custom_call @{call_target(op)} is an hlopt "
                             f"annotation that no pass of '{PLAIN_PIPELINE}' lowers, so XLA cannot compile it")
    plain = module_to_bytecode(module)
    with _plain_memo_lock:
        _PLAIN_MEMO[key] = plain
        while len(_PLAIN_MEMO) > _PLAIN_MEMO_SIZE:
            _PLAIN_MEMO.popitem(last=False)
    return plain


def program_precision() -> str | None:
    """The precision (`hlopt.passes.target.PRECISIONS`) jax gives the products of a program it lowers
    now (`jax.default_matmul_precision`); None when it sets none, or names a dot algorithm instead."""
    config = jax.config.jax_default_matmul_precision
    try:
        return None if config is None else jax.lax.Precision(config).name
    except ValueError:  # an algorithm preset ('F32_F32_F32', ...): not a precision
        return None


def target_of_lowering(ctx: Any, platform: str, native_kernels: bool = False) -> Target:
    """What the module that the lowering rule context `ctx` lowers into is compiled for, on `platform`,
    one of the platforms jax lowers it for: in this process under `jax.jit` lowering for that platform
    alone (where hlopt's CPU kernels may be called if `native_kernels`, they are built), elsewhere for
    `jax.export` or a lowering for several platforms, with the precision jax lowers the program's
    products with."""
    target = lowering_target(ctx)
    local = not target.for_export and target.platforms == (platform,)
    return Target((platform,), local=local, kernels=native_kernels, precision=program_precision())


def lower_as_plain_stablehlo(ctx: Any, fun: Callable[..., Any], operands: Sequence[ir.Value], name: str,
                             prepare: Callable[[str, bytes], None] | None = None,
                             native_kernels: bool = False) -> list[ir.Value]:
    """Lower `fun` of `ctx.avals_in` as plain StableHLO into the module that jax is lowering.

    This is how an hlopt operation lowers under plain `jax.jit` / `jax.export`:
    `fun` is lowered on its own in annotation form, for the same platform and
    devices as the enclosing program, with the operands that jax's module computes
    from constants computed there too; `PLAIN_PIPELINE` rewrites every annotation
    into StableHLO in hlopt's context; the result is merged into jax's module
    (as jax merges a called `jax.export` artifact) and called with `operands`.

    The passes run for each platform jax lowers for, as `hlopt.jit` runs them
    (`target_of_lowering`). A program lowered for several platforms at once
    (`jax.export(..., platforms=...)`) calls one function where the platforms'
    programs agree, and otherwise chooses among them by the platform it runs on,
    as jax's own rules with per-platform lowerings do. Under `jax.jit`,
    `prepare(platform, plain bytecode)` is called first, to register with XLA
    what the custom calls of hlopt's runtime need before jax compiles them; a
    `jax.export` artifact calls none. (`native_kernels`: whether hlopt's CPU
    kernels are built, for the passes).
    """
    target = lowering_target(ctx)
    avals = [jax.ShapeDtypeStruct(a.shape, a.dtype, weak_type=a.weak_type) for a in ctx.avals_in]
    closed = jax.make_jaxpr(fun)(*avals)
    positions = constant_positions(operands)
    constants = None
    if positions:  # what is constant in jax's module is constant for the passes too
        with target.context, ir.Location.unknown():
            constants = module_to_bytecode(constants_module(operands, positions))

    def plain_for(platform: str) -> bytes:
        with annotations_allowed():  # lowered straight into hlopt's context, where the passes run
            annotated = build_module(closed, name=name, platform=platform, axis_context=target.axis_context,
                                     context=get_context())
        if constants is not None:
            use_constants(annotated, parse_module(constants), list(positions))
        compiled_for = target_of_lowering(ctx, platform, native_kernels)
        plain = _plain_bytecode(annotated, compiled_for)
        if compiled_for.local and prepare is not None:
            prepare(platform, plain)
        return plain

    by_program: dict[bytes, list[str]] = {}
    for platform in target.platforms:
        by_program.setdefault(plain_for(platform), []).append(platform)

    def call(plain: bytes) -> Callable[..., list[ir.Value]]:
        def rule(ctx: Any, *operands: ir.Value) -> list[ir.Value]:
            with target.context:
                module = ir.Module.parse(plain)
                for op in list(module.body.operations):
                    if op.operation.name != "func.func":  # meshes, now inlined where they are used
                        op.operation.erase()
                main = ir.SymbolTable(module.operation)["main"]
                result_types = list(main.type.results)
                callee = merge_module(ctx, name=name, module=module)
                return list(func.CallOp(result_types, ir.FlatSymbolRefAttr.get(callee), list(operands)).results)
        return rule

    # The program most platforms share is the default; each other platform gets its own.
    programs = sorted(by_program, key=lambda plain: -len(by_program[plain]))
    per_platform = {platform: call(plain) for plain in programs[1:] for platform in by_program[plain]}
    return list(lower_per_platform(ctx, description=name, platform_rules=per_platform,
                                   default_rule=call(programs[0]), operands=operands))


def _named(mesh: Mesh | None, shardings: Any) -> Any:
    """PartitionSpecs (and None, with a mesh) become NamedShardings on `mesh`."""
    if shardings is None or mesh is None:
        return shardings

    def convert(s):
        if s is None:
            return NamedSharding(mesh, PartitionSpec())
        if isinstance(s, PartitionSpec):
            return NamedSharding(mesh, s)
        return s

    return jax.tree_util.tree_map(
        convert, shardings, is_leaf=lambda s: s is None or isinstance(s, PartitionSpec)
    )


def _typed_by_sharding(dynamic: tuple[Any, ...], shardings: Any) -> tuple[Any, ...]:
    """`dynamic` with each argument that carries no sharding typed by its in_sharding on an Explicit mesh.

    With Explicit axes a sharding is part of an array's type, so `jax.jit`
    traces an argument placed with `P('x')` as sharded and keeps its outputs
    sharded; a host array would be traced as replicated and its outputs
    gathered. hlopt compiles the program for arguments placed as
    `in_shardings` say, whatever the example values are.
    """
    is_leaf = lambda s: s is None or isinstance(s, (jax.sharding.Sharding, PartitionSpec))  # noqa: E731
    if is_leaf(shardings):
        shardings = (shardings,) * len(dynamic)  # one sharding for every argument
    shardings, treedef = jax.tree_util.tree_flatten(tuple(shardings), is_leaf=is_leaf)
    try:
        per_sharding = treedef.flatten_up_to(dynamic)
    except ValueError:
        return dynamic  # in_shardings does not fit the arguments: jax.jit says so
    typed = [jax.tree_util.tree_map(functools.partial(_typed, sharding=s), sub)
             for s, sub in zip(shardings, per_sharding)]
    return jax.tree_util.tree_unflatten(treedef, typed)


def _typed(x: Any, sharding: Any) -> Any:
    explicit = isinstance(sharding, NamedSharding) and AxisType.Explicit in tuple(sharding.mesh.axis_types)
    if not explicit or (isinstance(x, jax.Array) and x.committed):
        return x  # jax.jit checks a committed array against its in_sharding itself
    if isinstance(x, jax.ShapeDtypeStruct):
        if x.sharding is not None:
            return x
        return jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sharding, weak_type=x.weak_type)
    aval = jax.typeof(x)
    return jax.ShapeDtypeStruct(aval.shape, aval.dtype, sharding=sharding, weak_type=aval.weak_type)


def _placement(name: str, placement: Placement) -> tuple[Mesh | None, jax.Device | None]:
    """The mesh, or the committed device, of a program lowered without `mesh=`, as `jax.jit` placed it.

    Arguments sharded over a mesh, sharding constraints or shard_maps over one
    in the body, or a mesh set with `jax.set_mesh` put the program on that mesh;
    arguments committed to one device put it there.
    """
    devices = placement.devices
    if devices is None or len(devices) == 1:
        return None, devices[0] if devices and placement.committed else None
    context = jax.sharding.get_mesh()
    shardings = placement.in_shardings + placement.out_shardings + placement.intermediate_shardings
    meshes = [s.mesh for s in shardings if isinstance(s, NamedSharding)]
    for mesh in meshes + ([] if context.empty else [context]):
        if isinstance(mesh, Mesh) and tuple(mesh.devices.flat) == devices:
            return mesh, None
    raise ValueError(
        f"{name}: the arguments place the program on {len(devices)} devices but not through a "
        "NamedSharding over a Mesh; pass mesh= (and in_shardings=) to hlopt.lower / hlopt.jit"
    )


def check_static_argnums(fun: Callable, static_argnums: Any) -> tuple[int, ...]:
    """`static_argnums` as a tuple of ints, checked against `fun`'s signature as `jax.jit` checks it.

    An index must name one of `fun`'s positional parameters (any non-negative
    index is allowed when `fun` takes `*args`); a signature Python cannot
    inspect is not checked.
    """
    argnums = _index_tuple(static_argnums)
    try:
        params = inspect.signature(fun).parameters.values()
    except (TypeError, ValueError):
        return argnums
    if any(p.kind is inspect.Parameter.VAR_POSITIONAL for p in params):
        return argnums
    positional = sum(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in params)
    if argnums and (-min(argnums) > positional or max(argnums) >= positional):
        raise ValueError(f"{getattr(fun, '__name__', fun)} has static_argnums={argnums}, "
                         f"but only accepts {positional} positional arguments")
    return argnums


def resolve_static_argnums(static_argnums: Sequence[int], num_args: int) -> tuple[int, ...]:
    """The positions of a call with `num_args` arguments that are static, sorted, as `jax.jit` resolves them.

    An index past the end names no argument and is dropped (a function with
    `*args` may be called with fewer); a negative index counts from the end and
    must name an argument.
    """
    resolved = set()
    for i in static_argnums:
        if i >= num_args:
            continue
        if i < -num_args:
            raise ValueError(
                "static_argnums must be at least -len(args) and less than len(args), "
                f"but got {i} for a call with {num_args} arguments")
        resolved.add(i % num_args)
    return tuple(sorted(resolved))


def argnums_and_argnames(fun: Callable, argnums: Any, argnames: Any, what: str) -> tuple[tuple[int, ...], tuple[str, ...]]:
    """`static_argnums`/`static_argnames` (or the donate pair, named by `what`), the one not given
    completed from the other through `fun`'s signature, as `jax.jit` completes them: a parameter
    that may be passed by position or by keyword is then named by both."""
    argnums = check_static_argnums(fun, argnums) if what == "static" else _index_tuple(argnums)
    argnames = (argnames,) if isinstance(argnames, str) else tuple(argnames)
    if argnums and argnames:
        return argnums, argnames
    try:
        params = list(inspect.signature(fun).parameters.values())
    except (TypeError, ValueError):
        return argnums, argnames
    either = [(i, p.name) for i, p in enumerate(params) if p.kind is p.POSITIONAL_OR_KEYWORD]
    argnums += tuple(i for i, name in either if name in argnames and i not in argnums)
    argnames += tuple(name for i, name in either if i in argnums and name not in argnames)
    return argnums, argnames


def _index_tuple(value: Any) -> tuple[int, ...]:
    try:
        return (operator.index(value),)
    except TypeError:
        return tuple(map(operator.index, value))


@dataclasses.dataclass(frozen=True)
class JitOptions:
    """What `hlopt.jit` / `hlopt.lower` pass on to the tracing of a function (`jax.jit`'s own options)."""

    mesh: Mesh | None = None
    in_shardings: Any = None
    out_shardings: Any = None
    static_argnums: tuple[int, ...] = ()
    static_argnames: tuple[str, ...] = ()
    donate_argnums: tuple[int, ...] = ()
    donate_argnames: tuple[str, ...] = ()
    keep_unused: bool = False


def _jit_kwargs(options: JitOptions, static_argnums: tuple[int, ...]) -> dict[str, Any]:
    """The keyword arguments of `jax.jit` that `options` stand for, with these `static_argnums`."""
    jit_kwargs: dict[str, Any] = {"static_argnums": static_argnums, "static_argnames": options.static_argnames,
                                  "donate_argnums": options.donate_argnums,
                                  "donate_argnames": options.donate_argnames,
                                  "keep_unused": options.keep_unused}
    if options.in_shardings is not None:
        jit_kwargs["in_shardings"] = _named(options.mesh, options.in_shardings)
    if options.out_shardings is not None:
        jit_kwargs["out_shardings"] = _named(options.mesh, options.out_shardings)
    return jit_kwargs


def _fresh(fun: Callable) -> Callable:
    """A new function calling `fun`: jax's caches, keyed on the function, never mix hlopt's lowerings
    (annotation form) with those of jax's own `jax.jit(fun)`."""
    @functools.wraps(fun)
    def wrapped(*a, **k):
        return fun(*a, **k)

    return wrapped


def jax_jitted(fun: Callable, options: JitOptions, compiler_options: dict[str, Any] | None) -> Callable | None:
    """`jax.jit` of `fun` with `options` and XLA's `compiler_options`: the program each call compiles is
    the one `Lowered.host_compile` compiles for a program with host callbacks (each hlopt operation made
    plain by its lowering rule), dispatched by jax itself. None with a `mesh=`, which jax.jit takes
    from `jax.set_mesh` around the call instead."""
    if options.mesh is not None:
        return None
    return jax.jit(_fresh(fun), **_jit_kwargs(options, tuple(options.static_argnums)),
                   compiler_options=compiler_options)


def lower_function(fun: Callable, args: tuple[Any, ...], kwargs: dict[str, Any], options: JitOptions
                   ) -> tuple[ir.Module, Signature, Callable[[], Any] | None, Callable[[], ir.Module]]:
    """Trace `fun` at `args` and `kwargs` (arrays or ShapeDtypeStructs) and lower it to StableHLO.

    The module is JAX's, in JAX's context: `Lowered` moves it into hlopt's when
    it is first needed there (a persistent-cache hit never needs it). The third
    result is None, or, for a program with host callbacks or side effects, a
    function compiling it with XLA's options as `jax.jit` does, which returns jax's compiled program and the
    module it compiled (`Lowered.host_compile`). The fourth lowers it again with
    source locations that leave out hlopt's frames, as jax's leave out its own (`Lowered.user_located`).
    """
    mesh, in_shardings = options.mesh, options.in_shardings
    static_argnums = resolve_static_argnums(options.static_argnums, len(args))
    jit_kwargs = _jit_kwargs(options, static_argnums)
    dynamic = tuple(a for i, a in enumerate(args) if i not in static_argnums)
    if in_shardings is not None:  # else, as jax.jit: committed arguments keep their shardings, others replicate
        typed = iter(_typed_by_sharding(dynamic, jit_kwargs["in_shardings"]))
        args = tuple(a if i in static_argnums else next(typed) for i, a in enumerate(args))

    def lower_with_jax() -> Any:
        with jax.set_mesh(mesh) if mesh is not None else contextlib.nullcontext():
            return jax.jit(_fresh(fun), **jit_kwargs).lower(*args, **kwargs)

    with annotations_allowed():
        lowered = lower_with_jax()

    if closed_over_refs(lowered):
        raise ValueError(
            f"{getattr(fun, '__name__', fun)} closes over {closed_over_refs(lowered)} mutable array(s) "
            "(jax.new_ref), which hlopt cannot compile into a program of its arguments: pass the array as an "
            "argument and return its new value, or use jax.jit")
    host_compile = None
    compile_options = compile_args(lowered)
    if compile_options.get("ordered_effects") or compile_options.get("host_callbacks"):
        def host_compile(compiler_options: dict[str, Any] | None) -> tuple[Any, ir.Module]:
            again = lower_with_jax()  # each hlopt operation made plain StableHLO
            return again.compile(compiler_options), again.compiler_ir("stablehlo")
    module = lowered.compiler_ir("stablehlo")
    in_avals = arg_avals(lowered)
    kept = kept_inputs(lowered)
    out_avals = tuple(jax.core.ShapedArray(a.shape, a.dtype, weak_type=a.weak_type) for a in weak_out_avals(lowered))
    device = None
    if mesh is None:
        mesh, device = _placement(getattr(fun, "__name__", "fun"), lowering_placement(lowered))
    signature = Signature(
        in_tree=lowered.in_tree,
        in_avals=in_avals,
        out_tree=lowered.out_tree,
        out_avals=out_avals,
        static_args=tuple((i, args[i]) for i in static_argnums),
        mesh=mesh,
        use_shardy=bool(jax.config.jax_use_shardy_partitioner),
        name=getattr(fun, "__name__", "fun"),
        device=device,
        in_names=input_names(fun, args, kwargs, static_argnums, options.static_argnames, len(in_avals)),
        kept=None if len(kept) == len(in_avals) else kept,
        donated=donated_inputs(lowered),
    )
    def user_located() -> ir.Module:
        with locations_without(hlopt_dirs()), annotations_allowed():
            return lower_with_jax().compiler_ir("stablehlo")

    return module, signature, host_compile, user_located


def input_names(fun: Callable, args: Sequence[Any], kwargs: dict[str, Any], static_argnums: Sequence[int],
                static_argnames: Sequence[str], count: int) -> tuple[str, ...]:
    """Each dynamic input leaf named by `fun`'s parameter and its path in that argument (`params['W1']`, `x`).

    Arguments beyond the named parameters are `args[i]`, keyword arguments their keyword (in jax's sorted
    order); empty if the names do not cover `count` leaves.
    """
    try:
        params = [p for p in inspect.signature(fun).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        params = []
    named = [(params[i].name if i < len(params) else f"args[{i}]", arg)
             for i, arg in enumerate(args) if i not in static_argnums]
    named += [(k, kwargs[k]) for k in sorted(kwargs) if k not in static_argnames]
    names = [base + jax.tree_util.keystr(path)
             for base, arg in named for path, _ in jax.tree_util.tree_flatten_with_path(arg)[0]]
    return tuple(names) if len(names) == count else ()
