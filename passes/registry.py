"""The table of hlopt's passes and named pipelines.

Names map to the module that defines the pass; modules are imported only when
a pipeline names the pass (or `--list-passes` asks), so `hlopt-opt` starts fast.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Mapping, Sequence
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
    "tpu": ("tpu-folded-solves", "tpu-sparse-products", "tpu-summed-batch-dots"),
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

# The annotation-lowering passes of `hlopt-default`, in the order they run; ORDER says why.
DEFAULT_LOWERINGS = ("jet-collapse", "jet-expand", "xla-cpu-sparse-kernels", "tpu-sparse-products", "lower-bcoo",
                     "vjp-expand", "lower-custom-partitioning")

# The tuning passes of `hlopt-default` (`hlopt.passes.xla_cpu`, `hlopt.passes.tpu`), in the order they run;
# ORDER says why. Without them `hlopt-default` computes the same values, and for a target other than
# their platform (or none) they leave the module as it is.
DEFAULT_TUNING = ("tpu-folded-solves", "tpu-summed-batch-dots", "xla-cpu-gather-blocks", "xla-cpu-summed-batch-dots",
                  "xla-cpu-sum-as-dot", "xla-cpu-update-in-place", "xla-cpu-dot-operand-order", "xla-cpu-join-dot-sums",
                  "xla-cpu-column-selects", "xla-cpu-transposed-dots", "xla-cpu-small-dots")
CPU_TUNING = tuple(name for name in DEFAULT_TUNING if name.startswith("xla-cpu-"))
# Tuning passes that `hlopt-default` leaves out, run only where a pipeline names them (ORDER places them there):
# xla-cpu-stack-dots' stacked dots, which XLA:CPU hands YNNPACK, raised the float32 error of a determinant
# wavefunction's weight gradient far above the untuned program's (test_xla_cpu_tuning).
OPT_IN_TUNING = ("xla-cpu-stack-dots",)


@dataclasses.dataclass(frozen=True)
class Before:
    """An order constraint of a pipeline: the first occurrence of each pass of `first` comes before
    the first occurrence of each pass of `then`, for the reason `why`."""

    first: str | tuple[str, ...]
    then: str | tuple[str, ...]
    why: str

    def pairs(self) -> list[tuple[str, str]]:
        """(earlier, later) for each pass of `first` and each of `then`."""
        first = (self.first,) if isinstance(self.first, str) else self.first
        then = (self.then,) if isinstance(self.then, str) else self.then
        return [(a, b) for a in first for b in then]


# What runs before what in `hlopt-default`, by the platform whose compiles the constraint matters for
# (`portable`: every compile). `check_order` holds a pipeline to it.
ORDER: dict[str, tuple[Before, ...]] = {
    "portable": (
        Before("jet-collapse", "jet-expand",
               "jet-collapse rewrites the directions-batched jets whose K-th coefficients are only summed, "
               "before jet-expand expands them"),
        Before("jet-expand", "vjp-expand", "a jet inside a differentiated function is expanded first"),
        Before("lower-bcoo", "vjp-expand", "sparse ops inside a differentiated function are plain StableHLO by then"),
        Before(tuple(n for n in DEFAULT_LOWERINGS if not n.startswith(tuple(PLATFORM_PREFIXES.values()))), "inline",
               "inline and cse see the plain semantic StableHLO the lowerings emit"),
    ),
    "cpu": (
        Before("xla-cpu-sparse-kernels", "lower-bcoo",
               "xla-cpu-sparse-kernels reads the sparse products' annotations, which lower-bcoo lowers"),
        Before(("inline", "cse"), (*CPU_TUNING, *OPT_IN_TUNING),
               "each tuning pass sees all the code it tunes (an hlopt operation's) in one function, with equal ops "
               "made one"),
        Before("cse", "xla-cpu-stack-dots", "equal dots are one before xla-cpu-stack-dots stacks them (stacked, XLA "
                                            "would compute the one twice)"),
        Before("xla-cpu-gather-blocks", ("xla-cpu-sum-as-dot", "xla-cpu-column-selects"),
               "the sums and scatter-adds of gathered rows that lower-bcoo emits go into xla-cpu-gather-blocks' "
               "loops before the others would rewrite them"),
        Before("xla-cpu-summed-batch-dots", "xla-cpu-sum-as-dot",
               "xla-cpu-sum-as-dot would make a sum over a product's batch dimension, which it contracts, a "
               "product with ones"),
        Before(("xla-cpu-stack-dots", "xla-cpu-summed-batch-dots", "xla-cpu-sum-as-dot", "xla-cpu-dot-operand-order",
                "xla-cpu-join-dot-sums"), "xla-cpu-transposed-dots",
               "xla-cpu-transposed-dots puts the dots the others make or reorder in the operand order YNNPACK takes"),
        Before("xla-cpu-transposed-dots", "xla-cpu-small-dots",
               "xla-cpu-small-dots takes the dots below YNNPACK's size, which xla-cpu-transposed-dots leaves alone"),
    ),
    "tpu": (
        Before("tpu-sparse-products", "lower-bcoo",
               "tpu-sparse-products reads the sparse products' annotations, which lower-bcoo lowers"),
    ),
}


def order_violations(pipeline: Sequence[str], order: Mapping[str, Sequence[Before]] = ORDER) -> list[str]:
    """What in `pipeline` (pass names in the order they run) breaks `order`: one line per pair of passes
    that both run but in the wrong order, naming the platform and the reason."""
    first_at: dict[str, int] = {}
    for i, name in enumerate(pipeline):
        first_at.setdefault(name, i)
    return [f"{later} runs before {earlier} ({platform}): {earlier} must run first, because {rule.why}"
            for platform, rules in order.items() for rule in rules for earlier, later in rule.pairs()
            if earlier in first_at and later in first_at and first_at[earlier] > first_at[later]]


def default_pipeline(lowerings: Sequence[str], tuning: Sequence[str]) -> str:
    """`hlopt-default`'s text for these lowerings and tuning passes (the registered ones, in this order);
    a ValueError listing each violation of ORDER."""
    names = ([name for name in lowerings if name in PASSES] + ["inline", "cse"]
             + [name for name in tuning if name in PASSES] + ["canonicalize", "cse", "symbol-dce"])
    problems = order_violations(names)
    if problems:
        raise ValueError("hlopt-default breaks the pass order (hlopt.passes.registry.ORDER):\n  "
                         + "\n  ".join(problems))
    return ",".join(names)


# pipeline name -> pipeline text; `hlopt-default` makes any annotated module compilable.
PIPELINES: dict[str, str] = {"hlopt-default": default_pipeline(DEFAULT_LOWERINGS, DEFAULT_TUNING)}
# `hlopt-default`'s text with its opt-in tuning passes (OPT_IN_TUNING) too; as the text of a pipeline, it runs on
# the whole module.
WITH_OPT_IN_TUNING = default_pipeline(DEFAULT_LOWERINGS, (*OPT_IN_TUNING, *DEFAULT_TUNING))

# The passes of `hlopt-default` that read the program's code around an annotation, so run on the whole
# module: before its operations are made plain, jet-collapse (which folds the program's sum over a jet's
# directions into the jet); after, lower-custom-partitioning (which propagates shardings through the program).
WHOLE_MODULE_BEFORE = ("jet-collapse",)
WHOLE_MODULE_LOWERINGS = ("lower-custom-partitioning",)
# Named pipelines that run on each hlopt operation of a module in a module of its own, as the plain-JAX lowering
# rule runs them on the one operation jax hands it (`hlopt.compiler.operations`), so that the passes, tuning
# included, see the same code under `hlopt.jit` and `jax.jit`; name -> what runs on the whole module before and
# after. The pipeline's text given in place of its name runs on the whole module, the program's own code included.
PER_OPERATION: dict[str, tuple[str, str]] = {
    "hlopt-default": (",".join(WHOLE_MODULE_BEFORE), ",".join((*WHOLE_MODULE_LOWERINGS, "symbol-dce")))}


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
