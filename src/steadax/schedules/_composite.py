"""Schedules assembled from the basic ones: warmups, one-cycle and SGDR."""

from collections.abc import Iterable
from typing import Any

import jax.numpy as jnp
from jax.typing import ArrayLike

from .._core._checks import check_positive
from .._core._docs import shared_args
from .._core._types import Schedule
from ._common import concrete_number, standard_promotion, static_steps
from ._join import JoinedSchedule, join_schedules
from ._schedule import (
    PiecewiseInterpolate,
    cosine_decay_schedule,
    exponential_decay,
    linear_schedule,
    piecewise_interpolate_schedule,
)

__all__ = [
    "warmup_constant_schedule",
    "warmup_cosine_decay_schedule",
    "warmup_exponential_decay_schedule",
    "linear_onecycle_schedule",
    "cosine_onecycle_schedule",
    "sgdr_schedule",
]


@shared_args
def warmup_constant_schedule(init_value: ArrayLike, peak_value: ArrayLike, warmup_steps: int) -> Schedule:
  """Linear warmup from ``init_value`` to ``peak_value``, then constant at ``peak_value``.

  Args:
    init_value: the value at step 0.
    peak_value: the value from ``warmup_steps`` on.
    warmup_steps: the length of the warmup.

  Returns:
    A schedule (a callable of the step count) returning Optax's values and types.

  Example:
    >>> import steadax
    >>> print(steadax.warmup_constant_schedule(0.0, 1.0, warmup_steps=4)(2))
    0.5
  """
  return linear_schedule(init_value, peak_value, warmup_steps)


def _end_over_peak(end_value: Any, peak_value: Any) -> Any:
  """``end / peak``, 0 when peak is 0, computed as Optax computes it (Python arithmetic for Python
  numbers, the arrays' own for arrays); a traced peak (a schedule built inside jit) selects."""
  with standard_promotion():
    peak = concrete_number(peak_value)
    if peak is not None:
      return 0.0 if peak == 0 else end_value / peak_value
    zero = peak_value == 0
    return jnp.where(zero, 0.0, end_value / jnp.where(zero, 1.0, peak_value))


@shared_args
def warmup_cosine_decay_schedule(
    init_value: ArrayLike,
    peak_value: ArrayLike,
    warmup_steps: int | float,
    decay_steps: int | float,
    end_value: ArrayLike = 0.0,
    exponent: ArrayLike = 1.0,
) -> JoinedSchedule:
  """Linear warmup to ``peak_value``, then cosine decay to ``end_value``.

  Args:
    init_value: the value at step 0.
    peak_value: the value at the end of the warmup.
    warmup_steps: the length of the warmup.
    decay_steps: the total length of the schedule, warmup included (so the cosine part lasts
      ``decay_steps - warmup_steps`` steps); must exceed ``warmup_steps``.
    end_value: the value at and after ``decay_steps``.
    exponent: the power applied to the cosine factor.

  Returns:
    A schedule (a callable of the step count) returning Optax's values and types.

  Example:
    >>> import steadax
    >>> sched = steadax.warmup_cosine_decay_schedule(0.0, 1.0, warmup_steps=2, decay_steps=12)
    >>> print(sched(1), sched(7))
    0.5 0.5

  References:
    Loshchilov & Hutter, `SGDR: Stochastic Gradient Descent with Warm Restarts
    <https://arxiv.org/abs/1608.03983>`_, ICLR 2017, eq. (5); Goyal et al., `Accurate, Large
    Minibatch SGD <https://arxiv.org/abs/1706.02677>`_, 2017, section 2.2 (gradual warmup).
  """
  owner = "warmup_cosine_decay_schedule"
  warmup_steps = static_steps(owner, "warmup_steps", warmup_steps)
  decay_steps = static_steps(owner, "decay_steps", decay_steps)
  if not decay_steps > warmup_steps:
    raise ValueError(
        f"{owner}: decay_steps ({decay_steps}) must exceed warmup_steps ({warmup_steps}); "
        "decay_steps is the total length of the schedule, warmup included."
    )
  return join_schedules(
      [
          linear_schedule(init_value, peak_value, warmup_steps),
          cosine_decay_schedule(
              peak_value, decay_steps - warmup_steps, _end_over_peak(end_value, peak_value), exponent
          ),
      ],
      [warmup_steps],
  )


@shared_args
def warmup_exponential_decay_schedule(
    init_value: ArrayLike,
    peak_value: ArrayLike,
    warmup_steps: int | float,
    transition_steps: int,
    decay_rate: ArrayLike,
    transition_begin: int = 0,
    staircase: bool = False,
    end_value: ArrayLike | None = None,
) -> JoinedSchedule:
  """Linear warmup to ``peak_value``, then ``exponential_decay`` from ``peak_value``.

  Args:
    init_value: the value at step 0.
    peak_value: the value at the end of the warmup.
    warmup_steps: the length of the warmup.
    transition_steps: see ``exponential_decay``.
    decay_rate: see ``exponential_decay``.
    transition_begin: steps after the warmup to hold ``peak_value`` before decaying.
    staircase: decay in discrete steps.
    end_value: an optional bound on the decayed value.

  Returns:
    A schedule (a callable of the step count) returning Optax's values and types.

  Example:
    >>> import steadax
    >>> sched = steadax.warmup_exponential_decay_schedule(
    ...     0.0, 1.0, warmup_steps=2, transition_steps=1, decay_rate=0.5)
    >>> print(sched(1), sched(4))
    0.5 0.25
  """
  warmup_steps = static_steps("warmup_exponential_decay_schedule", "warmup_steps", warmup_steps)
  return join_schedules(
      [
          linear_schedule(init_value, peak_value, warmup_steps),
          exponential_decay(
              peak_value, transition_steps, decay_rate, transition_begin, staircase, end_value
          ),
      ],
      [warmup_steps],
  )


def _check_onecycle(owner: str, transition_steps: Any, div_factor: Any, final_div_factor: Any) -> int:
  transition_steps = static_steps(owner, "transition_steps", transition_steps)
  if transition_steps <= 0:
    raise ValueError(f"{owner}: transition_steps must be positive, got {transition_steps!r}.")
  check_positive(owner, "div_factor", div_factor)
  check_positive(owner, "final_div_factor", final_div_factor)
  return transition_steps


@shared_args
def linear_onecycle_schedule(
    transition_steps: int,
    peak_value: ArrayLike,
    pct_start: float = 0.3,
    pct_final: float = 0.85,
    div_factor: float = 25.0,
    final_div_factor: float = 1e4,
) -> PiecewiseInterpolate:
  """The one-cycle policy with linear phases.

  From ``peak_value / div_factor`` up to ``peak_value`` until ``pct_start * transition_steps``,
  back down to ``peak_value / div_factor`` until ``pct_final * transition_steps``, then down to
  ``peak_value / (div_factor * final_div_factor)`` at ``transition_steps``.

  Args:
    transition_steps: the length of the cycle; must be positive.
    peak_value: the largest value.
    pct_start: the fraction of the cycle spent increasing.
    pct_final: the fraction of the cycle at which the decrease back to the initial value ends.
    div_factor: the initial value is ``peak_value / div_factor``.
    final_div_factor: the final value is the initial value over ``final_div_factor``.

  Returns:
    A schedule (a callable of the step count) returning Optax's values and types.

  Example:
    >>> import steadax
    >>> sched = steadax.linear_onecycle_schedule(100, 1.0)
    >>> print(sched(30))
    1.0

  References:
    Smith & Topin, `Super-Convergence: Very Fast Training of Neural Networks Using Large Learning
    Rates <https://arxiv.org/abs/1708.07120>`_, 2017, section 3 (the 1cycle policy).
  """
  owner = "linear_onecycle_schedule"
  transition_steps = _check_onecycle(owner, transition_steps, div_factor, final_div_factor)
  with standard_promotion():
    init_value = peak_value / div_factor
  return piecewise_interpolate_schedule(
      "linear",
      init_value,
      {
          int(pct_start * transition_steps): div_factor,
          int(pct_final * transition_steps): 1.0 / div_factor,
          transition_steps: 1.0 / final_div_factor,
      },
  )


@shared_args
def cosine_onecycle_schedule(
    transition_steps: int,
    peak_value: ArrayLike,
    pct_start: float = 0.3,
    div_factor: float = 25.0,
    final_div_factor: float = 1e4,
) -> PiecewiseInterpolate:
  """The one-cycle policy with cosine phases.

  From ``peak_value / div_factor`` up to ``peak_value`` (cosine-shaped) until
  ``pct_start * transition_steps``, then down to ``peak_value / (div_factor * final_div_factor)``
  at ``transition_steps``.

  Args:
    transition_steps: the length of the cycle; must be positive.
    peak_value: the largest value.
    pct_start: the fraction of the cycle spent increasing.
    div_factor: the initial value is ``peak_value / div_factor``.
    final_div_factor: the final value is the initial value over ``final_div_factor``.

  Returns:
    A schedule (a callable of the step count) returning Optax's values and types.

  Example:
    >>> import steadax
    >>> sched = steadax.cosine_onecycle_schedule(100, 1.0)
    >>> print(sched(30))
    1.0

  References:
    Smith & Topin, `Super-Convergence: Very Fast Training of Neural Networks Using Large Learning
    Rates <https://arxiv.org/abs/1708.07120>`_, 2017, section 3 (the 1cycle policy).
  """
  owner = "cosine_onecycle_schedule"
  transition_steps = _check_onecycle(owner, transition_steps, div_factor, final_div_factor)
  with standard_promotion():
    init_value = peak_value / div_factor
  return piecewise_interpolate_schedule(
      "cosine",
      init_value,
      {
          int(pct_start * transition_steps): div_factor,
          transition_steps: 1.0 / (div_factor * final_div_factor),
      },
  )


@shared_args
def sgdr_schedule(cosine_kwargs: Iterable[dict[str, float]]) -> JoinedSchedule:
  """SGD with warm restarts: ``warmup_cosine_decay_schedule`` cycles one after another.

  Args:
    cosine_kwargs: one dict of ``warmup_cosine_decay_schedule`` arguments per cycle; each cycle
      lasts its ``decay_steps``.

  Returns:
    A schedule (a callable of the step count) returning Optax's values and types.

  Example:
    >>> import steadax
    >>> cycle = dict(init_value=0.0, peak_value=1.0, warmup_steps=1, decay_steps=5)
    >>> sched = steadax.sgdr_schedule([cycle, cycle])
    >>> print(sched(5), sched(6))
    0.0 1.0

  References:
    Loshchilov & Hutter, `SGDR: Stochastic Gradient Descent with Warm Restarts
    <https://arxiv.org/abs/1608.03983>`_, ICLR 2017, section 3.
  """
  owner = "sgdr_schedule"
  schedules, boundaries, step = [], [], 0
  for i, kwargs in enumerate(cosine_kwargs):
    if "decay_steps" not in kwargs:
      raise ValueError(f"{owner}: cosine_kwargs[{i}] needs a 'decay_steps' entry.")
    schedules.append(warmup_cosine_decay_schedule(**kwargs))
    step += static_steps(owner, f"cosine_kwargs[{i}]['decay_steps']", kwargs["decay_steps"])
    boundaries.append(step)
  if not schedules:
    raise ValueError(f"{owner}: cosine_kwargs must hold at least one cycle.")
  return join_schedules(schedules, boundaries[:-1])
