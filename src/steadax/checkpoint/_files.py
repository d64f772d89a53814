"""Checkpoints on Orbax: the path-keyed arrays and the manifest (``_arrays``) as Orbax's files and steps.

A checkpoint is an Orbax checkpoint directory holding two items, ``arrays`` (the path-keyed arrays,
written by Orbax's PyTree handler: each process writes the shards it holds) and ``manifest`` (a JSON
item: what wrote the state, and every path's shape and dtype). Orbax writes a checkpoint into a
temporary directory and renames it when complete, and its ``CheckpointManager`` numbers the step
directories, lists the complete ones and deletes old ones. A checkpoint is checked against the
template from its manifest before any array is read, and the arrays are read straight into the
template's shardings. Files of the ZIP format that came before (``FORMAT_VERSION`` 1) are still read.
"""

import json
import os
import re
import zipfile
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
from .._core._interface import GradientTransformation
from .._core._types import OptState
from ._arrays import (
    FORMAT,
    FORMAT_VERSION,
    CheckpointError,
    Template,
    _assemble,
    _check_options,
    _data_sharding,
    _fit,
    _flatten,
    _stored,
    describe_transformation,
    state_manifest,
)

__all__ = ["save", "restore", "read_manifest", "save_step", "restore_step", "all_steps", "latest_step"]

_ARRAYS, _MANIFEST = "arrays", "manifest"
_V1_STEP_FILE = re.compile(r"^step_(\d+)\.steadax$")  # save_step's files of format version 1


def _save_args(state: Any, tx: Any, step: int | None, metadata: Mapping | None) -> Any:
  # Orbax refuses arrays with no elements, and an item with no arrays (a stateless ``sgd``): the
  # manifest's records are all they hold.
  arrays = {path: _stored(path, leaf)[0] for path, leaf in _flatten(state)}
  arrays = {path: data for path, data in arrays.items() if data.size}
  items: dict[str, Any] = {_MANIFEST: ocp.args.JsonSave(state_manifest(state, tx, step, metadata))}
  if arrays:
    items[_ARRAYS] = ocp.args.PyTreeSave(arrays)
  return ocp.args.Composite(**items)


def save(path: str | os.PathLike, state: OptState, *, tx: GradientTransformation | None = None,
         step: int | None = None, metadata: Mapping | None = None, overwrite: bool = False) -> str:
  """Write a state to one checkpoint directory with Orbax (every process calls it with its shards).

  Args:
    path: the checkpoint directory to write. Orbax writes into a temporary directory beside it and
      renames it once complete.
    state: the optimizer state (or any pytree of arrays), sharded or not: each process writes the
      shards it holds.
    tx: the transformation, recorded in the manifest by its description.
    step: the training step, recorded in the manifest.
    metadata: JSON-serialisable values to keep in the manifest.
    overwrite: replace an existing checkpoint at ``path``. Orbax deletes it before writing the new
      one, so a crash in between leaves none; ``save_step`` keeps the previous step instead.

  Returns:
    The path written.

  Raises:
    CheckpointError: ``path`` exists and ``overwrite`` is False, or a leaf is not an array.

  Example:
    >>> import os, tempfile, jax.numpy as jnp, steadax
    >>> tx = steadax.adam(1e-3)
    >>> params = {"w": jnp.ones(2)}
    >>> path = os.path.join(tempfile.mkdtemp(), "opt_state")
    >>> _ = steadax.checkpoint.save(path, tx.init(params), tx=tx, step=0)
    >>> sorted(name for name in os.listdir(path) if os.path.isdir(os.path.join(path, name)))
    ['arrays', 'manifest']
    >>> restored = steadax.checkpoint.restore(path, tx.init(params))
    >>> steadax.checkpoint.read_manifest(path)["step"]
    0

  References:
    Orbax checkpointing, https://orbax.readthedocs.io/en/latest/guides/checkpoint/checkpointing_pytrees.html
  """
  path = os.path.abspath(os.fspath(path))
  if os.path.exists(path) and not overwrite:
    raise CheckpointError(f"save: {path} exists; pass overwrite=True to replace it (or use save_step).")
  args = _save_args(state, tx, step, metadata)
  with ocp.Checkpointer(ocp.CompositeCheckpointHandler()) as checkpointer:
    checkpointer.save(path, args, force=overwrite)
  return path


def _read_v1(path: str) -> tuple[dict, dict[str, np.ndarray]]:
  """The manifest and arrays of a ZIP file of format version 1 (zipfile checks each member's CRC)."""
  try:
    with zipfile.ZipFile(path) as archive:
      manifest = json.loads(archive.read("manifest.json"))
      arrays = {}
      for index, record in enumerate(manifest["leaves"]):
        # A PRNG key is stored as its key data (uint32); its record keeps the key dtype and impl.
        dtype = np.dtype("uint32" if "key_impl" in record else jnp.dtype(record["dtype"])).newbyteorder("<")
        data = np.frombuffer(archive.read(f"{index}.bin"), dtype=dtype)
        arrays[record["path"]] = data.astype(dtype.newbyteorder("="), copy=False).reshape(record["shape"])
  except (zipfile.BadZipFile, KeyError, ValueError, OSError, EOFError) as e:
    raise CheckpointError(f"checkpoint: {path} is not a complete steadax checkpoint ({e}).") from e
  if manifest.get("format") != FORMAT or manifest.get("format_version") != 1:
    raise CheckpointError(f"checkpoint: {path} is not a {FORMAT} file (format {manifest.get('format')!r}, "
                          f"version {manifest.get('format_version')!r}).")
  return manifest, arrays


def _is_v1(path: str) -> bool:
  return os.path.isfile(path) and zipfile.is_zipfile(path)


def _read_orbax_manifest(path: str) -> dict:
  if not os.path.exists(path):
    raise FileNotFoundError(f"checkpoint: no checkpoint at {path}.")
  try:
    with ocp.Checkpointer(ocp.CompositeCheckpointHandler()) as checkpointer:
      manifest = checkpointer.restore(path, ocp.args.Composite(**{_MANIFEST: ocp.args.JsonRestore()}))[_MANIFEST]
  except Exception as e:  # noqa: BLE001 - whatever Orbax raises for a directory that is not a checkpoint
    hint = ("; it holds the steps of save_step: read one with restore_step"
            if os.path.isdir(path) and any(name.isdigit() for name in os.listdir(path)) else "")
    raise CheckpointError(f"checkpoint: {path} is not a complete steadax checkpoint "
                          f"({type(e).__name__}: {e}){hint}.") from e
  if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
    raise CheckpointError(f"checkpoint: {path} holds no {FORMAT} manifest.")
  if manifest.get("format_version") != FORMAT_VERSION:
    raise CheckpointError(f"checkpoint: {path} is of format version {manifest.get('format_version')!r}; "
                          f"this steadax reads version {FORMAT_VERSION} directories and version 1 files.")
  return manifest


def read_manifest(path: str | os.PathLike) -> dict:
  """The manifest of a checkpoint (see ``state_manifest``), without reading its arrays.

  Args:
    path: a checkpoint directory written by ``save`` or ``save_step``, or a file of format version 1.

  Returns:
    The manifest dict.

  Raises:
    FileNotFoundError: there is nothing at ``path``.
    CheckpointError: ``path`` is not a complete steadax checkpoint.

  Example:
    >>> import os, tempfile, steadax
    >>> tx = steadax.sgd(0.1)
    >>> path = steadax.checkpoint.save(os.path.join(tempfile.mkdtemp(), "c"), tx.init({}), tx=tx)
    >>> steadax.checkpoint.read_manifest(path)["transformation"]
    'Chain(transforms=(_Identity(), ScaleByLearningRate(learning_rate=0.1, flip_sign=True)))'
  """
  path = os.path.abspath(os.fspath(path))
  return _read_v1(path)[0] if _is_v1(path) else _read_orbax_manifest(path)


def _read_arrays(path: str, plan: list[tuple[str, Any, str]], records: Mapping[str, Mapping]) -> dict:
  """The arrays the plan reads, each straight into its template leaf's sharding (numpy without one)."""
  item, restore_args = {}, {}
  for p, leaf, how in plan:
    if how != "read":
      continue
    record, sharding = records[p], _data_sharding(leaf)
    shape = tuple(record["shape"])
    item[p] = jax.ShapeDtypeStruct(shape, jnp.dtype("uint32" if "key_impl" in record else record["dtype"]))
    restore_args[p] = (ocp.RestoreArgs(restore_type=np.ndarray) if sharding is None
                       else ocp.ArrayRestoreArgs(sharding=sharding, global_shape=shape))
  if not item:
    return {}
  try:
    with ocp.Checkpointer(ocp.CompositeCheckpointHandler()) as checkpointer:
      restored = checkpointer.restore(path, ocp.args.Composite(**{_ARRAYS: ocp.args.PyTreeRestore(
          item=item, restore_args=restore_args, partial_restore=True)}))
  except Exception as e:  # noqa: BLE001 - missing or damaged array files, whatever Orbax raises
    raise CheckpointError(f"checkpoint: the arrays of {path} cannot be read ({type(e).__name__}: {e}).") from e
  return dict(restored[_ARRAYS])


def _read_orbax_tree(path: str) -> Any:
  """A pytree checkpoint Orbax wrote itself (``StandardCheckpointer``), read without a template:
  NamedTuples come back as dicts and tuples as lists, so the leaf paths are the state's."""
  try:
    with ocp.StandardCheckpointer() as checkpointer:
      return checkpointer.restore(path)
  except Exception as e:  # noqa: BLE001 - whatever Orbax raises for a directory it cannot read
    raise CheckpointError(f"checkpoint: {path} is neither a steadax checkpoint nor a pytree "
                          f"checkpoint Orbax can read without a template ({type(e).__name__}: {e}).") from e


def _check_transformation(manifest: dict, tx: Any, path: str) -> None:
  if tx is None:
    return
  ours, theirs = describe_transformation(tx), manifest.get("transformation")
  if theirs is not None and ours != theirs:
    raise CheckpointError(
        f"checkpoint: {path} was written for another transformation:\n  checkpoint: {theirs}\n"
        f"  given:      {ours}\nPass tx=None to restore into the template's structure anyway.")


def restore(path: str | os.PathLike, like: Template, *, tx: GradientTransformation | None = None,
            missing: str = "raise", unused: str = "raise") -> Any:
  """Read a checkpoint into the structure (and shardings) of a template state, checking every path.

  The manifest is checked against the template first (see ``arrays_to_state``); then only the
  arrays the template needs are read, each into its template leaf's sharding, so every process
  reads the shards it holds.

  Args:
    path: a checkpoint directory written by ``save`` or ``save_step``, or a file of format version 1.
    like: the template state: ``tx.init(params)`` or ``jax.eval_shape(tx.init, params)``; leaves
      with a sharding (arrays, or ``jax.ShapeDtypeStruct(..., sharding=...)``) are restored with it.
    tx: if given, the checkpoint must have been written for a transformation with the same
      description (``describe_transformation``); None restores into any template that fits.
    missing: ``"raise"`` or ``"keep"``, as in ``arrays_to_state``.
    unused: ``"raise"`` or ``"ignore"``, as in ``arrays_to_state``.

  Returns:
    The restored state.

  Raises:
    FileNotFoundError: there is nothing at ``path``.
    CheckpointError: ``path`` is not a complete checkpoint, was written for another transformation,
      or does not fit the template (naming each path).

  Example:
    >>> import os, tempfile, jax.numpy as jnp, numpy as np, steadax
    >>> tx = steadax.adam(1e-3)
    >>> params = {"w": jnp.ones(2)}
    >>> state = tx.update({"w": jnp.ones(2)}, tx.init(params), params)[1]
    >>> path = steadax.checkpoint.save(os.path.join(tempfile.mkdtemp(), "c"), state, tx=tx)
    >>> restored = steadax.checkpoint.restore(path, tx.init(params), tx=tx)
    >>> np.asarray(restored[0].mu["w"]).tolist() == np.asarray(state[0].mu["w"]).tolist()
    True
  """
  _check_options(missing, unused)
  path = os.path.abspath(os.fspath(path))
  manifest, arrays = _read_v1(path) if _is_v1(path) else (_read_orbax_manifest(path), None)
  _check_transformation(manifest, tx, path)
  records = {r["path"]: r for r in manifest["leaves"]}
  try:
    plan = _fit({p: (tuple(r["shape"]), r["dtype"]) for p, r in records.items()}, like, missing=missing,
                unused=unused, written_for=manifest.get("transformation"))
  except CheckpointError as e:
    raise CheckpointError(f"{path}: {e}") from None
  return _assemble(plan, like, _read_arrays(path, plan, records) if arrays is None else arrays, records)


# --- Step directories ----------------------------------------------------------------------------


def _manager(directory: str, keep: int | None = None) -> Any:
  options = ocp.CheckpointManagerOptions(max_to_keep=keep, create=True, enable_async_checkpointing=False)
  return ocp.CheckpointManager(directory, options=options, item_names=(_ARRAYS, _MANIFEST))


def _v1_steps(directory: str) -> dict[int, str]:
  return {int(m.group(1)): os.path.join(directory, name) for name in os.listdir(directory)
          if (m := _V1_STEP_FILE.match(name))}


def _orbax_steps(directory: str) -> list[int]:
  with _manager(directory) as manager:
    return sorted(manager.all_steps())


def all_steps(directory: str | os.PathLike) -> list[int]:
  """The steps of the complete checkpoints in a directory, in increasing order.

  Orbax's temporary directories of an interrupted ``save_step`` are not checkpoints and are not
  listed; ``step_XXXXXXXX.steadax`` files of format version 1 are.

  Args:
    directory: a directory written by ``save_step`` (a missing directory has none).

  Returns:
    The sorted steps.

  Example:
    >>> import tempfile, steadax
    >>> steadax.checkpoint.all_steps(tempfile.mkdtemp())
    []
  """
  directory = os.path.abspath(os.fspath(directory))
  if not os.path.isdir(directory):
    return []
  return sorted(set(_orbax_steps(directory)) | set(_v1_steps(directory)))


def latest_step(directory: str | os.PathLike) -> int | None:
  """The latest complete checkpoint's step in a directory, or None.

  Args:
    directory: a directory written by ``save_step``.

  Returns:
    The step or None.

  Example:
    >>> import tempfile, jax.numpy as jnp, steadax
    >>> directory = tempfile.mkdtemp()
    >>> for step in (10, 20):
    ...   _ = steadax.checkpoint.save_step(directory, step, steadax.sgd(0.1).init({}))
    >>> steadax.checkpoint.latest_step(directory)
    20
  """
  steps = all_steps(directory)
  return steps[-1] if steps else None


def save_step(directory: str | os.PathLike, step: int, state: OptState, *, tx: GradientTransformation | None = None,
              keep: int | None = None, metadata: Mapping | None = None) -> str:
  """Write the checkpoint of one training step into a directory with Orbax's ``CheckpointManager``.

  The step is written to a temporary directory and renamed to ``directory/<step>`` once complete
  (Orbax's step layout, which ``ocp.CheckpointManager(directory)`` reads too), so a process killed
  while saving leaves the previous steps as they were. Every process calls it, with its shards.

  Args:
    directory: the checkpoint directory (created if needed).
    step: the training step; a step that is already saved is refused.
    state: the optimizer state (or any pytree of arrays: ``{"params": ..., "opt_state": ...}``).
    tx: the transformation, recorded in the manifest.
    keep: keep only the latest ``keep`` steps (Orbax deletes older ones after the new one is
      complete); None keeps all.
    metadata: JSON-serialisable values to keep in the manifest.

  Returns:
    The step's checkpoint directory.

  Raises:
    CheckpointError: the step is already in the directory, or a leaf is not an array.

  Example:
    >>> import tempfile, jax.numpy as jnp, steadax
    >>> directory, tx, params = tempfile.mkdtemp(), steadax.adam(1e-3), {"w": jnp.ones(2)}
    >>> state = tx.init(params)
    >>> for step in range(3):
    ...   _ = steadax.checkpoint.save_step(directory, step, state, tx=tx, keep=2)
    >>> steadax.checkpoint.all_steps(directory)
    [1, 2]
    >>> step, state = steadax.checkpoint.restore_step(directory, tx.init(params))
    >>> step
    2

  References:
    Orbax CheckpointManager, https://orbax.readthedocs.io/en/latest/guides/checkpoint/api_refactor.html
  """
  if keep is not None and (not isinstance(keep, int) or keep < 1):
    raise ValueError(f"save_step: keep must be a positive integer or None, got {keep!r}.")
  directory, step = os.path.abspath(os.fspath(directory)), int(step)
  args = _save_args(state, tx, step, metadata)
  with _manager(directory, keep) as manager:
    if step in manager.all_steps():
      raise CheckpointError(f"save_step: step {step} is already saved in {directory}.")
    manager.save(step, args=args, force=True)  # force: every step asked for, whatever Orbax's policy
    return str(manager.directory / str(step))


def restore_step(directory: str | os.PathLike, like: Template, *, step: int | None = None,
                 tx: GradientTransformation | None = None, missing: str = "raise", unused: str = "raise"
                 ) -> tuple[int, Any]:
  """Read a step's checkpoint (the latest complete one by default) from a directory (see ``restore``).

  Args:
    directory: a directory written by ``save_step``.
    like: the template state (see ``restore``); its shardings are the restored arrays'.
    step: the step to read; None reads the latest complete checkpoint.
    tx: as in ``restore``.
    missing: as in ``arrays_to_state``.
    unused: as in ``arrays_to_state``.

  Returns:
    ``(step, state)``.

  Raises:
    FileNotFoundError: the directory holds no checkpoint (or not that step).
    CheckpointError: as in ``restore``.

  Example:
    >>> import tempfile, jax.numpy as jnp, steadax
    >>> directory, tx = tempfile.mkdtemp(), steadax.sgd(0.1, momentum=0.9)
    >>> _ = steadax.checkpoint.save_step(directory, 5, tx.init({"w": jnp.ones(2)}), tx=tx)
    >>> steadax.checkpoint.restore_step(directory, tx.init({"w": jnp.ones(2)}))[0]
    5
  """
  directory = os.path.abspath(os.fspath(directory))
  steps = all_steps(directory)
  if step is None:
    if not steps:
      raise FileNotFoundError(f"restore_step: no checkpoint in {directory!r}.")
    step = steps[-1]
  if step not in steps:
    raise FileNotFoundError(f"restore_step: no checkpoint of step {step} in {directory!r} (steps: {steps}).")
  orbax_path = os.path.join(directory, str(step))
  path = orbax_path if os.path.isdir(orbax_path) else _v1_steps(directory)[step]
  return int(step), restore(path, like, tx=tx, missing=missing, unused=unused)
