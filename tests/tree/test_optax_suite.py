"""tree.set cases that Optax's own tests (tools/optax_tests.py) found different, fixed to match."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import steadax


def test_set_a_python_number_keeps_the_leaf_dtype():
  # Optax's tests write `tree.set(state, learning_rate=1.0)` into a line search's state; the
  # Python float crashed the next update ('float' object has no attribute 'dtype').
  f = lambda w: jnp.sum(w**2)  # noqa: E731
  w = jnp.ones(2, jnp.float32)
  for opt in (steadax.scale_by_zoom_linesearch(max_linesearch_steps=5),
              steadax.scale_by_backtracking_linesearch(max_backtracking_steps=5)):
    init = opt.init(w)
    state = steadax.tree.set(init, learning_rate=0.5)
    assert state.learning_rate.dtype == init.learning_rate.dtype
    typed = steadax.tree.set(init, learning_rate=jnp.asarray(0.5, init.learning_rate.dtype))
    value, grad = jax.value_and_grad(f)(w)
    updates, _ = opt.update(-grad, state, w, value=value, grad=grad, value_fn=f)
    expected, _ = opt.update(-grad, typed, w, value=value, grad=grad, value_fn=f)
    np.testing.assert_array_equal(np.asarray(updates), np.asarray(expected))
  # An integral number into an integer leaf keeps its dtype; a fractional one is not truncated.
  state = steadax.adam(0.1).init(w)
  assert steadax.tree.get(steadax.tree.set(state, count=2.0), "count").dtype == jnp.int32
  assert steadax.tree.get(steadax.tree.set(state, count=2.5), "count") == 2.5
  # Plain Python values stay as they are.
  assert steadax.tree.set({"h": {"learning_rate": 1.0}}, learning_rate=0.5) == {"h": {"learning_rate": 0.5}}


def test_max_and_min_refuse_complex_leaves():
  # Deliberate (docs/migrating.md): Optax returns the lexicographic extreme.
  tree = {"a": jnp.asarray([1 + 2j, 3 - 1j], jnp.complex64)}
  for reduce in (steadax.tree.max, steadax.tree.min):
    with pytest.raises(TypeError, match="complex leaves have no order"):
      reduce(tree)


def test_tree_maths_of_numpy_arrays_gives_jax_arrays_of_the_x64_mode():
  # Deliberate (docs/migrating.md): Optax computes numpy inputs with numpy (complex128 even with
  # x64 off), so results differ in the last bits from steadax's complex64.
  rng = np.random.default_rng(0)
  x = {"a": rng.normal(size=8) + 1j * rng.normal(size=8)}
  y = {"a": rng.normal(size=8) + 1j * rng.normal(size=8)}
  expected_dtype = jax.dtypes.canonicalize_dtype(np.complex128)
  quotient = steadax.tree.div(x, y)["a"]
  assert isinstance(quotient, jax.Array) and quotient.dtype == expected_dtype
  tol = float(np.finfo(expected_dtype).eps) * 8
  np.testing.assert_allclose(np.asarray(quotient), x["a"] / y["a"], rtol=tol)
  dot = steadax.tree.vdot(x, y)
  assert dot.dtype == expected_dtype
  np.testing.assert_allclose(complex(dot), np.vdot(x["a"], y["a"]), rtol=tol)
