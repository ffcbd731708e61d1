"""`hlopt.load` and `hlopt.deserialize`: the runtime's, with every pytree node class a
saved signature may hold registered first (importing `hlopt.sparse` registers BCOO)."""

import hlopt.sparse  # noqa: F401 - registers hlopt.sparse.BCOO with the runtime's encoding
from hlopt.runtime.files import deserialize, load

__all__ = ["deserialize", "load"]
