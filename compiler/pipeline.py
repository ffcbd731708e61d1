"""Parse and run pipelines that mix hlopt's Python passes with upstream passes.

A pipeline is a comma-separated list of elements. An element is an hlopt pass
(`lower-bcoo`, `lower-custom-partitioning{target=gspmd}`), a named pipeline
(`hlopt-default`), or anything MLIR's textual pipeline parser accepts
(`canonicalize`, `func.func(chlo-legalize-to-stablehlo)`,
`sdy-propagation-pipeline`). All elements run in one MLIR `PassManager`; the
Python passes are added to it with `PassManager.add(callable, name)`.
"""

from __future__ import annotations

import dataclasses
import re
import sys
from collections.abc import Callable

from hlopt.passes import registry
from hlopt.passes.base import Pass, PassError, PassOptionError
from hlopt.passes.locations import call_chain, format_location
from hlopt.passes.mlir import get_context, inliner_unavailable, ir, passmanager


class PipelineError(ValueError):
    """A pipeline could not be parsed or a pass failed; one line, with the location.

    `notes` holds the `note:` lines of the call chain behind that location.
    """

    def __init__(self, message: str, notes: list[str] | tuple[str, ...] = ()):
        super().__init__(message)
        self.notes = list(notes)


@dataclasses.dataclass(frozen=True)
class Element:
    """One pipeline element: a Python pass instance or upstream pipeline text."""

    text: str
    python_pass: Pass | None = None


@dataclasses.dataclass
class PipelineResult:
    """What running a pipeline left besides the rewritten module."""

    ir_after: list[tuple[str, str]] = dataclasses.field(default_factory=list)

    def dump(self, index: int) -> str:
        """The IR after pass `index`, headed as mlir-opt's --mlir-print-ir-after-all heads it."""
        name, text = self.ir_after[index]
        return f"// -----// IR Dump After {name} //----- //\n{text}\n"


def split_top_level(text: str) -> list[str]:
    """Split at commas that are outside (), {} and quotes."""
    parts, depth, current, quote = [], 0, [], False
    for ch in text:
        if ch == '"':
            quote = not quote
        elif not quote and ch in "({":
            depth += 1
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
    return [p for p in parts if p]


def parse_pipeline(text: str) -> list[Element]:
    """The elements of `text`, with named pipelines expanded."""
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
            elements.extend(parse_pipeline(registry.PIPELINES[name]))
        elif registry.is_pass(name):
            if rest and not rest.endswith("}"):
                raise PipelineError(f"malformed options in '{part}'")
            try:
                cls = registry.get_pass_class(name)
                elements.append(Element(part, cls.from_options(rest[:-1] if rest else "")))
            except PassOptionError as e:
                raise PipelineError(str(e)) from None
        else:
            with get_context():
                try:
                    passmanager.PassManager.parse(f"builtin.module({part})")
                except ValueError as e:
                    raise PipelineError(_unknown_pass_message(part, e)) from None
            if _INLINE.search(part) and inliner_unavailable():
                raise PipelineError(
                    f"'{part}' needs the func dialect's inliner interface, which this jaxlib does not "
                    f"provide ({inliner_unavailable()}); without it 'inline' would leave every call "
                    "in place. Install the pinned jaxlib, or drop 'inline' from the pipeline"
                )
            elements.append(Element(part))
    return elements


_INLINE = re.compile(r"(?<![\w-])inline(?![\w-])")


def _unknown_pass_message(part: str, err: Exception) -> str:
    first = str(err).strip().splitlines()
    detail = first[0] if first else ""
    if "does not refer to a registered pass" in str(err):
        return f"unknown pass or pipeline '{part}' (hlopt-opt --list-passes shows hlopt's passes)"
    return f"cannot parse pipeline element '{part}': {detail}"


def _python_pass_runner(p: Pass, errors: list[BaseException]) -> Callable:
    def run(op, pass_):
        try:
            p.apply(op.operation if hasattr(op, "operation") else op)
        except BaseException as e:  # noqa: BLE001 - re-raised after PassManager.run
            errors.append(e)
            pass_.signal_pass_failure()

    return run


def _recorder(name: str, result: PipelineResult) -> Callable:
    def record(op, pass_):
        result.ir_after.append((name, str(op)))
        sys.stderr.write(result.dump(-1))  # as it runs, as mlir-opt does: a later failure keeps it

    return record


def run_pipeline(
    module: ir.Module,
    pipeline: str,
    *,
    print_ir_after_all: bool = False,
    timing: bool = False,
    verify: bool = True,
) -> PipelineResult:
    """Run `pipeline` on `module` in place and return the IR after each element.

    With `print_ir_after_all`, the IR after each element is also written to
    stderr as soon as the element has run (mlir-opt's `--mlir-print-ir-after-all`).
    """
    elements = parse_pipeline(pipeline)
    result = PipelineResult()
    errors: list[BaseException] = []
    ctx = module.context
    with ctx:
        pm = passmanager.PassManager("builtin.module")
        pm.enable_verifier(verify)
        if timing:
            pm.enable_timing()
        for el in elements:
            if el.python_pass is not None:
                pm.add(_python_pass_runner(el.python_pass, errors), el.python_pass.name)
            else:
                pm.add(el.text)
            if print_ir_after_all:
                pm.add(_recorder(el.text, result), "hlopt-record-ir")
        try:
            pm.run(module.operation)
        except ir.MLIRError as e:
            if errors:
                raise _as_pipeline_error(errors[0]) from errors[0]
            raise mlir_pipeline_error(e) from None
        if errors:
            raise _as_pipeline_error(errors[0]) from errors[0]
    return result


def _as_pipeline_error(err: BaseException) -> Exception:
    if isinstance(err, (PassError, PipelineError)):
        return PipelineError(str(err), getattr(err, "notes", ()))
    if isinstance(err, ir.MLIRError):
        return mlir_pipeline_error(err)
    return err  # a bug in a pass: keep its type and traceback


def format_mlir_error(err: ir.MLIRError) -> str:
    """One line per diagnostic: `file:line:col: error: message`."""
    lines = []
    for diag in getattr(err, "error_diagnostics", []) or []:
        lines.append(f"{format_location(diag.location)}: error: {diag.message}")
    if not lines:
        lines.append(str(err).strip().splitlines()[0])
    return "\n".join(lines)


def mlir_pipeline_error(err: ir.MLIRError) -> PipelineError:
    """`err` (a parse or verifier failure) as a PipelineError, with its call chains as notes."""
    notes = [n for diag in getattr(err, "error_diagnostics", []) or [] for n in call_chain(diag.location)]
    return PipelineError(format_mlir_error(err), notes)
