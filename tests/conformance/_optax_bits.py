"""The comparisons of test_optax_bits.py: steadax against Optax 0.2.8, bit for bit, step by step.

Run as ``python -m tests.conformance._optax_bits [--x64] [names...]`` in a child process with JAX's
default configuration and the ``XLA_FLAGS`` it is given (the suite's; none: XLA's defaults, as a
user's process compiles; XLA's FMA contraction follows the flags). Prints one JSON object,
``{entry name: {mode: [difference, ...]}}``, an empty list where every compared leaf is equal.

For each registry entry with an Optax counterpart, each library runs its own trajectory of
``STEPS`` steps on the entry's problem from the same initial parameters (so a difference at one
step is never hidden by feeding the next step Optax's values). Compared with
``np.testing.assert_array_equal``: every update leaf, and every state leaf at a key path both
libraries' states share (Optax's field names; steadax keeps them). Modes:

* ``jit``: one jitted step closing over the transformation (as Optax is always used), against
  Optax's jitted step;
* ``jit_argument``: the transformation passed to the jitted step as an argument (its
  hyperparameters traced, as ``nnx.Optimizer`` or a plain ``jax.jit(step)(tx, ...)`` passes it),
  against Optax's jitted step;
* ``eager``: no ``jit`` around the step, against Optax's eager step.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import jax
import numpy as np

MODES = ("jit", "jit_argument", "eager")
STEPS = 3


def _trajectory(entry: Any, tx: Any, apply: Any, mode: str) -> list[tuple[Any, Any]]:
  """``[(updates, state)]`` after each of ``STEPS`` steps of ``tx`` on the entry's problem."""
  loss_fn = entry.problem.loss

  def step(tx, params, state):
    grads = jax.grad(loss_fn)(params)
    extra = entry.extra_args(loss_fn, params, grads) if entry.extra_args else {}
    updates, state = tx.update(grads, state, params, **extra)
    return apply(params, updates), updates, state

  params = entry.problem.init()
  state = tx.init(params)  # eagerly in every mode: one compiled program per mode, the step
  if mode == "eager":
    run = lambda p, s: step(tx, p, s)  # noqa: E731
  elif mode == "jit_argument":
    jitted = jax.jit(step)
    run = lambda p, s: jitted(tx, p, s)  # noqa: E731
  else:
    run = jax.jit(lambda p, s: step(tx, p, s))
  out = []
  for _ in range(STEPS):
    params, updates, state = run(params, state)
    out.append((updates, state))
  return out


def _leaves(tree: Any) -> dict[str, Any]:
  return {jax.tree_util.keystr(path): leaf for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]}


def _values(x: Any) -> np.ndarray:
  if hasattr(x, "dtype") and jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
    x = jax.random.key_data(x)
  return np.asarray(x)


def _ulps(ours: np.ndarray, theirs: np.ndarray) -> str:
  """The largest difference in units in the last place, for the message."""
  if ours.dtype != theirs.dtype or not np.issubdtype(ours.dtype, np.floating) or ours.shape != theirs.shape:
    return ""
  wide = np.maximum(np.abs(ours), np.abs(theirs))
  with np.errstate(all="ignore"):
    ulps = np.abs(ours.astype(np.float64) - theirs.astype(np.float64)) / np.spacing(wide).astype(np.float64)
  ulps = ulps[np.isfinite(ulps)]
  return f" (up to {ulps.max():.3g} ulp)" if ulps.size else ""


def _differences(ours: list, theirs: list) -> list[str]:
  found = []
  for step, ((u_ours, s_ours), (u_theirs, s_theirs)) in enumerate(zip(ours, theirs), start=1):
    pairs = [("updates", _leaves(u_ours), _leaves(u_theirs))]
    shared_state = _leaves(s_theirs)
    ours_state = _leaves(s_ours)
    pairs.append(("state", {k: v for k, v in ours_state.items() if k in shared_state},
                  {k: v for k, v in shared_state.items() if k in ours_state}))
    for what, a, b in pairs:
      for path in sorted(set(a) | set(b)):
        if path not in a or path not in b:
          found.append(f"step {step} {what}{path}: only in {'Optax' if path in b else 'steadax'}")
          continue
        x, y = _values(a[path]), _values(b[path])
        if what == "state" and x.shape != y.shape:
          continue  # not the same statistic under the same name
        if what == "state" and x.dtype != y.dtype and x.dtype.kind == y.dtype.kind and x.dtype.itemsize < y.dtype.itemsize:
          # Optax's state widened under x64 (an int64 count, a float64 statistic) where steadax keeps
          # the type fixed at init (documented): equal when Optax's value fits steadax's type exactly.
          widened = y
          y = y.astype(x.dtype)
          if not np.array_equal(y.astype(widened.dtype), widened, equal_nan=True):
            found.append(f"step {step} {what}{path}: steadax {x.dtype}{list(x.shape)}, Optax widens it to "
                         f"{widened.dtype} (x64) with values steadax's type does not hold")
            continue
        try:
          np.testing.assert_array_equal(x, y, strict=True)
        except AssertionError:
          found.append(f"step {step} {what}{path}: steadax {x.dtype}{list(x.shape)} differs from Optax "
                       f"{y.dtype}{list(y.shape)}{_ulps(x, y)}")
  return found  # every step's: an exception may allow one leaf's difference and no other


def compare(entry: Any) -> dict[str, list[str]]:
  """``{mode: differences}`` of one registry entry against its Optax counterpart."""
  import optax  # the child's import: the parent process imports this module for its names

  import steadax

  result = {}
  theirs = {}
  for mode in MODES:
    reference = "eager" if mode == "eager" else "jit"
    try:
      if reference not in theirs:
        theirs[reference] = _trajectory(entry, entry.optax_factory(optax), optax.apply_updates, reference)
      ours = _trajectory(entry, entry.factory(), steadax.apply_updates, mode)
      result[mode] = _differences(ours, theirs[reference])
    except Exception as error:  # noqa: BLE001 - reported per entry, the other entries still run
      result[mode] = [f"raised {type(error).__name__}: {str(error)[:300]}"]
  return result


def main(argv: list[str]) -> None:
  x64 = "--x64" in argv
  names = [a for a in argv if not a.startswith("--")]
  jax.config.update("jax_enable_x64", x64)
  from tests.conformance.registry import all_entries

  entries = [e for e in all_entries() if e.optax_factory is not None and (not names or e.name in names)]
  json.dump({e.name: compare(e) for e in entries}, sys.stdout)


if __name__ == "__main__":
  main(sys.argv[1:])
