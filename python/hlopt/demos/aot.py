"""The `aot` section of `hlopt demo`: save an executable, inspect it, load it, run it, cache it."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import TextIO

import jax
import jax.numpy as jnp
import numpy as np

import hlopt
from hlopt.demos import banner, check_close
from hlopt.runtime import cache, files


def model(params, x):
    h = jnp.tanh(x @ params["w1"] + params["b1"])
    return {"logits": h @ params["w2"], "norm": [jnp.sqrt((h * h).sum())]}


def section(out: TextIO) -> None:
    from hlopt.cli.aot import describe

    banner(out, "aot: save an executable file, inspect it, load it, run it")
    rng = np.random.default_rng(0)
    params = {"w1": rng.standard_normal((6, 16)).astype(np.float32), "b1": np.zeros(16, np.float32),
              "w2": rng.standard_normal((16, 3)).astype(np.float32)}
    x = rng.standard_normal((4, 6)).astype(np.float32)
    compiled = hlopt.lower(model, params, x).compile()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "model.hlx"
        compiled.save(path)
        found, mac = files.read_file(path)
        out.write(describe(found.manifest, found.size, path.name, mac, found.authenticated) + "\n")
        loaded = hlopt.load(path)
        check_close(out, "aot: hlopt.load(file)(params, x)", loaded(params, x), jax.jit(model)(params, x))

        damaged = bytearray(path.read_bytes())
        damaged[len(damaged) // 2] ^= 1
        try:
            hlopt.deserialize(bytes(damaged), path.name)
        except hlopt.ExecutableFileError as e:
            out.write(f"a flipped byte is refused: {e}\n")
        else:
            raise AssertionError("a damaged executable file was loaded")

        with cache.using_cache_dir(Path(tmp) / "cache"):
            hlopt.lower(model, params, x).compile()
            again = hlopt.lower(model, params, x).compile()
            info = hlopt.cache_info()
        out.write(f"compilation cache: {info.misses} miss, then {info.hits} hit ({info.entries} entry)\n")
        assert (info.hits, info.misses) == (1, 1)
        check_close(out, "aot: cache hit", again(params, x), jax.jit(model)(params, x))
