"""power_iteration and matrix_inverse_pth_root: against Optax, against numpy's eigensolver, dtypes,
jit, and argument errors."""

from __future__ import annotations

import contextlib

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import steadax

X64 = bool(jax.config.jax_enable_x64)


@contextlib.contextmanager
def optax_rules():
  with jax.numpy_dtype_promotion("standard"), jax.numpy_rank_promotion("allow"):
    yield


def spd(n, seed, dtype=np.float32, condition=None):
  rng = np.random.default_rng(seed)
  q, _ = np.linalg.qr(rng.normal(size=(n, n)))
  eigenvalues = rng.uniform(0.5, 5.0, size=n) if condition is None else np.geomspace(1.0, condition, n)
  return ((q * eigenvalues) @ q.T).astype(dtype), eigenvalues


MATRIX, EIGENVALUES = spd(6, 0)


def test_power_iteration_agrees_with_optax():
  for kwargs in ({}, {"num_iters": 3, "error_tolerance": 0.0}, {"key": jax.random.PRNGKey(7)},
                 {"v0": jnp.arange(1.0, 7.0)}):
    ours = steadax.power_iteration(MATRIX, **kwargs)
    with optax_rules():
      theirs = optax.power_iteration(jnp.asarray(MATRIX), **kwargs)
    np.testing.assert_allclose(float(ours[0]), float(theirs[0]), rtol=1e-5)
    np.testing.assert_allclose(np.asarray(ours[1]), np.asarray(theirs[1]), atol=1e-5)


def test_power_iteration_finds_the_dominant_eigenpair():
  value, vector = steadax.power_iteration(MATRIX, num_iters=1000, error_tolerance=1e-7)
  reference = np.linalg.eigh(MATRIX.astype(np.float64))
  np.testing.assert_allclose(float(value), reference.eigenvalues[-1], rtol=1e-5)
  np.testing.assert_allclose(abs(np.dot(np.asarray(vector, np.float64), reference.eigenvectors[:, -1])), 1.0,
                             rtol=1e-4)
  np.testing.assert_allclose(float(jnp.linalg.norm(vector)), 1.0, rtol=1e-6)
  # The largest eigenvalue in modulus is found even when it is negative.
  value, _ = steadax.power_iteration(jnp.diag(jnp.array([1.0, -4.0, 2.0])), num_iters=500)
  np.testing.assert_allclose(float(value), -4.0, rtol=1e-5)


def test_power_iteration_with_a_callable_on_a_tree():
  blocks = {"a": jnp.asarray(MATRIX[:3, :3]), "b": jnp.array([7.0, 0.5], jnp.float32)}

  def mvp(v):
    return {"a": blocks["a"] @ v["a"], "b": blocks["b"].astype(v["b"].dtype) * v["b"]}

  v0 = {"a": jnp.ones(3, jnp.float32), "b": jnp.ones(2, jnp.bfloat16)}
  value, vector = steadax.power_iteration(mvp, v0=v0, num_iters=500)
  np.testing.assert_allclose(float(value), 7.0, rtol=1e-2)
  assert vector["b"].dtype == jnp.bfloat16 and vector["a"].dtype == jnp.float32
  np.testing.assert_allclose(abs(float(vector["b"][0])), 1.0, atol=1e-2)
  with optax_rules():
    theirs = optax.power_iteration(mvp, v0={"a": jnp.ones(3, jnp.float32), "b": jnp.ones(2, jnp.float32)}, num_iters=500)
  np.testing.assert_allclose(float(value), float(theirs[0]), rtol=1e-2)


def test_power_iteration_dtypes_and_jit():
  low = jnp.asarray(MATRIX, jnp.bfloat16)
  value, vector = steadax.power_iteration(low)
  assert value.dtype == jnp.bfloat16 and vector.dtype == jnp.bfloat16
  np.testing.assert_allclose(float(value), EIGENVALUES.max(), rtol=2e-2)
  value, vector = jax.jit(lambda m, n: steadax.power_iteration(m, num_iters=n))(MATRIX, 200)
  np.testing.assert_allclose(float(value), EIGENVALUES.max(), rtol=1e-4)
  if X64:
    value, _ = steadax.power_iteration(MATRIX.astype(np.float64), num_iters=2000, error_tolerance=1e-12)
    assert value.dtype == jnp.float64
    np.testing.assert_allclose(float(value), np.linalg.eigvalsh(MATRIX.astype(np.float64))[-1], rtol=1e-10)


def test_power_iteration_of_a_hermitian_matrix():
  rng = np.random.default_rng(1)
  b = rng.normal(size=(4, 4)) + 1j * rng.normal(size=(4, 4))
  h = (b @ b.conj().T).astype(np.complex64)
  value, vector = steadax.power_iteration(h, num_iters=2000, error_tolerance=1e-7)
  assert value.dtype == jnp.complex64
  np.testing.assert_allclose(float(value.real), np.linalg.eigvalsh(h.astype(np.complex128))[-1], rtol=1e-4)
  np.testing.assert_allclose(np.asarray(h @ vector), np.asarray(value * vector), atol=1e-3 * float(value.real))


def test_power_iteration_of_a_null_vector_is_finite():
  value, vector = steadax.power_iteration(jnp.diag(jnp.array([0.0, 1.0])), v0=jnp.array([1.0, 0.0]))
  assert float(value) == 0.0 and np.all(np.isfinite(np.asarray(vector)))


@pytest.mark.parametrize("p", [1, 2, 3, 4, 5, 8])
def test_inverse_pth_root_inverts(p):
  root, error = steadax.matrix_inverse_pth_root(MATRIX, p)
  root64 = np.asarray(root, np.float64)
  reference = np.linalg.eigh(MATRIX.astype(np.float64))
  expected = (reference.eigenvectors * reference.eigenvalues ** (-1.0 / p)) @ reference.eigenvectors.T
  np.testing.assert_allclose(root64, expected, atol=1e-4)
  # root^p A = I (up to the 1e-6 relative ridge), and the root is symmetric.
  np.testing.assert_allclose(np.linalg.matrix_power(root64, p) @ MATRIX, np.eye(6), atol=1e-4)
  np.testing.assert_allclose(root64, root64.T, atol=1e-5)
  assert float(error) < 1e-5 and error.dtype == jnp.float32


@pytest.mark.parametrize("p", [1, 2, 4, 8])
def test_inverse_pth_root_agrees_with_optax(p):
  ours = steadax.matrix_inverse_pth_root(MATRIX, p)
  with optax_rules():
    theirs = optax.matrix_inverse_pth_root(jnp.asarray(MATRIX), p)
  np.testing.assert_allclose(np.asarray(ours[0]), np.asarray(theirs[0]), rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(float(ours[1]), float(theirs[1]), atol=1e-6)


def test_inverse_pth_root_traced_p_scalar_matrix_and_dtypes():
  traced = jax.jit(steadax.matrix_inverse_pth_root)(MATRIX, 3)
  np.testing.assert_allclose(np.asarray(traced[0]), np.asarray(steadax.matrix_inverse_pth_root(MATRIX, 3)[0]),
                             rtol=1e-5, atol=1e-6)
  one, error = steadax.matrix_inverse_pth_root(jnp.array([[16.0]], jnp.float32), 4)
  np.testing.assert_allclose(float(one[0, 0]), 0.5, rtol=1e-5)
  assert error.dtype == jnp.float32 and float(error) == 0.0
  low, low_error = steadax.matrix_inverse_pth_root(jnp.asarray(MATRIX, jnp.bfloat16), 2)
  assert low.dtype == jnp.bfloat16 and low_error.dtype == jnp.bfloat16
  np.testing.assert_allclose(np.asarray(low, np.float32),
                             np.asarray(steadax.matrix_inverse_pth_root(MATRIX, 2)[0]), atol=2e-2)
  empty, _ = steadax.matrix_inverse_pth_root(jnp.zeros((0, 0)), 2)
  assert empty.shape == (0, 0)


def test_inverse_pth_root_float64_is_more_accurate():
  if not X64:
    pytest.skip("float64 matrices need JAX_ENABLE_X64=1 (the suite runs both modes)")
  matrix, _ = spd(6, 2, np.float64, condition=1e4)
  root, error = steadax.matrix_inverse_pth_root(matrix, 2, ridge_epsilon=0.0, error_tolerance=1e-12)
  assert root.dtype == jnp.float64
  np.testing.assert_allclose(np.asarray(root) @ np.asarray(root) @ matrix, np.eye(6), atol=1e-8)


@pytest.mark.parametrize("call, error, match", [
    (lambda: steadax.power_iteration(jnp.ones((2, 3))), ValueError, r"power_iteration: `matrix` must be a square matrix, got shape \(2, 3\)"),
    (lambda: steadax.power_iteration(lambda v: v), ValueError, "power_iteration: `v0` is required"),
    (lambda: steadax.power_iteration(MATRIX, v0=jnp.ones(3)), ValueError, r"power_iteration: `v0` must have shape \(6,\)"),
    (lambda: steadax.power_iteration(lambda v: {"x": v}, v0=jnp.ones(2)), ValueError, r"power_iteration: `matrix\(v\)` returned a tree"),
    (lambda: steadax.matrix_inverse_pth_root(MATRIX, 0), ValueError, "matrix_inverse_pth_root: `p` must be a positive integer"),
    (lambda: steadax.matrix_inverse_pth_root(MATRIX, 2.5), ValueError, "matrix_inverse_pth_root: `p` must be a positive integer"),
    (lambda: steadax.matrix_inverse_pth_root(MATRIX, True), ValueError, "matrix_inverse_pth_root: `p` must be a positive integer"),
    (lambda: steadax.matrix_inverse_pth_root(jnp.ones(3), 2), ValueError, "matrix_inverse_pth_root: `matrix` must be a square matrix"),
])
def test_bad_arguments(call, error, match):
  with pytest.raises(error, match=match):
    call()
