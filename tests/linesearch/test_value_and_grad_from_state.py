"""value_and_grad_from_state: reuse of the stored value and gradient, its fallback, its errors."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import steadax

from ._problems import DTYPE, RTOL


def _loss(w, x, y=0.0):
  return jnp.sum((x * w - y) ** 2)


def test_first_call_computes_then_the_stored_pair_is_returned():
  x = jnp.asarray([1.0, 2.0, 3.0], DTYPE)
  value_and_grad = steadax.value_and_grad_from_state(_loss)
  opt = steadax.chain(steadax.sgd(1.0), steadax.scale_by_zoom_linesearch(10))
  w = jnp.ones(3, DTYPE)
  state = opt.init(w)
  # The initial stored value is +inf: computed fresh, positional and keyword extras passed on.
  value, grad = jax.jit(lambda w, s: value_and_grad(w, x, state=s, y=1.0))(w, state)
  ref_value, ref_grad = jax.value_and_grad(_loss)(w, x, 1.0)
  np.testing.assert_allclose(float(value), float(ref_value), rtol=RTOL)
  np.testing.assert_allclose(np.asarray(grad), np.asarray(ref_grad), rtol=RTOL)
  assert value.dtype == state[-1].value.dtype and grad.dtype == w.dtype
  # A finite stored value is returned as it is, with its gradient (here deliberately not the true one).
  planted = state[-1]._replace(value=jnp.asarray(7.0, DTYPE), grad=jnp.full(3, 0.5, DTYPE))
  state = (state[0], planted)
  value, grad = value_and_grad(w, x, state=state, y=1.0)
  assert float(value) == 7.0 and np.all(np.asarray(grad) == 0.5)


def test_errors_say_what_is_missing():
  w = jnp.ones(2, DTYPE)
  value_and_grad = steadax.value_and_grad_from_state(lambda w: jnp.sum(w**2))
  with pytest.raises(ValueError, match="value_and_grad_from_state: the state has no `value`"):
    value_and_grad(w, state=steadax.sgd(0.1).init(w))
  with pytest.raises(ValueError, match="store_grad=True"):
    value_and_grad(w, state=steadax.scale_by_backtracking_linesearch(5).init(w))
  twice = steadax.chain(steadax.scale_by_zoom_linesearch(5), steadax.scale_by_zoom_linesearch(5))
  with pytest.raises(ValueError, match="2 `value` fields"):
    value_and_grad(w, state=twice.init(w))
