"""Diagnosis of ``update`` and ``apply_updates`` arguments that do not belong together.

When a call fails, the trees it was given are compared (structures, then leaf shapes) and the first
difference becomes an ``InputMismatchError`` naming the transformation, the trees and the paths.
"""

from typing import Any

import jax
import numpy as np

from ._policy import key_path_str

__all__ = ["diagnose_structures", "is_tree_mismatch", "short_repr", "tree_difference", "shape_difference"]


def short_repr(value: Any) -> str:
  """``repr(value)``, cut to 60 characters, for a message."""
  text = repr(value)
  return text if len(text) <= 60 else text[:57] + "..."


_SHAPE_MISMATCH_TEXT = ("incompatible shapes", "shapes must be equal", "Incompatible shapes")

_TREE_MISMATCH_TEXT = _SHAPE_MISMATCH_TEXT + (
    "Dict key mismatch", "Custom node type mismatch", "Tuple arity mismatch", "List arity mismatch",
    "Expected tuple", "Expected list", "Expected dict", "Expected named tuple", "Expected None",
    "tree structure", "Mismatch custom node data", "None arity", "Node arity mismatch",
)


def is_tree_mismatch(error: Exception) -> bool:
  text = str(error)
  return any(fragment in text for fragment in _TREE_MISMATCH_TEXT)


def _leaf_paths(tree: Any) -> list[str]:
  return [key_path_str(p) for p, _ in jax.tree_util.tree_flatten_with_path(tree)[0]]


def tree_difference(owner: str, a_name: str, a: Any, b_name: str, b: Any) -> str:
  a_paths, b_paths = _leaf_paths(a), _leaf_paths(b)
  only_a = [p for p in a_paths if p not in set(b_paths)]
  only_b = [p for p in b_paths if p not in set(a_paths)]
  parts = []
  if only_a:
    parts.append(f"only in {a_name}: {', '.join(only_a[:8])}" + (" ..." if len(only_a) > 8 else ""))
  if only_b:
    parts.append(f"only in {b_name}: {', '.join(only_b[:8])}" + (" ..." if len(only_b) > 8 else ""))
  if not parts:
    parts.append(f"{a_name} is {jax.tree_util.tree_structure(a)}, {b_name} is "
                 f"{jax.tree_util.tree_structure(b)}")
  return f"{owner}: {a_name} and {b_name} have different tree structures; " + "; ".join(parts) + "."


def _state_subtrees(state: Any, path: str = "state"):
  """``(path, subtree)`` of the containers in a state record (NamedTuple fields, tuple entries)."""
  if isinstance(state, tuple) and hasattr(state, "_fields"):
    for name in getattr(state, "_fields"):
      value = getattr(state, name)
      yield f"{path}.{name}", value
      yield from _state_subtrees(value, f"{path}.{name}")
  elif isinstance(state, (tuple, list)):
    for i, value in enumerate(state):
      yield f"{path}[{i}]", value
      yield from _state_subtrees(value, f"{path}[{i}]")


def shape_difference(owner: str, a_name: str, a: Any, b_name: str, b: Any) -> str | None:
  """The first leaf where two trees of one structure differ in shape, as a message (or None)."""
  for (path, x), y in zip(jax.tree_util.tree_flatten_with_path(a)[0], jax.tree_util.tree_leaves(b)):
    if hasattr(x, "shape") and hasattr(y, "shape") and np.shape(x) != np.shape(y):
      return (f"{owner}: at {key_path_str(path)}, {a_name} have shape {np.shape(x)}, {b_name} "
              f"{np.shape(y)}.")
  return None


def _mirrors(subtree: Any) -> bool:
  """Whether a state subtree may mirror the parameters: a container that is not a state record."""
  if isinstance(subtree, tuple) and (hasattr(subtree, "_fields") or not subtree):
    return False
  return not hasattr(subtree, "dtype") and bool(jax.tree_util.tree_leaves(subtree))


def diagnose_structures(owner: str, updates: Any, state: Any, params: Any) -> str | None:
  """Which of the trees given to ``update`` differ, and where; None when none is found."""
  structure = jax.tree_util.tree_structure(updates)
  updates_name = "the updates (gradients)"
  if params is not None:
    if jax.tree_util.tree_structure(params) != structure:
      return tree_difference(owner, updates_name, updates, "the params", params)
    message = shape_difference(owner, updates_name, updates, "the params", params)
    if message is not None:
      return message
  hint = " The state was made by init for other parameters: call init with these parameters."
  for path, subtree in _state_subtrees(state):
    if not _mirrors(subtree):
      continue
    if jax.tree_util.tree_structure(subtree) != structure:
      return tree_difference(owner, updates_name, updates, path, subtree) + hint
    message = shape_difference(owner, updates_name, updates, path, subtree)
    if message is not None:
      return message + hint
  return None
