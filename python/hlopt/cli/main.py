"""The `hlopt` command: compile, run, inspect executables, and the demo."""

from __future__ import annotations

import argparse
import sys

from hlopt.cli import aot
from hlopt.cli.errors import VersionAction, run_main
from hlopt.passes.ir.locations import did_you_mean


def _add_demo_args(p: argparse.ArgumentParser) -> None:
    from hlopt.demos import SECTIONS

    p.add_argument("sections", nargs="*", metavar="section",
                   help=f"sections to run, of: {', '.join(SECTIONS)} (default: all)")


def _cmd_demo(args: argparse.Namespace) -> int:
    from hlopt import demos

    demos.run(sys.stdout, args.sections or None)
    return 0


# subcommand -> (help, function adding its arguments, function running it)
COMMANDS = {
    "compile": ("lower a module:function (or a .mlir file), compile it, write an executable file",
                aot.add_compile_args, aot.cmd_compile),
    "run": ("run an executable file on .npy/.npz inputs", aot.add_run_args, aot.cmd_run),
    "inspect": ("show what an executable file holds", aot.add_inspect_args, aot.cmd_inspect),
    "demo": ("an end-to-end tour on built-in examples",
             _add_demo_args, _cmd_demo),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="hlopt", description="Ahead-of-time compilation of JAX programs.")
    parser.add_argument("--debug", action="store_true", help="show Python tracebacks and the call chain of errors")
    parser.add_argument("--version", action=VersionAction)
    sub = parser.add_subparsers(dest="command", required=True)
    for name, (help_text, add_args, _) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text)
        p.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                       help="show Python tracebacks and the call chain of errors")
        add_args(p)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    words = [a for a in (sys.argv[1:] if argv is None else argv) if not a.startswith("-")]
    if words and words[0] not in COMMANDS:  # the command comes first: hlopt's own options take no values
        parser.error(f"unknown command '{words[0]}'{did_you_mean(words[0], COMMANDS)} "
                     f"(commands: {', '.join(COMMANDS)})")
    args, extra = parser.parse_known_args(argv)
    if extra and args.command == "run" and not any(a.startswith("-") for a in extra):
        args.positional += extra  # input files after a --input's one value: `hlopt run` shows the --input form
    elif extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    return run_main(lambda: COMMANDS[args.command][2](args), "hlopt", args.debug)


if __name__ == "__main__":
    sys.exit(main())
