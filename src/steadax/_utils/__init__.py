"""Small utilities with Optax's names: gradient scaling, diagonal Gaussians."""

from typing import TYPE_CHECKING as _TYPE_CHECKING

from .._core._lazy import lazy_surface as _lazy_surface

# The re-exports, read by pyright, IDEs and the API reference as written, and at run time by
# ``lazy_surface``: each name is imported when first read (``_core/_lazy.py``).
if _TYPE_CHECKING:
  from ._gradients import scale_gradient as scale_gradient
  from ._multi_normal import multi_normal as multi_normal

__all__ = [
    "multi_normal", "scale_gradient",
]

__getattr__, __dir__ = _lazy_surface(__name__, __file__)[:2]
