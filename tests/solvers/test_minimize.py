"""minimize: each stop reason, the report's counts and types in both x64 modes, vmap over starting
points, first-order transformations, has_aux and the progress callback, and bad input."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import steadax

X64 = bool(jax.config.jax_enable_x64)
DTYPE = jnp.float64 if X64 else jnp.float32
StopReason = steadax.StopReason


def rosenbrock(x):
  return jnp.sum(100 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2)


def _counting(fun):
  """``fun`` that counts its evaluations on the host (traced once per compiled program, so the
  count comes from a host callback in the program, which jax.debug.callback keeps ordered)."""
  calls = []

  def counted(x):
    jax.debug.callback(lambda: calls.append(1))
    return fun(x)

  return counted, calls


COUNTED_ROSENBROCK, ROSENBROCK_CALLS = _counting(rosenbrock)


def test_converges_and_counts_evaluations():
  ROSENBROCK_CALLS.clear()
  x, info = steadax.minimize(COUNTED_ROSENBROCK, jnp.asarray([-1.2, 1.0], DTYPE))
  np.testing.assert_allclose(np.asarray(x), [1.0, 1.0], atol=1e-4)
  assert info.reason == StopReason.CONVERGED and bool(info.converged)
  assert float(info.grad_norm) <= (1e-8 if X64 else 1e-5)
  # Every evaluation of the objective is counted: the one at x0 and each line-search trial.
  assert int(info.num_fun_evals) == len(ROSENBROCK_CALLS) == int(info.num_grad_evals)
  assert int(info.num_steps) < int(info.num_fun_evals)
  assert x.dtype == DTYPE and info.value.dtype == DTYPE and info.grad_norm.dtype == DTYPE
  for counter in (info.num_steps, info.num_fun_evals, info.num_grad_evals, info.reason):
    assert counter.dtype == jnp.int32  # in both x64 modes
  assert steadax.stop_reason_message(info) == "converged: the gradient norm is at most the tolerance"


def test_max_steps_and_no_recompile():
  # tol and max_steps are traced: the same compiled loop as the previous test.
  x, info = steadax.minimize(COUNTED_ROSENBROCK, jnp.asarray([-1.2, 1.0], DTYPE), max_steps=3)
  assert info.reason == StopReason.MAX_STEPS and int(info.num_steps) == 3 and not bool(info.converged)
  assert "maximum number of steps" in steadax.stop_reason_message(info.reason)
  _, info = steadax.minimize(COUNTED_ROSENBROCK, jnp.asarray([1.0, 1.0], DTYPE))
  assert info.reason == StopReason.CONVERGED and int(info.num_steps) == 0  # already optimal


@pytest.mark.x32_only
def test_vmap_multi_start():
  starts = jnp.asarray(np.random.default_rng(0).uniform(-2, 2, size=(6, 2)), DTYPE)
  max_steps = jnp.asarray([1000, 1000, 1000, 1000, 1000, 2], jnp.int32)
  solve = jax.jit(jax.vmap(lambda x, n: steadax.minimize(rosenbrock, x, max_steps=n)))
  x, info = solve(starts, max_steps)
  assert x.shape == (6, 2) and info.reason.shape == (6,)
  np.testing.assert_allclose(np.asarray(x[:5]), 1.0, atol=1e-3)
  assert np.all(np.asarray(info.reason[:5]) == StopReason.CONVERGED)
  assert int(info.reason[5]) == StopReason.MAX_STEPS and int(info.num_steps[5]) == 2
  # Each member matches its own unbatched run (a batched while_loop keeps finished carries).
  x1, info1 = steadax.minimize(rosenbrock, starts[1])
  np.testing.assert_allclose(np.asarray(x[1]), np.asarray(x1), atol=1e-4)
  # (batched and unbatched arithmetic may round differently, so a line search may differ by a trial)
  assert abs(int(info.num_fun_evals[1]) - int(info1.num_fun_evals)) <= 2
  assert steadax.stop_reason_message(info.reason)[5] == steadax.stop_reason_message(StopReason.MAX_STEPS)


@jax.custom_vjp
def _wrong_gradient_square(x):
  return jnp.sum(x**2)


def _fwd(x):
  return _wrong_gradient_square(x), x


def _bwd(x, g):
  return (-2 * g * x,)  # the gradient's opposite: every direction goes uphill


_wrong_gradient_square.defvjp(_fwd, _bwd)
COUNTED_WRONG, WRONG_CALLS = _counting(_wrong_gradient_square)


def test_linesearch_failed():
  tx = steadax.chain(steadax.sgd(1.0), steadax.scale_by_backtracking_linesearch(8))
  x0 = jnp.asarray([1.0, -2.0], DTYPE)
  WRONG_CALLS.clear()
  x, info = steadax.minimize(COUNTED_WRONG, x0, tx)
  # The second failed search in a row stops the run.
  assert info.reason == StopReason.LINESEARCH_FAILED and int(info.num_steps) == 2
  assert "line search" in steadax.stop_reason_message(info.reason)
  # sgd + backtracking stores no gradient: x0, then per step the trials (Optax's count: 8 + 1)
  # and the new point.
  assert int(info.num_fun_evals) == len(WRONG_CALLS) == 21 and int(info.num_grad_evals) == 3


def _unbounded(x):
  return -jnp.sum(jnp.exp(x))


def test_nonfinite_during_the_run():
  x, info = steadax.minimize(_unbounded, jnp.zeros(2, DTYPE), steadax.sgd(10.0))
  assert info.reason == StopReason.NONFINITE and int(info.num_steps) > 1
  assert "not finite" in steadax.stop_reason_message(info.reason)


def _log_barrier(x):
  return -jnp.sum(jnp.log(x))


def test_nan_at_the_start():
  x0 = jnp.asarray([1.0, -1.0], DTYPE)
  with pytest.raises(ValueError, match="value is not finite at the starting point"):
    steadax.minimize(_log_barrier, x0, steadax.sgd(0.1))
  # Under jit there is nothing to raise from: the report says it, after 0 steps.
  _, info = jax.jit(lambda x: steadax.minimize(_log_barrier, x, steadax.sgd(0.1)))(x0)
  assert info.reason == StopReason.NONFINITE and int(info.num_steps) == 0


@pytest.mark.x32_only
def test_first_order_tree_of_mixed_dtypes_aux_and_callback():
  seen = []

  def fun(p):
    loss = jnp.sum((p["a"] - 1.0) ** 2) + jnp.sum((p["b"].astype(jnp.float32) + 1.0) ** 2)
    return loss, {"a": p["a"]}

  x0 = {"a": jnp.zeros(3, jnp.float32), "b": jnp.zeros(2, jnp.bfloat16)}
  x, info = steadax.minimize(fun, x0, steadax.adam(0.1), has_aux=True, tol=1e-2, max_steps=500,
                             callback=lambda i: seen.append(int(i.num_steps)), callback_every=25)
  assert x["b"].dtype == jnp.bfloat16 and x["a"].dtype == jnp.float32
  assert info.reason == StopReason.CONVERGED
  np.testing.assert_allclose(np.asarray(x["a"]), 1.0, atol=1e-2)
  np.testing.assert_array_equal(np.asarray(info.aux["a"]), np.asarray(x["a"]))  # aux at the solution
  steps = int(info.num_steps)
  # Every 25th step, and the last one (where the loop stopped).
  assert seen == [*range(25, steps + 1, 25), *([steps] if steps % 25 else [])]
  assert int(info.num_fun_evals) == steps + 1  # no line search: one evaluation per step


def test_bad_input():
  with pytest.raises(TypeError, match=r"minimize: `fun` must return a real floating scalar, got shape \(2,\)"):
    steadax.minimize(lambda x: x**2, jnp.ones(2, DTYPE))
  with pytest.raises(TypeError, match="pass has_aux=True"):
    steadax.minimize(lambda x: (jnp.sum(x**2), x), jnp.ones(2, DTYPE))
  with pytest.raises(TypeError, match=r"`x0` at \['n'\] has dtype int32"):
    steadax.minimize(lambda p: jnp.sum(p["w"] ** 2), {"w": jnp.ones(2), "n": jnp.asarray(1, jnp.int32)})
  with pytest.raises(ValueError, match="callback_every"):
    steadax.minimize(rosenbrock, jnp.ones(2, DTYPE), callback=print, callback_every=0)


@pytest.mark.x32_only
def test_optax_transformation():
  import optax

  # Optax's lbfgs gets value, grad and value_fn (its update takes keyword extras). It goes through
  # steadax's contract like any function pair: outside strict mode (the default) the weakly typed
  # counter in Optax's line-search state is made strong instead of raising.
  with steadax.strict_mode(False):
    x, info = steadax.minimize(rosenbrock, jnp.asarray([-1.2, 1.0], DTYPE), optax.lbfgs())
  assert info.reason == StopReason.CONVERGED
  np.testing.assert_allclose(np.asarray(x), 1.0, atol=1e-3)


@pytest.mark.x32_only  # the float32 precision floor is the point
def test_stalls_at_the_precision_floor():
  # This start ends at 20-d Rosenbrock's local minimum (value 3.99), where float32 gradients keep
  # ~5e-5 of rounding: the zoom search accepts steps that change nothing, forever. The run stops
  # after 10 such steps instead of running to max_steps.
  start = np.random.default_rng(1).uniform(-2.0, 2.0, size=(64, 20)).astype(np.float32)[19]
  x, info = steadax.minimize(rosenbrock, jnp.asarray(start), max_steps=5000)
  assert info.reason == StopReason.LINESEARCH_FAILED and int(info.num_steps) < 500
  assert float(info.value) == pytest.approx(3.9866, abs=1e-3)
