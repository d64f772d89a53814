"""Deterministic solvers: ``minimize`` (the jitted loop and its report) and L-BFGS-B.

An internal layer, not a namespace: ``steadax`` re-exports every name below at its top level.
"""

from ._lbfgsb import ScaleByLBFGSBState as ScaleByLBFGSBState, lbfgsb as lbfgsb
from ._minimize import (
    MinimizeInfo as MinimizeInfo,
    StopReason as StopReason,
    minimize as minimize,
    stop_reason_message as stop_reason_message,
)

__all__ = ["MinimizeInfo", "ScaleByLBFGSBState", "StopReason", "lbfgsb", "minimize",
           "stop_reason_message"]
