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


def _is_sequence(x: Any) -> bool:
  """A plain list or tuple (a NamedTuple is a record: JAX matches it by type, as any other node)."""
  return isinstance(x, (list, tuple)) and not hasattr(x, "_fields")


def _describe(x: Any) -> str:
  """What a node of a mask or of the parameters is, for a message."""
  if x is None:
    return "None"
  if isinstance(x, Mapping):
    keys = list(x)
    shown = ", ".join(repr(k) for k in keys[:6]) + (" ..." if len(keys) > 6 else "")
    return f"a {type(x).__name__} with keys {shown}" if keys else f"an empty {type(x).__name__}"
  if _is_sequence(x):
    return f"a {type(x).__name__} of {len(x)} entr{'y' if len(x) == 1 else 'ies'}"
  if hasattr(x, "shape") and hasattr(x, "dtype"):
    return f"an array of shape {tuple(x.shape)}"
  return f"a {type(x).__name__}"


def align_prefix(owner: str, argname: str, prefix: Any, tree: Any, path: tuple = (), *,
                 returned: bool = False) -> Any:
  """``prefix`` rebuilt with ``tree``'s container types wherever both are mappings or sequences.

  A ``dict`` mask for ``FrozenDict`` parameters (or a list for a tuple) would otherwise fail JAX's
  prefix matching on the container type alone. Where the two cannot match, the error names the
  path and both nodes (``it has a list of 1 entry there, the parameters a dict with keys 'c'``),
  never JAX's own text about "the prefix pytree tree_map tree": a mapping or a sequence in
  ``prefix`` facing another kind of node, keys that differ, sequences of other lengths. Other nodes
  (records, custom pytree nodes) are kept as they are, for JAX to match.

  Args:
    owner: the transformation's name, for the message.
    argname: the argument that gave ``prefix`` (``mask``, ``param_labels``).
    prefix: the mask or labels: a prefix tree of ``tree``.
    tree: the parameters (or updates).
    path: the key path of ``tree`` within the whole parameters.
    returned: ``prefix`` is what a function given as ``argname`` returned (said in the message).

  Returns:
    ``prefix``, with ``tree``'s mapping and sequence types.

  Raises:
    ValueError: naming ``owner``, ``argname`` and the tree path where the two differ.

  Example:
    >>> align_prefix("masked", "mask", [True], {"w": 1.0})
    Traceback (most recent call last):
    ...
    ValueError: masked: `mask` does not match the parameters at <root>: it has a list of 1 entry there, the parameters a dict with keys 'w'.
  """
  def mismatch(detail: str) -> ValueError:
    what = f"the tree `{argname}` returned" if returned else f"`{argname}`"
    return ValueError(f"{owner}: {what} does not match the parameters at {key_path_str(path)}: {detail}")

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
      raise mismatch("; ".join(detail) + ".")
    return treedef.unflatten([
        align_prefix(owner, argname, prefix[k.key], child, (*path, k), returned=returned)
        for k, child in children
    ])
  if _is_sequence(prefix) and _is_sequence(tree):
    if len(prefix) != len(tree):
      raise mismatch(f"it has {_describe(prefix)} there, the parameters {_describe(tree)}.")
    children, treedef = one_level(tree)
    if len(children) != len(prefix):
      return prefix
    return treedef.unflatten([
        align_prefix(owner, argname, p, child, (*path, k), returned=returned)
        for p, (k, child) in zip(prefix, children)
    ])
  if isinstance(prefix, Mapping) or _is_sequence(prefix):
    # A container where the parameters have another kind of node (a leaf, None, a record, a
    # container of the other kind): no prefix match exists.
    raise mismatch(f"it has {_describe(prefix)} there, the parameters {_describe(tree)}.")
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
  returned = is_mask_callable(spec)
  value = spec(unwrap_variables(tree)) if returned else spec
  return align_prefix(owner, argname, value, tree, returned=returned)
