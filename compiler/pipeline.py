"""Parse and run pipelines that mix hlopt's Python passes with upstream passes.

A pipeline is a comma-separated list of elements. An element is an hlopt pass
(`lower-bcoo`, `lower-custom-partitioning{target=gspmd}`), a named pipeline
(`hlopt-default`), or anything MLIR's textual pipeline parser accepts
(`canonicalize`, `func.func(chlo-legalize-to-stablehlo)`,
`sdy-propagation-pipeline`). All elements run in one MLIR `PassManager`; the
Python passes are added to it with `PassManager.add(callable, name)`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import re
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence

from hlopt.compiler.operations import lower_operations
from hlopt.passes import registry
from hlopt.passes.base import Pass, PassError, PassOptionError
from hlopt.passes.ir.locations import call_chain, did_you_mean, error_line, format_location, shorten
from hlopt.passes.mlir import get_context, inliner_unavailable, ir, passmanager
from hlopt.passes.ir.walk import call_graph_problem
from hlopt.passes.target import current_target


# Bounds on a pipeline string, far above any real pipeline, so that absurd ones fail fast.
MAX_PIPELINE_CHARS = 100_000
MAX_PIPELINE_ELEMENTS = 1_000
MAX_PIPELINE_NESTING = 32


class PipelineError(ValueError):
    """A pipeline could not be parsed or a pass failed; one line, with the location.

    `notes` holds the `note:` lines of the call chain behind that location.

    Example:
      >>> import jax.numpy as jnp
      >>> import hlopt
      >>> try:
      ...     hlopt.lower(lambda x: x, jnp.ones(1)).apply("no-such-pass")
      ... except hlopt.PipelineError as e:
      ...     print(str(e).split(" (")[0])
      unknown pass or pipeline 'no-such-pass'
    """

    __module__ = "hlopt"  # raised and printed as users import it

    def __init__(self, message: str, notes: list[str] | tuple[str, ...] = ()):
        super().__init__(message)
        self.notes = list(notes)

    def __str__(self) -> str:
        return shorten(super().__str__())


@dataclasses.dataclass(frozen=True)
class Element:
    """One pipeline element: a Python pass instance or upstream pipeline text."""

    text: str
    python_pass: Pass | None = None
    per_operation: tuple[Element, ...] | None = None  # run on each hlopt operation (`registry.PER_OPERATION`)


@dataclasses.dataclass
class PipelineResult:
    """What running a pipeline left besides the rewritten module."""

    ir_after: list[tuple[str, str]] = dataclasses.field(default_factory=list)

    def dump(self, index: int) -> str:
        """The IR after pass `index`, headed as mlir-opt's --mlir-print-ir-after-all heads it."""
        name, text = self.ir_after[index]
        return f"// -----// IR Dump After {name} //----- //\n{text}\n"


def split_top_level(text: str) -> list[str]:
    """Split at commas that are outside (), {} and quotes; an empty entry is an error (`cse,,inline`)."""
    parts, depth, current, quote = [], 0, [], False
    for ch in text:
        if ch == '"':
            quote = not quote
        elif not quote and ch in "({":
            depth += 1
            if depth > MAX_PIPELINE_NESTING:
                raise PipelineError(f"pipeline nested more than {MAX_PIPELINE_NESTING} levels deep: '{text}'")
        elif not quote and ch in ")}":
            depth -= 1
            if depth < 0:
                raise PipelineError(f"unbalanced '{ch}' in pipeline '{text}'")
        if ch == "," and depth == 0 and not quote:
            parts.append("".join(current).strip())
            current = []
        else:
            current.append(ch)
    if depth != 0:
        raise PipelineError(f"unbalanced brackets in pipeline '{text}'")
    parts.append("".join(current).strip())
    if parts == [""]:
        return []
    if "" in parts:
        raise PipelineError(f"empty entry {parts.index('') + 1} in pipeline '{text}': remove the extra ','")
    return parts


def parse_pipeline(text: str) -> list[Element]:
    """The elements of `text`, with named pipelines expanded."""
    if len(text) > MAX_PIPELINE_CHARS:
        raise PipelineError(f"pipeline of {len(text)} characters; hlopt takes at most {MAX_PIPELINE_CHARS}")
    elements = _parse_elements(text)
    count = _count(elements)
    if count > MAX_PIPELINE_ELEMENTS:
        raise PipelineError(f"pipeline of {count} passes; hlopt runs at most {MAX_PIPELINE_ELEMENTS}")
    return elements


def _parse_elements(text: str) -> list[Element]:
    text = text.strip()
    if text.startswith("builtin.module(") and text.endswith(")"):
        text = text[len("builtin.module(") : -1]
    elements: list[Element] = []
    for part in split_top_level(text):
        name, _, rest = part.partition("{")
        name = name.strip()
        if name in registry.PIPELINES:
            if rest:
                raise PipelineError(f"pipeline '{name}' takes no options")
            if name in registry.PER_OPERATION:
                before, after = registry.PER_OPERATION[name]
                elements.extend(_parse_elements(before))
                elements.append(Element(name, per_operation=tuple(_parse_elements(registry.PIPELINES[name]))))
                elements.extend(_parse_elements(after))
            else:
                elements.extend(_parse_elements(registry.PIPELINES[name]))
        elif registry.is_pass(name):
            if rest and not rest.endswith("}"):
                raise PipelineError(f"malformed options in '{part}'")
            try:
                cls = registry.get_pass_class(name)
                elements.append(Element(part, cls.from_options(rest[:-1] if rest else "")))
            except PassOptionError as e:
                raise PipelineError(str(e)) from None
        else:
            _check_upstream(part)
            if _INLINE.search(part) and inliner_unavailable():
                raise PipelineError(
                    f"'{part}' needs the func dialect's inliner interface, which this jaxlib does not "
                    f"provide ({inliner_unavailable()}); without it 'inline' would leave every call "
                    "in place. Install the pinned jaxlib, or drop 'inline' from the pipeline"
                )
            elements.append(Element(part))
        if _count(elements) > MAX_PIPELINE_ELEMENTS:
            break
    return elements


def _count(elements: Sequence[Element]) -> int:
    """The passes `elements` run, those each hlopt operation runs counted once."""
    return sum(1 + len(el.per_operation or ()) for el in elements)


_INLINE = re.compile(r"(?<![\w-])inline(?![\w-])")
# Names that may only stand at the top level of a pipeline: hlopt's Python passes run on the whole module.
_WORDS = re.compile(r"[A-Za-z0-9_.-]+")
# `inline{default-pipeline=...}`: MLIR parses this option only when the pass runs, and then ignores errors.
_DEFAULT_PIPELINE = re.compile(r"\bdefault-pipeline=")


def _check_upstream(part: str) -> None:
    """Refuse a pipeline element MLIR's parser rejects, or that would fail silently when run."""
    nested = [w for w in _WORDS.findall(part) if registry.is_pass(w) or w in registry.PIPELINES]
    if nested:
        raise PipelineError(
            f"'{nested[0]}' is an hlopt pass or pipeline: it runs on the whole module and cannot be nested "
            f"in '{part}'; put it at the top level of the pipeline"
        )
    inner = next((w for w in _WORDS.findall(_in_options(part)) if _is_upstream_pipeline(w)), None)
    if inner:
        raise PipelineError(f"'{inner}' is a pass pipeline: it cannot be given in the options of '{part}'; "
                            "put it in the pipeline itself")
    _check_pipelines_nested(part, part)
    _parse_upstream(part, f"builtin.module({part})")
    for match in _DEFAULT_PIPELINE.finditer(part):
        value = _option_value(part, match.end())
        if value:  # empty: no simplification
            _parse_upstream(part, f"builtin.module(func.func({value}))",
                            f"its default-pipeline '{value}': ")


def _check_pipelines_nested(part: str, element: str, under: str = "builtin.module") -> None:
    """Refuse an upstream pass pipeline (`sdy-propagation-pipeline`) in `part` nested under an operation other
    than `builtin.module`. MLIR's parser refuses a pass nested where it cannot run, but a pipeline adds its
    passes unchecked, and one under the wrong operation (`canonicalize(sdy-propagation-pipeline)`) aborts
    the process."""
    head, paren, inner = part.partition("(")
    if paren and "{" not in head:  # `op.name(...)`: a pipeline nested under an operation
        for nested in split_top_level(inner.rpartition(")")[0]):
            _check_pipelines_nested(nested, element, head.strip())
        return
    name = part.partition("{")[0].strip()
    if under != "builtin.module" and _is_upstream_pipeline(name):
        raise PipelineError(f"'{name}' is a pass pipeline: hlopt runs one only at the module level, not nested "
                            f"under '{under}' in '{element}'; put it at the top level of the pipeline")


@functools.lru_cache(maxsize=4096)
def _is_upstream_pipeline(name: str) -> bool:
    """Whether `name` is a pipeline MLIR's registry knows: it adds passes with other names.

    Parsed inside `any(...)`, whose pass manager is bound to no operation, so
    no pass it adds can abort it."""
    with get_context(), native_stderr():
        try:
            printed = str(passmanager.PassManager.parse(f"any({name})"))
        except ValueError:
            return False
    return [entry.partition("{")[0] for entry in split_top_level(printed[len("any("):-1])] != [name]


def _in_options(part: str) -> str:
    """The text of `part` inside option braces (`{...}`), nested pipelines' options included."""
    depth, inside = 0, []
    for ch in part:
        depth -= ch == "}"
        if depth > 0:
            inside.append(ch)
        depth += ch == "{"
    return "".join(inside)


def _option_value(text: str, start: int) -> str:
    """The option value that starts at `start`: up to a space, ',' or closing bracket outside brackets."""
    depth, quote = 0, False
    for i in range(start, len(text)):
        ch = text[i]
        if ch == '"':
            quote = not quote
        elif quote:
            continue
        elif ch in "({":
            depth += 1
        elif ch in ")}" and depth:
            depth -= 1
        elif ch in " ,)}" and not depth:
            return text[start:i].strip('"')
    return text[start:].strip('"')


def _parse_upstream(part: str, pipeline: str, what: str = "") -> None:
    """Parse `pipeline` with MLIR; an error (also one MLIR only prints) is a PipelineError about `part`."""
    with get_context(), native_stderr() as printed:
        try:
            passmanager.PassManager.parse(pipeline)
            error = None
        except ValueError as e:
            error = e
    detail = _mlir_detail(printed[0], error)
    if error is None and not detail:
        return
    unknown = re.match(r"'(.*)' does not refer to a registered pass", detail)
    if unknown:
        where = "" if unknown.group(1) == part else f" in '{part}'"
        known = [*registry.PASSES, *registry.PIPELINES, *_registered_upstream()]
        raise PipelineError(f"unknown pass or pipeline '{unknown.group(1)}'{where}"
                            f"{did_you_mean(unknown.group(1), known)} (hlopt-opt --list-passes shows hlopt's passes)")
    raise PipelineError(f"cannot parse pipeline element '{part}': {what}{detail}")


# Upstream passes a misspelling is compared with, those of them this jaxlib registers (MLIR's
# bindings cannot list the registered passes): MLIR's transforms, and StableHLO's, CHLO's and
# Shardy's passes hlopt's docs name.
UPSTREAM_PASSES = ("canonicalize", "cse", "inline", "symbol-dce", "symbol-privatize", "sccp",
                   "loop-invariant-code-motion", "control-flow-sink", "remove-dead-values", "strip-debuginfo",
                   "topological-sort", "mem2reg", "sroa", "print-ir", "chlo-legalize-to-stablehlo",
                   "sdy-propagation-pipeline", "stablehlo-aggressive-simplification",
                   "stablehlo-aggressive-folder", "shape-legalize-to-stablehlo")


@functools.cache
def _registered_upstream() -> tuple[str, ...]:
    """The names of `UPSTREAM_PASSES` that MLIR parses here (at the module level or in a function)."""
    registered = []
    for name in UPSTREAM_PASSES:
        for pipeline in (f"builtin.module({name})", f"builtin.module(func.func({name}))"):
            with get_context(), native_stderr():
                try:
                    passmanager.PassManager.parse(pipeline)
                except ValueError:
                    continue
            registered.append(name)
            break
    return tuple(registered)


def _mlir_detail(printed: str, error: Exception | None) -> str:
    """The first error line MLIR printed or raised, without its prefixes."""
    for text in (printed, str(error or "")):
        for line in text.splitlines():
            line = line.strip()
            if "error:" in line:
                return line.split("error:", 1)[1].strip()
            if line.startswith(": for the"):  # LLVM's option parser: ": for the --x option: ..."
                return line[2:]
    lines = str(error or "").strip().splitlines()
    return lines[0] if lines else ""


@contextlib.contextmanager
def native_stderr() -> Iterator[list[str]]:
    """Collect what native code writes to file descriptor 2 meanwhile (MLIR prints some errors there).

    Yields a list that holds the text once the block ends. Writes to stderr
    from other threads in the meantime are collected too.
    """
    sys.stderr.flush()
    saved = os.dup(2)
    collected: list[str] = []
    with tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), 2)
        try:
            yield collected
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            collected.append(tmp.read().decode("utf-8", "replace"))


def _python_runner(apply: Callable[[ir.Operation], None], errors: list[BaseException]) -> Callable:
    """A PassManager callback running `apply` on the module; its exception is kept in `errors`."""
    def run(op, pass_):
        try:
            apply(op.operation if hasattr(op, "operation") else op)
        except BaseException as e:  # noqa: BLE001 - re-raised after PassManager.run
            errors.append(e)
            pass_.signal_pass_failure()

    return run


def _per_operation(elements: Sequence[Element], verify: bool) -> Callable[[ir.Operation], None]:
    """Run `elements` on each hlopt operation of a module, in a module of its own."""
    return lambda module: lower_operations(module, lambda isolated: _run_elements(isolated, elements, verify=verify))


def _recorder(name: str, result: PipelineResult, echo: bool) -> Callable:
    def record(op, pass_):
        result.ir_after.append((name, str(op)))
        if echo:
            sys.stderr.write(result.dump(-1))  # as it runs, as mlir-opt does: a later failure keeps it

    return record


def _clock(name: str, progress: Callable[[str, float], None], last: list[float]) -> Callable:
    def tick(op, pass_):
        now = time.perf_counter()
        progress(name, now - last[0])
        last[0] = now

    return tick


# hlopt's own bookkeeping passes, run between the pipeline's elements: the time report leaves them out
RECORD_IR = "hlopt-record-ir"
PROGRESS = "hlopt-progress"
_TIMING_ROW = re.compile(r"^(\s*)((?:\d+\.\d+ \(\s*\d+\.\d+%\)\s+)+)(\S.*)$")  # columns, then the name
_TIMING_CELL = re.compile(r"(\d+\.\d+) \(\s*\d+\.\d+%\)(\s+)")


def without_bookkeeping(report: str) -> str:
    """MLIR's time `report` with the rows of RECORD_IR and PROGRESS counted in its `Rest` row (the time
    outside the pipeline's passes) rather than listed."""
    rows = [(line, _TIMING_ROW.match(line.rstrip("\n"))) for line in report.splitlines(keepends=True)]

    def seconds(row: re.Match) -> list[float]:
        return [float(cell[1]) for cell in _TIMING_CELL.finditer(row[2])]

    hidden = [seconds(row) for _, row in rows if row and row[3] in (RECORD_IR, PROGRESS)]
    totals = next((seconds(row) for _, row in rows if row and row[3] == "Total"), None)
    out = []
    for line, row in rows:
        if row and row[3] in (RECORD_IR, PROGRESS):
            continue
        if row and row[3] == "Rest" and totals:
            rest = [sum(column) for column in zip(seconds(row), *hidden)]
            gaps = [cell[2] for cell in _TIMING_CELL.finditer(row[2])]
            cells = "".join(f"{t:.4f} ({100 * t / total if total else 0:5.1f}%){gap}"
                            for t, total, gap in zip(rest, totals, gaps))
            line = f"{row[1]}{cells}Rest\n"
        out.append(line)
    return "".join(out)


def run_pipeline(
    module: ir.Module,
    pipeline: str,
    *,
    collect_ir: bool = False,
    print_ir_after_all: bool = False,
    timing: bool = False,
    verify: bool = True,
    progress: Callable[[str, float], None] | None = None,
) -> PipelineResult:
    """Run `pipeline` on `module` in place; the result holds the IR after each element if asked.
    A module whose calls no pass could expand (`check_calls`) is refused first.

    `collect_ir` keeps the IR after each element in the result; `print_ir_after_all`
    keeps it and also writes it to stderr as soon as the element has run (mlir-opt's
    `--mlir-print-ir-after-all`). `timing` writes MLIR's time report of the passes to
    stderr. `progress(element, seconds)` is called as each element finishes. A pass for other platforms than
    the target's (`hlopt.passes.target.compiling_for`) leaves the module as it is.
    """
    return _run_elements(module, parse_pipeline(pipeline), collect_ir=collect_ir,
                         print_ir_after_all=print_ir_after_all, timing=timing, verify=verify, progress=progress)


def _run_elements(module: ir.Module, elements: Sequence[Element], *, collect_ir: bool = False,
                  print_ir_after_all: bool = False, timing: bool = False, verify: bool = True,
                  progress: Callable[[str, float], None] | None = None) -> PipelineResult:
    """`run_pipeline` of the parsed `elements`."""
    last = [0.0]
    check_calls(module)
    _check_shardy_entry(module, elements)
    result = PipelineResult()
    errors: list[BaseException] = []
    target = current_target()
    ctx = module.context
    with ctx:
        pm = passmanager.PassManager("builtin.module")
        pm.enable_verifier(verify)
        if timing:
            pm.enable_timing()
        for el in elements:
            if el.python_pass is not None:
                if target.runs(el.python_pass.platforms, el.python_pass.calls_runtime):
                    pm.add(_python_runner(el.python_pass.apply, errors), el.python_pass.name)
            elif el.per_operation is not None:
                pm.add(_python_runner(_per_operation(el.per_operation, verify), errors), el.text)
            else:
                pm.add(el.text)
            if collect_ir or print_ir_after_all:
                pm.add(_recorder(el.text, result, echo=print_ir_after_all), RECORD_IR)
            if progress is not None:
                pm.add(_clock(el.text, progress, last), PROGRESS)
        failure = None
        last[0] = time.perf_counter()
        try:
            pm.run(module.operation)
        except ir.MLIRError as e:
            failure = e
        finally:
            if timing:
                with native_stderr() as printed:  # MLIR prints the time report as the pass manager goes
                    del pm
                sys.stderr.write(without_bookkeeping(printed[0]))
        if errors:  # raised outside the handler, so that the context _as_pipeline_error sets stays
            raise _as_pipeline_error(errors[0]) from None
        if failure is not None:
            raise mlir_pipeline_error(failure) from None
    return result


# A word of a pipeline element that names one of Shardy's passes or pipelines.
_SHARDY = re.compile(r"(?<![\w.-])sdy-[\w-]+")


def _check_shardy_entry(module: ir.Module, elements: list[Element]) -> None:
    """Refuse to run Shardy's passes on a module without a public function: several of them look up the
    module's entry (its first public function, else @main) and abort the process when there is none."""
    shardy = next((match[0] for el in elements if el.python_pass is None for match in [_SHARDY.search(el.text)]
                   if match), None)
    if shardy is None:
        return
    public = [op for op in module.body.operations if op.operation.name == "func.func"
              and ("sym_visibility" not in op.attributes
                   or ir.StringAttr(op.attributes["sym_visibility"]).value == "public")]
    if not public:
        raise PipelineError(f"'{shardy}' needs an entry function, a public func.func such as @main, in the "
                            "module, and this module has none: Shardy's passes start from it")


def check_calls(module: ir.Module) -> None:
    """Refuse (PipelineError, at the call) a module with a function that calls itself, directly or through
    others, or that grows past walk.MAX_INLINED_OPS once its calls are inlined: the passes and XLA expand
    every call, and would never end or run out of memory."""
    problem = call_graph_problem(module)
    if problem is not None:
        with module.context:
            raise PipelineError(error_line(format_location(problem[0].location), problem[1]))


def _as_pipeline_error(err: BaseException) -> BaseException:
    """A pass's diagnostic as a PipelineError (the pass's frames kept only as its hidden context); another
    exception, a bug in a pass, as it is, with its type and traceback."""
    if isinstance(err, (PassError, PipelineError)):
        converted = PipelineError(str(err), getattr(err, "notes", ()))
    elif isinstance(err, ir.MLIRError):
        converted = mlir_pipeline_error(err)
    else:
        return err
    converted.__context__ = err  # `raise ... from None` keeps it out of the printed traceback
    return converted


def format_mlir_error(err: ir.MLIRError) -> str:
    """One line per diagnostic: `file:line:col: error: message`."""
    lines = []
    for diag in getattr(err, "error_diagnostics", []) or []:
        lines.append(error_line(format_location(diag.location), diag.message))
    if not lines:
        lines.append(str(err).strip().splitlines()[0])
    return "\n".join(lines)


def mlir_pipeline_error(err: ir.MLIRError) -> PipelineError:
    """`err` (a parse or verifier failure) as a PipelineError, with its call chains as notes."""
    notes = [n for diag in getattr(err, "error_diagnostics", []) or [] for n in call_chain(diag.location)]
    return PipelineError(format_mlir_error(err), notes)
