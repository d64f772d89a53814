"""The linear assignment problem (Optax's ``optax.assignment``)."""

from typing import TYPE_CHECKING as _TYPE_CHECKING

from .._core._lazy import lazy_surface as _lazy_surface

# The re-exports, read by pyright, IDEs and the API reference as written, and at run time by
# ``lazy_surface``: each name is imported when first read (``_core/_lazy.py``).
if _TYPE_CHECKING:
  from ._hungarian import (
      hungarian_algorithm as hungarian_algorithm,
      base_hungarian_algorithm as base_hungarian_algorithm,
  )

__all__ = [
    "base_hungarian_algorithm", "hungarian_algorithm",
]

__getattr__, __dir__ = _lazy_surface(__name__, __file__)[:2]
