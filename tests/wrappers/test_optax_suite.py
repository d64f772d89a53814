"""Wrappers that Optax's own tests (tools/optax_tests.py) found different, fixed to match."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

import steadax


def test_per_example_global_norm_clip_of_an_integer_leaf_is_not_truncated():
  grads = [jnp.asarray([[1, 2], [3, 4]], jnp.int32)]
  summed, clipped = steadax.per_example_global_norm_clip(grads, 1.0)
  # Each example scaled to norm 1, summed: (1, 2)/sqrt(5) + (3, 4)/5 (was truncated to (1, 1)).
  expected = np.array([1, 2]) / np.sqrt(5) + np.array([3, 4]) / 5
  assert summed[0].dtype == jnp.float32 or summed[0].dtype == jnp.float64
  np.testing.assert_allclose(np.asarray(summed[0]), expected, rtol=1e-6)
  assert int(clipped) == 2
  layer, _ = steadax.per_example_layer_norm_clip(grads, 1.0)
  np.testing.assert_allclose(np.asarray(layer[0]), expected, rtol=1e-6)
