"""steadax in Flax NNX: ``nnx.Optimizer`` with five steadax optimizers on a small regression.

Run: ``make example NAME=flax_nnx`` (about 10-20 s on a 2-core CPU; make creates ``.venv`` with the
``examples`` extra, which has flax; then ``.venv/bin/python examples/flax_nnx.py`` works too). Prints one row per optimizer: the loss before and after training,
the learning rate it ended with and the number of state arrays.

The optimizers show what NNX users reach for:

* a ``chain`` (global-norm clipping, then AdamW) driven by a warmup-cosine schedule;
* ``inject_hyperparams``: the learning rate lives in the optimizer state; the loop finds it with
  ``steadax.state_get`` and lowers it halfway through (no recompilation: same types);
* ``partition`` by path: biases without weight decay, everything else with it;
* ``masked`` by path: weight decay applied to kernels only, inside a chain;
* ``contrib.muon`` for the matrices (kernels), AdamW for the rest.

Labels and masks are computed from each parameter's key path with a function, so they work on the
``nnx.State`` that ``nnx.Optimizer`` passes to ``init`` and on the gradients passed to ``update``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

import steadax as optax  # the drop-in promise: Optax code runs unchanged

STEPS = 200


class MLP(nnx.Module):
  """A 8-32-1 perceptron with a ReLU."""

  def __init__(self, rngs: nnx.Rngs):
    self.hidden = nnx.Linear(8, 32, rngs=rngs)
    self.out = nnx.Linear(32, 1, rngs=rngs)

  def __call__(self, x):
    return self.out(nnx.relu(self.hidden(x)))


def make_data():
  """Inputs and targets of a smooth nonlinear function of 8 features."""
  x = jax.random.normal(jax.random.key(0), (256, 8))
  y = jnp.sin(x[:, :1]) + 0.5 * x[:, 1:2] * x[:, 2:3]
  return x, y


def is_bias(path) -> bool:
  """True for a parameter whose key path names a bias (``hidden.bias`` or ``hidden.bias.value``)."""
  return any(getattr(key, "key", getattr(key, "name", None)) == "bias" for key in path)


def bias_labels(params):
  """``"no_decay"`` for biases, ``"decay"`` for the rest, by key path."""
  return jax.tree_util.tree_map_with_path(
      lambda path, _: "no_decay" if is_bias(path) else "decay", params)


def kernel_mask(params):
  """True for every parameter that is not a bias, by key path."""
  return jax.tree_util.tree_map_with_path(lambda path, _: not is_bias(path), params)


def optimizers():
  schedule = optax.warmup_cosine_decay_schedule(0.0, 1e-2, warmup_steps=20, decay_steps=STEPS)
  return {
      "chain(clip, adamw(schedule))": optax.chain(
          optax.clip_by_global_norm(1.0), optax.adamw(schedule, weight_decay=1e-4)),
      "inject_hyperparams(adamw)": optax.inject_hyperparams(optax.adamw)(
          learning_rate=1e-2, weight_decay=1e-4),
      "partition by path": optax.partition(
          {"decay": optax.adamw(1e-2, weight_decay=1e-2),
           "no_decay": optax.adamw(1e-2, weight_decay=0.0)},
          bias_labels),
      "masked decay by path": optax.chain(
          optax.scale_by_adam(),
          optax.masked(optax.add_decayed_weights(1e-2), kernel_mask),
          optax.scale_by_learning_rate(1e-2)),
      "contrib.muon (matrices)": optax.contrib.muon(2e-2, adam_learning_rate=1e-2),
  }


def train(name, tx, x, y):
  model = MLP(nnx.Rngs(0))
  optimizer = nnx.Optimizer(model, tx, wrt=nnx.Param)

  def loss_fn(model):
    return jnp.mean((model(x) - y) ** 2)

  @nnx.jit
  def step(model, optimizer):
    loss, grads = nnx.value_and_grad(loss_fn)(model)
    optimizer.update(model, grads)
    return loss

  first = float(loss_fn(model))
  for i in range(STEPS):
    if name.startswith("inject") and i == STEPS // 2:  # lower the injected learning rate halfway
      # NNX holds the state's arrays in OptArray variables: set the variable's value in place.
      lr = optax.state_get(optimizer.opt_state, "learning_rate")
      lr.set_value(jnp.asarray(1e-3, lr.get_value().dtype))
    step(model, optimizer)
  lr = optax.state_get(optimizer.opt_state, "learning_rate", default=None)
  return {
      "first": first,
      "final": float(loss_fn(model)),
      "lr": "" if lr is None else f"{float(lr.get_value()):.0e}",
      "state_arrays": len(jax.tree.leaves(optimizer.opt_state)),
  }


def main():
  x, y = make_data()
  rows = {name: train(name, tx, x, y) for name, tx in optimizers().items()}
  print("| optimizer | initial loss | final loss | final injected lr | state arrays |")
  print("|---|---:|---:|---:|---:|")
  for name, r in rows.items():
    print(f"| {name} | {r['first']:.4f} | {r['final']:.4f} | {r['lr']} | {r['state_arrays']} |")
  for name, r in rows.items():
    if not r["final"] < 0.5 * r["first"]:
      raise SystemExit(f"{name}: the loss fell only from {r['first']:.4f} to {r['final']:.4f}")
  return rows


if __name__ == "__main__":
  main()
