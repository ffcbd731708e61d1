"""Scratch op tables for tests: make jet-expand and vjp-expand read the rules of tables
built here (copies of the shipped ones with some entries changed) for one test."""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from hlopt.passes.autodiff import jet_expand, table, vjp_expand


def install(monkeypatch: pytest.MonkeyPatch, ops: Mapping[str, table.OpEntry] = table.TABLE,
            calls: Mapping[str, table.OpEntry] = table.CALLS) -> None:
    """jet-expand (standard, batched and collapsed jets) and vjp-expand read the rules of
    the op table `ops` and the custom-call table `calls` until the test ends."""
    monkeypatch.setattr(jet_expand, "RULE_TABLE", table.pass_rules("jet", ops, calls))
    monkeypatch.setattr(vjp_expand, "RULE_TABLE", table.pass_rules("vjp", ops, calls))
