"""Schedules of the step count, and injection of hyperparameters into the optimizer state."""

from .._core._types import Schedule as Schedule
from ._composite import *  # noqa: F401,F403
from ._composite import __all__ as _composite_all
from ._inject import *  # noqa: F401,F403
from ._inject import __all__ as _inject_all
from ._join import *  # noqa: F401,F403
from ._join import __all__ as _join_all
from ._schedule import *  # noqa: F401,F403
from ._schedule import __all__ as _schedule_all

__all__ = ["Schedule", *_schedule_all, *_join_all, *_composite_all, *_inject_all]
