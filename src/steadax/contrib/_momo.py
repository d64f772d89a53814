"""MoMo: momentum models for adaptive learning rates (Schaipp et al., ICML 2024).

SGD with momentum (``momo``) or Adam (``momo_adam``) whose step size is
``min(learning_rate, τ)``, with τ the Polyak-type step that makes a momentum model of the loss reach
a lower bound ``lb`` (Algorithm 1 and 3 of the paper; Eq. 9 for the decoupled weight decay):

    f̄ = EMA of losses,  d = EMA of gradients,  γ = EMA of Re<g, x>
    τ = max((1 + λα)(f̄ - lb - γ) + Re<d, x>, 0) / ||d||^2_{D^{-1}}
    x' = (x - min(α, τ) D^{-1} d) / (1 + λα)

``update`` needs the current loss: ``update(grads, state, params, value=loss)``.

The scalar statistics (``barf``, ``gamma``, ``lb``) take one dtype fixed at init: the widest
floating dtype among the parameters, at least float32. In Optax 0.2.8 they take the lowest dtype
(bfloat16 in a mixed tree), the first update widens ``gamma`` to float32 and returns a float32
update for a bfloat16 parameter; ``lax.scan`` and ``apply_if_finite`` then fail. The "no step"
threshold on ``||d||^2`` is float64's machine epsilon in both x64 modes, as in Optax.
"""

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from .._core._transformation import Transformation
from .._core._checks import check_nonnegative, check_range, check_schedule_or_scalar
from .._core._leafwise import Scalars, tree_reduce
from .._core._module import hyper_field, static_field
from .._core._policy import hyper, safe_increment, scalar_stat_dtype, zero_count
from .._core._roles import COUNTER, SCALAR, accumulator, state_roles
from .._core._tree import zeros_like
from .._core._types import Params, ScalarOrSchedule
from .._core._docs import shared_args
from ..transforms._moments import abs_sq
from ..transforms._scaling import value_at
from ._reductions import real_inner, scalar_value, sq_norm

__all__ = ["MomoState", "MomoAdamState", "momo", "momo_adam"]

# Below this ||d||^2 the model is flat: no step (float64's epsilon, whatever the x64 flag).
_FLAT = float(np.finfo(np.float64).eps)


@state_roles(exp_avg=accumulator(), barf=SCALAR, gamma=SCALAR, lb=SCALAR, count=COUNTER)
class MomoState(NamedTuple):
  """State of ``momo`` (Optax's field names).

  Attributes:
    exp_avg: momentum ``d`` of the gradients, one leaf per parameter.
    barf: EMA of the losses.
    gamma: EMA of ``Re<g, x>``.
    lb: the lower bound of the loss in use (adapted when ``adapt_lower_bound``).
    count: int32 number of updates so far.
  """

  exp_avg: Params
  barf: jax.Array
  gamma: jax.Array
  lb: jax.Array
  count: jax.Array


@state_roles(exp_avg=accumulator(), exp_avg_sq=accumulator(real=True), barf=SCALAR, gamma=SCALAR,
             lb=SCALAR, count=COUNTER)
class MomoAdamState(NamedTuple):
  """State of ``momo_adam`` (Optax's field names): ``MomoState`` plus the second moment.

  Attributes:
    exp_avg: first moment of the gradients.
    exp_avg_sq: second moment (real for complex parameters).
    barf: EMA of the losses.
    gamma: EMA of ``Re<g, x>``.
    lb: the lower bound of the loss in use.
    count: int32 number of updates so far.
  """

  exp_avg: Params
  exp_avg_sq: Params
  barf: jax.Array
  gamma: jax.Array
  lb: jax.Array
  count: jax.Array


def _polyak_step(learning_rate, weight_decay, lower_bound, adapt, count, barf, gamma, iprod,
                 norm_sq, lb, bc1):
  """``(tau, weight-decay factor, new lb)`` shared by momo (``bc1 = 1``) and momo_adam."""
  stat = barf.dtype
  alpha = hyper(value_at(learning_rate, count), stat)
  one_plus = 1 + alpha * hyper(weight_decay, stat)
  low = hyper(lower_bound, stat)
  if adapt:
    cap = one_plus * (barf - gamma) + iprod
    this_lb = jnp.where(cap < one_plus * bc1 * lb, jnp.maximum(cap / (2 * bc1 * one_plus), low), lb)
  else:
    this_lb = lb
  flat = norm_sq <= _FLAT
  t1 = jnp.maximum(one_plus * (barf - bc1 * this_lb - gamma) + iprod, np.zeros((), stat))
  t1 = jnp.where(flat, np.zeros((), stat), t1 / jnp.where(flat, np.ones((), stat), norm_sq))
  tau = jnp.minimum(alpha / bc1, t1)
  if adapt:
    new_lb = jnp.maximum(((barf + iprod - gamma) - tau * norm_sq / 2) / bc1, low)
  else:
    new_lb = lb
  return tau, (alpha * hyper(weight_decay, stat)) / one_plus, new_lb


def _check_decay_open(owner: str, name: str, value: Any) -> None:
  """A decay of the averages lies in [0, 1)."""
  check_range(owner, name, value, 0.0, 1.0, high_open=True)


def _check_lower_bound(owner: str, name: str, lower_bound: Any) -> None:
  if lower_bound is None or callable(lower_bound):
    raise TypeError(
        f"{owner}: {name} must be a number (a lower bound of the loss), got {lower_bound!r}.")
  # A real finite scalar; reuse the learning-rate check for shape and finiteness.
  check_schedule_or_scalar(owner, name, lower_bound)


def _momentum(k: Scalars, g: jax.Array, m: jax.Array) -> jax.Array:
  """MoMo's gradient average ``d = β d + (1 - β) g`` (Algorithm 1)."""
  return k.b * m + k.one_minus_b * g


class Momo(Transformation):
  name = "momo"
  elementwise = True
  State = MomoState
  learning_rate: Any = hyper_field(1.0, check=check_schedule_or_scalar)
  beta: Any = hyper_field(0.9, check=_check_decay_open)
  lower_bound: Any = hyper_field(0.0, check=_check_lower_bound)
  weight_decay: Any = hyper_field(0.0, check=check_nonnegative)
  adapt_lower_bound: bool = static_field(default=False)

  def init_fn(self, params):
    # lb starts at lower_bound (not zero): built here, checked against the roles.
    stat = scalar_stat_dtype(params)
    return MomoState(exp_avg=zeros_like(params), barf=jnp.zeros([], stat), gamma=jnp.zeros([], stat),
                     lb=jnp.asarray(hyper(self.lower_bound, stat)), count=zero_count())

  def update_fn(self, updates, state, params=None, **extra_args):
    if params is None:
      raise ValueError("momo: `params` must be passed to update().")
    stat = state.barf.dtype
    value = scalar_value(self.name, extra_args.get("value"), stat)
    # The first step initialises the averages with the first loss and gradient.
    beta = jnp.where(state.count == 0, np.zeros((), stat), hyper(self.beta, stat))
    barf = beta * state.barf + (1 - beta) * value
    moment_scalars = Scalars(b=beta, one_minus_b=1 - beta)

    # Whole-tree reductions with the new average d (recomputed in the compute dtype, before it is
    # rounded to the stored dtype), summed in the statistics dtype.
    trees = (updates, state.exp_avg, params)
    g_dot_p = tree_reduce(lambda k, g, m, p: real_inner(g, p), stat, *trees, scalars=moment_scalars)
    m_sq = tree_reduce(lambda k, g, m, p: sq_norm(_momentum(k, g, m)), stat, *trees, scalars=moment_scalars)
    m_dot_p = tree_reduce(lambda k, g, m, p: real_inner(_momentum(k, g, m), p), stat, *trees,
                          scalars=moment_scalars)
    gamma = beta * state.gamma + (1 - beta) * g_dot_p
    tau, decay, lb = _polyak_step(
        self.learning_rate, self.weight_decay, self.lower_bound, self.adapt_lower_bound,
        state.count, barf, gamma, m_dot_p, m_sq, state.lb, np.ones((), stat))

    def leaf(k, g, m, p):
      m = _momentum(k, g, m)
      # x' = (x - τ d) / (1 + λα), written as an update (Eq. 9).
      return -k.wd * p - k.tau * m, m

    out, exp_avg = self.leafwise(leaf, updates, state.exp_avg, params=params, reads=(params,),
                                 scalars=Scalars(b=beta, one_minus_b=1 - beta, tau=tau, wd=decay))
    return out, MomoState(exp_avg=exp_avg, barf=barf, gamma=gamma, lb=lb,
                          count=safe_increment(state.count))


def _adam_moments(k: Scalars, g: jax.Array, m: jax.Array, v: jax.Array) -> tuple[jax.Array, jax.Array]:
  """Adam's moments (Algorithm 3): ``m = b1 m + (1 - b1) g``, ``v = b2 v + (1 - b2) |g|^2``."""
  return k.b1 * m + k.one_minus_b1 * g, k.b2 * v + k.one_minus_b2 * abs_sq(g)


def _precondition(k: Scalars, v: jax.Array) -> jax.Array:
  """The diagonal ``D = eps + sqrt(v / (1 - b2^t))``."""
  return k.eps + jnp.sqrt(v / k.bc2)


class MomoAdam(Transformation):
  name = "momo_adam"
  elementwise = True
  State = MomoAdamState
  learning_rate: Any = hyper_field(0.01, check=check_schedule_or_scalar)
  b1: Any = hyper_field(0.9, check=_check_decay_open)
  b2: Any = hyper_field(0.999, check=_check_decay_open)
  eps: Any = hyper_field(1e-08, check=check_nonnegative)
  lower_bound: Any = hyper_field(0.0, check=_check_lower_bound)
  weight_decay: Any = hyper_field(0.0, check=check_nonnegative)
  adapt_lower_bound: bool = static_field(default=False)

  def init_fn(self, params):
    # lb starts at lower_bound (not zero): built here, checked against the roles.
    stat = scalar_stat_dtype(params)
    return MomoAdamState(
        exp_avg=zeros_like(params), exp_avg_sq=zeros_like(params, real=True),
        barf=jnp.zeros([], stat), gamma=jnp.zeros([], stat),
        lb=jnp.asarray(hyper(self.lower_bound, stat)), count=zero_count())

  def update_fn(self, updates, state, params=None, **extra_args):
    if params is None:
      raise ValueError("momo_adam: `params` must be passed to update().")
    stat = state.barf.dtype
    value = scalar_value(self.name, extra_args.get("value"), stat)
    count = safe_increment(state.count)
    t = count.astype(stat)  # the int32 count as an exponent of the bias corrections
    b1, b2 = hyper(self.b1, stat), hyper(self.b2, stat)
    barf = b1 * state.barf + (1 - b1) * value
    bc1, bc2 = 1 - b1**t, 1 - b2**t

    def scalars(dt, **more):
      return Scalars(b1=b1, one_minus_b1=1 - b1, b2=b2, one_minus_b2=1 - b2, bc2=bc2,
                     eps=hyper(self.eps, dt), **more)

    # Whole-tree reductions with the new moments (in the compute dtype, before rounding to the
    # stored dtype), summed in the statistics dtype.
    trees = (updates, state.exp_avg, state.exp_avg_sq, params)

    def weighted_sq(k, g, m, v, p):
      m, v = _adam_moments(k, g, m, v)
      return jnp.sum(abs_sq(m) / _precondition(k, v))

    g_dot_p = tree_reduce(lambda k, g, m, v, p: real_inner(g, p), stat, *trees, scalars=scalars)
    m_sq = tree_reduce(weighted_sq, stat, *trees, scalars=scalars)
    m_dot_p = tree_reduce(lambda k, g, m, v, p: real_inner(_adam_moments(k, g, m, v)[0], p), stat, *trees,
                          scalars=scalars)
    gamma = b1 * state.gamma + (1 - b1) * g_dot_p
    tau, decay, lb = _polyak_step(
        self.learning_rate, self.weight_decay, self.lower_bound, self.adapt_lower_bound,
        state.count, barf, gamma, m_dot_p, m_sq, state.lb, bc1)

    def leaf(k, g, m, v, p):
      m, v = _adam_moments(k, g, m, v)
      return -k.wd * p - k.tau * m / _precondition(k, v), m, v

    out, exp_avg, exp_avg_sq = self.leafwise(
        leaf, updates, state.exp_avg, state.exp_avg_sq, params=params, reads=(params,),
        scalars=lambda dt: scalars(dt, tau=tau, wd=decay))
    return out, MomoAdamState(exp_avg=exp_avg, exp_avg_sq=exp_avg_sq, barf=barf, gamma=gamma, lb=lb,
                              count=count)


@shared_args
def momo(
    learning_rate: ScalarOrSchedule = 1.0,
    beta: ArrayLike = 0.9,
    lower_bound: ArrayLike = 0.0,
    weight_decay: ArrayLike = 0.0,
    adapt_lower_bound: bool = False,
) -> Transformation:
  """SGD with momentum and MoMo's adaptive (Polyak-type) step size; needs ``value=loss``.

  The step size is ``min(learning_rate, τ)``, τ computed from the averaged losses, gradients and a
  lower bound of the loss (0 fits most losses), so ``learning_rate`` can be chosen large.

  Args:
    learning_rate: the largest step size (scalar or schedule of the count).
    beta: momentum of the averages, in [0, 1).
    lower_bound: a lower bound of the loss.
    weight_decay: decoupled weight decay.
    adapt_lower_bound: estimate the lower bound on the fly, starting from ``lower_bound`` (static).

  Returns:
    A transformation with ``MomoState``; ``update`` raises a ValueError without ``value``.

  References:
    Schaipp, Ohana, Eickenberg, Defazio & Gower, "MoMo: Momentum Models for Adaptive Learning
    Rates", ICML 2024 (Algorithm 1).

  Example:
    >>> import jax, jax.numpy as jnp, steadax
    >>> loss = lambda p: jnp.sum(p**2)
    >>> opt = steadax.contrib.momo()
    >>> params = jnp.array([1.0, 2.0, 3.0]); state = opt.init(params)
    >>> value, grads = jax.value_and_grad(loss)(params)
    >>> updates, state = opt.update(grads, state, params, value=value)
    >>> float(loss(steadax.apply_updates(params, updates)))  # the Polyak step halves the distance
    3.5
  """
  return Momo(learning_rate, beta, lower_bound, weight_decay, adapt_lower_bound=bool(adapt_lower_bound))


@shared_args
def momo_adam(
    learning_rate: ScalarOrSchedule = 1e-2,
    b1: ArrayLike = 0.9,
    b2: ArrayLike = 0.999,
    eps: ArrayLike = 1e-8,
    lower_bound: ArrayLike = 0.0,
    weight_decay: ArrayLike = 0.0,
    adapt_lower_bound: bool = False,
) -> Transformation:
  """Adam with MoMo's adaptive (Polyak-type) step size; needs ``value=loss``.

  Args:
    learning_rate: the largest step size (scalar or schedule of the count).
    b1: decay of the first moment and of the loss and ``Re<g, x>`` averages, in [0, 1).
    b2: <shared>
    eps: added to the square root of the (bias-corrected) second moment.
    lower_bound: a lower bound of the loss.
    weight_decay: decoupled weight decay (AdamW-style).
    adapt_lower_bound: estimate the lower bound on the fly, starting from ``lower_bound`` (static).

  Returns:
    A transformation with ``MomoAdamState``; ``update`` raises a ValueError without ``value``.

  References:
    Schaipp, Ohana, Eickenberg, Defazio & Gower, "MoMo: Momentum Models for Adaptive Learning
    Rates", ICML 2024 (Algorithm 3).

  Example:
    >>> import jax, jax.numpy as jnp, steadax
    >>> opt = steadax.contrib.momo_adam()
    >>> params = {"w": jnp.ones(2, jnp.bfloat16), "b": jnp.ones(1)}
    >>> state = opt.init(params)
    >>> updates, state = opt.update(params, state, params, value=1.5)
    >>> updates["w"].dtype, state.gamma.dtype
    (dtype(bfloat16), dtype('float32'))
  """
  return MomoAdam(learning_rate, b1, b2, eps, lower_bound, weight_decay,
                  adapt_lower_bound=bool(adapt_lower_bound))
