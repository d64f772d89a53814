"""Trace time of an optimizer's update, steadax against Optax, in one process (issue 23 §5).

Tracing is Python: every ``jax.numpy`` operation of every leaf is dispatched and staged, so a model
with hundreds of leaves waits for it at every first call (and at every retrace). This measures
``jax.jit(update).trace(...)`` alone (no lowering, no compilation) for a few optimizers on three
parameter trees of about 200 leaves:

* ``repeated``: 200 vectors of 7 distinct lengths (a model's layers repeat a few shapes);
* ``transformer``: 28 blocks of q, k, v, o (64x64), up (64x256), down (256x64) and a 64-vector;
* ``distinct``: 200 vectors of 200 distinct lengths (no shape repeats: the worst case for steadax,
  whose ``leafwise`` traces a leaf function once per distinct leaf type).

Each figure is the smallest process CPU time of ``--rounds`` traces, steadax and Optax alternating
which goes first; the ratio is steadax's over Optax's. A fresh function is traced each time (a
lambda), so neither library's jit cache answers.

  python -m benchmarks.trace_time                 # the table
  python -m benchmarks.trace_time --rounds 5 --optimizers adamw,sgd
  python -m benchmarks.run --cases trace_time     # as a case of make bench (rounds: the run's)
"""

from __future__ import annotations

import argparse
import time

import jax
import jax.numpy as jnp
import optax

import steadax

OPTIMIZERS = {
    "sgd": lambda lib: lib.sgd(1e-2),
    "momentum": lambda lib: lib.sgd(1e-2, momentum=0.9),
    "adam": lambda lib: lib.adam(1e-3),
    "adamw": lambda lib: lib.adamw(1e-3),
    "clip+adamw": lambda lib: lib.chain(lib.clip_by_global_norm(1.0), lib.adamw(1e-3)),
    "lion": lambda lib: lib.lion(1e-4),
    "rmsprop": lambda lib: lib.rmsprop(1e-3),
}


def trees() -> dict:
  s = jax.ShapeDtypeStruct
  transformer = {}
  for layer in range(28):
    shapes = {"q": (64, 64), "k": (64, 64), "v": (64, 64), "o": (64, 64), "up": (64, 256),
              "down": (256, 64), "norm": (64,)}
    transformer[f"block{layer}"] = {n: s(shape, jnp.float32) for n, shape in shapes.items()}
  return {
      "repeated": {f"p{i}": s((64 + i % 7,), jnp.float32) for i in range(200)},
      "transformer": transformer,
      "distinct": {f"p{i}": s((64 + i,), jnp.float32) for i in range(200)},
  }


def trace_seconds(make, params, rounds: int) -> dict:
  """The smallest CPU seconds of tracing each library's update on ``params``."""
  fns = {}
  for name, lib in (("steadax", steadax), ("optax", optax)):
    tx = make(lib)
    state = jax.eval_shape(tx.init, params)
    fns[name] = (lambda tx=tx, state=state: jax.jit(lambda u, s, p: tx.update(u, s, p)).trace(
        params, state, params))
    fns[name]()  # warm JAX's own caches (primitive rules, dtype tables) for both
  best = {name: float("inf") for name in fns}
  for r in range(rounds):
    for name in (list(fns) if r % 2 == 0 else list(reversed(fns))):
      t0 = time.process_time()
      fns[name]()
      best[name] = min(best[name], time.process_time() - t0)
  return best


def run(rounds: int, optimizers=tuple(OPTIMIZERS), echo: bool = False) -> list[dict]:
  """One row per optimizer and tree: the smallest trace CPU seconds of each library, the ratio."""
  rows = []
  if echo:
    print(f"{'optimizer':<12} {'tree':<12} {'steadax s':>10} {'optax s':>10} {'ratio':>6}")
  for opt in optimizers:
    for tree_name, params in trees().items():
      best = trace_seconds(OPTIMIZERS[opt], params, rounds)
      rows.append({"optimizer": opt, "tree": tree_name, "steadax_s": best["steadax"],
                   "optax_s": best["optax"], "ratio": best["steadax"] / best["optax"]})
      if echo:
        print(f"{opt:<12} {tree_name:<12} {best['steadax']:>10.4f} {best['optax']:>10.4f} "
              f"{rows[-1]['ratio']:>6.2f}", flush=True)
  return rows


def main(argv=None) -> list[dict]:
  parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--rounds", type=int, default=9)
  parser.add_argument("--optimizers", default=",".join(OPTIMIZERS))
  args = parser.parse_args(argv)
  return run(args.rounds, args.optimizers.split(","), echo=True)


if __name__ == "__main__":
  main()
