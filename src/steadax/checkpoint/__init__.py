"""Checkpoints of optimizer states: flat path-keyed arrays with a manifest, and atomic files.

See ``docs/checkpointing.md``. ``state_to_arrays`` / ``arrays_to_state`` convert a state to and
from ``{path: numpy array}`` (what Orbax or any array store saves), validating structure, shapes and
dtypes path by path; ``save`` / ``restore`` and ``save_step`` / ``restore_step`` write and read
checkpoint files atomically.
"""

from typing import TYPE_CHECKING as _TYPE_CHECKING

from .._core._lazy import lazy_surface as _lazy_surface

# The re-exports, read by pyright, IDEs and the API reference as written, and at run time by
# ``lazy_surface``: each name is imported when first read (``_core/_lazy.py``).
if _TYPE_CHECKING:
  from ._checkpoint import (
      FORMAT as FORMAT,
      FORMAT_VERSION as FORMAT_VERSION,
      CheckpointError as CheckpointError,
      all_steps as all_steps,
      arrays_to_state as arrays_to_state,
      describe_transformation as describe_transformation,
      latest_step as latest_step,
      leaf_path as leaf_path,
      read_manifest as read_manifest,
      restore as restore,
      restore_step as restore_step,
      save as save,
      save_step as save_step,
      state_manifest as state_manifest,
      state_to_arrays as state_to_arrays,
  )

__all__ = [
    "FORMAT", "FORMAT_VERSION", "CheckpointError", "all_steps", "arrays_to_state",
    "describe_transformation", "latest_step", "leaf_path", "read_manifest", "restore", "restore_step",
    "save", "save_step", "state_manifest", "state_to_arrays",
]

__getattr__, __dir__ = _lazy_surface(__name__, __file__)[:2]
