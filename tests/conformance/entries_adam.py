"""Registry entries: the Adam family and SGD."""

import jax.numpy as jnp

import steadax

from .registry import Entry

ENTRIES = [
    Entry("sgd", lambda: steadax.sgd(0.1), lambda o: o.sgd(0.1)),
    Entry("sgd_momentum", lambda: steadax.sgd(0.05, momentum=0.9), lambda o: o.sgd(0.05, momentum=0.9)),
    Entry("sgd_nesterov", lambda: steadax.sgd(0.05, momentum=0.9, nesterov=True),
          lambda o: o.sgd(0.05, momentum=0.9, nesterov=True)),
    Entry("adam", lambda: steadax.adam(0.1), lambda o: o.adam(0.1)),
    Entry("adam_bf16_mu", lambda: steadax.adam(0.1, mu_dtype=jnp.bfloat16),
          lambda o: o.adam(0.1, mu_dtype=jnp.bfloat16), optax_rtol=5e-2, optax_atol=2e-2,
          notes="bfloat16 rounding of mu differs in the last bit from step to step"),
    Entry("adam_nesterov", lambda: steadax.adam(0.1, nesterov=True), lambda o: o.adam(0.1, nesterov=True)),
    Entry("adamw", lambda: steadax.adamw(0.1, weight_decay=0.01), lambda o: o.adamw(0.1, weight_decay=0.01)),
    Entry("adamw_schedule", lambda: steadax.adamw(lambda c: 0.1 * 0.99 ** c.astype(jnp.float32), weight_decay=0.01),
          lambda o: o.adamw(lambda c: 0.1 * 0.99 ** c.astype(jnp.float32), weight_decay=0.01)),
    Entry("nadam", lambda: steadax.nadam(0.1), lambda o: o.nadam(0.1)),
    Entry("nadamw", lambda: steadax.nadamw(0.1), lambda o: o.nadamw(0.1)),
    Entry("amsgrad", lambda: steadax.amsgrad(0.1), lambda o: o.amsgrad(0.1)),
    Entry("adamax", lambda: steadax.adamax(0.1), lambda o: o.adamax(0.1)),
    Entry("adamaxw", lambda: steadax.adamaxw(0.1), lambda o: o.adamaxw(0.1)),
]
