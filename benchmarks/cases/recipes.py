"""Compile time of the optimizers users start from, steadax against Optax, on many small leaves.

``first_call`` follows AdamW's whole training step as the leaf count grows; this case takes the
recipes a training script is most often written with (AdamW with and without global-norm clipping,
SGD with momentum and clipping, Adafactor, LAMB, AdamW under ``MultiSteps``) at one leaf count and
compiles each one's update step (``update`` and ``apply_updates`` under ``jit``) with both
libraries, in this process: lowered once, then compiled, CPU seconds of the process for the compile
alone (the two libraries alternate which goes first). A ratio far above 1 is a compile-time
regression: XLA's CPU compiler is sensitive to the shape of the program, not only its size (a
``where`` guarding ``sqrt`` in the global norm made the clipped AdamW step compile 3x as long at 200
leaves and 6.7x at 400; ``steadax._core._tree.safe_sqrt`` has the measurement).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import jax
import optax

import steadax

from .. import harness

# name -> the optimizer built from a library (``optax`` or ``steadax``: the same names).
RECIPES: dict[str, Callable] = {
    "adamw": lambda lib: lib.adamw(1e-3),
    "clip+adamw": lambda lib: lib.chain(lib.clip_by_global_norm(1.0), lib.adamw(1e-3)),
    "clip+sgd(momentum)": lambda lib: lib.chain(lib.clip_by_global_norm(1.0), lib.sgd(1e-3, momentum=0.9)),
    "adafactor": lambda lib: lib.adafactor(1e-3),
    "lamb": lambda lib: lib.lamb(1e-3),
    "MultiSteps(adamw, 4)": lambda lib: lib.MultiSteps(lib.adamw(1e-3), 4),
}


def compile_seconds(lib, recipe: str, params: dict) -> float:
  """CPU seconds of compiling ``recipe``'s update step (lowered beforehand, not counted)."""
  tx = RECIPES[recipe](lib)

  def step(p, s):
    updates, s = tx.update(p, s, p)
    return optax.apply_updates(p, updates), s

  lowered = jax.jit(step).lower(params, tx.init(params))
  start = time.process_time()
  lowered.compile()
  return time.process_time() - start


def run(sizes: harness.Sizes, progress: harness.Progress) -> dict:
  leaves = sizes.recipe_leaves
  params = harness.small_params(leaves)[1]()
  progress.start("recipes", len(RECIPES))
  rows = []
  libs = [("optax", optax), ("steadax", steadax)]
  for i, recipe in enumerate(RECIPES):
    progress.doing(recipe)
    seconds = {name: compile_seconds(lib, recipe, params) for name, lib in (libs if i % 2 == 0 else libs[::-1])}
    rows.append({"recipe": recipe, "leaves": leaves, "compile_s": seconds,
                 "ratio": seconds["steadax"] / seconds["optax"]})
    progress.tick(recipe)
  return {"kind": "recipes", "rows": rows}


def table(result: dict) -> list[str]:
  """Markdown rows: each recipe's compile CPU seconds with both libraries and their ratio."""
  lines = ["| recipe | leaves | Optax compile s | steadax compile s | steadax / Optax |", "|---|---|---|---|---|"]
  for row in result["rows"]:
    s = row["compile_s"]
    lines.append(f"| {row['recipe']} | {row['leaves']} | {s['optax']:.1f} | {s['steadax']:.1f} | {row['ratio']:.2f} |")
  return lines
