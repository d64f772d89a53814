"""Reduce the learning-rate scale when the loss stops improving (the PyTorch/Keras scheduler, as a
transformation fed the loss through ``update(..., value=loss)``).

The loss is averaged over ``accumulation_size`` calls; each average is compared with the best one so
far. It counts as an improvement when it is below ``best - (rtol |best| + atol)``; after ``patience``
averages without one, the scale is multiplied by ``factor`` (not below ``min_scale``) and ``cooldown``
averages are ignored.

Unlike Optax 0.2.8, whose threshold is ``(1 - rtol) best - atol`` (upstream PR 1767), the relative
margin is taken of ``|best|``: for a negative loss Optax's threshold lies *above* the best value, so
a loss stuck at -5 keeps "improving" and the scale is never reduced. For non-negative losses the two
agree. ``best_value`` starts at the largest finite value of its dtype ("none yet"; Optax: +inf), so
the state stays finite for finiteness checks and ``jax_debug_infs``. All scalar state (``scale``,
``best_value``, ``avg_value``) takes one dtype fixed at init, the widest floating dtype among the
parameters (Optax: ``scale`` in the lowest, the values in the highest); counters are int32.
"""

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from .._core._docs import shared_args
from .._core._transformation import Transformation
from .._core._checks import check_nonnegative, check_range
from .._core._leafwise import Scalars
from .._core._module import hyper_field
from .._core._policy import COUNTER_DTYPE, hyper, safe_increment, scalar_stat_dtype, zero_count
from .._core._roles import COUNTER, SCALAR, state_roles
from ._reductions import scalar_value

__all__ = ["ReduceLROnPlateauState", "reduce_on_plateau"]


@state_roles(scale=SCALAR, best_value=SCALAR, plateau_count=COUNTER, cooldown_count=COUNTER, count=COUNTER,
             avg_value=SCALAR)
class ReduceLROnPlateauState(NamedTuple):
  """State of ``reduce_on_plateau`` (Optax's field names).

  Attributes:
    scale: the current multiplier of the updates (starts at 1).
    best_value: the best averaged loss so far (starts at the dtype's largest finite value, which
      means "none yet": the state stays finite; Optax starts at +inf).
    plateau_count: int32 number of averages since the last improvement.
    cooldown_count: int32 number of averages still ignored after a reduction.
    count: int32 number of losses in the current average.
    avg_value: the running average of the current accumulation window.
  """

  scale: jax.Array
  best_value: jax.Array
  plateau_count: jax.Array
  cooldown_count: jax.Array
  count: jax.Array
  avg_value: jax.Array


def _check_factor(owner: str, name: str, value: Any) -> None:
  check_range(owner, name, value, 0.0, 1.0, low_open=True, high_open=True)


def _check_rtol(owner: str, name: str, value: Any) -> None:
  check_range(owner, name, value, 0.0, 1.0)


def _check_at_least_one(owner: str, name: str, value: Any) -> None:
  check_range(owner, name, value, 1.0, np.inf)


class ReduceOnPlateau(Transformation):
  name = "reduce_on_plateau"
  elementwise = True
  State = ReduceLROnPlateauState
  requires_float = False
  factor: Any = hyper_field(0.1, check=_check_factor)
  patience: Any = hyper_field(10, check=check_nonnegative)
  rtol: Any = hyper_field(0.0001, check=_check_rtol)
  atol: Any = hyper_field(0.0, check=check_nonnegative)
  cooldown: Any = hyper_field(0, check=check_nonnegative)
  accumulation_size: Any = hyper_field(1, check=_check_at_least_one)
  min_scale: Any = hyper_field(0.0, check=check_nonnegative)

  def __post_init__(self):
    rtol, atol = self.rtol, self.atol
    if isinstance(rtol, (int, float)) and isinstance(atol, (int, float)) and rtol == 0 and atol == 0:
      raise ValueError(
          f"{self.name}: at least one of rtol and atol must be positive, got rtol={rtol}, atol={atol}.")

  def init_fn(self, params):
    # scale starts at 1 and best_value at the dtype's largest value: built here, checked against
    # the roles.
    stat = scalar_stat_dtype(params)
    return ReduceLROnPlateauState(
        scale=jnp.ones([], stat),
        best_value=jnp.full([], np.finfo(stat).max, stat),
        plateau_count=zero_count(),
        cooldown_count=zero_count(),
        count=zero_count(),
        avg_value=jnp.zeros([], stat),
    )

  def _evaluate(self, state: ReduceLROnPlateauState, avg: jax.Array):
    """The state after one complete average ``avg``: improvement, plateau and cooldown."""
    stat = state.scale.dtype
    best = state.best_value
    big = np.finfo(stat).max
    margin = hyper(self.rtol, stat) * jnp.abs(best) + hyper(self.atol, stat)
    # The relative margin is taken of |best|: (1 - rtol) best lies above a negative best.
    improved = jnp.where(best == big, avg <= big, avg < best - margin)
    best = jnp.where(improved, avg, best)
    plateau = jnp.where(improved, zero_count(), safe_increment(state.plateau_count))
    cooling = state.cooldown_count > 0
    reduce = jnp.logical_and(jnp.logical_not(cooling), plateau >= hyper(self.patience, COUNTER_DTYPE))
    scale = jnp.where(reduce, jnp.maximum(state.scale * hyper(self.factor, stat), hyper(self.min_scale, stat)),
                      state.scale)
    cooldown = jnp.where(cooling, state.cooldown_count - np.asarray(1, COUNTER_DTYPE),
                         jnp.where(reduce, hyper(self.cooldown, COUNTER_DTYPE), zero_count()))
    plateau = jnp.where(jnp.logical_or(cooling, reduce), zero_count(), plateau)
    return scale, best, plateau, cooldown

  def update_fn(self, updates, state, params=None, **extra_args):
    stat = state.avg_value.dtype
    value = scalar_value(self.name, extra_args.get("value"), stat)
    count = safe_increment(state.count)
    # The running mean of the window; the int32 counts as numbers.
    avg = (state.count.astype(stat) * state.avg_value + value) / count.astype(stat)
    complete = count >= hyper(self.accumulation_size, COUNTER_DTYPE)
    scale, best, plateau, cooldown = self._evaluate(state, avg)
    new_state = ReduceLROnPlateauState(
        scale=jnp.where(complete, scale, state.scale),
        best_value=jnp.where(complete, best, state.best_value),
        plateau_count=jnp.where(complete, plateau, state.plateau_count),
        cooldown_count=jnp.where(complete, cooldown, state.cooldown_count),
        count=jnp.where(complete, zero_count(), count),
        avg_value=jnp.where(complete, jnp.zeros_like(avg), avg),
    )
    # Each update keeps the incoming update's dtype.
    out, = self.leafwise(lambda k, g: k.scale * g, updates, scalars=Scalars(scale=new_state.scale))
    return out, new_state


@shared_args
def reduce_on_plateau(
    factor: float = 0.1,
    patience: ArrayLike = 10,
    rtol: float = 1e-4,
    atol: float = 0.0,
    cooldown: ArrayLike = 0,
    accumulation_size: ArrayLike = 1,
    min_scale: ArrayLike = 0.0,
) -> Transformation:
  """Scales updates by a factor that drops by ``factor`` whenever the loss plateaus.

  Pass the loss at every step: ``tx.update(grads, state, params, value=loss)``. Put it after the
  optimizer in a ``chain`` (it multiplies the final updates) or use its ``scale`` as a learning-rate
  multiplier.

  Args:
    factor: the multiplier applied to the scale on a plateau, in (0, 1).
    patience: number of averages without improvement before reducing.
    rtol: relative improvement needed, as a fraction of ``|best_value|``, in [0, 1].
    atol: absolute improvement needed (at least one of ``rtol``, ``atol`` is positive).
    cooldown: number of averages ignored after a reduction.
    accumulation_size: number of losses averaged before each comparison.
    min_scale: the scale never drops below this.

  Returns:
    A transformation with ``ReduceLROnPlateauState``; ``update`` needs ``value``.

  References:
    The ``ReduceLROnPlateau`` schedulers of PyTorch and Keras; Optax's ``reduce_on_plateau``, with
    the relative threshold fixed for negative losses (upstream PR 1767).

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> tx = steadax.contrib.reduce_on_plateau(factor=0.5, patience=2)
    >>> g = jnp.ones(1); s = tx.init(g)
    >>> for _ in range(3):  # -5 once (the best), then twice no improvement
    ...   u, s = tx.update(g, s, value=-5.0)
    >>> u, s.scale
    (Array([0.5], dtype=float32), Array(0.5, dtype=float32))
  """
  return ReduceOnPlateau(factor, patience, rtol, atol, cooldown, accumulation_size, min_scale)
