"""`hlopt.load` and `hlopt.deserialize`: the runtime's, able to read files holding
`hlopt.sparse` arrays. `hlopt.sparse` (which registers them) is imported only when a file
holds one, so loading any other program imports no more than it needs."""

import importlib

from hlopt.runtime.encoding import register_node_type
from hlopt.runtime.files import deserialize, load

__all__ = ["deserialize", "load"]

for _name in ("hlopt.sparse.BCOO", "hlopt.sparse.BCSR"):
    register_node_type(_name, load=lambda: importlib.import_module("hlopt.sparse"))
