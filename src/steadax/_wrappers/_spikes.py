"""skip_spikes: skip (and count) steps whose loss or gradient norm jumps above its running level."""

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from .._core._adapters import as_inner
from .._core._docs import shared_args
from .._core._interface import GradientTransformation
from .._core._transformation import Transformation
from .._core._module import child_field, hyper_field, static_field
from .._core._policy import COUNTER_DTYPE, hyper, safe_increment, scalar_stat_dtype, zero_count
from .._core._roles import COUNTER, INNER, OTHER, SCALAR, state_roles
from ._branching import pinned_state, pinned_updates, sum_of_squares, zero_updates
from .._core._types import OptState

__all__ = ["SkipSpikesState", "skip_spikes"]

_WATCHED = ("value", "grad_norm")


@state_roles(count=COUNTER, mean=SCALAR, variance=SCALAR, consecutive_skips=COUNTER,
             total_skips=COUNTER, last_skipped=OTHER, inner_state=INNER)
class SkipSpikesState(NamedTuple):
  """State of ``skip_spikes``.

  Attributes:
    count: int32, observations folded into the running statistics (accepted steps).
    mean: the exponentially weighted mean of the watched quantity (a scalar, see ``skip_spikes``).
    variance: its exponentially weighted variance.
    consecutive_skips: int32, steps skipped in a row (0 after an accepted step).
    total_skips: int32, steps skipped since init (never reset; saturating).
    last_skipped: bool, whether the last step was skipped.
    inner_state: the inner transformation's state.
  """

  count: jax.Array
  mean: jax.Array
  variance: jax.Array
  consecutive_skips: jax.Array
  total_skips: jax.Array
  last_skipped: jax.Array
  inner_state: OptState


class _SkipSpikes(Transformation):
  name = "skip_spikes"
  elementwise = "children"
  requires_float = False
  State = SkipSpikesState
  inner: Any = child_field()
  factor: Any = hyper_field(2.0)
  num_std: Any = hyper_field(0.0)
  decay: Any = hyper_field(0.99)
  warmup_steps: Any = hyper_field(10)
  max_consecutive_skips: Any = hyper_field(10)
  watch: str = static_field(default="value")

  def init_fn(self, params):
    stat = scalar_stat_dtype(params)
    return SkipSpikesState(
        count=zero_count(),
        mean=jnp.zeros([], stat),
        variance=jnp.zeros([], stat),
        consecutive_skips=zero_count(),
        total_skips=zero_count(),
        last_skipped=jnp.asarray(False),
        inner_state=self.inner.init(params),
    )

  def _observe(self, updates, extra_args) -> jax.Array:
    if self.watch == "grad_norm":
      return jnp.sqrt(sum_of_squares(updates))
    if "value" not in extra_args:
      raise ValueError(
          "skip_spikes: watch='value' needs the loss: call "
          "update(grads, state, params, value=loss).")
    value = jnp.asarray(extra_args["value"])
    if value.shape != ():
      raise ValueError(f"skip_spikes: `value` must be a scalar loss, got shape {value.shape}.")
    return value

  def update_fn(self, updates, state, params=None, **extra_args):
    stat = state.mean.dtype
    # The observed loss or norm, whatever its dtype, enters the statistics' dtype fixed at init.
    x = self._observe(updates, extra_args).astype(stat)
    finite = jnp.isfinite(x)
    # Nothing is a spike before the first accepted value: the level is not defined yet (with
    # warmup_steps=0 every first value was judged against a level of 0 and skipped).
    warm = state.count >= jnp.maximum(hyper(self.warmup_steps, COUNTER_DTYPE),
                                      jnp.asarray(1, COUNTER_DTYPE))
    level = state.mean + hyper(self.num_std, stat) * jnp.sqrt(state.variance)
    spike = jnp.logical_or(
        jnp.logical_not(finite), jnp.logical_and(warm, x > hyper(self.factor, stat) * level))
    # After too many skips in a row the level itself has moved: accept, let the statistics follow.
    # A non-finite value says nothing about the level and would break the parameters: always
    # skipped.
    give_up = state.consecutive_skips >= hyper(self.max_consecutive_skips, COUNTER_DTYPE)
    skip = jnp.logical_or(jnp.logical_not(finite), jnp.logical_and(spike, jnp.logical_not(give_up)))

    def apply():
      new_updates, new_state = self.inner.update(updates, state.inner_state, params, **extra_args)
      where = f"{self.name} (inner transformation)"
      return (pinned_updates(where, updates, params, new_updates),
              pinned_state(where, state.inner_state, new_state))

    def reject():
      return zero_updates(updates, params), state.inner_state

    new_updates, inner_state = jax.lax.cond(skip, reject, apply)

    # Exponentially weighted mean and variance (Finch 2009), started at the first observation so
    # no bias correction is needed; a skipped or non-finite value leaves them unchanged.
    fold = jnp.logical_and(jnp.logical_not(skip), finite)
    first = state.count == 0
    alpha = jnp.where(first, jnp.ones([], stat), jnp.asarray(1, stat) - hyper(self.decay, stat))
    safe_x = jnp.where(finite, x, state.mean)
    diff = safe_x - state.mean
    increment = alpha * diff
    mean = state.mean + increment
    spread = (jnp.asarray(1, stat) - alpha) * (state.variance + diff * increment)
    variance = jnp.where(first, jnp.zeros([], stat), spread)
    return new_updates, SkipSpikesState(
        count=jnp.where(fold, safe_increment(state.count), state.count),
        mean=jnp.where(fold, mean, state.mean),
        variance=jnp.where(fold, variance, state.variance),
        consecutive_skips=jnp.where(skip, safe_increment(state.consecutive_skips), zero_count()),
        total_skips=jnp.where(skip, safe_increment(state.total_skips), state.total_skips),
        last_skipped=skip,
        inner_state=inner_state,
    )


@shared_args
def skip_spikes(
    inner: GradientTransformation,
    factor: float = 2.0,
    *,
    num_std: ArrayLike = 0.0,
    decay: ArrayLike = 0.99,
    warmup_steps: int = 10,
    max_consecutive_skips: int = 10,
    watch: str = "value",
) -> Transformation:
  """Skips (and counts) steps whose loss or gradient norm spikes above its running level.

  The watched quantity ``x`` is the loss passed as ``update(..., value=loss)`` (``watch="value"``)
  or the global norm of the incoming updates (``watch="grad_norm"``). The wrapper keeps an
  exponentially weighted mean ``m`` and variance ``v`` of ``x`` over the accepted steps and skips a
  step (zero updates, inner state untouched) when

      x > factor * (m + num_std * sqrt(v))      or      x is not finite,

  once ``warmup_steps`` values have been seen. ``factor=2, num_std=0`` skips a loss above twice its
  running mean (for a quantity that stays positive: a loss bounded below by 0, a norm);
  ``factor=1, num_std=3`` skips anything above mean + 3 standard deviations (for any sign).
  Skipped values do not enter the statistics; after ``max_consecutive_skips`` skips in a row the
  next finite step is accepted and its value does, so a lasting change of level is followed rather
  than blocked. A non-finite value is always skipped (the parameters stay finite), whatever the
  count of skips before it; nothing is judged a spike before the first accepted value.

  Args:
    inner: the transformation to protect.
    factor: the multiplier of the running level.
    num_std: standard deviations added to the running mean.
    decay: the weight of the old statistics, in [0, 1).
    warmup_steps: accepted steps before any finite value is judged a spike.
    max_consecutive_skips: the most steps skipped in a row.
    watch: ``"value"`` (the loss, required as the ``value`` keyword of ``update``) or
      ``"grad_norm"``.

  Every numeric argument is a leaf (a new value does not recompile); ``watch`` is static.

  Returns:
    A transformation with ``SkipSpikesState(count, mean, variance, consecutive_skips, total_skips,
    last_skipped, inner_state)``; the statistics are scalars of the widest floating dtype among the
    parameters (at least float32), counters are int32.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> tx = steadax.skip_spikes(steadax.sgd(0.1), factor=2.0, warmup_steps=2)
    >>> params = jnp.zeros(1)
    >>> state = tx.init(params)
    >>> for loss in (1.0, 1.1, 0.9, 50.0):
    ...   u, state = tx.update(jnp.ones(1), state, params, value=jnp.asarray(loss))
    >>> u, int(state.total_skips), bool(state.last_skipped)
    (Array([0.], dtype=float32), 1, True)

  References:
    Finch, `Incremental calculation of weighted mean and variance
    <https://fanf2.user.srcf.net/hermes/doc/antiforgery/stats.pdf>`_, 2009 (the exponentially
    weighted variance update). Chowdhery et al., `PaLM <https://arxiv.org/abs/2204.02311>`_, 2022,
    section 5.1: loss spikes in large-model training, handled there by restarting before the spike
    and skipping the batches around it.
  """
  if watch not in _WATCHED:
    raise ValueError(f"skip_spikes: watch must be one of {_WATCHED}, got {watch!r}.")
  counts = (("warmup_steps", warmup_steps), ("max_consecutive_skips", max_consecutive_skips))
  for arg, value in counts:
    if isinstance(value, int) and value < 0:
      raise ValueError(f"skip_spikes: {arg} must be >= 0, got {value}.")
  if isinstance(decay, float) and not 0.0 <= decay < 1.0:
    raise ValueError(f"skip_spikes: decay must be in [0, 1), got {decay}.")
  return _SkipSpikes(
      as_inner(inner, "skip_spikes", "inner"), factor, num_std, decay, warmup_steps,
      max_consecutive_skips, watch=watch)
