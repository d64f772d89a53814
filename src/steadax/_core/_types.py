"""Type aliases with Optax's names."""

from typing import Any, Protocol, Union

import jax
import numpy as np
from collections.abc import Callable, Iterable, Mapping, Sequence

__all__ = [
    "Params", "Updates", "OptState", "Schedule", "ScalarOrSchedule", "PyTree", "Numeric", "MaskOrFn",
    "ArrayTree", "Shape",
]

PyTree = Any
# A nest of arrays (lists, tuples, dicts, NamedTuples of arrays), as Optax and chex spell it: a real
# type, not Any, so signatures say "a tree of arrays" to IDEs and to tools that read annotations.
ArrayTree = Union[jax.Array, Iterable["ArrayTree"], Mapping[Any, "ArrayTree"]]
Params = ArrayTree  # a pytree of arrays
Updates = Params
OptState = ArrayTree  # a pytree of arrays (NamedTuples of arrays)
Shape = Sequence[int]
Numeric = Union[jax.Array, np.ndarray, float, int]


class _ScheduleProtocol(Protocol):
  def __call__(self, count: jax.Array) -> jax.Array: ...


Schedule = Callable[[jax.typing.ArrayLike], jax.typing.ArrayLike]
ScalarOrSchedule = Union[float, jax.Array, Schedule]
# A mask argument (``weight_decay_mask``, ``masked``'s ``mask``): a tree of booleans matching the
# parameters (or a prefix of them), a callable building one from the parameters, or None for "all".
MaskOrFn = Union[Any, Callable[[Params], Any], None]
