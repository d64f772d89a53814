"""Every entry makes progress on its problem; entries Optax also has agree with Optax (25 steps)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import steadax

from .registry import all_entries, entry_ids

ENTRIES = all_entries()
DIFFERENTIAL = [e for e in ENTRIES if e.optax_factory is not None]


def _run(entry, tx, steps, apply):
  problem = entry.problem
  loss_fn = problem.loss

  def body(carry, _):
    params, state = carry
    value, grads = jax.value_and_grad(loss_fn)(params)
    extra = entry.extra_args(loss_fn, params, grads) if entry.extra_args else {}
    updates, state = tx.update(grads, state, params, **extra)
    return (apply(params, updates), state), value

  @jax.jit
  def run(params):
    state = tx.init(params)
    (params, _), losses = jax.lax.scan(body, (params, state), None, length=steps)
    return params, losses

  return run(problem.init())


@pytest.mark.parametrize("entry", ENTRIES, ids=entry_ids(ENTRIES))
def test_makes_progress(entry):
  params, losses = _run(entry, entry.factory(), entry.steps, steadax.apply_updates)
  initial = float(entry.problem.loss(entry.problem.init()))
  final = float(entry.problem.loss(params))
  assert np.isfinite(final), f"{entry.name}: final loss {final}"
  assert final < entry.progress * initial, (
      f"{entry.name}: loss went from {initial:.4g} to {final:.4g} in {entry.steps} steps "
      f"(needs < {entry.progress} x initial)")


# Agreement of values with Optax on a float32 problem is checked with x64 off; with x64 on, the
# matrix and composition tests check what the flag changes (types), and keeping make test within
# its time budget matters more than a second numerical comparison.
@pytest.mark.x32_only
@pytest.mark.parametrize("entry", DIFFERENTIAL, ids=entry_ids(DIFFERENTIAL))
def test_agrees_with_optax(entry):
  ours, _ = _run(entry, entry.factory(), 25, steadax.apply_updates)
  with jax.numpy_dtype_promotion("standard"):
    theirs, _ = _run(entry, entry.optax_factory(optax), 25, optax.apply_updates)
  for path, a in jax.tree_util.tree_flatten_with_path(ours)[0]:
    b = dict(jax.tree_util.tree_flatten_with_path(theirs)[0])[path]
    np.testing.assert_allclose(
        np.asarray(a, np.float64), np.asarray(b, np.float64), rtol=entry.optax_rtol, atol=entry.optax_atol,
        err_msg=f"{entry.name} differs from optax at {jax.tree_util.keystr(path)}")
