"""scale_by_lbfgs and lbfgs: the two-loop recursion against the explicit BFGS matrix, convergence
against scipy's L-BFGS-B, complex parameters, agreement with Optax, and where steadax differs."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
import scipy.optimize

import steadax
from steadax._optimizers._lbfgs import _two_loop

from ._problems import DTYPE, RTOL, X64, logistic, quadratic, rosenbrock, start


def _run(module, opt, f, w, steps):
  """``steps`` jitted L-BFGS iterations: the params and the curvature weights after each."""
  def body(carry, _):
    w, state = carry
    value, grad = jax.value_and_grad(f)(w)
    updates, state = opt.update(grad, state, w, value=value, grad=grad, value_fn=f)
    w = module.apply_updates(w, updates)
    return (w, state), (w, state[0].weights_memory)

  _, (path, weights) = jax.jit(lambda w: jax.lax.scan(body, (w, opt.init(w)), None, length=steps))(w)
  return path, weights


def _explicit_inverse_hessian(state, memory_size):
  """H_k from the state's pairs by the BFGS recursion of Nocedal & Wright, Eq. 7.19 (dense)."""
  count = int(state.count)  # after the update
  s_mem = np.asarray(state.diff_params_memory, np.float64)
  y_mem = np.asarray(state.diff_updates_memory, np.float64)
  rho = np.asarray(state.weights_memory, np.float64)
  newest = (count - 2) % memory_size
  order = [(count - 1 + j) % memory_size for j in range(memory_size)]  # oldest -> newest
  s, y = s_mem[newest], y_mem[newest]
  h = np.eye(s_mem.shape[1]) * (s @ y / (y @ y))
  for i in order:
    v = np.eye(len(h)) - rho[i] * np.outer(y_mem[i], s_mem[i])
    h = v.T @ h @ v + rho[i] * np.outer(s_mem[i], s_mem[i])
  return h


@pytest.mark.parametrize("steps", [2, 6])  # memory partly filled; memory wrapped around
def test_two_loop_recursion_equals_the_explicit_bfgs_inverse_hessian(steps):
  memory_size = 3
  opt = steadax.lbfgs(memory_size=memory_size)
  path, _ = _run(steadax, opt, logistic, start([0.5, 0.5, -0.5]), steps)
  lbfgs = steadax.scale_by_lbfgs(memory_size)
  # Feed the points of an L-BFGS run (steps - 1 pairs), then precondition the last gradient.
  state = lbfgs.init(path[0])
  update = jax.jit(lambda point, state: lbfgs.update(jax.grad(logistic)(point), state, point))
  for point in path:
    direction, state = update(point, state)
  h = _explicit_inverse_hessian(state, memory_size)
  g = np.asarray(jax.grad(logistic)(path[-1]), np.float64)
  tol = {"rtol": 1e-9 if X64 else 2e-4, "atol": 1e-7}
  np.testing.assert_allclose(np.asarray(direction, np.float64), h @ g, **tol)
  # The secant condition H_k y = s for the newest pair.
  newest = (int(state.count) - 2) % memory_size
  s_new, y_new = state.diff_params_memory[newest], state.diff_updates_memory[newest]
  sy = jnp.vdot(s_new, y_new)
  gamma = (sy / jnp.vdot(y_new, y_new)).astype(DTYPE)
  oldest = int(state.count - 1) % memory_size
  hy = _two_loop(y_new, state.diff_params_memory, state.diff_updates_memory, state.weights_memory,
                 gamma, jnp.asarray(oldest, jnp.int32), DTYPE)
  np.testing.assert_allclose(np.asarray(hy), np.asarray(s_new), **tol)


def _solve(f, x0, tol, max_steps=200):
  """Our lbfgs until |grad| < tol, reusing the line search's value and gradient."""
  opt = steadax.lbfgs()
  value_and_grad = steadax.value_and_grad_from_state(f)

  def keep_going(carry):
    _, _, k, grad_norm = carry
    return (grad_norm >= tol) & (k < max_steps)

  def step(carry):
    w, state, k, _ = carry
    value, grad = value_and_grad(w, state=state)
    updates, state = opt.update(grad, state, w, value=value, grad=grad, value_fn=f)
    w = steadax.apply_updates(w, updates)
    return w, state, k + 1, jnp.linalg.norm(state[-1].grad)

  w = start(x0)
  init = (w, opt.init(w), jnp.asarray(0, jnp.int32), jnp.asarray(jnp.inf, DTYPE))
  w, _, k, _ = jax.jit(lambda c: jax.lax.while_loop(keep_going, step, c))(init)
  return np.asarray(w, np.float64), int(k)


@pytest.mark.parametrize("name,f,x0", [("rosenbrock", rosenbrock, [-1.2, 1.0]),
                                       ("quadratic", quadratic, [1.0, 1.0, -1.0, 0.5]),
                                       ("logistic", logistic, [0.5, 0.5, -0.5])])
def test_converges_like_scipy_lbfgsb(name, f, x0):
  def fun(x):
    value, grad = jax.value_and_grad(f)(jnp.asarray(x, jnp.float64 if X64 else jnp.float32))
    return float(value), np.asarray(grad, np.float64)

  ref = scipy.optimize.minimize(fun, np.asarray(x0, np.float64), jac=True, method="L-BFGS-B",
                                options={"gtol": 1e-9, "ftol": 1e-15, "maxiter": 500})
  w, iterations = _solve(f, x0, tol=1e-7 if X64 else 1e-4)
  np.testing.assert_allclose(w, ref.x, atol=1e-5 if X64 else 2e-3)
  assert iterations <= 1.5 * ref.nit + 5, (iterations, ref.nit)


# Complex least squares: min |A z - b|^2 over z in C^2, and the same problem over (Re z, Im z).
_A = np.array([[1 + 1j, -2], [3, 4 - 1j], [-4 + 2j, 5 - 3j], [-2 - 2j, 6j]])
_B = np.array([1 - 1j, 2j, -1, 0.5 + 0.5j])
CDTYPE = jnp.complex128 if X64 else jnp.complex64


def _complex_loss(z):
  r = jnp.asarray(_A, z.dtype) @ z - jnp.asarray(_B, z.dtype)
  return jnp.sum(jnp.real(r * jnp.conj(r)))


def _real_loss(x):
  return _complex_loss(jax.lax.complex(x[0], x[1]))


@pytest.mark.parametrize("linesearch", ["zoom", "backtracking"])
def test_complex_least_squares_matches_the_real_problem_and_lstsq(linesearch):
  def make(module):
    ls = (module.scale_by_zoom_linesearch(20, initial_guess_strategy="one") if linesearch == "zoom"
          else module.scale_by_backtracking_linesearch(20))
    return module.lbfgs(linesearch=ls)

  def run(f, w, conj):
    opt = make(steadax)

    def body(carry, _):
      w, state = carry
      value, grad = jax.value_and_grad(f)(w)
      grad = jnp.conj(grad) if conj else grad  # the descent convention for complex parameters
      updates, state = opt.update(grad, state, w, value=value, grad=grad, value_fn=f)
      return (steadax.apply_updates(w, updates), state), w

    return jax.jit(lambda w: jax.lax.scan(body, (w, opt.init(w)), None, length=12))(w)

  z0 = jnp.asarray([1 - 1j, 1j], CDTYPE)
  (z, state), z_path = run(_complex_loss, z0, conj=True)
  (x, _), x_path = run(_real_loss, jnp.stack([jnp.real(z0), jnp.imag(z0)]), conj=False)
  # Every inner product is a real one, so both runs take the same steps.
  x_as_z = np.asarray(x_path[:, 0]) + 1j * np.asarray(x_path[:, 1])
  np.testing.assert_allclose(np.asarray(z_path), x_as_z, rtol=0, atol=1e-8 if X64 else 1e-4)
  solution = np.linalg.lstsq(_A, _B, rcond=None)[0]
  np.testing.assert_allclose(np.asarray(z), solution, atol=1e-8 if X64 else 1e-4)
  assert state[0].weights_memory.dtype == (jnp.float64 if X64 else jnp.float32)
  assert state[0].diff_params_memory.dtype == CDTYPE
  if linesearch == "zoom":  # after one step: the stored value and gradient are JAX's at the new z
    opt = make(steadax)
    value, grad = jax.value_and_grad(_complex_loss)(z0)
    updates, state = opt.update(jnp.conj(grad), opt.init(z0), z0, value=value, grad=jnp.conj(grad),
                                value_fn=_complex_loss)
    z1 = z0 + updates
    new_value, new_grad = jax.value_and_grad(_complex_loss)(z1)
    assert float(new_value) < 0.5 * float(value)
    np.testing.assert_allclose(float(state[-1].value), float(new_value), rtol=RTOL)
    np.testing.assert_allclose(np.asarray(state[-1].grad), np.asarray(new_grad), rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("name,f,x0,kwargs", [
    ("logistic", logistic, [0.5, 0.5, -0.5], {}),
    ("logistic_memory2_unscaled", logistic, [0.5, 0.5, -0.5], {"memory_size": 2, "scale_init_precond": False}),
    ("rosenbrock", rosenbrock, [-1.2, 1.0], {}),
], ids=["logistic", "logistic_memory2_unscaled", "rosenbrock"])
def test_iterates_agree_with_optax(name, f, x0, kwargs):
  steps = 12
  ours, _ = _run(steadax, steadax.lbfgs(**kwargs), f, start(x0), steps)
  with jax.numpy_dtype_promotion("standard"):
    theirs, _ = _run(optax, optax.lbfgs(**kwargs), f, start(x0), steps)
  np.testing.assert_allclose(np.asarray(ours), np.asarray(theirs), rtol=1e-8 if X64 else 1e-4,
                             atol=1e-8 if X64 else 1e-5)


def test_mixed_precision_updates_follow_params_where_optax_returns_float32():
  params = {"w": jnp.full(3, 2.0, jnp.float32), "b": jnp.full(2, -1.0, jnp.bfloat16)}

  def f(p):
    return jnp.sum((p["w"] - 1.0) ** 2) + jnp.sum((p["b"].astype(jnp.float32) - 0.5) ** 2)

  value, grad = jax.value_and_grad(f)(params)

  def step(module):
    opt = module.lbfgs()
    return jax.jit(lambda p: opt.update(grad, opt.init(p), p, value=value, grad=grad, value_fn=f))

  updates, state = step(steadax)(params)
  assert updates["b"].dtype == jnp.bfloat16 and updates["w"].dtype == jnp.float32
  assert state[0].weights_memory.dtype == jnp.float32  # the widest parameter dtype
  assert state[0].diff_params_memory["b"].dtype == jnp.bfloat16
  with jax.numpy_dtype_promotion("standard"):
    ref_updates, _ = step(optax)(params)
  assert ref_updates["b"].dtype == jnp.float32  # Optax 0.2.8: the wrong dtype for a bfloat16 leaf


def test_pairs_of_any_curvature_are_kept_as_in_optax():
  # Himmelblau from (1, 1) with a fixed step and no line search gives pairs with Re<s, y> < 0.
  # Skipping them (the former rule, Nocedal & Wright Sec. 6.1) ended at (234, 179); Optax and the
  # plain two-loop recursion keep them and stay near (1.03, 0.99) (Optax's alias_test compares
  # lbfgs with exactly that recursion).
  def himmelblau(w):
    return (w[0] ** 2 + w[1] - 11.0) ** 2 + (w[0] + w[1] ** 2 - 7.0) ** 2

  def run(module):
    opt = module.lbfgs(learning_rate=1e-3, memory_size=5, scale_init_precond=False, linesearch=None)
    return _run(module, opt, himmelblau, start([1.0, 1.0]), 15)

  ours, weights_ours = run(steadax)
  with jax.numpy_dtype_promotion("standard"):
    theirs, weights_theirs = run(optax)
  assert float(jnp.min(weights_ours[-1])) < 0  # negative-curvature pairs are in the memory
  np.testing.assert_allclose(np.asarray(ours), np.asarray(theirs), rtol=1e-4, atol=1e-5)
  np.testing.assert_allclose(np.asarray(ours[-1]), [1.028, 0.992], atol=1e-2)


def test_errors_name_the_argument():
  with pytest.raises(ValueError, match="scale_by_lbfgs: memory_size"):
    steadax.scale_by_lbfgs(0)
  w = jnp.ones(2, DTYPE)
  tx = steadax.scale_by_lbfgs()
  with pytest.raises(TypeError, match="scale_by_lbfgs.*`params`"):
    tx.update(w, tx.init(w), None)
  opt = steadax.lbfgs()
  with pytest.raises(TypeError, match="scale_by_zoom_linesearch.*`value_fn`"):
    opt.update(w, opt.init(w), w, value=jnp.sum(w), grad=w)


def test_learning_rate_without_line_search_scales_the_direction():
  w = jnp.asarray([3.0, 4.0], DTYPE)
  grad = jax.grad(lambda w: 0.5 * jnp.sum(w**2))(w)  # |grad| = 5
  opt = steadax.lbfgs(learning_rate=0.5, linesearch=None)
  updates, state = opt.update(grad, opt.init(w), w)
  # First step: H_0 = min(1, 1/|g|) I, then -learning_rate.
  np.testing.assert_allclose(np.asarray(updates), -0.5 * np.asarray(grad) / 5.0, rtol=RTOL)
  assert len(state) == 3 and int(state[0].count) == 1
