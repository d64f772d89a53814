"""Optimizer states as path-keyed arrays with a manifest, checked path by path, stored by Orbax.

A state is any pytree of arrays (NamedTuples, dicts, tuples, PRNG key arrays). ``state_to_arrays``
names each leaf by its tree path (``"1/0/mu/w"``: the chain's second stage, its first stage, field
``mu``, parameter ``w``); ``arrays_to_state`` puts the arrays back into a template state (what
``tx.init(params)`` or ``jax.eval_shape(tx.init, params)`` gives) *by path*, checking that every path
is there with its shape and dtype and naming each path that is not. Matching by path rather than by
position lets a state survive a refactor of the chain wherever the paths stay put (``adam`` to
``adamw``: the weight-decay stage is stateless and ``scale_by_adam``'s paths do not move; a new stage
of a ``named_chain`` can start from its fresh init with ``missing="keep"``) and fail with the list of
paths where they do not.

The files are Orbax's: a checkpoint is a directory holding two items, ``arrays`` (the path-keyed
arrays, written by Orbax's PyTree handler: each process writes the shards it holds) and ``manifest``
(a JSON item: what wrote the state, and every path's shape and dtype). Orbax writes a checkpoint into
a temporary directory and renames it when complete, and its ``CheckpointManager`` numbers the step
directories, lists the complete ones and deletes old ones; a checkpoint is validated against the
template from its manifest before any array is read, and the arrays are read straight into the
template's shardings. Files of the ZIP format that came before (``FORMAT_VERSION`` 1) are still read.
"""

import functools
import importlib.metadata
import json
import os
import re
import zipfile
from collections.abc import Iterable, Mapping
from typing import Any, Union

import jax
import jax.core  # jax.core.Tracer: jax does not re-export the submodule for type checkers
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
from .._core._base import GradientTransformation
from .._core._types import OptState

__all__ = [
    "CheckpointError",
    "FORMAT",
    "FORMAT_VERSION",
    "leaf_path",
    "state_to_arrays",
    "state_manifest",
    "describe_transformation",
    "arrays_to_state",
    "save",
    "restore",
    "read_manifest",
    "save_step",
    "restore_step",
    "all_steps",
    "latest_step",
]

FORMAT = "steadax-checkpoint"
FORMAT_VERSION = 2
_ARRAYS, _MANIFEST = "arrays", "manifest"
_V1_STEP_FILE = re.compile(r"^step_(\d+)\.steadax$")  # save_step's files of format version 1
# A template state: a state, or its abstract version (``jax.eval_shape``, ShapeDtypeStructs with
# shardings).
Template = Union[jax.Array, jax.ShapeDtypeStruct, Iterable["Template"], Mapping[Any, "Template"]]


class CheckpointError(ValueError):
  """A checkpoint that does not fit the state it is restored into, or is not a complete checkpoint."""


def _version() -> str:
  try:
    return importlib.metadata.version("steadax")
  except importlib.metadata.PackageNotFoundError:  # pragma: no cover - run from a source tree
    return "unknown"


def _entry_str(entry: Any) -> str:
  if isinstance(entry, jax.tree_util.DictKey):
    return str(entry.key)
  if isinstance(entry, jax.tree_util.GetAttrKey):
    return entry.name
  if isinstance(entry, jax.tree_util.SequenceKey):
    return str(entry.idx)
  if isinstance(entry, jax.tree_util.FlattenedIndexKey):
    return str(entry.key)
  return str(entry)


def leaf_path(key_path: jax.tree_util.KeyPath) -> str:
  """The checkpoint name of a leaf: its tree path's keys joined by ``/`` (``<root>`` for a leaf state).

  Args:
    key_path: a key path from ``jax.tree_util.tree_flatten_with_path``.

  Returns:
    The path string.

  Example:
    >>> import jax, steadax
    >>> state = steadax.adam(0.1).init({"w": jax.numpy.zeros(2)})
    >>> [steadax.checkpoint.leaf_path(p) for p, _ in jax.tree_util.tree_flatten_with_path(state)[0]]
    ['0/count', '0/mu/w', '0/nu/w']
  """
  return "/".join(_entry_str(e) for e in key_path) or "<root>"


def _is_key(x: Any) -> bool:
  dtype = getattr(x, "dtype", None)
  return dtype is not None and jnp.issubdtype(dtype, jax.dtypes.prng_key)


def _flatten(state: Any) -> list[tuple[str, Any]]:
  pairs = [(leaf_path(p), x) for p, x in jax.tree_util.tree_flatten_with_path(state)[0]]
  seen: set[str] = set()
  for path, _ in pairs:
    if path in seen:
      raise CheckpointError(f"checkpoint: two leaves of the state have the path {path!r} (a dict key "
                            "containing '/'?); rename the key so every leaf has its own path.")
    seen.add(path)
  return pairs


def _stored(path: str, leaf: Any) -> tuple[Any, dict]:
  """(the array to store, its manifest record) of one leaf; the array stays where it is (sharded)."""
  record: dict[str, Any] = {"path": path}
  if _is_key(leaf):
    record["key_impl"] = str(jax.random.key_impl(leaf))
    record["dtype"] = str(leaf.dtype)
    leaf = jax.random.key_data(leaf)
  if not hasattr(leaf, "dtype") or not hasattr(leaf, "shape"):
    raise CheckpointError(f"checkpoint: the state leaf at {path} is a {type(leaf).__name__}, not an "
                          "array; a checkpoint holds arrays only.")
  if isinstance(leaf, jax.core.Tracer):
    raise CheckpointError(f"checkpoint: the state leaf at {path} is traced; save outside jit.")
  record.setdefault("dtype", str(jnp.dtype(leaf.dtype)))
  record["shape"] = list(leaf.shape)
  return leaf, record


def state_to_arrays(state: OptState, *, skip_empty: bool = False) -> dict[str, np.ndarray]:
  """A state as a flat dict ``path -> numpy array`` (PRNG keys as their raw key data).

  Args:
    state: an optimizer state (any pytree of arrays, fully addressable by this process).
    skip_empty: leave out arrays with no elements (Orbax refuses to save them);
      ``arrays_to_state`` rebuilds them from the template's shape and dtype, which is all they hold.

  Returns:
    The arrays keyed by ``leaf_path``, in tree order. Typed PRNG keys are stored as
    ``jax.random.key_data``; ``state_manifest`` records their implementation so that
    ``arrays_to_state`` wraps them again.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> tx = steadax.sgd(0.1, momentum=0.9)
    >>> arrays = steadax.checkpoint.state_to_arrays(tx.init({"w": jnp.ones(3)}))
    >>> {path: (a.shape, str(a.dtype)) for path, a in arrays.items()}
    {'0/trace/w': ((3,), 'float32')}
  """
  arrays = {path: np.asarray(jax.device_get(_stored(path, leaf)[0])) for path, leaf in _flatten(state)}
  return {p: a for p, a in arrays.items() if a.size} if skip_empty else arrays


_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


def describe_transformation(tx: GradientTransformation) -> str:
  """A description of a transformation that is stable across processes: its repr without addresses.

  Args:
    tx: a transformation (or any object).

  Returns:
    ``repr(tx)`` with the memory addresses of functions removed.

  Example:
    >>> import steadax
    >>> steadax.checkpoint.describe_transformation(steadax.sgd(lambda count: 0.1))
    'Chain(transforms=(_Identity(), ScaleByLearningRate(learning_rate=Fn(fn=<function <lambda>>), flip_sign=True)))'
  """
  return _ADDRESS.sub("", repr(tx))


def state_manifest(state: OptState, tx: GradientTransformation | None = None, step: int | None = None,
                   metadata: Mapping | None = None) -> dict:
  """The manifest of a state: versions, the transformation's description, each path's shape and dtype.

  Args:
    state: the optimizer state (its arrays are not read: only their shapes and dtypes).
    tx: the transformation that made it (recorded by ``describe_transformation``), or None.
    step: the training step, or None.
    metadata: JSON-serialisable values to keep with the checkpoint.

  Returns:
    A JSON-serialisable dict: ``format``, ``format_version``, ``steadax_version``, ``jax_version``,
    ``transformation``, ``step``, ``treedef``, ``metadata`` and ``leaves`` (one record per leaf:
    ``path``, ``shape``, ``dtype`` and, for a PRNG key, ``key_impl``).

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> tx = steadax.adam(1e-3)
    >>> manifest = steadax.checkpoint.state_manifest(tx.init({"w": jnp.ones(2)}), tx, step=7)
    >>> manifest["step"], [(r["path"], r["shape"], r["dtype"]) for r in manifest["leaves"]]
    (7, [('0/count', [], 'int32'), ('0/mu/w', [2], 'float32'), ('0/nu/w', [2], 'float32')])
  """
  return {
      "format": FORMAT,
      "format_version": FORMAT_VERSION,
      "steadax_version": _version(),
      "jax_version": jax.__version__,
      "transformation": None if tx is None else describe_transformation(tx),
      "step": None if step is None else int(step),
      "treedef": str(jax.tree_util.tree_structure(state)),
      "leaves": [_stored(path, leaf)[1] for path, leaf in _flatten(state)],
      "metadata": dict(metadata or {}),
  }


def _check_options(missing: str, unused: str) -> None:
  if missing not in ("raise", "keep") or unused not in ("raise", "ignore"):
    raise ValueError(f"arrays_to_state: missing must be 'raise' or 'keep' (got {missing!r}) and unused "
                     f"'raise' or 'ignore' (got {unused!r}).")


def _fit(found: Mapping[str, tuple[tuple[int, ...], str]], like: Any, *, missing: str, unused: str,
         written_for: str | None) -> list[tuple[str, Any, str]]:
  """How each template leaf is filled: ``(path, leaf, "read" | "keep" | "empty")``.

  ``found`` maps each stored path to its shape and dtype (a PRNG key's: its key data's shape and the
  key dtype). Raises a CheckpointError listing every path that is missing, unused or of another
  shape or dtype, before any array is read.
  """
  pairs = _flatten(like)
  problems, plan = [], []
  for path, leaf in pairs:
    if not hasattr(leaf, "shape") or not hasattr(leaf, "dtype"):
      raise CheckpointError(f"checkpoint: the template leaf at {path} is a {type(leaf).__name__}, not an "
                            "array or ShapeDtypeStruct; build the template with tx.init(params) or "
                            "jax.eval_shape(tx.init, params).")
    empty = int(np.prod(leaf.shape)) == 0  # no data to lose: rebuilt from its type
    if path not in found:
      if empty or (missing == "keep" and isinstance(leaf, jax.Array)):
        plan.append((path, leaf, "empty" if empty else "keep"))
        continue
      problems.append(f"{path}: missing from the checkpoint (expected shape {tuple(leaf.shape)}, "
                      f"{jnp.dtype(leaf.dtype)})"
                      + ("; missing='keep' needs a concrete template leaf" if missing == "keep" else ""))
      continue
    shape, dtype = found[path]
    if _is_key(leaf):  # stored as its key data; raw uint32 key data fits too
      expected_shape, expected_dtypes = jax.eval_shape(jax.random.key_data, leaf).shape, (str(leaf.dtype), "uint32")
    else:
      expected_shape, expected_dtypes = tuple(leaf.shape), (str(jnp.dtype(leaf.dtype)),)
    problem = []
    if tuple(shape) != tuple(expected_shape):
      problem.append(f"shape {tuple(shape)} in the checkpoint, {tuple(expected_shape)} expected")
    if dtype not in expected_dtypes:
      problem.append(f"dtype {dtype} in the checkpoint, {expected_dtypes[0]} expected")
    if problem:
      problems.append(f"{path}: " + "; ".join(problem))
    plan.append((path, leaf, "empty" if empty else "read"))
  if unused == "raise":
    extra = [p for p in found if p not in {path for path, _ in pairs}]
    if extra:
      problems.append(f"{', '.join(extra)}: in the checkpoint but not in the template state "
                      "(pass unused=\"ignore\" to drop them)")
  if problems:
    raise CheckpointError(
        "checkpoint: the arrays do not fit the template state:\n  " + "\n  ".join(problems)
        + (f"\nThe checkpoint was written for {written_for}." if written_for else ""))
  return plan


def _sharding(like: Any) -> jax.sharding.Sharding | None:
  """The template leaf's sharding if it names devices (``jax.eval_shape`` may give an abstract one)."""
  sharding = getattr(like, "sharding", None)
  if not isinstance(sharding, jax.sharding.Sharding) or isinstance(like, jax.core.Tracer):
    return None
  try:
    sharding.device_set  # noqa: B018 - raises for a sharding over an abstract mesh
  except (ValueError, TypeError, AttributeError, RuntimeError):
    return None
  return sharding


def _data_sharding(like: Any) -> jax.sharding.Sharding | None:
  """Where the stored data of a template leaf goes: its sharding, for a PRNG key one with the key
  data's extra trailing axis unsharded."""
  sharding = _sharding(like)
  if sharding is None or not _is_key(like):
    return sharding
  if isinstance(sharding, jax.sharding.NamedSharding):
    spec = tuple(sharding.spec) + (None,) * (len(like.shape) + 1 - len(sharding.spec))
    return jax.sharding.NamedSharding(sharding.mesh, jax.sharding.PartitionSpec(*spec))
  return sharding if isinstance(sharding, jax.sharding.SingleDeviceSharding) else None


def _place(data: Any, like: Any, record: Mapping | None) -> Any:
  """A template leaf's value from its stored data (a PRNG key's: its key data), on its sharding."""
  sharding, data_sharding = _sharding(like), _data_sharding(like)
  if isinstance(data, jax.Array):
    if data_sharding is not None and not data.sharding.is_equivalent_to(data_sharding, data.ndim):
      data = jax.device_put(data, data_sharding)
  elif data_sharding is None:
    data = jnp.asarray(data)
  else:  # each process fills the shards it holds (a device_put needs all of them addressable)
    host = np.asarray(data)
    data = jax.make_array_from_callback(host.shape, data_sharding, lambda index: host[index])
  if not _is_key(like):
    return data
  impl = (record or {}).get("key_impl") or str(jax.random.key_impl(like))
  if sharding is None:
    return jax.random.wrap_key_data(data, impl=impl)
  return jax.jit(functools.partial(jax.random.wrap_key_data, impl=impl), out_shardings=sharding)(data)


def _assemble(plan: list[tuple[str, Any, str]], like: Any, arrays: Mapping[str, Any],
              records: Mapping[str, Mapping]) -> Any:
  leaves = []
  for path, leaf, how in plan:
    if how == "keep":
      leaves.append(leaf)
    elif how == "empty":
      stored = jax.eval_shape(jax.random.key_data, leaf) if _is_key(leaf) else leaf
      leaves.append(_place(np.zeros(stored.shape, jnp.dtype(stored.dtype)), leaf, records.get(path)))
    else:
      leaves.append(_place(arrays[path], leaf, records.get(path)))
  return jax.tree_util.tree_unflatten(jax.tree_util.tree_structure(like), leaves)


def arrays_to_state(arrays: Mapping[str, Any], like: Template, *, manifest: Mapping | None = None,
                    missing: str = "raise", unused: str = "raise") -> Any:
  """Put path-keyed arrays back into the structure of a template state, checking every path.

  Args:
    arrays: ``path -> array`` as ``state_to_arrays`` gives (or read back from any array store).
    like: a template state of the transformation the state is for: ``tx.init(params)`` or
      ``jax.eval_shape(tx.init, params)``. Its structure, shapes and dtypes are the expected ones;
      a leaf with a sharding puts the restored array on that sharding.
    manifest: the manifest saved with the arrays: it gives the key implementation of PRNG keys
      (otherwise the template's is used).
    missing: a template path absent from ``arrays``: ``"raise"`` (default), or ``"keep"`` the
      template's leaf (it must be a concrete array, e.g. a new stage's fresh init). A template leaf
      with no elements is rebuilt from its shape and dtype either way (see ``skip_empty`` of
      ``state_to_arrays``).
    unused: a path of ``arrays`` absent from the template: ``"raise"`` (default) or ``"ignore"``
      (a removed stage's state).

  Returns:
    A state with the template's structure whose leaves are the arrays (jax arrays with exactly the
    template's shapes and dtypes).

  Raises:
    CheckpointError: listing every path that is missing, unused, or of another shape or dtype.

  Example:
    >>> import jax, jax.numpy as jnp, steadax
    >>> params = {"w": jnp.ones(2)}
    >>> state = steadax.adam(1e-3).init(params)
    >>> arrays = steadax.checkpoint.state_to_arrays(state)
    >>> # adamw adds a stateless weight-decay stage: the paths of adam's state do not move.
    >>> template = jax.eval_shape(steadax.adamw(1e-3).init, params)
    >>> restored = steadax.checkpoint.arrays_to_state(arrays, template)
    >>> # sgd with momentum has other paths: the error names them.
    >>> steadax.checkpoint.arrays_to_state(arrays, steadax.sgd(0.1, momentum=0.9).init(params))
    Traceback (most recent call last):
    ...
    steadax.checkpoint._checkpoint.CheckpointError: checkpoint: the arrays do not fit the template state:
      0/trace/w: missing from the checkpoint (expected shape (2,), float32)
      0/count, 0/mu/w, 0/nu/w: in the checkpoint but not in the template state (pass unused="ignore" to drop them)
  """
  _check_options(missing, unused)
  records = {r["path"]: r for r in (manifest or {}).get("leaves", [])}
  found = {}
  for path, data in arrays.items():
    record = records.get(path, {})
    dtype = record["dtype"] if "key_impl" in record else str(jnp.dtype(getattr(data, "dtype", None) or np.asarray(data).dtype))
    found[path] = (tuple(np.shape(data)), dtype)
  plan = _fit(found, like, missing=missing, unused=unused, written_for=(manifest or {}).get("transformation"))
  return _assemble(plan, like, arrays, records)


# --- Orbax checkpoints ---------------------------------------------------------------------------


def _save_args(state: Any, tx: Any, step: int | None, metadata: Mapping | None) -> Any:
  stored = {path: _stored(path, leaf) for path, leaf in _flatten(state)}
  manifest = state_manifest(state, tx, step, metadata)
  # Orbax refuses arrays with no elements, and an item with no arrays (a stateless ``sgd``): the
  # manifest's records are all they hold.
  arrays = {path: data for path, (data, _) in stored.items() if int(np.prod(data.shape)) > 0}
  items: dict[str, Any] = {_MANIFEST: ocp.args.JsonSave(manifest)}
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
  if _is_v1(path):
    manifest, arrays = _read_v1(path)
    _check_transformation(manifest, tx, path)
    try:
      return arrays_to_state(arrays, like, manifest=manifest, missing=missing, unused=unused)
    except CheckpointError as e:
      raise CheckpointError(f"{path}: {e}") from None
  manifest = _read_orbax_manifest(path)
  _check_transformation(manifest, tx, path)
  records = {r["path"]: r for r in manifest["leaves"]}
  try:
    plan = _fit({p: (tuple(r["shape"]), r["dtype"]) for p, r in records.items()}, like, missing=missing,
                unused=unused, written_for=manifest.get("transformation"))
  except CheckpointError as e:
    raise CheckpointError(f"{path}: {e}") from None
  return _assemble(plan, like, _read_arrays(path, plan, records), records)


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
