"""hlopt-opt: the mlir-opt of hlopt. Parses a module, runs a pipeline, prints it."""

from __future__ import annotations

import argparse
import re
import sys
import textwrap

from hlopt.cli.errors import UsageError, VersionAction, run_main

SPLIT_MARKER = "// -----"
LIST_WIDTH = 100  # --list-passes wraps summaries at this many columns
ALLOW_IMPORT_HELP = ("import the module:qualname a custom_partitioning key names when no partitioner of this process "
                     "is registered under it (runs that module's code; never from the current directory)")


def _parser() -> argparse.ArgumentParser:
    from hlopt.passes.target import NONE, PLATFORMS

    p = argparse.ArgumentParser(prog="hlopt-opt", description=__doc__)
    p.add_argument("input", nargs="?", default="-", help="a .mlir file, or - for stdin")
    p.add_argument("-p", "--pipeline", default="", help="comma-separated passes, e.g. 'lower-bcoo,canonicalize'")
    p.add_argument("--platform", default=NONE, choices=(*PLATFORMS, NONE),
                   help="what the module will be compiled for: passes for other platforms leave it as it is "
                        "(default none: portable IR, no platform's tuning)")
    p.add_argument("-o", "--output", default="-", help="where to write the result (default stdout)")
    p.add_argument("--split-input-file", action="store_true", help="process each '// -----' chunk separately")
    p.add_argument("--print-ir-after-all", action="store_true", help="print the IR after each pass to stderr")
    p.add_argument("--timing", action="store_true", help="report the time of each pass on stderr")
    p.add_argument("--list-passes", action="store_true", help="list hlopt's passes and named pipelines")
    p.add_argument("--debug-info", action="store_true", help="print locations in the output")
    p.add_argument("--allow-import", action="store_true", help=ALLOW_IMPORT_HELP)
    p.add_argument("--verify-diagnostics", action="store_true",
                   help="check the errors against the input's '// expected-error@+N {{...}}' comments")
    p.add_argument("--debug", action="store_true", help="show Python tracebacks and the call chain of errors")
    p.add_argument("--version", action=VersionAction)
    return p


# --list-passes headings: tuning passes by their platform prefix, the passes that only report, the rest
ANALYSES_HEADING = "Analyses (report, change nothing)"
ANALYSES = ("check-key-reuse",)
LOWERINGS_HEADING = "Lowerings (make hlopt's annotations plain StableHLO)"
PLATFORM_HEADING = "For {} only (tuning and kernels; run for a module compiled for it, --platform)"


def _heading(name: str, platforms: tuple[str, ...], portable: tuple[str, ...]) -> str:
    """The heading `--list-passes` lists the pass `name`, declaring `platforms`, under (`portable`: what a
    semantic pass declares)."""
    if tuple(platforms) != portable:
        return PLATFORM_HEADING.format(", ".join(platforms))
    return ANALYSES_HEADING if name in ANALYSES else LOWERINGS_HEADING


def list_passes() -> str:
    """hlopt's passes grouped under headings, each with its first sentence and options, then the pipelines."""
    from hlopt.passes.registry import PIPELINES, all_passes
    from hlopt.passes.target import PORTABLE

    passes = all_passes()
    groups: dict[str, list[str]] = {LOWERINGS_HEADING: [], ANALYSES_HEADING: []}
    for name in passes:
        groups.setdefault(_heading(name, passes[name].platforms, PORTABLE), []).append(name)
    options = {name: cls.options_help() for name, cls in passes.items()}
    width = max(len(text) for text in [*passes, *(o for help_ in options.values() for o, _ in help_)]) + 2
    fill = textwrap.TextWrapper(LIST_WIDTH, subsequent_indent=" " * (width + 4), break_on_hyphens=False,
                                break_long_words=False)
    lines = []
    for heading, names in groups.items():
        lines.append(f"{heading}:")
        for name in names:
            lines.append(fill.fill(f"  {name:{width}s}  {passes[name].summary()}"))
            lines += [f"    {option:{width - 2}s}  (default {default})" for option, default in options[name]]
    lines.append("Pipelines:")
    for name, text in sorted(PIPELINES.items()):
        lines.append(f"  {name:{width}s}  {text}")  # one line, to copy
    return "\n".join(lines)


def read_source(path: str) -> bytes:
    """The bytes of the MLIR file `path` (`-`: stdin): a regular file (never a FIFO or a device, which could
    block or never end) of at most MAX_SOURCE_BYTES; UsageError otherwise."""
    from hlopt.compiler.parse_guard import MAX_SOURCE_BYTES
    from hlopt.passes.ir.locations import printable
    from hlopt.runtime.paths import read_regular

    if path == "-":
        stdin = getattr(sys.stdin, "buffer", None)  # a replaced sys.stdin may be text only
        data = stdin.read(MAX_SOURCE_BYTES + 1) if stdin else sys.stdin.read(MAX_SOURCE_BYTES + 1).encode()
        if len(data) > MAX_SOURCE_BYTES:
            raise UsageError(f"cannot read stdin: larger than the {MAX_SOURCE_BYTES} bytes hlopt reads")
        return data
    try:
        return read_regular(path, MAX_SOURCE_BYTES)
    except (OSError, ValueError) as e:
        raise UsageError(f"cannot read '{printable(path)}': {getattr(e, 'strerror', None) or e}") from None


def _read(path: str) -> tuple[str, str]:
    from hlopt.compiler.parse_guard import decode_source

    filename = "<stdin>" if path == "-" else path
    return decode_source(read_source(path), filename), filename


def _chunks(text: str, split: bool) -> list[tuple[str, int]]:
    """The pieces to process and the line each starts on (0-based)."""
    if not split:
        return [(text, 0)]
    chunks, current, start = [], [], 0
    for i, line in enumerate(re.findall(r"[^\n]*\n|[^\n]+$", text)):  # lines as MLIR counts them: at '\n' only
        if line.strip().startswith(SPLIT_MARKER) and line.strip().rstrip("-").strip() == "//":
            chunks.append(("".join(current), start))
            current, start = [], i + 1
        else:
            current.append(line)
    chunks.append(("".join(current), start))
    return chunks


def process(source: str, filename: str, pipeline: str, *, platform: str = "none", print_ir_after_all: bool = False,
            timing: bool = False, debug_info: bool = False, allow_import: bool = False) -> str:
    """Parse `source`, run `pipeline` for `platform` (`hlopt.passes.target.target_of`), and return the
    printed module.

    `allow_import`: see ALLOW_IMPORT_HELP (by default a partitioner key resolves
    only among those registered in this process).
    """
    from hlopt.compiler.parse_guard import parse_source
    from hlopt.compiler.pipeline import run_pipeline
    from hlopt.passes.ir.locations import source_name
    from hlopt.passes.mlir import get_context
    from hlopt.passes.target import compiling_for, target_of

    with get_context(), source_name(filename), compiling_for(target_of(platform)):
        module = parse_source(source, filename)
        if pipeline:
            from hlopt.passes.partitioning.lower_custom_partitioning import partitioner_imports

            with partitioner_imports(allow_import):
                run_pipeline(module, pipeline, print_ir_after_all=print_ir_after_all, timing=timing)
        return module.operation.get_asm(enable_debug_info=debug_info)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)

    def body() -> int:
        if args.list_passes:
            print(list_passes())
            return 0
        if args.pipeline:
            from hlopt.compiler.pipeline import parse_pipeline

            parse_pipeline(args.pipeline)  # a bad pipeline is reported before the input is read
        text, filename = _read(args.input)
        outputs, failed, misses = [], False, []
        for chunk, first_line in _chunks(text, args.split_input_file):
            def run(source: str = "\n" * first_line + chunk) -> str:  # keep line numbers of the whole file
                return process(source, filename, args.pipeline, platform=args.platform,
                               print_ir_after_all=args.print_ir_after_all,
                               timing=args.timing, debug_info=args.debug_info, allow_import=args.allow_import)

            if args.verify_diagnostics:
                from hlopt.cli.diagnostics import verify_chunk

                output, chunk_misses = verify_chunk(chunk, first_line, filename, run)
                outputs += [] if output is None else [output]
                misses += chunk_misses
                continue
            try:
                outputs.append(run())
            except Exception as e:  # noqa: BLE001 - with --split-input-file, go on to the next chunk
                if not args.split_input_file or args.debug:
                    raise
                print(str(e), file=sys.stderr)
                failed = True
        for line in misses:
            print(line, file=sys.stderr)
        out = (SPLIT_MARKER + "\n").join(o.rstrip("\n") + "\n" for o in outputs)
        if args.output == "-":
            sys.stdout.write(out)
        else:
            with open(args.output, "w", encoding="utf-8") as f:
                f.write(out)
        return 1 if failed or misses else 0

    return run_main(body, "hlopt-opt", args.debug)


if __name__ == "__main__":
    sys.exit(main())
