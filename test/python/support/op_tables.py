"""Scratch op tables for tests: make jet-expand and vjp-expand read the rules of a table
built here (a copy of the shipped entries with some changed) for one test."""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from hlopt.passes.autodiff import jet_expand, vjp_expand
from hlopt.passes.optable import table
from hlopt.passes.rewrite.transform import RuleTable


def install(monkeypatch: pytest.MonkeyPatch, scratch: Mapping[str, table.OpEntry]) -> None:
    """jet-expand (standard, batched and collapsed jets) and vjp-expand read the rules of
    the op table `scratch` until the test ends."""
    monkeypatch.setattr(jet_expand, "RULE_TABLE", RuleTable(table.rules(scratch, "jet")))
    monkeypatch.setattr(vjp_expand, "RULE_TABLE", RuleTable(table.rules(scratch, "vjp")))
