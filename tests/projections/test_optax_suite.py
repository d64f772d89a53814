"""Projections that Optax's own tests (tools/optax_tests.py) found different, fixed to match."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

import steadax


def test_l2_ball_gradient_at_zero_is_the_identity():
  # Inside the ball the projection is the identity; at 0 the norm's sqrt gave NaN (Optax: 1).
  jac = jax.jacobian(steadax.projections.projection_l2_ball)(jnp.zeros(3, jnp.float32))
  np.testing.assert_array_equal(np.asarray(jac), np.eye(3))
  tree = {"a": jnp.zeros(2, jnp.float32), "b": jnp.zeros((), jnp.float32)}
  grads = jax.grad(lambda t: steadax.tree.sum(steadax.projections.projection_l2_ball(t, 2.0)))(tree)
  np.testing.assert_array_equal(np.asarray(grads["a"]), [1.0, 1.0])
  # Outside the ball the projection (and its gradient) are unchanged.
  x = jnp.asarray([3.0, 4.0], jnp.float32)
  np.testing.assert_allclose(np.asarray(steadax.projections.projection_l2_ball(x)), [0.6, 0.8])
