"""Compile time of the matrix optimizers' update as the model gets deeper (issues 22 §1 and 33 §3).

The parameters are ``L`` transformer-like layers of 7 leaves (q, k, v, o: 64x64; up: 64x256; down:
256x64; a 64-vector), for each depth ``L``: three distinct matrix shapes, however deep the model.
With ``--stacked`` the same layers are stacked as a scanned model writes them: one ``(L, d_in,
d_out)`` leaf per weight and an ``(L, 64)`` norm vector, with dimension numbers naming the layer
axis a batch axis (``stacked_dimensions``).
For every optimizer and depth the update alone, ``jax.jit(tx.update).lower(...).compile()``, is
traced, lowered and compiled afresh (the persistent compilation cache is off for the case), the
median of ``repetitions`` such compilations is kept (the depths interleaved in each repetition),
then the compiled update is timed (median milliseconds over alternating rounds). Everything runs in one process, so the ratios between depths
and against Optax's ``contrib.muon`` are measured on the same load: on a shared machine the
absolute seconds move, the ratios much less.

  python -m benchmarks.run --cases matrix_depth
  python -m benchmarks.cases.matrix_depth --depths 2,8,32 --repetitions 3 --optimizers muon,soap
  python -m benchmarks.cases.matrix_depth --depths 2,32 --per-leaf-depths '' --no-cpu-chunks
  python -m benchmarks.cases.matrix_depth --depths 2,8,32 --per-leaf-depths '' --stacked

``--no-cpu-chunks`` measures the program an accelerator (or a mesh of CPU devices) compiles: each
shape group one batched computation (``steadax.MatrixExecution(chunks=None)``), not the chunks one
CPU device splits it into to use its cores. The per-parameter path is
``MatrixExecution(grouping=False)``. Both are the optimizers' ``execution`` argument; a version of
steadax without it (an older checkout on ``PYTHONPATH``, for a comparison) runs its default only.
"""

from __future__ import annotations

import argparse
import inspect
import json
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax

import steadax

from .. import harness

WIDTH = 64
LEAVES_PER_LAYER = 7


def _with(factory, **kwargs):
  """``factory(..., **kwargs)`` without the keywords it does not take (an older steadax's)."""
  params = inspect.signature(factory).parameters
  return lambda *args: factory(*args, **{k: v for k, v in kwargs.items() if v is not None and k in params})


def optimizers(execution=None, stacked: bool = False) -> dict:
  """label -> factory of the transformation (a fresh object per compilation); ``execution`` a
  ``steadax.MatrixExecution`` (None: the default); ``stacked``: with ``stacked_dimensions``."""
  ex = {"execution": execution}
  dims = lambda kind: stacked_dimensions(kind) if stacked else None  # noqa: E731
  return {
      "steadax contrib.muon": lambda: _with(steadax.contrib.muon, muon_weight_dimension_numbers=dims("muon"),
                                            **ex)(1e-3),
      "optax contrib.muon": lambda: optax.contrib.muon(1e-3, muon_weight_dimension_numbers=dims("optax")),
      "steadax soap": lambda: _with(steadax.soap, weight_dimension_numbers=dims("kron"), **ex)(1e-3),
      "steadax shampoo": lambda: _with(steadax.shampoo, weight_dimension_numbers=dims("kron"), **ex)(1e-3),
      "steadax psgd_kron": lambda: _with(steadax.psgd_kron, weight_dimension_numbers=dims("kron"), **ex)(1e-3),
      "steadax galore": lambda: _with(steadax.contrib.galore, weight_dimension_numbers=dims("muon"), rank=16,
                                      **ex)(1e-3),
      "steadax adamw": lambda: steadax.adamw(1e-3),
  }


def layers(depth: int, seed: int = 0, stacked: bool = False) -> dict:
  """``depth`` layers of 7 leaves, float32, deterministic; ``stacked``: one leaf per weight, the
  layers on its leading axis (the same numbers)."""
  rng = np.random.default_rng(seed)
  shapes = {"q": (WIDTH, WIDTH), "k": (WIDTH, WIDTH), "v": (WIDTH, WIDTH), "o": (WIDTH, WIDTH),
            "up": (WIDTH, 4 * WIDTH), "down": (4 * WIDTH, WIDTH), "bias": (WIDTH,)}
  tree = {f"layer{i:02d}": {name: jnp.asarray(rng.normal(size=shape).astype(np.float32) / WIDTH)
                            for name, shape in shapes.items()} for i in range(depth)}
  if stacked:
    return {name: jnp.stack([tree[layer][name] for layer in tree]) for name in shapes}
  return tree


def stacked_dimensions(kind: str) -> dict:
  """Dimension numbers of the stacked layers: every ``(L, d_in, d_out)`` weight a batch of matrices
  along its layer axis; the ``(L, d)`` norm vector a batch of vectors for SOAP, Shampoo and
  PSGD-Kron (``kind="kron"``: ``WeightDimensionNumbers((), 1)``) and None for Muon and GaLore (AdamW,
  not projected)."""
  matrix = optax.contrib.MuonDimensionNumbers(1, 2) if kind == "optax" else steadax.WeightDimensionNumbers(1, 2)
  vector = steadax.WeightDimensionNumbers((), 1) if kind == "kron" else None
  return {name: matrix for name in ("q", "k", "v", "o", "up", "down")} | {"bias": vector}


def _compile_once(make_tx, grads, params) -> tuple[float, float, float, object, object]:
  """Seconds to trace + lower and to compile a fresh jitted update, the CPU seconds of both (this
  process, all threads: on a loaded machine the work, where wall time adds the waiting), the
  compiled program and a state."""
  tx = make_tx()
  state = jax.jit(tx.init)(params)
  # A new function object each time: nothing is reused from an earlier trace.
  update = jax.jit(lambda g, s, p: tx.update(g, s, p))
  c0, t0 = time.process_time(), time.perf_counter()
  lowered = update.lower(grads, state, params)
  t1 = time.perf_counter()
  compiled = lowered.compile()
  c2, t2 = time.process_time(), time.perf_counter()
  return t1 - t0, t2 - t1, c2 - c0, compiled, state


def _steady(compiled, grads, state, params):
  """The state after two updates: a step that refreshes no preconditioner (SOAP and Shampoo refresh
  at the first update, then every 10), the one most steps are."""
  for _ in range(2):
    state = compiled(grads, state, params)[1]
  return jax.block_until_ready(state)


def _time_steps(programs: dict, rounds: int) -> dict:
  """Median seconds per step of each ``(compiled, grads, state, params)``, in alternating rounds."""
  times: dict = {label: [] for label in programs}
  for _ in range(rounds):
    for label, (compiled, grads, state, params) in programs.items():
      t0 = time.perf_counter()
      jax.block_until_ready(compiled(grads, state, params))
      times[label].append(time.perf_counter() - t0)
  return {label: statistics.median(t) for label, t in times.items()}


def measure(depths, repetitions: int, labels=None, rounds: int = 10, progress=None,
            per_leaf_depths=None, execution=None, stacked: bool = False) -> dict:
  """The case's measurements: one row per (optimizer, depth).

  ``per_leaf_depths`` (default: every depth): there the steadax matrix optimizers are also compiled
  (once per point) and timed with shape groups off (``MatrixExecution(grouping=False)``), the
  per-parameter path of earlier versions, in the same process. ``execution``: the optimizers'
  ``MatrixExecution`` (None: their default); ``stacked``: the layers stacked (see the module notes).
  """
  per_leaf_depths = depths if per_leaf_depths is None else per_leaf_depths
  factories = optimizers(execution, stacked)
  alone = getattr(steadax, "MatrixExecution", None)  # None: a steadax without the argument
  per_leaf = optimizers(alone(grouping=False), stacked) if per_leaf_depths and alone else {}
  labels = list(factories) if labels is None else labels
  previous = jax.config.jax_enable_compilation_cache
  jax.config.update("jax_enable_compilation_cache", False)
  rows = []
  try:
    trees = {d: layers(d, stacked=stacked) for d in depths}
    grads = {d: jax.tree.map(lambda p: p * 0.5 + 1e-3, trees[d]) for d in depths}
    for label in labels:
      # The depths interleaved within each repetition: a change of load on a shared machine falls
      # on every depth alike, so the ratios between depths hold better than the absolute seconds.
      compiled_by_depth: dict = {d: ([], [], None) for d in depths}
      for _ in range(repetitions):
        for depth in depths:
          lo, co, cpu, compiled, state = _compile_once(factories[label], grads[depth], trees[depth])
          totals, cpus, _ = compiled_by_depth[depth]
          totals.append((lo, co))
          cpus.append(cpu)
          compiled_by_depth[depth] = (totals, cpus, (compiled, state))
          if progress is not None:
            progress.tick(f"{label} L={depth}")
      for depth in depths:
        totals, cpus, (compiled, state) = compiled_by_depth[depth]
        programs = {}
        programs["grouped"] = (compiled, grads[depth], _steady(compiled, grads[depth], state, trees[depth]),
                               trees[depth])
        row = {"optimizer": label, "depth": depth, "leaves": LEAVES_PER_LAYER * depth,
               "lower_s": statistics.median(t[0] for t in totals),
               "compile_s": statistics.median(t[1] for t in totals),
               "total_s": statistics.median(sum(t) for t in totals),
               "all_total_s": [sum(t) for t in totals], "cpu_s": statistics.median(cpus)}
        if depth in per_leaf_depths and label in per_leaf and "adamw" not in label and label.startswith("steadax"):
          lo, co, cpu, compiled, state = _compile_once(per_leaf[label], grads[depth], trees[depth])
          row["per_leaf_cpu_s"] = cpu
          programs["per_leaf"] = (compiled, grads[depth], _steady(compiled, grads[depth], state, trees[depth]),
                                  trees[depth])
          row["per_leaf_total_s"] = lo + co
        steps = _time_steps(programs, rounds)
        row["step_s"] = steps["grouped"]
        if "per_leaf" in steps:
          row["per_leaf_step_s"] = steps["per_leaf"]
        rows.append(row)
  finally:
    jax.config.update("jax_enable_compilation_cache", previous)
  return {"kind": "matrix_depth", "depths": list(depths), "repetitions": repetitions, "rows": rows,
          "ratios": ratios(rows, depths), "stacked": stacked}


def ratios(rows, depths) -> dict:
  """Growth from the shallowest to the deepest model per optimizer, and steadax/Optax muon."""
  by = {(r["optimizer"], r["depth"]): r for r in rows}
  out = {}
  lo, hi = min(depths), max(depths)
  for label in dict.fromkeys(r["optimizer"] for r in rows):
    if (label, lo) in by and (label, hi) in by:
      out[f"{label} L={hi}/L={lo}"] = by[(label, hi)]["total_s"] / by[(label, lo)]["total_s"]
      out[f"{label} L={hi}/L={lo} cpu"] = by[(label, hi)]["cpu_s"] / by[(label, lo)]["cpu_s"]
  for depth in depths:
    a, b = by.get(("steadax contrib.muon", depth)), by.get(("optax contrib.muon", depth))
    if a and b:
      out[f"muon steadax/optax L={depth}"] = a["total_s"] / b["total_s"]
      out[f"muon steadax/optax L={depth} cpu"] = a["cpu_s"] / b["cpu_s"]
  return out


def run(sizes: harness.Sizes, progress: harness.Progress) -> dict:
  depths = sizes.matrix_depths
  repetitions = sizes.matrix_repetitions
  progress.start("matrix_depth", len(optimizers()) * len(depths) * repetitions)
  # Optax's muon is not written for strict promotion; the case runs under JAX's default.
  previous = jax.config.jax_numpy_dtype_promotion
  jax.config.update("jax_numpy_dtype_promotion", "standard")
  try:
    return measure(depths, repetitions, rounds=max(3, sizes.rounds), progress=progress)
  finally:
    jax.config.update("jax_numpy_dtype_promotion", previous)


def table(result: dict) -> list[str]:
  """Markdown: compile seconds per depth, growth, step time at each depth."""
  depths = result["depths"]
  labels = list(dict.fromkeys(r["optimizer"] for r in result["rows"]))
  by = {(r["optimizer"], r["depth"]): r for r in result["rows"]}
  lo, hi = min(depths), max(depths)
  header = ["optimizer", *[f"L={d} s" for d in depths], f"L={hi}/L={lo}",
            *[f"L={d} CPU s" for d in depths], f"L={hi}/L={lo} CPU",
            *[f"per-leaf L={d} CPU s" for d in depths], *[f"step L={d} ms" for d in depths],
            *[f"per-leaf step L={d} ms" for d in depths]]

  def cell(label, d, key, fmt):
    row = by.get((label, d))
    return fmt(row[key]) if row is not None and key in row else "n/a"

  seconds, ms = (lambda x: f"{x:.2f}"), (lambda x: f"{1e3 * x:.3g}")
  body = []
  for label in labels:
    growth = result["ratios"].get(f"{label} L={hi}/L={lo}")
    cpu_growth = result["ratios"].get(f"{label} L={hi}/L={lo} cpu")
    body.append([label, *[cell(label, d, "total_s", seconds) for d in depths],
                 "n/a" if growth is None else f"{growth:.2f}",
                 *[cell(label, d, "cpu_s", seconds) for d in depths],
                 "n/a" if cpu_growth is None else f"{cpu_growth:.2f}",
                 *[cell(label, d, "per_leaf_cpu_s", seconds) for d in depths],
                 *[cell(label, d, "step_s", ms) for d in depths],
                 *[cell(label, d, "per_leaf_step_s", ms) for d in depths]])
  align = ["---"] + ["---:"] * (len(header) - 1)
  muon = ", ".join(f"{k} {v:.2f}" for k, v in result["ratios"].items() if k.startswith("muon"))
  return [f"Update only (`jax.jit(tx.update).lower(...).compile()`), L layers of 7 leaves, median of "
          f"{result['repetitions']} compilations (wall seconds, and CPU seconds of the process); {muon}. "
          "Per-leaf: shape groups off (one compilation).", "",
          *["| " + " | ".join(r) + " |" for r in [header, align, *body]]]


def main(argv=None) -> None:
  parser = argparse.ArgumentParser(prog="python -m benchmarks.cases.matrix_depth", description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--depths", default="2,8,32")
  parser.add_argument("--repetitions", type=int, default=3)
  parser.add_argument("--rounds", type=int, default=10)
  parser.add_argument("--optimizers", default=None, help="comma-separated substrings of the labels")
  parser.add_argument("--json", default=None, help="write the result here")
  parser.add_argument("--per-leaf-depths", default=None,
                      help="depths at which the per-parameter path is also measured (default: all)")
  parser.add_argument("--no-cpu-chunks", action="store_true",
                      help="compute each shape group as one batch, as on an accelerator or several "
                           "devices, instead of the chunks (per core, or by bytes) one CPU device uses")
  parser.add_argument("--stacked", action="store_true",
                      help="the layers stacked on a leading axis, with dimension numbers (a scanned model)")
  args = parser.parse_args(argv)
  jax.config.update("jax_numpy_dtype_promotion", "standard")
  labels = list(optimizers())
  if args.optimizers:
    wanted = args.optimizers.split(",")
    labels = [l for l in labels if any(w in l for w in wanted)]
  depths = [int(d) for d in args.depths.split(",")]
  execution = steadax.MatrixExecution(chunks=None) if args.no_cpu_chunks else None
  result = measure(depths, args.repetitions, labels, rounds=args.rounds, execution=execution, stacked=args.stacked,
                   per_leaf_depths=None if args.per_leaf_depths is None else
                   [int(d) for d in args.per_leaf_depths.split(",") if d])
  print("\n".join(table(result)))
  if args.json:
    with open(args.json, "w") as f:
      json.dump(result, f, indent=1)


if __name__ == "__main__":
  main()
