"""The tuning passes (XLA:CPU and TPU) explain themselves to a reader: each docstring names the backend behaviour
it serves and its benchmark, no comment or docstring carries run figures, and options have names a
user reads (a former spelling is refused with the new name)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from hlopt.compiler.pipeline import PipelineError, parse_pipeline
from hlopt.passes import registry
from hlopt.passes.base import PassOptionError
from hlopt.passes.xla_cpu.sum_as_dot import SumAsDot

ROOT = Path(__file__).resolve().parents[2]
# every platform folder's tuning passes (xla_cpu/, tpu/)
TUNING = [name for folder in registry.PLATFORM_PREFIXES for name in registry.PASS_FOLDERS[folder]]
# "Backend: <what the backend does>; benchmark: `bench/<file>.py ...`." in the class docstring
BACKEND = re.compile(r"Backend: [^;]+; benchmark: `(bench/\w+\.py)[^`]*`", re.S)
# benchmark figures and run history: "3x faster", "2.5 times slower", "12 ms", "load 13", "2-core",
# "measured with jaxlib ...", "16,000 sizes take seconds"
FIGURES = re.compile(r"\d+(\.\d+)? ?x (faster|slower)|\d+(\.\d+)? times (faster|slower)|\d+(\.\d+)? ?(ms|us|µs)\b"
                     r"|load (average )?\d|\d+-core machine|\bmeasured (with|on)\b|\btakes? (seconds|minutes)\b")


@pytest.mark.parametrize("name", TUNING)
def test_each_tuning_pass_names_the_backend_behaviour_and_its_benchmark(name):
    doc = " ".join((registry.get_pass_class(name).__doc__ or "").split())
    found = BACKEND.search(doc)
    assert found, f"{name}'s docstring lacks 'Backend: ...; benchmark: `bench/...`'"
    assert (ROOT / found.group(1)).is_file(), f"{name} names {found.group(1)}, which does not exist"


def test_no_code_comment_or_docstring_quotes_run_figures():
    hits = [f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
            for folder in ("passes", "runtime", "compiler", "python")
            for path in sorted((ROOT / folder).rglob("*")) if path.suffix in (".py", ".cc", ".h")
            for n, line in enumerate(path.read_text().splitlines(), 1) if FIGURES.search(line)]
    assert hits == [], "figures belong in bench/results/, not in code:\n" + "\n".join(hits)


@pytest.mark.parametrize("old,new", sorted(SumAsDot.renamed_options.items()))
def test_a_former_option_spelling_is_refused_naming_the_new_one(old, new):
    with pytest.raises(PassOptionError, match=f"option '{old}' is now called '{new}'"):
        SumAsDot.from_options(f"{old}=0")
    with pytest.raises(PipelineError, match=f"'{new}'"):
        parse_pipeline(f"xla-cpu-sum-as-dot{{{old}=0}}")


def test_the_new_option_names_set_the_options():
    p = SumAsDot.from_options("reduce-max-bytes=4096 split-large-sums=true reduce-max-square-terms=3")
    assert (p.reduce_max_bytes, p.split_large_sums, p.reduce_max_square_terms) == (4096, True, 3)
    assert str(p) == "xla-cpu-sum-as-dot{reduce-max-bytes=4096 split-large-sums=true reduce-max-square-terms=3}"


def test_a_misspelt_option_gets_a_did_you_mean():
    with pytest.raises(PassOptionError, match="no option 'reduce-max-byte' .*did you mean 'reduce-max-bytes'"):
        SumAsDot.from_options("reduce-max-byte=0")
    with pytest.raises(PassOptionError) as info:
        SumAsDot.from_options("colour=red")
    assert "did you mean" not in str(info.value) and "options: reduce-max-bytes" in str(info.value)
