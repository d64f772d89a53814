"""adamw8bit (issue 34 §6): adam8bit with decoupled weight decay, the same quantized state."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import steadax


def _params():
  rng = np.random.default_rng(0)
  return {"w": jnp.asarray(rng.normal(size=(8, 4)), jnp.float32), "b": jnp.asarray(rng.normal(size=4), jnp.float32)}


def _grads(i):
  rng = np.random.default_rng(100 + i)
  return jax.tree_util.tree_map(lambda p: jnp.asarray(rng.normal(size=p.shape), p.dtype), _params())


KW = dict(min_8bit_size=1, block_size=8)  # every tensor quantized


def test_adamw8bit_is_adam8bit_with_decay_bit_for_bit():
  params = _params()
  ours, same = steadax.adamw8bit(0.01, weight_decay=0.1, **KW), steadax.adam8bit(0.01, weight_decay=0.1, **KW)
  s1, s2 = ours.init(params), same.init(params)
  assert type(s1[0]) is steadax.ScaleByAdam8bitState
  assert isinstance(s1[0].mu["w"], steadax.BlockQuantized)
  step = jax.jit(lambda a, b, g: (ours.update(g, a, params), same.update(g, b, params)))
  for i in range(3):
    (u1, s1), (u2, s2) = step(s1, s2, _grads(i))
    jax.tree_util.tree_map(np.testing.assert_array_equal, (u1, s1), (u2, s2))


def test_decay_is_decoupled_and_masked():
  """update = -lr * (8-bit Adam direction + wd * params), the decay only where the mask is True."""
  params, lr, wd = _params(), 0.01, 0.3
  mask = {"w": True, "b": False}
  ours = steadax.adamw8bit(lr, weight_decay=wd, mask=mask, **KW)
  plain = steadax.adamw8bit(lr, weight_decay=0.0, **KW)  # the direction alone, same moments
  s1, s2 = ours.init(params), plain.init(params)
  step = jax.jit(lambda a, b, g: (ours.update(g, a, params), plain.update(g, b, params)))
  for i in range(3):
    (u1, s1), (u2, s2) = step(s1, s2, _grads(i))
    # The moments do not see the decay (decoupled): the states stay equal.
    jax.tree_util.tree_map(np.testing.assert_array_equal, s1[0], s2[0])
    np.testing.assert_allclose(u1["w"], u2["w"] - lr * wd * params["w"], rtol=1e-6, atol=1e-8)
    np.testing.assert_array_equal(u1["b"], u2["b"])


def test_defaults_and_checks():
  params = _params()
  default = steadax.adamw8bit(0.01, **KW)
  explicit = steadax.adamw8bit(0.01, weight_decay=1e-4, **KW)  # adamw's default, Optax's
  step = jax.jit(lambda g: (default.update(g, default.init(params), params)[0],
                            explicit.update(g, explicit.init(params), params)[0]))
  u1, u2 = step(_grads(0))
  jax.tree_util.tree_map(np.testing.assert_array_equal, u1, u2)
  with pytest.raises(ValueError, match="adamw8bit.*weight_decay"):
    steadax.adamw8bit(0.01, weight_decay=-0.1)
