"""The pass base class and `name{key=value ...}` option parsing.

A pass is a frozen dataclass: the command-line name is the class variable
`name`, options are fields (`my-opt` on the command line is the field
`my_opt`), and `apply(module)` rewrites a `builtin.module` in place. The class
docstring holds a one-line summary followed by a before/after example.
"""

from __future__ import annotations

import dataclasses
import typing
from typing import Any, ClassVar

from hlopt.passes.locations import call_chain, error_line, format_location
from hlopt.passes.mlir import ir

__all__ = ["Pass", "PassError", "PassOptionError", "format_location", "parse_option_string"]


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

    def apply(self, module: ir.Operation) -> None:
        """Rewrite the `builtin.module` operation `module` in place."""
        raise NotImplementedError

    @classmethod
    def summary(cls) -> str:
        doc = (cls.__doc__ or "").strip()
        return doc.splitlines()[0] if doc else ""

    @classmethod
    def from_options(cls, options: str) -> "Pass":
        """Build the pass from the text between the braces of `name{...}`."""
        fields = {f.name: f for f in dataclasses.fields(cls)}
        hints = typing.get_type_hints(cls)
        kwargs: dict[str, Any] = {}
        for key, value in parse_option_string(options).items():
            attr = key.replace("-", "_")
            if attr not in fields:
                known = ", ".join(f.replace("_", "-") for f in fields) or "none"
                raise PassOptionError(
                    f"pass '{cls.name}' has no option '{key}' (options: {known})"
                )
            kwargs[attr] = _convert(cls.name, key, value, hints[attr])
        return cls(**kwargs)

    @classmethod
    def options_help(cls) -> list[tuple[str, str]]:
        """`(name=values, default)` of each option, as a pipeline writes it (`target=shardy|gspmd`)."""
        hints = typing.get_type_hints(cls)
        found = []
        for f in dataclasses.fields(cls):
            hint = hints[f.name]
            if typing.get_origin(hint) is typing.Literal:
                values = "|".join(typing.get_args(hint))
            else:
                values = {bool: "true|false", int: "<int>", str: "<string>"}.get(hint, f"<{hint}>")
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
    if hint is bool:
        if value.lower() in ("1", "true", "yes", "on"):
            return True
        if value.lower() in ("0", "false", "no", "off"):
            return False
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
    raise PassOptionError(
        f"pass '{pass_name}': option '{key}' expects {getattr(hint, '__name__', hint)}, got '{value}'"
    )
