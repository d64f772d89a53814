"""How far steadax's Adam drifts from Optax's over a training run, next to Optax's own drifts.

steadax rounds a hyperparameter to the compute dtype (float32) before any arithmetic on it, so
``1 - b2`` is ``1 - float32(0.999)``, 1.3e-5 relative below ``float32(1 - 0.999)``, which plain
``optax.adam`` computes from the Python float. ``optax.inject_hyperparams(optax.adam)`` rounds
first, as steadax does. This script trains a small MLP (16-64-64-1, tanh, 256 noisy samples,
full batch, one ``lax.scan`` under ``jit``) and prints the relative difference of the loss curves
at a few steps for:

* steadax against ``optax.adam`` (transformation closed over, and passed to the jitted function as
  an argument, the hyperparameters then traced);
* ``optax.inject_hyperparams(optax.adam)`` against ``optax.adam`` (Optax's own two roundings);
* steadax against ``optax.inject_hyperparams(optax.adam)``;
* ``optax.adam`` from initial parameters changed by one float32 ulp (what any last-bit
  difference, a different XLA fusion or summation order, does to the same run).

Two regimes: a stable one (lr 1e-3, 300 steps) and one where the loss heads for zero (lr 3e-3,
500 steps), where relative differences of a vanishing loss are large for every pair.

  python -m benchmarks.adam_drift
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax

import steadax


def _problem():
  k1, k2, k3, k4 = jax.random.split(jax.random.key(0), 4)
  x = jax.random.normal(k1, (256, 16))
  y = jnp.sin(x @ jax.random.normal(k2, (16, 1))) + 0.3 * jax.random.normal(k4, (256, 1))
  ks = jax.random.split(k3, 3)
  params = {"w1": jax.random.normal(ks[0], (16, 64)) / 4, "b1": jnp.zeros(64),
            "w2": jax.random.normal(ks[1], (64, 64)) / 8, "b2": jnp.zeros(64),
            "w3": jax.random.normal(ks[2], (64, 1)) / 8}

  def loss(p):
    h = jnp.tanh(x @ p["w1"] + p["b1"])
    h = jnp.tanh(h @ p["w2"] + p["b2"])
    return jnp.mean((h @ p["w3"] - y) ** 2)

  return params, loss


def _losses(tx, params, loss, steps, as_argument=False):
  def body(tx, carry):
    p, s = carry
    value, g = jax.value_and_grad(loss)(p)
    u, s = tx.update(g, s, p)
    return (optax.apply_updates(p, u), s), value

  if as_argument:
    run = jax.jit(lambda tx, p: jax.lax.scan(lambda c, _: body(tx, c), (p, tx.init(p)), None, steps))
    return np.asarray(run(tx, params)[1])
  run = jax.jit(lambda p: jax.lax.scan(lambda c, _: body(tx, c), (p, tx.init(p)), None, steps))
  return np.asarray(run(params)[1])


def compare(name: str, lr: float, steps: int) -> dict:
  """``{pair: relative loss differences at steps 1, 10, 100 and the last}`` for one optimizer."""
  params, loss = _problem()
  factory = getattr(optax, name)
  plain = _losses(factory(lr), params, loss, steps)
  curves = {
      "steadax (closed over) vs optax": (_losses(getattr(steadax, name)(lr), params, loss, steps), plain),
      "steadax (jit argument) vs optax": (
          _losses(getattr(steadax, name)(lr), params, loss, steps, as_argument=True), plain),
      "optax.inject_hyperparams vs optax": (
          _losses(optax.inject_hyperparams(factory)(learning_rate=lr), params, loss, steps), plain),
      "optax, params + 1 ulp, vs optax": (
          _losses(factory(lr), jax.tree.map(lambda p: p * (1 + 2**-23), params), loss, steps), plain),
  }
  at = (1, 10, 100, steps - 1)
  out = {"final_loss": float(plain[-1]), "initial_loss": float(plain[0])}
  for pair, (a, b) in curves.items():
    rel = np.abs(a - b) / np.abs(b)
    out[pair] = {f"step {i + 1}": float(rel[i]) for i in at} | {"max": float(rel.max())}
  return out


def main() -> None:
  for lr, steps in ((1e-3, 300), (3e-3, 500)):
    for name in ("adam", "adamw"):
      result = compare(name, lr, steps)
      print(f"{name}, lr {lr:g}, {steps} steps: loss {result['initial_loss']:.4f} -> "
            f"{result['final_loss']:.2e}; relative difference of the loss at each step")
      for pair, rel in result.items():
        if isinstance(rel, dict):
          cells = "  ".join(f"{k} {v:.1e}" for k, v in rel.items())
          print(f"  {pair:36s} {cells}")


if __name__ == "__main__":
  main()
