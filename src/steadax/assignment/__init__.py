"""The linear assignment problem (Optax's ``optax.assignment``)."""

from ._hungarian import *  # noqa: F401,F403
from ._hungarian import __all__ as _hungarian_all

__all__ = [*_hungarian_all]
