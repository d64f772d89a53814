"""Linear-algebra helpers with Optax's names: power iteration, inverse p-th roots, NNLS."""

from typing import TYPE_CHECKING as _TYPE_CHECKING

from .._core._lazy import lazy_surface as _lazy_surface

# The re-exports, read by pyright, IDEs and the API reference as written, and at run time by
# ``lazy_surface``: each name is imported when first read (``_core/_lazy.py``).
if _TYPE_CHECKING:
  from ._nnls import nnls as nnls
  from ._power import power_iteration as power_iteration, matrix_inverse_pth_root as matrix_inverse_pth_root

__all__ = [
    "matrix_inverse_pth_root", "nnls", "power_iteration",
]

__getattr__, __dir__ = _lazy_surface(__name__, __file__)[:2]
