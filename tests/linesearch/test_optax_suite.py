"""Line-search hyperparameters that Optax's own tests (tools/optax_tests.py) pass, accepted."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest

import steadax


@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float32])
def test_array_hyperparameters_below_one_are_accepted(dtype):
  # Optax's dtype-stability tests build both searches with every hyperparameter jnp.array(1e-5):
  # increase_factor < 1 was refused (a first trial that shrinks is well defined, as in Optax).
  small = lambda: jnp.asarray(1e-5, dtype)  # noqa: E731
  searches = [
      steadax.scale_by_backtracking_linesearch(
          max_backtracking_steps=5, slope_rtol=small(), decrease_factor=small(),
          increase_factor=small(), max_learning_rate=small(), atol=small(), rtol=small()),
      steadax.scale_by_zoom_linesearch(
          max_linesearch_steps=5, tol=small(), increase_factor=small(), slope_rtol=small(),
          curv_rtol=small(), approx_dec_rtol=small(), stepsize_precision=small()),
  ]
  w = jnp.asarray([1.0, 2.0], jnp.float32)
  f = lambda x: jnp.sum(x**2)  # noqa: E731
  for opt in searches:
    state = opt.init(w)
    _, new_state = jax.jit(lambda s: opt.update(-w, s, w, value=f(w), grad=2 * w, value_fn=f))(state)
    assert jax.tree_util.tree_structure(new_state) == jax.tree_util.tree_structure(state)
  for factory in (steadax.scale_by_backtracking_linesearch, steadax.scale_by_zoom_linesearch):
    with pytest.raises(ValueError, match="increase_factor"):
      factory(5, increase_factor=jnp.asarray(0.0, dtype))
