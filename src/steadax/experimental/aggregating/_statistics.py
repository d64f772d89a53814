"""Gradient-noise statistics of per-element gradients: mean, sum of squared deviations, variance.

``add_mean_variance_to_opt`` runs an optimizer on the mean of per-element gradients and keeps moving
averages of their mean and variance (``get_unbiased_mean_and_variance_ema`` reads them back).

References:
  Chan, Golub & LeVeque, "Updating Formulae and a Pairwise Algorithm for Computing Sample
  Variances", COMPSTAT 1982, eq. (2.1) (merging the sums of squared deviations of two batches).
"""

import math
from collections.abc import Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from ..._core._docs import shared_args
from ..._core._interface import EmptyState, GradientTransformation
from ..._core._stateless import identity
from ..._core._transformation import Transformation
from ..._core._checks import check_range
from ..._core._combine import chain
from ..._core._leafwise import Scalars, leafwise, saturating_cast
from ..._core._module import derived, derived_field, hyper_field, static_field
from ..._core._policy import hyper, key_path_str, real_dtype, safe_increment, scalar_stat_dtype, zero_count
from ..._core._roles import COUNTER, OTHER, SCALAR, accumulator, state_roles
from ..._core._tree import tree_map, zeros_like
from ...tree._state import tree_get
from ._process import Aggregator, _axes, _batch_stats, _check_axis, _check_steps, _map_with_path, process
from ..._core._types import OptState, Params

__all__ = [
    "get_batch_size_from_per_elt_updates",
    "PerElementMeanAndSumSqDiffGradsState",
    "get_per_element_mean_and_sum_sq_diff_grads",
    "PerElementMeanAndVarianceEMAState",
    "track_per_element_mean_and_variance_with_ema",
    "get_unbiased_mean_and_variance_ema",
    "add_mean_variance_to_opt",
]


def get_batch_size_from_per_elt_updates(per_elt_updates: Params, per_elt_axis: int | list[int]) -> int:
  """The number of elements along the per-element axes, checked equal across the leaves.

  Args:
    per_elt_updates: per-element updates.
    per_elt_axis: the per-element axis (or axes).

  Returns:
    The batch size, a Python int.

  Example:
    >>> import jax.numpy as jnp
    >>> from steadax.experimental import aggregating
    >>> aggregating.get_batch_size_from_per_elt_updates({"w": jnp.zeros((4, 2, 3))}, [0, 1])
    8
  """
  owner = "get_batch_size_from_per_elt_updates"
  axes = _axes(_check_axis(owner, per_elt_axis))
  sizes = []
  for path, leaf in jax.tree_util.tree_flatten_with_path(per_elt_updates)[0]:
    shape = np.shape(leaf)
    if any(not -len(shape) <= a < len(shape) for a in axes):
      raise ValueError(f"{owner}: update at {key_path_str(path)} has shape {shape}, without the axes {axes}.")
    sizes.append((key_path_str(path), math.prod(shape[a] for a in axes)))
  if not sizes:
    raise ValueError(f"{owner}: `per_elt_updates` has no leaves.")
  if any(size != sizes[0][1] for _, size in sizes):
    raise ValueError(f"{owner}: per-element updates must share one batch size, got {dict(sizes)}.")
  return sizes[0][1]


@state_roles(micro_step=COUNTER, ready=OTHER, mean_grads=accumulator(),
             sum_sq_diff_grads=accumulator(real=True))
class PerElementMeanAndSumSqDiffGradsState(NamedTuple):
  """State of ``get_per_element_mean_and_sum_sq_diff_grads`` with accumulation: the int32
  micro-step, whether the last step emitted, the running mean and the sum of squared deviations.

  Attributes:
    micro_step: the micro-step within the accumulation (int32).
    ready: bool scalar, True when the last step emitted the statistics.
    mean_grads: the running mean of the per-element gradients.
    sum_sq_diff_grads: the running sum of squared deviations from the mean.
  """

  micro_step: jax.Array
  ready: jax.Array
  mean_grads: Params
  sum_sq_diff_grads: Params


class _MeanAndSumSq(Transformation, Aggregator):
  name = "get_per_element_mean_and_sum_sq_diff_grads"
  updates_follow_params = False
  State = PerElementMeanAndSumSqDiffGradsState
  per_elt_axis: Any = static_field(default=0)
  accumulation_steps: int = static_field(default=1)

  def init_fn(self, params):
    if self.accumulation_steps == 1:
      return EmptyState()
    return PerElementMeanAndSumSqDiffGradsState(
        micro_step=zero_count(),
        ready=jnp.zeros([], jnp.bool_),
        mean_grads=zeros_like(params),
        sum_sq_diff_grads=zeros_like(params, real=True),
    )

  def update_fn(self, updates, state, params=None, **extra_args):
    axes = _axes(self.per_elt_axis)
    batch_size = get_batch_size_from_per_elt_updates(updates, self.per_elt_axis)
    means, sums = _map_with_path(lambda path, x: _batch_stats(self.name, x, axes, path), updates) or ({}, {})
    if self.accumulation_steps == 1:
      # Batch reductions (not leafwise: the batch axes are gone), computed in at least float32 and
      # returned in each leaf's dtype (its real dtype for the sums of squares), saturating: the sum
      # of squares of float16 gradients near 6e4 passes float16's range, and an infinite one would
      # turn the variance that track_per_element_mean_and_variance_with_ema keeps infinite.
      means = tree_map(lambda m, x: m.astype(x.dtype), means, updates)
      sums = tree_map(lambda s, x: saturating_cast(s, real_dtype(x.dtype)), sums, updates)
      return (means, {"sum_sq_diff_grads": sums, "sample_size": batch_size}), state

    seen = state.micro_step  # micro-batches merged so far, each of `batch_size` elements
    micro_step = safe_increment(seen)
    emit = micro_step == self.accumulation_steps

    def merge(k, batch_mean, mean, total, batch_sum):
      # Chan et al. 1982, Eq. 2.1: M2 = M2_a + M2_b + |delta|^2 n_a n_b / (n_a + n_b), with
      # n_a = seen * B, n_b = B; the mean moves by delta n_b / (n_a + n_b).
      delta = batch_mean - mean
      sq = jnp.real(delta * jnp.conj(delta)) if jnp.iscomplexobj(delta) else delta * delta
      new_mean = mean + delta / k.merged
      return new_mean, new_mean, total + batch_sum + sq * k.weight  # (unused update, *state)

    def scalars(dt):
      return Scalars(merged=micro_step, weight=hyper(seen, dt) * batch_size / hyper(micro_step, dt))

    _, new_mean, new_total = self.leafwise(
        merge, means, state.mean_grads, state.sum_sq_diff_grads, reads=(sums,), scalars=scalars)
    def emitted(tree):  # the statistics on the emitting step, zeros before
      return tree_map(lambda x: jnp.where(emit, x, jnp.zeros_like(x)), tree)

    def carried(tree):  # zeros after the emitting step, the statistics before
      return tree_map(lambda x: jnp.where(emit, jnp.zeros_like(x), x), tree)

    sample_size = jnp.where(emit, micro_step * batch_size, jnp.zeros_like(micro_step))
    outputs = (emitted(new_mean), {"sum_sq_diff_grads": emitted(new_total), "sample_size": sample_size})
    new_state = PerElementMeanAndSumSqDiffGradsState(
        micro_step=jnp.where(emit, jnp.zeros_like(micro_step), micro_step),
        ready=emit,
        mean_grads=carried(new_mean),
        sum_sq_diff_grads=carried(new_total),
    )
    return outputs, new_state


@shared_args
def get_per_element_mean_and_sum_sq_diff_grads(
    per_elt_axis: int | Sequence[int] = 0, accumulation_steps: int = 1
) -> Aggregator:
  """Aggregates per-element updates into their mean and their sum of squared deviations.

  With ``accumulation_steps > 1`` the statistics are merged across calls (Chan et al.) and emitted
  on every last one, with ``ready`` set in the state. The aggregator returns
  ``(mean, {"sum_sq_diff_grads": ..., "sample_size": ...})``: use it with
  ``process(..., aggregator_has_aux=True)`` and ``track_per_element_mean_and_variance_with_ema``.

  Args:
    per_elt_axis: the per-element axis (or axes).
    accumulation_steps: the number of calls merged.

  Returns:
    An ``Aggregator`` (stateless, or with ``PerElementMeanAndSumSqDiffGradsState``).

  Example:
    >>> import jax.numpy as jnp
    >>> from steadax.experimental import aggregating
    >>> agg = aggregating.get_per_element_mean_and_sum_sq_diff_grads()
    >>> (mean, aux), _ = agg.update(jnp.array([[1.0], [3.0]]), agg.init(jnp.zeros(1)))
    >>> mean, aux["sum_sq_diff_grads"], aux["sample_size"]
    (Array([2.], dtype=float32), Array([2.], dtype=float32), 2)

  References:
    Chan, Golub & LeVeque, "Updating Formulae and a Pairwise Algorithm for Computing Sample
    Variances", COMPSTAT 1982, eq. (2.1).
  """
  owner = "get_per_element_mean_and_sum_sq_diff_grads"
  return _MeanAndSumSq(per_elt_axis=_check_axis(owner, per_elt_axis),
                       accumulation_steps=_check_steps(owner, accumulation_steps))


@state_roles(count=COUNTER, ema_decay=SCALAR, mean_grads_ema=accumulator(),
             variance_grads_ema=accumulator(real=True))
class PerElementMeanAndVarianceEMAState(NamedTuple):
  """State of ``track_per_element_mean_and_variance_with_ema``: the int32 count, the decay, and the
  moving averages of the mean and of the variance of per-element gradients.

  Attributes:
    count: the number of updates so far (int32, saturating at its maximum).
    ema_decay: the decay of the moving averages.
    mean_grads_ema: the moving average of the mean of per-element gradients.
    variance_grads_ema: the moving average of their variance.
  """

  count: jax.Array
  ema_decay: jax.Array
  mean_grads_ema: Params
  variance_grads_ema: Params


class _TrackMeanVarianceEma(Transformation):
  name = "track_per_element_mean_and_variance_with_ema"
  State = PerElementMeanAndVarianceEMAState
  ema_decay: Any = hyper_field(0.9)
  one_minus_decay: Any = derived_field(lambda t: 1.0 - t.ema_decay)

  def init_fn(self, params):
    return PerElementMeanAndVarianceEMAState(
        count=zero_count(),
        ema_decay=jnp.asarray(hyper(self.ema_decay, scalar_stat_dtype(params))),
        mean_grads_ema=zeros_like(params),
        variance_grads_ema=zeros_like(params, real=True),
    )

  def update_fn(self, updates, state, params=None, **extra_args):
    missing = [k for k in ("sum_sq_diff_grads", "sample_size") if k not in extra_args]
    if missing:
      raise TypeError(
          f"{self.name}: update needs the extra arguments {missing}; use it inside "
          "aggregating.process with get_per_element_mean_and_sum_sq_diff_grads and "
          "aggregator_has_aux=True (as add_mean_variance_to_opt does)."
      )
    sums, sample_size = extra_args["sum_sq_diff_grads"], extra_args["sample_size"]

    # Optax's arithmetic: (1 - decay) x + decay y, with 1 - decay exact (a derived constant), and
    # the unbiased variance as the sum times 1 / (n - 1).
    def ema(k, new, old):  # the update output is unused: updates pass unchanged
      return new, k.one_minus_decay * new + k.decay * old

    def variance_ema(k, total, old):
      return ema(k, total * k.inverse_dof, old)

    def scalars(dt):
      return Scalars(decay=hyper(self.ema_decay, dt), one_minus_decay=hyper(derived(self, "one_minus_decay"), dt),
                     inverse_dof=hyper(1 / (sample_size - 1), dt))

    _, mean_ema = self.leafwise(ema, updates, state.mean_grads_ema, scalars=scalars)
    _, var_ema = self.leafwise(variance_ema, sums, state.variance_grads_ema, scalars=scalars)
    return updates, state._replace(
        count=safe_increment(state.count), mean_grads_ema=mean_ema, variance_grads_ema=var_ema
    )


@shared_args
def track_per_element_mean_and_variance_with_ema(ema_decay: ArrayLike = 0.9) -> GradientTransformation:
  """Tracks moving averages of the mean and the variance of per-element gradients.

  Reads the ``sum_sq_diff_grads`` and ``sample_size`` extra arguments that
  ``get_per_element_mean_and_sum_sq_diff_grads`` hands over through ``process``; the variance is
  the unbiased ``sum_sq_diff_grads / (sample_size - 1)``. Updates pass unchanged.

  Args:
    ema_decay: the decay of the moving averages.

  Returns:
    A transformation with ``PerElementMeanAndVarianceEMAState`` (read it back with
    ``get_unbiased_mean_and_variance_ema``).

  Example:
    >>> import jax.numpy as jnp
    >>> from steadax.experimental import aggregating
    >>> tx = aggregating.track_per_element_mean_and_variance_with_ema(0.5)
    >>> _, state = tx.update(jnp.array([2.0]), tx.init(jnp.zeros(1)),
    ...                      sum_sq_diff_grads=jnp.array([4.0]), sample_size=3)
    >>> state.mean_grads_ema, state.variance_grads_ema
    (Array([1.], dtype=float32), Array([1.], dtype=float32))
  """
  check_range("track_per_element_mean_and_variance_with_ema", "ema_decay", ema_decay, 0.0, 1.0)
  return _TrackMeanVarianceEma(ema_decay)


def get_unbiased_mean_and_variance_ema(state: OptState) -> tuple[Any, Any]:
  """The bias-corrected moving averages of ``track_per_element_mean_and_variance_with_ema``.

  Args:
    state: an optimizer state holding one ``PerElementMeanAndVarianceEMAState``.

  Returns:
    ``(mean, variance)``: the averages divided by ``1 - ema_decay ** count``, in their dtypes
    (infinite or NaN before the first update).

  Example:
    >>> import jax.numpy as jnp
    >>> from steadax.experimental import aggregating
    >>> tx = aggregating.track_per_element_mean_and_variance_with_ema(0.5)
    >>> _, state = tx.update(jnp.array([2.0]), tx.init(jnp.zeros(1)),
    ...                      sum_sq_diff_grads=jnp.array([4.0]), sample_size=3)
    >>> aggregating.get_unbiased_mean_and_variance_ema(state)
    (Array([2.], dtype=float32), Array([2.], dtype=float32))
  """
  found = tree_get(state, "PerElementMeanAndVarianceEMAState", None)
  if found is None:
    raise ValueError(
        "get_unbiased_mean_and_variance_ema: `state` holds no PerElementMeanAndVarianceEMAState "
        "(build the optimizer with add_mean_variance_to_opt)."
    )
  decay = found.ema_decay
  correction = 1 - decay ** hyper(found.count, decay.dtype)
  scalars = Scalars(correction=correction)
  unbias = lambda tree: leafwise(  # noqa: E731
      "get_unbiased_mean_and_variance_ema", lambda k, x: x / k.correction, tree, scalars=scalars)[0]
  return unbias(found.mean_grads_ema), unbias(found.variance_grads_ema)


@shared_args
def add_mean_variance_to_opt(
    opt: GradientTransformation,
    ema_decay: ArrayLike = 0.9,
    per_elt_axis: int | list[int] = 0,
    accumulation_steps: int = 1,
) -> GradientTransformation | Aggregator:
  """Runs ``opt`` on the mean of per-element gradients and tracks their mean and variance.

  Equivalent to ``process(identity(), get_per_element_mean_and_sum_sq_diff_grads(per_elt_axis,
  accumulation_steps), chain(track_per_element_mean_and_variance_with_ema(ema_decay), opt),
  aggregator_has_aux=True)``.

  Args:
    opt: the optimizer applied to the mean gradient.
    ema_decay: the decay of the moving averages.
    per_elt_axis: the per-element axis (or axes).
    accumulation_steps: the number of calls merged before ``opt`` runs.

  Returns:
    An ``Aggregator``; read the statistics with ``get_unbiased_mean_and_variance_ema(state)``.

  Example:
    >>> import jax, jax.numpy as jnp, steadax
    >>> from steadax.experimental import aggregating
    >>> opt = aggregating.add_mean_variance_to_opt(steadax.sgd(0.1), ema_decay=0.9)
    >>> params = jnp.zeros(2)
    >>> state = opt.init(params)
    >>> grads = jnp.array([[1.0, 0.0], [3.0, 2.0]])  # two per-example gradients
    >>> updates, state = opt.update(grads, state, params)
    >>> mean, variance = aggregating.get_unbiased_mean_and_variance_ema(state)
    >>> mean, variance
    (Array([2., 1.], dtype=float32), Array([2., 2.], dtype=float32))
  """
  return process(
      preprocessor=identity(),
      aggregator=get_per_element_mean_and_sum_sq_diff_grads(per_elt_axis, accumulation_steps),
      postprocessor=chain(track_per_element_mean_and_variance_with_ema(ema_decay), opt),
      aggregator_has_aux=True,
  )
