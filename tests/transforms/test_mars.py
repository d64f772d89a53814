"""scale_by_mars: the variance-reduced gradient c_t, its per-tensor clipping, Adam on c_t, errors."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import steadax


def _corrected(g, prev, b1, gamma, max_norm, first):
  """c_t of the paper (Algorithm 1, line 4, then Clip(c_t, max_norm)), written out in numpy."""
  c = g if first else g + gamma * b1 / (1 - b1) * (g - prev)
  if max_norm is not None:
    norm = np.linalg.norm(c)
    if norm > max_norm:
      c = c * max_norm / norm
  return c


def test_moments_follow_the_corrected_gradient():
  b1, b2, gamma = 0.9, 0.99, 0.5
  tx = steadax.scale_by_mars(b1, b2, gamma, eps=0.0, max_norm=None)
  state = tx.init(jnp.zeros(3))
  grads = [np.asarray(g, np.float32) for g in ([0.3, -0.2, 0.1], [0.1, 0.4, -0.3], [-0.2, 0.0, 0.25])]
  m = v = np.zeros(3)
  prev = None
  for t, g in enumerate(grads, start=1):
    u, state = tx.update(jnp.asarray(g), state)
    c = _corrected(g.astype(np.float64), prev, b1, gamma, None, first=t == 1)
    m = b1 * m + (1 - b1) * c
    v = b2 * v + (1 - b2) * c * c
    np.testing.assert_allclose(np.asarray(state.mu), m, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(np.asarray(state.nu), v, rtol=1e-5, atol=1e-9)
    np.testing.assert_array_equal(np.asarray(state.prev_grad), g)  # the raw gradient, not c_t
    expected = (m / (1 - b1**t)) / np.sqrt(v / (1 - b2**t))
    np.testing.assert_allclose(np.asarray(u), expected, rtol=1e-5)
    prev = g.astype(np.float64)
  assert int(state.count) == 3


def test_correction_extrapolates_along_the_gradient_change():
  # With g_{t-1} = 0.1 and g_t = 0.2, c_t = 0.2 + gamma b1/(1-b1) 0.1: momentum looks ahead.
  tx = steadax.scale_by_mars(b1=0.5, gamma=1.0, max_norm=None)
  state = tx.init(jnp.zeros(1))
  _, state = tx.update(jnp.asarray([0.1]), state)
  mu_before = float(state.mu[0])
  _, state = tx.update(jnp.asarray([0.2]), state)
  c2 = (float(state.mu[0]) - 0.5 * mu_before) / 0.5
  np.testing.assert_allclose(c2, 0.2 + 1.0 * 0.5 / 0.5 * 0.1, rtol=1e-6)


def test_clipping_is_per_tensor_at_max_norm():
  b1 = 0.9
  tx = steadax.scale_by_mars(b1=b1, max_norm=1.0)
  grads = {"big": jnp.asarray([3.0, 4.0]), "small": jnp.asarray([0.3, -0.4])}
  state = tx.init(grads)
  _, state = tx.update(grads, state)
  np.testing.assert_allclose(np.asarray(state.mu["big"]), (1 - b1) * np.asarray([0.6, 0.8]), rtol=1e-6)
  np.testing.assert_allclose(np.asarray(state.mu["small"]), (1 - b1) * np.asarray([0.3, -0.4]), rtol=1e-6)
  wide = steadax.scale_by_mars(b1=b1, max_norm=10.0)
  _, wide_state = wide.update(grads, wide.init(grads))
  np.testing.assert_allclose(np.asarray(wide_state.mu["big"]), (1 - b1) * np.asarray([3.0, 4.0]), rtol=1e-6)


def test_matches_optax_adam_fed_the_corrected_gradients():
  b1, b2, gamma, eps = 0.95, 0.99, 0.025, 1e-8
  rng = np.random.default_rng(0)
  grads = rng.normal(size=(30, 2, 3)).astype(np.float32) * np.linspace(0.1, 1.5, 30)[:, None, None]
  ours = steadax.scale_by_mars(b1, b2, gamma, eps)
  theirs = optax.scale_by_adam(b1, b2, eps)
  s_ours, s_theirs = ours.init(jnp.zeros((2, 3))), theirs.init(jnp.zeros((2, 3)))
  prev = None
  for t, g in enumerate(grads):
    c = _corrected(g.astype(np.float64), prev, b1, gamma, 1.0, first=t == 0).astype(np.float32)
    u_ours, s_ours = ours.update(jnp.asarray(g), s_ours)
    with jax.numpy_dtype_promotion("standard"):
      u_theirs, s_theirs = theirs.update(jnp.asarray(c), s_theirs)
    np.testing.assert_allclose(np.asarray(u_ours), np.asarray(u_theirs), rtol=2e-4, atol=1e-6, err_msg=f"step {t}")
    prev = g.astype(np.float64)


def test_gamma_zero_without_clipping_is_adam():
  g = jnp.asarray([[0.5, -0.25], [1.0, 2.0]])
  mars = steadax.scale_by_mars(gamma=0.0, max_norm=None)
  adam = steadax.scale_by_adam(0.95, 0.99)
  sm, sa = mars.init(g), adam.init(g)
  for k in range(4):
    um, sm = mars.update(g * (k + 1), sm)
    ua, sa = adam.update(g * (k + 1), sa)
    np.testing.assert_allclose(np.asarray(um), np.asarray(ua), rtol=1e-6)


def test_mixed_precision_state_dtypes():
  params = {"bf16": jnp.ones(3, jnp.bfloat16), "f32": jnp.ones(2, jnp.float32)}
  tx = steadax.scale_by_mars(mu_dtype=jnp.bfloat16)
  state = tx.init(params)
  assert state.prev_grad["bf16"].dtype == jnp.bfloat16 and state.nu["f32"].dtype == jnp.float32
  assert state.mu["f32"].dtype == jnp.bfloat16
  updates, new_state = tx.update(params, state, params)
  assert updates["bf16"].dtype == jnp.bfloat16 and updates["f32"].dtype == jnp.float32
  abstract = jax.eval_shape(tx.init, params)
  assert jax.tree.map(lambda a: (a.shape, a.dtype), abstract) == jax.tree.map(lambda a: (a.shape, a.dtype), new_state)


@pytest.mark.parametrize("kwargs, argument", [
    ({"b1": 1.0}, "b1"), ({"b2": -0.1}, "b2"), ({"gamma": -1.0}, "gamma"), ({"max_norm": 0.0}, "max_norm"),
])
def test_invalid_hyperparameters_name_the_argument(kwargs, argument):
  with pytest.raises(ValueError, match=f"scale_by_mars: {argument}"):
    steadax.scale_by_mars(**kwargs)


def test_mars_optimizer_chain_and_weight_decay():
  opt = steadax.mars(0.1, weight_decay=0.5)
  p = jnp.asarray([2.0])
  u, _ = opt.update(jnp.asarray([0.0]), opt.init(p), p)
  np.testing.assert_allclose(np.asarray(u), [-0.1 * 0.5 * 2.0], rtol=1e-6)  # decoupled, times lr
  with pytest.raises(ValueError, match="mars: weight_decay"):
    steadax.mars(0.1, weight_decay=-1.0)


def test_invalid_hyperparameters_raise_from_the_class_and_replace_too():
  tx = steadax.scale_by_mars()
  with pytest.raises(ValueError, match="scale_by_mars: gamma"):
    tx.replace(gamma=-1.0)
  with pytest.raises(ValueError, match="scale_by_mars: b1"):
    type(tx)(b1=1.0)
  assert tx.replace(max_norm=None).max_norm is None  # None disables clipping
