"""Small utilities with Optax's names: gradient scaling, diagonal Gaussians."""

from ._gradients import *  # noqa: F401,F403
from ._gradients import __all__ as _gradients_all
from ._multi_normal import *  # noqa: F401,F403
from ._multi_normal import __all__ as _multi_normal_all

__all__ = [*_gradients_all, *_multi_normal_all]
