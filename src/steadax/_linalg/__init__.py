"""Linear-algebra helpers with Optax's names: power iteration, inverse p-th roots, NNLS."""

from ._nnls import nnls as nnls
from ._power import power_iteration as power_iteration, matrix_inverse_pth_root as matrix_inverse_pth_root

__all__ = [
    "matrix_inverse_pth_root", "nnls", "power_iteration",
]
