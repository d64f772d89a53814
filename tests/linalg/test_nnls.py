"""nnls: the KKT conditions against scipy.optimize.nnls, Optax agreement, dtypes, jit, errors."""

from __future__ import annotations

import contextlib

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
import scipy.optimize

import steadax


@contextlib.contextmanager
def optax_rules():
  with jax.numpy_dtype_promotion("standard"), jax.numpy_rank_promotion("allow"):
    yield


def problem(seed, m=8, n=5, k=None):
  rng = np.random.default_rng(seed)
  a = rng.normal(size=(m, n)).astype(np.float32)
  b = rng.normal(size=(m,) if k is None else (m, k)).astype(np.float32)
  return a, b


def check_kkt(a, b, x, tol):
  """x >= 0, gradient g = A^T (A x - b) >= 0, and x_i g_i = 0 (complementary slackness)."""
  a, b, x = (np.asarray(t, np.float64) for t in (a, b, x))
  g = a.T @ (a @ x - b)
  assert np.all(x >= 0)
  assert np.all(g >= -tol), g
  np.testing.assert_allclose(x * g, 0.0, atol=tol)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_solution_satisfies_kkt_and_matches_scipy(seed):
  a, b = problem(seed)
  x = steadax.nnls(a, b, 3000)
  check_kkt(a, b, x, 1e-4)
  reference, _ = scipy.optimize.nnls(a.astype(np.float64), b.astype(np.float64))
  np.testing.assert_allclose(np.asarray(x, np.float64), reference, atol=1e-4)


def test_several_right_hand_sides_are_solved_independently():
  a, b = problem(3, k=3)
  x = steadax.nnls(a, b, 3000)
  assert x.shape == (5, 3)
  for j in range(3):
    reference, _ = scipy.optimize.nnls(a.astype(np.float64), b[:, j].astype(np.float64))
    np.testing.assert_allclose(np.asarray(x[:, j], np.float64), reference, atol=1e-4)
    check_kkt(a, b[:, j], x[:, j], 1e-4)


@pytest.mark.parametrize("iters", [0, 1, 2, 5, 50])
def test_every_iterate_agrees_with_optax(iters):
  a, b = problem(4)
  ours = steadax.nnls(a, b, iters)
  with optax_rules():
    theirs = optax.nnls(jnp.asarray(a), jnp.asarray(b), iters)
  np.testing.assert_allclose(np.asarray(ours), np.asarray(theirs), rtol=1e-5, atol=1e-6)
  bound = 4 * float(jnp.linalg.norm(jnp.asarray(a), 2) ** 2)
  ours = steadax.nnls(a, b, iters, unroll=2, L=bound)
  with optax_rules():
    theirs = optax.nnls(jnp.asarray(a), jnp.asarray(b), iters, unroll=2, L=bound)
  np.testing.assert_allclose(np.asarray(ours), np.asarray(theirs), rtol=1e-5, atol=1e-6)


def test_dtypes_jit_and_degenerate_shapes():
  a, b = problem(5)
  low = steadax.nnls(jnp.asarray(a, jnp.bfloat16), jnp.asarray(b, jnp.bfloat16), 500)
  assert low.dtype == jnp.bfloat16
  np.testing.assert_allclose(np.asarray(low, np.float32), np.asarray(steadax.nnls(a, b, 500)), atol=3e-2)
  jitted = jax.jit(steadax.nnls, static_argnums=(2,))(a, b, 100)
  np.testing.assert_allclose(np.asarray(jitted), np.asarray(steadax.nnls(a, b, 100)), rtol=1e-6, atol=1e-7)
  assert steadax.nnls(np.zeros((3, 0), np.float32), np.ones(3, np.float32), 10).shape == (0,)
  np.testing.assert_array_equal(steadax.nnls(np.zeros((3, 2), np.float32), np.ones(3, np.float32), 10), 0.0)


@pytest.mark.parametrize("call, error, match", [
    (lambda: steadax.nnls(np.ones(3), np.ones(3), 10), ValueError, r"nnls: `A` must be a matrix \(2-D\)"),
    (lambda: steadax.nnls(np.ones((3, 2)), np.ones(4), 10), ValueError, r"nnls: `b` must have shape \(3,\)"),
    (lambda: steadax.nnls(np.ones((3, 2)), np.ones(3), -1), ValueError, "nnls: `iters` must be a non-negative"),
    (lambda: steadax.nnls(np.ones((3, 2)), np.ones(3), 2.5), ValueError, "nnls: `iters` must be a non-negative"),
    (lambda: steadax.nnls(np.ones((3, 2)), np.ones(3) * 1j, 2), TypeError, "nnls: `A` and `b` must be real"),
    (lambda: steadax.nnls(np.ones((3, 2)), np.ones(3), 2, unroll=1.5), TypeError, "nnls: `unroll` must be"),
])
def test_bad_arguments(call, error, match):
  with pytest.raises(error, match=match):
    call()
