"""The table of hlopt's passes and named pipelines.

Names map to the module that defines the pass; modules are imported only when
a pipeline names the pass (or `--list-passes` asks), so `hlopt-opt` starts fast.
"""

from __future__ import annotations

import importlib
from typing import Any

from hlopt.passes.base import Pass

# The passes, by the folder under hlopt.passes that holds their module. A pass's name gives its
# module and class: `jet-expand` is `autodiff.jet_expand.JetExpand`; a platform's passes drop
# their prefix (`xla-cpu-stack-dots` is `xla_cpu.stack_dots.StackDots`, `tpu-sparse-products`
# is `tpu.sparse_products.SparseProducts`).
PASS_FOLDERS = {
    "analyses": ("check-key-reuse",),
    "autodiff": ("jet-collapse", "jet-expand", "vjp-expand"),
    "partitioning": ("lower-custom-partitioning",),
    "sparse": ("lower-bcoo",),
    "xla_cpu": ("xla-cpu-column-selects", "xla-cpu-dot-operand-order", "xla-cpu-gather-blocks",
                "xla-cpu-join-dot-sums", "xla-cpu-small-dots", "xla-cpu-sparse-kernels", "xla-cpu-stack-dots",
                "xla-cpu-sum-as-dot", "xla-cpu-summed-batch-dots", "xla-cpu-transposed-dots",
                "xla-cpu-update-in-place", "xla-cpu-ynn-fusion"),
    "tpu": ("tpu-folded-solves", "tpu-sparse-products"),
}
# a platform folder -> the prefix of its passes' names
PLATFORM_PREFIXES = {"xla_cpu": "xla-cpu-", "tpu": "tpu-"}
PASS_NAMES = tuple(sorted(name for names in PASS_FOLDERS.values() for name in names))


def _module_and_class(folder: str, name: str) -> tuple[str, str]:
    """(module under hlopt.passes, class name) of the pass `name` in `folder`."""
    stem = name.removeprefix(PLATFORM_PREFIXES.get(folder, ""))
    return f"{folder}.{stem.replace('-', '_')}", "".join(word.capitalize() for word in stem.split("-"))


# pass name -> (module under hlopt.passes, class name)
PASSES: dict[str, tuple[str, str]] = {
    name: _module_and_class(folder, name) for folder, names in PASS_FOLDERS.items() for name in names}

# The annotation-lowering passes of `hlopt-default`, in the order they run (jet-collapse
# rewrites directions-batched jets whose K-th coefficients are only summed before they expand).
# vjp-expand runs after jet-expand (a jet inside a differentiated function is expanded
# first) and after lower-bcoo (sparse ops inside one are plain StableHLO by then).
# xla-cpu-sparse-kernels and tpu-sparse-products run before lower-bcoo: they read the sparse products'
# annotations (and, as every platform pass, rewrite only a module compiled for their platform:
# `Pass.platforms`).
DEFAULT_LOWERINGS = ("jet-collapse", "jet-expand", "xla-cpu-sparse-kernels", "tpu-sparse-products", "lower-bcoo",
                     "vjp-expand", "lower-custom-partitioning")

# The XLA:CPU tuning passes of `hlopt-default` (`hlopt.passes.xla_cpu`), in the order they run:
# after the lowerings, which emit plain semantic StableHLO, and after `inline`, so each sees
# the whole program in one function, and after `cse`, so that equal dots are one before
# xla-cpu-stack-dots stacks (stacked, XLA would compute the one twice). Without them
# `hlopt-default` computes the same values, and for a target other than CPU (or none) they
# leave the module as it is. xla-cpu-gather-blocks runs first: the sums and
# scatter-adds of gathered rows that lower-bcoo emits are in the loops it makes before
# xla-cpu-sum-as-dot or xla-cpu-column-selects would rewrite them. xla-cpu-summed-batch-dots runs before
# xla-cpu-sum-as-dot, which would make the sums over a product's batch dimension it contracts
# products with ones. xla-cpu-transposed-dots runs after the
# passes that make or reorder dots and before xla-cpu-small-dots, whose products (all sizes below 8)
# it leaves alone. xla-cpu-ynn-fusion runs last: it weighs
# the reductions the others leave (xla-cpu-sum-as-dot makes many of them dots) and only records
# a compile option on the module. tpu-folded-solves runs after `cse`, which makes one the
# equal transposes and reshapes that fold the right-hand sides of a factor's solves.
DEFAULT_TUNING = ("tpu-folded-solves", "xla-cpu-gather-blocks", "xla-cpu-stack-dots", "xla-cpu-summed-batch-dots", "xla-cpu-sum-as-dot",
                  "xla-cpu-update-in-place", "xla-cpu-dot-operand-order", "xla-cpu-join-dot-sums", "xla-cpu-column-selects",
                  "xla-cpu-transposed-dots", "xla-cpu-small-dots", "xla-cpu-ynn-fusion")

# pipeline name -> pipeline text; `hlopt-default` makes any annotated module compilable.
PIPELINES: dict[str, str] = {
    "hlopt-default": ",".join(
        [name for name in DEFAULT_LOWERINGS if name in PASSES] + ["inline", "cse"]
        + [name for name in DEFAULT_TUNING if name in PASSES] + ["canonicalize", "cse", "symbol-dce"]
    ),
}


def get_pass_class(name: str) -> type[Pass]:
    module_name, class_name = PASSES[name]
    module = importlib.import_module(f"hlopt.passes.{module_name}")
    cls = getattr(module, class_name)
    assert cls.name == name, f"{module_name}.{class_name}.name is {cls.name!r}, registered as {name!r}"
    return cls


def is_pass(name: str) -> bool:
    return name in PASSES


def all_passes() -> dict[str, type[Pass]]:
    return {name: get_pass_class(name) for name in sorted(PASSES)}


# custom_call target (or prefix ending in '.') -> the pass that lowers it.
ANNOTATIONS: dict[str, str] = {
    "hlopt.bcoo.": "lower-bcoo",
    "hlopt.jet": "jet-expand",
    "hlopt.jet.stop_gradient": "jet-expand",
    "hlopt.jet.custom_jvp": "jet-expand",
    "hlopt.jet.linear_solve": "jet-expand",
    "hlopt.custom_partitioning": "lower-custom-partitioning",
    "hlopt.vjp": "vjp-expand",
}


def lowering_pass_for(target: str) -> str | None:
    """The pass that lowers the annotation `target`, or None if it is not ours."""
    for key, pass_name in ANNOTATIONS.items():
        if target == key or (key.endswith(".") and target.startswith(key)):
            return pass_name
    return None


def import_object(target: str) -> Any:
    """The object `module:qualname` names: `module` imported, then `qualname`'s attributes in turn.

    Raises ValueError for text of another form, ImportError if the module cannot
    be imported, AttributeError naming the attribute the module lacks.
    """
    module_name, sep, qualname = target.partition(":")
    if not module_name or not sep or not qualname:
        raise ValueError(f"'{target}' is not of the form module:qualname")
    obj = importlib.import_module(module_name)
    for attr in qualname.split("."):
        if not hasattr(obj, attr):
            raise AttributeError(f"'{module_name}' has no attribute '{qualname}'")
        obj = getattr(obj, attr)
    return obj
