"""Shampoo: one preconditioner per tensor axis (Gupta et al. 2018), blocked and grafted (Anil et al. 2020).

For a matrix gradient ``G`` Shampoo accumulates ``L = sum G G^H`` and ``R = sum G^H G`` and steps
along ``L^{-1/4} G R^{-1/4}`` (Gupta et al. 2018, Algorithm 1); an order-``k`` tensor has one
statistic per axis and the root ``1/(2k)`` (Algorithm 2). Anil et al. 2020 make it practical:

* statistics are an exponential moving average (``shampoo_beta``; ``1.0`` gives the original sum);
* inverse roots are recomputed every ``precondition_frequency`` steps, here by ``eigh`` in the
  compute dtype (at least float32) with a regulariser relative to the largest eigenvalue;
* axes longer than ``block_size`` are cut into blocks, each preconditioned on its own (§3.3);
* grafting: per block, the Shampoo direction takes the norm of Adam's (or SGD's) step (§3.2).

Momentum here is applied to the gradient before preconditioning (Adam's bias-corrected first
moment), so with Adam grafting the step of every block has exactly Adam's norm. Vectors, scalars
and empty parameters get Adam's diagonal step.
"""

import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike, DTypeLike

from .._core._transformation import Transformation
from .._core._checks import check_decay_below_one, check_nonnegative, check_positive, check_range
from .._core._leafwise import Scalars
from .._core._module import hyper_field, static_field
from .._core._policy import hyper, safe_increment, zero_count
from .._core._roles import COUNTER, OTHER, accumulator, declared_roles, role_zeros, state_roles
from .._core._tree import is_none
from .._core._docs import shared_args
from ._adam import one_minus_pow
from ._matrix import (
    axis_statistic,
    block_sizes,
    check_positive_int,
    from_blocks,
    inverse_root,
    leafwise_with_matrices,
    mode_product,
    num_blocks,
    place_statistic,
    refresh_cond,
    to_blocks,
)
from ._moments import abs_sq
from ._soap import stat_dtype
from .._core._types import ArrayTree, Updates

__all__ = ["ScaleByShampooState", "scale_by_shampoo"]

_GRAFTS = ("adam", "sgd", "none")


@state_roles(count=COUNTER, mu=accumulator("mu_dtype"), nu=accumulator("nu_dtype", real=True),
             statistics=OTHER, preconditioners=OTHER)
class ScaleByShampooState(NamedTuple):
  """State of ``scale_by_shampoo``.

  Attributes:
    count: int32 number of updates.
    mu: first moment of the gradient (param-shaped).
    nu: Adam's diagonal second moment (param-shaped, real): the grafting norm and the step of
      vectors and scalars.
    statistics: per parameter, a tuple with one ``(num_blocks, b, b)`` array per axis (shape
      ``(0, 0)`` for axes that are not preconditioned).
    preconditioners: per parameter, the matching inverse roots.
  """

  count: jax.Array
  mu: Updates
  nu: Updates
  statistics: ArrayTree
  preconditioners: ArrayTree


def _plan(shape: tuple[int, ...], block_size: int) -> tuple[tuple[int, ...], tuple[bool, ...]]:
  """Block sizes and which axes are preconditioned (matrices and higher; no length-1 axes)."""
  if len(shape) < 2 or int(np.prod(shape)) == 0:
    return tuple(shape), (False,) * len(shape)
  sizes = block_sizes(shape, block_size)
  return sizes, tuple(b > 1 for b in sizes)


def _block_norms(x: jax.Array) -> jax.Array:
  """The Frobenius norm of each block of ``(num_blocks, ...)`` (real, kept broadcastable)."""
  axes = tuple(range(1, x.ndim))
  return jnp.sqrt(jnp.sum(abs_sq(x), axis=axes, keepdims=True))


def _check_graft_type(owner: str, graft_type: Any) -> None:
  if graft_type not in _GRAFTS:
    raise ValueError(f"{owner}: graft_type must be one of {_GRAFTS}, got {graft_type!r}.")


class ScaleByShampoo(Transformation):
  name = "scale_by_shampoo"
  State = ScaleByShampooState
  b1: Any = hyper_field(0.9, check=check_decay_below_one)
  b2: Any = hyper_field(0.999, check=check_decay_below_one)
  eps: Any = hyper_field(1e-08, check=check_nonnegative)
  matrix_eps: Any = hyper_field(1e-06, check=check_nonnegative)
  # 1.0 is allowed: the summed statistics of Gupta et al.
  shampoo_beta: Any = hyper_field(None, check=lambda owner, name, v: check_range(owner, name, v, 0.0, 1.0))
  exponent_override: Any = hyper_field(None, check=check_positive)
  block_size: int = static_field(default=128)
  precondition_frequency: int = static_field(default=10)
  graft_type: str = static_field(default="adam")
  mu_dtype: Any = static_field(default=None)
  nu_dtype: Any = static_field(default=None)
  statistics_dtype: Any = static_field(default=None)
  preconditioner_dtype: Any = static_field(default=None)

  def __post_init__(self):
    check_positive_int(self.owner, "block_size", self.block_size)
    check_positive_int(self.owner, "precondition_frequency", self.precondition_frequency)
    _check_graft_type(self.owner, self.graft_type)

  def _statistics(self, x):
    sizes, axes = _plan(tuple(x.shape), self.block_size)
    blocks = num_blocks(tuple(x.shape), sizes) if any(axes) else 0
    sdt = stat_dtype(x.dtype, self.statistics_dtype)
    return tuple(place_statistic(x, jnp.zeros((blocks, b, b), sdt)) if p else jnp.zeros((0, 0), sdt)
                 for b, p in zip(sizes, axes))

  def _preconditioners(self, x):
    sizes, axes = _plan(tuple(x.shape), self.block_size)
    blocks = num_blocks(tuple(x.shape), sizes) if any(axes) else 0
    pdt = stat_dtype(x.dtype, self.preconditioner_dtype)
    eye = lambda b: jnp.broadcast_to(jnp.eye(b, dtype=pdt), (blocks, b, b))
    return tuple(place_statistic(x, eye(b)) if p else jnp.zeros((0, 0), pdt) for b, p in zip(sizes, axes))

  def init_fn(self, params):
    roles = declared_roles(ScaleByShampooState)
    per_param = lambda fn: jax.tree_util.tree_map(lambda x: None if x is None else fn(x), params,
                                                  is_leaf=is_none)
    return ScaleByShampooState(count=zero_count(), mu=role_zeros(params, roles["mu"], self),
                               nu=role_zeros(params, roles["nu"], self),
                               statistics=per_param(self._statistics),
                               preconditioners=per_param(self._preconditioners))

  def update_fn(self, updates, state, params=None, **extra_args):
    count = safe_increment(state.count)
    refresh = (count - 1) % self.precondition_frequency == 0

    @functools.cache  # once per real compute dtype, shared by the per-parameter calls below
    def scalars(dt):
      b2 = hyper(self.b2, dt)
      beta = b2 if self.shampoo_beta is None else hyper(self.shampoo_beta, dt)
      exponent = None if self.exponent_override is None else hyper(self.exponent_override, dt)
      return Scalars(b1=hyper(self.b1, dt), b2=b2, c1=one_minus_pow(self.b1, count, dt),
                     c2=one_minus_pow(self.b2, count, dt), eps=hyper(self.eps, dt), beta=beta,
                     # beta == 1 is the original (summed) statistics of Gupta et al.
                     weight=jnp.where(beta < 1, 1 - beta, jnp.ones_like(beta)),
                     matrix_eps=hyper(self.matrix_eps, dt), exponent=exponent)

    def leaf_fn(axes, refresh):
      def leaf(k, g, m, v, *matrices):
        m = k.b1 * m + (1 - k.b1) * g
        v = k.b2 * v + (1 - k.b2) * abs_sq(g)
        m_hat = m / k.c1
        adam = m_hat / (jnp.sqrt(v / k.c2) + k.eps)
        if not axes:  # vectors, scalars, empty parameters: Adam's diagonal step
          return adam, m, v
        # Gupta et al. 2018, Algorithm 2, per block (Anil et al. 2020, §3.3).
        stats, precs = matrices[:len(axes)], matrices[len(axes):]
        sizes = _plan(tuple(g.shape), self.block_size)[0]
        g_blocks = to_blocks(g, sizes)
        stats = tuple(k.beta * s + k.weight * jax.vmap(lambda b, axis=axis: axis_statistic(b, axis))(g_blocks)
                      for axis, s in zip(axes, stats))
        exponent = 2 * len(axes) if k.exponent is None else k.exponent
        old = precs
        precs = refresh_cond(refresh, lambda: tuple(inverse_root(s, exponent, k.matrix_eps) for s in stats), old)
        direction = to_blocks(m_hat, sizes)
        for axis, q in zip(axes, precs):
          direction = jax.vmap(lambda x, q, axis=axis: mode_product(x, q, axis))(direction, q)
        if self.graft_type != "none":
          # Grafting (Anil et al. 2020, §3.2): each block takes the norm of Adam's (SGD's) step.
          target = to_blocks(adam if self.graft_type == "adam" else m_hat, sizes)
          have, want = _block_norms(direction), _block_norms(target)
          ratio = jnp.where(have > 0, want / jnp.where(have > 0, have, jnp.ones_like(have)),
                            jnp.zeros_like(have))
          direction = direction * ratio
        return (from_blocks(direction, tuple(g.shape), sizes), m, v, *stats, *precs)
      return leaf

    out, mu, nu, stats, precs = leafwise_with_matrices(
        self, leaf_fn, updates, (state.mu, state.nu), (state.statistics, state.preconditioners),
        params, scalars, shared=(refresh,))
    return out, ScaleByShampooState(count=count, mu=mu, nu=nu, statistics=stats, preconditioners=precs)


@shared_args
def scale_by_shampoo(
    b1: ArrayLike = 0.9,
    b2: ArrayLike = 0.999,
    eps: ArrayLike = 1e-8,
    matrix_eps: ArrayLike = 1e-6,
    block_size: int = 128,
    precondition_frequency: int = 10,
    shampoo_beta: ArrayLike | None = None,
    mu_dtype: DTypeLike | None = None,
    *,
    graft_type: str = "adam",
    exponent_override: int | None = None,
    nu_dtype: DTypeLike | None = None,
    statistics_dtype: DTypeLike | None = None,
    preconditioner_dtype: DTypeLike | None = None,
) -> Transformation:
  """Shampoo's Kronecker-factored preconditioning with blocking and grafting.

  Per block of a parameter and per axis ``k``: ``S_k = beta S_k + (1 - beta) G_(k) G_(k)^H``; the
  preconditioners ``P_k = (S_k + matrix_eps * lambda_max I)^{-1/e}`` (``e = 2 * number of
  preconditioned axes``, or ``exponent_override``) are recomputed under ``lax.cond`` at the first
  update and every ``precondition_frequency`` updates after it. The direction ``m_hat x_k P_k``
  (``m_hat`` Adam's bias-corrected first moment) is rescaled per block to the norm of Adam's step
  (``graft_type="adam"``), of ``m_hat`` (``"sgd"``), or left as it is (``"none"``).

  Args:
    b1: first-moment decay (momentum).
    b2: Adam's second-moment decay (grafting and the diagonal fallback).
    eps: Adam's epsilon.
    matrix_eps: regulariser of the inverse roots, relative to the largest eigenvalue.
    block_size: axes longer than this are split into blocks of this length (a Python int).
    precondition_frequency: updates between inverse-root recomputations (a Python int).
    shampoo_beta: decay of the statistics (default ``b2``; ``1.0`` sums them as in Gupta et al.).
    mu_dtype: <shared>
    graft_type: ``"adam"``, ``"sgd"`` or ``"none"``.
    exponent_override: the root ``e`` (e.g. ``2`` for ``S^{-1/2}`` on every axis).
    nu_dtype: dtype of the second moment.
    statistics_dtype: dtype of the statistics (default: the parameter's dtype, at least float32).
    preconditioner_dtype: dtype of the inverse roots (same default).

  Returns:
    A transformation with ``ScaleByShampooState(count, mu, nu, statistics, preconditioners)``.

  References:
    Gupta, Koren & Singer, "Shampoo: Preconditioned Stochastic Tensor Optimization", ICML 2018,
    Algorithms 1-2.
    Anil et al., "Scalable Second Order Optimization for Deep Learning", arXiv:2002.09018, 2020,
    §3.2 (grafting) and §3.3 (blocking).

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> tx = steadax.scale_by_shampoo(block_size=2)
    >>> state = tx.init(jnp.zeros((3, 2)))
    >>> [s.shape for s in state.statistics]  # two row blocks (the second zero-padded)
    [(2, 2, 2), (2, 2, 2)]
  """
  return ScaleByShampoo(b1, b2, eps, matrix_eps, shampoo_beta, exponent_override,
                        block_size=block_size, precondition_frequency=precondition_frequency,
                        graft_type=graft_type, mu_dtype=mu_dtype, nu_dtype=nu_dtype,
                        statistics_dtype=statistics_dtype, preconditioner_dtype=preconditioner_dtype)
