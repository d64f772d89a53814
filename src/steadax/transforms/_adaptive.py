"""Adaptive preconditioners that are not Adam: Adadelta, NovoGrad (layer-wise) and SM3 (low memory).

References:
  Zeiler, "ADADELTA: An Adaptive Learning Rate Method", 2012 (arXiv:1212.5701, Algorithm 1).
  Ginsburg et al., "Stochastic Gradient Methods with Layer-wise Adaptive Moments for Training of Deep
  Networks", 2019 (arXiv:1905.11286, Algorithm 1; NovoGrad).
  Anil et al., "Memory-Efficient Adaptive Optimization", NeurIPS 2019 (arXiv:1901.11150; SM3-II,
  Algorithm 2).
"""

from __future__ import annotations

import functools
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
from .._core._tree import tree_map, tree_map_n, zeros_like
from ._moments import abs_sq

__all__ = [
    "ScaleByAdaDeltaState",
    "ScaleByNovogradState",
    "ScaleBySM3State",
    "scale_by_adadelta",
    "scale_by_novograd",
    "scale_by_sm3",
]


class ScaleByAdaDeltaState(NamedTuple):
  """State of ``scale_by_adadelta``: running averages of squared gradients and squared updates."""

  e_g: Any
  e_x: Any


class ScaleByNovogradState(NamedTuple):
  """State of ``scale_by_novograd``: int32 count, first moment, one second moment per leaf."""

  count: jax.Array
  mu: Any
  nu: Any


class ScaleBySM3State(NamedTuple):
  """State of ``scale_by_sm3``: per leaf, one accumulator vector per axis (``mu``) and momentum."""

  mu: Any
  nu: Any


class ScaleByAdaDelta(Transformation):
  name = "scale_by_adadelta"
  rho: Any = hyper_field(0.9)
  eps: Any = hyper_field(1e-06)

  def init_fn(self, params):
    return ScaleByAdaDeltaState(e_g=zeros_like(params, real=True), e_x=zeros_like(params, real=True))

  def update_fn(self, updates, state, params=None, **extra_args):
    @per_dtype
    def scalars(rdt):
      rho = hyper(self.rho, rdt)
      return rho, np.asarray(1, rdt) - rho, hyper(self.eps, rdt)

    def leaf(g, e_g, e_x):
      cdt = compute_dtype(g.dtype, e_g.dtype)
      rdt = real_dtype(cdt)
      rho, one_minus_rho, eps = scalars(rdt)
      gc = as_compute(g, cdt)
      e_g_new = rho * as_compute(e_g, rdt) + one_minus_rho * abs_sq(gc).astype(rdt)
      # The units of the step match the parameters' (eq. 14): RMS of past steps over RMS of gradients.
      ratio = jnp.sqrt(as_compute(e_x, rdt) + eps) / jnp.sqrt(e_g_new + eps)
      step = ratio.astype(cdt) * gc
      e_x_new = rho * as_compute(e_x, rdt) + one_minus_rho * abs_sq(step).astype(rdt)
      return step.astype(g.dtype), e_g_new.astype(e_g.dtype), e_x_new.astype(e_x.dtype)

    out, e_g, e_x = tree_map_n(leaf, 3, updates, state.e_g, state.e_x)
    return out, ScaleByAdaDeltaState(e_g=e_g, e_x=e_x)


def scale_by_adadelta(rho: Any = 0.9, eps: Any = 1e-6) -> Transformation:
  """Rescales updates by Adadelta's ratio of past step sizes to past gradient sizes.

  ``E[g^2] = rho E[g^2] + (1 - rho) g^2``, ``u = sqrt(E[dx^2] + eps) / sqrt(E[g^2] + eps) * g``,
  ``E[dx^2] = rho E[dx^2] + (1 - rho) u^2``.

  Args:
    rho: decay of both running averages.
    eps: added inside both square roots (it also sets the size of the first steps).

  Returns:
    A transformation with ``ScaleByAdaDeltaState(e_g, e_x)``.

  References:
    Zeiler, "ADADELTA: An Adaptive Learning Rate Method", 2012 (arXiv:1212.5701), Algorithm 1.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> tx = steadax.scale_by_adadelta(rho=0.0, eps=1.0)
    >>> tx.update(jnp.array([0.0]), tx.init(jnp.zeros(1)))[0]
    Array([0.], dtype=float32)
  """
  check_range("scale_by_adadelta", "rho", rho, 0.0, 1.0, high_open=True)
  check_range("scale_by_adadelta", "eps", eps, 0.0, np.inf, low_open=True)
  return ScaleByAdaDelta(rho, eps)


class ScaleByNovograd(Transformation):
  name = "scale_by_novograd"
  b1: Any = hyper_field(0.9)
  b2: Any = hyper_field(0.25)
  eps: Any = hyper_field(1e-08)
  eps_root: Any = hyper_field(0.0)
  weight_decay: Any = hyper_field(0.0)
  mu_dtype: Any = static_field(default=None)

  def init_fn(self, params):
    nu = tree_map(lambda p: jnp.zeros([], accumulator_dtype(p.dtype, real=True)), params)
    return ScaleByNovogradState(count=zero_count(), mu=zeros_like(params, self.mu_dtype), nu=nu)

  def update_fn(self, updates, state, params=None, **extra_args):
    if params is None:
      raise ValueError("scale_by_novograd: `params` must be passed to update() (for weight_decay).")
    count = safe_increment(state.count)
    first = count == 1

    @per_dtype
    def scalars(cdt):
      rdt = real_dtype(cdt)
      b1, b2 = hyper(self.b1, cdt), hyper(self.b2, rdt)
      return dict(b1=jnp.where(first, jnp.zeros_like(b1), b1), b2=b2, one_minus_b2=np.asarray(1, rdt) - b2,
                  eps=hyper(self.eps, rdt), eps_root=hyper(self.eps_root, rdt), wd=hyper(self.weight_decay, cdt))

    def leaf(g, m, v, p):
      cdt = compute_dtype(g.dtype, m.dtype, p.dtype)
      rdt = real_dtype(cdt)
      k = scalars(cdt)
      gc = as_compute(g, cdt)
      # One second moment per layer (leaf): the squared norm of its gradient (eq. 1).
      sq_norm = jnp.sum(abs_sq(gc)).astype(rdt)
      v_new = jnp.where(first, sq_norm, k["b2"] * as_compute(v, rdt) + k["one_minus_b2"] * sq_norm)
      scaled = gc / (jnp.sqrt(v_new + k["eps_root"]) + k["eps"]).astype(cdt) + k["wd"] * as_compute(p, cdt)
      m_new = (k["b1"] * as_compute(m, cdt) + scaled).astype(m.dtype)
      return m_new.astype(g.dtype), m_new, v_new.astype(v.dtype)

    out, mu, nu = tree_map_n(leaf, 3, updates, state.mu, state.nu, params)
    return out, ScaleByNovogradState(count=count, mu=mu, nu=nu)


def scale_by_novograd(
    b1: Any = 0.9,
    b2: Any = 0.25,
    eps: Any = 1e-8,
    eps_root: Any = 0.0,
    weight_decay: Any = 0.0,
    mu_dtype: Any = None,
) -> Transformation:
  """NovoGrad's layer-wise normalised momentum.

  Per leaf (layer): ``v = ||g||^2`` at the first step, then ``v = b2 v + (1 - b2) ||g||^2``;
  ``m = b1 m + g / (sqrt(v + eps_root) + eps) + weight_decay * params`` (``m`` starts from the
  normalised gradient). The update is ``m``. ``params`` must be passed to ``update``.

  Args:
    b1: momentum of the normalised gradients.
    b2: decay of the per-layer second moment.
    eps: added to the denominator outside the square root.
    eps_root: added inside the square root.
    weight_decay: weight decay added inside the momentum (as in the paper).
    mu_dtype: dtype of the momentum (default: each parameter's dtype).

  Returns:
    A transformation with ``ScaleByNovogradState(count, mu, nu)``; ``nu`` holds one real scalar per
    leaf.

  References:
    Ginsburg et al., "Stochastic Gradient Methods with Layer-wise Adaptive Moments for Training of
    Deep Networks", 2019 (arXiv:1905.11286), Algorithm 1.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> tx = steadax.scale_by_novograd()
    >>> p = jnp.zeros(2)
    >>> tx.update(jnp.array([3.0, 4.0]), tx.init(p), p)[0]
    Array([0.6, 0.8], dtype=float32)
  """
  check_range("scale_by_novograd", "b1", b1, 0.0, 1.0, high_open=True)
  check_range("scale_by_novograd", "b2", b2, 0.0, 1.0, high_open=True)
  check_nonnegative("scale_by_novograd", "eps", eps)
  check_nonnegative("scale_by_novograd", "eps_root", eps_root)
  check_nonnegative("scale_by_novograd", "weight_decay", weight_decay)
  return ScaleByNovograd(b1, b2, eps, eps_root, weight_decay, mu_dtype=mu_dtype)


def _axis_view(vector: jax.Array, ndim: int, axis: int) -> jax.Array:
  """``vector`` reshaped to broadcast along ``axis`` of an ``ndim``-dimensional array."""
  shape = [1] * ndim
  shape[axis] = vector.shape[0]
  return jnp.reshape(vector, shape)


class ScaleBySM3(Transformation):
  name = "scale_by_sm3"
  b1: Any = hyper_field(0.9)
  b2: Any = hyper_field(1.0)
  eps: Any = hyper_field(1e-08)

  def init_fn(self, params):
    def covers(p):
      dtype = accumulator_dtype(p.dtype, real=True)
      # A scalar is its own (single) cover set; Optax keeps no accumulator for it and fails.
      if np.ndim(p) == 0:
        return [jnp.zeros([], dtype)]
      return [jnp.zeros((n,), dtype) for n in np.shape(p)]

    return ScaleBySM3State(mu=tree_map(covers, params), nu=zeros_like(params))

  def update_fn(self, updates, state, params=None, **extra_args):
    @per_dtype
    def scalars(cdt):
      rdt = real_dtype(cdt)
      b2 = hyper(self.b2, rdt)
      # b2 = 1 is SM3's sum of squares (Adagrad-like); b2 < 1 an exponential average.
      new_weight = jnp.where(b2 == 1, jnp.ones_like(b2), 1 - b2)
      b1 = hyper(self.b1, cdt)
      return b1, np.asarray(1, cdt) - b1, new_weight, b2, hyper(self.eps, rdt)

    def leaf(g, covers, m):
      cdt = compute_dtype(g.dtype, m.dtype)
      rdt = real_dtype(cdt)
      b1, one_minus_b1, new_weight, b2, eps = scalars(cdt)
      gc = as_compute(g, cdt)
      ndim = gc.ndim
      if ndim < 2:
        # One cover set per entry: the accumulator is exact (no minimum over covers needed).
        old = as_compute(covers[0], rdt)
      else:
        views = [_axis_view(as_compute(c, rdt), ndim, i) for i, c in enumerate(covers)]
        old = functools.reduce(jnp.minimum, views)
      accum = new_weight * abs_sq(gc).astype(rdt) + b2 * old
      inv_sqrt = jnp.where(accum > 0, jax.lax.rsqrt(accum + eps), jnp.zeros_like(accum))
      m_new = b1 * as_compute(m, cdt) + one_minus_b1 * gc * inv_sqrt.astype(cdt)
      if ndim < 2:
        new_covers = [accum.astype(covers[0].dtype)]
      else:
        new_covers = [
            jnp.max(accum, axis=tuple(a for a in range(ndim) if a != i), initial=0.0).astype(c.dtype)
            for i, c in enumerate(covers)
        ]
      m_new = m_new.astype(m.dtype)
      return m_new.astype(g.dtype), new_covers, m_new

    out, mu, nu = tree_map_n(leaf, 3, updates, state.mu, state.nu)
    return out, ScaleBySM3State(mu=mu, nu=nu)


def scale_by_sm3(b1: Any = 0.9, b2: Any = 1.0, eps: Any = 1e-8) -> Transformation:
  """Rescales updates by SM3's cover-set accumulators (Adagrad with sublinear memory).

  For an ``n x m`` leaf SM3 keeps ``n + m`` accumulators instead of ``n m``: each entry's
  second-moment estimate is the minimum over the accumulators of the rows and columns covering it,
  and each accumulator keeps the maximum of the estimates it covers. Vectors and scalars are their
  own covers (exact Adagrad). The preconditioned gradient is then averaged with momentum ``b1``.

  Args:
    b1: momentum of the preconditioned gradients (the update is the momentum).
    b2: 1 (the default) sums squared gradients as in the paper; below 1 the accumulators become
      exponential averages ``b2 acc + (1 - b2) g^2``.
    eps: added to the accumulator inside the inverse square root.

  Returns:
    A transformation with ``ScaleBySM3State(mu, nu)``: ``mu`` holds, per leaf, a list with one real
    vector per axis (one scalar for a scalar leaf), ``nu`` the momentum.

  References:
    Anil et al., "Memory-Efficient Adaptive Optimization", NeurIPS 2019 (arXiv:1901.11150), SM3-II.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> tx = steadax.scale_by_sm3()
    >>> [c.shape for c in tx.init(jnp.zeros((2, 3))).mu]
    [(2,), (3,)]
  """
  check_range("scale_by_sm3", "b1", b1, 0.0, 1.0, high_open=True)
  check_range("scale_by_sm3", "b2", b2, 0.0, 1.0)
  check_nonnegative("scale_by_sm3", "eps", eps)
  return ScaleBySM3(b1, b2, eps)
