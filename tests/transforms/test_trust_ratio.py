"""scale_by_trust_ratio, scale_by_param_block_norm and scale_by_param_block_rms."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

import steadax


def test_trust_ratio_sets_each_update_norm_to_coefficient_times_param_norm():
  tx = steadax.scale_by_trust_ratio(trust_coefficient=0.5)
  p = {"w": jnp.asarray([[3.0, 4.0], [0.0, 12.0]]), "b": jnp.asarray([1.0, -1.0])}
  g = {"w": jnp.asarray([[0.1, -0.2], [0.3, 0.05]]), "b": jnp.asarray([5.0, 2.0])}
  u, _ = tx.update(g, tx.init(p), p)
  for k in p:
    np.testing.assert_allclose(np.linalg.norm(np.asarray(u[k])), 0.5 * np.linalg.norm(np.asarray(p[k])), rtol=1e-6)
    # Only the length changes: the update keeps its direction.
    cos = np.sum(np.asarray(u[k]) * np.asarray(g[k])) / (np.linalg.norm(u[k]) * np.linalg.norm(g[k]))
    np.testing.assert_allclose(cos, 1.0, rtol=1e-6)


def test_zero_norms_give_a_ratio_of_one_and_min_norm_floors():
  tx = steadax.scale_by_trust_ratio()
  p = {"zero_param": jnp.zeros(2), "zero_update": jnp.ones(2)}
  g = {"zero_param": jnp.asarray([0.5, 0.5]), "zero_update": jnp.zeros(2)}
  u, _ = tx.update(g, tx.init(p), p)
  np.testing.assert_array_equal(np.asarray(u["zero_param"]), [0.5, 0.5])
  np.testing.assert_array_equal(np.asarray(u["zero_update"]), [0.0, 0.0])
  floored = steadax.scale_by_trust_ratio(min_norm=2.0)
  p, g = jnp.asarray([0.0, 1.0]), jnp.asarray([0.0, 4.0])
  u, _ = floored.update(g, floored.init(p), p)
  np.testing.assert_allclose(np.asarray(u), np.asarray(g) * 2.0 / 4.0, rtol=1e-6)  # ||p|| = 1 floored to 2


def test_trust_ratio_of_bfloat16_leaves_uses_float32_norms():
  tx = steadax.scale_by_trust_ratio()
  p32 = jnp.linspace(-1.0, 2.0, 300, dtype=jnp.float32)
  g32 = jnp.cos(jnp.arange(300, dtype=jnp.float32))
  p, g = p32.astype(jnp.bfloat16), g32.astype(jnp.bfloat16)
  u, _ = tx.update(g, tx.init(p), p)
  assert u.dtype == jnp.bfloat16
  pf, gf = np.asarray(p, np.float64), np.asarray(g, np.float64)
  expected = gf * np.linalg.norm(pf) / np.linalg.norm(gf)
  np.testing.assert_allclose(np.asarray(u, np.float64), expected, rtol=8e-3, atol=1e-3)


def test_param_block_scalings():
  p = {"w": jnp.asarray([3.0, 4.0]), "tiny": jnp.asarray([1e-6, 0.0])}
  g = {"w": jnp.ones(2), "tiny": jnp.ones(2)}
  norm_tx, rms_tx = steadax.scale_by_param_block_norm(), steadax.scale_by_param_block_rms(min_scale=0.01)
  u, _ = norm_tx.update(g, norm_tx.init(p), p)
  np.testing.assert_allclose(np.asarray(u["w"]), 5.0, rtol=1e-6)
  np.testing.assert_allclose(np.asarray(u["tiny"]), 1e-3, rtol=1e-6)  # floored at min_scale
  u, _ = rms_tx.update(g, rms_tx.init(p), p)
  np.testing.assert_allclose(np.asarray(u["w"]), np.sqrt(12.5), rtol=1e-6)
  np.testing.assert_allclose(np.asarray(u["tiny"]), 0.01, rtol=1e-6)


@pytest.mark.parametrize("factory, name", [
    (steadax.scale_by_trust_ratio, "scale_by_trust_ratio"),
    (steadax.scale_by_param_block_norm, "scale_by_param_block_norm"),
    (steadax.scale_by_param_block_rms, "scale_by_param_block_rms"),
])
def test_updates_need_params(factory, name):
  tx = factory()
  with pytest.raises(ValueError, match=f"{name}: `params` must be passed"):
    tx.update(jnp.ones(2), tx.init(jnp.ones(2)))


@pytest.mark.parametrize("call, message", [
    (lambda: steadax.scale_by_trust_ratio(min_norm=-1.0), "scale_by_trust_ratio: min_norm"),
    (lambda: steadax.scale_by_trust_ratio(eps=-1e-3), "scale_by_trust_ratio: eps"),
    (lambda: steadax.scale_by_param_block_rms(min_scale=-1.0), "scale_by_param_block_rms: min_scale"),
])
def test_bad_hyperparameters_raise(call, message):
  with pytest.raises(ValueError, match=message):
    call()
