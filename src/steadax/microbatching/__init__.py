"""Microbatching (Optax's ``optax.microbatching``): loop a function over slices of a batch."""

from ._microbatching import *  # noqa: F401,F403
from ._microbatching import __all__ as _microbatching_all

__all__ = [*_microbatching_all]
