"""Optimizers assembled from the building blocks, one module per family."""

from ._adam import *  # noqa: F401,F403
from ._adam import __all__ as _adam_all
from ._sgd import *  # noqa: F401,F403
from ._sgd import __all__ as _sgd_all

__all__ = [*_adam_all, *_sgd_all]
