"""The dominant eigenpair by power iteration, and inverse p-th roots of positive definite matrices.

References:
  Golub & Van Loan, "Matrix Computations", 4th ed., 2013, §7.3.1 (the power method, Algorithm 7.3.1).
  Higham, "Functions of Matrices: Theory and Computation", SIAM 2008, §7.3, eq. (7.18) (the coupled
  Newton iteration for the inverse p-th root).
"""

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.typing import ArrayLike

from .._core._policy import cast, compute_dtype, hyper, key_path_str, promote_types, real_dtype
from ._common import as_matrix, concrete_number, float_dtype
from .._core._types import Params

__all__ = ["power_iteration", "matrix_inverse_pth_root"]


def _norm(leaves: list[jax.Array], rdt: Any) -> jax.Array:
  total = jnp.zeros([], rdt)
  for x in leaves:
    total = total + jnp.sum(jnp.real(x * jnp.conj(x)) if jnp.iscomplexobj(x) else x * x)
  return jnp.sqrt(total)


def _normalize(leaves: list[jax.Array], rdt: Any) -> list[jax.Array]:
  norm = _norm(leaves, rdt)
  # A zero vector stays zero (a vector in the null space has no direction to normalize).
  inv = jnp.where(norm > 0, 1 / jnp.where(norm > 0, norm, 1), 0)
  return [x * cast(inv, x.dtype) for x in leaves]


def _vdot(xs: list[jax.Array], ys: list[jax.Array], cdt: Any) -> jax.Array:
  total = jnp.zeros([], cdt)
  for x, y in zip(xs, ys):
    total = total + jnp.sum(jnp.conj(x) * y)
  return total


def _check_leaves(owner: str, name: str, tree: Any) -> None:
  for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]:
    if not hasattr(leaf, "dtype") and not isinstance(leaf, (int, float, complex)):
      raise TypeError(f"{owner}: `{name}` at {key_path_str(path)} is not an array ({type(leaf).__name__}).")


def power_iteration(
    matrix: ArrayLike | Callable[[Params], Params],
    *,
    v0: Params | None = None,
    num_iters: ArrayLike = 100,
    error_tolerance: ArrayLike = 1e-6,
    precision: lax.Precision = lax.Precision.HIGHEST,
    key: jax.Array | None = None,
) -> tuple[Any, Any]:
  """The dominant eigenvalue (largest in modulus) and its eigenvector, by power iteration.

  Starting from ``v0`` (normalized), each iteration sets ``v = A v / ||A v||``; it stops after
  ``num_iters`` iterations or once the residual ``||A v - λ v||`` falls below
  ``error_tolerance * |λ|``, where ``λ = <v, A v>`` is the Rayleigh quotient. The arithmetic runs in
  at least float32; the eigenvector has the dtype of ``v0`` (of the matrix when ``v0`` is None) and
  the eigenvalue the dtype of the matrix (of ``v0``'s leaves, promoted, for a callable).

  Args:
    matrix: a square matrix, or a callable computing the matrix-vector product of a tree.
    v0: the starting vector: a vector of size ``n`` for an ``(n, n)`` matrix, a tree shaped like the
      callable's input otherwise (required then). When None, uniform in [-1, 1] drawn with ``key``.
    num_iters: the maximum number of iterations.
    error_tolerance: the relative residual at which the iteration stops.
    precision: the precision of the matrix products (``matrix`` given as an array).
    key: the random key for ``v0`` when it is None (default ``jax.random.PRNGKey(0)``).

  Returns:
    ``(eigenvalue, eigenvector)``, the eigenvector of unit l2 norm (a zero vector when ``v0`` lies
    in the null space).

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> eigenvalue, vector = steadax.power_iteration(jnp.diag(jnp.array([1.0, -3.0, 2.0])))
    >>> print(f"{eigenvalue:.4f}")
    -3.0000

  References:
    Golub & Van Loan, "Matrix Computations", 4th ed., 2013, §7.3.1, Algorithm 7.3.1.
  """
  owner = "power_iteration"
  if callable(matrix):
    if v0 is None:
      raise ValueError(f"{owner}: `v0` is required when `matrix` is a callable (it fixes the vector's tree).")
    _check_leaves(owner, "v0", v0)
    leaves0, treedef = jax.tree_util.tree_flatten(v0)
    out_dtypes = [float_dtype(jnp.result_type(x)) for x in leaves0]
    value_dtype = promote_types(*out_dtypes) if out_dtypes else compute_dtype()
    cdt = compute_dtype(value_dtype)
    user_mvp: Callable = matrix

    def mvp(leaves):
      arg = treedef.unflatten([
          cast(jnp.real(x) if not jnp.issubdtype(d, jnp.complexfloating) else x, d)
          for x, d in zip(leaves, out_dtypes)
      ])
      out = user_mvp(arg)
      if jax.tree_util.tree_structure(out) != treedef:
        raise ValueError(
            f"{owner}: `matrix(v)` returned a tree of structure {jax.tree_util.tree_structure(out)}, "
            f"expected that of `v0`, {treedef}."
        )
      out_leaves = jax.tree_util.tree_leaves(out)
      for x, y in zip(leaves0, out_leaves):
        if np.shape(y) != np.shape(x):
          raise ValueError(f"{owner}: `matrix(v)` returned a leaf of shape {np.shape(y)}, expected {np.shape(x)}.")
      return [cast(y, cdt) for y in out_leaves]

    start = [cast(x, cdt) for x in leaves0]
  else:
    mat, value_dtype, cdt = as_matrix(owner, "matrix", matrix)
    mat = cast(mat, cdt)
    n = mat.shape[0]
    if v0 is None:
      if key is None:
        key = jax.random.PRNGKey(0)
      start = [cast(jax.random.uniform(key, (n,), real_dtype(cdt), minval=-1.0, maxval=1.0), cdt)]
      out_dtypes = [value_dtype]
    else:
      v0 = jnp.asarray(v0)
      if v0.shape != (n,):
        raise ValueError(f"{owner}: `v0` must have shape {(n,)} for a matrix of shape {mat.shape}, got {v0.shape}.")
      out_dtypes = [promote_types(value_dtype, float_dtype(v0.dtype))]
      cdt = compute_dtype(cdt, out_dtypes[0])
      mat = cast(mat, cdt)
      start = [cast(v0, cdt)]
    treedef = jax.tree_util.tree_structure(0)

    def mvp(leaves):
      return [jnp.matmul(mat, leaves[0], precision=precision)]

  rdt = real_dtype(cdt)
  tol = hyper(error_tolerance, rdt)
  max_iters = cast(num_iters, jnp.int32)

  def residual_above(v, z, eig):
    residual = _norm([zi - eig * vi for zi, vi in zip(z, v)], rdt)
    return jnp.logical_not(residual < tol * jnp.abs(eig))

  def cond(carry):
    i, v, z, eig = carry
    return jnp.logical_and(i < max_iters, residual_above(v, z, eig))

  def body(carry):
    i, _, z, _ = carry
    v = _normalize(z, rdt)
    z = mvp(v)
    return i + 1, v, z, _vdot(v, z, cdt)

  v = _normalize(start, rdt)
  carry = (jnp.zeros([], jnp.int32), v, mvp(v), jnp.zeros([], cdt))
  _, _, z, eig = lax.while_loop(cond, body, carry)
  vector = [cast(x, d) for x, d in zip(_normalize(z, rdt), out_dtypes)]
  if not jnp.issubdtype(value_dtype, jnp.complexfloating):
    eig = jnp.real(eig)
  return cast(eig, value_dtype), treedef.unflatten(vector)


def _static_power(mat: jax.Array, p: int, precision: Any) -> jax.Array:
  result = None
  base = mat
  while p:
    if p & 1:
      result = base if result is None else jnp.matmul(result, base, precision=precision)
    p >>= 1
    if p:
      base = jnp.matmul(base, base, precision=precision)
  assert result is not None  # p >= 1: the loop multiplied at least once
  return result


def _dynamic_power(mat: jax.Array, p: jax.Array, precision: Any) -> jax.Array:
  def body(carry):
    result, base, e = carry
    result = jnp.where(e % 2 == 1, jnp.matmul(result, base, precision=precision), result)
    return result, jnp.matmul(base, base, precision=precision), e // 2

  eye = jnp.eye(mat.shape[0], dtype=mat.dtype)
  return lax.while_loop(lambda c: c[2] > 0, body, (eye, mat, p))[0]


def matrix_inverse_pth_root(
    matrix: ArrayLike,
    p: ArrayLike,
    num_iters: ArrayLike = 100,
    ridge_epsilon: ArrayLike = 1e-6,
    error_tolerance: ArrayLike = 1e-6,
    precision: lax.Precision = lax.Precision.HIGHEST,
) -> tuple[jax.Array, jax.Array]:
  """``matrix ** (-1/p)`` of a symmetric positive semi-definite matrix, by coupled Newton iterations.

  The matrix is first damped by ``ridge_epsilon`` times its largest eigenvalue (from
  ``power_iteration``). The iteration keeps ``M_k = H_k^p A`` and drives ``M_k`` to the identity, so
  ``H_k`` tends to ``A^(-1/p)``; it stops after ``num_iters`` iterations, once
  ``max |M_k - I| <= error_tolerance``, or when the error grows by more than 20% (it then returns the
  previous iterate). Arithmetic runs in at least float32 (float64 for a float64 matrix); the root
  has the matrix's dtype.

  Args:
    matrix: a symmetric (Hermitian) positive semi-definite ``(n, n)`` matrix.
    p: the root, a positive integer (any, not only a power of two; it may be traced).
    num_iters: the maximum number of iterations.
    ridge_epsilon: the relative damping added to the diagonal.
    error_tolerance: the target of ``max |M_k - I|``.
    precision: the precision of the matrix products.

  Returns:
    ``(root, error)``: the inverse p-th root in the matrix's dtype, and the final
    ``max |M_k - I|`` in the matrix's real dtype.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> root, error = steadax.matrix_inverse_pth_root(jnp.diag(jnp.array([4.0, 16.0])), 2)
    >>> print(jnp.round(jnp.diag(root), 3))
    [0.5  0.25]

  References:
    Higham, "Functions of Matrices: Theory and Computation", SIAM 2008, §7.3, eq. (7.18).
  """
  owner = "matrix_inverse_pth_root"
  mat, out_dtype, cdt = as_matrix(owner, "matrix", matrix)
  rdt = real_dtype(cdt)
  p_value = concrete_number(p)
  if isinstance(p, bool) or (p_value is not None and (
      isinstance(p_value, complex) or p_value < 1 or p_value != int(p_value))):
    raise ValueError(f"{owner}: `p` must be a positive integer, got {p!r}.")
  if p_value is not None:
    p_value = int(p_value)
  mat = cast(mat, cdt)
  n = mat.shape[0]
  if n == 0:
    return jnp.zeros((0, 0), out_dtype), jnp.zeros([], real_dtype(out_dtype))
  p_real = hyper(p_value if p_value is not None else p, rdt)
  p_c = cast(p_real, cdt)
  max_ev, _ = power_iteration(mat, num_iters=100, error_tolerance=1e-6, precision=precision)
  ridge = hyper(ridge_epsilon, rdt) * jnp.maximum(cast(jnp.real(max_ev), rdt), np.asarray(1e-16, rdt))
  eye = jnp.eye(n, dtype=cdt)
  if n == 1:
    root = (mat + cast(ridge, cdt)) ** (-1 / p_c)
    return cast(root, out_dtype), jnp.zeros([], real_dtype(out_dtype))

  def power(t):
    if p_value is not None:
      return _static_power(t, p_value, precision)
    return _dynamic_power(t, cast(p, jnp.int32), precision)

  def error_of(m):
    return cast(jnp.max(jnp.abs(m - eye)), rdt)

  damped = mat + cast(ridge, cdt) * eye
  # The scaling puts the spectrum of M_0 in (0, (p + 1) / 2], inside the region of convergence.
  z = (1 + p_real) / (2 * jnp.sqrt(jnp.sum(jnp.abs(damped) ** 2)))
  m0 = damped * cast(z, cdt)
  h0 = eye * cast(z ** (1 / p_real), cdt)
  tol = hyper(error_tolerance, rdt)
  max_iters = cast(num_iters, jnp.int32)

  def cond(carry):
    i, _, _, _, error, improving = carry
    return jnp.logical_and(i < max_iters, jnp.logical_and(error > tol, improving))

  def body(carry):
    i, m, h, _, error, _ = carry
    t = ((1 + p_c) * eye - m) / p_c
    m_new = jnp.matmul(power(t), m, precision=precision)
    h_new = jnp.matmul(h, t, precision=precision)
    error_new = error_of(m_new)
    # The error may rise for a step before it falls; a rise of more than 20% means divergence.
    return i + 1, m_new, h_new, h, error_new, error_new < error * np.asarray(1.2, rdt)

  carry = (jnp.zeros([], jnp.int32), m0, h0, h0, error_of(m0), jnp.asarray(True))
  _, m, h, h_prev, _, improving = lax.while_loop(cond, body, carry)
  root = jnp.where(improving, h, h_prev)
  return cast(root, out_dtype), cast(error_of(m), real_dtype(out_dtype))
