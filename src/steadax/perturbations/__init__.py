"""Differentiable perturbed functions (Optax's ``optax.perturbations``)."""

from typing import TYPE_CHECKING as _TYPE_CHECKING

from .._core._lazy import lazy_surface as _lazy_surface

# The re-exports, read by pyright, IDEs and the API reference as written, and at run time by
# ``lazy_surface``: each name is imported when first read (``_core/_lazy.py``).
if _TYPE_CHECKING:
  from ._perturbed import (
      Normal as Normal,
      Gumbel as Gumbel,
      make_perturbed_fun as make_perturbed_fun,
  )

__all__ = [
    "Gumbel", "Normal", "make_perturbed_fun",
]

__getattr__, __dir__ = _lazy_surface(__name__, __file__)[:2]
