"""The language model with its layers stacked and scanned, against the per-layer model (issue 33).

The scanned layout holds every weight of the blocks as one array ``(layers, ...)`` and runs them
with one ``lax.scan`` (``lm.stack_blocks``, ``lm.forward``): the maths of the per-layer model, the
layout of MaxText, Levanter and a scanned Flax model. Both layouts start from the same numbers and
see the same batches. Each optimizer gets its dimension numbers from
``steadax.dimension_numbers_from`` on its layout (``stacked={"blocks.*": 1}`` on the scanned one:
each layer's slice a separate matrix), so where the optimizer treats each slice as the per-layer
model's own matrix the two runs agree to float32 rounding (the summation order of the scanned
program differs), and the difference of their training losses says so. Muon leaves the embeddings,
the positions and the output layer to its AdamW part on both layouts (``override``).

Reported per optimizer and layout, for one learning rate (the middle of the case's sweep): the
training and validation losses, the compile time of the training chunk (``eval_every`` steps in one
``lax.scan``) and the time of one training step (median of alternating rounds). The matrix
optimizers run when they take stacked dimension numbers (``benchmarks/stacked.py``).

  python -m benchmarks.cases.lm --config quick --scanned    # the quick model with 4 layers
  python -m benchmarks.cases.lm_scanned --config gpu --steps 300 --json scanned.json
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import statistics
import time
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

import steadax

from .. import harness, stacked
from . import lm

LAYOUTS = ("per-layer", "scanned")
MIN_LAYERS = 4  # scanning one layer says nothing
# GaLore is not in the per-layer case's table; the others use the middle of its learning rates.
GALORE_LEARNING_RATE = 3e-3
MUON_ADAMW_PARAMS = {"embed|position|head": None}


def scanned_config(config: lm.Config) -> lm.Config:
  """``config`` with at least ``MIN_LAYERS`` layers (the quick and smoke models have one)."""
  return dataclasses.replace(config, layers=max(config.layers, MIN_LAYERS))


def learning_rate(name: str) -> float:
  if name in lm.OPTIMIZERS:
    rates = lm.OPTIMIZERS[name].learning_rates
    return rates[len(rates) // 2]
  return GALORE_LEARNING_RATE


def dimension_numbers(name: str, params: dict) -> Any:
  """The optimizer's dimension numbers on either layout, in one call (Muon: its matrices only)."""
  scanned = isinstance(params["blocks"], dict)  # per layer, "blocks.0.query" is one matrix
  return steadax.dimension_numbers_from(
      params, stacked={"blocks.*": 1} if scanned else None,
      override=MUON_ADAMW_PARAMS if name == "muon" else None)


def make(name: str, lr: Any, dims: Any) -> Any:
  """The transformation of ``name`` with the case's settings (``lm.OPTIMIZERS``' notes)."""
  if name == "adamw":
    return steadax.adamw(lr, weight_decay=1e-4)
  extra: dict = {}
  if name == "muon":
    extra["adam_learning_rate"] = lm.MUON_ADAM_SHARE * lr
  if name == "soap":
    extra["max_precond_dim"] = 128
  return stacked.MATRIX_OPTIMIZERS[name].make(lr, dims, **extra)


def _relative_gap(a: list, b: list) -> float:
  a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
  return float(np.max(np.abs(a - b) / np.abs(b)))


def _warm_up(train: jax.Array) -> None:
  """A toy model's training chunk, so that the first compile time measured does not carry the
  process's one-time costs (in a quick run, AdamW's per-layer chunk, compiled first, took 2.9x its
  scanned chunk; Muon's, compiled later, 0.95x)."""
  toy = dataclasses.replace(lm.CONFIGS["smoke"], d_model=8, layers=2, context=8, batch=2, steps=1,
                            eval_every=1, val_windows=2)
  per_layer = lm.init_params(toy)
  text_val = np.zeros(64, np.uint8)
  for params in (lm.stack_blocks(per_layer),):
    data = {"train": train, "val": lm.val_windows(toy, text_val), "params": params,
            "offsets": lm.batch_offsets(toy, int(train.shape[0]))}
    sweep = steadax.sweep(lambda lr: make("adamw", lr, None), lr=jnp.asarray([1e-3], jnp.float32))
    lm.train_sweep(lambda h: h, sweep, 1, steadax, toy, data, harness.Progress(enabled=False), "")


def compare_layouts(config: lm.Config, names: list[str] | None = None,
                    progress: harness.Progress | None = None, deadline: float | None = None,
                    on_row: Callable[[dict], None] | None = None, warm_up: bool = True) -> dict:
  """Trains each optimizer on both layouts; ``names`` default: AdamW and every matrix optimizer
  that takes stacked dimension numbers. No new optimizer is started after ``deadline``;
  ``on_row(rows)`` hears the rows after each optimizer; ``warm_up``: compile a toy model first."""
  progress = progress or harness.Progress(enabled=False)
  names = ["adamw", *stacked.supported()] if names is None else names
  text = lm.corpus()
  per_layer = lm.init_params(config)
  params = {"per-layer": per_layer, "scanned": lm.stack_blocks(per_layer)}
  data = {"train": jnp.asarray(text.train.astype(np.int32)), "val": lm.val_windows(config, text.val),
          "offsets": lm.batch_offsets(config, len(text.train))}
  if warm_up:
    _warm_up(data["train"])
  progress.start("lm layouts", len(names) * (2 * (config.steps // config.eval_every)
                                             + config.timing_rounds))
  rows = {}
  for name in names:
    if deadline is not None and time.perf_counter() > deadline:
      break
    lr = learning_rate(name)
    runs, runners = {}, {}
    for layout in LAYOUTS:
      dims = dimension_numbers(name, params[layout])
      layout_data = {**data, "params": params[layout]}
      sweep = steadax.sweep(lambda lr, dims=dims: make(name, lr, dims), lr=jnp.asarray([lr], jnp.float32))
      runs[layout] = lm.train_sweep(lambda h: h, sweep, 1, steadax, config, layout_data, progress,
                                    f"{name} {layout}")
      runners[layout] = lm.time_one_configuration(steadax, make(name, lr, dims), config, layout_data)
      runners[layout](config.timing_steps)  # warm-up
    times: dict = {layout: [] for layout in LAYOUTS}
    for r in range(config.timing_rounds):
      for layout in (LAYOUTS if r % 2 == 0 else LAYOUTS[::-1]):
        times[layout].append(runners[layout](config.timing_steps))
      progress.tick(f"lm layouts {name} timing round {r + 1}")
    row: dict = {"learning_rate": lr}
    for layout in LAYOUTS:
      run = runs[layout]
      row[layout] = {"train_loss": run["train_loss"][0], "val_loss": run["val_loss"][0],
                     "final_val_loss": run["val_loss"][0][-1], "compile_s": run["compile_s"],
                     "step_s": statistics.median(times[layout]), "step_rounds_s": times[layout]}
    a, b = row["scanned"], row["per-layer"]
    row["train_loss_max_rel_diff"] = _relative_gap(a["train_loss"], b["train_loss"])
    row["first_loss_rel_diff"] = _relative_gap(a["train_loss"][:1], b["train_loss"][:1])
    row["compile scanned/per-layer"] = a["compile_s"] / b["compile_s"]
    row["step scanned/per-layer"] = a["step_s"] / b["step_s"]
    rows[name] = row
    if on_row is not None:
      on_row(rows)
  return {"kind": "lm_layouts", "config": dataclasses.asdict(config),
          "parameters": sum(int(np.prod(p.shape)) for p in jax.tree_util.tree_leaves(per_layer)),
          "left_out": {n: stacked.stacked_support(n) for n in stacked.MATRIX_OPTIMIZERS
                       if n not in names and stacked.stacked_support(n) is not None},
          "rows": rows}


def table(result: dict) -> list[str]:
  """Markdown: one row per optimizer, the two layouts side by side."""
  c = result["config"]
  header = ["optimizer", "lr", "final val loss per-layer", "final val loss scanned",
            "train loss max rel diff", "compile per-layer s", "compile scanned s", "scanned/per-layer",
            "step per-layer ms", "step scanned ms", "scanned/per-layer"]
  body = []
  for name, r in result["rows"].items():
    p, s = r["per-layer"], r["scanned"]
    body.append([name, f"{r['learning_rate']:g}", f"{p['final_val_loss']:.4f}",
                 f"{s['final_val_loss']:.4f}", f"{r['train_loss_max_rel_diff']:.1e}",
                 f"{p['compile_s']:.2f}", f"{s['compile_s']:.2f}",
                 f"{r['compile scanned/per-layer']:.2f}", f"{1e3 * p['step_s']:.3g}",
                 f"{1e3 * s['step_s']:.3g}", f"{r['step scanned/per-layer']:.2f}"])
  left_out = "; ".join(f"{n}: {why}" for n, why in result["left_out"].items()) or "none"
  align = ["---"] + ["---:"] * (len(header) - 1)
  return [f"{result['parameters']:,}-parameter model ({c['layers']} layers, d_model {c['d_model']}), "
          f"{c['steps']} steps: blocks per layer against stacked `(layers, ...)` and scanned, the "
          "same initial numbers and batches; dimension numbers from `steadax.dimension_numbers_from`; "
          f"compile: the {c['eval_every']}-step training chunk. Left out: {left_out.rstrip('.')}.", "",
          *["| " + " | ".join(row) + " |" for row in [header, align, *body]]]


def main(argv=None) -> None:
  parser = argparse.ArgumentParser(prog="python -m benchmarks.cases.lm_scanned", description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--config", default="quick", choices=list(lm.CONFIGS))
  parser.add_argument("--optimizers", default=None, help="comma-separated (default: adamw and every "
                      "matrix optimizer that takes stacked dimension numbers)")
  parser.add_argument("--steps", type=int, default=None, help="override the config's steps")
  parser.add_argument("--json", default=None, help="write the result here")
  args = parser.parse_args(argv)
  lm.set_cpu_flag()
  config = scanned_config(lm.CONFIGS[args.config])
  if args.steps:
    config = dataclasses.replace(config, steps=args.steps)
  jax.config.update("jax_numpy_dtype_promotion", "standard")
  result = compare_layouts(config, args.optimizers.split(",") if args.optimizers else None,
                           harness.Progress(enabled=importlib.util.find_spec("tqdm") is not None))
  print("\n".join(table(result)))
  if args.json:
    with open(args.json, "w") as f:
      json.dump(result, f, indent=1)


if __name__ == "__main__":
  main()
