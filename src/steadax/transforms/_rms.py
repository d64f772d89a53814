"""Preconditioning by root mean squares: RMSProp's (centred) statistics and AdaGrad's sum of squares.

References:
  Tieleman & Hinton, "Lecture 6.5 - RMSProp", COURSERA: Neural Networks for Machine Learning, 2012.
  Graves, "Generating Sequences With Recurrent Neural Networks", arXiv:1308.0850, 2013 (eq. 38-41,
  the centred variant).
  Duchi, Hazan & Singer, "Adaptive Subgradient Methods for Online Learning and Stochastic
  Optimization", JMLR 2011 (AdaGrad, eq. 1 with a diagonal matrix).
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
    "ScaleByRmsState",
    "ScaleByRmsWithCountState",
    "ScaleByRStdDevState",
    "ScaleByRStdDevWithCountState",
    "ScaleByRssState",
    "scale_by_rms",
    "scale_by_stddev",
    "scale_by_rss",
]


class ScaleByRmsState(NamedTuple):
  """State of ``scale_by_rms`` without bias correction: the real second moment ``nu``."""

  nu: Any


class ScaleByRmsWithCountState(NamedTuple):
  """State of ``scale_by_rms(bias_correction=True)``: the int32 count and ``nu``."""

  count: jax.Array
  nu: Any


class ScaleByRStdDevState(NamedTuple):
  """State of ``scale_by_stddev`` without bias correction: first moment ``mu``, real ``nu``."""

  mu: Any
  nu: Any


class ScaleByRStdDevWithCountState(NamedTuple):
  """State of ``scale_by_stddev(bias_correction=True)``: the int32 count, ``mu`` and ``nu``."""

  count: jax.Array
  mu: Any
  nu: Any


class ScaleByRssState(NamedTuple):
  """State of ``scale_by_rss``: the real running sum of squared updates."""

  sum_of_squares: Any


def filled_like(params: Any, value: Any, *, real: bool) -> Any:
  """Accumulators mirroring ``params`` (shape and sharding) holding ``value`` in each leaf's
  accumulator dtype; ``value`` may be traced (a hyperparameter leaf under jit)."""
  zeros = zeros_like(params, real=real)
  if isinstance(value, (int, float)) and not isinstance(value, bool) and value == 0:
    return zeros
  return tree_map(lambda z: z + hyper(value, z.dtype), zeros)


def _inverse_root(v: jax.Array, eps: Any, eps_in_sqrt: bool) -> jax.Array:
  if eps_in_sqrt:
    return jax.lax.rsqrt(v + eps)
  return jnp.reciprocal(jnp.sqrt(v) + eps)


def _check_decay_eps(owner: str, decay: Any, eps: Any, initial_scale: Any) -> None:
  check_range(owner, "decay", decay, 0.0, 1.0)
  check_nonnegative(owner, "eps", eps)
  check_nonnegative(owner, "initial_scale", initial_scale)


class ScaleByRms(Transformation):
  name = "scale_by_rms"
  decay: Any = hyper_field(0.9)
  eps: Any = hyper_field(1e-08)
  initial_scale: Any = hyper_field(0.0)
  eps_in_sqrt: bool = static_field(default=True)
  bias_correction: bool = static_field(default=False)

  def init_fn(self, params):
    nu = filled_like(params, self.initial_scale, real=True)
    if self.bias_correction:
      return ScaleByRmsWithCountState(count=zero_count(), nu=nu)
    return ScaleByRmsState(nu=nu)

  def update_fn(self, updates, state, params=None, **extra_args):
    count = safe_increment(state.count) if self.bias_correction else None

    @per_dtype
    def scalars(rdt):
      decay = hyper(self.decay, rdt)
      correction = None
      if self.bias_correction:
        correction = np.asarray(1, rdt) - decay ** count.astype(rdt)
      return decay, np.asarray(1, rdt) - decay, correction, hyper(self.eps, rdt)

    def leaf(g, v):
      cdt = compute_dtype(g.dtype, v.dtype)
      rdt = real_dtype(cdt)
      decay, one_minus_decay, correction, eps = scalars(rdt)
      gc = as_compute(g, cdt)
      v_new = decay * as_compute(v, rdt) + one_minus_decay * abs_sq(gc).astype(rdt)
      v_hat = v_new / correction if self.bias_correction else v_new
      scaling = _inverse_root(v_hat, eps, self.eps_in_sqrt)
      return (gc * scaling.astype(cdt)).astype(g.dtype), v_new.astype(v.dtype)

    out, nu = tree_map_n(leaf, 2, updates, state.nu)
    if self.bias_correction:
      return out, ScaleByRmsWithCountState(count=count, nu=nu)
    return out, ScaleByRmsState(nu=nu)


def scale_by_rms(
    decay: Any = 0.9,
    eps: Any = 1e-8,
    initial_scale: Any = 0.0,
    eps_in_sqrt: bool = True,
    bias_correction: bool = False,
) -> Transformation:
  """Divides updates by the root of an exponential moving average of their squares (RMSProp).

  ``nu = decay * nu + (1 - decay) |g|^2`` and ``u = g / sqrt(nu + eps)`` (``eps_in_sqrt``) or
  ``u = g / (sqrt(nu) + eps)``. With ``bias_correction``, ``nu`` is divided by ``1 - decay**t``
  first, so ``scale_by_rms(b2, eps_in_sqrt=False, bias_correction=True)`` equals
  ``scale_by_adam(b1=0, b2=b2)`` without storing a first moment. ``nu`` is real for complex
  parameters.

  Args:
    decay: the weight of the old second moment, in [0, 1].
    eps: added to the denominator, inside or outside the square root.
    initial_scale: the initial value of ``nu`` (non-negative).
    eps_in_sqrt: add ``eps`` inside the square root.
    bias_correction: divide ``nu`` by ``1 - decay**t`` (adds an int32 count to the state).

  Returns:
    A transformation with ``ScaleByRmsState(nu)``, or ``ScaleByRmsWithCountState(count, nu)`` with
    bias correction.

  References:
    Tieleman & Hinton, "Lecture 6.5 - RMSProp", COURSERA 2012.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> tx = steadax.scale_by_rms(decay=0.75, eps=0.0)
    >>> tx.update(jnp.array([2.0]), tx.init(jnp.zeros(1)))[0]
    Array([2.], dtype=float32)
  """
  _check_decay_eps("scale_by_rms", decay, eps, initial_scale)
  return ScaleByRms(decay, eps, initial_scale, eps_in_sqrt=eps_in_sqrt, bias_correction=bias_correction)


class ScaleByStddev(Transformation):
  name = "scale_by_stddev"
  decay: Any = hyper_field(0.9)
  eps: Any = hyper_field(1e-08)
  initial_scale: Any = hyper_field(0.0)
  eps_in_sqrt: bool = static_field(default=True)
  bias_correction: bool = static_field(default=False)

  def init_fn(self, params):
    mu = zeros_like(params)
    nu = filled_like(params, self.initial_scale, real=True)
    if self.bias_correction:
      return ScaleByRStdDevWithCountState(count=zero_count(), mu=mu, nu=nu)
    return ScaleByRStdDevState(mu=mu, nu=nu)

  def update_fn(self, updates, state, params=None, **extra_args):
    count = safe_increment(state.count) if self.bias_correction else None

    @per_dtype
    def scalars(rdt):
      decay = hyper(self.decay, rdt)
      correction = None
      if self.bias_correction:
        correction = np.asarray(1, rdt) - decay ** count.astype(rdt)
      return decay, np.asarray(1, rdt) - decay, correction, hyper(self.eps, rdt)

    def leaf(g, m, v):
      cdt = compute_dtype(g.dtype, m.dtype, v.dtype)
      rdt = real_dtype(cdt)
      decay, one_minus_decay, correction, eps = scalars(rdt)
      gc = as_compute(g, cdt)
      m_new = decay.astype(cdt) * as_compute(m, cdt) + one_minus_decay.astype(cdt) * gc
      v_new = decay * as_compute(v, rdt) + one_minus_decay * abs_sq(gc).astype(rdt)
      if self.bias_correction:
        m_hat, v_hat = m_new / correction.astype(cdt), v_new / correction
      else:
        m_hat, v_hat = m_new, v_new
      # A variance: clamp the rounding error of low-precision moments that could make it negative.
      variance = jnp.maximum(v_hat - abs_sq(m_hat).astype(rdt), np.asarray(0, rdt))
      scaling = _inverse_root(variance, eps, self.eps_in_sqrt)
      return (gc * scaling.astype(cdt)).astype(g.dtype), m_new.astype(m.dtype), v_new.astype(v.dtype)

    out, mu, nu = tree_map_n(leaf, 3, updates, state.mu, state.nu)
    if self.bias_correction:
      return out, ScaleByRStdDevWithCountState(count=count, mu=mu, nu=nu)
    return out, ScaleByRStdDevState(mu=mu, nu=nu)


def scale_by_stddev(
    decay: Any = 0.9,
    eps: Any = 1e-8,
    initial_scale: Any = 0.0,
    eps_in_sqrt: bool = True,
    bias_correction: bool = False,
) -> Transformation:
  """Divides updates by a running estimate of their standard deviation (centred RMSProp).

  ``mu = decay * mu + (1 - decay) g``, ``nu = decay * nu + (1 - decay) |g|^2`` and
  ``u = g / sqrt(nu - |mu|^2 + eps)`` (or ``eps`` outside the root), Graves (2013), eq. 38-41.
  The variance ``nu - |mu|^2`` is clamped at zero, so moments rounded to a low precision never give
  a NaN. ``nu`` is real for complex parameters.

  Args:
    decay: the weight of the old moments, in [0, 1].
    eps: added to the denominator, inside or outside the square root.
    initial_scale: the initial value of ``nu`` (non-negative).
    eps_in_sqrt: add ``eps`` inside the square root.
    bias_correction: divide both moments by ``1 - decay**t`` (adds an int32 count to the state).

  Returns:
    A transformation with ``ScaleByRStdDevState(mu, nu)``, or
    ``ScaleByRStdDevWithCountState(count, mu, nu)`` with bias correction.

  References:
    Graves, "Generating Sequences With Recurrent Neural Networks", arXiv:1308.0850, 2013.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> tx = steadax.scale_by_stddev(decay=0.5, eps=0.0)
    >>> tx.update(jnp.array([2.0]), tx.init(jnp.zeros(1)))[0]
    Array([2.], dtype=float32)
  """
  _check_decay_eps("scale_by_stddev", decay, eps, initial_scale)
  return ScaleByStddev(decay, eps, initial_scale, eps_in_sqrt=eps_in_sqrt, bias_correction=bias_correction)


class ScaleByRss(Transformation):
  name = "scale_by_rss"
  initial_accumulator_value: Any = hyper_field(0.1)
  eps: Any = hyper_field(1e-07)

  def init_fn(self, params):
    return ScaleByRssState(sum_of_squares=filled_like(params, self.initial_accumulator_value, real=True))

  def update_fn(self, updates, state, params=None, **extra_args):
    epsilons = per_dtype(lambda rdt: hyper(self.eps, rdt))

    def leaf(g, s):
      cdt = compute_dtype(g.dtype, s.dtype)
      rdt = real_dtype(cdt)
      gc = as_compute(g, cdt)
      s_new = as_compute(s, rdt) + abs_sq(gc).astype(rdt)
      # A zero sum means the update is zero too: leave it at zero instead of dividing by sqrt(eps).
      scaling = jnp.where(s_new > 0, jax.lax.rsqrt(s_new + epsilons(rdt)), np.asarray(0, rdt))
      return (gc * scaling.astype(cdt)).astype(g.dtype), s_new.astype(s.dtype)

    out, sums = tree_map_n(leaf, 2, updates, state.sum_of_squares)
    return out, ScaleByRssState(sum_of_squares=sums)


def scale_by_rss(initial_accumulator_value: Any = 0.1, eps: Any = 1e-7) -> Transformation:
  """Divides updates by the root of the sum of all their squares so far (AdaGrad).

  ``s = s + |g|^2`` and ``u = g / sqrt(s + eps)`` (0 where ``s`` is 0). ``s`` is real for complex
  parameters.

  Args:
    initial_accumulator_value: the initial value of the sum (non-negative).
    eps: added inside the square root.

  Returns:
    A transformation with ``ScaleByRssState(sum_of_squares)``.

  References:
    Duchi, Hazan & Singer, "Adaptive Subgradient Methods for Online Learning and Stochastic
    Optimization", JMLR 2011.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> tx = steadax.scale_by_rss(initial_accumulator_value=0.0, eps=0.0)
    >>> tx.update(jnp.array([3.0, -4.0]), tx.init(jnp.zeros(2)))[0]
    Array([ 1., -1.], dtype=float32)
  """
  check_nonnegative("scale_by_rss", "initial_accumulator_value", initial_accumulator_value)
  check_nonnegative("scale_by_rss", "eps", eps)
  return ScaleByRss(initial_accumulator_value, eps)
