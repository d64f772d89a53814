"""Losses that Optax's own tests (tools/optax_tests.py) found different, fixed to match."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import steadax


def test_safe_softmax_cross_entropy_labels_gradient_where_a_label_is_zero():
  # d/dy of -sum y log p is -log p, zero labels included (steadax gave 0 there).
  logits = jnp.asarray([[10.0, 1.0, -2.0], [0.0, -jnp.inf, 1.0]], jnp.float32)
  labels = jnp.asarray([[0.0, 1.0, 0.0], [0.5, 0.0, 0.5]], jnp.float32)
  grad = jax.grad(lambda y: jnp.sum(steadax.losses.safe_softmax_cross_entropy(logits, y)))(labels)
  expected = -jax.nn.log_softmax(logits)
  np.testing.assert_allclose(np.asarray(grad), np.asarray(expected), rtol=1e-5, atol=1e-6)
  assert grad[1, 1] == jnp.inf  # an impossible class: -log 0
  # The logits' gradient stays finite at -inf logits, forward and reverse.
  g_logits = jax.grad(lambda x: jnp.sum(steadax.losses.safe_softmax_cross_entropy(x, labels)))(logits)
  assert bool(jnp.all(jnp.isfinite(g_logits)))
  _, tangent = jax.jvp(lambda x: steadax.losses.safe_softmax_cross_entropy(x, labels), (logits,),
                       (jnp.ones_like(logits),))
  assert bool(jnp.all(jnp.isfinite(tangent)))


@pytest.mark.parametrize("axis", [(3, 2), (2, 3), (-1, -2)])
def test_integer_labels_count_classes_over_the_axes_in_the_order_given(axis):
  # axis=(3, 2) flattens the classes as (dim 3, dim 2), as Optax; sorting it computed (2, 3).
  logits = jax.random.normal(jax.random.key(0), (2, 3, 4, 5), jnp.float32)
  labels = jax.random.randint(jax.random.key(1), (2, 3), 0, 20, jnp.int32)
  ours = steadax.losses.softmax_cross_entropy_with_integer_labels(logits, labels, axis=axis)
  moved = jnp.moveaxis(logits, [a % 4 for a in axis], [2, 3]).reshape(2, 3, 20)
  expected = jax.nn.logsumexp(moved, axis=-1) - jnp.take_along_axis(moved, labels[..., None], -1)[..., 0]
  np.testing.assert_allclose(np.asarray(ours), np.asarray(expected), rtol=1e-5, atol=1e-6)
  with jax.numpy_dtype_promotion("standard"):
    theirs = optax.losses.softmax_cross_entropy_with_integer_labels(logits, labels, axis=axis)
  np.testing.assert_allclose(np.asarray(ours), np.asarray(theirs), rtol=1e-5, atol=1e-6)


def test_dice_loss_error_says_valid_probability_distributions():
  predictions = jnp.full((1, 2, 3), 0.5, jnp.float32)
  with pytest.raises(ValueError, match="valid probability distributions"):
    steadax.losses.dice_loss(predictions, jnp.ones((1, 2, 3), jnp.float32), apply_softmax=False)
