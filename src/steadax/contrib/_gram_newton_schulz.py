"""Muon's Newton-Schulz iteration, and the same run on the small Gram matrix (private).

Muon's step ``X <- a X + (b A + c A^2) X``, ``A = X X^H``, multiplies the rectangular ``X`` twice
per step. For a wide ``X`` (``n x m``, ``n <= m``) every iterate is a polynomial in ``R_0 = X_0
X_0^H`` times ``X_0``: ``X_t = Q_t X_0`` with ``Q_t`` an ``n x n`` matrix that commutes with
``R_0``. So the iteration can run on ``n x n`` matrices only (Amsel et al. 2025, Appendix F,
Algorithm 4; Zhang, Amsel, Chen & Dao 2026):

    Z_t = b_t R_{t-1} + c_t R_{t-1}^2          (the polynomial's A-part, as Muon's B)
    Q_t = Q_{t-1} (a_t I + Z_t)                 (Q_0 = I)
    R_t = X_t X_t^H = (a_t I + Z_t) R_{t-1} (a_t I + Z_t)
    X_T = Q_T X_0                               (one rectangular product at the end)

Per step that is four ``n^3`` products instead of two ``n^2 m`` and one ``n^3``; with the Gram
matrix and the final product (``2 n^2 m``), 5 steps cost ``(4 a + 14) n^3`` with one restart
against ``(10 a + 5) n^3`` (``a = m / n``): fewer for aspect ratios above 1.5 (``gram_is_cheaper``).

Accuracy: ``Q_T`` tends to ``V S^{-1} V^H`` (the inverse of ``X_0``'s singular values on its row
space), which is ill-conditioned when ``X_0`` has small singular values; in low precision the
product ``Q_T X_0`` then loses the small directions. A restart (``X <- Q X``, ``R <- X X^H``,
``Q <- I``) before a step bounds the conditioning of each ``Q``: the paper restarts every 3 steps,
Dao-AILab's reference once, before the third step of five. The default here does both: before
step 2 and every 3 steps after (``(2,)`` for 5 steps, ``(2, 5)`` for 8). Measured in float32
against the standard iteration (relative Frobenius difference, 128x512 matrices): at most 9e-5
with these restarts on Gaussian, power-law and nearly low-rank spectra, where one restart in 8 or
10 steps gave 1.2e-3 and 4.7e-3 and none in 5 steps 1.1e-2; in bfloat16 without restarts the
iteration diverges on such spectra (``docs/families.md``, "Gram Newton-Schulz").
"""

import functools
from collections.abc import Callable
from typing import TypeVar, cast

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from ..transforms._kron import conj_t

__all__: list[str] = []

F = TypeVar("F", bound=Callable)


def default_restarts(steps: int) -> tuple[int, ...]:
  """Before step 2 (Dao-AILab's default for 5 steps) and every 3 steps after (the paper's period)."""
  return tuple(range(2, steps, 3))


def _frobenius(x: jax.Array) -> jax.Array:
  sq = jnp.real(x * jnp.conj(x)) if jnp.iscomplexobj(x) else x * x
  return jnp.sqrt(jnp.sum(sq))


def _normalized(x: jax.Array, preconditioning: str, eps: ArrayLike) -> jax.Array:
  """``x`` divided by its Frobenius or spectral norm plus ``eps`` (the other preconditionings scale
  with the Gram matrix, in ``_first_gram``)."""
  if preconditioning == "frobenius":
    return x / (_frobenius(x) + eps)
  if preconditioning == "spectral":
    return x / (jnp.linalg.norm(x, ord=2) + eps)
  return x


def _first_gram(x: jax.Array, preconditioning: str, eps: ArrayLike) -> tuple[jax.Array, jax.Array]:
  """``(X, X X^H)`` for the first step; ``"aol"`` rescales the rows by ``D^{-1/2}``, ``D`` the
  absolute row sums of ``X X^H`` (Boissin et al. 2025), ``"schatten"`` divides by
  ``||X X^H||_F^{1/2}`` (Grishina et al. 2025): both bound the spectral norm by one with the Gram
  matrix the first step computes anyway. The products are Optax's (``a * s * s.T``; ``s ** 2``
  is ``1 / norm`` as XLA folds it there), so the bits agree."""
  r = x @ conj_t(x)
  if preconditioning == "aol":
    s = jax.lax.rsqrt(jnp.maximum(jnp.sum(jnp.abs(r), axis=-1), eps))[:, None]
    x, r = x * s, r * s * s.T
  elif preconditioning == "schatten":
    norm = jnp.maximum(_frobenius(r), eps)
    x, r = x * jax.lax.rsqrt(norm), r * (1 / norm)
  return x, r


def _rows(coeffs: jax.Array, ns_steps: int) -> list[jax.Array]:
  return [coeffs] * ns_steps if coeffs.ndim == 1 else [coeffs[i] for i in range(coeffs.shape[0])]


def _prepared(x: jax.Array, coeffs: jax.Array, ns_steps: int, preconditioning: str,
              eps: ArrayLike) -> tuple[jax.Array, jax.Array, list[jax.Array]]:
  """Both iterations' start: the wide ``X`` (a tall matrix transposed: ``f(X^T) = f(X)^T`` for the
  odd polynomial, so the Gram matrix is the smaller one) scaled by ``preconditioning``, its Gram
  matrix ``X X^H``, and the coefficient rows, one per step."""
  x, r = _first_gram(_normalized(x, preconditioning, eps), preconditioning, eps)
  return x, r, _rows(coeffs, ns_steps)


def _wide(iteration: F) -> F:
  """``iteration`` on the wide orientation of ``x`` (a tall one transposed there and back)."""
  @functools.wraps(iteration)
  def run(x, *args, **kwargs):
    if x.size == 0:
      return x
    if x.shape[0] > x.shape[1]:
      return iteration(x.T, *args, **kwargs).T
    return iteration(x, *args, **kwargs)
  return cast(F, run)


@_wide
def newton_schulz(x: jax.Array, coeffs: jax.Array, ns_steps: int, preconditioning: str,
                  eps: ArrayLike) -> jax.Array:
  """Approximate orthogonal factor of one matrix ``x``: Muon's iteration ``X <- a X + (b A + c A^2)
  X``, ``A = X X^H`` (Jordan et al. 2024), after ``preconditioning``.

  ``x`` (2-D) and the real coefficients (``(3,)`` for every one of ``ns_steps`` steps, or one row
  per step) are in the compute dtype, ``eps`` is weakly typed; real scales multiply a complex ``x``
  by standard promotion.
  """
  return _standard_steps(_normalized(x, preconditioning, eps), coeffs, eps, ns_steps, preconditioning)


# The steps as one compiled program, as Optax's loop (``lax.fori_loop``/``lax.scan``) is even when
# called eagerly: XLA fuses (at its default flags, into FMAs) the multiply-adds as in Optax's.
@functools.partial(jax.jit, static_argnames=("ns_steps", "preconditioning"))
def _standard_steps(x: jax.Array, coeffs: jax.Array, eps: ArrayLike, ns_steps: int,
                    preconditioning: str) -> jax.Array:
  x, a = _first_gram(x, preconditioning, eps)
  for i, c in enumerate(_rows(coeffs, ns_steps)):
    a = a if i == 0 else x @ conj_t(x)
    x = c[0] * x + (c[1] * a + (c[2] * a) @ a) @ x  # Optax's ``c2 * a @ a``: left to right
  return x


@_wide
def gram_newton_schulz(x: jax.Array, coeffs: jax.Array, ns_steps: int, preconditioning: str,
                       eps: ArrayLike, restarts: tuple[int, ...] | None = None) -> jax.Array:
  """Muon's Newton-Schulz iteration of one matrix ``x`` computed on its Gram matrix.

  The same arguments as ``newton_schulz`` and the same result in exact arithmetic; ``restarts``:
  the steps before which ``X`` is formed and the Gram matrix recomputed (default:
  ``default_restarts``).
  """
  x, r, rows = _prepared(x, coeffs, ns_steps, preconditioning, eps)
  restarts = default_restarts(len(rows)) if restarts is None else restarts
  q = None  # None: the identity (after the start or a restart), never formed
  last = len(rows) - 1
  for i, c in enumerate(rows):
    if i in restarts and i > 0 and q is not None:
      x = q @ x
      r = x @ conj_t(x)
      q = None
    z = c[1] * r + c[2] * (r @ r)
    q = z + c[0] * jnp.eye(r.shape[0], dtype=r.dtype) if q is None else q @ z + c[0] * q
    if i < last and (i + 1) not in restarts:
      # R_t = (aI + Z) R (aI + Z), the factors commuting: Z (R Z + a R) + a (R Z + a R).
      rz = r @ z + c[0] * r
      r = z @ rz + c[0] * rz
  return x if q is None else q @ x


def gram_flops(shape: tuple[int, int], steps: int, restarts: tuple[int, ...] | None = None) -> int:
  """Multiply-adds of ``gram_newton_schulz`` on a matrix of ``shape`` (products only)."""
  n, m = sorted(shape)
  restarts = default_restarts(steps) if restarts is None else restarts
  total = n * n * m  # R_0
  fresh = True
  for i in range(steps):
    if i in restarts and i > 0:
      total += 2 * n * n * m  # X <- Q X, R <- X X^H
      fresh = True
    total += n**3 + (0 if fresh else n**3)  # R^2, Q Z
    fresh = False
    if i < steps - 1 and (i + 1) not in restarts:
      total += 2 * n**3  # R Z, Z (R Z)
  return total + n * n * m  # Q X


def standard_flops(shape: tuple[int, int], steps: int) -> int:
  """Multiply-adds of the standard iteration: per step ``X X^H``, ``A^2`` and ``B X``."""
  n, m = sorted(shape)
  return steps * (2 * n * n * m + n**3)


def gram_is_cheaper(shape: tuple[int, int], steps: int, restarts: tuple[int, ...] | None = None) -> bool:
  """Whether the Gram iteration needs fewer multiply-adds than the standard one on ``shape``."""
  return gram_flops(shape, steps, restarts) < standard_flops(shape, steps)
