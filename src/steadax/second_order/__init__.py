"""Hessian-vector products and diagonal curvature (Optax's ``optax.second_order``)."""

from ._second_order import *  # noqa: F401,F403
from ._second_order import __all__ as _second_order_all

__all__ = [*_second_order_all]
