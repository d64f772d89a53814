"""Step-count schedules: constant, polynomial/linear, exponential, cosine and piecewise.

Every schedule is a ``Module``: its numeric arguments (``init_value``, ``end_value``, ``power``,
scales ...) are pytree leaves, so a jitted step that receives the optimizer as an argument does not
recompile when they change; step counts and boundaries shape the computation and are static.

Values are computed in float32 from the int32 step count (wider only when the user passed a wider
array), so a schedule returns the same dtype with ``jax_enable_x64`` on or off. Offsets and clips of
the count are taken in integers, then cast explicitly (the code runs under strict dtype promotion).
"""

from typing import Any

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from .._core._docs import shared_args
from .._core._module import Module, hyper_field, static_field
from .._core._types import Schedule
from ._common import as_count, cast, concrete_number, declared_dtype, static_steps, value_dtype

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
  """``count -> value``, in the value's declared dtype (Python floats as float32)."""

  value: Any = hyper_field()

  def __call__(self, count: Any) -> jax.Array:
    del count
    return cast(self.value, declared_dtype(self.value))


@shared_args
def constant_schedule(value: ArrayLike) -> ConstantSchedule:
  """A schedule that always returns ``value``.

  Args:
    value: the value (a leaf: changing it does not recompile a jitted step).

  Returns:
    A schedule (a callable of the step count). Python floats come back as float32, Python ints as
    int32, arrays in their own dtype.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> steadax.constant_schedule(0.5)(100)
    Array(0.5, dtype=float32)
  """
  return ConstantSchedule(value)


class PolynomialSchedule(Module):
  """``(init - end) * (1 - t / T) ** power + end`` with ``t`` the clipped steps since the start."""

  init_value: Any = hyper_field()
  end_value: Any = hyper_field()
  power: Any = hyper_field()
  transition_steps: Any = static_field()
  transition_begin: Any = static_field(default=0)

  def __call__(self, count: Any) -> jax.Array:
    dtype = value_dtype(self.init_value, self.end_value, self.power)
    count = as_count(count, self.transition_steps, self.transition_begin)
    steps = jnp.clip(count - self.transition_begin, 0, self.transition_steps)
    # (T - t) / T rather than 1 - t / T: exact 0 at the end even when XLA divides by multiplying
    # with 1 / T, so a fractional power never sees a negative base.
    frac = cast(self.transition_steps - steps, dtype) / self.transition_steps
    init, end = cast(self.init_value, dtype), cast(self.end_value, dtype)
    return (init - end) * frac ** cast(self.power, dtype) + end


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
    A schedule (a callable of the step count) returning float32 values.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> sched = steadax.polynomial_schedule(1.0, 0.0, power=2, transition_steps=10)
    >>> sched(5)
    Array(0.25, dtype=float32)
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
    A schedule (a callable of the step count) returning float32 values.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> steadax.linear_schedule(1.0, 0.0, transition_steps=4)(jnp.asarray(1))
    Array(0.75, dtype=float32)
  """
  return polynomial_schedule(init_value, end_value, 1, transition_steps, transition_begin)


class ExponentialDecay(Module):
  """``init * rate ** ((count - begin) / T)``, optionally floored exponent and bounded by ``end``."""

  init_value: Any = hyper_field()
  decay_rate: Any = hyper_field()
  end_value: Any = hyper_field(None)
  transition_steps: Any = static_field(default=1)
  transition_begin: Any = static_field(default=0)
  staircase: bool = static_field(default=False)

  def __call__(self, count: Any) -> jax.Array:
    dtype = value_dtype(self.init_value, self.decay_rate, self.end_value)
    shifted = as_count(count, self.transition_begin) - self.transition_begin
    exponent = cast(shifted, dtype) / self.transition_steps
    if self.staircase:
      exponent = jnp.floor(exponent)
    init, rate = cast(self.init_value, dtype), cast(self.decay_rate, dtype)
    value = jnp.where(shifted <= 0, init, init * rate ** exponent)
    if self.end_value is not None:
      # end_value bounds the decay from below when decaying, from above when growing.
      end = cast(self.end_value, dtype)
      value = jnp.where(rate < 1, jnp.maximum(value, end), jnp.minimum(value, end))
    # A zero rate means "no decay" (Optax returns the constant init_value then).
    return jnp.where(rate == 0, init, value)


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
    A schedule (a callable of the step count) returning float32 values.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> sched = steadax.exponential_decay(1.0, transition_steps=10, decay_rate=0.5)
    >>> sched(20)
    Array(0.25, dtype=float32)
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
  if transition_steps <= 0:
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

  init_value: Any = hyper_field()
  alpha: Any = hyper_field(0.0)
  exponent: Any = hyper_field(1.0)
  decay_steps: Any = static_field(default=1)

  def __call__(self, count: Any) -> jax.Array:
    dtype = value_dtype(self.init_value, self.alpha, self.exponent)
    t = cast(jnp.minimum(as_count(count, self.decay_steps), self.decay_steps), dtype)
    cosine = 0.5 * (1 + jnp.cos(jnp.pi * t / self.decay_steps))
    # Rounding can leave cos(pi) a hair above -1; a negative base with a fractional exponent is NaN.
    cosine = jnp.maximum(cosine, 0)
    alpha = cast(self.alpha, dtype)
    decayed = (1 - alpha) * cosine ** cast(self.exponent, dtype) + alpha
    return cast(self.init_value, dtype) * decayed


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
    A schedule (a callable of the step count) returning float32 values.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> steadax.cosine_decay_schedule(1.0, decay_steps=10)(5)
    Array(0.5, dtype=float32)

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

  init_value: Any = hyper_field()
  scales: tuple = hyper_field(())
  boundaries: tuple = static_field(default=())

  def __call__(self, count: Any) -> jax.Array:
    dtype = value_dtype(self.init_value, *self.scales)
    count = as_count(count, *self.boundaries)
    value = cast(self.init_value, dtype)
    for boundary, scale in zip(self.boundaries, self.scales):
      value = jnp.where(count < boundary, value, value * cast(scale, dtype))
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
    A schedule (a callable of the step count) returning float32 values.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> sched = steadax.piecewise_constant_schedule(1.0, {10: 0.1, 20: 0.5})
    >>> sched(25)
    Array(0.05, dtype=float32)
  """
  boundaries, scales = _boundaries_and_scales("piecewise_constant_schedule", boundaries_and_scales)
  return PiecewiseConstant(init_value, scales, boundaries)


def _interpolate(kind: str, start: jax.Array, end: jax.Array, pct: jax.Array) -> jax.Array:
  if kind == "linear":
    return start + (end - start) * pct
  return end + (start - end) * 0.5 * (jnp.cos(jnp.pi * pct) + 1)


class PiecewiseInterpolate(Module):
  """Linear or cosine interpolation between the cumulative products of the scales."""

  init_value: Any = hyper_field()
  scales: tuple = hyper_field(())
  boundaries: tuple = static_field(default=())
  interpolate_type: str = static_field(default="linear")

  def __call__(self, count: Any) -> jax.Array:
    dtype = value_dtype(self.init_value, *self.scales)
    count = as_count(count, *self.boundaries)
    values = [cast(self.init_value, dtype)]
    for scale in self.scales:
      values.append(values[-1] * cast(scale, dtype))
    bounds = (0, *self.boundaries)
    # Before step 0 the value is 0 and from the last boundary on it is the last product (Optax's).
    value = jnp.where(bounds[-1] <= count, values[-1], jnp.zeros([], dtype))
    for i in range(len(self.boundaries)):
      low, high = bounds[i], bounds[i + 1]
      pct = cast(count - low, dtype) / max(high - low, 1)
      inside = (low <= count) & (count < high)
      value = jnp.where(inside, _interpolate(self.interpolate_type, values[i], values[i + 1], pct), value)
    return value


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
    A schedule (a callable of the step count) returning float32 values.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> sched = steadax.piecewise_interpolate_schedule("linear", 1.0, {10: 0.5})
    >>> sched(5)
    Array(0.75, dtype=float32)
  """
  owner = "piecewise_interpolate_schedule"
  if interpolate_type not in ("linear", "cosine"):
    raise ValueError(
        f"{owner}: interpolate_type must be 'linear' or 'cosine', got {interpolate_type!r}."
    )
  boundaries, scales = _boundaries_and_scales(owner, boundaries_and_scales)
  return PiecewiseInterpolate(init_value, scales, boundaries, interpolate_type)
