"""Shampoo: one preconditioner per tensor axis (Gupta et al. 2018), blocked and grafted (Anil et al. 2020).

For a matrix gradient ``G`` Shampoo accumulates ``L = sum G G^H`` and ``R = sum G^H G`` and steps
along ``L^{-1/4} G R^{-1/4}`` (Gupta et al. 2018, Algorithm 1); an order-``k`` tensor has one
statistic per axis and the root ``1/(2k)`` (Algorithm 2). Anil et al. 2020 make it practical:

* statistics are an exponential moving average (``shampoo_beta``; ``1.0`` gives the original sum);
* inverse roots are recomputed every ``precondition_frequency`` steps, here by ``eigh`` in at least
  float32 with a regulariser relative to the largest eigenvalue;
* axes longer than ``block_size`` are cut into blocks, each preconditioned on its own (§3.3);
* grafting: per block, the Shampoo direction takes the norm of Adam's (or SGD's) step (§3.2).

Momentum here is applied to the gradient before preconditioning (Adam's bias-corrected first
moment), so with Adam grafting the step of every block has exactly Adam's norm. Vectors, scalars
and empty parameters get Adam's diagonal step.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .._core._base import Transformation
from .._core._checks import check_nonnegative, check_positive, check_range
from .._core._module import hyper_field, static_field
from .._core._policy import (
    as_compute,
    compute_dtype,
    hyper,
    per_dtype,
    real_dtype,
    safe_increment,
    zero_count,
)
from .._core._tree import tree_map_n, zeros_like
from ._matrix import (
    axis_statistic,
    block_sizes,
    from_blocks,
    inverse_root,
    mode_product,
    num_blocks,
    replicate_whole,
    to_blocks,
)
from ._moments import abs_sq
from ._soap import stat_dtype

__all__ = ["ScaleByShampooState", "scale_by_shampoo"]

_GRAFTS = ("adam", "sgd", "none")


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
  mu: Any
  nu: Any
  statistics: Any
  preconditioners: Any


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


class ScaleByShampoo(Transformation):
  name = "scale_by_shampoo"
  b1: Any = hyper_field(0.9)
  b2: Any = hyper_field(0.999)
  eps: Any = hyper_field(1e-08)
  matrix_eps: Any = hyper_field(1e-06)
  shampoo_beta: Any = hyper_field(None)
  exponent_override: Any = hyper_field(None)
  block_size: int = static_field(default=128)
  precondition_frequency: int = static_field(default=10)
  graft_type: str = static_field(default="adam")
  mu_dtype: Any = static_field(default=None)
  nu_dtype: Any = static_field(default=None)
  statistics_dtype: Any = static_field(default=None)
  preconditioner_dtype: Any = static_field(default=None)

  def _leaf_state(self, x):
    sizes, axes = _plan(tuple(x.shape), self.block_size)
    blocks = num_blocks(tuple(x.shape), sizes) if any(axes) else 0
    sdt = stat_dtype(x.dtype, self.statistics_dtype)
    pdt = stat_dtype(x.dtype, self.preconditioner_dtype)
    stats = tuple(jnp.zeros((blocks, b, b) if p else (0, 0), sdt) for b, p in zip(sizes, axes))
    eye = lambda b: jnp.broadcast_to(jnp.eye(b, dtype=pdt), (blocks, b, b))
    precs = tuple(eye(b) if p else jnp.zeros((0, 0), pdt) for b, p in zip(sizes, axes))
    return stats, precs

  def init_fn(self, params):
    stats, precs = tree_map_n(self._leaf_state, 2, params)
    return ScaleByShampooState(count=zero_count(), mu=zeros_like(params, self.mu_dtype),
                               nu=zeros_like(params, self.nu_dtype, real=True), statistics=stats,
                               preconditioners=precs)

  def update_fn(self, updates, state, params=None, **extra_args):
    count = safe_increment(state.count)
    refresh = (count - 1) % self.precondition_frequency == 0

    @per_dtype
    def scalars(cdt):
      rdt = real_dtype(cdt)
      b1, b2 = hyper(self.b1, rdt), hyper(self.b2, rdt)
      beta = b2 if self.shampoo_beta is None else hyper(self.shampoo_beta, rdt)
      k = count.astype(rdt)
      # beta == 1 is the original (summed) statistics of Gupta et al.
      weight = jnp.where(beta < 1, 1 - beta, jnp.ones_like(beta))
      return dict(b1=b1.astype(cdt), one_minus_b1=(1 - b1).astype(cdt), b2=b2, one_minus_b2=1 - b2,
                  c1=(1 - b1**k).astype(cdt), c2=1 - b2**k, eps=hyper(self.eps, rdt),
                  beta=beta, weight=weight, matrix_eps=hyper(self.matrix_eps, rdt))

    def local(g, m, v, stats, precs):
      cdt = compute_dtype(g.dtype, m.dtype)
      rdt = real_dtype(cdt)
      k = scalars(cdt)
      gc = as_compute(g, cdt)
      m_new = k["b1"] * as_compute(m, cdt) + k["one_minus_b1"] * gc
      v_new = k["b2"] * as_compute(v, rdt) + k["one_minus_b2"] * abs_sq(gc).astype(rdt)
      m_hat = m_new / k["c1"]
      adam = m_hat / (jnp.sqrt(v_new / k["c2"]) + k["eps"]).astype(cdt)
      sizes, axes = _plan(tuple(g.shape), self.block_size)
      if not any(axes):
        return adam.astype(g.dtype), m_new.astype(m.dtype), v_new.astype(v.dtype), stats, precs

      shape = tuple(g.shape)
      exponent = (2 * sum(axes)) if self.exponent_override is None else self.exponent_override
      g_blocks = to_blocks(gc, sizes)
      new_stats = []
      for axis, s in enumerate(stats):
        if not s.size:
          new_stats.append(s)
          continue
        sdt = compute_dtype(s.dtype)
        fresh = jax.vmap(lambda b, axis=axis: axis_statistic(b, axis))(as_compute(g_blocks, sdt))
        beta = k["beta"].astype(real_dtype(sdt)).astype(sdt)
        weight = k["weight"].astype(real_dtype(sdt)).astype(sdt)
        new_stats.append((beta * as_compute(s, sdt) + weight * fresh).astype(s.dtype))
      new_stats = tuple(new_stats)

      def recompute():
        return tuple(inverse_root(s, exponent, k["matrix_eps"]).astype(p.dtype) if p.size else p
                     for s, p in zip(new_stats, precs))

      precs = jax.lax.cond(refresh, recompute, lambda precs=precs: precs)
      direction = to_blocks(m_hat, sizes)
      for axis, p in enumerate(precs):
        if p.size:
          pc = as_compute(p, cdt)
          direction = jax.vmap(lambda x, q, axis=axis: mode_product(x, q, axis))(direction, pc)
      if self.graft_type != "none":
        target = to_blocks(adam if self.graft_type == "adam" else m_hat, sizes)
        have, want = _block_norms(direction), _block_norms(target)
        ratio = jnp.where(have > 0, want / jnp.where(have > 0, have, jnp.ones_like(have)),
                          jnp.zeros_like(have))
        direction = direction * ratio.astype(cdt)
      out = from_blocks(direction, shape, sizes)
      return out.astype(g.dtype), m_new.astype(m.dtype), v_new.astype(v.dtype), new_stats, precs

    def leaf(g, m, v, stats, precs):
      if not any(x.size for x in precs):
        return local(g, m, v, stats, precs)
      # Contractions over a sharded axis are ambiguous under explicit sharding and need collectives
      # in every product otherwise: work on whole copies, put the results back to the inputs'
      # shardings (a local slice).
      (g, m, v), (back_g, back_m, back_v) = replicate_whole(g, m, v)
      out, m_new, v_new, stats, precs = local(g, m, v, stats, precs)
      return back_g(out), back_m(m_new), back_v(v_new), stats, precs

    out, mu, nu, stats, precs = tree_map_n(
        leaf, 5, updates, state.mu, state.nu, state.statistics, state.preconditioners)
    return out, ScaleByShampooState(count=count, mu=mu, nu=nu, statistics=stats, preconditioners=precs)


def check_shampoo(owner: str, b1: Any, b2: Any, eps: Any, matrix_eps: Any, block_size: Any,
                  precondition_frequency: Any, shampoo_beta: Any, graft_type: str,
                  exponent_override: Any) -> None:
  check_range(owner, "b1", b1, 0.0, 1.0, high_open=True)
  check_range(owner, "b2", b2, 0.0, 1.0, high_open=True)
  if shampoo_beta is not None:
    check_range(owner, "shampoo_beta", shampoo_beta, 0.0, 1.0)
  check_nonnegative(owner, "eps", eps)
  check_nonnegative(owner, "matrix_eps", matrix_eps)
  if exponent_override is not None:
    check_positive(owner, "exponent_override", exponent_override)
  for name, value in (("block_size", block_size), ("precondition_frequency", precondition_frequency)):
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < 1:
      raise ValueError(f"{owner}: {name} must be a positive Python int, got {value!r}.")
  if graft_type not in _GRAFTS:
    raise ValueError(f"{owner}: graft_type must be one of {_GRAFTS}, got {graft_type!r}.")


def scale_by_shampoo(
    b1: Any = 0.9,
    b2: Any = 0.999,
    eps: Any = 1e-8,
    matrix_eps: Any = 1e-6,
    block_size: int = 128,
    precondition_frequency: int = 10,
    shampoo_beta: Any = None,
    mu_dtype: Any = None,
    *,
    graft_type: str = "adam",
    exponent_override: Any = None,
    nu_dtype: Any = None,
    statistics_dtype: Any = None,
    preconditioner_dtype: Any = None,
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
    mu_dtype: dtype of the first moment.
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
  check_shampoo("scale_by_shampoo", b1, b2, eps, matrix_eps, block_size, precondition_frequency,
                shampoo_beta, graft_type, exponent_override)
  return ScaleByShampoo(b1, b2, eps, matrix_eps, shampoo_beta, exponent_override,
                        block_size=int(block_size), precondition_frequency=int(precondition_frequency),
                        graft_type=graft_type, mu_dtype=mu_dtype, nu_dtype=nu_dtype,
                        statistics_dtype=statistics_dtype, preconditioner_dtype=preconditioner_dtype)
