"""Registry entries: optimizers driven by steadax schedules, and inject_hyperparams."""

import steadax

from .registry import Entry


def _warmup_cosine(lib):
  return lib.warmup_cosine_decay_schedule(0.0, 0.1, 5, 50, end_value=0.01)


ENTRIES = [
    Entry("adam_warmup_cosine", lambda: steadax.adam(_warmup_cosine(steadax)),
          lambda o: o.adam(_warmup_cosine(o))),
    Entry("sgd_piecewise_constant",
          lambda: steadax.sgd(steadax.piecewise_constant_schedule(0.1, {10: 0.5, 30: 0.5}), momentum=0.5),
          lambda o: o.sgd(o.piecewise_constant_schedule(0.1, {10: 0.5, 30: 0.5}), momentum=0.5)),
    Entry("inject_hyperparams_adam",
          lambda: steadax.inject_hyperparams(steadax.adam)(learning_rate=_warmup_cosine(steadax), b1=0.8),
          lambda o: o.inject_hyperparams(o.adam)(learning_rate=_warmup_cosine(o), b1=0.8)),
]
