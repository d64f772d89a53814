"""Building blocks: ``scale_by_*`` preconditioners, clipping, decay, momentum and moment helpers."""

from ._adam import *  # noqa: F401,F403
from ._adam import __all__ as _adam_all
from ._decay import *  # noqa: F401,F403
from ._decay import __all__ as _decay_all
from ._moments import *  # noqa: F401,F403
from ._moments import __all__ as _moments_all
from ._scaling import *  # noqa: F401,F403
from ._scaling import __all__ as _scaling_all

__all__ = [*_adam_all, *_decay_all, *_moments_all, *_scaling_all]
