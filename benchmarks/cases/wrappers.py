"""Wrapper overhead per step (issue 24): MultiSteps, masked, partition, inject_hyperparams and
apply_if_finite against Optax's on small models, where a wrapper's fixed cost per step shows.

Each wrapper wraps AdamW (Adam and SGD for partition) on a small MLP (``layers`` dense layers of
``width x width`` and a bias), and its update step is timed against Optax's in alternating rounds
(``steps.compare``: the same scheme and floors as the other step cases). MultiSteps accumulates
over 4 mini-steps (the rounds' step count is a multiple of 4, so every round holds the same mix of
accumulating and emitting steps).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import optax

import steadax

from .. import harness
from . import steps


def _matrices(params: Any) -> Any:
  return jax.tree_util.tree_map(lambda p: p.ndim > 1, params)


def _labels(params: Any) -> Any:
  return jax.tree_util.tree_map(lambda p: "matrix" if p.ndim > 1 else "vector", params)


# name -> a factory called with the library (optax or steadax).
WRAPPERS = {
    "adamw (no wrapper)": lambda lib: lib.adamw(1e-3),
    "MultiSteps(adamw, 4)": lambda lib: lib.MultiSteps(lib.adamw(1e-3), every_k_schedule=4),
    "masked(adam)": lambda lib: lib.masked(lib.adam(1e-3), _matrices),
    "partition(adam, sgd)": lambda lib: lib.partition(
        {"matrix": lib.adam(1e-3), "vector": lib.sgd(1e-2)}, _labels),
    "inject_hyperparams(adamw)": lambda lib: lib.inject_hyperparams(lib.adamw)(learning_rate=1e-3),
    "apply_if_finite(adamw)": lambda lib: lib.apply_if_finite(lib.adamw(1e-3), 3),
}

# (layers, width) by the size of the run (harness.Sizes.grid names it).
MODELS = {"full": ((2, 16), (5, 64)), "quick": ((2, 16),), "smoke": ((1, 4),)}


def run(sizes: harness.Sizes, progress: harness.Progress) -> dict:
  models = MODELS[sizes.grid]
  column_sets = {name: harness.transformations(factory(optax), factory(steadax))
                 for name, factory in WRAPPERS.items()}
  progress.start("wrappers", len(models) * sum(sizes.rounds + 2 for _ in column_sets))
  rows = []
  for layers, width in models:
    def make_params(layers=layers, width=width):
      return {f"layer{i}": {"b": harness.filled((width,), 0.0, jnp.float32),
                            "w": harness.filled((width, width), 0.1, jnp.float32)}
              for i in range(layers)}

    for name, columns in column_sets.items():
      rows.append(steps.compare(f"{2 * layers}-leaf MLP ({width}x{width}): {name}", make_params,
                                columns, sizes, progress))
  return {"kind": "steps", "rows": rows}
