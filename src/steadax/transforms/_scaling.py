"""Scaling by constants, learning rates and schedules; sign; momentum (trace) and EMA."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from .._core._base import EmptyState, Transformation
from .._core._module import hyper_field, static_field
from .._core._leafwise import Scalars
from .._core._roles import COUNTER, accumulator, state_roles
from .._core._policy import (
    accumulator_dtype,
    as_compute,
    compute_dtype,
    hyper,
    per_dtype,
    safe_increment,
    zero_count,
)
from .._core._tree import tree_map, tree_map_n, zeros_like
from .._core._types import ScalarOrSchedule

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


class ScaleByScheduleState(NamedTuple):
  """State of ``scale_by_schedule``: the int32 step count."""

  count: jax.Array


class TraceState(NamedTuple):
  """State of ``trace``: the momentum buffer."""

  trace: Any


@state_roles(count=COUNTER, ema=accumulator("accumulator_dtype"))
class EmaState(NamedTuple):
  """State of ``ema``: the int32 count and the running average."""

  count: jax.Array
  ema: Any


def value_at(value: ScalarOrSchedule, count: jax.Array) -> Any:
  """A scalar hyperparameter, or a schedule evaluated at ``count``."""
  return value(count) if callable(value) else value


def scale_leaf(g: jax.Array, factor: Any) -> jax.Array:
  """``g * factor`` computed in at least float32 and returned in g's dtype."""
  cdt = compute_dtype(g.dtype)
  return (as_compute(g, cdt) * hyper(factor, cdt)).astype(g.dtype)


def scale_tree(updates: Any, factor: Any) -> Any:
  """``updates * factor`` leaf by leaf, the factor converted once per dtype."""
  factors = per_dtype(lambda cdt: hyper(factor, cdt))

  def leaf(g):
    cdt = compute_dtype(g.dtype)
    return (as_compute(g, cdt) * factors(cdt)).astype(g.dtype)

  return tree_map(leaf, updates)


class Scale(Transformation):
  name = "scale"
  step_size: Any = hyper_field()

  def update_fn(self, updates, state, params=None, **extra_args):
    return scale_tree(updates, self.step_size), state


def scale(step_size: Any) -> Transformation:
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
  step_size_fn: Any = hyper_field()

  def init_fn(self, params):
    return ScaleByScheduleState(count=zero_count())

  def update_fn(self, updates, state, params=None, **extra_args):
    updates = scale_tree(updates, self.step_size_fn(state.count))
    return updates, ScaleByScheduleState(count=safe_increment(state.count))


def scale_by_schedule(step_size_fn: Any) -> Transformation:
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
  learning_rate: Any = hyper_field()
  flip_sign: bool = static_field(default=True)

  def init_fn(self, params):
    if callable(self.learning_rate):
      return ScaleByScheduleState(count=zero_count())
    return EmptyState()

  def update_fn(self, updates, state, params=None, **extra_args):
    if callable(self.learning_rate):
      lr = self.learning_rate(state.count)
      state = ScaleByScheduleState(count=safe_increment(state.count))
    else:
      lr = self.learning_rate
    return scale_tree(updates, -lr if self.flip_sign else lr), state


def scale_by_learning_rate(learning_rate: ScalarOrSchedule = None, *, flip_sign: bool = True):
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
  if learning_rate is None:
    raise ValueError("scale_by_learning_rate: learning_rate is required (a scalar or a schedule).")
  return ScaleByLearningRate(learning_rate, flip_sign=flip_sign)


class ScaleBySign(Transformation):
  name = "scale_by_sign"

  def update_fn(self, updates, state, params=None, **extra_args):
    return tree_map(jnp.sign, updates), state


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
  decay: Any = hyper_field()
  nesterov: bool = static_field(default=False)
  accumulator_dtype: Any = static_field(default=None)

  def init_fn(self, params):
    return TraceState(trace=zeros_like(params, self.accumulator_dtype))

  def update_fn(self, updates, state, params=None, **extra_args):
    decays = per_dtype(lambda cdt: hyper(self.decay, cdt))

    def leaf(g, t):
      cdt = compute_dtype(g.dtype, t.dtype)
      d = decays(cdt)
      gc = as_compute(g, cdt)
      new_t = gc + d * as_compute(t, cdt)
      out = gc + d * new_t if self.nesterov else new_t
      return out.astype(g.dtype), new_t.astype(t.dtype)

    new_updates, new_trace = tree_map_n(leaf, 2, updates, state.trace)
    return new_updates, TraceState(trace=new_trace)


def trace(decay: Any, nesterov: bool = False, accumulator_dtype: Any = None) -> Transformation:
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
  decay: Any = hyper_field()
  debias: bool = static_field(default=True)
  accumulator_dtype: Any = static_field(default=None)

  State = EmaState

  def update_fn(self, updates, state, params=None, **extra_args):
    count = safe_increment(state.count)

    def leaf(k, g, e):
      e = k.decay * e + (1 - k.decay) * g
      return (e / k.correction if self.debias else e), e

    def scalars(dt):
      decay = hyper(self.decay, dt)
      return Scalars(decay=decay, correction=1 - decay ** count.astype(dt))

    out, new_ema = self.leafwise(leaf, updates, state.ema, params=params, scalars=scalars)
    return out, EmaState(count=count, ema=new_ema)


def ema(decay: Any, debias: bool = True, accumulator_dtype: Any = None) -> Transformation:
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
