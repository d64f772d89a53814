"""Line searches: backtracking (Armijo) and zoom (strong Wolfe), and value_and_grad_from_state.

An internal layer, not a namespace: ``steadax`` re-exports every name below at its top level.
"""

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
