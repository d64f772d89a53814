"""contrib.cautious against the paper's formula written in NumPy (Liang et al. 2024, Algorithm 1)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import steadax


def _reference(u, g, min_fraction):
  """The authors' mask, in Optax's sign convention (updates are added): keep u where u g < 0."""
  keep = (u * g < 0).astype(np.float64)
  return u * keep / max(keep.mean(), min_fraction) if keep.size else u


def test_matches_the_formula_and_keeps_the_inner_state():
  rng = np.random.default_rng(0)
  params = {"w": jnp.asarray(rng.normal(size=(3, 4)), jnp.float32), "b": jnp.zeros(5, jnp.float32),
            "empty": jnp.zeros((0,), jnp.float32)}
  inner = steadax.adamw(0.1, weight_decay=0.01)
  tx = steadax.contrib.cautious(inner, min_fraction=0.3)
  state, inner_state = tx.init(params), inner.init(params)
  for _ in range(3):
    grads = jax.tree_util.tree_map(lambda p: jnp.asarray(rng.normal(size=p.shape), jnp.float32), params)
    updates, state = tx.update(grads, state, params)
    proposed, inner_state = inner.update(grads, inner_state, params)
    for name in params:
      expected = _reference(np.asarray(proposed[name], np.float64), np.asarray(grads[name], np.float64), 0.3)
      np.testing.assert_allclose(np.asarray(updates[name]), expected, rtol=1e-6, atol=1e-7)
      assert np.all(np.asarray(updates[name]) * np.asarray(grads[name]) <= 0)  # each kept one descends
    same = jax.tree_util.tree_map(lambda a, b: np.array_equal(np.asarray(a), np.asarray(b)),
                                  state.inner_state, inner_state)
    assert all(jax.tree_util.tree_leaves(same))


def test_a_small_kept_fraction_is_rescaled_by_min_fraction():
  # Heavy-ball momentum m, then a gradient -0.1 m: the update -lr (0.9 - 0.1) m has the gradient's
  # sign everywhere (all dropped), except where the gradient is flipped to +0.1 m (kept).
  params = {"w": jnp.ones(10, jnp.float32), "b": jnp.ones(3, jnp.float32)}
  tx = steadax.contrib.cautious(steadax.sgd(0.5, momentum=0.9), min_fraction=0.25)
  state = tx.init(params)
  first = {"w": jnp.arange(1.0, 11.0), "b": jnp.ones(3)}
  _, state = tx.update(first, state, params)
  grads = {"w": (-0.1 * first["w"]).at[0].multiply(-1.0), "b": -0.1 * first["b"]}
  updates, _ = tx.update(grads, state, params)
  np.testing.assert_array_equal(np.asarray(updates["b"]), np.zeros(3))
  proposed_w0 = -0.5 * (0.9 * 1.0 + 0.1 * 1.0)   # the kept coordinate: 1/10 of w, below 0.25
  np.testing.assert_allclose(np.asarray(updates["w"]), np.eye(10)[0] * proposed_w0 / 0.25, rtol=1e-6)


def test_min_fraction_is_checked():
  with pytest.raises(ValueError, match=r"cautious: min_fraction must lie in \(0.0, 1.0\]"):
    steadax.contrib.cautious(steadax.sgd(0.1), min_fraction=0.0)
