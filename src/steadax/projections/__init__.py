"""Euclidean projections of pytrees (Optax's ``optax.projections``); see ``docs/projections.md``."""

from ._projections import *  # noqa: F401,F403
from ._projections import __all__ as _projections_all

__all__ = [*_projections_all]
