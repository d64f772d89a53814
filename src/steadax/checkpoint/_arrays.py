"""Optimizer states as path-keyed arrays with a manifest, checked path by path against a template.

A state is any pytree of arrays (NamedTuples, dicts, tuples, PRNG key arrays). ``state_to_arrays``
names each leaf by its tree path (``"1/0/mu/w"``: the chain's second stage, its first stage, field
``mu``, parameter ``w``); ``arrays_to_state`` puts the arrays back into a template state (what
``tx.init(params)`` or ``jax.eval_shape(tx.init, params)`` gives) *by path*, checking that every path
is there with its shape and dtype and naming each path that is not. Matching by path rather than by
position lets a state survive a refactor of the chain wherever the paths stay put (``adam`` to
``adamw``: the weight-decay stage is stateless and ``scale_by_adam``'s paths do not move; a new stage
of a ``named_chain`` can start from its fresh init with ``missing="keep"``) and fail with the list of
paths where they do not. The check reads shapes and dtypes only (``_fit``), so ``_files`` runs it on
a checkpoint's manifest before reading any array. Nothing here imports Orbax.
"""

import functools
import importlib.metadata
import re
from collections.abc import Iterable, Mapping
from typing import Any, Union

import jax
import jax.core  # jax.core.Tracer: jax does not re-export the submodule for type checkers
import jax.numpy as jnp
import numpy as np
from .._core._interface import GradientTransformation
from .._core._tree import key_entry_name
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
]

FORMAT = "steadax-checkpoint"
FORMAT_VERSION = 2
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
  name = key_entry_name(entry)
  return str(entry) if name is None else name  # another library's key: as it prints (paths on disk)


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


def _misfit(leaf: Any, shape: tuple[int, ...], dtype: str) -> str:
  """How a stored array of ``shape`` and ``dtype`` does not fit a template leaf ("" if it fits)."""
  if _is_key(leaf):  # stored as its key data; raw uint32 key data fits too
    expected_shape, expected_dtypes = jax.eval_shape(jax.random.key_data, leaf).shape, (str(leaf.dtype), "uint32")
  else:
    expected_shape, expected_dtypes = tuple(leaf.shape), (str(jnp.dtype(leaf.dtype)),)
  problem = []
  if tuple(shape) != tuple(expected_shape):
    problem.append(f"shape {tuple(shape)} in the checkpoint, {tuple(expected_shape)} expected")
  if dtype not in expected_dtypes:
    problem.append(f"dtype {dtype} in the checkpoint, {expected_dtypes[0]} expected")
  return "; ".join(problem)


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
    problem = _misfit(leaf, *found[path])
    if problem:
      problems.append(f"{path}: {problem}")
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
    steadax.checkpoint._arrays.CheckpointError: checkpoint: the arrays do not fit the template state:
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
