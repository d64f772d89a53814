"""Prodigy on float16 parameters: the d-scaled statistics live in float32 (regression test).

With ``d_0 = 1e-6`` and gradients of 1e-3, ``d * g`` is 1e-9 and its square 1e-18: both underflow
in float16. Stored in float16, the moments and the gradient sum ``s`` were zero, so the steps were
wrong (zero) and ``||s||_1 = 0`` kept ``d`` at ``d_0`` for ever.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import steadax


def _run(dtype, steps=6, make=None):
  params = {"w": jnp.zeros(16, dtype), "b": jnp.zeros(4, dtype)}
  opt = (make or steadax.contrib.prodigy)()
  state = opt.init(params)
  history = []
  for _ in range(steps):
    grads = {"w": jnp.full(16, 1e-3, dtype), "b": jnp.full(4, -1e-3, dtype)}
    updates, state = opt.update(grads, state, params)
    params = jax.tree_util.tree_map(lambda p, u: p + u, params, updates)
    history.append((updates, state))
  return history


def _close(a, b, factor=1.5):
  a, b = np.abs(np.asarray(a, np.float64)), np.abs(np.asarray(b, np.float64))
  return bool(np.all(np.isfinite(a)) and np.all(a > 0) and np.all((a < factor * b) & (b < factor * a)))


@pytest.mark.parametrize("name", ["prodigy", "dadapt_adamw"])
def test_float16_steps_and_estimate_match_float32(name):
  make = getattr(steadax.contrib, name)
  h16, h32 = _run(jnp.float16, make=make), _run(jnp.float32, make=make)
  for step, ((u16, s16), (u32, s32)) in enumerate(zip(h16, h32)):
    for name in ("w", "b"):
      assert u16[name].dtype == jnp.float16
      assert _close(u16[name], u32[name]), (step, name, u16[name], u32[name])
    assert _close(s16.estim_lr, s32.estim_lr), (step, s16.estim_lr, s32.estim_lr)
  # The run must actually have moved d (otherwise the comparison above says little).
  assert float(h32[-1][1].estim_lr) > 2 * float(h32[0][1].estim_lr)


def test_float16_accumulators_are_float32():
  (_, state), = _run(jnp.float16, steps=1)
  for field in ("exp_avg", "exp_avg_sq", "grad_sum"):
    for leaf in jax.tree_util.tree_leaves(getattr(state, field)):
      assert leaf.dtype == jnp.float32, field
      assert np.all(np.asarray(leaf) != 0), field
  for leaf in jax.tree_util.tree_leaves(state.params0):
    assert leaf.dtype == jnp.float16
  assert state.estim_lr.dtype == jnp.float32
