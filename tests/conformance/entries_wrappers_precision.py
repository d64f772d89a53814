"""Registry entries: parameter averaging (``ema_params``, ``swa_params``) and the low-precision
final stages (``stochastic_rounding``, ``kahan_summation``).

The averaging wrappers pass the inner optimizer's updates through unchanged: Optax's inner
optimizer is their differential reference. The low-precision stages run on the quadratic with
bfloat16 parameters (``QUADRATIC_BF16``), so every client loop of the registry (nnx.Optimizer,
Linen TrainState, Equinox) applies their updates to bfloat16 leaves with its own
``apply_updates``; Optax has neither stage.
"""

import jax
import jax.numpy as jnp

import steadax

from .registry import QUADRATIC, Entry, Problem


def _bf16_init():
  return jax.tree_util.tree_map(lambda x: x.astype(jnp.bfloat16), QUADRATIC.init())


QUADRATIC_BF16 = Problem("quadratic_bf16", QUADRATIC.loss, _bf16_init)

ENTRIES = [
    Entry("ema_params_adam", lambda: steadax.ema_params(steadax.adam(0.1), 0.9),
          lambda o: o.adam(0.1)),
    Entry("ema_params_power_warmup_adam",
          lambda: steadax.ema_params(steadax.adam(0.1), 0.99, warmup="power", start_step=1,
                                     average_dtype=jnp.float32),
          lambda o: o.adam(0.1)),
    Entry("swa_params_sgd", lambda: steadax.swa_params(steadax.sgd(0.1), start_step=2, every_k_steps=2),
          lambda o: o.sgd(0.1)),
    Entry("stochastic_rounding_adamw_bf16",
          lambda: steadax.chain(steadax.adamw(0.1, weight_decay=1e-2), steadax.stochastic_rounding()),
          None, problem=QUADRATIC_BF16,
          notes="Optax has no stochastic rounding; bfloat16 parameters"),
    Entry("kahan_summation_adamw_bf16",
          lambda: steadax.chain(steadax.adamw(0.1, weight_decay=1e-2), steadax.kahan_summation()),
          None, problem=QUADRATIC_BF16,
          notes="Optax has no compensated summation; bfloat16 parameters"),
]
