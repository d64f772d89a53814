"""Registry entries: the rest of Optax's surface (issue 5) — normalize_by_update_norm and the
stateful transformations of experimental.aggregating that take ordinary (aggregated) updates."""

import jax
import jax.numpy as jnp

import steadax
from steadax.experimental import aggregating

from .registry import Entry


def _noise_statistics(loss_fn, params, grads):
  # What get_per_element_mean_and_sum_sq_diff_grads hands over for a batch of 4 elements
  # (g, -g, g, -g): a sum of squared deviations 4 |g|^2, computed by the aggregator itself, so its
  # float16 overflow (|g| near 6e4) is the one the registry meets. A float0 gradient (an integer
  # parameter) has no spread: its statistic is zero in the parameter's dtype, as the per-example
  # helper gives for a constant leaf.
  aggregator = aggregating.get_per_element_mean_and_sum_sq_diff_grads()

  def sum_sq(g):
    if g.dtype == jax.dtypes.float0:
      return jnp.zeros(g.shape, jnp.int32)
    per_element = jnp.stack([g, -g, g, -g])
    (_, aux), _ = aggregator.update(per_element, aggregator.init(g))
    return aux["sum_sq_diff_grads"]

  return {"sum_sq_diff_grads": jax.tree.map(sum_sq, grads), "sample_size": 4}


ENTRIES = [
    Entry("normalize_by_update_norm+sgd",
          lambda: steadax.chain(steadax.normalize_by_update_norm(), steadax.sgd(0.1)),
          lambda o: o.chain(o.normalize_by_update_norm(), o.sgd(0.1))),
    Entry("accumulate_avg_updates+sgd",
          lambda: steadax.chain(aggregating.accumulate_avg_updates(2), steadax.sgd(0.5)),
          lambda o: o.chain(o.experimental.aggregating.accumulate_avg_updates(2), o.sgd(0.5)),
          notes="Optax's state keeps a default-integer micro_step; steadax's is int32."),
    Entry("track_per_element_mean_and_variance_with_ema+adam",
          lambda: steadax.chain(aggregating.track_per_element_mean_and_variance_with_ema(0.9),
                                steadax.adam(0.1)),
          lambda o: o.chain(o.experimental.aggregating.track_per_element_mean_and_variance_with_ema(0.9),
                            o.adam(0.1)),
          extra_args=_noise_statistics),
]
