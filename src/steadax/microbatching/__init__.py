"""Microbatching (Optax's ``optax.microbatching``): loop a function over slices of a batch."""

from ._microbatching import (
    AccumulationType as AccumulationType,
    Accumulator as Accumulator,
    microbatch as microbatch,
    micro_vmap as micro_vmap,
    micro_grad as micro_grad,
    reshape_batch_axis as reshape_batch_axis,
)

__all__ = [
    "AccumulationType", "Accumulator", "micro_grad", "micro_vmap", "microbatch", "reshape_batch_axis",
]
