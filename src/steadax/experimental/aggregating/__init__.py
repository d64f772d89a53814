"""Aggregation of per-element gradients (Optax's ``optax.experimental.aggregating``)."""

from typing import TYPE_CHECKING as _TYPE_CHECKING

from ..._core._lazy import lazy_surface as _lazy_surface

# The re-exports, read by pyright, IDEs and the API reference as written, and at run time by
# ``lazy_surface``: each name is imported when first read (``_core/_lazy.py``).
if _TYPE_CHECKING:
  from ._process import (
      PerElementUpdates as PerElementUpdates,
      AggregatedUpdates as AggregatedUpdates,
      MaybeAxis as MaybeAxis,
      AggregatorUpdateFn as AggregatorUpdateFn,
      Aggregator as Aggregator,
      process as process,
      average_per_element_updates as average_per_element_updates,
      AccumulateAvgUpdatesState as AccumulateAvgUpdatesState,
      accumulate_avg_updates as accumulate_avg_updates,
      average_incrementally_updates as average_incrementally_updates,
  )
  from ._statistics import (
      get_batch_size_from_per_elt_updates as get_batch_size_from_per_elt_updates,
      PerElementMeanAndSumSqDiffGradsState as PerElementMeanAndSumSqDiffGradsState,
      get_per_element_mean_and_sum_sq_diff_grads as get_per_element_mean_and_sum_sq_diff_grads,
      PerElementMeanAndVarianceEMAState as PerElementMeanAndVarianceEMAState,
      track_per_element_mean_and_variance_with_ema as track_per_element_mean_and_variance_with_ema,
      get_unbiased_mean_and_variance_ema as get_unbiased_mean_and_variance_ema,
      add_mean_variance_to_opt as add_mean_variance_to_opt,
  )

__all__ = [
    "AccumulateAvgUpdatesState", "AggregatedUpdates", "Aggregator", "AggregatorUpdateFn", "MaybeAxis",
    "PerElementMeanAndSumSqDiffGradsState", "PerElementMeanAndVarianceEMAState", "PerElementUpdates",
    "accumulate_avg_updates", "add_mean_variance_to_opt", "average_incrementally_updates",
    "average_per_element_updates", "get_batch_size_from_per_elt_updates",
    "get_per_element_mean_and_sum_sq_diff_grads", "get_unbiased_mean_and_variance_ema", "process",
    "track_per_element_mean_and_variance_with_ema",
]

__getattr__, __dir__ = _lazy_surface(__name__, __file__)[:2]
