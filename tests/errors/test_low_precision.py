"""Every registry entry stays finite on float16 and bfloat16 parameters whose gradients are tiny
(1e-7: float16 subnormals, or zero once rounded), small as after clipping, zero, or huge (6e4 for
float16, close to its largest value 65504; 1e15 for bfloat16). Issue 13, "Bad input and edge input".

Cost: XLA compilation. One compiled program steps a group of entries at once and serves every
regime (the gradients are ``pattern * scale``, the scales an argument), compiled without backend
optimisation (finiteness does not depend on it). The x64 flag changes nothing here (the compute
dtype of a float16/bfloat16 leaf is float32 either way), so the test runs in the x64-off pass only.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import steadax

from ..conformance._harness import matrix_loss
from ..conformance.registry import all_entries

ENTRIES = [e for e in all_entries() if e.low_precision_ok]
GROUP = 5
GROUPS = [ENTRIES[i:i + GROUP] for i in range(0, len(ENTRIES), GROUP)]

# The gradient scale of each regime, for the float16 and the bfloat16 leaves.
REGIMES = {
    "tiny": (1e-7, 1e-7),
    "clipped": (1e-4, 1e-4),  # with the pattern's 1e-3 entries: 1e-7, a float16 subnormal
    "zero": (0.0, 0.0),
    "huge": (6e4, 1e15),
}
STEPS = 3
# In the huge regime a parameter may leave its dtype's range through the step itself (sgd(0.4) on
# a 6e4 gradient moves a float16 parameter by 2.4e4 a step): that is the learning rate's doing,
# so there the updates and the state are held finite, not the parameters.
PARAMS_CHECKED = {"tiny", "clipped", "zero"}


def _params() -> dict:
  """A matrix (for the matrix optimizers) in each low precision."""
  return {
      "f16": jnp.asarray([[0.3, -0.7, 1.5], [0.01, -2.0, 0.6]], jnp.float16),
      "bf16": jnp.asarray([[0.5, -0.25], [1.0, -2.0], [0.125, 0.75]], jnp.bfloat16),
  }


def _pattern(shape) -> np.ndarray:
  """Mixed signs and magnitudes from 1 to 1e-3 (largest entry 1)."""
  n = int(np.prod(shape))
  values = np.array([1.0, -0.5, 1e-3, -0.03, 0.2, -1e-3, 0.7, -1.0, 0.01, 0.4, -0.09, 0.6])
  return values[np.arange(n) % len(values)].reshape(shape).astype(np.float32)


PATTERNS = {k: _pattern(v.shape) for k, v in _params().items()}


def _grads(params, scales):
  def leaf(name, x):
    scale = scales[0] if x.dtype == jnp.float16 else scales[1]
    return (jnp.asarray(PATTERNS[name]) * scale).astype(x.dtype)
  return {name: leaf(name, x) for name, x in params.items()}


def _step(entry, tx, params, state, scales):
  grads = _grads(params, scales)
  extra = entry.extra_args(matrix_loss, params, grads) if entry.extra_args else {}
  updates, state = tx.update(grads, state, params, **extra)
  return steadax.apply_updates(params, updates), updates, state


def _group_step(entries):
  def step(txs, params, states, scales):
    return [_step(e, tx, p, s, scales) for e, tx, p, s in zip(entries, txs, params, states)]
  return jax.jit(step)


def _non_finite(tree, mask=None):
  leaves = jax.tree_util.tree_leaves_with_path(tree)
  masks = [None] * len(leaves) if mask is None else jax.tree_util.tree_leaves(mask)
  bad = []
  for (path, x), m in zip(leaves, masks):
    if not jnp.issubdtype(x.dtype, jnp.inexact):
      continue
    finite = np.isfinite(np.asarray(x, np.complex128 if jnp.iscomplexobj(x) else np.float64))
    if m is not None:
      finite = finite | ~m
    if not finite.all():
      bad.append(jax.tree_util.keystr(path))
  return bad


def _finite_mask(state):
  # State leaves that start non-finite (a best loss of +inf) are not held to finiteness.
  return jax.tree_util.tree_map(
      lambda x: np.isfinite(np.asarray(x, np.float64)) if jnp.issubdtype(x.dtype, jnp.floating)
      else np.ones(np.shape(x), bool), state)


def run_group(entries, regimes=REGIMES, steps=STEPS):
  """``{entry name: [failure lines]}`` for the entries that produced a non-finite value."""
  txs = [e.factory() for e in entries]
  params0 = _params()
  states0 = [tx.init(params0) for tx in txs]
  masks = [_finite_mask(s) for s in states0]
  step = _group_step(entries)
  failures: dict = {}
  for regime, scales in regimes.items():
    params, states = [params0] * len(entries), states0
    scales = (jnp.asarray(scales[0], jnp.float32), jnp.asarray(scales[1], jnp.float32))
    for i in range(steps):
      out = step(txs, params, states, scales)
      params, states = [o[0] for o in out], [o[2] for o in out]
      for entry, (p, u, s), mask in zip(entries, out, masks):
        checks = [("updates", u, None), ("state", s, mask)]
        if regime in PARAMS_CHECKED:
          checks.append(("params", p, None))
        for what, tree, m in checks:
          bad = _non_finite(tree, m)
          if bad and len(failures.get(entry.name, ())) < 3:
            failures.setdefault(entry.name, []).append(
                f"{regime}, step {i + 1}: non-finite {what} at {', '.join(bad)}")
  return failures


@pytest.mark.x32_only
@pytest.mark.parametrize("entries", GROUPS, ids=[g[0].name + "..." for g in GROUPS])
def test_finite_with_extreme_gradients_in_low_precision(entries):
  failures = run_group(entries)
  assert not failures, "\n".join(f"{name}: " + "\n  ".join(lines) for name, lines in failures.items())


def test_every_low_precision_entry_is_in_a_group():
  assert sum(len(g) for g in GROUPS) == len(ENTRIES) > 100
