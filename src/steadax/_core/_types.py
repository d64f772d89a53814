"""Type aliases with Optax's names."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, Union

import jax
import numpy as np

__all__ = [
    "Params", "Updates", "OptState", "Schedule", "ScalarOrSchedule", "PyTree", "Numeric", "MaskOrFn",
]

PyTree = Any
Params = Any  # a pytree of arrays
Updates = Params
OptState = Any  # a pytree of arrays (NamedTuples of arrays)
Numeric = Union[jax.Array, np.ndarray, float, int]


class _ScheduleProtocol(Protocol):
  def __call__(self, count: jax.Array) -> jax.Array: ...


Schedule = Callable[[jax.Array], jax.Array]
ScalarOrSchedule = Union[float, jax.Array, Schedule]
# A mask argument (``weight_decay_mask``, ``masked``'s ``mask``): a tree of booleans matching the
# parameters (or a prefix of them), a callable building one from the parameters, or None for "all".
MaskOrFn = Union[Any, Callable[[Params], Any], None]
