"""First-call time (trace, lower, compile) of the AdamW step as the number of small leaves grows.

A model with hundreds of leaves waits for this at every start; it grows with the leaf count because
the step is traced and compiled leaf by leaf. Each point is one measurement (a 1,600-leaf compile
takes a minute on a 2-core machine); the libraries alternate which goes first at each point.
"""

from __future__ import annotations

import time

import jax
import jax.numpy as jnp
import optax

import steadax

from .. import harness


def _first_call(lib, tx, leaf_sizes) -> dict:
  params = {f"p{i:04d}": jnp.ones(n, jnp.float32) for i, n in enumerate(leaf_sizes)}
  grads = harness.gradients_like(params)
  state = tx.init(params)
  fn = harness.step_fn(lib, tx)  # a new function: nothing is cached from an earlier point
  t0 = time.perf_counter()
  traced = fn.trace(params, state, grads)
  t1 = time.perf_counter()
  lowered = traced.lower()
  t2 = time.perf_counter()
  compiled = lowered.compile()
  t3 = time.perf_counter()
  jax.block_until_ready(compiled(params, state, grads))
  t4 = time.perf_counter()
  return {"total_s": t4 - t0, "trace_s": t1 - t0, "lower_s": t2 - t1, "compile_s": t3 - t2}


def _columns() -> dict:
  return harness.transformations(optax.adamw(1e-3), steadax.adamw(1e-3), fused=True)


def run(sizes: harness.Sizes, progress: harness.Progress) -> dict:
  progress.start("first_call", len(sizes.compile_leaves) * len(_columns()))
  rows = []
  for i, n in enumerate(sizes.compile_leaves):
    leaf_sizes = harness.small_leaf_sizes(n)
    columns = _columns()
    order = list(columns) if i % 2 == 0 else list(columns)[::-1]
    row = {"leaves": n, "parameters": sum(leaf_sizes), "first_call": {}}
    for label in order:
      lib, tx = columns[label]
      row["first_call"][label] = None if tx is None else _first_call(lib, tx, leaf_sizes)
      progress.tick(f"{n} leaves, {label}")
    row["first_call"] = {label: row["first_call"][label] for label in columns}
    rows.append(row)
  return {"kind": "first_call", "rows": rows}
