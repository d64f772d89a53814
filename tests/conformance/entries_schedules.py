"""Registry entries: optimizers driven by steadax schedules, and inject_hyperparams."""

import jax.numpy as jnp

import steadax

from .registry import Entry


def _warmup_cosine(lib):
  return lib.warmup_cosine_decay_schedule(0.0, 0.1, 5, 50, end_value=0.01)


def _wsd_optax(o):
  """Optax has no warmup-stable-decay: its pieces joined, with the 1-sqrt cooldown written out."""
  cooldown = lambda t: 0.01 + 0.09 * (1 - jnp.sqrt(jnp.clip(t / 15, 0.0, 1.0)))  # noqa: E731
  return o.join_schedules([o.linear_schedule(0.0, 0.1, 5), o.constant_schedule(0.1), cooldown], [5, 35])


ENTRIES = [
    Entry("adam_warmup_cosine", lambda: steadax.adam(_warmup_cosine(steadax)),
          lambda o: o.adam(_warmup_cosine(o))),
    Entry("sgd_piecewise_constant",
          lambda: steadax.sgd(steadax.piecewise_constant_schedule(0.1, {10: 0.5, 30: 0.5}), momentum=0.5),
          lambda o: o.sgd(o.piecewise_constant_schedule(0.1, {10: 0.5, 30: 0.5}), momentum=0.5)),
    Entry("adam_warmup_stable_decay",
          lambda: steadax.adam(steadax.warmup_stable_decay_schedule(
              0.1, total_steps=50, warmup_steps=5, decay_fraction=0.3, end_value=0.01,
              decay_shape="1-sqrt")),
          lambda o: o.adam(_wsd_optax(o))),
    Entry("inject_hyperparams_adam",
          lambda: steadax.inject_hyperparams(steadax.adam)(learning_rate=_warmup_cosine(steadax), b1=0.8),
          lambda o: o.inject_hyperparams(o.adam)(learning_rate=_warmup_cosine(o), b1=0.8)),
]
