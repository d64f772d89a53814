"""Preconditioning by root mean squares: RMSProp's (centred) statistics and AdaGrad's sum of squares.

References:
  Tieleman & Hinton, "Lecture 6.5 - RMSProp", COURSERA: Neural Networks for Machine Learning, 2012.
  Graves, "Generating Sequences With Recurrent Neural Networks", arXiv:1308.0850, 2013 (eq. 38-41,
  the centred variant).
  Duchi, Hazan & Singer, "Adaptive Subgradient Methods for Online Learning and Stochastic
  Optimization", JMLR 2011 (AdaGrad, eq. 1 with a diagonal matrix).
"""

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from .._core._docs import shared_args
from .._core._transformation import Transformation
from .._core._checks import check_decay, check_nonnegative
from .._core._leafwise import Scalars
from .._core._module import derived, derived_field, hyper_field, static_field
from .._core._policy import safe_increment, zero_count
from .._core._roles import COUNTER, accumulator, state_roles
from .._core._tree import filled_like, tree_map, zeros_like
from ._moments import abs_sq, moving_average, one_minus_pow
from .._core._types import Params, Updates

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


@state_roles(nu=accumulator(real=True))
class ScaleByRmsState(NamedTuple):
  """State of ``scale_by_rms`` without bias correction: the real second moment ``nu``.

  Attributes:
    nu: the second moment (real).
  """

  nu: Updates


@state_roles(count=COUNTER, nu=accumulator(real=True))
class ScaleByRmsWithCountState(NamedTuple):
  """State of ``scale_by_rms(bias_correction=True)``: the int32 count and ``nu``.

  Attributes:
    count: the number of updates so far (int32, saturating at its maximum).
    nu: the second moment (real).
  """

  count: jax.Array
  nu: Updates


@state_roles(mu=accumulator(), nu=accumulator(real=True))
class ScaleByRStdDevState(NamedTuple):
  """State of ``scale_by_stddev`` without bias correction: first moment ``mu``, real ``nu``.

  Attributes:
    mu: the first moment.
    nu: the second moment (real).
  """

  mu: Updates
  nu: Updates


@state_roles(count=COUNTER, mu=accumulator(), nu=accumulator(real=True))
class ScaleByRStdDevWithCountState(NamedTuple):
  """State of ``scale_by_stddev(bias_correction=True)``: the int32 count, ``mu`` and ``nu``.

  Attributes:
    count: the number of updates so far (int32, saturating at its maximum).
    mu: the first moment.
    nu: the second moment (real).
  """

  count: jax.Array
  mu: Updates
  nu: Updates


@state_roles(sum_of_squares=accumulator(real=True))
class ScaleByRssState(NamedTuple):
  """State of ``scale_by_rss``: the real running sum of squared updates.

  Attributes:
    sum_of_squares: the running sum of squared updates (real).
  """

  sum_of_squares: Params


def _inverse_root(v: jax.Array, eps: Any, eps_in_sqrt: bool) -> jax.Array:
  """Optax's scaling: ``rsqrt(v + eps)``, or ``1 / (sqrt(v) + eps)``."""
  if eps_in_sqrt:
    return jax.lax.rsqrt(v + eps)
  return 1 / (jnp.sqrt(v) + eps)


def _decay_scalars(tx: Any, count: Any) -> Scalars:
  """``decay``, its complement, ``eps`` and, with a count, the bias correction ``1 - decay**count``
  (Optax's, rounded per leaf: ``one_minus_pow``)."""
  c = None if count is None else one_minus_pow(tx.decay, count)
  return Scalars(decay=tx.decay, one_minus_decay=derived(tx, "one_minus_decay"), eps=tx.eps, c=c)


class ScaleByRms(Transformation):
  name = "scale_by_rms"
  elementwise = True
  decay: Any = hyper_field(0.9, check=check_decay)
  eps: Any = hyper_field(1e-08, check=check_nonnegative)
  initial_scale: Any = hyper_field(0.0, check=check_nonnegative)
  one_minus_decay: Any = derived_field(lambda t: 1 - t.decay)
  eps_in_sqrt: bool = static_field(default=True)
  bias_correction: bool = static_field(default=False)

  def init_fn(self, params):
    nu = filled_like(params, self.initial_scale, real=True)
    if self.bias_correction:
      return ScaleByRmsWithCountState(count=zero_count(), nu=nu)
    return ScaleByRmsState(nu=nu)

  def update_fn(self, updates, state, params=None, **extra_args):
    count: Any = safe_increment(state.count) if self.bias_correction else None

    def leaf(k, g, v):
      v = moving_average(k.decay, v, abs_sq(g), k.one_minus_decay)
      v_hat = v / k.c if self.bias_correction else v
      return _inverse_root(v_hat, k.eps, self.eps_in_sqrt) * g, v

    scalars = _decay_scalars(self, count)
    out, nu = self.leafwise(leaf, updates, state.nu, params=params, scalars=scalars)
    if self.bias_correction:
      return out, ScaleByRmsWithCountState(count=count, nu=nu)
    return out, ScaleByRmsState(nu=nu)


@shared_args
def scale_by_rms(
    decay: ArrayLike = 0.9,
    eps: ArrayLike = 1e-8,
    initial_scale: ArrayLike = 0.0,
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
  return ScaleByRms(decay, eps, initial_scale, eps_in_sqrt=eps_in_sqrt, bias_correction=bias_correction)


class ScaleByStddev(Transformation):
  name = "scale_by_stddev"
  elementwise = True
  decay: Any = hyper_field(0.9, check=check_decay)
  eps: Any = hyper_field(1e-08, check=check_nonnegative)
  initial_scale: Any = hyper_field(0.0, check=check_nonnegative)
  one_minus_decay: Any = derived_field(lambda t: 1 - t.decay)
  eps_in_sqrt: bool = static_field(default=True)
  bias_correction: bool = static_field(default=False)

  def init_fn(self, params):
    mu = zeros_like(params)
    nu = filled_like(params, self.initial_scale, real=True)
    if self.bias_correction:
      return ScaleByRStdDevWithCountState(count=zero_count(), mu=mu, nu=nu)
    return ScaleByRStdDevState(mu=mu, nu=nu)

  def update_fn(self, updates, state, params=None, **extra_args):
    count: Any = safe_increment(state.count) if self.bias_correction else None

    def leaf(k, g, m, v):
      m = moving_average(k.decay, m, g, k.one_minus_decay)
      v = moving_average(k.decay, v, abs_sq(g), k.one_minus_decay)
      m_hat, v_hat = (m / k.c, v / k.c) if self.bias_correction else (m, v)
      # A variance: where rounding makes it negative enough to take the root of a negative number
      # (a NaN in Optax), it is taken as zero; elsewhere it is Optax's.
      variance = v_hat - abs_sq(m_hat)
      below = variance + k.eps < 0 if self.eps_in_sqrt else variance < 0
      variance = jnp.where(below, 0, variance)
      return _inverse_root(variance, k.eps, self.eps_in_sqrt) * g, m, v

    scalars = _decay_scalars(self, count)
    out, mu, nu = self.leafwise(leaf, updates, state.mu, state.nu, params=params, scalars=scalars)
    if self.bias_correction:
      return out, ScaleByRStdDevWithCountState(count=count, mu=mu, nu=nu)
    return out, ScaleByRStdDevState(mu=mu, nu=nu)


@shared_args
def scale_by_stddev(
    decay: ArrayLike = 0.9,
    eps: ArrayLike = 1e-8,
    initial_scale: ArrayLike = 0.0,
    eps_in_sqrt: bool = True,
    bias_correction: bool = False,
) -> Transformation:
  """Divides updates by a running estimate of their standard deviation (centred RMSProp).

  ``mu = decay * mu + (1 - decay) g``, ``nu = decay * nu + (1 - decay) |g|^2`` and
  ``u = g / sqrt(nu - |mu|^2 + eps)`` (or ``eps`` outside the root), Graves (2013), eq. 38-41.
  Where rounding makes the variance ``nu - |mu|^2`` so negative that the root would be a NaN (as in
  Optax), it is taken as zero; elsewhere the arithmetic is Optax's. ``nu`` is real for complex
  parameters.

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
  return ScaleByStddev(decay, eps, initial_scale, eps_in_sqrt=eps_in_sqrt, bias_correction=bias_correction)


class ScaleByRss(Transformation):
  name = "scale_by_rss"
  elementwise = True
  initial_accumulator_value: Any = hyper_field(0.1, check=check_nonnegative)
  eps: Any = hyper_field(1e-07, check=check_nonnegative)

  def init_fn(self, params):
    return ScaleByRssState(sum_of_squares=filled_like(params, self.initial_accumulator_value, real=True))

  def update_fn(self, updates, state, params=None, **extra_args):
    def leaf(k, g, s):
      s = abs_sq(g) + s
      # A zero sum means the update is zero too: leave it at zero instead of dividing by sqrt(eps).
      return jnp.where(s > 0, jax.lax.rsqrt(s + k.eps), 0) * g, s

    scalars = Scalars(eps=self.eps)
    out, sums = self.leafwise(leaf, updates, state.sum_of_squares, params=params, scalars=scalars)
    return out, ScaleByRssState(sum_of_squares=sums)


@shared_args
def scale_by_rss(initial_accumulator_value: ArrayLike = 0.1, eps: ArrayLike = 1e-7) -> Transformation:
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
  return ScaleByRss(initial_accumulator_value, eps)
