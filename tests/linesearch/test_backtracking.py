"""scale_by_backtracking_linesearch: the Armijo condition at the returned step, agreement with
Optax, store_grad, and failure modes."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import steadax

from ._problems import DTYPE, PROBLEMS, RTOL, quadratic, start


def _sgd_backtracking_run(module, f, point, steps, **kwargs):
  tx = module.chain(module.sgd(1.0), module.scale_by_backtracking_linesearch(20, **kwargs))

  def body(carry, _):
    w, state = carry
    value, grad = jax.value_and_grad(f)(w)
    updates, state = tx.update(grad, state, w, value=value, grad=grad, value_fn=f)
    info = state[-1].info
    new_w = module.apply_updates(w, updates)
    # Armijo at the returned step, evaluated independently of the line search.
    slack = f(new_w) - value - 1e-4 * state[-1].learning_rate * jnp.vdot(grad, -grad)
    return (new_w, state), (state[-1].learning_rate, info.num_linesearch_steps, info.decrease_error,
                            slack, value)

  w = start(point)
  (w, state), outs = jax.jit(lambda w: jax.lax.scan(body, (w, tx.init(w)), None, length=steps))(w)
  return np.asarray(w), state, [np.asarray(o) for o in outs]


@pytest.mark.parametrize("name,f,point", PROBLEMS, ids=[p[0] for p in PROBLEMS])
def test_armijo_holds_and_step_sizes_agree_with_optax(name, f, point):
  w, state, (rates, counts, errors, slack, values) = _sgd_backtracking_run(steadax, f, point, 8)
  assert np.all(errors == 0)
  assert np.all(slack <= 1e-6 * np.abs(values)), slack
  assert np.all(np.diff(values) <= 0)  # monotone decrease
  assert counts.dtype == np.int32 and rates.dtype == DTYPE
  with jax.numpy_dtype_promotion("standard"):
    w_ref, _, (rates_ref, counts_ref, *_) = _sgd_backtracking_run(optax, f, point, 8)
  np.testing.assert_array_equal(counts, counts_ref)
  np.testing.assert_allclose(rates, rates_ref, rtol=RTOL)
  np.testing.assert_allclose(w, w_ref, rtol=10 * RTOL, atol=1e-6)


def test_store_grad_stores_the_gradient_at_the_new_params_for_value_and_grad_from_state():
  f = quadratic
  tx = steadax.chain(steadax.sgd(1.0), steadax.scale_by_backtracking_linesearch(20, store_grad=True))
  value_and_grad = steadax.value_and_grad_from_state(f)

  @jax.jit
  def step(w, state):
    value, grad = value_and_grad(w, state=state)
    updates, state = tx.update(grad, state, w, value=value, grad=grad, value_fn=f)
    return steadax.apply_updates(w, updates), state

  w = start([1.0, 1.0, -1.0, 0.5])
  state = tx.init(w)
  previous = float(f(w))
  for _ in range(3):
    w, state = step(w, state)
    assert float(f(w)) < previous
    previous = float(f(w))
    np.testing.assert_allclose(float(state[-1].value), float(f(w)), rtol=RTOL)
    np.testing.assert_allclose(np.asarray(state[-1].grad), np.asarray(jax.grad(f)(w)), rtol=RTOL, atol=1e-7)


def test_store_grad_works_under_x64_with_float32_params_where_optax_raises():
  # Optax 0.2.8 transposes the linearised objective with a float64 cotangent under x64 and fails
  # for float32 objectives; steadax computes the gradient at the accepted point directly.
  def f(w):
    return jnp.sum((w - 1.0) ** 2)

  with jax.enable_x64(True):
    w = jnp.zeros(3, jnp.float32)
    value, grad = jax.value_and_grad(f)(w)
    tx = steadax.scale_by_backtracking_linesearch(10, store_grad=True)
    updates, state = tx.update(-grad, tx.init(w), w, value=value, grad=grad, value_fn=f)
    assert state.grad.dtype == jnp.float32 and state.value.dtype == jnp.float32
    assert float(f(w + updates)) < float(value)
    ref = optax.scale_by_backtracking_linesearch(10, store_grad=True)
    with jax.numpy_dtype_promotion("standard"), pytest.raises(TypeError, match="cotangent"):
      ref.update(-grad, ref.init(w), w, value=value, grad=grad, value_fn=f)


def test_every_trial_non_finite_takes_no_step():
  def f(w):
    return jnp.where(jnp.any(w != 0), jnp.nan, 0.0).astype(w.dtype) + jnp.sum(w)

  w = jnp.zeros(2, DTYPE)
  tx = steadax.scale_by_backtracking_linesearch(5)
  grad = jnp.ones(2, DTYPE)
  updates, state = tx.update(-grad, tx.init(w), w, value=f(w), grad=grad, value_fn=f)
  assert np.all(np.asarray(updates) == 0)
  assert float(state.learning_rate) == 0.0 and np.isinf(float(state.info.decrease_error))
  assert int(state.info.num_linesearch_steps) == 6  # max_backtracking_steps + 1 evaluations


def test_ascent_direction_exhausts_the_steps_and_reports_the_error():
  w = start([1.0, 1.0, -1.0, 0.5])
  grad = jax.grad(quadratic)(w)
  tx = steadax.scale_by_backtracking_linesearch(4, decrease_factor=0.5)
  _, state = tx.update(grad, tx.init(w), w, value=quadratic(w), grad=grad, value_fn=quadratic)
  assert int(state.info.num_linesearch_steps) == 5
  assert float(state.info.decrease_error) > 0
  assert float(state.learning_rate) == pytest.approx(0.5**4)  # the last trial, as in Optax


@pytest.mark.parametrize("missing", ["value", "grad", "value_fn", "params"])
def test_a_missing_argument_is_named(missing):
  w = jnp.ones(4, DTYPE)
  value, grad = jax.value_and_grad(quadratic)(w)
  kwargs = {"value": value, "grad": grad, "value_fn": quadratic}
  kwargs.pop(missing, None)
  tx = steadax.scale_by_backtracking_linesearch(5)
  with pytest.raises(TypeError, match=f"scale_by_backtracking_linesearch.*`{missing}`"):
    tx.update(-grad, tx.init(w), None if missing == "params" else w, **kwargs)


def test_bad_hyperparameters_are_named():
  with pytest.raises(ValueError, match="decrease_factor"):
    steadax.scale_by_backtracking_linesearch(5, decrease_factor=1.5)
  with pytest.raises(ValueError, match="max_learning_rate"):
    steadax.scale_by_backtracking_linesearch(5, max_learning_rate=0.0)


# Failed searches, each printing the report (objective, start, direction from the gradient): an
# ascent direction (no step decreases), and trials that all overflow (the step taken is 0). The
# numbers printed are exact in both libraries (power-of-two steps, integer-valued slopes).
_REPORTED = {
    "ascent": (lambda w: jnp.sum(w ** 2), [1.0, 2.0], lambda g: g),
    "overflow": (lambda w: jnp.where(w[0] < 1.0, jnp.inf, jnp.sum(w ** 2)), [1.0], lambda g: -g),
}


@pytest.mark.parametrize("case", list(_REPORTED))
def test_verbose_prints_what_optax_prints(case, capsys):
  def printed(lib):
    f, point, direction = _REPORTED[case]
    tx = lib.scale_by_backtracking_linesearch(5, verbose=True)
    w = jnp.asarray(point, DTYPE)
    value, grad = jax.value_and_grad(f)(w)
    jax.block_until_ready(tx.update(direction(grad), tx.init(w), w, value=value, grad=grad, value_fn=f))
    jax.effects_barrier()
    return capsys.readouterr().out

  ours = printed(steadax)
  with jax.numpy_dtype_promotion("standard"):
    theirs = printed(optax)
  assert theirs.startswith("INFO: optax.scale_by_backtracking_linesearch:\n")
  # The one correction: Optax spells "sufficent".
  assert ours == theirs.replace("sufficent", "sufficient")
  assert ("Using a stepsize of 0 to avoid infinite or nan values." in ours) == (case == "overflow")
