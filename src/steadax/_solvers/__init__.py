"""Deterministic solvers: ``minimize`` (the jitted loop and its report) and L-BFGS-B.

An internal layer, not a namespace: ``steadax`` re-exports every name below at its top level.
"""

from typing import TYPE_CHECKING as _TYPE_CHECKING

from .._core._lazy import lazy_surface as _lazy_surface

# The re-exports, read by pyright, IDEs and the API reference as written, and at run time by
# ``lazy_surface``: each name is imported when first read (``_core/_lazy.py``).
if _TYPE_CHECKING:
  from ._lbfgsb import ScaleByLBFGSBState as ScaleByLBFGSBState, lbfgsb as lbfgsb
  from ._minimize import (
      MinimizeInfo as MinimizeInfo,
      StopReason as StopReason,
      minimize as minimize,
      stop_reason_message as stop_reason_message,
  )

__all__ = ["MinimizeInfo", "ScaleByLBFGSBState", "StopReason", "lbfgsb", "minimize",
           "stop_reason_message"]

__getattr__, __dir__ = _lazy_surface(__name__, __file__)[:2]
