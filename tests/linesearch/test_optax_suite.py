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


def test_unknown_extras_are_ignored_and_value_fn_arguments_forwarded():
  # Deliberate (docs/migrating.md): Optax raises "Unexpected keyword arguments" for `unused_arg`.
  def value_fn(params, batch):
    return jnp.sum(params * batch)

  w = jnp.asarray([1.0, 2.0], jnp.float32)
  batch = jnp.ones(2, jnp.float32)
  opt = steadax.scale_by_backtracking_linesearch(max_backtracking_steps=5)
  kwargs = dict(value=value_fn(w, batch), grad=batch, value_fn=value_fn, batch=batch)
  with_extra, _ = opt.update(-0.1 * batch, opt.init(w), w, unused_arg=42, **kwargs)
  without, _ = opt.update(-0.1 * batch, opt.init(w), w, **kwargs)
  assert bool(jnp.all(with_extra == without))


def test_value_and_grad_from_state_with_two_line_searches_raises_value_error():
  # Deliberate (docs/migrating.md): Optax raises KeyError for two stored values.
  f = lambda x: jnp.sum(x**2)  # noqa: E731
  search = lambda: steadax.scale_by_backtracking_linesearch(15, store_grad=True)  # noqa: E731
  w = jnp.ones(3, jnp.float32)
  value_and_grad = steadax.value_and_grad_from_state(f)
  with pytest.raises(ValueError, match="2 `value` fields"):
    value_and_grad(w, state=steadax.chain(search(), search()).init(w))
  with pytest.raises(ValueError, match="no `value` field"):
    value_and_grad(w, state=steadax.scale_by_adam().init(w))
