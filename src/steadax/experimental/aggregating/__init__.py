"""Aggregation of per-element gradients (Optax's ``optax.experimental.aggregating``)."""

from ._process import *  # noqa: F401,F403
from ._process import __all__ as _process_all
from ._statistics import *  # noqa: F401,F403
from ._statistics import __all__ as _statistics_all

__all__ = [*_process_all, *_statistics_all]
