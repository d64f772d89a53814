"""L-BFGS-B against scipy's (Fortran L-BFGS-B 3.0): the same solutions and the same active sets on
bounded Rosenbrock, a quadratic whose solution sits on several bounds, non-negative least squares
and box-constrained logistic regression; bounds given per leaf, infeasible starts, bad bounds."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.optimize

import steadax

X64 = bool(jax.config.jax_enable_x64)
DTYPE = jnp.float64 if X64 else jnp.float32
# Solutions agree to what each precision resolves near a bound-constrained minimiser.
# - float64: a gradient norm of TOL leaves the logistic block's flattest coordinate (a feature of
#   true weight 0) free to about 1e-6: on an AMD EPYC steadax stops 1.15e-6 from scipy's point there
#   with an objective 1.5e-13 below scipy's, so the objective is compared too. Every CPU and XLA
#   code generation tried converges (gradient norm <= TOL).
# - float32: the objective's terms cancel (a value of -8.47 from terms whose magnitudes sum to
#   about 780), so float32 resolves the objective only to about eps32 * 780 = 9e-5 and the gradient
#   norm at which the line search stops seeing a decrease depends on the rounding of the CPU and of
#   XLA's code generation (measured: 1.2e-4 to 1.9e-2, objective 6e-10 to 1.9e-5 above scipy's, on
#   one AMD EPYC with vector widths from SSE4.2 to AVX-512). What float32 guarantees is optimality
#   to that resolution, tested below from float64 evaluations (_float32_resolution).
ATOL = 2e-6
TOL = 1e-9 if X64 else 1e-5


def rosenbrock(x):
  return jnp.sum(100 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2)


def quadratic(x, a, b):
  return 0.5 * x @ (a @ x) - b @ x


def least_squares(x, a, b):
  r = a @ x - b
  return 0.5 * r @ r


def logistic(w, features, labels):
  logits = features @ w
  return jnp.mean(jnp.logaddexp(0, logits) - labels * logits) + 1e-3 * (w @ w)


def _problems():
  rng = np.random.default_rng(0)
  q = np.linalg.qr(rng.normal(size=(8, 8)))[0]
  a_quad = q @ np.diag(np.linspace(1.0, 20.0, 8)) @ q.T
  x_star = np.array([-2.0, 0.3, 2.0, -0.5, 1.5, 0.1, -3.0, 0.7])  # 4 coordinates outside [-1, 1]
  b_quad = a_quad @ x_star
  a_ls = rng.normal(size=(12, 6))
  b_ls = a_ls @ np.array([1.0, -1.0, 0.5, -0.2, 2.0, -3.0]) + 0.1 * rng.normal(size=12)
  features = rng.normal(size=(40, 5))
  labels = (features @ np.array([3.0, -2.0, 1.0, 0.0, 4.0]) + 0.3 * rng.normal(size=40) > 0).astype(float)
  return {
      # name: (fun, args, x0, lower, upper)
      "rosenbrock": (rosenbrock, (), np.zeros(10), np.full(10, -0.5), np.full(10, 0.8)),
      "quadratic": (quadratic, (a_quad, b_quad), np.zeros(8), -np.ones(8), np.ones(8)),
      "nnls": (least_squares, (a_ls, b_ls), np.ones(6), np.zeros(6), np.full(6, np.inf)),
      "logistic": (logistic, (features, labels), np.zeros(5), np.full(5, -0.5), np.array([0.5, 0.5, np.inf, 0.5, 1.0])),
  }


PROBLEMS = _problems()
NAMES = list(PROBLEMS)
SIZES = [len(PROBLEMS[n][2]) for n in NAMES]
OFFSETS = np.cumsum([0] + SIZES)


def blocks(x, *args):
  """The four problems side by side: one bounded problem (and one compiled solve per x64 mode),
  whose solution and active set are the four problems' own, block by block."""
  total = jnp.zeros([], x.dtype)
  for i, name in enumerate(NAMES):
    fun, data = PROBLEMS[name][0], args[i]
    total = total + fun(x[OFFSETS[i]:OFFSETS[i + 1]], *data)
  return total


def _block_inputs():
  args = tuple(tuple(jnp.asarray(a, DTYPE) for a in PROBLEMS[n][1]) for n in NAMES)
  x0, lower, upper = (np.concatenate([PROBLEMS[n][k] for n in NAMES]) for k in (2, 3, 4))
  # The bounds as the solver sees them (float32 rounds 0.8 up).
  lower, upper = (np.asarray(np.asarray(b, DTYPE), np.float64) for b in (lower, upper))
  return args, x0, lower, upper


def _numpy_value_and_grad(name, x, *data):
  """Float64 objectives and gradients for scipy, whatever the x64 mode."""
  if name == "rosenbrock":
    return scipy.optimize.rosen(x), scipy.optimize.rosen_der(x)
  if name == "quadratic":
    a, b = data
    return 0.5 * x @ a @ x - b @ x, a @ x - b
  if name == "nnls":
    a, b = data
    r = a @ x - b
    return 0.5 * r @ r, a.T @ r
  features, labels = data
  logits = features @ x
  value = np.mean(np.logaddexp(0, logits) - labels * logits) + 1e-3 * (x @ x)
  return value, features.T @ (1 / (1 + np.exp(-logits)) - labels) / len(labels) + 2e-3 * x


def _numpy_abs_terms_and_hessian(name, x, *data):
  """Float64: the sum of the magnitudes of the objective's terms (the scale of float32's rounding
  of its value) and its Hessian."""
  if name == "rosenbrock":
    return scipy.optimize.rosen(x), scipy.optimize.rosen_hess(x)
  if name == "quadratic":
    a, b = data
    return 0.5 * np.abs(x) @ np.abs(a) @ np.abs(x) + np.abs(b) @ np.abs(x), a
  if name == "nnls":
    a, b = data
    return 0.5 * np.sum((np.abs(a) @ np.abs(x) + np.abs(b)) ** 2), a.T @ a
  features, labels = data
  logits = features @ x
  terms = np.mean(np.logaddexp(0, logits) + np.abs(labels * logits)) + 1e-3 * (x @ x)
  sigma = 1 / (1 + np.exp(-logits))
  return terms, features.T @ (features * (sigma * (1 - sigma))[:, None]) / len(labels) + 2e-3 * np.eye(len(x))


def _blockwise(fn, x):
  """``fn(name, block, *data)`` for each problem's block of ``x``."""
  return [fn(name, x[OFFSETS[i]:OFFSETS[i + 1]], *PROBLEMS[name][1]) for i, name in enumerate(NAMES)]


def _numpy_value(x):
  return sum(value for value, _ in _blockwise(_numpy_value_and_grad, x))


def _float32_resolution(x_star, free):
  """What float32 resolves of the solution at scipy's ``x_star``, and so what a float32 run can
  be held to wherever it stops: ``delta``, eps32 times the sum of the magnitudes of the
  objective's terms (float32's rounding of a value is of that order, so two points whose values
  differ by less are not told apart by the line search), and for each coordinate free at
  ``x_star`` the largest distance from it within ``f(x) <= f(x_star) + delta`` on the free
  variables, ``sqrt(2 delta (H^-1)_ii)`` (H: the Hessian there, restricted to the free variables;
  the quadratic model of f)."""
  parts = _blockwise(_numpy_abs_terms_and_hessian, x_star)
  delta = float(np.finfo(np.float32).eps * sum(terms for terms, _ in parts))
  hessian = np.zeros((len(x_star), len(x_star)))
  for i, (_, h) in enumerate(parts):
    hessian[OFFSETS[i]:OFFSETS[i + 1], OFFSETS[i]:OFFSETS[i + 1]] = h
  reach = np.zeros(len(x_star))
  reach[free] = np.sqrt(2 * delta * np.diag(np.linalg.inv(hessian[np.ix_(free, free)])))
  return delta, reach


def _scipy(x0, lower, upper):
  def f(x):
    value, grad = 0.0, np.zeros_like(x)
    for i, name in enumerate(NAMES):
      block = slice(OFFSETS[i], OFFSETS[i + 1])
      v, g = _numpy_value_and_grad(name, x[block], *PROBLEMS[name][1])
      value, grad[block] = value + v, g
    return value, grad
  return scipy.optimize.minimize(f, x0, jac=True, method="L-BFGS-B", bounds=list(zip(lower, upper)),
                                 options={"gtol": 1e-10, "ftol": 0.0, "maxiter": 1000})


def _assert_within(actual, desired, atol):
  """``|actual - desired| <= atol`` elementwise (``atol`` a scalar or one per element)."""
  gap = np.abs(actual - desired)
  assert np.all(gap <= atol), f"|actual - desired| = {gap} above atol {atol}"


def _active(x, lower, upper):
  return (np.isclose(x, lower, atol=1e-7, rtol=0), np.isclose(x, upper, atol=1e-7, rtol=0))


_SOLVED = {}


def _solved():
  if not _SOLVED:
    args, x0, lower, upper = _block_inputs()
    _SOLVED["scipy"] = _scipy(x0, lower, upper)
    _SOLVED["steadax"] = steadax.minimize(
        blocks, jnp.asarray(x0, DTYPE), args=args,
        bounds=(jnp.asarray(lower, DTYPE), jnp.asarray(upper, DTYPE)), tol=TOL)
  return _SOLVED["steadax"], _SOLVED["scipy"]


@pytest.mark.parametrize("name", NAMES)
def test_agrees_with_scipy(name):
  (x, info), expected = _solved()
  _, _, lower, upper = _block_inputs()
  assert x.dtype == DTYPE and info.value.dtype == DTYPE
  x = np.asarray(x, np.float64)
  assert np.all(x >= lower) and np.all(x <= upper)
  block = slice(OFFSETS[NAMES.index(name)], OFFSETS[NAMES.index(name) + 1])
  ours = _active(x[block], lower[block], upper[block])
  theirs = _active(expected.x[block], lower[block], upper[block])
  for a, b in zip(ours, theirs):
    np.testing.assert_array_equal(a, b)
  if X64:
    assert bool(info.converged), steadax.stop_reason_message(info.reason)
    assert float(info.value) <= expected.fun + 1e-12 * abs(expected.fun)
    atol = ATOL
  else:
    # Converged, or stopped where float32 sees no decrease (two line searches in a row: the
    # precision floor); either way at most `delta` above scipy's minimum in exact arithmetic (the
    # float64 objective at the float32 solution), a value reported within its rounding, and each
    # free coordinate within the reach of that `delta` (the active ones on their bounds, above).
    assert int(info.reason) in (steadax.StopReason.CONVERGED, steadax.StopReason.LINESEARCH_FAILED), (
        steadax.stop_reason_message(info.reason))
    free = ~np.logical_or(*_active(expected.x, lower, upper))
    delta, reach = _float32_resolution(expected.x, free)
    value = _numpy_value(x)
    assert value - expected.fun <= delta, (value - expected.fun, delta)
    assert abs(float(info.value) - value) <= delta, (float(info.value), value, delta)
    atol = np.where(free, reach, ATOL)[block]
  _assert_within(x[block], expected.x[block], atol)
  assert np.sum(ours) >= {"rosenbrock": 1, "quadratic": 4, "nnls": 1, "logistic": 1}[name]
  if name == "quadratic":  # the solution sits on several lower and several upper bounds
    assert ours[0].sum() >= 2 and ours[1].sum() >= 2
  if name == "nnls":
    nnls, _ = scipy.optimize.nnls(*PROBLEMS["nnls"][1])
    _assert_within(x[block], nnls, atol)


def test_work_compares_with_scipy():
  (_, info), expected = _solved()
  # The same order of work as scipy's (the benchmarks measure it); scipy counts its evaluations
  # of f and gradient together, as we do.
  assert int(info.num_fun_evals) <= 1.5 * expected.nfev, (int(info.num_fun_evals), expected.nfev)


def test_tree_bounds_infeasible_start_and_mixed_dtypes():
  # A tree of parameters with per-leaf bounds (an array leaf, a scalar leaf, an infinite one); the
  # start is outside the box and is projected first.
  def f(p):
    return (jnp.sum((p["w"].astype(DTYPE) - 3.0) ** 2) + (p["b"].astype(DTYPE) + 2.0) ** 2
            + jnp.sum(p["free"].astype(DTYPE) ** 2))

  x0 = {"w": jnp.asarray([5.0, -5.0, 0.0], jnp.float32), "b": jnp.asarray(9.0, DTYPE),
        "free": jnp.ones(2, jnp.bfloat16)}
  lower = {"w": jnp.asarray([0.0, -1.0, 0.0]), "b": -1.0, "free": -jnp.inf}
  upper = {"w": 2.0, "b": 1.0, "free": jnp.inf}
  x, info = steadax.minimize(f, x0, bounds=(lower, upper))
  assert jax.tree.map(lambda a: a.dtype, x) == jax.tree.map(lambda a: a.dtype, x0)
  np.testing.assert_allclose(np.asarray(x["w"]), [2.0, 2.0, 2.0])
  assert float(x["b"]) == -1.0
  np.testing.assert_allclose(np.asarray(x["free"], np.float32), 0.0, atol=1e-3)
  assert bool(info.converged)


def test_bad_bounds_name_the_path():
  x0 = {"a": jnp.zeros(3), "b": jnp.zeros(2)}
  f = lambda p: jnp.sum(p["a"] ** 2) + jnp.sum(p["b"] ** 2)  # noqa: E731
  with pytest.raises(ValueError, match=r"minimize: the bounds at \['b'\] are inconsistent"):
    steadax.minimize(f, x0, bounds=({"a": 0.0, "b": jnp.asarray([0.0, 2.0])}, 1.0))
  with pytest.raises(ValueError, match=r"`upper` at \['a'\] has shape \(2,\)"):
    steadax.minimize(f, x0, bounds=(0.0, {"a": jnp.ones(2), "b": 1.0}))
  with pytest.raises(ValueError, match="`lower` must be None, a scalar, or a tree"):
    steadax.minimize(f, x0, bounds=({"a": 0.0}, 1.0))
  with pytest.raises(ValueError, match=r"lbfgsb: the bounds at \['a'\]"):
    steadax.lbfgsb(lower={"a": 1.0, "b": 0.0}, upper=0.5).init(x0)
  with pytest.raises(ValueError, match="pair"):
    steadax.minimize(f, x0, bounds=(0.0,))
