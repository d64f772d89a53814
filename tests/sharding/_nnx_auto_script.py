"""The matrix optimizers in Flax NNX on 8 virtual CPU devices under automatic mesh axes (run as a
script by test_distributed_statistics.py; prints ``RESULT {json}``).

A user's setup: an ``nnx.Module`` whose kernels are annotated ``nnx.with_partitioning(...,
("fsdp", None))``, created under ``jax.set_mesh`` on an 8-device mesh with automatic axes (the
``jax.sharding.Mesh`` default), ``nnx.Optimizer(model, tx, wrt=nnx.Param)`` and a train step under
``nnx.jit``, three steps. The same code runs on a mesh of one device. Reported per optimizer: the loss
after each step, the largest parameter difference from one device, and the layout and per-device
share of one matrix statistic.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jax.sharding import AxisType

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
import steadax  # noqa: E402

OPTIMIZERS = {
    "muon": (lambda: steadax.contrib.muon(0.02), ("mu",)),
    "soap": (lambda: steadax.soap(0.02, precondition_frequency=1), ("statistics",)),
    "shampoo": (lambda: steadax.shampoo(0.02, precondition_frequency=1), ("statistics",)),
    "psgd_kron": (lambda: steadax.psgd_kron(0.02, preconditioner_update_probability=1.0), ("preconditioner",)),
    "galore": (lambda: steadax.contrib.galore(0.02, rank=8, update_proj_gap=1), ("projector",)),
}


class Model(nnx.Module):
  def __init__(self, rngs: nnx.Rngs, depth: int = 8, width: int = 16):
    init = nnx.with_partitioning(nnx.initializers.lecun_normal(), ("fsdp", None))
    self.layers = nnx.List([nnx.Linear(width, width, kernel_init=init, use_bias=False, rngs=rngs)
                            for _ in range(depth)])

  def __call__(self, x):
    for layer in self.layers:
      x = jnp.tanh(layer(x))
    return x


def make_model():
  model = Model(nnx.Rngs(0))
  state = nnx.state(model)
  nnx.update(model, jax.lax.with_sharding_constraint(state, nnx.get_partition_spec(state)))
  return model


@nnx.jit
def train_step(model, optimizer, x, y):
  loss, grads = nnx.value_and_grad(lambda m: jnp.mean((m(x) - y) ** 2))(model)
  optimizer.update(model, grads)
  return loss


def train(make, x, y, mesh):
  with jax.set_mesh(mesh):
    model = nnx.jit(make_model)()
    optimizer = nnx.Optimizer(model, make(), wrt=nnx.Param)
    losses = [float(train_step(model, optimizer, x, y)) for _ in range(3)]
  return model, optimizer, losses


def main() -> None:
  mesh = jax.make_mesh((8,), ("fsdp",), axis_types=(AxisType.Auto,))
  # The reference: the same code on a mesh of one device.
  one = jax.make_mesh((1,), ("fsdp",), axis_types=(AxisType.Auto,), devices=jax.devices()[:1])
  rng = np.random.default_rng(0)
  x = jnp.asarray(rng.normal(size=(32, 16)), jnp.float32)
  y = jnp.asarray(rng.normal(size=(32, 16)), jnp.float32) * 0.5
  results = {}
  for name, (make, fields) in OPTIMIZERS.items():
    try:
      model, optimizer, losses = train(make, x, y, mesh)
    except Exception as error:  # reported, not raised: the other optimizers still run
      results[name] = {"error": f"{type(error).__name__}: {str(error).splitlines()[0][:300]}"}
      continue
    ref_model, _, ref_losses = train(make, x, y, one)
    diff = max(float(np.max(np.abs(np.asarray(a) - np.asarray(b))))
               for a, b in zip(jax.tree.leaves(nnx.state(model, nnx.Param)),
                               jax.tree.leaves(nnx.state(ref_model, nnx.Param))))
    statistic = next(leaf for path, leaf in jax.tree_util.tree_flatten_with_path(optimizer.opt_state)[0]
                     if {getattr(k, "name", None) for k in path} & set(fields) and leaf.ndim >= 2 and leaf.size)
    kernel = model.layers[0].kernel[...]
    results[name] = {
        "losses": losses, "reference_losses": ref_losses, "max_param_diff": diff,
        "kernel_layout": str(kernel.sharding.spec),
        "statistic_layout": str(statistic.sharding.spec),
        "statistic_share": max(s.data.nbytes for s in statistic.addressable_shards) / statistic.nbytes}
  print("RESULT " + json.dumps({"devices": jax.device_count(), "optimizers": results}), flush=True)


if __name__ == "__main__":
  main()
