"""Scaling by constants, learning rates and schedules; sign; momentum (trace) and EMA."""

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike, DTypeLike

from .._core._docs import shared_args
from .._core._interface import EmptyState
from .._core._transformation import Transformation
from .._core._leafwise import Scalars, leafwise
from .._core._module import derived, derived_field, hyper_field, static_field
from .._core._policy import safe_increment, zero_count
from .._core._roles import COUNTER, accumulator, state_roles
from .._core._types import Params, ScalarOrSchedule, Schedule
from .._core._checks import check_schedule_or_scalar
from ._moments import moving_average, one_minus_pow

__all__ = [
    "ScaleState",
    "ScaleByScheduleState",
    "TraceState",
    "EmaState",
    "scale",
    "scale_by_learning_rate",
    "scale_by_schedule",
    "scale_by_sign",
    "trace",
    "ema",
    "scale_leaf",
    "scale_tree",
    "value_at",
]

ScaleState = EmptyState


@state_roles(count=COUNTER)
class ScaleByScheduleState(NamedTuple):
  """State of ``scale_by_schedule``: the int32 step count.

  Attributes:
    count: the step count (int32) the schedule is evaluated at.
  """

  count: jax.Array


@state_roles(trace=accumulator("accumulator_dtype"))
class TraceState(NamedTuple):
  """State of ``trace``: the momentum buffer.

  Attributes:
    trace: the momentum buffer, one leaf per parameter.
  """

  trace: Params


@state_roles(count=COUNTER, ema=accumulator("accumulator_dtype"))
class EmaState(NamedTuple):
  """State of ``ema``: the int32 count and the running average.

  Attributes:
    count: the number of updates so far (int32, saturating at its maximum).
    ema: the exponential moving average of the updates, one leaf per parameter.
  """

  count: jax.Array
  ema: Params


def value_at(value: ScalarOrSchedule, count: jax.Array) -> Any:
  """A scalar hyperparameter, or a schedule evaluated at ``count``."""
  return value(count) if callable(value) else value


def _scaled(k: Scalars, g: jax.Array) -> jax.Array:
  return k.factor * g


def _factor_scalars(factor: Any):
  return Scalars(factor=factor)  # leafwise casts it to each compute dtype, once


def scale_leaf(g: jax.Array, factor: Any) -> jax.Array:
  """``g * factor`` computed in at least float32 and returned in g's dtype.

  Example:
    >>> import jax.numpy as jnp
    >>> scale_leaf(jnp.ones(1, jnp.bfloat16), 0.5)
    Array([0.5], dtype=bfloat16)
  """
  return leafwise("scale", _scaled, g, scalars=_factor_scalars(factor))[0]


def scale_tree(updates: Any, factor: Any, params: Any = None) -> Any:
  """``updates * factor`` leaf by leaf on the per-leaf primitive (the factor converted once per
  dtype); each leaf comes back in its parameter's dtype (the update's when ``params`` is None).

  Example:
    >>> import jax.numpy as jnp
    >>> scale_tree({"a": jnp.ones(1)}, -2.0)
    {'a': Array([-2.], dtype=float32)}
  """
  return leafwise("scale", _scaled, updates, params=params, scalars=_factor_scalars(factor))[0]


class Scale(Transformation):
  name = "scale"
  elementwise = True
  step_size: Any = hyper_field()

  def update_fn(self, updates, state, params=None, **extra_args):
    out, = self.leafwise(_scaled, updates, params=params, scalars=_factor_scalars(self.step_size))
    return out, state


@shared_args
def scale(step_size: ArrayLike) -> Transformation:
  """Multiplies updates by a fixed ``step_size``.

  Args:
    step_size: a scalar (a leaf of the transformation: changing it does not recompile).

  Returns:
    A stateless transformation.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> tx = steadax.scale(-0.5)
    >>> tx.update(jnp.ones(2), tx.init(jnp.zeros(2)))[0]
    Array([-0.5, -0.5], dtype=float32)
  """
  return Scale(step_size)


class ScaleBySchedule(Transformation):
  name = "scale_by_schedule"
  elementwise = True
  State = ScaleByScheduleState
  step_size_fn: Any = hyper_field()

  def update_fn(self, updates, state, params=None, **extra_args):
    out, = self.leafwise(_scaled, updates, params=params,
                         scalars=_factor_scalars(self.step_size_fn(state.count)))
    return out, ScaleByScheduleState(count=safe_increment(state.count))


@shared_args
def scale_by_schedule(step_size_fn: Schedule) -> Transformation:
  """Multiplies updates by ``step_size_fn(count)``; the int32 count starts at 0.

  Args:
    step_size_fn: a schedule (any callable of the step count).

  Returns:
    A transformation with ``ScaleByScheduleState``.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> tx = steadax.scale_by_schedule(lambda c: 1.0 / (c.astype(jnp.float32) + 1))
    >>> s = tx.init(jnp.zeros(1)); _, s = tx.update(jnp.ones(1), s)
    >>> tx.update(jnp.ones(1), s)[0]
    Array([0.5], dtype=float32)
  """
  return ScaleBySchedule(step_size_fn)


class ScaleByLearningRate(Transformation):
  name = "scale_by_learning_rate"
  elementwise = True
  learning_rate: Any = hyper_field(check=check_schedule_or_scalar)
  flip_sign: bool = static_field(default=True)

  def init_fn(self, params):  # the state depends on whether the learning rate is a schedule
    if callable(self.learning_rate):
      return ScaleByScheduleState(count=zero_count())
    return EmptyState()

  def update_fn(self, updates, state, params=None, **extra_args):
    lr: Any
    if callable(self.learning_rate):
      lr = self.learning_rate(state.count)
      state = ScaleByScheduleState(count=safe_increment(state.count))
    else:
      lr = self.learning_rate
    out, = self.leafwise(_scaled, updates, params=params, scalars=_factor_scalars(-lr if self.flip_sign else lr))
    return out, state


@shared_args
def scale_by_learning_rate(learning_rate: ScalarOrSchedule | ArrayLike | None = None, *,
                           flip_sign: bool = True) -> Transformation:
  """Scales updates by the learning rate, negated by default (gradient descent).

  Args:
    learning_rate: a scalar or a schedule of the step count.
    flip_sign: multiply by ``-learning_rate`` (the default) instead of ``learning_rate``.

  Returns:
    A transformation; its state is ``EmptyState`` for a scalar and ``ScaleByScheduleState`` for a
    schedule, as in Optax.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> tx = steadax.scale_by_learning_rate(0.1)
    >>> tx.update(jnp.ones(1), tx.init(jnp.zeros(1)))[0]
    Array([-0.1], dtype=float32)
  """
  return ScaleByLearningRate(learning_rate, flip_sign=flip_sign)


class ScaleBySign(Transformation):
  name = "scale_by_sign"
  elementwise = True

  def update_fn(self, updates, state, params=None, **extra_args):
    out, = self.leafwise(lambda k, g: jnp.sign(g), updates, params=params)
    return out, state


@shared_args
def scale_by_sign() -> Transformation:
  """Replaces each update by its sign (signSGD, Bernstein et al. 2018).

  Returns:
    A stateless transformation.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> tx = steadax.scale_by_sign()
    >>> tx.update(jnp.array([-3.0, 0.0, 2.0]), tx.init(jnp.zeros(3)))[0]
    Array([-1.,  0.,  1.], dtype=float32)
  """
  return ScaleBySign()


class Trace(Transformation):
  name = "trace"
  elementwise = True
  decay: Any = hyper_field()
  nesterov: bool = static_field(default=False)
  accumulator_dtype: Any = static_field(default=None)

  State = TraceState

  def update_fn(self, updates, state, params=None, **extra_args):
    def leaf(k, g, t):
      # Heavy ball (Polyak 1964) and Nesterov's look-ahead (Sutskever et al. 2013, eq. 3-4).
      t = g + k.decay * t
      return (g + k.decay * t if self.nesterov else t), t

    scalars = Scalars(decay=self.decay)
    out, new_trace = self.leafwise(leaf, updates, state.trace, params=params, scalars=scalars)
    return out, TraceState(trace=new_trace)


@shared_args
def trace(decay: ArrayLike, nesterov: bool = False, accumulator_dtype: DTypeLike | None = None) -> Transformation:
  """Heavy-ball momentum: ``t = g + decay * t``; with ``nesterov``, returns ``g + decay * t``.

  Args:
    decay: the momentum coefficient.
    nesterov: use Nesterov's look-ahead form (Sutskever et al. 2013).
    accumulator_dtype: dtype of the buffer (default: each parameter's dtype).

  Returns:
    A transformation with ``TraceState``.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> tx = steadax.trace(0.5)
    >>> s = tx.init(jnp.zeros(1)); u, s = tx.update(jnp.ones(1), s)
    >>> tx.update(jnp.ones(1), s)[0]
    Array([1.5], dtype=float32)
  """
  return Trace(decay, nesterov=nesterov, accumulator_dtype=accumulator_dtype)


class Ema(Transformation):
  name = "ema"
  elementwise = True
  decay: Any = hyper_field()
  debias: bool = static_field(default=True)
  accumulator_dtype: Any = static_field(default=None)
  one_minus_decay: Any = derived_field(lambda t: 1 - t.decay)

  State = EmaState

  def update_fn(self, updates, state, params=None, **extra_args):
    count = safe_increment(state.count)

    def leaf(k, g, e):
      e = moving_average(k.decay, e, g, k.one_minus_decay)
      return (e / k.correction if self.debias else e), e

    scalars = Scalars(decay=self.decay, one_minus_decay=derived(self, "one_minus_decay"),
                      correction=one_minus_pow(self.decay, count))

    out, new_ema = self.leafwise(leaf, updates, state.ema, params=params, scalars=scalars)
    return out, EmaState(count=count, ema=new_ema)


@shared_args
def ema(decay: ArrayLike, debias: bool = True, accumulator_dtype: DTypeLike | None = None) -> Transformation:
  """Exponential moving average of the updates, optionally debiased.

  Args:
    decay: the weight of the old average.
    debias: divide by ``1 - decay**count`` (as Adam's first moment).
    accumulator_dtype: dtype of the average (default: each parameter's dtype).

  Returns:
    A transformation with ``EmaState``.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> tx = steadax.ema(0.9)
    >>> tx.update(jnp.ones(1), tx.init(jnp.zeros(1)))[0]
    Array([1.], dtype=float32)
  """
  return Ema(decay, debias=debias, accumulator_dtype=accumulator_dtype)
