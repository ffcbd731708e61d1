"""Models of the libraries JAX users write them with, saved in one process and run in a fresh one.

`PROGRAMS` builds, from fixed keys, an equinox MLP (its arrays split from its functions with
`eqx.partition`), a flax NNX model (its `State`, the graph definition closed over; and the
`(GraphDef, State)` pair of `nnx.split` passed whole) and a flax linen model (its params dict),
each with the function that runs it and an input.
`python -m support.saved_models_worker load DIR` builds the same arguments in this fresh process,
runs each DIR/NAME.hlx with `hlopt.load`, and writes the outputs to DIR/NAME.got.npy.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import equinox as eqx
import flax.linen as nn
import jax
import numpy as np
from flax import nnx

import hlopt

X = np.linspace(-1, 1, 12, dtype=np.float32).reshape(4, 3)


def equinox_mlp() -> tuple[Callable[..., Any], tuple[Any, ...]]:
    params, static = eqx.partition(eqx.nn.MLP(3, 2, 8, 2, key=jax.random.key(0)), eqx.is_array)
    return (lambda params, x: jax.vmap(eqx.combine(params, static))(x)), (params, X)


class NNXModel(nnx.Module):
    def __init__(self, rngs: nnx.Rngs):
        self.hidden = nnx.Linear(3, 8, rngs=rngs)
        self.out = nnx.Linear(8, 2, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.out(nnx.tanh(self.hidden(x)))


def flax_nnx() -> tuple[Callable[..., Any], tuple[Any, ...]]:
    graphdef, state = nnx.split(NNXModel(nnx.Rngs(1)))
    return (lambda state, x: nnx.merge(graphdef, state)(x)), (state, X)


def flax_nnx_split() -> tuple[Callable[..., Any], tuple[Any, ...]]:
    """The whole of `nnx.split(model)` as the argument: its GraphDef (no arrays) is saved too."""
    return (lambda model, x: nnx.merge(*model)(x)), (nnx.split(NNXModel(nnx.Rngs(1))), X)


class LinenModel(nn.Module):
    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        return nn.Dense(2)(nn.tanh(nn.Dense(8)(x)))


def flax_linen() -> tuple[Callable[..., Any], tuple[Any, ...]]:
    model = LinenModel()
    return model.apply, (model.init(jax.random.key(2), X), X)


PROGRAMS = {"equinox_mlp": equinox_mlp, "flax_nnx": flax_nnx, "flax_nnx_split": flax_nnx_split,
            "flax_linen": flax_linen}


if __name__ == "__main__":
    from support import saved_models_worker  # files name this module's classes (NNXModel) by its name, not __main__

    folder = Path(sys.argv[2])
    for name, build in saved_models_worker.PROGRAMS.items():
        _, args = build()
        np.save(folder / f"{name}.got.npy", np.asarray(hlopt.load(folder / f"{name}.hlx")(*args)))
