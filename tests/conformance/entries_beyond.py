"""Registry entries: optimizers Optax lacks (MARS, PSGD-Kron, low-memory Adam states, cautious).

No Optax factories: these are checked against their defining properties in tests/transforms and
tests/optimizers instead.
"""

import jax
import jax.numpy as jnp

import steadax

from .registry import Entry

ENTRIES = [
    Entry("mars", lambda: steadax.mars(0.1)),
    Entry("mars_weight_decay_schedule_no_clip",
          lambda: steadax.mars(steadax.linear_schedule(0.1, 0.05, 50), gamma=0.1, weight_decay=0.01, max_norm=None)),
    Entry("scale_by_mars_bf16_moments",
          lambda: steadax.chain(steadax.scale_by_mars(mu_dtype=jnp.bfloat16, nu_dtype=jnp.bfloat16), steadax.scale(-0.1))),
    Entry("psgd_kron", lambda: steadax.psgd_kron(0.1)),
    Entry("psgd_kron_diagonal_half_probability",
          lambda: steadax.psgd_kron(0.1, weight_decay=0.01, preconditioner_update_probability=0.5,
                                    max_size_triangular=0, key=3)),
    Entry("psgd_kron_dense_vectors_bf16_state",
          lambda: steadax.psgd_kron(0.1, min_ndim_triangular=1, mu_dtype=jnp.bfloat16, preconditioner_dtype=jnp.bfloat16),
          notes="dense factors on vectors too; bfloat16 momentum and factors"),
    Entry("adam_lowmem", lambda: steadax.adam_lowmem(0.1)),
    Entry("adam_lowmem_nearest_weight_decay", lambda: steadax.adam_lowmem(0.1, weight_decay=0.01, rounding="nearest")),
    Entry("scale_by_adam_lowmem_float16",
          lambda: steadax.chain(steadax.scale_by_adam_lowmem(mu_dtype=jnp.float16, nu_dtype=jnp.float32, seed=7),
                                steadax.scale(-0.1))),
    Entry("adam8bit", lambda: steadax.adam8bit(0.1),
          notes="every test tensor is below min_8bit_size: full-precision moments"),
    Entry("adam8bit_quantized", lambda: steadax.adam8bit(0.1, min_8bit_size=1, block_size=4),
          notes="every tensor quantized, in blocks of 4 (several blocks, padding, scalars, zero-size)"),
    Entry("adamw8bit_quantized_masked", lambda: steadax.adamw8bit(
        0.1, weight_decay=0.01, mask=lambda p: jax.tree_util.tree_map(lambda x: x.size >= 4, p),
        min_8bit_size=1, block_size=4),
          notes="every tensor quantized; decay only on the leaves of 4 entries or more"),
    Entry("scale_by_adam_8bit_quantized_weight_decay",
          lambda: steadax.chain(steadax.scale_by_adam_8bit(block_size=3, min_8bit_size=2),
                                steadax.add_decayed_weights(0.01), steadax.scale(-0.1))),
    Entry("cautious_adamw", lambda: steadax.contrib.cautious(steadax.adamw(0.1, weight_decay=0.01))),
]
