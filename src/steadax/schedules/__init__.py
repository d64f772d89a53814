"""Schedules of the step count, and injection of hyperparameters into the optimizer state."""

from typing import TYPE_CHECKING as _TYPE_CHECKING

from .._core._lazy import lazy_surface as _lazy_surface

# The re-exports, read by pyright, IDEs and the API reference as written, and at run time by
# ``lazy_surface``: each name is imported when first read (``_core/_lazy.py``).
if _TYPE_CHECKING:
  from .._core._types import Schedule as Schedule
  from ._composite import (
      warmup_constant_schedule as warmup_constant_schedule,
      warmup_cosine_decay_schedule as warmup_cosine_decay_schedule,
      warmup_exponential_decay_schedule as warmup_exponential_decay_schedule,
      linear_onecycle_schedule as linear_onecycle_schedule,
      cosine_onecycle_schedule as cosine_onecycle_schedule,
      sgdr_schedule as sgdr_schedule,
  )
  from ._inject import (
      InjectHyperparamsState as InjectHyperparamsState,
      InjectStatefulHyperparamsState as InjectStatefulHyperparamsState,
      StatefulSchedule as StatefulSchedule,
      WrappedSchedule as WrappedSchedule,
      inject_hyperparams as inject_hyperparams,
      inject_stateful_hyperparams as inject_stateful_hyperparams,
  )
  from ._join import join_schedules as join_schedules
  from ._schedule import (
      constant_schedule as constant_schedule,
      polynomial_schedule as polynomial_schedule,
      linear_schedule as linear_schedule,
      exponential_decay as exponential_decay,
      cosine_decay_schedule as cosine_decay_schedule,
      piecewise_constant_schedule as piecewise_constant_schedule,
      piecewise_interpolate_schedule as piecewise_interpolate_schedule,
  )
  from ._wsd import warmup_stable_decay_schedule as warmup_stable_decay_schedule

__all__ = [
    "InjectHyperparamsState", "InjectStatefulHyperparamsState", "Schedule", "StatefulSchedule",
    "WrappedSchedule", "constant_schedule", "cosine_decay_schedule", "cosine_onecycle_schedule",
    "exponential_decay", "inject_hyperparams", "inject_stateful_hyperparams", "join_schedules",
    "linear_onecycle_schedule", "linear_schedule", "piecewise_constant_schedule",
    "piecewise_interpolate_schedule", "polynomial_schedule", "sgdr_schedule", "warmup_constant_schedule",
    "warmup_cosine_decay_schedule", "warmup_exponential_decay_schedule",
    "warmup_stable_decay_schedule",
]

__getattr__, __dir__ = _lazy_surface(__name__, __file__)[:2]
