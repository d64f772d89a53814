"""join_schedules: run schedules one after another, each restarted at its boundary."""

from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp

from .._core._docs import shared_args
from .._core._module import Module, hyper_field, static_field
from ._common import as_count, standard_promotion, static_steps
from .._core._types import Schedule

__all__ = ["join_schedules"]


class JoinedSchedule(Module):
  """``schedules[i](count - boundaries[i - 1])`` on ``[boundaries[i - 1], boundaries[i])``."""

  schedules: tuple = hyper_field()
  boundaries: tuple = static_field(default=())

  def __call__(self, count: Any) -> jax.Array:
    count = as_count(count)
    value = self.schedules[0](count)
    for boundary, schedule in zip(self.boundaries, self.schedules[1:]):
      piece = schedule(count - boundary)
      with standard_promotion():  # Optax's select: the pieces' values promote as JAX promotes them
        value = jnp.where(count < boundary, value, piece)
    return value


@shared_args
def join_schedules(schedules: Sequence[Schedule],
                   boundaries: Sequence[int | float]) -> JoinedSchedule:
  """Runs ``schedules`` in sequence, switching at ``boundaries``.

  Schedule ``i > 0`` is evaluated at ``count - boundaries[i - 1]`` (it starts from 0 at its
  boundary) and is used from ``boundaries[i - 1]`` on.

  Args:
    schedules: the schedules (callables of the step count); steadax schedules stay pytree leaves
      of the result, so their values can change without recompiling.
    boundaries: ``len(schedules) - 1`` sorted step counts (static).

  Returns:
    A schedule. Its value is Optax's: the pieces' values selected with ``jnp.where`` (so of their
    promoted type, weakly typed when every piece's is); the first piece's value itself when there
    is one piece.

  Example:
    >>> import steadax
    >>> sched = steadax.join_schedules(
    ...     [steadax.constant_schedule(1.0), steadax.linear_schedule(1.0, 0.0, 10)], [5])
    >>> print(sched(10))
    0.5
  """
  owner = "join_schedules"
  schedules = tuple(schedules)
  boundaries = tuple(static_steps(owner, "boundaries", b) for b in boundaries)
  if not schedules:
    raise ValueError(f"{owner}: schedules must not be empty.")
  for i, schedule in enumerate(schedules):
    if not callable(schedule):
      raise TypeError(f"{owner}: schedules[{i}] must be callable, got {type(schedule).__name__}.")
  if len(boundaries) != len(schedules) - 1:
    raise ValueError(
        f"{owner}: boundaries must hold len(schedules) - 1 = {len(schedules) - 1} entries, "
        f"got {len(boundaries)}."
    )
  if any(b > a for a, b in zip(boundaries[1:], boundaries[:-1])):
    raise ValueError(f"{owner}: boundaries must be sorted in increasing order, got {boundaries}.")
  return JoinedSchedule(schedules, boundaries)
