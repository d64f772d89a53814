"""scale_by_zoom_linesearch: the strong Wolfe conditions at the returned step, agreement with
Optax, failure modes, and its keyword arguments."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import steadax

from ._problems import DTYPE, PROBLEMS, RTOL, X64, logistic, quadratic, start

C1, C2 = 1e-4, 0.9


def _search(f, tx):
  """One jitted search along ``direction`` from ``w``: returns (step size, state)."""
  @jax.jit
  def run(w, direction):
    value, grad = jax.value_and_grad(f)(w)
    _, state = tx.update(direction, tx.init(w), w, value=value, grad=grad, value_fn=f)
    return state

  return run


@pytest.mark.parametrize("name,f,point", PROBLEMS, ids=[p[0] for p in PROBLEMS])
def test_strong_wolfe_conditions_hold_at_the_returned_step(name, f, point):
  tx = steadax.scale_by_zoom_linesearch(30, slope_rtol=C1, curv_rtol=C2, approx_dec_rtol=None,
                                        initial_guess_strategy="one")
  run = _search(f, tx)
  w = start(point)
  value, grad = jax.value_and_grad(f)(w)
  # Three scales of the same direction: the search must grow the step, accept it, or zoom in.
  for scale in (1e-3, 1.0, 1e2):
    direction = -scale * grad
    state = run(w, direction)
    eta = state.learning_rate
    assert int(state.info.num_linesearch_steps) >= 1
    assert float(state.info.decrease_error) == 0.0 and float(state.info.curvature_error) == 0.0
    slope0 = float(jnp.vdot(grad, direction))
    new_value, new_grad = jax.value_and_grad(f)(w + eta * direction)
    tol = 1e-6 * abs(float(value))
    assert float(new_value) <= float(value) + C1 * float(eta) * slope0 + tol, (scale, float(eta))
    assert abs(float(jnp.vdot(new_grad, direction))) <= C2 * abs(slope0) * (1 + 1e-5), (scale, float(eta))
    # The stored value and gradient are those at the returned step.
    np.testing.assert_allclose(float(state.value), float(new_value), rtol=RTOL)
    np.testing.assert_allclose(np.asarray(state.grad), np.asarray(new_grad), rtol=RTOL, atol=1e-7)
    assert state.learning_rate.dtype == DTYPE and state.info.num_linesearch_steps.dtype == jnp.int32


def _sgd_zoom_run(module, f, point, steps, **kwargs):
  tx = module.chain(module.sgd(1.0), module.scale_by_zoom_linesearch(15, **kwargs))

  def body(carry, _):
    w, state = carry
    value, grad = jax.value_and_grad(f)(w)
    updates, state = tx.update(grad, state, w, value=value, grad=grad, value_fn=f)
    return (module.apply_updates(w, updates), state), (state[-1].learning_rate,
                                                       state[-1].info.num_linesearch_steps)

  w = start(point)
  (w, _), (rates, counts) = jax.jit(lambda w: jax.lax.scan(body, (w, tx.init(w)), None, length=steps))(w)
  return np.asarray(w), np.asarray(rates), np.asarray(counts)


@pytest.mark.parametrize("name,f,point", PROBLEMS, ids=[p[0] for p in PROBLEMS])
def test_step_sizes_agree_with_optax(name, f, point):
  steps = 8
  ours = _sgd_zoom_run(steadax, f, point, steps)
  with jax.numpy_dtype_promotion("standard"):
    theirs = _sgd_zoom_run(optax, f, point, steps)
  np.testing.assert_array_equal(ours[2], theirs[2])  # the same number of evaluations per search
  np.testing.assert_allclose(ours[1], theirs[1], rtol=10 * RTOL)
  np.testing.assert_allclose(ours[0], theirs[0], rtol=10 * RTOL, atol=1e-6)


def test_max_learning_rate_caps_the_step_and_keep_strategy_starts_from_the_last_one():
  w = start([1.0, 1.0, -1.0, 0.5])
  grad = jax.grad(quadratic)(w)
  capped = _search(quadratic, steadax.scale_by_zoom_linesearch(20, max_learning_rate=0.05))
  # Along -1e-3 g the best step is far above the cap: the cap satisfies Armijo and is returned.
  state = capped(w, -1e-3 * grad)
  assert float(state.learning_rate) == pytest.approx(0.05)
  assert float(state.info.curvature_error) > 0  # documented: curvature cannot be met below the cap

  # "keep" starts from the previous step size: the exact minimiser along -g is accepted at once,
  # while "one" has to search for it.
  exact = float(jnp.vdot(grad, grad) / jnp.vdot(grad, jnp.asarray([1.0, 10.0, 0.5, 3.0], DTYPE) * grad))
  for strategy, evaluations in (("keep", 1), ("one", None)):
    tx = steadax.scale_by_zoom_linesearch(20, initial_guess_strategy=strategy)
    state = tx.init(w)._replace(learning_rate=jnp.asarray(exact, DTYPE))
    _, state = tx.update(-grad, state, w, value=quadratic(w), grad=grad, value_fn=quadratic)
    if evaluations is not None:
      assert int(state.info.num_linesearch_steps) == evaluations
      assert float(state.learning_rate) == pytest.approx(exact, rel=1e-6)
    else:
      assert int(state.info.num_linesearch_steps) > 1


def test_a_failed_search_reports_errors_and_takes_only_its_last_small_step():
  # An ascent direction has no step with sufficient decrease: like Optax, the search ends after
  # max_linesearch_steps with its last (small) trial and reports positive errors.
  w = start([1.0, 1.0, -1.0, 0.5])
  grad = jax.grad(quadratic)(w)
  state = _search(quadratic, steadax.scale_by_zoom_linesearch(10))(w, grad)
  assert int(state.info.num_linesearch_steps) == 10
  assert float(state.info.decrease_error) > 0
  assert 0.0 < float(state.learning_rate) < 0.01
  np.testing.assert_allclose(float(state.value), float(quadratic(w + state.learning_rate * grad)),
                             rtol=RTOL)


def test_steps_into_a_nan_region_are_rejected():
  def f(w):  # finite only for w < 1
    return jnp.sum(-jnp.log1p(-w) + w**2)

  w = jnp.zeros(2, DTYPE)
  grad = jax.grad(f)(w)
  state = _search(f, steadax.scale_by_zoom_linesearch(30, initial_guess_strategy="one"))(w, -grad * 4)
  eta = float(state.learning_rate)
  assert 0.0 < eta * 4 * float(jnp.max(jnp.abs(grad))) < 1.0  # the step stays inside the domain
  assert np.isfinite(float(state.value)) and float(state.value) < float(f(w))


def test_extra_args_are_passed_to_value_fn_by_name_and_others_ignored():
  x = jnp.asarray(np.random.RandomState(1).randn(5, 2), DTYPE)
  y = jnp.asarray([1.0, -1.0, 0.5, 0.0, 2.0], DTYPE)

  def loss(w, x, y):
    return jnp.mean((x @ w - y) ** 2)

  tx = steadax.chain(steadax.sgd(1.0), steadax.scale_by_zoom_linesearch(15))
  w = jnp.zeros(2, DTYPE)
  value, grad = jax.value_and_grad(loss)(w, x, y)
  updates, state = tx.update(grad, tx.init(w), w, value=value, grad=grad, value_fn=loss, x=x, y=y,
                             unrelated=3)
  assert float(loss(w + updates, x, y)) < float(value)
  assert float(state[-1].info.decrease_error) == 0.0


@pytest.mark.parametrize("missing", ["value", "grad", "value_fn", "params"])
def test_a_missing_argument_is_named(missing):
  w = jnp.ones(2, DTYPE)
  value, grad = jax.value_and_grad(quadratic)(jnp.ones(4, DTYPE))
  kwargs = {"value": value, "grad": grad, "value_fn": quadratic}
  kwargs.pop(missing, None)
  tx = steadax.scale_by_zoom_linesearch(5)
  w = jnp.ones(4, DTYPE)
  with pytest.raises(TypeError, match=f"scale_by_zoom_linesearch.*`{missing}`"):
    tx.update(grad, tx.init(w), None if missing == "params" else w, **kwargs)


def test_bad_hyperparameters_are_named():
  with pytest.raises(ValueError, match="initial_guess_strategy"):
    steadax.scale_by_zoom_linesearch(5, initial_guess_strategy="two")
  with pytest.raises(ValueError, match="max_linesearch_steps"):
    steadax.scale_by_zoom_linesearch(0)
  with pytest.raises(ValueError, match="`grad` has structure"):
    w = jnp.ones(4, DTYPE)
    tx = steadax.scale_by_zoom_linesearch(5)
    tx.update(w, tx.init(w), w, value=quadratic(w), grad={"w": w}, value_fn=quadratic)


def test_state_dtypes_follow_the_widest_parameter_and_stay_fixed():
  params = {"a": jnp.ones(3, jnp.bfloat16), "b": jnp.ones(2, jnp.float32)}
  if X64:
    params["c"] = jnp.ones(2, jnp.float64)
  tx = steadax.scale_by_zoom_linesearch(10)
  state = tx.init(params)
  stat = jnp.float64 if X64 else jnp.float32
  assert state.learning_rate.dtype == state.value.dtype == state.info.decrease_error.dtype == stat
  assert state.info.num_linesearch_steps.dtype == jnp.int32
  assert state.grad["a"].dtype == jnp.bfloat16
  # A value computed in float16 is still stored in the statistics dtype.
  f = lambda p: sum(jnp.sum(x.astype(jnp.float16) ** 2) for x in jax.tree_util.tree_leaves(p))  # noqa: E731
  grads = jax.tree_util.tree_map(lambda x: 2 * x, params)
  neg = jax.tree_util.tree_map(lambda g: -g, grads)
  updates, new_state = tx.update(neg, state, params, value=f(params), grad=grads, value_fn=f)
  assert jax.tree_util.tree_map(lambda x: x.dtype, new_state) == jax.tree_util.tree_map(lambda x: x.dtype, state)
  assert {k: v.dtype for k, v in updates.items()} == {k: v.dtype for k, v in params.items()}
  assert float(f(steadax.apply_updates(params, updates))) < float(f(params))


@pytest.mark.parametrize("make,failure", [
    (lambda: steadax.scale_by_zoom_linesearch(5, verbose=True), "Linesearch failed"),
    (lambda: steadax.scale_by_backtracking_linesearch(3, verbose=True), "failed to find a stepsize")],
    ids=["zoom", "backtracking"])
def test_verbose_prints_a_diagnostic_only_when_the_search_fails(make, failure, capfd):
  tx = make()
  w = start([1.0, 1.0, -1.0, 0.5])
  value, grad = jax.value_and_grad(quadratic)(w)
  run = jax.jit(lambda w, d: tx.update(d, tx.init(w), w, value=value, grad=grad, value_fn=quadratic))
  run(w, -0.01 * grad)  # the first trial step is acceptable
  jax.effects_barrier()
  assert capfd.readouterr().out == ""
  run(w, grad)  # an ascent direction: the search fails
  jax.effects_barrier()
  assert failure in capfd.readouterr().out


# Searches that end in each of the zoom search's diagnoses: (objective, start, direction from the
# gradient, arguments). The numbers printed are exact in both libraries (power-of-two steps, one-
# element or integer-valued slopes), so the lines can be compared as text.
_REPORTED = {
    # An ascent direction: no step decreases; "not a descent direction" with the slope's sign.
    "ascent": (lambda w: jnp.sum(w ** 2), [1.0, 2.0], lambda g: g, {"max_linesearch_steps": 5}),
    # Every trial overflows: steps halve to 2^-19 (Optax's "Stepsize reached 1.9e-06"), the
    # bracket is below stepsize_precision, the slope above 1e16 ("badly conditioned").
    "steep": (lambda w: 1e18 * jnp.sum(w ** 2), [1.0], lambda g: -g, {"max_linesearch_steps": 20}),
    # The same, ten more halvings: a step below float32's epsilon (the advice to use x64).
    "below_eps": (lambda w: 1e18 * jnp.sum(w ** 2), [1.0], lambda g: -g,
                  {"max_linesearch_steps": 30}),
    # A linear objective with a step cap: the cap is reached without a bracket.
    "capped": (lambda w: -jnp.sum(w), [1.0], lambda g: -g,
               {"max_linesearch_steps": 10, "max_learning_rate": 4.0}),
    # log(w) is NaN past w = 0: the step returned is the last one with sufficient decrease.
    "safe_step": (lambda w: jnp.sum(jnp.log(w)), [1.0], lambda g: -2 * g,
                  {"max_linesearch_steps": 3}),
}


def _printed(lib, case, capsys):
  f, point, direction, kwargs = _REPORTED[case]
  tx = lib.scale_by_zoom_linesearch(verbose=True, **kwargs)
  w = jnp.asarray(point, DTYPE)
  value, grad = jax.value_and_grad(f)(w)
  jax.block_until_ready(tx.update(direction(grad), tx.init(w), w, value=value, grad=grad, value_fn=f))
  jax.effects_barrier()
  return capsys.readouterr().out


@pytest.mark.parametrize("case", list(_REPORTED))
def test_verbose_prints_what_optax_prints(case, capsys):
  ours = _printed(steadax, case, capsys)
  with jax.numpy_dtype_promotion("standard"):  # Optax compares float64 steps with a float32 epsilon
    theirs = _printed(optax, case, capsys)
  assert theirs.startswith("INFO: optax.scale_by_zoom_linesearch:\n")
  # The two corrections (docs/linesearch.md): Optax glues FLAG_INTERVAL_NOT_FOUND to the end of the
  # "Curvature Error" line, and advises x64 for a step below float32's epsilon in float64 too.
  expected = theirs.replace("No interval", "\nNo interval")
  if X64:
    expected = "".join(line for line in expected.splitlines(keepends=True)
                       if "consider passing to higher precision like x64" not in line)
  assert ours == expected
  lines = ours.splitlines()
  if case == "capped":
    assert lines[-2].startswith("No interval satisfying curvature condition.")
    assert lines[-3].startswith("Curvature Error: ")
  if case == "ascent":
    assert "The slope (=20.0) at stepsize=0 should be negative" in ours
  if case == "steep":
    assert "Stepsize reached: 1.9073486328125e-06" in lines and "badly conditioned" in ours
    assert "not a descent direction" not in ours
  if case == "below_eps":
    assert ("is below machine precision" in ours) == (not X64)
  if case == "safe_step":
    assert "Stepsize ensuring sufficient decrease: 0.5." in ours
