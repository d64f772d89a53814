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
from .._core._module import derived, derived_field, hyper_field, static_field
from .._core._policy import cast, hyper, safe_increment, scalar_stat_dtype, zero_count
from .._core._roles import COUNTER, SCALAR, accumulator, state_roles
from .._core._tree import zeros_like
from .._core._types import Params, ScalarOrSchedule
from .._core._docs import shared_args
from ..transforms._moments import abs_sq
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


def _polyak_step(tx: Any, adapt: bool, count: Any, barf: Any, gamma: Any, iprod: Any, norm_sq: Any, lb: Any,
                 bc1: Any = None) -> tuple[Any, Any, Any]:
  """``(tau, -weight-decay factor, new lb)`` shared by momo (``bc1`` None) and momo_adam, in
  Optax's arithmetic (the bias correction ``bc1`` only where momo_adam has it)."""
  stat = barf.dtype
  alpha: Any
  if callable(tx.learning_rate):
    alpha = tx.learning_rate(count)
    one_plus = 1 + alpha * tx.weight_decay
    wd_factor = -(alpha * tx.weight_decay) / one_plus
  else:
    alpha, one_plus, wd_factor = tx.learning_rate, derived(tx, "one_plus"), derived(tx, "wd_factor")
  low = tx.lower_bound
  with jax.numpy_dtype_promotion("standard"):  # Optax's arithmetic on the scalars, as written
    scaled_lb = lb if bc1 is None else bc1 * lb
    if adapt:
      cap = one_plus * (barf - gamma) + iprod
      two = 2 * one_plus if bc1 is None else 2 * bc1 * one_plus
      this_lb = jnp.where(cap < one_plus * scaled_lb, jnp.maximum(cap / two, low), lb)
    else:
      this_lb = lb
    flat = norm_sq <= _FLAT
    t1 = jnp.maximum(one_plus * (barf - (this_lb if bc1 is None else bc1 * this_lb) - gamma) + iprod, 0.0)
    # Optax divides by the norm where it is 0 too (then discards the NaN): divided by 1 here.
    t1 = jnp.where(flat, 0.0, t1 / jnp.where(flat, np.ones((), stat), norm_sq))
    tau = jnp.minimum(alpha if bc1 is None else alpha / bc1, t1)
    if adapt:
      new_lb = (barf + iprod - gamma) - (1 / 2) * tau * norm_sq
      new_lb = jnp.maximum(new_lb if bc1 is None else new_lb / bc1, low)
    else:
      new_lb = lb
  return cast(tau, stat), wd_factor, cast(new_lb, stat)


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
  one_plus: Any = derived_field(lambda t: 1 + t.learning_rate * t.weight_decay)
  wd_factor: Any = derived_field(
      lambda t: -(t.learning_rate * t.weight_decay) / (1 + t.learning_rate * t.weight_decay))

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
    # The first step initialises the averages with the first loss and gradient (Optax's β_t: 1 - β_t
    # is formed from the selected value).
    with jax.numpy_dtype_promotion("standard"):
      beta = jnp.where(state.count == 0, 0.0, self.beta)
      one_minus_beta = 1 - beta
      barf = cast(beta * state.barf + one_minus_beta * value, stat)
    moment_scalars = Scalars(b=beta, one_minus_b=one_minus_beta)

    def leaf(k, g, m):
      return g, _momentum(k, g, m)

    _, exp_avg = self.leafwise(leaf, updates, state.exp_avg, scalars=moment_scalars)
    # Whole-tree reductions of the new average, summed in the statistics dtype.
    g_dot_p = tree_reduce(lambda k, g, p: real_inner(g, p), stat, updates, params)
    m_sq = tree_reduce(lambda k, m: sq_norm(m), stat, exp_avg)
    m_dot_p = tree_reduce(lambda k, m, p: real_inner(m, p), stat, exp_avg, params)
    with jax.numpy_dtype_promotion("standard"):
      gamma = cast(beta * state.gamma + one_minus_beta * g_dot_p, stat)
    tau, wd_factor, lb = _polyak_step(self, self.adapt_lower_bound, state.count, barf, gamma, m_dot_p, m_sq,
                                      state.lb)

    def step(k, m, p):
      # x' = (x - τ d) / (1 + λα), written as an update (Eq. 9).
      return k.wd * p - k.tau * m

    out, = self.leafwise(step, exp_avg, params=params, reads=(params,), scalars=Scalars(tau=tau, wd=wd_factor))
    return out, MomoState(exp_avg=exp_avg, barf=barf, gamma=gamma, lb=lb,
                          count=safe_increment(state.count))


def _adam_moments(k: Scalars, g: jax.Array, m: jax.Array, v: jax.Array) -> tuple[jax.Array, jax.Array]:
  """Adam's moments (Algorithm 3): ``m = b1 m + (1 - b1) g``, ``v = b2 v + (1 - b2) |g|^2``."""
  v = k.b2 * v + (k.one_minus_b2 * g * g if not jnp.iscomplexobj(g) else k.one_minus_b2 * abs_sq(g))
  return k.b1 * m + k.one_minus_b1 * g, v


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
  one_minus_b1: Any = derived_field(lambda t: 1 - t.b1)
  one_minus_b2: Any = derived_field(lambda t: 1 - t.b2)
  lower_bound: Any = hyper_field(0.0, check=_check_lower_bound)
  weight_decay: Any = hyper_field(0.0, check=check_nonnegative)
  adapt_lower_bound: bool = static_field(default=False)
  one_plus: Any = derived_field(lambda t: 1 + t.learning_rate * t.weight_decay)
  wd_factor: Any = derived_field(
      lambda t: -(t.learning_rate * t.weight_decay) / (1 + t.learning_rate * t.weight_decay))

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
    b1, b2 = self.b1, self.b2
    one_minus_b1, one_minus_b2 = derived(self, "one_minus_b1"), derived(self, "one_minus_b2")
    with jax.numpy_dtype_promotion("standard"):  # Optax's arithmetic on the scalars, as written
      barf = cast(b1 * state.barf + one_minus_b1 * value, stat)
      bc1, bc2 = cast(1 - b1**count, stat), cast(1 - b2**count, stat)
    scalars = Scalars(b1=b1, one_minus_b1=one_minus_b1, b2=b2, one_minus_b2=one_minus_b2, bc2=bc2,
                      eps=self.eps)

    def moments(k, g, m, v):
      m, v = _adam_moments(k, g, m, v)
      return g, m, v

    _, exp_avg, exp_avg_sq = self.leafwise(moments, updates, state.exp_avg, state.exp_avg_sq, scalars=scalars)
    # Whole-tree reductions of the new moments, summed in the statistics dtype.
    m_sq = tree_reduce(lambda k, m, v: real_inner(m, m / _precondition(k, v)), stat, exp_avg, exp_avg_sq,
                       scalars=scalars)
    g_dot_p = tree_reduce(lambda k, g, p: real_inner(g, p), stat, updates, params)
    m_dot_p = tree_reduce(lambda k, m, p: real_inner(m, p), stat, exp_avg, params)
    with jax.numpy_dtype_promotion("standard"):
      gamma = cast(b1 * state.gamma + one_minus_b1 * g_dot_p, stat)
    tau, wd_factor, lb = _polyak_step(self, self.adapt_lower_bound, state.count, barf, gamma, m_dot_p, m_sq,
                                      state.lb, bc1)

    def step(k, m, v, p):
      return k.wd * p - k.tau * m / _precondition(k, v)

    out, = self.leafwise(step, exp_avg, params=params, reads=(exp_avg_sq, params),
                         scalars=Scalars(tau=tau, wd=wd_factor, bc2=bc2, eps=self.eps))
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
