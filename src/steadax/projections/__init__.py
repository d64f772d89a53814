"""Euclidean projections of pytrees (Optax's ``optax.projections``); see ``docs/projections.md``."""

from typing import TYPE_CHECKING as _TYPE_CHECKING

from .._core._lazy import lazy_surface as _lazy_surface

# The re-exports, read by pyright, IDEs and the API reference as written, and at run time by
# ``lazy_surface``: each name is imported when first read (``_core/_lazy.py``).
if _TYPE_CHECKING:
  from ._projections import (
      projection_non_negative as projection_non_negative,
      projection_box as projection_box,
      projection_hypercube as projection_hypercube,
      projection_simplex as projection_simplex,
      projection_l1_sphere as projection_l1_sphere,
      projection_l1_ball as projection_l1_ball,
      projection_l2_sphere as projection_l2_sphere,
      projection_l2_ball as projection_l2_ball,
      projection_linf_ball as projection_linf_ball,
      projection_vector as projection_vector,
      projection_hyperplane as projection_hyperplane,
      projection_halfspace as projection_halfspace,
  )

__all__ = [
    "projection_box", "projection_halfspace", "projection_hypercube", "projection_hyperplane",
    "projection_l1_ball", "projection_l1_sphere", "projection_l2_ball", "projection_l2_sphere",
    "projection_linf_ball", "projection_non_negative", "projection_simplex", "projection_vector",
]

__getattr__, __dir__ = _lazy_surface(__name__, __file__)[:2]
