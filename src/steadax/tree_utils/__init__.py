"""Optax's ``optax.tree_utils``: the functions of ``steadax.tree`` under their ``tree_*`` names."""

from ..transforms._moments import (
    bias_correction as tree_bias_correction,
    update_infinity_moment as tree_update_infinity_moment,
    update_moment as tree_update_moment,
    update_moment_per_elem_norm as tree_update_moment_per_elem_norm,
)
from ..tree._casting import *  # noqa: F401,F403
from ..tree._casting import __all__ as _casting_all
from ..tree._math import *  # noqa: F401,F403
from ..tree._math import __all__ as _math_all
from ..tree._random import *  # noqa: F401,F403
from ..tree._random import __all__ as _random_all
from ..tree._reduce import *  # noqa: F401,F403
from ..tree._reduce import __all__ as _reduce_all
from ..tree._state import *  # noqa: F401,F403
from ..tree._state import __all__ as _state_all

__all__ = [
    *_casting_all, *_math_all, *_random_all, *_reduce_all, *_state_all,
    "tree_bias_correction", "tree_update_infinity_moment", "tree_update_moment",
    "tree_update_moment_per_elem_norm",
]
