"""Step time of the user's step against Optax and against the same-traffic floor.

Cases: ``big`` (AdamW on a few large float32 leaves: memory-bound), ``many_small`` (hundreds of
small float32 leaves for five optimizers: per-leaf overhead) and ``mixed`` (a float32/bfloat16
tree). Each comparison times its columns and the floors in alternating rounds (``harness``). The
"steadax flat params" column's parameters are ``steadax.flat_params`` and its gradients arrive
flat, as ``jax.grad`` of a ``FlatParams`` gives them; the concatenation that makes them flat is in
the backward pass, which ``cases/train.py`` times with the whole training step.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import optax

import steadax

from .. import harness

FLOOR = "floor"
FLOOR_SAME_LEAVES = "floor, same leaves"


def compare(name: str, make_params: Callable[[], Any], columns: dict[str, tuple[Any, Any]],
            sizes: harness.Sizes, progress: harness.Progress, *, same_leaves_floor: bool = False
            ) -> dict:
  """Times every column's step and the floors; the row of the table, with raw rounds."""
  contenders = harness.build_contenders(columns, make_params, progress, name)
  reference = contenders["steadax"]
  param_bytes = harness.tree_bytes(reference.params)
  state_bytes = harness.tree_bytes(reference.state)
  contenders[FLOOR] = harness.floor_one_buffer(param_bytes, state_bytes)
  if same_leaves_floor:
    contenders[FLOOR_SAME_LEAVES] = harness.floor_same_leaves(reference)
  timed = harness.time_rounds(contenders, sizes, progress, name)
  times = {label: timed[label]["median_s"] for label in timed}
  times.update({label: None for label in columns if label not in contenders})
  ratios = {}
  for label in columns:
    if label == "optax" or times[label] is None:
      continue
    ratios[f"{label}/optax"] = times[label] / times["optax"]
    ratios[f"{label}/floor"] = times[label] / times[FLOOR]
    if same_leaves_floor:
      ratios[f"{label}/{FLOOR_SAME_LEAVES}"] = times[label] / times[FLOOR_SAME_LEAVES]
  leaves = jax.tree_util.tree_leaves(reference.params)
  return {
      "case": name,
      "leaves": len(leaves),
      "parameters": sum(x.size for x in leaves),
      # What the floor moves per step: read params, grads, state; write params, state.
      "floor_bytes_per_step": 3 * param_bytes + 2 * state_bytes,
      "median_s": times,
      "ratios": ratios,
      "rounds_s": {label: timed[label]["rounds_s"] for label in timed},
  }


def _ticks(sizes: harness.Sizes, *column_sets: dict) -> int:
  """Progress-bar tasks: a compilation per column that can be filled, and the rounds."""
  return sum(sizes.rounds + sum(tx is not None for _, tx in columns.values())
             for columns in column_sets)


def big(sizes: harness.Sizes, progress: harness.Progress) -> dict:
  """AdamW on ``big_leaves`` float32 leaves of ``big_leaf_size`` (8 x 2M in the full run)."""
  columns = harness.transformations(optax.adamw(1e-3), steadax.adamw(1e-3))
  progress.start("big", _ticks(sizes, columns))

  def make_params():
    return {f"w{i}": harness.filled((sizes.big_leaf_size,), 1.0, jnp.float32)
            for i in range(sizes.big_leaves)}

  row = compare(f"big: adamw, {sizes.big_leaves} x {sizes.big_leaf_size:,}", make_params, columns,
                sizes, progress, same_leaves_floor=True)
  return {"kind": "steps", "rows": [row]}


def _wrapped(lib: Any) -> Any:
  """The wrapped stack: global-norm clipping, masked weight decay, gradient accumulation."""
  decay_mask = lambda params: jax.tree_util.tree_map(lambda p: p.size >= 1024, params)  # noqa: E731
  return lib.MultiSteps(lib.chain(
      lib.clip_by_global_norm(1.0),
      lib.scale_by_adam(),
      lib.masked(lib.add_decayed_weights(1e-4), decay_mask),
      lib.scale_by_learning_rate(1e-3),
  ), every_k_schedule=4)


# name -> a factory called with the library (optax or steadax).
MANY_SMALL_OPTIMIZERS = {
    "adamw": lambda lib: lib.adamw(1e-3),
    "lion": lambda lib: lib.lion(1e-4),
    "adafactor": lambda lib: lib.adafactor(1e-3),
    "sgd+momentum": lambda lib: lib.sgd(1e-2, momentum=0.9),
    "clip+MultiSteps+masked": _wrapped,
}


def many_small(sizes: harness.Sizes, progress: harness.Progress) -> dict:
  """Each optimizer on ``small_leaves`` float32 leaves of 64..4096 elements (seeded)."""
  _, make_params = harness.small_params(sizes.small_leaves)
  column_sets = {name: harness.transformations(factory(optax), factory(steadax), fused=True, flat=True)
                 for name, factory in MANY_SMALL_OPTIMIZERS.items()}
  progress.start("many_small", _ticks(sizes, *column_sets.values()))
  rows = [compare(f"{sizes.small_leaves} small: {name}", make_params, columns, sizes, progress)
          for name, columns in column_sets.items()]
  return {"kind": "steps", "rows": rows}


def mixed(sizes: harness.Sizes, progress: harness.Progress) -> dict:
  """AdamW on the small leaves alternately float32 and bfloat16, plus one large leaf of each."""
  leaf_sizes = harness.small_leaf_sizes(sizes.mixed_small_leaves)
  large = sizes.big_leaf_size // 2

  def make_params():
    params = {f"p{i:04d}": harness.filled((n,), 1.0, (jnp.float32, jnp.bfloat16)[i % 2])
              for i, n in enumerate(leaf_sizes)}
    params["large_f32"] = harness.filled((large,), 1.0, jnp.float32)
    params["large_bf16"] = harness.filled((large,), 1.0, jnp.bfloat16)
    return params

  columns = harness.transformations(optax.adamw(1e-3), steadax.adamw(1e-3), fused=True, flat=True)
  progress.start("mixed", _ticks(sizes, columns))
  row = compare(f"mixed f32/bf16: adamw, {len(leaf_sizes)} small + 2 x {large:,}", make_params,
                columns, sizes, progress)
  return {"kind": "steps", "rows": [row]}
