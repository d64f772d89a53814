"""Hessian-vector products and diagonal curvature (Optax's ``optax.second_order``)."""

from ._second_order import (
    hvp as hvp,
    hessian_diag as hessian_diag,
    fisher_diag as fisher_diag,
)

__all__ = [
    "fisher_diag", "hessian_diag", "hvp",
]
