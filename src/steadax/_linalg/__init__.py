"""Linear-algebra helpers with Optax's names: power iteration, inverse p-th roots, NNLS."""

from ._nnls import *  # noqa: F401,F403
from ._nnls import __all__ as _nnls_all
from ._power import *  # noqa: F401,F403
from ._power import __all__ as _power_all

__all__ = [*_power_all, *_nnls_all]
