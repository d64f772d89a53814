"""State surgery: reset one partition's state, read or overwrite named entries of a nested state.

Every helper returns a state with exactly the structure, shapes and dtypes it was given, so the
result can go straight back into a jitted step (no retrace) or a ``lax.scan`` carry.
"""

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from collections.abc import Hashable
from jax.typing import ArrayLike

from .._core._policy import key_path_str
from .._core._state_tree import tree_get_all_with_path, tree_set
from ._partition import PartitionState
from .._core._interface import GradientTransformation
from .._core._types import OptState, Params

__all__ = ["reset_partition_state", "state_get", "state_set"]

_RAISE = object()


def _is_partition_state(x: Any) -> bool:
  return isinstance(x, PartitionState)


def reset_partition_state(tx: GradientTransformation, state: OptState, params: Params, label: Hashable) -> Any:
  """``state`` with the state of the transformation labelled ``label`` reset to its initial value.

  Works for a ``partition``/``groups`` transformation anywhere inside ``tx`` (chains,
  ``inject_hyperparams``, other wrappers): every ``PartitionState`` holding ``label`` gets that entry
  from a fresh ``tx.init(params)``; everything else is kept. Jittable; the types are unchanged.

  Args:
    tx: the transformation that produced ``state``.
    state: its current state.
    params: the parameters (only their shapes and dtypes matter; abstract values work).
    label: the label (for ``groups``: the pattern) whose state to reset.

  Returns:
    The new state.

  Raises:
    KeyError: when no partition in ``state`` has ``label``.
    ValueError: when ``state`` does not have the structure ``tx.init(params)`` gives.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> params = {"w": jnp.ones(1), "b": jnp.ones(1)}
    >>> tx = steadax.partition({"a": steadax.adam(0.1), "b": steadax.adam(0.1)}, {"w": "a", "b": "b"})
    >>> _, state = tx.update(params, tx.init(params), params)
    >>> state = steadax.reset_partition_state(tx, state, params, "a")
    >>> int(state.inner_states["a"].inner_state[0].count), int(state.inner_states["b"].inner_state[0].count)
    (0, 1)
  """
  fresh = tx.init(params)
  found = []

  def visit(current: Any, initial: Any) -> Any:
    if not isinstance(current, PartitionState):
      return current
    if not isinstance(initial, PartitionState) or set(initial.inner_states) != set(current.inner_states):
      raise ValueError(f"a PartitionState stands where tx.init(params) has {type(initial).__name__}")
    inner = {}
    for key, value in current.inner_states.items():
      if key == label:
        found.append(key)
        inner[key] = initial.inner_states[key]
      else:
        inner[key] = walk(value, initial.inner_states[key])
    return PartitionState(inner)

  def walk(current: Any, initial: Any) -> Any:
    try:
      return jax.tree_util.tree_map(visit, current, initial, is_leaf=_is_partition_state)
    except (ValueError, TypeError, KeyError) as err:
      raise ValueError(
          f"reset_partition_state: `state` does not have the structure `tx.init(params)` gives: {err}"
      ) from None

  new_state = walk(state, fresh)
  if not found:
    labels = sorted({repr(k) for p in jax.tree_util.tree_leaves(state, is_leaf=_is_partition_state)
                     if isinstance(p, PartitionState) for k in p.inner_states})
    raise KeyError(
        f"reset_partition_state: no partition of the state has the label {label!r}; "
        f"the labels are [{', '.join(labels)}]."
    )
  return new_state


def _in_partition(path: tuple, label: Any) -> bool:
  """Whether ``path`` goes through ``PartitionState.inner_states[label]``."""
  for i, entry in enumerate(path[:-1]):
    if (getattr(entry, "tuple_name", None) == "PartitionState" and getattr(entry, "name", None) == "inner_states"
        and isinstance(path[i + 1], jax.tree_util.DictKey) and path[i + 1].key == label):
      return True
  return False


class StateKeyError(KeyError):
  """A KeyError whose message prints as written (KeyError quotes it, showing newlines as ``\\n``)."""

  def __str__(self) -> str:
    return str(self.args[0]) if self.args else ""


def _matches(state: Any, name: Any, label: Any) -> list[tuple[tuple, Any]]:
  found = tree_get_all_with_path(state, name)
  if label is not None:
    found = [(p, v) for p, v in found if _in_partition(p, label)]
  return found


def _where(label: Any) -> str:
  return "" if label is None else f" in the partition labelled {label!r}"


def state_get(state: OptState, name: str, *, label: Hashable | None = None, default: Any = _RAISE) -> Any:
  """The entry named ``name`` in a nested optimizer state (a hyperparameter, a statistic, a record).

  ``name`` is a NamedTuple field (``"count"``, ``"mu"``), a dict key (``"learning_rate"`` of
  ``inject_hyperparams``) or a state class name (``"ScaleByAdamState"``), found anywhere in the state
  as ``steadax.tree.get`` does; ``label`` narrows the search to one partition (or group) when
  several hold the name.

  Args:
    state: the optimizer state.
    name: the entry's name.
    label: a ``partition`` label (a ``groups`` pattern) to search under, or None for everywhere.
    default: returned when nothing matches; without it a KeyError is raised.

  Returns:
    The value (an array or a subtree), as stored.

  Raises:
    KeyError: when several entries match (the message lists their paths) or none does and no
      ``default`` is given.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> lr = steadax.inject_hyperparams(steadax.sgd)
    >>> tx = steadax.groups({"*.bias": lr(learning_rate=0.01), "*": lr(learning_rate=0.1)})
    >>> state = tx.init({"dense": {"kernel": jnp.ones(2), "bias": jnp.ones(1)}})
    >>> steadax.state_get(state, "learning_rate", label="*.bias")
    Array(0.01, dtype=float32)
  """
  found = _matches(state, name, label)
  if len(found) > 1:
    paths = "".join(f"\n  {key_path_str(p)}" for p, _ in found)
    raise StateKeyError(
        f"state_get: {len(found)} entries are named {name!r}{_where(label)}; pass `label` to choose "
        f"a partition. They are at:{paths}"
    )
  if not found:
    if default is _RAISE:
      raise StateKeyError(f"state_get: no entry is named {name!r}{_where(label)}.")
    return default
  return found[0][1]


def _cast_like(path: tuple, old: Any, new: Any) -> Any:
  """``new`` with the structure, shape and dtype of ``old`` (a scalar broadcasts)."""
  where = key_path_str(path)
  try:
    new_leaves = jax.tree_util.tree_structure(old).flatten_up_to(new)
  except (ValueError, TypeError):
    raise ValueError(
        f"state_set: the value for the entry at {where} does not have its structure "
        f"{jax.tree_util.tree_structure(old)}."
    ) from None
  old_leaves = jax.tree_util.tree_leaves(old)
  out = []
  for o, n in zip(old_leaves, new_leaves):
    dtype = np.dtype(o.dtype) if hasattr(o, "dtype") else np.dtype(jnp.result_type(o))
    n = jnp.asarray(n)
    if jnp.issubdtype(n.dtype, jnp.complexfloating) and not jnp.issubdtype(dtype, jnp.complexfloating):
      raise TypeError(f"state_set: the entry at {where} is {dtype.name}; it cannot take a complex value.")
    if n.shape != np.shape(o):
      if n.ndim:
        raise ValueError(
            f"state_set: the entry at {where} has shape {np.shape(o)}, the new value {n.shape}."
        )
      n = jnp.broadcast_to(n, np.shape(o))
    out.append(n.astype(dtype))  # the user's value takes the entry's dtype: the state keeps its types
  return jax.tree_util.tree_structure(old).unflatten(out)


def state_set(state: OptState, name: str, value: ArrayLike, *, label: Hashable | None = None) -> Any:
  """``state`` with every entry named ``name`` (under ``label`` if given) set to ``value``.

  The value is cast to each entry's dtype and a scalar is broadcast to its shape, so the state keeps
  its types: overwriting a float32 learning rate with a Python float (or a float64 array under
  x64) neither retraces a jitted step nor breaks a ``lax.scan`` carry.

  Args:
    state: the optimizer state.
    name: the entry's name (a NamedTuple field or dict key, see ``state_get``).
    value: the new value: a scalar, an array of the entry's shape, or a tree of the entry's
      structure.
    label: a ``partition`` label (a ``groups`` pattern) to restrict the change to.

  Returns:
    The new state.

  Raises:
    KeyError: when no entry matches.
    ValueError: when the value's shape or structure does not fit an entry.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> lr = steadax.inject_hyperparams(steadax.sgd)
    >>> tx = steadax.groups({"*.bias": lr(learning_rate=0.01), "*": lr(learning_rate=0.1)})
    >>> state = tx.init({"dense": {"kernel": jnp.ones(2), "bias": jnp.ones(1)}})
    >>> state = steadax.state_set(state, "learning_rate", 0.5, label="*")
    >>> steadax.state_get(state, "learning_rate", label="*")
    Array(0.5, dtype=float32)
  """
  found = _matches(state, name, label)
  if not found:
    raise StateKeyError(f"state_set: no entry is named {name!r}{_where(label)}.")
  for path, old in found:
    state = tree_set(state, lambda p, _, path=path: p == path, **{name: _cast_like(path, old, value)})
  return state
