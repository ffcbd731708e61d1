"""`hlopt-default` runs its passes in the order `hlopt.passes.registry.ORDER` declares, with its opt-in
tuning passes too, and a pipeline that breaks a constraint is refused with the constraint's reason."""

from __future__ import annotations

import pytest

from hlopt.passes import registry
from hlopt.passes.registry import (DEFAULT_LOWERINGS, DEFAULT_TUNING, ORDER, PIPELINES, WITH_OPT_IN_TUNING,
                                   Before, default_pipeline)
from hlopt.passes.target import PORTABLE

DEFAULT = PIPELINES["hlopt-default"].split(",")
WITH_OPT_IN = WITH_OPT_IN_TUNING.split(",")
CONSTRAINTS = [(platform, rule, pair) for platform, rules in ORDER.items() for rule in rules for pair in rule.pairs()]


def test_hlopt_default_keeps_every_constraint():
    assert registry.order_violations(DEFAULT) == []
    for _, _, (earlier, later) in CONSTRAINTS:
        assert WITH_OPT_IN.index(earlier) < WITH_OPT_IN.index(later), (earlier, later)


@pytest.mark.parametrize("platform,rule,pair", CONSTRAINTS, ids=[f"{a}<{b}" for _, _, (a, b) in CONSTRAINTS])
def test_each_constraint_names_passes_that_run_and_belong_to_its_platform(platform, rule, pair):
    assert rule.why and not rule.why.endswith(".")
    for name in pair:
        assert name in WITH_OPT_IN, f"{name} of a constraint does not run in hlopt-default or its opt-in tuning"
    platforms = {registry.get_pass_class(n).platforms for n in pair if registry.is_pass(n)}
    if platform != "portable":
        assert any(platform in p for p in platforms), f"no pass of {pair} is for {platform}"
    else:
        assert all(p == PORTABLE for p in platforms), f"a portable constraint names a platform pass: {pair}"


def _swapped(names: tuple[str, ...], a: str, b: str) -> list[str]:
    order = list(names)
    i, j = order.index(a), order.index(b)
    order[i], order[j] = order[j], order[i]
    return order


SWAPPABLE = [(rule, a, b) for _, rule, (a, b) in CONSTRAINTS
             if {a, b} <= set(DEFAULT_TUNING) or {a, b} <= set(DEFAULT_LOWERINGS)]


@pytest.mark.parametrize("rule,earlier,later", SWAPPABLE, ids=[f"{a}<{b}" for _, a, b in SWAPPABLE])
def test_swapping_a_constrained_pair_is_refused_with_the_reason(rule, earlier, later):
    lowerings, tuning = list(DEFAULT_LOWERINGS), list(DEFAULT_TUNING)
    if earlier in tuning:
        tuning = _swapped(DEFAULT_TUNING, earlier, later)
    else:
        lowerings = _swapped(DEFAULT_LOWERINGS, earlier, later)
    with pytest.raises(ValueError, match="breaks the pass order") as info:
        default_pipeline(lowerings, tuning)
    assert f"{later} runs before {earlier}" in str(info.value) and rule.why in str(info.value)


def test_a_tuning_pass_moved_before_inline_is_refused():
    names = DEFAULT[:]
    names.remove("xla-cpu-sum-as-dot")
    names.insert(0, "xla-cpu-sum-as-dot")
    problems = registry.order_violations(names)
    assert any(p.startswith("xla-cpu-sum-as-dot runs before inline (cpu)") for p in problems)
    assert any(p.startswith("xla-cpu-sum-as-dot runs before cse (cpu)") for p in problems)


def test_an_opt_in_tuning_pass_before_cse_is_refused():
    problems = registry.order_violations(["xla-cpu-stack-dots", *DEFAULT])
    assert any(p.startswith("xla-cpu-stack-dots runs before cse (cpu)") for p in problems)


def test_a_constraint_on_passes_that_do_not_both_run_holds():
    rule = Before("xla-cpu-gather-blocks", "not-in-the-pipeline", "scratch")
    assert registry.order_violations(["not-in-the-pipeline"], {"cpu": (rule,)}) == []
    assert registry.order_violations(["not-in-the-pipeline", "xla-cpu-gather-blocks"], {"cpu": (rule,)}) == [
        "not-in-the-pipeline runs before xla-cpu-gather-blocks (cpu): xla-cpu-gather-blocks must run first, "
        "because scratch"]
