"""steadax in an Equinox loop: ``eqx.filter_jit``, ``eqx.partition`` and the optimizer as an argument.

Run: ``make example NAME=equinox_loop`` (about 10-20 s on a 2-core CPU; make creates ``.venv`` with
the ``examples`` extra, which has equinox; then ``.venv/bin/python examples/equinox_loop.py`` works
too). Prints one row per run: the optimizer, the loss before and
after training, and how many times the step was traced.

The model is an ``eqx.nn.MLP``; ``eqx.partition(model, eqx.is_inexact_array)`` splits its arrays from
the rest (activation functions), and the optimizer is initialised on the arrays. A steadax
transformation is a pytree whose numeric hyperparameters are leaves, so the step takes the
optimizer as an argument and ``eqx.filter_jit`` traces it once for every learning rate: the three
AdamW runs below share one trace, however the learning rate is written. (``filter_jit`` holds
Python floats static, but a steadax transformation's number hyperparameters are weakly typed 0-d
arrays as pytree leaves, which it traces; a closure over an Optax optimizer bakes the learning rate
into the program.)
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

import steadax as optax  # the drop-in promise: Optax code runs unchanged

STEPS = 200
TRACES = {"count": 0}


def make_data():
  """Inputs and targets of a smooth nonlinear function of 8 features."""
  x = jax.random.normal(jax.random.key(0), (256, 8))
  y = jnp.sin(x[:, :1]) + 0.5 * x[:, 1:2] * x[:, 2:3]
  return x, y


def loss_fn(params, static, x, y):
  model = eqx.combine(params, static)
  return jnp.mean((jax.vmap(model)(x) - y) ** 2)


@eqx.filter_jit
def step(tx, params, static, opt_state, x, y):
  TRACES["count"] += 1  # runs only while tracing
  loss, grads = jax.value_and_grad(loss_fn)(params, static, x, y)
  updates, opt_state = tx.update(grads, opt_state, params)
  return optax.apply_updates(params, updates), opt_state, loss


def train(tx, x, y):
  model = eqx.nn.MLP(8, 1, width_size=32, depth=1, key=jax.random.key(1))
  params, static = eqx.partition(model, eqx.is_inexact_array)
  opt_state = tx.init(params)
  first = float(loss_fn(params, static, x, y))
  for _ in range(STEPS):
    params, opt_state, _ = step(tx, params, static, opt_state, x, y)
  return first, float(loss_fn(params, static, x, y))


def runs():
  schedule = optax.cosine_decay_schedule(1e-2, decay_steps=STEPS)
  return [
      # Three spellings of a learning rate, one trace: as a pytree leaf each is a weakly typed 0-d
      # array (eqx.filter_jit would hold a Python float leaf static: one trace per value).
      ("adamw, lr 3e-3", optax.adamw(3e-3, weight_decay=1e-4)),
      ("adamw, lr 1e-2", optax.adamw(jnp.float32(1e-2), weight_decay=1e-4)),
      ("adamw, lr 3e-2", optax.adamw(np.float32(3e-2), weight_decay=1e-4)),
      ("adamw, cosine schedule", optax.adamw(schedule, weight_decay=1e-4)),
      ("chain(clip, lion)", optax.chain(optax.clip_by_global_norm(1.0), optax.lion(1e-3))),
  ]


def main():
  x, y = make_data()
  rows = []
  for name, tx in runs():
    before = TRACES["count"]
    first, final = train(tx, x, y)
    rows.append((name, first, final, TRACES["count"] - before))
  print("| optimizer | initial loss | final loss | new traces of the step |")
  print("|---|---:|---:|---:|")
  for name, first, final, traces in rows:
    print(f"| {name} | {first:.4f} | {final:.4f} | {traces} |")
  for name, first, final, _ in rows:
    if not final < 0.5 * first:
      raise SystemExit(f"{name}: the loss fell only from {first:.4f} to {final:.4f}")
  adamw_traces = [traces for name, _, _, traces in rows if name.startswith("adamw, lr")]
  if adamw_traces != [1, 0, 0]:
    raise SystemExit(f"a new learning rate retraced the step: traces per run {adamw_traces}")
  return rows


if __name__ == "__main__":
  main()
