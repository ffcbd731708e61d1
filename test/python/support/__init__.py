"""What the pytest files share and are not tests themselves.

- references and harnesses: `references` (Taylor coefficients by nested jax.jvp, shared
  programs and sparse layouts), `vjp_harness` (vjp-expand next to jax.vjp), `op_tables`
  (scratch op tables), `bcoo_scratch_ops` (a scratch BCOO record module), `sparse_util`
  (the sparse tests' inputs and tolerances), `pde_references` (the PDE tests' references);
- case tables more than one test reads: `jet_cases` (jet-expand's rules and the derivative
  table's), `vjp_cases` (vjp-expand's), `linalg_cases` (the linear-algebra rules', with their
  inputs and checks);
- the security tests' tools: `forge` (what an attacker can do to a file), `sandbox`
  (a capped child process and how it ended), `nesting_limits` (deeply nested MLIR);
- `zygote`: python processes forked from one that imported jax once (sandbox.run_forked, the
  docs' python blocks);
- scripts the tests run in fresh processes: `attack_worker`, `cache_cp_worker`,
  `fresh_worker`, `fuzz_worker`, `multiprocess_worker` (with `multiprocess_program`),
  `native_kernel_child`, `saved_models_worker`. `script(NAME)` is the command that runs one.

pytest puts test/python on `sys.path`, so tests import these as `support.NAME`; a script run
by `script` imports them the same way, so a class it defines has one name in the test and in
the child.
"""

from __future__ import annotations

import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parent.parent  # test/python, the folder that holds this package


def script(name: str) -> list[str]:
    """The command (unbuffered python, arguments still to append) that runs `support/NAME.py` as a
    script, `__main__`, in a fresh process with test/python on its path."""
    boot = (f"import runpy, sys; sys.path.insert(0, {str(TESTS)!r}); "
            f"runpy.run_module('support.{name}', run_name='__main__', alter_sys=True)")
    return [sys.executable, "-u", "-c", boot]
