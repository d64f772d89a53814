"""steadax in Flax Linen: a ``TrainState`` with masks and an integer leaf among the parameters.

Run: ``make example NAME=flax_linen`` (about 10-20 s on a 2-core CPU; make creates ``.venv`` with
the ``examples`` extra, which has flax; then ``.venv/bin/python examples/flax_linen.py`` works too). Prints one row per optimizer: the loss before and after training,
how many leaves the weight-decay mask selects, whether the first layer moved, and the integer
parameter's value and dtype after training.

The model holds an int32 parameter (a version number, as a ``TrainState`` may hold step counters or
indices). ``jax.grad(..., allow_int=True)`` gives it a ``float0`` gradient; every steadax
transformation returns a zero update for it and keeps its state, so ``apply_gradients`` leaves it
unchanged and its dtype int32 (Optax fails on ``float0``). The optimizers:

* ``adamw`` with ``mask=``: weight decay on the Dense kernels only;
* ``chain(clip_by_global_norm, masked(add_decayed_weights), adam)`` (the same, spelled out);
* ``partition``: the first layer frozen (``set_to_zero``), the rest trained with SGD + momentum;
* ``MultiSteps(adamw, 2)``: gradient accumulation over two calls.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import linen as nn
from flax.training import train_state

import steadax as optax  # the drop-in promise: Optax code runs unchanged

STEPS = 200


class MLP(nn.Module):
  """A 8-32-1 perceptron with a ReLU and an integer ``version`` parameter it never trains."""

  @nn.compact
  def __call__(self, x):
    self.param("version", lambda key: jnp.asarray(3, jnp.int32))
    x = nn.relu(nn.Dense(32, name="hidden")(x))
    return nn.Dense(1, name="out")(x)


def make_data():
  """Inputs and targets of a smooth nonlinear function of 8 features."""
  x = jax.random.normal(jax.random.key(0), (256, 8))
  y = jnp.sin(x[:, :1]) + 0.5 * x[:, 1:2] * x[:, 2:3]
  return x, y


def kernel_mask(params):
  """True for the Dense kernels (the leaves named ``kernel``), False elsewhere."""
  return jax.tree_util.tree_map_with_path(
      lambda path, _: getattr(path[-1], "key", None) == "kernel", params)


def first_layer_labels(params):
  """``"frozen"`` for the ``hidden`` layer, ``"train"`` for the rest."""
  return jax.tree_util.tree_map_with_path(
      lambda path, _: "frozen" if getattr(path[0], "key", None) == "hidden" else "train", params)


def optimizers():
  return {
      "adamw(mask=kernels)": optax.adamw(1e-2, weight_decay=1e-2, mask=kernel_mask),
      "chain(clip, masked(decay), adam)": optax.chain(
          optax.clip_by_global_norm(1.0),
          optax.masked(optax.add_decayed_weights(1e-2), kernel_mask),
          optax.adam(1e-2)),
      "partition(frozen hidden, sgd)": optax.partition(
          {"frozen": optax.set_to_zero(), "train": optax.sgd(1e-2, momentum=0.9)},
          first_layer_labels),
      "MultiSteps(adamw, 2)": optax.MultiSteps(optax.adamw(1e-2), every_k_schedule=2),
  }


def train(tx, x, y):
  model = MLP()
  params = model.init(jax.random.key(1), x[:1])["params"]
  state = train_state.TrainState.create(apply_fn=model.apply, params=params, tx=tx)

  def loss_fn(params):
    return jnp.mean((state.apply_fn({"params": params}, x) - y) ** 2)

  @jax.jit
  def step(state):
    loss, grads = jax.value_and_grad(loss_fn, allow_int=True)(state.params)
    return state.apply_gradients(grads=grads), loss

  first = float(loss_fn(state.params))
  hidden_before = state.params["hidden"]["kernel"]
  for _ in range(STEPS):
    state, _ = step(state)
  mask = kernel_mask(state.params)
  return {
      "first": first,
      "final": float(loss_fn(state.params)),
      "decayed": sum(bool(m) for m in jax.tree.leaves(mask)),
      "leaves": len(jax.tree.leaves(mask)),
      "hidden_moved": bool(jnp.any(state.params["hidden"]["kernel"] != hidden_before)),
      "version": state.params["version"],
  }


def main():
  x, y = make_data()
  rows = {name: train(tx, x, y) for name, tx in optimizers().items()}
  print("| optimizer | initial loss | final loss | kernels in the decay mask | hidden layer trained "
        "| version (int32 leaf) |")
  print("|---|---:|---:|---|---|---|")
  for name, r in rows.items():
    version = r["version"]
    print(f"| {name} | {r['first']:.4f} | {r['final']:.4f} | {r['decayed']} of {r['leaves']} leaves "
          f"| {'yes' if r['hidden_moved'] else 'no'} "
          f"| {int(version)} ({version.dtype}) |")
  for name, r in rows.items():
    if not r["final"] < 0.7 * r["first"]:
      raise SystemExit(f"{name}: the loss fell only from {r['first']:.4f} to {r['final']:.4f}")
    if int(r["version"]) != 3 or r["version"].dtype != jnp.int32:
      raise SystemExit(f"{name}: the integer parameter changed to {r['version']!r}")
    if r["hidden_moved"] == name.startswith("partition"):
      raise SystemExit(f"{name}: the frozen layer moved, or a trained one did not")
  return rows


if __name__ == "__main__":
  main()
