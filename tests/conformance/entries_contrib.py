"""Registry entries: Optax's contrib optimizers."""

import steadax

from .registry import Entry

ENTRIES = [
    Entry("prodigy", lambda: steadax.contrib.prodigy(estim_lr0=1e-2), lambda o: o.contrib.prodigy(estim_lr0=1e-2),
          optax_atol=1e-4, notes="the distance estimate amplifies float32 summation-order differences"),
    Entry("prodigy_weight_decay", lambda: steadax.contrib.prodigy(estim_lr0=1e-2, weight_decay=0.01, safeguard_warmup=True),
          lambda o: o.contrib.prodigy(estim_lr0=1e-2, weight_decay=0.01, safeguard_warmup=True)),
    Entry("schedule_free_sgd", lambda: steadax.contrib.schedule_free_sgd(0.2),
          lambda o: o.contrib.schedule_free_sgd(0.2)),
    Entry("schedule_free_adamw", lambda: steadax.contrib.schedule_free_adamw(0.1),
          lambda o: o.contrib.schedule_free_adamw(0.1)),
    Entry("schedule_free_adam", lambda: steadax.contrib.schedule_free(steadax.adam(0.1, b1=0.0), 0.1),
          lambda o: o.contrib.schedule_free(o.adam(0.1, b1=0.0), 0.1)),
]
