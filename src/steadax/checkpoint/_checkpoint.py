"""Optimizer states as flat path-keyed arrays with a manifest, and atomic checkpoint files.

A state is any pytree of arrays (NamedTuples, dicts, tuples, PRNG key arrays). ``state_to_arrays``
names each leaf by its tree path (``"1/0/mu/w"``: the chain's second stage, its first stage, field
``mu``, parameter ``w``); ``arrays_to_state`` puts the arrays back into a template state (what
``tx.init(params)`` or ``jax.eval_shape(tx.init, params)`` gives) *by path*, checking that every path
is there with its shape and dtype and naming each path that is not. Matching by path rather than by
position lets a state survive a refactor of the chain wherever the paths stay put (``adam`` to
``adamw``: the weight-decay stage is stateless and ``scale_by_adam``'s paths do not move; a new stage
of a ``named_chain`` can start from its fresh init with ``missing="keep"``) and fail with the list of
paths where they do not.

Files are written atomically: the bytes go to a temporary file beside the target, which is flushed,
``fsync``-ed and renamed over the target (then the directory is ``fsync``-ed). A process killed while
writing leaves at most a temporary file that readers never look at; the target is either the previous
complete checkpoint or the new complete one. A file that is nevertheless incomplete or corrupted
(copied half-way, a damaged disk) fails to read with a ``CheckpointError`` naming it, never gives a
half-read state: every array carries a CRC-32 in the manifest.

The file is a ZIP archive (stored, not compressed) holding ``manifest.json`` and one raw
little-endian buffer per leaf; ``read_manifest`` shows what a file holds without reading the arrays.
"""

import contextlib
import importlib.metadata
import json
import os
import re
import sys
import tempfile
import zipfile
import zlib
from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.core  # jax.core.Tracer: jax does not re-export the submodule for type checkers
import jax.numpy as jnp
import numpy as np
from .._core._interface import GradientTransformation
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
FORMAT_VERSION = 1
_MANIFEST = "manifest.json"
_STEP_FILE = re.compile(r"^step_(\d+)\.steadax$")


class CheckpointError(ValueError):
  """A checkpoint that does not fit the state it is restored into, or is not a complete file."""


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


def _host_array(path: str, leaf: Any) -> tuple[np.ndarray, dict]:
  """(raw numpy data, manifest record) of one leaf."""
  record: dict[str, Any] = {}
  if _is_key(leaf):
    record["key_impl"] = str(jax.random.key_impl(leaf))
    record["dtype"] = str(leaf.dtype)
    leaf = jax.random.key_data(leaf)
  if not hasattr(leaf, "dtype") or not hasattr(leaf, "shape"):
    raise CheckpointError(f"checkpoint: the state leaf at {path} is a {type(leaf).__name__}, not an "
                          "array; a checkpoint holds arrays only.")
  if isinstance(leaf, jax.core.Tracer):
    raise CheckpointError(f"checkpoint: the state leaf at {path} is traced; save outside jit.")
  data = np.asarray(jax.device_get(leaf))
  record.setdefault("dtype", str(data.dtype))
  record["shape"] = list(data.shape)
  return data, record


def state_to_arrays(state: OptState, *, skip_empty: bool = False) -> dict[str, np.ndarray]:
  """A state as a flat dict ``path -> numpy array`` (PRNG keys as their raw key data).

  Args:
    state: an optimizer state (any pytree of arrays).
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
  arrays = {path: _host_array(path, leaf)[0] for path, leaf in _flatten(state)}
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


def _manifest_and_arrays(state: Any, tx: Any, step: int | None, metadata: Mapping | None
                         ) -> tuple[dict, list[np.ndarray]]:
  leaves, arrays = [], []
  for path, leaf in _flatten(state):
    data, record = _host_array(path, leaf)
    record["path"] = path
    record["crc32"] = zlib.crc32(np.ascontiguousarray(data).tobytes())
    leaves.append(record)
    arrays.append(data)
  manifest = {
      "format": FORMAT,
      "format_version": FORMAT_VERSION,
      "steadax_version": _version(),
      "jax_version": jax.__version__,
      "transformation": None if tx is None else describe_transformation(tx),
      "step": None if step is None else int(step),
      "treedef": str(jax.tree_util.tree_structure(state)),
      "leaves": leaves,
      "metadata": dict(metadata or {}),
  }
  return manifest, arrays


def state_manifest(state: OptState, tx: GradientTransformation | None = None, step: int | None = None,
                   metadata: Mapping | None = None) -> dict:
  """The manifest of a state: versions, the transformation's description, each path's shape and dtype.

  Args:
    state: the optimizer state.
    tx: the transformation that made it (recorded by ``describe_transformation``), or None.
    step: the training step, or None.
    metadata: JSON-serialisable values to keep with the checkpoint.

  Returns:
    A JSON-serialisable dict: ``format``, ``format_version``, ``steadax_version``, ``jax_version``,
    ``transformation``, ``step``, ``treedef``, ``metadata`` and ``leaves`` (one record per leaf:
    ``path``, ``shape``, ``dtype``, ``crc32`` and, for a PRNG key, ``key_impl``).

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> tx = steadax.adam(1e-3)
    >>> manifest = steadax.checkpoint.state_manifest(tx.init({"w": jnp.ones(2)}), tx, step=7)
    >>> manifest["step"], [(r["path"], r["shape"], r["dtype"]) for r in manifest["leaves"]]
    (7, [('0/count', [], 'int32'), ('0/mu/w', [2], 'float32'), ('0/nu/w', [2], 'float32')])
  """
  return _manifest_and_arrays(state, tx, step, metadata)[0]


def _template_leaf(leaf: Any) -> tuple[tuple[int, ...], Any]:
  if not hasattr(leaf, "shape") or not hasattr(leaf, "dtype"):
    raise CheckpointError(f"checkpoint: the template leaf {leaf!r} is not an array or "
                          "ShapeDtypeStruct; build the template with tx.init(params) or "
                          "jax.eval_shape(tx.init, params).")
  return tuple(leaf.shape), leaf.dtype


def _place(data: np.ndarray, like: Any, record: Mapping | None) -> Any:
  if _is_key(like):
    impl = (record or {}).get("key_impl") or str(jax.random.key_impl(like))
    value = jax.random.wrap_key_data(jnp.asarray(data), impl=impl)
  else:
    value = jnp.asarray(data)
  sharding = getattr(like, "sharding", None)
  if sharding is not None and not isinstance(like, jax.core.Tracer):
    value = jax.device_put(value, sharding)
  return value


def arrays_to_state(arrays: Mapping[str, Any], like: OptState, *, manifest: Mapping | None = None,
                    missing: str = "raise", unused: str = "raise") -> Any:
  """Put path-keyed arrays back into the structure of a template state, checking every path.

  Args:
    arrays: ``path -> array`` as ``state_to_arrays`` gives (or read back from Orbax or a file).
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
  if missing not in ("raise", "keep") or unused not in ("raise", "ignore"):
    raise ValueError(f"arrays_to_state: missing must be 'raise' or 'keep' (got {missing!r}) and unused "
                     f"'raise' or 'ignore' (got {unused!r}).")
  records = {r["path"]: r for r in (manifest or {}).get("leaves", [])}
  pairs = _flatten(like)
  problems, leaves = [], []
  for path, leaf in pairs:
    shape, dtype = _template_leaf(leaf)
    if path not in arrays:
      if not _is_key(leaf) and np.prod(shape, dtype=int) == 0:  # no data to lose: rebuild it
        leaves.append(_place(np.zeros(shape, jnp.dtype(dtype)), leaf, None))
        continue
      if missing == "keep" and isinstance(leaf, jax.Array):
        leaves.append(leaf)
        continue
      problems.append(f"{path}: missing from the checkpoint (expected shape {shape}, {dtype})"
                      + ("; missing='keep' needs a concrete template leaf" if missing == "keep" else ""))
      leaves.append(None)
      continue
    data = arrays[path]
    record = records.get(path)
    if _is_key(leaf):
      data_shape = jax.eval_shape(jax.random.key_data, leaf).shape
      found_dtype = (record or {}).get("dtype", str(dtype))
      expected_dtype, expected_shape = str(dtype), data_shape
    else:
      found_dtype, expected_dtype, expected_shape = str(np.asarray(data).dtype), str(jnp.dtype(dtype)), shape
    problem = []
    if tuple(np.shape(data)) != tuple(expected_shape):
      problem.append(f"shape {tuple(np.shape(data))} in the checkpoint, {tuple(expected_shape)} expected")
    if found_dtype != expected_dtype:
      problem.append(f"dtype {found_dtype} in the checkpoint, {expected_dtype} expected")
    if problem:
      problems.append(f"{path}: " + "; ".join(problem))
      leaves.append(None)
      continue
    leaves.append(_place(np.asarray(data), leaf, record))
  if unused == "raise":
    extra = [p for p in arrays if p not in {path for path, _ in pairs}]
    if extra:
      problems.append(f"{', '.join(extra)}: in the checkpoint but not in the template state "
                      "(pass unused=\"ignore\" to drop them)")
  if problems:
    written_for = (manifest or {}).get("transformation")
    raise CheckpointError(
        "checkpoint: the arrays do not fit the template state:\n  " + "\n  ".join(problems)
        + (f"\nThe checkpoint was written for {written_for}." if written_for else ""))
  return jax.tree_util.tree_unflatten(jax.tree_util.tree_structure(like), leaves)


def _fsync_directory(directory: str) -> None:
  with contextlib.suppress(OSError):  # platforms without directory fds (Windows)
    fd = os.open(directory, os.O_RDONLY)
    try:
      os.fsync(fd)
    finally:
      os.close(fd)


def _write_archive(f: Any, manifest: dict, arrays: list[np.ndarray]) -> None:
  with zipfile.ZipFile(f, "w", compression=zipfile.ZIP_STORED) as archive:
    archive.writestr(_MANIFEST, json.dumps(manifest, indent=1))
    for index, data in enumerate(arrays):
      data = np.ascontiguousarray(data)
      if data.dtype.byteorder == ">" or (data.dtype.byteorder == "=" and sys.byteorder == "big"):
        data = data.byteswap().view(data.dtype.newbyteorder("<"))
      _write_leaf(archive, f"{index}.bin", data)


def _write_leaf(archive: zipfile.ZipFile, name: str, data: np.ndarray) -> None:
  archive.writestr(name, data.tobytes())


def _atomic_write(path: str, write: Callable[[Any], None]) -> None:
  directory = os.path.dirname(os.path.abspath(path))
  os.makedirs(directory, exist_ok=True)
  fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".tmp", dir=directory)
  try:
    with os.fdopen(fd, "wb") as f:
      write(f)
      f.flush()
      os.fsync(f.fileno())
    os.replace(tmp, path)
  except BaseException:
    with contextlib.suppress(OSError):
      os.unlink(tmp)
    raise
  _fsync_directory(directory)


def save(path: str | os.PathLike, state: OptState, *, tx: GradientTransformation | None = None, step: int | None = None,
         metadata: Mapping | None = None) -> str:
  """Write a state to one checkpoint file, atomically.

  Args:
    path: the file to write (its directory is created); an existing file is replaced only once the
      new one is complete and on disk.
    state: the optimizer state.
    tx: the transformation, recorded in the manifest by its description.
    step: the training step, recorded in the manifest.
    metadata: JSON-serialisable values to keep in the manifest.

  Returns:
    The path written.

  Example:
    >>> import os, tempfile, jax.numpy as jnp, steadax
    >>> tx = steadax.adam(1e-3)
    >>> params = {"w": jnp.ones(2)}
    >>> path = os.path.join(tempfile.mkdtemp(), "opt.steadax")
    >>> _ = steadax.checkpoint.save(path, tx.init(params), tx=tx, step=0)
    >>> restored = steadax.checkpoint.restore(path, tx.init(params))
    >>> steadax.checkpoint.read_manifest(path)["step"]
    0
  """
  path = os.fspath(path)
  manifest, arrays = _manifest_and_arrays(state, tx, step, metadata)
  _atomic_write(path, lambda f: _write_archive(f, manifest, arrays))
  return path


def _open(path: str) -> zipfile.ZipFile:
  try:
    archive = zipfile.ZipFile(path, "r")
  except FileNotFoundError:
    raise
  except (zipfile.BadZipFile, OSError, EOFError) as e:
    raise CheckpointError(f"checkpoint: {path} is not a complete steadax checkpoint ({e}).") from e
  return archive


def _read_manifest(archive: zipfile.ZipFile, path: str) -> dict:
  try:
    manifest = json.loads(archive.read(_MANIFEST))
  except (KeyError, ValueError, zipfile.BadZipFile, OSError, EOFError) as e:
    raise CheckpointError(f"checkpoint: {path} has no readable manifest ({e}).") from e
  if manifest.get("format") != FORMAT or manifest.get("format_version") != FORMAT_VERSION:
    raise CheckpointError(f"checkpoint: {path} is not a {FORMAT} file of version {FORMAT_VERSION} "
                          f"(format {manifest.get('format')!r}, version {manifest.get('format_version')!r}).")
  return manifest


def read_manifest(path: str | os.PathLike) -> dict:
  """The manifest of a checkpoint file (see ``state_manifest``), without reading its arrays.

  Args:
    path: a file written by ``save`` or ``save_step``.

  Returns:
    The manifest dict.

  Example:
    >>> import os, tempfile, jax.numpy as jnp, steadax
    >>> tx = steadax.sgd(0.1)
    >>> path = steadax.checkpoint.save(os.path.join(tempfile.mkdtemp(), "c"), tx.init({}), tx=tx)
    >>> steadax.checkpoint.read_manifest(path)["transformation"]
    'Chain(transforms=(_Identity(), ScaleByLearningRate(learning_rate=0.1, flip_sign=True)))'
  """
  path = os.fspath(path)
  with _open(path) as archive:
    return _read_manifest(archive, path)


def _read(path: str) -> tuple[dict, dict[str, np.ndarray]]:
  with _open(path) as archive:
    manifest = _read_manifest(archive, path)
    arrays = {}
    for index, record in enumerate(manifest["leaves"]):
      try:
        raw = archive.read(f"{index}.bin")
      except (KeyError, zipfile.BadZipFile, OSError, EOFError) as e:
        raise CheckpointError(f"checkpoint: {path} is incomplete: the array of {record['path']} cannot "
                              f"be read ({e}).") from e
      if zlib.crc32(raw) != record["crc32"]:
        raise CheckpointError(f"checkpoint: {path} is corrupted: the array of {record['path']} fails its "
                              "checksum.")
      # A PRNG key is stored as its key data (uint32); its record keeps the key dtype and impl.
      dtype = jnp.dtype("uint32") if "key_impl" in record else jnp.dtype(record["dtype"])
      data = np.frombuffer(raw, dtype=np.dtype(dtype).newbyteorder("<")).astype(dtype, copy=False)
      data = data.reshape(record["shape"])
      arrays[record["path"]] = data
  return manifest, arrays


def _check_transformation(manifest: dict, tx: Any, path: str) -> None:
  if tx is None:
    return
  ours, theirs = describe_transformation(tx), manifest.get("transformation")
  if theirs is not None and ours != theirs:
    raise CheckpointError(
        f"checkpoint: {path} was written for another transformation:\n  checkpoint: {theirs}\n"
        f"  given:      {ours}\nPass tx=None to restore into the template's structure anyway.")


def restore(path: str | os.PathLike, like: OptState, *, tx: GradientTransformation | None = None, missing: str = "raise",
            unused: str = "raise") -> Any:
  """Read a checkpoint file into the structure of a template state (see ``arrays_to_state``).

  Args:
    path: a file written by ``save`` or ``save_step``.
    like: the template state: ``tx.init(params)`` or ``jax.eval_shape(tx.init, params)``.
    tx: if given, the checkpoint must have been written for a transformation with the same
      description (``describe_transformation``); None restores into any template that fits.
    missing: ``"raise"`` or ``"keep"``, as in ``arrays_to_state``.
    unused: ``"raise"`` or ``"ignore"``, as in ``arrays_to_state``.

  Returns:
    The restored state.

  Raises:
    CheckpointError: the file is incomplete or corrupted, was written for another transformation,
      or does not fit the template (naming each path).
    FileNotFoundError: there is no such file.

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
  path = os.fspath(path)
  manifest, arrays = _read(path)
  _check_transformation(manifest, tx, path)
  try:
    return arrays_to_state(arrays, like, manifest=manifest, missing=missing, unused=unused)
  except CheckpointError as e:
    raise CheckpointError(f"{path}: {e}") from None


def _step_path(directory: str, step: int) -> str:
  return os.path.join(directory, f"step_{int(step):08d}.steadax")


def all_steps(directory: str | os.PathLike) -> list[int]:
  """The steps of the complete checkpoints in a directory, in increasing order.

  Temporary files of an interrupted ``save_step`` are not checkpoints and are not listed.

  Args:
    directory: a directory written by ``save_step`` (a missing directory has none).

  Returns:
    The sorted steps.

  Example:
    >>> import tempfile, steadax
    >>> steadax.checkpoint.all_steps(tempfile.mkdtemp())
    []
  """
  directory = os.fspath(directory)
  if not os.path.isdir(directory):
    return []
  steps = [int(m.group(1)) for name in os.listdir(directory) if (m := _STEP_FILE.match(name))]
  return sorted(steps)


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
  """Write the checkpoint of one training step into a directory, atomically (see ``save``).

  Args:
    directory: the checkpoint directory (created if needed); one writer at a time.
    step: the training step (the file is ``step_XXXXXXXX.steadax``).
    state: the optimizer state (or any pytree of arrays: ``{"params": ..., "opt_state": ...}``).
    tx: the transformation, recorded in the manifest.
    keep: keep only the latest ``keep`` checkpoints (older ones are deleted after the new one is
      complete); None keeps all.
    metadata: JSON-serialisable values to keep in the manifest.

  Returns:
    The file written.

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
  """
  if keep is not None and (not isinstance(keep, int) or keep < 1):
    raise ValueError(f"save_step: keep must be a positive integer or None, got {keep!r}.")
  directory = os.fspath(directory)
  path = save(_step_path(directory, step), state, tx=tx, step=step, metadata=metadata)
  if keep is not None:
    for old in all_steps(directory)[:-keep]:
      with contextlib.suppress(FileNotFoundError):
        os.unlink(_step_path(directory, old))
    _fsync_directory(directory)
  return path


def restore_step(directory: str | os.PathLike, like: OptState, *, step: int | None = None, tx: GradientTransformation | None = None,
                 missing: str = "raise", unused: str = "raise") -> tuple[int, Any]:
  """Read a step's checkpoint (the latest complete one by default) from a directory.

  Args:
    directory: a directory written by ``save_step``.
    like: the template state (see ``arrays_to_state``).
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
  directory = os.fspath(directory)
  if step is None:
    step = latest_step(directory)
    if step is None:
      raise FileNotFoundError(f"restore_step: no checkpoint in {directory!r}.")
  path = _step_path(directory, step)
  if not os.path.exists(path):
    raise FileNotFoundError(f"restore_step: no checkpoint of step {step} in {directory!r} (steps: "
                            f"{all_steps(directory)}).")
  return int(step), restore(path, like, tx=tx, missing=missing, unused=unused)

