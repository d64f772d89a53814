"""Optax's contrib optimizers (``steadax.contrib.NAME``), held to the same contract."""

from ._prodigy import *  # noqa: F401,F403
from ._prodigy import __all__ as _prodigy_all
from ._schedule_free import *  # noqa: F401,F403
from ._schedule_free import __all__ as _schedule_free_all

__all__ = [*_prodigy_all, *_schedule_free_all]
