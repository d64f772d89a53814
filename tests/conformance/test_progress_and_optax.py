"""Every entry makes progress on its problem; entries Optax also has agree with Optax (25 steps)."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import steadax

from .registry import all_entries, entry_ids

ENTRIES = all_entries()
DIFFERENTIAL = [e for e in ENTRIES if e.optax_factory is not None and e.optax_agrees]
_BY_NAME = {e.name: e for e in ENTRIES}


def _run(entry, tx, checkpoints, apply):
  """The params after each number of steps in ``checkpoints`` ({steps: params}).

  One jitted step in a Python loop rather than a lax.scan: the compiled step has no loop counter,
  whose integer type follows the x64 flag, so both passes compile the same program (a hit in the
  persistent compilation cache make test shares) and the progress and Optax tests share it too."""
  problem = entry.problem
  loss_fn = problem.loss

  @jax.jit
  def step(params, state):
    value, grads = jax.value_and_grad(loss_fn)(params)
    extra = entry.extra_args(loss_fn, params, grads) if entry.extra_args else {}
    updates, state = tx.update(grads, state, params, **extra)
    return apply(params, updates), state

  params = problem.init()
  state = jax.jit(tx.init)(params)
  out = {}
  for i in range(1, max(checkpoints) + 1):
    params, state = step(params, state)
    if i in checkpoints:
      out[i] = params
  return out


_OPTAX_STEPS = 25


@functools.lru_cache(maxsize=None)
def _ours(name):
  """Our params after the entry's progress steps and after the Optax comparison's (one run)."""
  entry = _BY_NAME[name]
  return _run(entry, entry.factory(), {entry.steps, _OPTAX_STEPS}, steadax.apply_updates)


@pytest.mark.parametrize("entry", ENTRIES, ids=entry_ids(ENTRIES))
def test_makes_progress(entry):
  params = _ours(entry.name)[entry.steps]
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
  ours = _ours(entry.name)[_OPTAX_STEPS]
  with jax.numpy_dtype_promotion("standard"):
    theirs = _run(entry, entry.optax_factory(optax), {_OPTAX_STEPS}, optax.apply_updates)[_OPTAX_STEPS]
  for path, a in jax.tree_util.tree_flatten_with_path(ours)[0]:
    b = dict(jax.tree_util.tree_flatten_with_path(theirs)[0])[path]
    np.testing.assert_allclose(
        np.asarray(a, np.float64), np.asarray(b, np.float64), rtol=entry.optax_rtol, atol=entry.optax_atol,
        err_msg=f"{entry.name} differs from optax at {jax.tree_util.keystr(path)}")
