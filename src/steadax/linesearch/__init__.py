"""Line searches: backtracking (Armijo) and zoom (strong Wolfe), and value_and_grad_from_state."""

from ._backtracking import *  # noqa: F401,F403
from ._backtracking import __all__ as _backtracking_all
from ._common import *  # noqa: F401,F403
from ._common import __all__ as _common_all
from ._zoom import *  # noqa: F401,F403
from ._zoom import __all__ as _zoom_all

__all__ = [*_backtracking_all, *_common_all, *_zoom_all]
