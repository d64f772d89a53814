"""Every registry entry in ``nnx.Optimizer`` on a model whose parameters carry sharding annotations,
on 8 virtual CPU devices with automatic mesh axes (run as a script by test_registry_sharding.py;
prints ``RESULT {json}``).

A user's Flax setup: ``nnx.Linear`` kernels annotated ``nnx.with_partitioning(..., ("fsdp",
None))`` and biases ``("fsdp",)``, the model made under ``jax.set_mesh``. ``nnx.Optimizer`` gives
each state entry built from a parameter that parameter's annotation: it must fit the state the
entry builds (a statistic of another shape must not get it). Every entry is initialised; the
entries that need no extra arguments (``value``, ``grad``, ...) are trained two steps under
``nnx.jit``, and their losses must be finite. Reported: the entries that failed, with the error.
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
from tests.conformance.registry import all_entries  # noqa: E402


class Model(nnx.Module):
  def __init__(self, rngs: nnx.Rngs):
    kernel = nnx.with_partitioning(nnx.initializers.lecun_normal(), ("fsdp", None))
    bias = nnx.with_partitioning(nnx.initializers.zeros, ("fsdp",))
    self.a = nnx.Linear(16, 24, kernel_init=kernel, bias_init=bias, rngs=rngs)
    self.b = nnx.Linear(24, 16, kernel_init=kernel, use_bias=False, rngs=rngs)

  def __call__(self, x):
    return self.b(jnp.tanh(self.a(x)))


@nnx.jit
def train_step(model, optimizer, x, y):
  loss, grads = nnx.value_and_grad(lambda m: jnp.mean((m(x) - y) ** 2))(model)
  optimizer.update(model, grads)
  return loss


def main() -> None:
  mesh = jax.make_mesh((8,), ("fsdp",), axis_types=(AxisType.Auto,))
  x = jnp.linspace(-1.0, 1.0, 128, dtype=jnp.float32).reshape(8, 16)
  y = jnp.cos(x) * 0.5
  failures, trained = {}, 0
  with jax.set_mesh(mesh):
    for entry in all_entries():
      try:
        model = Model(nnx.Rngs(0))
        optimizer = nnx.Optimizer(model, entry.factory(), wrt=nnx.Param)
        if entry.extra_args is None:
          losses = [float(train_step(model, optimizer, x, y)) for _ in range(2)]
          assert np.all(np.isfinite(losses)), losses
          trained += 1
      except Exception as error:  # reported, not raised: every entry runs
        failures[entry.name] = f"{type(error).__name__}: {str(error).splitlines()[0][:300]}"
  print("RESULT " + json.dumps({"devices": jax.device_count(), "entries": len(all_entries()),
                                "trained": trained, "failures": failures}), flush=True)


if __name__ == "__main__":
  main()
