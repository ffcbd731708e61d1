"""`hlopt.load` and `hlopt.deserialize`: the runtime's, with every pytree node class a
saved signature may hold registered first. BCOO's class is imported (with `hlopt.sparse`)
only when a file holds a BCOO, so loading any other program imports no more than it needs."""

from typing import Any

from hlopt.runtime.encoding import register_node_type
from hlopt.runtime.files import deserialize, load

__all__ = ["deserialize", "load"]


def _bcoo() -> type:
    from hlopt.sparse import BCOO

    return BCOO


def _bcoo_problem(aux: dict[str, Any], children: Any) -> str | None:
    from hlopt.sparse.bcoo import node_problem

    return node_problem(aux, children)


register_node_type("hlopt.sparse.BCOO", _bcoo, _bcoo_problem)
