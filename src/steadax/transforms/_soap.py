"""SOAP: Adam in the eigenbasis of Shampoo's preconditioner (Vyas et al. 2024).

For a matrix gradient ``G`` (``m x n``) SOAP keeps Shampoo's statistics ``L = EMA(G G^H)`` and
``R = EMA(G^H G)`` and their eigenvectors ``Q_L``, ``Q_R``. Adam runs on the rotated gradient
``G' = Q_L^H G Q_R``: the second moment lives in the rotated space, the first moment in the
parameters' own space (rotated when used), and the Adam direction is rotated back,
``N = Q_L N' Q_R^H`` (Algorithm 3 of the paper). A tensor has one statistic and one eigenbasis per
axis; axes longer than ``max_precond_dim`` (and, unless ``precondition_1d``, every axis of a vector
or scalar) keep the identity, so vectors get plain Adam.

Differences from the reference implementation, all deliberate:

* eigenbases are recomputed with an exact ``eigh`` (in at least float32) every
  ``precondition_frequency`` steps, rather than one power-iteration step with a QR decomposition;
  ``eigh``'s eigenvalues are sorted, so the second moment stays aligned with the eigenvalue order;
* Adam's ``eps`` is added to the bias-corrected ``sqrt(v_hat)`` (Optax's form), so that with a
  fixed basis SOAP is exactly ``scale_by_adam`` on rotated gradients;
* as in the reference, the first update only initialises the statistics and eigenbases and
  returns zeros (the gradient is never projected onto a basis computed from itself), and Adam's
  bias correction counts from the second update.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .._core._base import Transformation
from .._core._checks import check_nonnegative, check_range
from .._core._module import hyper_field, static_field
from .._core._policy import (
    accumulator_dtype,
    as_compute,
    compute_dtype,
    hyper,
    per_dtype,
    real_dtype,
    safe_increment,
    zero_count,
)
from .._core._tree import tree_map_n, zeros_like
from ._matrix import axis_statistic, conj_t, eigenbasis, mode_product, replicate_whole
from ._moments import abs_sq

__all__ = ["ScaleBySoapState", "scale_by_soap"]


class ScaleBySoapState(NamedTuple):
  """State of ``scale_by_soap``.

  Attributes:
    count: int32 number of updates (the first one only initialises the eigenbases).
    mu: Adam's first moment, in the parameters' own basis.
    nu: Adam's second moment, in the eigenbasis (real).
    statistics: per parameter, a tuple with one ``(d, d)`` matrix ``EMA(G_(k) G_(k)^H)`` per axis
      (shape ``(0, 0)`` for axes that are not preconditioned).
    eigenbases: per parameter, the matching tuple of eigenvector matrices (columns by decreasing
      eigenvalue). For a matrix, ``eigenbases[0]`` is ``Q_L`` and ``eigenbases[1]`` is
      ``conj(Q_R)`` (the eigenvectors of ``G^T conj(G)``; the same as ``Q_R`` for real parameters).
  """

  count: jax.Array
  mu: Any
  nu: Any
  statistics: Any
  eigenbases: Any


def preconditioned_axes(shape: tuple[int, ...], max_precond_dim: int,
                        precondition_1d: bool) -> tuple[bool, ...]:
  """Which axes of a parameter of ``shape`` get an eigenbasis."""
  if len(shape) == 0 or int(np.prod(shape)) == 0 or (len(shape) == 1 and not precondition_1d):
    return (False,) * len(shape)
  return tuple(1 < d <= max_precond_dim for d in shape)


def stat_dtype(param_dtype: Any, override: Any) -> np.dtype:
  """Dtype of a preconditioner matrix: the override, else the parameter's compute dtype (>= f32)."""
  return accumulator_dtype(compute_dtype(param_dtype), override)


def rotate(x: jax.Array, bases: tuple, adjoint: bool) -> jax.Array:
  """``x`` with every preconditioned axis multiplied by its basis (``Q^H`` if ``adjoint``)."""
  for axis, q in enumerate(bases):
    if q.size:
      q = as_compute(q, x.dtype)
      x = mode_product(x, conj_t(q) if adjoint else q, axis)
  return x


class ScaleBySoap(Transformation):
  name = "scale_by_soap"
  b1: Any = hyper_field(0.95)
  b2: Any = hyper_field(0.95)
  shampoo_beta: Any = hyper_field(None)
  eps: Any = hyper_field(1e-08)
  precondition_frequency: int = static_field(default=10)
  max_precond_dim: int = static_field(default=10000)
  mu_dtype: Any = static_field(default=None)
  nu_dtype: Any = static_field(default=None)
  statistics_dtype: Any = static_field(default=None)
  eigenbasis_dtype: Any = static_field(default=None)
  precondition_1d: bool = static_field(default=False)

  def _leaf_state(self, x):
    axes = preconditioned_axes(tuple(x.shape), self.max_precond_dim, self.precondition_1d)
    sdt = stat_dtype(x.dtype, self.statistics_dtype)
    edt = stat_dtype(x.dtype, self.eigenbasis_dtype)
    stats = tuple(jnp.zeros((d, d) if p else (0, 0), sdt) for d, p in zip(x.shape, axes))
    bases = tuple(jnp.eye(d, dtype=edt) if p else jnp.zeros((0, 0), edt) for d, p in zip(x.shape, axes))
    return stats, bases

  def init_fn(self, params):
    stats, bases = tree_map_n(self._leaf_state, 2, params)
    return ScaleBySoapState(count=zero_count(), mu=zeros_like(params, self.mu_dtype),
                            nu=zeros_like(params, self.nu_dtype, real=True), statistics=stats,
                            eigenbases=bases)

  def update_fn(self, updates, state, params=None, **extra_args):
    count = safe_increment(state.count)
    first = count == 1
    # A new basis after the update that first sees the statistics, then every f updates after it.
    refresh = (count - 1) % self.precondition_frequency == 0
    adam_count = jnp.maximum(count - 1, 1)

    @per_dtype
    def scalars(cdt):
      rdt = real_dtype(cdt)
      b1, b2 = hyper(self.b1, rdt), hyper(self.b2, rdt)
      beta = b2 if self.shampoo_beta is None else hyper(self.shampoo_beta, rdt)
      k = adam_count.astype(rdt)
      return dict(b1=b1.astype(cdt), one_minus_b1=(1 - b1).astype(cdt), b2=b2, one_minus_b2=1 - b2,
                  c1=(1 - b1**k).astype(cdt), c2=1 - b2**k, eps=hyper(self.eps, rdt),
                  beta=beta, one_minus_beta=1 - beta)

    def local(g, m, v, stats, bases):
      cdt = compute_dtype(g.dtype, m.dtype, *[q.dtype for q in bases])
      rdt = real_dtype(cdt)
      k = scalars(cdt)
      gc = as_compute(g, cdt)
      m_old, v_old = as_compute(m, cdt), as_compute(v, rdt)
      m_new = k["b1"] * m_old + k["one_minus_b1"] * gc
      g_rot = rotate(gc, bases, adjoint=True)
      v_new = k["b2"] * v_old + k["one_minus_b2"] * abs_sq(g_rot).astype(rdt)
      m_hat = rotate(m_new, bases, adjoint=True) / k["c1"]
      v_hat = v_new / k["c2"]
      direction = rotate(m_hat / (jnp.sqrt(v_hat) + k["eps"]).astype(cdt), bases, adjoint=False)
      out = jnp.where(first, jnp.zeros_like(direction), direction)
      m_new = jnp.where(first, m_old, m_new)
      v_new = jnp.where(first, v_old, v_new)

      new_stats = []
      for axis, s in enumerate(stats):
        if not s.size:
          new_stats.append(s)
          continue
        sdt = compute_dtype(s.dtype)
        beta = k["beta"].astype(real_dtype(sdt)).astype(sdt)
        one_minus = k["one_minus_beta"].astype(real_dtype(sdt)).astype(sdt)
        fresh = axis_statistic(as_compute(gc, sdt), axis)
        new_stats.append((beta * as_compute(s, sdt) + one_minus * fresh).astype(s.dtype))
      new_stats = tuple(new_stats)
      if any(q.size for q in bases):
        def recompute():
          return tuple(eigenbasis(s).astype(q.dtype) if q.size else q for s, q in zip(new_stats, bases))

        bases = jax.lax.cond(refresh, recompute, lambda bases=bases: bases)
      return out.astype(g.dtype), m_new.astype(m.dtype), v_new.astype(v.dtype), new_stats, bases

    def leaf(g, m, v, stats, bases):
      if not any(x.size for x in bases):
        return local(g, m, v, stats, bases)
      # Contractions over a sharded axis are ambiguous under explicit sharding and need collectives
      # in every product otherwise: work on whole copies, put the results back to the inputs'
      # shardings (a local slice).
      (g, m, v), (back_g, back_m, back_v) = replicate_whole(g, m, v)
      out, m_new, v_new, stats, bases = local(g, m, v, stats, bases)
      return back_g(out), back_m(m_new), back_v(v_new), stats, bases

    out, mu, nu, stats, bases = tree_map_n(
        leaf, 5, updates, state.mu, state.nu, state.statistics, state.eigenbases)
    return out, ScaleBySoapState(count=count, mu=mu, nu=nu, statistics=stats, eigenbases=bases)


def check_soap(owner: str, b1: Any, b2: Any, shampoo_beta: Any, eps: Any, precondition_frequency: Any,
               max_precond_dim: Any) -> None:
  check_range(owner, "b1", b1, 0.0, 1.0, high_open=True)
  check_range(owner, "b2", b2, 0.0, 1.0, high_open=True)
  if shampoo_beta is not None:
    check_range(owner, "shampoo_beta", shampoo_beta, 0.0, 1.0, high_open=True)
  check_nonnegative(owner, "eps", eps)
  for name, value in (("precondition_frequency", precondition_frequency),
                      ("max_precond_dim", max_precond_dim)):
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < 1:
      raise ValueError(f"{owner}: {name} must be a positive Python int, got {value!r}.")


def scale_by_soap(
    b1: Any = 0.95,
    b2: Any = 0.95,
    shampoo_beta: Any = None,
    eps: Any = 1e-8,
    precondition_frequency: int = 10,
    max_precond_dim: int = 10000,
    mu_dtype: Any = None,
    *,
    nu_dtype: Any = None,
    statistics_dtype: Any = None,
    eigenbasis_dtype: Any = None,
    precondition_1d: bool = False,
) -> Transformation:
  """Adam run in the eigenbasis of Shampoo's preconditioner (SOAP).

  Per parameter and axis ``k``: ``S_k = beta S_k + (1 - beta) G_(k) G_(k)^H`` and its eigenvectors
  ``Q_k``, recomputed (``eigh``, under ``lax.cond``) after the first update and every
  ``precondition_frequency`` updates after that. The update is Adam's on ``G' = G x_k Q_k^H``,
  rotated back with ``x_k Q_k``; the first update returns zeros.

  Args:
    b1: Adam's first-moment decay.
    b2: Adam's second-moment decay.
    shampoo_beta: decay of the statistics ``S_k`` (default: ``b2``).
    eps: Adam's epsilon (added to ``sqrt(v_hat)``).
    precondition_frequency: updates between eigenbasis refreshes (a Python int).
    max_precond_dim: axes longer than this keep the identity basis.
    mu_dtype: dtype of the first moment (default: the parameter's).
    nu_dtype: dtype of the second moment (default: the parameter's real dtype).
    statistics_dtype: dtype of ``S_k`` (default: the parameter's dtype promoted to at least float32).
    eigenbasis_dtype: dtype of ``Q_k`` (same default).
    precondition_1d: also rotate vectors (one ``d x d`` statistic each).

  Returns:
    A transformation with ``ScaleBySoapState(count, mu, nu, statistics, eigenbases)``.

  References:
    Vyas et al., "SOAP: Improving and Stabilizing Shampoo using Adam", ICLR 2025
    (arXiv:2409.11321), Algorithm 3.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> tx = steadax.scale_by_soap()
    >>> g = jnp.array([[1.0, 2.0], [3.0, 4.0]])
    >>> state = tx.init(g)
    >>> u, state = tx.update(g, state)  # the first update only sets up the eigenbases
    >>> u
    Array([[0., 0.],
           [0., 0.]], dtype=float32)
    >>> [q.shape for q in state.eigenbases]
    [(2, 2), (2, 2)]
  """
  check_soap("scale_by_soap", b1, b2, shampoo_beta, eps, precondition_frequency, max_precond_dim)
  return ScaleBySoap(b1, b2, shampoo_beta, eps, precondition_frequency=int(precondition_frequency),
                     max_precond_dim=int(max_precond_dim), mu_dtype=mu_dtype, nu_dtype=nu_dtype,
                     statistics_dtype=statistics_dtype, eigenbasis_dtype=eigenbasis_dtype,
                     precondition_1d=precondition_1d)
