"""Checkpoints of optimizer states: path-keyed arrays with a manifest, over Orbax.

See ``docs/checkpointing.md``. ``state_to_arrays`` / ``arrays_to_state`` convert a state to and
from ``{path: numpy array}``, validating structure, shapes and dtypes path by path; ``save`` /
``restore`` and ``save_step`` / ``restore_step`` write and read Orbax checkpoints (sharded states
included) with the same validation, and still read the ZIP files of format version 1;
``restore_state`` restores into a chain whose ``named_chain`` stages were added, removed or renamed,
stage by stage, with a ``StageReport``.
"""

from typing import TYPE_CHECKING as _TYPE_CHECKING

from .._core._lazy import lazy_surface as _lazy_surface

# The re-exports, read by pyright, IDEs and the API reference as written, and at run time by
# ``lazy_surface``: each name is imported when first read (``_core/_lazy.py``).
if _TYPE_CHECKING:
  from ._arrays import (
      FORMAT as FORMAT,
      FORMAT_VERSION as FORMAT_VERSION,
      CheckpointError as CheckpointError,
      arrays_to_state as arrays_to_state,
      describe_transformation as describe_transformation,
      leaf_path as leaf_path,
      state_manifest as state_manifest,
      state_to_arrays as state_to_arrays,
  )
  from ._stages import StageReport as StageReport, restore_state as restore_state
  from ._files import (
      all_steps as all_steps,
      latest_step as latest_step,
      read_manifest as read_manifest,
      restore as restore,
      restore_step as restore_step,
      save as save,
      save_step as save_step,
  )

__all__ = [
    "FORMAT", "FORMAT_VERSION", "CheckpointError", "all_steps", "arrays_to_state",
    "StageReport", "describe_transformation", "latest_step", "leaf_path", "read_manifest", "restore",
    "restore_state", "restore_step", "save", "save_step", "state_manifest", "state_to_arrays",
]

__getattr__, __dir__ = _lazy_surface(__name__, __file__)[:2]
