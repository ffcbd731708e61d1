"""Render the pass reference, docs/passes.md, from hlopt's pass registry.

    python docs/gen_passes.py          # write docs/passes.md
    python docs/gen_passes.py --check  # exit 1 if docs/passes.md differs from what the code gives

Each registered pass contributes its summary (the docstring's first paragraph), what the
registry says of it (module, platforms, the annotations it lowers, its place in `hlopt-default` and
what it runs after and before, with the reasons), a table
of its options (one row per dataclass field, as `hlopt-opt --list-passes` shows it), and the
rest of its docstring, where indented blocks are the before/after IR. A pass whose docstring holds no example is
followed by its module's docstring, and by that of the module its patterns come from where that is another (a
rewrite the passes of several platforms share). Named pipelines end the page.
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import sys
import textwrap
from pathlib import Path

from hlopt.passes.base import ANNOTATIONS, Pass
from hlopt.passes.registry import DEFAULT_LOWERINGS, ORDER, PASSES, PER_OPERATION, PIPELINES, all_passes
from hlopt.passes.target import PORTABLE

PAGE = Path(__file__).resolve().parent / "passes.md"


def _options_table(cls: type[Pass]) -> list[str]:
    """One row per option: its name and values, default and meaning, as `hlopt-opt --list-passes` gives them."""
    fields = dataclasses.fields(cls)
    if not fields:
        return ["No options."]
    rows = ["| option | values | default | what |", "| --- | --- | --- | --- |"]
    for f, (spelled, default) in zip(fields, cls.options_help(), strict=True):
        name, _, values = spelled.partition("=")
        what = f.metadata.get("what") or ""
        values = values.replace("|", "\\|")  # a table cell's pipes, even in code
        rows.append(f"| `{name}` | `{values}` | `{default}` | {what} |")
    return ["\n".join(rows)]


def _paragraphs_and_blocks(text: str) -> list[str]:
    """Markdown for a docstring body: prose paragraphs as they are, indented blocks fenced as text."""
    lines = textwrap.dedent(text).strip("\n").splitlines()
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if not line.strip():
            i += 1
            continue
        if line.startswith(" "):
            block = []
            while i < len(lines) and (lines[i].startswith(" ") or not lines[i].strip()):
                block.append(lines[i])
                i += 1
            out.append("```text\n" + textwrap.dedent("\n".join(block)).strip("\n") + "\n```")
        else:
            para = []
            while i < len(lines) and lines[i].strip() and not lines[i].startswith(" "):
                para.append(lines[i].strip())
                i += 1
            out.append("\n".join(para))
    return out


def _split_docstring(doc: str) -> tuple[str, str]:
    """(summary: the first paragraph on one line, the rest)."""
    doc = inspect.cleandoc(doc or "")
    first, _, rest = doc.partition("\n\n")
    return " ".join(part.strip() for part in first.splitlines()), rest


def _shared_pattern_modules(cls: type[Pass]) -> list[str]:
    """The modules other than the pass's own that define the rules of its `PATTERNS`, if it has any."""
    patterns = getattr(cls, "PATTERNS", None)
    return sorted({p.rule.__module__ for p in getattr(patterns, "patterns", ())} - {cls.__module__})


def _facts(name: str, module: str, cls: type[Pass]) -> list[str]:
    """What the registry knows about a pass: where it is defined, its platforms, what it lowers, where it runs."""
    facts = [f"- defined in `passes/{module.replace('.', '/')}.py` as `{cls.__name__}`"]
    if tuple(cls.platforms) == PORTABLE:
        facts.append("- portable: runs for every platform, and for none")
    else:
        export = "; never for a `jax.export` artifact (it calls hlopt's runtime)" if cls.calls_runtime else ""
        facts.append(f"- platforms: {', '.join(f'`{p}`' for p in cls.platforms)} (a module compiled for another, "
                     f"or for none, is left as it is{export})")
    targets = [f"`@{t}*`" if t.endswith(".") else f"`@{t}`" for t, owner in ANNOTATIONS.items() if owner == name]
    if targets:
        facts.append(f"- lowers the annotations {', '.join(targets)}")
    steps = PIPELINES["hlopt-default"].split(",")
    if name in steps:
        kind = "a lowering" if name in DEFAULT_LOWERINGS else "a tuning pass, after `inline` and `cse`"
        facts.append(f"- runs in `hlopt-default`, step {steps.index(name) + 1} of {len(steps)} ({kind})")
    else:
        facts.append("- not in `hlopt-default`: name it in a pipeline")
    facts += _order_facts(name)
    return facts


def _order_facts(name: str) -> list[str]:
    """What the pass runs after and before in `hlopt-default`, and why (`ORDER`)."""
    facts = []
    for rules in ORDER.values():
        for rule in rules:
            first, then = ({rule.first} if isinstance(rule.first, str) else set(rule.first),
                           {rule.then} if isinstance(rule.then, str) else set(rule.then))
            for word, here, other in (("after", then, first), ("before", first, then)):
                if name in here:
                    listed = ", ".join(f"`{n}`" for n in sorted(other))
                    facts.append(f"- runs {word} {listed}: {rule.why}")
    return facts


def render() -> str:
    """The whole page."""
    parts = [
        "# Pass reference",
        "This page is generated from the passes' docstrings by `docs/gen_passes.py`; a test fails "
        "when it is stale. `hlopt-opt --list-passes` prints the same summaries and options. "
        "Options go in braces after the name: `jet-expand{func=f order=3}`.",
    ]
    for name, cls in all_passes().items():
        summary, rest = _split_docstring(cls.__doc__ or "")
        module = PASSES[name][0]
        parts += [f"## `{name}`", summary, "\n".join(_facts(name, module, cls))]
        parts += _options_table(cls)
        body = _paragraphs_and_blocks(rest) if rest.strip() else []
        if not any(p.startswith("```") for p in body):
            for module_name in [cls.__module__, *_shared_pattern_modules(cls)]:
                module_doc = sys.modules[module_name].__doc__ or ""
                body += _paragraphs_and_blocks(_split_docstring(module_doc)[1])
        parts += body
    parts.append("## Named pipelines")
    parts += [f"`{name}`: `{text}`" + (f" on each hlopt operation, in a module of its own (as the plain-JAX lowering "
                                       f"rule runs it, so that `hlopt.jit` and `jax.jit` compile the same program), "
                                       f"after `{PER_OPERATION[name][0]}` and before `{PER_OPERATION[name][1]}` on the "
                                       f"whole module; this text given in place of the name runs on the whole module, "
                                       f"the program's own code included"
                                       if name in PER_OPERATION else "")
              for name, text in sorted(PIPELINES.items())]
    return "\n\n".join(parts) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the committed page is stale")
    args = parser.parse_args()
    page = render()
    if args.check:
        if PAGE.read_text(encoding="utf-8") != page:
            print(f"{PAGE} is stale: run python docs/gen_passes.py", file=sys.stderr)
            return 1
        return 0
    PAGE.write_text(page, encoding="utf-8")
    print(f"wrote {PAGE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
