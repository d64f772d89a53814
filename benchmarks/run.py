"""Side-by-side benchmarks of steadax against Optax (``make bench``).

Each case builds the same optimizer in both libraries, jits one ``update + apply_updates`` step with
donated params and state, and reports the median step time and the ratio Optax/steadax (>1 means
steadax is faster). Absolute times hold only for the machine they ran on; ratios are the point.

Cases:
  * ``large``: AdamW on one large float32 tensor (memory-bound). Also reported against a roofline
    kernel on the same machine that moves the same bytes (reads p, g, mu, nu; writes p, mu, nu:
    28 bytes per parameter).
  * ``many-small``: AdamW on a tree of many small leaves (per-leaf overhead), plus trace+compile time.
  * ``mixed``: AdamW on a float32/bfloat16 tree.
  * ``new-lr``: compilations needed for three learning rates (steadax: the optimizer is a jit
    argument; Optax: a new closure per learning rate).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax

import steadax

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "out")


def _timeit(fn, args, repeats):
  args = jax.tree_util.tree_map(lambda x: x.copy(), args)  # donated buffers stay with the caller
  out = fn(*args)
  jax.block_until_ready(out)
  args = out
  times = []
  for _ in range(repeats):
    t0 = time.perf_counter()
    out = fn(*args)
    jax.block_until_ready(out)
    times.append(time.perf_counter() - t0)
    args = out
  return statistics.median(times)


def _step_fn(lib, tx):
  def step(params, state, grads):
    updates, state = tx.update(grads, state, params)
    return lib.apply_updates(params, updates), state, grads

  return jax.jit(step, donate_argnums=(0, 1))


def _bench_tree(make_params, tx_pair, repeats, rounds=5):
  """Median step time of each library, measured in alternating rounds (noise hits both alike)."""
  setups = {}
  for label, lib, tx in (("optax", optax, tx_pair[0]), ("steadax", steadax, tx_pair[1])):
    params = make_params()
    grads = jax.tree_util.tree_map(lambda p: (0.01 * jnp.ones_like(p)).astype(p.dtype), params)
    state = tx.init(params)
    fn = _step_fn(lib, tx)
    t0 = time.perf_counter()
    fn.lower(params, state, grads).compile()
    compile_s = time.perf_counter() - t0
    setups[label] = (fn, (params, state, grads), compile_s)
  times = {label: [] for label in setups}
  for _ in range(rounds):
    for label, (fn, args, _) in setups.items():
      times[label].append(_timeit(fn, args, max(1, repeats // rounds)))
  return {label: {"step_s": min(times[label]), "compile_s": setups[label][2]} for label in setups}


def _roofline(n, repeats):
  """A kernel with AdamW's memory traffic and trivial arithmetic: the bandwidth floor here."""
  def kernel(p, m, v, g):
    return p + g, m + g, v + g, g

  fn = jax.jit(kernel, donate_argnums=(0, 1, 2))
  args = tuple(jnp.ones(n, jnp.float32) for _ in range(4))
  return _timeit(fn, args, repeats)


def case_large(n, repeats):
  make = lambda: {"w": jnp.ones(n, jnp.float32)}  # noqa: E731
  res = _bench_tree(make, (optax.adamw(1e-3), steadax.adamw(1e-3)), repeats)
  floor = _roofline(n, repeats)
  res["roofline_step_s"] = floor
  res["bytes_per_step"] = 28 * n
  return res


def case_many_small(leaves, size, repeats):
  make = lambda: {f"p{i}": jnp.ones((size,), jnp.float32) for i in range(leaves)}  # noqa: E731
  return _bench_tree(make, (optax.adamw(1e-3), steadax.adamw(1e-3)), repeats)


def case_mixed(n, repeats):
  make = lambda: {"a": jnp.ones(n, jnp.float32), "b": jnp.ones(n, jnp.bfloat16)}  # noqa: E731
  return _bench_tree(make, (optax.adamw(1e-3), steadax.adamw(1e-3)), repeats)


def case_new_lr():
  params = {"w": jnp.ones(16, jnp.float32)}
  grads = params
  compiles = {"optax": 0, "steadax": 0}

  def counting(label, f):
    def wrapped(*a):
      compiles[label] += 1
      return f(*a)
    return wrapped

  @jax.jit
  @lambda f: counting("steadax", f)
  def ours(tx, params, state, grads):
    updates, state = tx.update(grads, state, params)
    return steadax.apply_updates(params, updates), state

  for lr in (1e-3, 3e-4, 1e-4):
    tx = steadax.adam(lr)
    ours(tx, params, tx.init(params), grads)
    otx = optax.adam(lr)

    @jax.jit
    @lambda f: counting("optax", f)
    def theirs(params, state, grads, otx=otx):
      updates, state = otx.update(grads, state, params)
      return optax.apply_updates(params, updates), state

    theirs(params, otx.init(params), grads)
  return compiles


def main(argv=None):
  parser = argparse.ArgumentParser()
  parser.add_argument("--large", type=int, default=4_000_000)
  parser.add_argument("--leaves", type=int, default=1000)
  parser.add_argument("--leaf-size", type=int, default=64)
  parser.add_argument("--repeats", type=int, default=30)
  args = parser.parse_args(argv)

  report = {
      "machine": f"{platform.machine()} {jax.devices()[0].platform} x{jax.device_count()} "
                 f"({os.cpu_count()} cpus), jax {jax.__version__}, optax {optax.__version__}",
      "large": case_large(args.large, args.repeats),
      "many_small": case_many_small(args.leaves, args.leaf_size, args.repeats),
      "mixed": case_mixed(args.large // 2, args.repeats),
      "new_lr_compilations": case_new_lr(),
  }
  lines = [f"Machine: {report['machine']}", "",
           "| case | optax step | steadax step | optax/steadax | optax compile | steadax compile |",
           "|---|---:|---:|---:|---:|---:|"]
  for case in ("large", "many_small", "mixed"):
    r = report[case]
    o, s = r["optax"], r["steadax"]
    lines.append(f"| {case} | {1e3 * o['step_s']:.3f} ms | {1e3 * s['step_s']:.3f} ms | "
                 f"{o['step_s'] / s['step_s']:.2f} | {o['compile_s']:.2f} s | {s['compile_s']:.2f} s |")
  large = report["large"]
  gbs = large["bytes_per_step"] / large["steadax"]["step_s"] / 1e9
  floor_gbs = large["bytes_per_step"] / large["roofline_step_s"] / 1e9
  lines += ["", f"large: steadax moves {gbs:.1f} GB/s; the roofline kernel on this machine "
            f"{floor_gbs:.1f} GB/s ({100 * gbs / floor_gbs:.0f}% of the floor).",
            f"new learning rates: compilations {report['new_lr_compilations']}"]
  text = "\n".join(lines)
  print(text)
  os.makedirs(OUT, exist_ok=True)
  with open(os.path.join(OUT, "results.json"), "w") as f:
    json.dump(report, f, indent=2)
  with open(os.path.join(OUT, "results.md"), "w") as f:
    f.write(text + "\n")


if __name__ == "__main__":
  main()
