"""The whole training step on many small leaves: loss, gradient, update and apply in one jit.

The ``many_small`` case times ``tx.update`` + ``apply_updates`` with the gradients passed in, as
Optax users' steps are usually measured. A training step computes the gradients inside the same
program, and that is where ``steadax.flat_params`` belongs: the model reads its leaves as slices of
a few buffers (``flat.tree()``), the gradient comes out as those buffers (one concatenation in the
backward pass), and nothing crosses the step's boundary per leaf. Every column runs the same model
(one small elementwise layer per leaf, reading a slice of the batch vector), so the differences are
the optimizer's: per leaf (Optax, steadax), packed inside ``update`` (``fuse``), or on flat
parameters.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

import steadax

from .. import harness


def _loss(params: dict, batch: jax.Array) -> jax.Array:
  """One elementwise layer per leaf on its slice of ``batch`` (leaves in key order)."""
  leaves = [params[key] for key in sorted(params)]
  offsets = np.cumsum([leaf.size for leaf in leaves])[:-1].tolist()
  return sum(jnp.sum(jnp.tanh(leaf * x)) for leaf, x in zip(leaves, jnp.split(batch, offsets)))


def train_step(lib: Any, tx: Any, flat: bool = False) -> Any:
  """``step(params, state, batch) -> (params, state)``, jitted with params and state donated."""

  def step(params, state, batch):
    if flat:
      grads = jax.grad(lambda f: _loss(f.tree(), batch))(params)
    else:
      grads = jax.grad(_loss)(params, batch)
    updates, state = tx.update(grads, state, params)
    return lib.apply_updates(params, updates), state

  return jax.jit(step, donate_argnums=(0, 1))


def batch_for(params: Any) -> jax.Array:
  size = sum(int(x.size) for x in jax.tree_util.tree_leaves(params))
  return harness.filled((size,), 0.5, jnp.float32)


def train_contender(lib: Any, tx: Any, make_params, flat: bool = False) -> harness.Contender:
  """The training step for ``tx`` on fresh params, compiled and run once; ``grads`` holds the
  batch (``Contender.run`` passes it as the step's third argument)."""
  params = make_params()
  batch = batch_for(params)
  if flat:
    params = steadax.flat_params(params)
  state = harness.init_state(tx, params)
  fn = train_step(lib, tx, flat)
  params, state = jax.block_until_ready(fn(params, state, batch))
  return harness.Contender(fn, params, state, batch)


OPTIMIZERS = {
    "adamw": lambda lib: lib.adamw(1e-3),
    "sgd+momentum": lambda lib: lib.sgd(1e-2, momentum=0.9),
}


def run(sizes: harness.Sizes, progress: harness.Progress) -> dict:
  leaf_sizes, make_params = harness.small_params(sizes.small_leaves)
  column_sets = {name: harness.transformations(factory(optax), factory(steadax), fused=True, flat=True)
                 for name, factory in OPTIMIZERS.items()}
  progress.start("train", sum(sizes.rounds + len(columns) for columns in column_sets.values()))
  rows = []
  for name, columns in column_sets.items():
    case = f"train step, {sizes.small_leaves} small: {name}"
    contenders = harness.build_contenders(columns, make_params, progress, case, make=train_contender)
    timed = harness.time_rounds(contenders, sizes, progress, case)
    times = {label: timed[label]["median_s"] for label in timed}
    ratios = {f"{label}/optax": times[label] / times["optax"] for label in times if label != "optax"}
    rows.append({"case": case, "leaves": len(leaf_sizes), "parameters": sum(leaf_sizes),
                 "median_s": times, "ratios": ratios,
                 "rounds_s": {label: timed[label]["rounds_s"] for label in timed}})
  return {"kind": "steps", "rows": rows}
