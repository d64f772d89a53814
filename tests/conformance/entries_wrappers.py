"""Registry entries: the accumulation, finiteness, conditional, monitoring and spike wrappers.

Each wraps a registered optimizer, so the matrix checks the wrapper's own state (counters, bool
masks, accumulators, statistics) across dtypes, x64 modes and jit / scan / cond / while_loop.
Optax's ``monitor`` starts from an empty dict (its state cannot be a ``lax.scan`` carry), so the
monitoring entry has no Optax counterpart.
"""

import functools

import steadax

from .registry import Entry, value_extra_args


def _even_step(step):
  return step % 2 == 0


def _monitored(o):
  return o.chain(
      o.adam(0.1),
      o.monitor({"norm": o.global_norm, "norm_ema": o.measure_with_ema(o.global_norm, 0.9)}),
      o.snapshot("after_adam", o.global_norm),
  )


ENTRIES = [
    Entry("multi_steps_adam", lambda: steadax.MultiSteps(steadax.adam(0.1), 3).gradient_transformation(),
          lambda o: o.MultiSteps(o.adam(0.1), 3).gradient_transformation(), steps=150),
    Entry("multi_steps_sum_sgd", lambda: steadax.MultiSteps(steadax.sgd(0.05), 2, use_grad_mean=False),
          lambda o: o.MultiSteps(o.sgd(0.05), 2, use_grad_mean=False).gradient_transformation(), steps=100),
    Entry("multi_steps_k1_adam", lambda: steadax.MultiSteps(steadax.adam(0.1), 1),
          lambda o: o.MultiSteps(o.adam(0.1), 1).gradient_transformation(),
          notes="k=1: no accumulator in the state"),
    Entry("multi_steps_skip_not_finite",
          lambda: steadax.MultiSteps(steadax.adam(0.1), 2, should_skip_update_fn=steadax.skip_not_finite),
          lambda o: o.MultiSteps(o.adam(0.1), 2, should_skip_update_fn=o.skip_not_finite)
          .gradient_transformation(), steps=100),
    Entry("multi_steps_skip_large_updates",
          lambda: steadax.MultiSteps(steadax.adam(0.1), 2, should_skip_update_fn=functools.partial(
              steadax.skip_large_updates, max_squared_norm=100.0)),
          lambda o: o.MultiSteps(o.adam(0.1), 2, should_skip_update_fn=functools.partial(
              o.skip_large_updates, max_squared_norm=100.0)).gradient_transformation(), steps=100),
    Entry("apply_if_finite_adam", lambda: steadax.apply_if_finite(steadax.adam(0.1), 2),
          lambda o: o.apply_if_finite(o.adam(0.1), 2)),
    Entry("zero_nans_sgd", lambda: steadax.chain(steadax.zero_nans(), steadax.sgd(0.1)),
          lambda o: o.chain(o.zero_nans(), o.sgd(0.1))),
    Entry("apply_every_sgd", lambda: steadax.chain(steadax.sgd(0.1), steadax.apply_every(3)),
          lambda o: o.chain(o.sgd(0.1), o.apply_every(3)), steps=150),
    Entry("conditionally_transform_adam",
          lambda: steadax.chain(steadax.conditionally_transform(steadax.scale_by_adam(), _even_step),
                                steadax.scale(-0.05)),
          lambda o: o.chain(o.conditionally_transform(o.scale_by_adam(), _even_step), o.scale(-0.05)),
          steps=100),
    Entry("conditionally_mask_sgd", lambda: steadax.conditionally_mask(steadax.sgd(0.1), _even_step),
          lambda o: o.conditionally_mask(o.sgd(0.1), _even_step), steps=100),
    Entry("monitor_snapshot_adam", lambda: _monitored(steadax), _monitored, optax_agrees=False,
          notes="Optax's monitor state changes structure at the first update (no lax.scan): its "
                "updates are compared bit for bit (test_optax_bits.py)"),
    Entry("skip_spikes_adam", lambda: steadax.skip_spikes(steadax.adam(0.1)), None,
          extra_args=value_extra_args),
    Entry("skip_spikes_grad_norm_adam",
          lambda: steadax.skip_spikes(steadax.adam(0.1), factor=1.0, num_std=3.0, watch="grad_norm"), None),
]
