"""Optimizer-state bytes per parameter and peak memory of the compiled step (no step is run).

The tree is a small model: 8 layers of a ``width x width`` float32 matrix and a bias. Bytes per
parameter count every state array (``jax.eval_shape`` of ``init``); the peak is XLA's
``compiled.memory_analysis()`` of the donated step, so it holds params, grads, state and
temporaries. Optax has no 8-bit or stochastic-rounding bfloat16 Adam ("n/a").
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax

import steadax
import steadax.contrib

from .. import harness

# name -> (Optax transformation or None, steadax transformation)
OPTIMIZERS = {
    "adam": (lambda: optax.adam(1e-3), lambda: steadax.adam(1e-3)),
    "adam, bfloat16 mu": (lambda: optax.adam(1e-3, mu_dtype=jnp.bfloat16),
                          lambda: steadax.adam(1e-3, mu_dtype=jnp.bfloat16)),
    "adam8bit": (None, lambda: steadax.adam8bit(1e-3)),
    "adam_lowmem (bf16, stochastic rounding)": (None, lambda: steadax.adam_lowmem(1e-3)),
    "adafactor": (lambda: optax.adafactor(1e-3), lambda: steadax.adafactor(1e-3)),
    "muon": (lambda: optax.contrib.muon(1e-3), lambda: steadax.contrib.muon(1e-3)),
}


def _params(width: int) -> dict:
  spec = jax.ShapeDtypeStruct
  return {f"layer{i}": {"w": spec((width, width), jnp.float32), "b": spec((width,), jnp.float32)}
          for i in range(8)}


def _measure(lib, tx, params) -> dict:
  n = sum(x.size for x in jax.tree_util.tree_leaves(params))
  state = jax.eval_shape(tx.init, params)
  compiled = harness.step_fn(lib, tx).lower(params, state, params).compile()
  stats = compiled.memory_analysis()
  peak = stats.peak_memory_in_bytes
  return {"state_bytes_per_param": harness.tree_bytes(state) / n, "peak_bytes": int(peak),
          "temp_bytes": int(stats.temp_size_in_bytes)}


def run(sizes: harness.Sizes, progress: harness.Progress) -> dict:
  params = _params(sizes.memory_width)
  progress.start("memory", len(OPTIMIZERS))
  rows = []
  for name, (make_optax, make_steadax) in OPTIMIZERS.items():
    columns = harness.transformations(make_optax and make_optax(), make_steadax())
    rows.append({"optimizer": name, "memory": {
        label: None if tx is None else _measure(lib, tx, params)
        for label, (lib, tx) in columns.items()}})
    progress.tick(name)
  return {"kind": "memory", "parameters": sum(x.size for x in jax.tree_util.tree_leaves(params)),
          "param_bytes": harness.tree_bytes(params), "rows": rows}
