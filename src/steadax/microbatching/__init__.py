"""Microbatching (Optax's ``optax.microbatching``): loop a function over slices of a batch."""

from typing import TYPE_CHECKING as _TYPE_CHECKING

from .._core._lazy import lazy_surface as _lazy_surface

# The re-exports, read by pyright, IDEs and the API reference as written, and at run time by
# ``lazy_surface``: each name is imported when first read (``_core/_lazy.py``).
if _TYPE_CHECKING:
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

__getattr__, __dir__ = _lazy_surface(__name__, __file__)[:2]
