"""Non-negative least squares by the fast projected gradient method.

References:
  Polyak, "Projected gradient method for non-negative least square", Contemporary Mathematics 636,
  2015 (the fast projected gradient method, §4).
  Beck & Teboulle, "A Fast Iterative Shrinkage-Thresholding Algorithm for Linear Inverse Problems",
  SIAM J. Imaging Sciences 2(1), 2009, eq. (4.1)-(4.3) (the momentum sequence).
"""

import operator
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.typing import ArrayLike

from .._core._policy import cast, compute_dtype, hyper, promote_types
from ._common import as_matrix, float_dtype

__all__ = ["nnls"]


def _spectral_bound(q: jax.Array) -> jax.Array:
  """An upper bound of the spectral radius of ``q``: the smaller of its Frobenius and 1-norms."""
  if q.size == 0:
    return jnp.zeros([], q.dtype)
  frobenius = jnp.sqrt(jnp.sum(q * q))
  one_norm = jnp.max(jnp.sum(jnp.abs(q), axis=0))
  return jnp.minimum(frobenius, one_norm)


def nnls(A: jax.Array, b: jax.Array, iters: int, unroll: int | bool = 1, L: ArrayLike | None = None) -> jax.Array:  # noqa: N803
  r"""Solves :math:`\min_x \|A x - b\|_2` subject to :math:`x \ge 0`.

  Runs ``iters`` steps of the fast projected gradient method (projected gradient steps of size
  ``1 / L`` on ``x^T A^T A x / 2 - b^T A x`` with Nesterov momentum) from ``x = 0``. The momentum
  sequence starts as Optax's does, so ``iters`` means the same number of steps in both (its first
  momentum coefficient is -1, which makes the second iterate repeat the first). The arithmetic runs
  in at least float32 with the highest matrix-product precision; the solution has the promoted
  dtype of ``A`` and ``b``.

  Args:
    A: the ``(M, N)`` matrix.
    b: the ``(M,)`` vector, or an ``(M, K)`` matrix of ``K`` right-hand sides solved together.
    iters: the number of iterations (a non-negative Python int).
    unroll: the ``unroll`` argument of the ``lax.scan`` over iterations.
    L: an upper bound of the largest eigenvalue of ``A^T A`` (the step is ``1 / L``); by default
      the smaller of the Frobenius and 1-norms of ``A^T A``.

  Returns:
    The solution, of shape ``(N,)`` or ``(N, K)``.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> x = steadax.nnls(jnp.array([[1.0, 2.0], [3.0, 4.0]]), jnp.array([5.0, 6.0]), 1000)
    >>> print(jnp.round(x, 2))
    [0.  1.7]

  References:
    Polyak, "Projected gradient method for non-negative least square", Contemporary Mathematics
    636, 2015, §4.
  """
  owner = "nnls"
  a, a_dtype, _ = as_matrix(owner, "A", A, square=False)
  if callable(b) or b is None:
    raise TypeError(f"{owner}: `b` must be an array, got {type(b).__name__}.")
  b = jnp.asarray(b)
  if b.ndim not in (1, 2) or b.shape[0] != a.shape[0]:
    raise ValueError(
        f"{owner}: `b` must have shape ({a.shape[0]},) or ({a.shape[0]}, K) for `A` of shape "
        f"{a.shape}, got {b.shape}."
    )
  out_dtype = promote_types(a_dtype, float_dtype(b.dtype))
  if jnp.issubdtype(out_dtype, jnp.complexfloating):
    raise TypeError(f"{owner}: `A` and `b` must be real; got dtype {out_dtype.name}.")
  if isinstance(iters, bool) or not isinstance(iters, (int, np.integer)) or iters < 0:
    raise ValueError(f"{owner}: `iters` must be a non-negative Python int, got {iters!r}.")
  try:
    operator.index(unroll)
  except TypeError:
    raise TypeError(f"{owner}: `unroll` must be an int or a bool, got {unroll!r}.") from None
  cdt = compute_dtype(out_dtype)
  a = cast(a, cdt)
  b = cast(b, cdt)
  highest = lax.Precision.HIGHEST
  q_mat = jnp.matmul(a.T, a, precision=highest)
  q_vec = jnp.matmul(a.T, b, precision=highest)
  step_bound = _spectral_bound(q_mat) if L is None else jnp.asarray(hyper(L, cdt))
  step_bound = jnp.where(step_bound == 0, jnp.ones_like(step_bound), step_bound)

  def step(carry, _):
    x, y, t = carry
    t_next = (1 + jnp.sqrt(1 + 4 * t * t)) / 2
    x_next = jnp.maximum(y - (jnp.matmul(q_mat, y, precision=highest) - q_vec) / step_bound, 0)
    y_next = x_next + ((t - 1) / t_next) * (x_next - x)
    return (x_next, y_next, t_next), None

  x0 = jnp.zeros((a.shape[1],) + b.shape[1:], cdt)
  (x, _, _), _ = lax.scan(step, (x0, x0, jnp.zeros([], cdt)), length=int(iters), unroll=unroll)
  return cast(x, out_dtype)
