"""Where steadax's zoo deliberately differs from Optax 0.2.8 because Optax is wrong, shown on Optax."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import steadax


def _updates(tx, grads, params=None):
  state = tx.init(grads[0] if params is None else params)
  out = []
  for g in grads:
    u, state = tx.update(g, state, params)
    out.append(float(np.asarray(u).ravel()[0]))
  return out


def test_rprop_uses_the_current_gradient_where_optax_lags_one_step():
  # google-deepmind/optax PR 1725: Optax returns the previous step's update (zeros at step 1).
  grads = [jnp.array([g]) for g in (1.0, 1.0, 1.0, -1.0, 1.0)]
  ours = _updates(steadax.scale_by_rprop(0.1), grads)
  # The sequence of the paper's iRprop- (and torch.optim.Rprop): grow, grow, flip (skip), resume.
  np.testing.assert_allclose(ours, [0.1, 0.12, 0.144, 0.0, 0.072], rtol=1e-6)
  theirs = _updates(optax.scale_by_rprop(0.1), grads)
  np.testing.assert_allclose(theirs[1:3], ours[0:2], rtol=1e-6)  # Optax's step t+1 is our step t
  assert theirs[0] == 0.0


def test_adadelta_without_learning_rate_descends_where_optax_ascends():
  p = jnp.array([1.0, -2.0])
  grads = 2 * p
  ours, theirs = steadax.adadelta(), optax.adadelta()
  u_ours, s_ours = ours.update(grads, ours.init(p), p)
  u_theirs, s_theirs = theirs.update(grads, theirs.init(p), p)
  assert float(jnp.vdot(u_ours, grads)) < 0  # a descent direction
  assert float(jnp.vdot(u_theirs, grads)) > 0
  np.testing.assert_allclose(u_ours, -u_theirs, rtol=1e-6)
  assert [type(s).__name__ for s in s_ours] == [type(s).__name__ for s in s_theirs]


def _rho_float64(t, b2=0.999):
  return (2 / (1 - b2) - 1) - 2 * t * b2**t / (1 - b2**t)


def _rho_from_update(make, t):
  """Recover r_t from the update of a constant gradient, where m_hat = g and v_hat = g^2."""
  tx = make()
  state = tx.init(jnp.zeros(1))
  for _ in range(t):
    u, state = tx.update(jnp.ones(1), state)
  return float(u[0])


def test_radam_rectification_is_accurate_in_float32():
  # Optax forms rho_t directly in float32 (x64 off): ~0.02 off at t = 6, which moves r_t by 1%.
  def r_exact(t):
    rho, rho_inf = _rho_float64(t), 2 / (1 - 0.999) - 1
    return np.sqrt((rho - 4) * (rho - 2) * rho_inf / ((rho_inf - 4) * (rho_inf - 2) * rho))

  with jax.enable_x64(False):
    for t in (6, 8, 20):
      ours = _rho_from_update(lambda: steadax.scale_by_radam(eps=0.0), t)
      with jax.numpy_dtype_promotion("standard"):
        theirs = _rho_from_update(lambda: optax.scale_by_radam(eps=0.0), t)
      assert abs(ours - r_exact(t)) < 1e-4 * r_exact(t)
      assert abs(ours - r_exact(t)) < abs(theirs - r_exact(t))
      if t == 6:
        assert abs(theirs - r_exact(t)) > 1e-3 * r_exact(t)


def test_sm3_scalar_parameter_works_where_optax_fails():
  p = jnp.asarray(1.5)
  with pytest.raises(Exception):
    tx = optax.sm3(0.1)
    tx.update(p, tx.init(p), p)
  tx = steadax.sm3(0.1)
  u, state = tx.update(p, tx.init(p), p)
  assert u.shape == () and float(u) < 0
  assert [a.shape for a in state[0].mu] == [()]


def test_distance_over_gradients_statistics_do_not_follow_the_x64_flag():
  # Optax keeps the gradient sum in the default float: float64 for float32 parameters under x64.
  p = {"w": jnp.ones(3, jnp.float32)}
  with jax.enable_x64(True):
    ours = steadax.scale_by_distance_over_gradients().init(p)
    theirs = optax.scale_by_distance_over_gradients().init(p)
  assert ours.grad_sum_of_squares["w"].dtype == jnp.float32
  assert theirs.grad_sum_of_squares["w"].dtype == jnp.float64


def test_polyak_sgd_mixed_tree_updates_keep_dtypes_where_optax_promotes():
  params = {"f32": jnp.array([1.0, -2.0], jnp.float32), "bf16": jnp.array([0.5, 3.0], jnp.bfloat16)}
  grads = jax.tree_util.tree_map(lambda x: 2 * x, params)
  ours = steadax.polyak_sgd()
  u, _ = ours.update(grads, ours.init(params), params, value=jnp.asarray(14.25))
  assert u["bf16"].dtype == jnp.bfloat16 and u["f32"].dtype == jnp.float32
  with jax.numpy_dtype_promotion("standard"):
    theirs = optax.polyak_sgd()
    u_theirs, _ = theirs.update(grads, theirs.init(params), params, value=jnp.asarray(14.25))
  assert {k: v.dtype for k, v in u_theirs.items()} != {k: v.dtype for k, v in u.items()}
