"""Step-count schedules: constant, polynomial/linear, exponential, cosine and piecewise.

Every schedule is a ``Module``: its numeric arguments (``init_value``, ``end_value``, ``power``,
scales ...) are pytree leaves, so a jitted step that receives the optimizer as an argument does not
recompile when they change; step counts and boundaries shape the computation and are static.

A schedule computes what Optax's computes, operation for operation, on its arguments as the user
gave them (the leaves are not canonicalized) under JAX's standard promotion (``_common``): so its
value has Optax's type (a Python number where Optax returns one, weakly typed where Optax's is,
float64 under x64 where Optax's is) and Optax's bits. Where Optax's arithmetic can produce a NaN,
a guard is added that leaves every other value unchanged (the comments say where).
"""

from typing import Any

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from .._core._docs import shared_args
from .._core._module import Module, hyper_field, static_field
from .._core._types import Schedule
from ._common import as_count, concrete_number, divide, standard_promotion, static_steps

__all__ = [
    "constant_schedule",
    "polynomial_schedule",
    "linear_schedule",
    "exponential_decay",
    "cosine_decay_schedule",
    "piecewise_constant_schedule",
    "piecewise_interpolate_schedule",
]


class ConstantSchedule(Module):
  """``count -> value``: the value itself, as Optax returns it."""

  value: Any = hyper_field(as_given=True)

  def __call__(self, count: Any) -> Any:
    del count
    return self.value


@shared_args
def constant_schedule(value: ArrayLike) -> ConstantSchedule:
  """A schedule that always returns ``value``.

  Args:
    value: the value (a leaf: changing it does not recompile a jitted step).

  Returns:
    A schedule (a callable of the step count) returning ``value`` itself, as Optax's does: a Python
    number stays one (JAX reads it as weakly typed), an array keeps its dtype.

  Example:
    >>> import steadax
    >>> steadax.constant_schedule(5)(0)  # the Python 5, as in Optax
    5
  """
  return ConstantSchedule(value)


class PolynomialSchedule(Module):
  """``(init - end) * (1 - t / T) ** power + end`` with ``t`` the clipped steps since the start."""

  init_value: Any = hyper_field(as_given=True)
  end_value: Any = hyper_field(as_given=True)
  power: Any = hyper_field(as_given=True)
  transition_steps: Any = static_field()
  transition_begin: Any = static_field(default=0)

  def __call__(self, count: Any) -> jax.Array:
    with standard_promotion():
      steps = jnp.clip(as_count(count) - self.transition_begin, 0, self.transition_steps)
      frac = 1 - divide(steps, self.transition_steps)
      # Rounding may leave 1 - t / T a hair below 0 at the end, where a fractional power would be
      # NaN; 0 and every positive value are kept as they are.
      frac = jnp.maximum(frac, 0)
      return (self.init_value - self.end_value) * frac ** self.power + self.end_value


@shared_args
def polynomial_schedule(
    init_value: ArrayLike,
    end_value: ArrayLike,
    power: ArrayLike,
    transition_steps: int | float,
    transition_begin: int | float = 0,
) -> Schedule:
  """Polynomial transition from ``init_value`` to ``end_value``.

  With ``t = clip(count - transition_begin, 0, transition_steps)`` the value is
  ``(init_value - end_value) * (1 - t / transition_steps) ** power + end_value``: ``init_value``
  before ``transition_begin``, ``end_value`` from ``transition_begin + transition_steps`` on.

  Args:
    init_value: the value before and at the start of the transition.
    end_value: the value at and after the end of the transition.
    power: the exponent of the polynomial (1 gives a linear schedule).
    transition_steps: the length of the transition; a non-positive value gives a constant schedule
      at ``init_value`` (as in Optax).
    transition_begin: how many steps to hold ``init_value`` first; negative values count as 0.

  Returns:
    A schedule (a callable of the step count) returning Optax's values and types: weakly typed
    float32 (float64 under x64) for Python numbers and a Python int count; strongly typed for an
    int32 array count (float32 in both x64 modes, as Optax's ``count / transition_steps`` gives).

  Example:
    >>> import steadax
    >>> sched = steadax.polynomial_schedule(1.0, 0.0, power=2, transition_steps=10)
    >>> print(sched(5), sched(5).weak_type)
    0.25 True
  """
  owner = "polynomial_schedule"
  transition_steps = static_steps(owner, "transition_steps", transition_steps)
  transition_begin = static_steps(owner, "transition_begin", transition_begin)
  if transition_steps <= 0:
    return ConstantSchedule(init_value)
  return PolynomialSchedule(
      init_value, end_value, power, transition_steps, max(transition_begin, 0)
  )


@shared_args
def linear_schedule(
    init_value: ArrayLike,
    end_value: ArrayLike,
    transition_steps: int | float,
    transition_begin: int | float = 0,
) -> Schedule:
  """Linear transition from ``init_value`` to ``end_value`` (``polynomial_schedule`` with power 1).

  Args:
    init_value: the value before and at the start of the transition.
    end_value: the value at and after the end of the transition.
    transition_steps: the length of the transition; a non-positive value gives a constant schedule.
    transition_begin: how many steps to hold ``init_value`` first.

  Returns:
    A schedule (a callable of the step count) with ``polynomial_schedule``'s value types.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> steadax.linear_schedule(1.0, 0.0, transition_steps=4)(jnp.asarray(1, jnp.int32))
    Array(0.75, dtype=float32)
    >>> print(steadax.linear_schedule(1.0, 0.0, transition_steps=4)(1))
    0.75
  """
  return polynomial_schedule(init_value, end_value, 1, transition_steps, transition_begin)


class ExponentialDecay(Module):
  """``init * rate ** ((count - begin) / T)``, optionally floored exponent and bounded by ``end``."""

  init_value: Any = hyper_field(as_given=True)
  decay_rate: Any = hyper_field(as_given=True)
  end_value: Any = hyper_field(None, as_given=True)
  transition_steps: Any = static_field(default=1)
  transition_begin: Any = static_field(default=0)
  staircase: bool = static_field(default=False)

  def __call__(self, count: Any) -> jax.Array:
    init, rate, end = self.init_value, self.decay_rate, self.end_value
    with standard_promotion():
      shifted = as_count(count) - self.transition_begin
      exponent = divide(shifted, self.transition_steps)
      if self.staircase:
        exponent = jnp.floor(exponent)
      value = jnp.where(shifted <= 0, init, init * jnp.power(rate, exponent))
      if end is not None:
        # end_value bounds the decay from below when decaying, from above when growing (Optax
        # picks the bound from the Python rate; a traced rate picks it in the program).
        concrete_rate = concrete_number(rate)
        if concrete_rate is not None:
          value = (jnp.maximum if concrete_rate < 1 else jnp.minimum)(value, end)
        else:
          value = jnp.where(rate < 1, jnp.maximum(value, end), jnp.minimum(value, end))
      if concrete_number(rate) is None:
        # A zero rate means "no decay": Optax's factory returns the constant init_value then, as
        # steadax's does for a concrete zero; a traced rate (built in jit, swept) decides here.
        value = jnp.where(rate == 0, init, value)
      return value


@shared_args
def exponential_decay(
    init_value: ArrayLike,
    transition_steps: int | float,
    decay_rate: ArrayLike,
    transition_begin: int | float = 0,
    staircase: bool = False,
    end_value: ArrayLike | None = None,
) -> Schedule:
  """Exponential decay: ``init_value * decay_rate ** ((count - transition_begin) / transition_steps)``.

  The value is ``init_value`` up to ``transition_begin``. With ``staircase`` the exponent is floored,
  so the value drops every ``transition_steps`` steps. ``end_value`` is a lower bound when
  ``decay_rate < 1`` and an upper bound otherwise. A zero ``decay_rate`` gives a constant schedule.

  Args:
    init_value: the initial value.
    transition_steps: the number of steps per factor of ``decay_rate``; a non-positive value gives
      a constant schedule at ``init_value`` (as in Optax).
    decay_rate: the factor per ``transition_steps`` steps; must not be negative unless
      ``staircase`` (a fractional power of a negative number is NaN).
    transition_begin: how many steps to hold ``init_value`` first; negative values count as 0.
    staircase: decay in discrete steps.
    end_value: an optional bound on the decayed value.

  Returns:
    A schedule (a callable of the step count) with ``polynomial_schedule``'s value types
    (``init_value`` itself, as in Optax, when ``transition_steps`` is not positive or
    ``decay_rate`` is 0).

  Example:
    >>> import steadax
    >>> sched = steadax.exponential_decay(1.0, transition_steps=10, decay_rate=0.5)
    >>> print(sched(20))
    0.25
  """
  owner = "exponential_decay"
  transition_steps = static_steps(owner, "transition_steps", transition_steps)
  transition_begin = static_steps(owner, "transition_begin", transition_begin)
  rate = concrete_number(decay_rate)
  if rate is not None and rate < 0 and not staircase:
    raise ValueError(
        f"{owner}: decay_rate must be non-negative without staircase (a fractional power of "
        f"{decay_rate!r} is NaN), got {decay_rate!r}."
    )
  if transition_steps <= 0 or rate == 0:
    return ConstantSchedule(init_value)
  return ExponentialDecay(
      init_value,
      decay_rate,
      end_value,
      transition_steps=transition_steps,
      transition_begin=max(transition_begin, 0),
      staircase=bool(staircase),
  )


class CosineDecay(Module):
  """``init * ((1 - alpha) * (0.5 * (1 + cos(pi * t / T))) ** exponent + alpha)``, ``t <= T``."""

  init_value: Any = hyper_field(as_given=True)
  alpha: Any = hyper_field(0.0, as_given=True)
  exponent: Any = hyper_field(1.0, as_given=True)
  decay_steps: Any = static_field(default=1)

  def __call__(self, count: Any) -> jax.Array:
    count = as_count(count)
    # Optax takes Python int step counts as floats here (its int(1e10) decay_steps fits then).
    decay_steps = float(self.decay_steps) if isinstance(self.decay_steps, int) else self.decay_steps
    count = float(count) if isinstance(count, int) else count
    with standard_promotion():
      count = jnp.minimum(count, decay_steps)
      cosine = 0.5 * (1 + jnp.cos(divide(jnp.pi * count, decay_steps)))
      # Rounding can leave cos(pi) a hair above -1, where a fractional exponent gives NaN;
      # 0 and every positive value are kept as they are.
      cosine = jnp.maximum(cosine, 0)
      decayed = (1 - self.alpha) * cosine ** self.exponent + self.alpha
      return self.init_value * decayed


@shared_args
def cosine_decay_schedule(
    init_value: ArrayLike,
    decay_steps: int | float,
    alpha: ArrayLike = 0.0,
    exponent: ArrayLike = 1.0,
) -> CosineDecay:
  """Cosine decay from ``init_value`` to ``alpha * init_value`` over ``decay_steps`` steps.

  The value is ``init_value * ((1 - alpha) * c ** exponent + alpha)`` with
  ``c = 0.5 * (1 + cos(pi * min(count, decay_steps) / decay_steps))``.

  Args:
    init_value: the initial value.
    decay_steps: the length of the decay; must be positive.
    alpha: the final value as a fraction of ``init_value``.
    exponent: the power applied to the cosine factor.

  Returns:
    A schedule (a callable of the step count) returning Optax's values and types: weakly typed
    float32 (float64 under x64) for Python numbers, whatever the integer count.

  Example:
    >>> import steadax
    >>> value = steadax.cosine_decay_schedule(1.0, decay_steps=10)(5)
    >>> print(value, value.weak_type)
    0.5 True

  References:
    Loshchilov & Hutter, `SGDR: Stochastic Gradient Descent with Warm Restarts
    <https://arxiv.org/abs/1608.03983>`_, ICLR 2017, eq. (5).
  """
  owner = "cosine_decay_schedule"
  decay_steps = static_steps(owner, "decay_steps", decay_steps)
  if not decay_steps > 0:
    raise ValueError(f"{owner}: decay_steps must be positive, got {decay_steps!r}.")
  return CosineDecay(init_value, alpha, exponent, decay_steps=decay_steps)


def _boundaries_and_scales(owner: str, boundaries_and_scales: Any) -> tuple[tuple, tuple]:
  if not boundaries_and_scales:
    return (), ()
  if not hasattr(boundaries_and_scales, "items"):
    raise TypeError(
        f"{owner}: boundaries_and_scales must be a mapping {{step: scale}}, "
        f"got {type(boundaries_and_scales).__name__}."
    )
  items = [
      (static_steps(owner, "a boundary of boundaries_and_scales", b), s)
      for b, s in boundaries_and_scales.items()
  ]
  items.sort(key=lambda item: item[0])
  for b, s in items:
    v = concrete_number(s)
    if v is not None and not v >= 0:
      raise ValueError(
          f"{owner}: boundaries_and_scales[{b}] must be a non-negative scale, got {s!r}."
      )
  return tuple(b for b, _ in items), tuple(s for _, s in items)


class PiecewiseConstant(Module):
  """``init_value`` times every scale whose boundary the count has reached."""

  init_value: Any = hyper_field(as_given=True)
  scales: tuple = hyper_field((), as_given=True)
  boundaries: tuple = static_field(default=())

  def __call__(self, count: Any) -> jax.Array:
    count = as_count(count)
    value = self.init_value
    with standard_promotion():
      for boundary, scale in zip(self.boundaries, self.scales):
        # Optax's arithmetic (an indicator, not a select), for its types and bits.
        indicator = jnp.maximum(0.0, jnp.sign(boundary - count))
        value = value * indicator + (1 - indicator) * scale * value
    return value


@shared_args
def piecewise_constant_schedule(
    init_value: ArrayLike,
    boundaries_and_scales: dict[int, float] | None = None,
) -> PiecewiseConstant:
  """A piecewise constant schedule: the value is scaled at each boundary.

  At step ``count`` the value is ``init_value`` times the product of the scales whose boundary is
  ``<= count``.

  Args:
    init_value: the value before the first boundary.
    boundaries_and_scales: ``{step: scale}``; scales must be non-negative. Boundaries are static,
      scales are leaves.

  Returns:
    A schedule (a callable of the step count) returning Optax's values and types: weakly typed
    float32 (float64 under x64) for Python numbers, whatever the integer count; ``init_value``
    itself when there is no boundary.

  Example:
    >>> import steadax
    >>> sched = steadax.piecewise_constant_schedule(1.0, {10: 0.1, 20: 0.5})
    >>> print(sched(25))
    0.05
  """
  boundaries, scales = _boundaries_and_scales("piecewise_constant_schedule", boundaries_and_scales)
  return PiecewiseConstant(init_value, scales, boundaries)


def _interpolate(kind: str, start: jax.Array, end: jax.Array, pct: jax.Array) -> jax.Array:
  if kind == "linear":
    return (end - start) * pct + start
  return end + (start - end) / 2.0 * (jnp.cos(jnp.pi * pct) + 1)


class PiecewiseInterpolate(Module):
  """Linear or cosine interpolation between the cumulative products of the scales."""

  init_value: Any = hyper_field(as_given=True)
  scales: tuple = hyper_field((), as_given=True)
  boundaries: tuple = static_field(default=())
  interpolate_type: str = static_field(default="linear")

  def __call__(self, count: Any) -> jax.Array:
    count = as_count(count)
    with standard_promotion():
      # Optax's vectorised form: one interval holds the count (a one-hot dot, exact), or none;
      # before step 0 the value is 0, from the last boundary on the last product.
      bounds = jnp.stack((0, *self.boundaries))
      values = jnp.cumprod(jnp.stack((self.init_value, *self.scales)))
      sizes = jnp.maximum(bounds[1:] - bounds[:-1], 1)
      inside = jnp.logical_and(bounds[:-1] <= count, count < bounds[1:])
      pct = divide(count - bounds[:-1], sizes)
      between = _interpolate(self.interpolate_type, values[:-1], values[1:], pct)
      return inside.dot(between) + (bounds[-1] <= count) * values[-1]


@shared_args
def piecewise_interpolate_schedule(
    interpolate_type: str,
    init_value: ArrayLike,
    boundaries_and_scales: dict[int, float] | None = None,
) -> PiecewiseInterpolate:
  """Interpolates (linearly or along a cosine) between values scaled at each boundary.

  The values at the boundaries are ``init_value`` times the cumulative product of the scales; in
  between, the schedule interpolates from one to the next, and it holds the last value after the
  last boundary.

  Args:
    interpolate_type: ``"linear"`` or ``"cosine"``.
    init_value: the value at step 0.
    boundaries_and_scales: ``{step: scale}``; scales must be non-negative.

  Returns:
    A schedule (a callable of the step count) returning Optax's values and types: float32
    (float64 under x64), not weakly typed (Optax stacks the values into an array).

  Example:
    >>> import steadax
    >>> sched = steadax.piecewise_interpolate_schedule("linear", 1.0, {10: 0.5})
    >>> print(sched(5))
    0.75
  """
  owner = "piecewise_interpolate_schedule"
  if interpolate_type not in ("linear", "cosine"):
    raise ValueError(
        f"{owner}: interpolate_type must be 'linear' or 'cosine', got {interpolate_type!r}."
    )
  boundaries, scales = _boundaries_and_scales(owner, boundaries_and_scales)
  return PiecewiseInterpolate(init_value, scales, boundaries, interpolate_type)
