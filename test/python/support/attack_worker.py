"""A process of its own (sandbox.run_forked) that loads what a security test forged, or compiles through a cache it tampered with.

`python -m support.attack_worker SPEC.json` runs each case of the spec and prints one
JSON line: for each case either `{"refused": message}` (an ExecutableFileError),
`{"out": {name: array as list}}` (called on X, Y, or on the arrays of the
case's "inputs" .npz), or `{"error": "Type: message"}` for any other
exception (which the tests count as a failure). A case with "unchecked"
turns runtime/portable.py's op checks off: a control that shows what the
attack does without them. The process must neither
crash nor hang: the tests run it with a timeout and check its exit status.
"""

from __future__ import annotations

import json
import sys
import warnings

import jax.numpy as jnp
import numpy as np

X = np.arange(32, dtype=np.float32).reshape(8, 4) / 10
Y = np.linspace(-1, 1, 8, dtype=np.float32).reshape(4, 2)


def f(x, y):
    return {"s": jnp.sin(x) @ y, "t": x.sum()}


def g(x, y):  # the same signature as f, another function
    return {"s": jnp.cos(x) @ y, "t": x.max()}


PROGRAMS = {"f": f, "g": g}


def leaves(out) -> dict:
    import jax

    flat, _ = jax.tree_util.tree_flatten_with_path(out)
    return {jax.tree_util.keystr(path): np.asarray(x).tolist() for path, x in flat}


def run(case: dict) -> dict:
    import hlopt

    if case.get("unchecked"):  # the control: runtime/portable.py passes every op, as before its checks
        from hlopt.runtime import portable

        portable.op_problem = lambda *args: None

    args = (X, Y)
    if "inputs" in case:  # a .npz of the arguments, in order
        with np.load(case["inputs"]) as inputs:
            args = tuple(inputs[k] for k in inputs.files)
    if case["kind"] == "load":
        compiled = hlopt.load(case["file"], trust=case["trust"])
    else:  # compile through the cache named by HLOPT_CACHE_DIR
        compiled = hlopt.lower(PROGRAMS[case["program"]], X, Y).compile()
    out = leaves(compiled(*args))
    info = hlopt.cache_info()
    return {"out": out, "cache": [info.hits, info.misses]}


def main() -> None:
    spec = json.loads(open(sys.argv[1]).read())
    import hlopt

    results = []
    for case in spec["cases"]:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", hlopt.RecompileWarning)
                results.append(run(case))
        except hlopt.ExecutableFileError as e:
            results.append({"refused": str(e)})
        except Exception as e:  # noqa: BLE001 - reported, and counted as a failure by the test
            results.append({"error": f"{type(e).__name__}: {e}"})
    print(json.dumps(results))


if __name__ == "__main__":
    main()
