"""Registry entries: with_stats (issue 34 §4), around a clip and a schedule, and around accumulation of
parameter groups with multipliers over an injected base (every wrapper the statistics look through).

The statistics are a wrapper's state beside the optimizer's, so the Optax equivalent is the
optimizer alone: the updates must agree with it.
"""

import steadax

from .registry import Entry


def _clip_adamw(o):
  return o.chain(o.clip_by_global_norm(1.0), o.adamw(o.linear_schedule(0.1, 0.02, 40), weight_decay=1e-2))


def _accumulated_groups():
  base = steadax.inject_hyperparams(steadax.adamw)(learning_rate=0.1, weight_decay=1e-2)
  groups = steadax.groups({"b|nested.*": {"lr_mult": 0.5, "wd_mult": 0.0}, "*": {}}, base)
  return steadax.MultiSteps(groups, every_k_schedule=2)


def _accumulated_groups_optax(o):
  adamw = o.inject_hyperparams(o.adamw)
  groups = o.partition({"nd": adamw(learning_rate=0.05, weight_decay=0.0),
                        "d": adamw(learning_rate=0.1, weight_decay=1e-2)}, {"w": "d", "b": "nd"})
  return o.MultiSteps(groups, every_k_schedule=2)


ENTRIES = [
    Entry("with_stats_clip_adamw_schedule", lambda: steadax.with_stats(_clip_adamw(steadax), norms=True),
          _clip_adamw),
    Entry("with_stats_multisteps_groups_inject", lambda: steadax.with_stats(_accumulated_groups(), norms=True),
          _accumulated_groups_optax, steps=100,
          notes="the Optax equivalent is partition with the labels groups computes for the quadratic"),
]
