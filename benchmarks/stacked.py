"""The matrix optimizers on stacked layers, as large models hold them (issue 33).

One table of the five matrix optimizers (``MATRIX_OPTIMIZERS``: each factory and the keyword that
takes its dimension numbers), so a benchmark adds an optimizer by a line. Until every one of them
takes dimension numbers with batch axes, ``stacked_support`` says which do and why the others do
not: the one switch the benchmarks read (``benchmarks/device.py``, ``cases/lm_scanned.py``); they
print the reason for each one left out. ``tests/test_bench_smoke.py`` holds a strict expected
failure that turns into a failure the day the whole list is supported, so the switch cannot
stay off unnoticed.

``measure`` times the update step (update and apply, jitted, params and state donated) of each
matrix optimizer on ``L`` transformer-like layers stacked ``(L, ...)`` (q, k, v, o: ``d x d``; up:
``d x 4d``; down: ``4d x d``; a bias ``d``), with the dimension numbers
``steadax.dimension_numbers_from`` derives for the stack, against steadax's AdamW and Optax's
``contrib.muon`` on the same stack (its own ``MuonDimensionNumbers``), and the compile time of each
step (``jit(step).lower(...).compile()``) at every depth.
"""

from __future__ import annotations

import dataclasses
import inspect
import time
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

import steadax

from . import harness


@dataclasses.dataclass(frozen=True)
class MatrixOptimizer:
  """A steadax matrix optimizer: its factory's dotted name under ``steadax``, the keyword that
  takes its dimension numbers, fixed keyword arguments."""

  factory: str
  dims_keyword: str = "weight_dimension_numbers"
  kwargs: tuple = ()

  def function(self) -> Callable:
    obj: Any = steadax
    for part in self.factory.split("."):
      obj = getattr(obj, part)
    return obj

  def make(self, learning_rate: Any, dims: Any, **extra: Any) -> Any:
    """The transformation with dimension numbers ``dims`` (a tree, one record, or None)."""
    return self.function()(learning_rate, **{self.dims_keyword: dims}, **dict(self.kwargs), **extra)


MATRIX_OPTIMIZERS = {
    "muon": MatrixOptimizer("contrib.muon", "muon_weight_dimension_numbers"),
    "soap": MatrixOptimizer("soap"),
    "shampoo": MatrixOptimizer("shampoo"),
    "psgd_kron": MatrixOptimizer("psgd_kron"),
    "galore": MatrixOptimizer("contrib.galore", kwargs=(("rank", 4),)),
}


def stacked_support(name: str) -> str | None:
  """None when ``name`` takes dimension numbers with a batch axis, else the reason it does not.

  Checked as a user would meet it: the keyword in the factory's signature, then ``init`` of a
  ``(2, 4, 6)`` weight whose first axis is a batch axis (abstractly: nothing is computed).
  """
  entry = MATRIX_OPTIMIZERS[name]
  if entry.dims_keyword not in inspect.signature(entry.function()).parameters:
    return f"steadax.{entry.factory} does not take `{entry.dims_keyword}` yet"
  params = {"w": jax.ShapeDtypeStruct((2, 4, 6), jnp.float32)}
  dims = {"w": steadax.WeightDimensionNumbers(reduction_axis=1, output_axis=2)}
  try:
    jax.eval_shape(entry.make(1e-3, dims).init, params)
  except (TypeError, ValueError) as error:
    return f"steadax.{entry.factory} refuses a batch axis: {str(error).splitlines()[0]}"
  return None


def supported(names: Any = None, report: Callable[[str], None] = print) -> list[str]:
  """The names (default: all) that take stacked dimension numbers; ``report`` hears the others."""
  out = []
  for name in (MATRIX_OPTIMIZERS if names is None else names):
    reason = stacked_support(name)
    if reason is None:
      out.append(name)
    else:
      report(f"{name}: left out, {reason}")
  return out


def stacked_layers(depth: int, width: int, seed: int = 0) -> dict:
  """``depth`` transformer-like layers, each weight stacked ``(depth, ...)``, float32."""
  rng = np.random.default_rng(seed)
  shapes = {"q": (width, width), "k": (width, width), "v": (width, width), "o": (width, width),
            "up": (width, 4 * width), "down": (4 * width, width), "bias": (width,)}
  return {name: jax.device_put((rng.normal(size=(depth, *shape)) / width).astype(np.float32))
          for name, shape in shapes.items()}


def stacked_dims(params: dict) -> Any:
  """The stack's dimension numbers: every leading axis a batch axis (the one-liner)."""
  return steadax.dimension_numbers_from(params, stacked={"*": 1})


def as_optax_dims(dims: Any) -> Any:
  """``dims`` with Optax's own ``MuonDimensionNumbers`` records (Optax checks the type)."""
  return jax.tree_util.tree_map(
      lambda d: None if d is None else optax.contrib.MuonDimensionNumbers(*d), dims,
      is_leaf=lambda d: d is None or isinstance(d, steadax.WeightDimensionNumbers))


def contenders(dims: Any, names: list[str], learning_rate: float = 1e-3) -> dict[str, tuple[Any, Any]]:
  """label -> (library, transformation): the matrix optimizers, steadax AdamW, Optax's Muon."""
  columns = {f"steadax {name}": (steadax, MATRIX_OPTIMIZERS[name].make(learning_rate, dims))
             for name in names}
  columns["steadax adamw"] = (steadax, steadax.adamw(learning_rate))
  columns["optax contrib.muon"] = (optax, optax.contrib.muon(
      learning_rate, muon_weight_dimension_numbers=as_optax_dims(dims)))
  return columns


def _compiled(lib: Any, tx: Any, params: Any) -> tuple[harness.Contender, float]:
  """The jitted, donated update step compiled ahead of time, its compile seconds, run once."""
  grads = harness.gradients_like(params)
  state = harness.init_state(tx, params)
  t0 = time.perf_counter()
  fn = harness.step_fn(lib, tx).lower(params, state, grads).compile()
  compile_s = time.perf_counter() - t0
  params, state = jax.block_until_ready(fn(params, state, grads))
  return harness.Contender(fn, params, state, grads), compile_s


def measure(depths: tuple, width: int, sizes: harness.Sizes, names: list[str] | None = None,
            deadline: float | None = None, on_row: Callable[[dict], None] | None = None,
            warm_up: bool = True) -> dict:
  """Compile and step times at every depth; rows in the order measured (``on_row`` hears each).

  ``deadline`` (a ``time.perf_counter()`` value): no new depth is started after it. ``warm_up``:
  every step is first compiled once on one tiny layer, so that the first depth measured does not
  pay the process's one-time costs (imports, caches) in its compile time.
  """
  names = supported(names)
  if warm_up:
    tiny = stacked_layers(1, 4)
    for lib, tx in contenders(stacked_dims(tiny), names).values():
      _compiled(lib, tx, jax.tree_util.tree_map(jnp.copy, tiny))
  rows = []
  for depth in depths:
    if deadline is not None and time.perf_counter() > deadline:
      break
    params = stacked_layers(depth, width)
    built = {}
    for label, (lib, tx) in contenders(stacked_dims(params), names).items():
      # Each contender donates its own copy.
      built[label] = _compiled(lib, tx, jax.tree_util.tree_map(jnp.copy, params))
    timed = harness.time_rounds({label: c for label, (c, _) in built.items()}, sizes,
                                harness.Progress(enabled=False), f"stacked L={depth}")
    step = {label: timed[label]["median_s"] for label in timed}
    for label in built:
      row = {"optimizer": label, "depth": depth, "width": width, "compile_s": built[label][1],
             "step_s": step[label], "step_rounds_s": timed[label]["rounds_s"],
             "step/adamw": step[label] / step["steadax adamw"],
             "step/optax muon": step[label] / step["optax contrib.muon"]}
      rows.append(row)
      if on_row is not None:
        on_row(row)
  return {"kind": "stacked", "depths": list(depths), "width": width, "optimizers": names,
          "left_out": {n: stacked_support(n) for n in MATRIX_OPTIMIZERS if n not in names},
          "rows": rows, "compile_growth": compile_growth(rows)}


def compile_growth(rows: list[dict]) -> dict:
  """Per optimizer: compile seconds at the deepest measured depth over the shallowest."""
  out = {}
  for label in dict.fromkeys(r["optimizer"] for r in rows):
    mine = sorted((r["depth"], r["compile_s"]) for r in rows if r["optimizer"] == label)
    if len(mine) > 1:
      out[label] = mine[-1][1] / mine[0][1]
  return out


def table(result: dict) -> list[str]:
  """Markdown: compile seconds and step ms per depth, step ratios against AdamW and Optax's Muon."""
  depths = sorted({r["depth"] for r in result["rows"]})
  by = {(r["optimizer"], r["depth"]): r for r in result["rows"]}
  header = ["optimizer", *[f"compile L={d} s" for d in depths], "compile growth",
            *[f"step L={d} ms" for d in depths], *[f"/ adamw L={d}" for d in depths],
            *[f"/ optax muon L={d}" for d in depths]]

  def cell(label, d, key, fmt):
    row = by.get((label, d))
    return "n/a" if row is None else fmt(row[key])

  body = []
  for label in dict.fromkeys(r["optimizer"] for r in result["rows"]):
    growth = result["compile_growth"].get(label)
    body.append([label, *[cell(label, d, "compile_s", lambda x: f"{x:.2f}") for d in depths],
                 "n/a" if growth is None else f"{growth:.2f}",
                 *[cell(label, d, "step_s", lambda x: f"{1e3 * x:.3g}") for d in depths],
                 *[cell(label, d, "step/adamw", lambda x: f"{x:.2f}") for d in depths],
                 *[cell(label, d, "step/optax muon", lambda x: f"{x:.2f}") for d in depths]])
  left_out = "; ".join(f"{n}: {why}" for n, why in result["left_out"].items()) or "none"
  lines = [f"Stacked layers (width {result['width']}; q, k, v, o, up, down, bias per layer), "
           "dimension numbers from `steadax.dimension_numbers_from`; update step (update + apply, "
           "donated), median over alternating rounds; compile: `jit(step).lower().compile()`. "
           f"Left out: {left_out.rstrip('.')}.", ""]
  align = ["---"] + ["---:"] * (len(header) - 1)
  return lines + ["| " + " | ".join(r) + " |" for r in [header, align, *body]]
