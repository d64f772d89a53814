"""Named values inside optimizer states: find them, replace them, and the parameters' stand-in.

The machinery behind ``steadax.tree.get_all_with_path`` / ``set`` / ``tree_map_params`` and
``state_get``/``state_set``, kept in the core so wrappers (which sit below ``steadax.tree``) use it
without importing upwards. ``steadax.tree`` re-exports the public names.

A *record* is a node whose children have names: a NamedTuple (every optimizer state), a dict, or a
steadax ``Module`` (a transformation or a schedule; all its dataclass fields count, static ones too).
A record *matches* a key when one of its names equals the key, or when its class name does (for
NamedTuples and Modules, so ``get(state, "ScaleByAdamState")`` returns the whole record).
Other containers (tuples of a ``chain``, lists, custom pytrees) are searched through.
"""

import copy
import dataclasses
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ._module import Module
from ._types import Params

__all__ = [
    "NamedTupleKey",
    "ParamsMarker",
    "tree_get_all_with_path",
    "tree_set",
]

KeyPath = tuple[Any, ...]
Filtering = Callable[[KeyPath, Any], bool]


@dataclasses.dataclass(frozen=True)
class NamedTupleKey:
  """A path entry for the field ``name`` of a NamedTuple called ``tuple_name``.

  The paths given to (and returned by) ``get_all_with_path``, ``get`` and ``set`` use it instead of
  JAX's ``GetAttrKey`` so a ``filtering`` function can tell apart equal field names of different
  states (``count`` of ``ScaleByAdamState`` versus ``count`` of ``ScaleByScheduleState``).

  Attributes:
    tuple_name: the NamedTuple's class name.
    name: the field's name.

  Example:
    >>> import jax, steadax
    >>> jax.tree_util.keystr((steadax.tree_utils.NamedTupleKey("ScaleByAdamState", "mu"),))
    'ScaleByAdamState.mu'
  """

  tuple_name: str
  name: str

  def __str__(self) -> str:
    return f"{self.tuple_name}.{self.name}"


def _is_named_tuple(node: Any) -> bool:
  return isinstance(node, tuple) and hasattr(type(node), "_fields")


def _is_record(node: Any) -> bool:
  return _is_named_tuple(node) or isinstance(node, (dict, Module))


def _record_children(path: KeyPath, node: Any) -> list[tuple[Any, KeyPath, Any]]:
  """(name, path, child) for each named child of a record."""
  if _is_named_tuple(node):
    cls = type(node).__name__
    return [(f, (*path, NamedTupleKey(cls, f)), getattr(node, f)) for f in node._fields]
  if isinstance(node, dict):
    return [(k, (*path, jax.tree_util.DictKey(k)), v) for k, v in node.items()]
  return [
      (f.name, (*path, jax.tree_util.GetAttrKey(f.name)), getattr(node, f.name))
      for f in dataclasses.fields(node)
  ]


def _container_children(path: KeyPath, node: Any) -> tuple[list[tuple[KeyPath, Any]], Any]:
  """One level of a non-record pytree node: its children with paths, and its treedef."""
  with_path, treedef = jax.tree_util.tree_flatten_with_path(node, is_leaf=lambda x: x is not node)
  return [((*path, *p), child) for p, child in with_path], treedef


def _is_container(node: Any) -> bool:
  if node is None:
    return False
  return jax.tree_util.tree_structure(node, is_leaf=lambda x: x is not node).num_nodes > 1


def _class_matches(node: Any, keys: Any) -> bool:
  return (_is_named_tuple(node) or isinstance(node, Module)) and type(node).__name__ in keys


def _has_any(node: Any, keys: Any) -> bool:
  if not _is_record(node):
    return False
  if _class_matches(node, keys):
    return True
  names = node._fields if _is_named_tuple(node) else (
      node.keys() if isinstance(node, dict) else [f.name for f in dataclasses.fields(node)])
  return any(_hashable_in(k, names) for k in keys)


def _hashable_in(key: Any, names: Any) -> bool:
  try:
    return key in names
  except TypeError:
    return False


def _topmost(node: Any, path: KeyPath, key: Any, out: list[tuple[KeyPath, Any]]) -> None:
  """Records matching ``key`` reached without passing through another match, in tree order."""
  if _is_record(node):
    if _has_any(node, (key,)):
      out.append((path, node))
      return
    for _, child_path, child in _record_children(path, node):
      _topmost(child, child_path, key, out)
  elif _is_container(node):
    for child_path, child in _container_children(path, node)[0]:
      _topmost(child, child_path, key, out)


def _find(tree: Any, path: KeyPath, key: Any) -> list[tuple[KeyPath, Any]]:
  tops: list[tuple[KeyPath, Any]] = []
  _topmost(tree, path, key, tops)
  found = []
  for node_path, node in tops:
    if _class_matches(node, (key,)):
      found.append((node_path, node))
    else:
      found.extend((p, v) for name, p, v in _record_children(node_path, node) if name == key)
  # Matches nested under a match come after all the top-most ones (Optax's order).
  for node_path, node in tops:
    for _, child_path, child in _record_children(node_path, node):
      found.extend(_find(child, child_path, key))
  return found


def tree_get_all_with_path(
    tree: Params, key: Any, filtering: Filtering | None = None
) -> list[tuple[KeyPath, Any]]:
  """Every value named ``key`` in ``tree``, with its path.

  A value is named ``key`` when it is the field ``key`` of a NamedTuple or Module, the entry
  ``key`` of a dict, or a NamedTuple/Module whose class is called ``key``.

  Args:
    tree: the tree to search (an optimizer state, a transformation, any pytree).
    key: the field, dict key or class name to look for.
    filtering: an optional ``filtering(path, value) -> bool`` keeping only some matches.

  Returns:
    A list of ``(path, value)``; paths are tuples of JAX key entries and ``NamedTupleKey`` (print
    them with ``jax.tree_util.keystr``).

  Example:
    >>> import jax, jax.numpy as jnp, steadax
    >>> state = steadax.adam(0.1).init(jnp.zeros(2))
    >>> [jax.tree_util.keystr(p) for p, _ in steadax.tree.get_all_with_path(state, "count")]
    ['[0]ScaleByAdamState.count']
  """
  found = _find(tree, (), key)
  if filtering is not None:
    found = [(p, v) for p, v in found if filtering(p, v)]
  return found


def _rebuild_record(node: Any, children: dict[Any, Any]) -> Any:
  if _is_named_tuple(node):
    return node._replace(**children)
  if isinstance(node, dict):
    new = copy.copy(node)
    new.update(children)
    return new
  new = object.__new__(type(node))
  new.__dict__.update(node.__dict__)
  for name, value in children.items():
    object.__setattr__(new, name, value)
  return new


def _in_leaf_dtype(old: Any, new: Any) -> Any:
  """A Python number replacing an array leaf, as an array of that leaf's dtype and shape.

  ``set(state, learning_rate=0.5)`` then gives the state the types its ``init`` made (Optax stores
  the Python float, which the next ``update`` must cope with). A fractional number replacing an
  integer leaf is stored as it is: truncating it would change the value.
  """
  if isinstance(new, bool) or not isinstance(new, (int, float)) or not hasattr(old, "dtype"):
    return new
  if jnp.issubdtype(old.dtype, jnp.bool_) or (
      jnp.issubdtype(old.dtype, jnp.integer) and not float(new).is_integer()):
    return new
  return jnp.full(np.shape(old), new, old.dtype)


def _replace(node: Any, path: KeyPath, values: dict[str, Any], filtering: Filtering | None) -> Any:
  def keep(p, v):
    return filtering is None or filtering(p, v)

  if _is_record(node):
    if _class_matches(node, values) and keep(path, node):
      return values[type(node).__name__]
    children, changed = {}, False
    for name, child_path, child in _record_children(path, node):
      if _hashable_in(name, values) and keep(child_path, child):
        children[name] = _in_leaf_dtype(child, values[name])
      else:
        children[name] = _replace(child, child_path, values, filtering)
      changed = changed or children[name] is not child
    # Untouched subtrees are returned as they are (same objects), as in Optax.
    return _rebuild_record(node, children) if changed else node
  if _is_container(node):
    children, treedef = _container_children(path, node)
    new = [_replace(c, p, values, filtering) for p, c in children]
    if all(n is c for n, (_, c) in zip(new, children)):
      return node
    return treedef.unflatten(new)
  return node


def tree_set(tree: Params, filtering: Filtering | None = None, /, **kwargs: Any) -> Any:
  """A copy of ``tree`` with every value named by a keyword replaced by that keyword's value.

  Replaces exactly the values ``get_all_with_path(tree, key, filtering)`` returns, for each
  ``key`` (a replaced value is not searched further). Optax 0.2.8 skips matches nested below a
  tuple inside another match (the inner ``count`` of ``inject_hyperparams``'s state); steadax
  replaces them too, so ``set`` and ``get_all_with_path`` always agree.

  Args:
    tree: the tree (an optimizer state, a transformation, any pytree).
    filtering: an optional ``filtering(path, value) -> bool`` restricting the replacements
      (positional only).
    **kwargs: the names to replace and their new values. A Python number replacing an array leaf
      becomes an array of that leaf's dtype and shape, so the state keeps its types (a fractional
      number replacing an integer leaf is kept as it is).

  Returns:
    The new tree.

  Raises:
    KeyError: when a keyword matches nothing (after filtering).

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> state = steadax.inject_hyperparams(steadax.sgd)(learning_rate=0.1).init(jnp.zeros(2))
    >>> state = steadax.tree.set(state, learning_rate=jnp.asarray(0.01, jnp.float32))
    >>> steadax.tree.get(state, "learning_rate")
    Array(0.01, dtype=float32)
  """
  for key in kwargs:
    if not tree_get_all_with_path(tree, key, filtering):
      extra = " satisfying `filtering`" if filtering is not None else ""
      raise KeyError(f"set: found no value named {key!r}{extra} in the tree.")
  return _replace(tree, (), kwargs, filtering)


@jax.tree_util.register_pytree_node_class
class ParamsMarker:
  """A leafless stand-in for the parameters: ``init`` copies it wherever the state mirrors them."""

  def tree_flatten(self):
    return (), None

  @classmethod
  def tree_unflatten(cls, aux, children):
    del aux, children
    return cls()
