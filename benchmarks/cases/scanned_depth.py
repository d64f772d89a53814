"""Compile time of the scanned example's whole training step at 2 and 32 layers (issue 33 §3).

``examples/scanned_transformer.py``'s model (Flax NNX, blocks created by ``nnx.vmap`` and run by
``nnx.scan``, dimension numbers from ``steadax.dimension_numbers_from``) and its optimizers: the
training step (forward, backward, the optimizer's update, the new parameters) as one function of
the model's and optimizer's state, ``jax.jit(step).lower(...).compile()`` traced, lowered and
compiled afresh for each depth (the depths interleaved in each repetition, median of
``repetitions``, CPU seconds of the process and wall seconds). Goal: 32 layers within 1.25x of 2.

  python -m benchmarks.cases.scanned_depth --depths 2,32 --repetitions 3
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import pathlib
import statistics
import time

import jax
from flax import nnx

_EXAMPLE = pathlib.Path(__file__).resolve().parents[2] / "examples" / "scanned_transformer.py"


def _example():
  spec = importlib.util.spec_from_file_location("scanned_transformer", _EXAMPLE)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def compile_seconds(ex, name: str, layers: int) -> tuple[float, float]:
  """(CPU s, wall s) of tracing, lowering and compiling one training step at ``layers``."""
  args = argparse.Namespace(layers=layers, width=64, heads=4, context=64, batch=16, steps=1)
  model = ex.new_model(args)
  optimizer = nnx.Optimizer(model, ex.make_optimizer(name, model), wrt=nnx.Param)
  graphdef, state = nnx.split((model, optimizer))
  tokens = ex.batches(args)[0]

  def step(state, tokens):
    model, optimizer = nnx.merge(graphdef, state)
    loss, grads = nnx.value_and_grad(ex.loss_fn)(model, tokens)
    optimizer.update(model, grads)
    return loss, nnx.state((model, optimizer))

  c0, t0 = time.process_time(), time.perf_counter()
  jax.jit(step).lower(state, tokens).compile()
  return time.process_time() - c0, time.perf_counter() - t0


def run(depths: list[int], repetitions: int, names: list[str]) -> dict:
  ex = _example()
  jax.config.update("jax_enable_compilation_cache", False)
  compile_seconds(ex, "adamw", 1)  # the process's one-time costs, outside the figures
  times: dict = {(n, d): [] for n in names for d in depths}
  for _ in range(repetitions):
    for name in names:
      for d in depths:
        times[(name, d)].append(compile_seconds(ex, name, d))
  rows = []
  for name in names:
    cpu = {d: statistics.median(t[0] for t in times[(name, d)]) for d in depths}
    wall = {d: statistics.median(t[1] for t in times[(name, d)]) for d in depths}
    rows.append({"optimizer": name, "cpu_s": cpu, "wall_s": wall,
                 "cpu_ratio": cpu[depths[-1]] / cpu[depths[0]],
                 "wall_ratio": wall[depths[-1]] / wall[depths[0]]})
  return {"depths": depths, "repetitions": repetitions, "rows": rows}


def table(result: dict) -> list[str]:
  lo, hi = result["depths"][0], result["depths"][-1]
  lines = [f"| optimizer | L={lo} / {hi} CPU s | L={hi}/L={lo} CPU | L={lo} / {hi} wall s | "
           f"L={hi}/L={lo} wall |", "| --- | ---: | ---: | ---: | ---: |"]
  for r in result["rows"]:
    lines.append(f"| {r['optimizer']} | {r['cpu_s'][lo]:.2f} / {r['cpu_s'][hi]:.2f} | "
                 f"{r['cpu_ratio']:.2f} | {r['wall_s'][lo]:.2f} / {r['wall_s'][hi]:.2f} | "
                 f"{r['wall_ratio']:.2f} |")
  return lines


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--depths", default="2,32")
  parser.add_argument("--repetitions", type=int, default=3)
  parser.add_argument("--optimizers", default="adamw,muon,soap")
  parser.add_argument("--json")
  args = parser.parse_args()
  result = run([int(d) for d in args.depths.split(",")], args.repetitions,
               args.optimizers.split(","))
  print("\n".join(table(result)))
  if args.json:
    with open(args.json, "w") as f:
      json.dump(result, f, indent=1)


if __name__ == "__main__":
  main()
