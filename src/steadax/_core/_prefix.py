"""Masks and labels as prefix trees of the parameters (``masked``, ``partition``, ``flat_params``).

A mask (or ``partition``'s labels, or ``flat_params``' groups) is a *prefix tree* of the
parameters: a leaf of the mask decides for the whole subtree below it. Mappings are matched by key,
so a plain ``dict`` mask works for Flax ``FrozenDict`` parameters and the reverse; sequences are
matched by position. The fusion layer extends ``resolve_prefix`` to its flat parameters
(``steadax._fusion._flat.resolve_prefix``, which ``masked`` and ``partition`` call).
"""

from collections.abc import Mapping
from typing import Any

import jax

from ._policy import key_path_str
from ._tree import unwrap_variables

__all__ = ["align_prefix", "is_mask_callable", "one_level", "prefix_leaves", "resolve_prefix"]


def _is_none(x: Any) -> bool:
  return x is None


def one_level(tree: Any) -> tuple[list[tuple[Any, Any]], Any]:
  """The children of ``tree``'s root node with their key entries, and the root's treedef (a leaf:
  itself, with key None, and a leaf's treedef)."""
  children, treedef = jax.tree_util.tree_flatten_with_path(tree, is_leaf=lambda x: x is not tree)
  return [(path[0] if path else None, child) for path, child in children], treedef


def align_prefix(owner: str, argname: str, prefix: Any, tree: Any, path: tuple = ()) -> Any:
  """``prefix`` rebuilt with ``tree``'s container types wherever both are mappings or sequences.

  A ``dict`` mask for ``FrozenDict`` parameters (or a list for a tuple) would otherwise fail JAX's
  prefix matching on the container type alone. Other nodes are kept as they are.

  Raises:
    ValueError: naming ``owner``, ``argname`` and the tree path where the keys differ.
  """
  if isinstance(prefix, Mapping) and isinstance(tree, Mapping):
    children, treedef = one_level(tree)
    if not all(isinstance(k, jax.tree_util.DictKey) for k, _ in children):
      return prefix  # a custom mapping node: leave the matching to JAX
    keys = [k.key for k, _ in children]
    missing = [k for k in keys if k not in prefix]
    extra = [k for k in prefix if k not in set(keys)]
    if missing or extra:
      detail = []
      if missing:
        detail.append("no entry for " + ", ".join(repr(k) for k in missing))
      if extra:
        detail.append("unexpected " + ", ".join(repr(k) for k in extra))
      raise ValueError(
          f"{owner}: `{argname}` does not match the parameters at {key_path_str(path)}: "
          + "; ".join(detail)
      )
    return treedef.unflatten([
        align_prefix(owner, argname, prefix[k.key], child, (*path, k)) for k, child in children
    ])
  if (isinstance(prefix, (list, tuple)) and isinstance(tree, (list, tuple))
      and not hasattr(prefix, "_fields") and len(prefix) == len(tree)):
    children, treedef = one_level(tree)
    if len(children) != len(prefix):
      return prefix
    return treedef.unflatten([
        align_prefix(owner, argname, p, child, (*path, k))
        for p, (k, child) in zip(prefix, children)
    ])
  return prefix


def is_mask_callable(mask: Any) -> bool:
  """Whether ``mask`` is a function of the parameters rather than a tree (Optax's rule)."""
  flags = jax.tree_util.tree_leaves(jax.tree_util.tree_map(callable, mask))
  return bool(flags) and all(flags)


class _Box:
  """A value kept whole while a tree is flattened (a label may be a tuple)."""

  __slots__ = ("value",)

  def __init__(self, value: Any):
    self.value = value


def prefix_leaves(owner: str, argname: str, spec: Any, tree: Any) -> list:
  """The value a mask or label tree (or function) gives each leaf of ``tree``, in leaf order
  (``None`` leaves included, as ``tree_flatten(tree, is_leaf=lambda x: x is None)`` orders them).
  """
  value = resolve_prefix(owner, argname, spec, tree)
  full = jax.tree_util.tree_map(
      lambda v, sub: jax.tree_util.tree_map(lambda _: _Box(v), sub, is_leaf=_is_none),
      value, tree, is_leaf=_is_none)
  return [box.value for box in jax.tree_util.tree_leaves(full, is_leaf=lambda x: isinstance(x, _Box))]


def resolve_prefix(owner: str, argname: str, spec: Any, tree: Any) -> Any:
  """A mask or label tree (or the result of calling it on ``tree``) aligned with ``tree``.

  A callable is called on ``tree`` with its variable wrappers (Flax NNX ``Param``) replaced by
  their arrays, so it sees the same paths whether ``init`` got variables and ``update`` arrays
  (as ``nnx.Optimizer`` calls them) or not; its result is then a prefix of both trees.

  Raises:
    ValueError: naming ``owner``, ``argname`` and the tree path where the keys differ.
  """
  value = spec(unwrap_variables(tree)) if is_mask_callable(spec) else spec
  return align_prefix(owner, argname, value, tree)
