"""The pass base class and `name{key=value ...}` option parsing.

A pass is a frozen dataclass: the command-line name is the class variable
`name`, options are fields (`my-opt` on the command line is the field
`my_opt`), and `apply(module)` rewrites a `builtin.module` in place. A pass
with options is decorated `@dataclasses.dataclass(frozen=True)` itself; one
without subclasses `Pass` (or a pass base) plainly and inherits the dataclass
methods, since decorating it again would only generate the same methods again
(a cost paid per class by the first compile of every process; bench/startup.py
measures start-up). The class
docstring holds a summary paragraph followed by a before/after example. An int
or string option declares the values it accepts with `option(...)`; a bool or
`Literal` option's type says them. The class variable `platforms` says
which targets the pass rewrites for (`hlopt.passes.target`).
"""

from __future__ import annotations

import dataclasses
import difflib
import re
import typing
from typing import Any, ClassVar

from hlopt.passes.ir import annotation_names
from hlopt.passes.ir.locations import call_chain, error_line, format_location
from hlopt.passes.mlir import ir

__all__ = ["Pass", "PassError", "PassOptionError", "format_location", "option", "parse_option_string"]

# The values of an option naming a function: an MLIR bare identifier.
SYMBOL_NAME = r"[A-Za-z_][A-Za-z0-9_$.]*"
# where a docstring's first sentence ends: a full stop before a capital letter or code
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z`])")


def option(default: Any, *, low: int | None = None, high: int | None = None, pattern: str | None = None,
           what: str = "") -> Any:
    """A pass option's field: an int in `low..high`, or a string matching `pattern` (described as `what`).

    A default outside that range means "not given".
    """
    return dataclasses.field(default=default, metadata={"low": low, "high": high, "pattern": pattern, "what": what})


# custom_call target (or prefix ending in '.') of an hlopt annotation -> the pass that lowers it (a pass
# refusing an annotation it does not lower names the pass to run first).
ANNOTATIONS: dict[str, str] = {
    annotation_names.BCOO_PREFIX: "lower-bcoo",
    annotation_names.JET: "jet-expand",
    annotation_names.STOP_GRADIENT: "jet-expand",
    annotation_names.CUSTOM_JVP: "jet-expand",
    annotation_names.LINEAR_SOLVE: "jet-expand",
    annotation_names.CUSTOM_PARTITIONING: "lower-custom-partitioning",
    annotation_names.VJP: "vjp-expand",
}


def lowering_pass_for(target: str) -> str | None:
    """The pass that lowers the annotation `target`, or None if it is not ours."""
    for key, pass_name in ANNOTATIONS.items():
        if target == key or (key.endswith(".") and target.startswith(key)):
            return pass_name
    return None


class PassError(Exception):
    """A pass could not do its job; the message says where and why.

    Prints as `file:line:col: error: message` at the user's frame of
    `location` (by default, the location of the enclosing `with location:`
    block, where a pass builds the op it lowers); `notes` holds the rest of
    its call chain as `note:` lines.
    """

    def __init__(self, message: str, location: ir.Location | None = None):
        self.location = location if location is not None else ir.Location.current
        # resolved now: the file a parsed text came from is known while the pass runs
        self.where = None if self.location is None else format_location(self.location)
        self.notes: list[str] = [] if self.location is None else call_chain(self.location)
        super().__init__(message)

    def __str__(self) -> str:
        return error_line(self.where, super().__str__())


class PassOptionError(ValueError):
    """A pipeline named a pass with an option it does not have or cannot parse."""


@dataclasses.dataclass(frozen=True)
class Pass:
    """Base of every hlopt pass."""

    name: ClassVar[str] = ""
    # The platforms the pass is for (`hlopt.passes.target`): `PORTABLE`, or JAX's platform names; every
    # pass declares them, and the pipeline driver runs it only for a target among them.
    platforms: ClassVar[tuple[str, ...]]
    # Whether the pass emits calls of kernels that hlopt's runtime registers in its own process (then
    # it never runs for a `jax.export` artifact).
    calls_runtime: ClassVar[bool] = False
    # An option's former spelling -> its name now: a pipeline that spells it the old way is refused with
    # an error naming the new one.
    renamed_options: ClassVar[dict[str, str]] = {}

    def apply(self, module: ir.Operation) -> None:
        """Rewrite the `builtin.module` operation `module` in place."""
        raise NotImplementedError

    @classmethod
    def summary(cls) -> str:
        """The docstring's first sentence, on one line."""
        doc = (cls.__doc__ or "").strip()
        paragraph = " ".join(doc.split("\n\n", 1)[0].split())
        return _SENTENCE_END.split(paragraph, maxsplit=1)[0]

    @classmethod
    def from_options(cls, options: str) -> "Pass":
        """Build the pass from the text between the braces of `name{...}`."""
        given = parse_option_string(options)
        if not given:  # the common case, every pass of a named pipeline: no type hints to resolve
            return cls()
        fields = {f.name: f for f in dataclasses.fields(cls)}
        hints = typing.get_type_hints(cls)
        kwargs: dict[str, Any] = {}
        for key, value in given.items():
            attr = key.replace("-", "_")
            if attr not in fields:
                raise PassOptionError(cls._unknown_option(key, [f.replace("_", "-") for f in fields]))
            kwargs[attr] = _convert(cls.name, key, value, hints[attr])
            _check_range(cls.name, key, kwargs[attr], fields[attr])
        return cls(**kwargs)

    @classmethod
    def _unknown_option(cls, key: str, known: list[str]) -> str:
        """Why `key` is refused: the option it was renamed to, or the closest option's name if any, and the options."""
        listed = ", ".join(known) or "none"
        if key in cls.renamed_options:
            new = cls.renamed_options[key]
            return f"pass '{cls.name}': option '{key}' is now called '{new}' (write {new}=...; options: {listed})"
        close = difflib.get_close_matches(key, known, n=1)
        hint = f"; did you mean '{close[0]}'?" if close else ""
        return f"pass '{cls.name}' has no option '{key}' (options: {listed}){hint}"

    @classmethod
    def options_help(cls) -> list[tuple[str, str]]:
        """`(name=values, default)` of each option, as a pipeline writes it (`target=shardy|gspmd`,
        `order=1..64`); the default is `none` when an option is not given by default."""
        hints = typing.get_type_hints(cls)
        found = []
        for f in dataclasses.fields(cls):
            hint = hints[f.name]
            if typing.get_origin(hint) is typing.Literal:
                values = "|".join(typing.get_args(hint))
            else:
                values = _range_text(f) or {bool: "true|false", int: "<int>", str: "<string>"}.get(hint, f"<{hint}>")
            if _out_of_range(f.default, f) is not None:
                default = "none"
            else:
                default = str(f.default).lower() if isinstance(f.default, bool) else str(f.default) or "''"
            found.append((f"{f.name.replace('_', '-')}={values}", default))
        return found

    def options_string(self) -> str:
        parts = []
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if value != f.default:
                if isinstance(value, bool):
                    value = "true" if value else "false"
                parts.append(f"{f.name.replace('_', '-')}={value}")
        return "{" + " ".join(parts) + "}" if parts else ""

    def __str__(self) -> str:
        return self.name + self.options_string()


def parse_option_string(options: str) -> dict[str, str]:
    """`a=1 b=x` (spaces or commas between entries) -> {'a': '1', 'b': 'x'}."""
    result: dict[str, str] = {}
    for item in options.replace(",", " ").split():
        if "=" not in item:
            raise PassOptionError(f"option '{item}' is not of the form key=value")
        key, value = item.split("=", 1)
        if key in result:
            raise PassOptionError(f"option '{key}' is given twice")
        result[key] = value
    return result


def _convert(pass_name: str, key: str, value: str, hint: Any) -> Any:
    origin = typing.get_origin(hint)
    if hint is bool:  # the spellings MLIR's own pass options print and document
        if value in ("true", "false"):
            return value == "true"
    elif hint is int:
        try:
            return int(value)
        except ValueError:
            pass
    elif hint is str:
        return value
    elif origin is typing.Literal:
        if value in typing.get_args(hint):
            return value
        choices = "|".join(typing.get_args(hint))
        raise PassOptionError(
            f"pass '{pass_name}': option '{key}' must be one of {choices}, got '{value}'"
        )
    else:
        return value
    expected = {bool: "true or false", int: "an integer"}.get(hint, getattr(hint, "__name__", hint))
    raise PassOptionError(f"pass '{pass_name}': option '{key}' must be {expected}, got '{value}'")


def _range_text(field: dataclasses.Field) -> str:
    """The values `option(...)` declared for `field`, as `--list-passes` shows them (`1..64`, `<function name>`)."""
    meta = field.metadata
    if meta.get("low") is not None or meta.get("high") is not None:
        low, high = meta.get("low"), meta.get("high")
        return f"{'' if low is None else low}..{'' if high is None else high}"
    if meta.get("pattern"):
        return f"<{(meta['what'] or 'string').removeprefix('a ')}>"
    return ""


def _out_of_range(value: Any, field: dataclasses.Field) -> str | None:
    """Why `value` is outside the range `option(...)` declared for `field`; None if it is inside."""
    meta = field.metadata
    low, high, pattern = meta.get("low"), meta.get("high"), meta.get("pattern")
    if isinstance(value, int) and not isinstance(value, bool) and (
            (low is not None and value < low) or (high is not None and value > high)):
        bounds = (f"between {low} and {high}" if low is not None and high is not None
                  else f"at least {low}" if low is not None else f"at most {high}")
        return f"must be {bounds}"
    if isinstance(value, str) and pattern and not re.fullmatch(pattern, value):
        return f"must be {meta['what'] or 'a string'} matching {pattern}"
    return None


def _check_range(pass_name: str, key: str, value: Any, field: dataclasses.Field) -> None:
    why = _out_of_range(value, field)
    if why is not None:
        raise PassOptionError(f"pass '{pass_name}': option '{key}' {why}, got '{value}'")
