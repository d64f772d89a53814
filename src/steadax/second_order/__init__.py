"""Hessian-vector products and diagonal curvature (Optax's ``optax.second_order``)."""

from typing import TYPE_CHECKING as _TYPE_CHECKING

from .._core._lazy import lazy_surface as _lazy_surface

# The re-exports, read by pyright, IDEs and the API reference as written, and at run time by
# ``lazy_surface``: each name is imported when first read (``_core/_lazy.py``).
if _TYPE_CHECKING:
  from ._second_order import (
      hvp as hvp,
      hessian_diag as hessian_diag,
      fisher_diag as fisher_diag,
  )

__all__ = [
    "fisher_diag", "hessian_diag", "hvp",
]

__getattr__, __dir__ = _lazy_surface(__name__, __file__)[:2]
