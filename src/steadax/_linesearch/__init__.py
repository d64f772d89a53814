"""Line searches: backtracking (Armijo) and zoom (strong Wolfe), and value_and_grad_from_state.

An internal layer, not a namespace: ``steadax`` re-exports every name below at its top level.
"""

from typing import TYPE_CHECKING as _TYPE_CHECKING

from .._core._lazy import lazy_surface as _lazy_surface

# The re-exports, read by pyright, IDEs and the API reference as written, and at run time by
# ``lazy_surface``: each name is imported when first read (``_core/_lazy.py``).
if _TYPE_CHECKING:
  from ._backtracking import (
      BacktrackingLinesearchInfo as BacktrackingLinesearchInfo,
      ScaleByBacktrackingLinesearchState as ScaleByBacktrackingLinesearchState,
      scale_by_backtracking_linesearch as scale_by_backtracking_linesearch,
  )
  from ._common import value_and_grad_from_state as value_and_grad_from_state
  from ._zoom import (
      ZoomLinesearchInfo as ZoomLinesearchInfo,
      ScaleByZoomLinesearchState as ScaleByZoomLinesearchState,
      scale_by_zoom_linesearch as scale_by_zoom_linesearch,
  )

__all__ = [
    "BacktrackingLinesearchInfo", "ScaleByBacktrackingLinesearchState", "ScaleByZoomLinesearchState",
    "ZoomLinesearchInfo", "scale_by_backtracking_linesearch", "scale_by_zoom_linesearch",
    "value_and_grad_from_state",
]

__getattr__, __dir__ = _lazy_surface(__name__, __file__)[:2]
