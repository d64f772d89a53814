"""Finding, replacing and mapping named values inside optimizer states.

A *record* is a node whose children have names: a NamedTuple (every optimizer state), a dict, or a
steadax ``Module`` (a transformation or a schedule; all its dataclass fields count, static ones too).
A record *matches* a key when one of its names equals the key, or when its class name does (for
NamedTuples and Modules, so ``get(state, "ScaleByAdamState")`` returns the whole record).
Other containers (tuples of a ``chain``, lists, custom pytrees) are searched through.

The finding and replacing machinery lives in ``steadax._core._state_tree`` (wrappers use it too);
this module re-exports it.
"""

from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

import jax

from .._core._policy import key_path_str
from .._core._prefix import one_level
from .._core._state_tree import Filtering
from .._core._state_tree import NamedTupleKey as NamedTupleKey
from .._core._state_tree import ParamsMarker as _ParamsMarker
from .._core._state_tree import tree_get_all_with_path as tree_get_all_with_path
from .._core._state_tree import tree_set as tree_set
from .._core._types import OptState, Params

__all__ = [
    "NamedTupleKey",
    "tree_get_all_with_path",
    "tree_get",
    "tree_set",
    "tree_map_params",
]


def tree_get(tree: Params, key: Any, default: Any = None, filtering: Filtering | None = None) -> Any:
  """The single value named ``key`` in ``tree`` (see ``get_all_with_path``), or ``default``.

  Args:
    tree: the tree to search.
    key: the field, dict key or class name to look for.
    default: returned when nothing matches.
    filtering: an optional ``filtering(path, value) -> bool`` to choose among matches.

  Returns:
    The value.

  Raises:
    KeyError: when several values match; the message lists their paths.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> state = steadax.inject_hyperparams(steadax.sgd)(learning_rate=0.1).init(jnp.zeros(2))
    >>> steadax.tree.get(state, "learning_rate")
    Array(0.1, dtype=float32)
  """
  found = tree_get_all_with_path(tree, key, filtering)
  if len(found) > 1:
    paths = [jax.tree_util.keystr(p) for p, _ in found]
    raise KeyError(
        f"get: found {len(found)} values for {key!r} at {paths}; pass `filtering` to choose one."
    )
  return found[0][1] if found else default


@runtime_checkable
class Initable(Protocol):
  """An object with ``init(params) -> state`` (every transformation)."""

  def init(self, params: Any) -> Any:
    """A fresh state for ``params``."""


def tree_map_params(
    initable: Callable[[Params], Params] | Initable,
    f: Callable[..., Any],
    state: OptState,
    /,
    *rest: Any,
    transform_non_params: Callable[..., Any] | None = None,
    is_leaf: Callable[[Params], bool] | None = None,
) -> Any:
  """Applies ``f`` to every copy of the parameter tree inside an optimizer state.

  The transformation is initialised on a leafless marker standing in for the parameters; the parts
  of the state that come out as the marker are the parameter-shaped trees (``mu``, ``nu``, ...), the
  rest (counters, hyperparameters, keys) are not. Typical use: derive the state's sharding or
  partition specs from the parameters'. The buffers of a ``fuse`` state are flat concatenations,
  not parameter-shaped trees: they count as non-parameter leaves. (With ``FlatParams`` parameters
  the state's ``mu`` is a ``FlatParams`` like them, and ``f`` sees its buffers.)

  Args:
    initable: a transformation (anything with ``init``) or an init function.
    f: called as ``f(leaf, *rest_leaves)`` on each leaf of each parameter-shaped tree.
    state: the state to map over (from ``initable.init(params)``).
    *rest: trees with the parameters' structure, passed leafwise to ``f``.
    transform_non_params: applied to every other state leaf (left unchanged when None).
    is_leaf: passed to ``jax.tree.map`` over each parameter-shaped tree.

  Returns:
    A tree with the state's structure.

  Raises:
    ValueError: ``state`` does not have the structure ``initable.init`` gives (naming the path).

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> tx = steadax.adam(0.1)
    >>> state = tx.init({"w": jnp.zeros(2)})
    >>> shapes = steadax.tree_map_params(tx, lambda p: p.shape, state,
    ...                                  transform_non_params=lambda _: None)
    >>> shapes[0].mu, shapes[0].count
    ({'w': (2,)}, None)
  """
  marker = _ParamsMarker()
  if isinstance(initable, Initable):
    skeleton = initable.init(marker)
  elif callable(initable):
    skeleton = initable(marker)  # pyright: ignore[reportArgumentType]  (the marker stands in for the parameters)
  else:
    raise TypeError(
        f"tree_map_params: `initable` must be a transformation or an init function, got "
        f"{type(initable).__name__}"
    )

  is_marker = lambda x: isinstance(x, _ParamsMarker)  # noqa: E731
  non_params = transform_non_params if transform_non_params is not None else (lambda x: x)

  def visit(skeleton_node, value, path):
    if is_marker(skeleton_node):
      return jax.tree_util.tree_map(f, value, *rest, is_leaf=is_leaf)
    if not any(map(is_marker, jax.tree_util.tree_leaves(skeleton_node, is_leaf=is_marker))):
      # No parameter tree below: every leaf of the state here is a non-parameter leaf, whatever
      # its structure (a fused state's buffers depend on the parameters' shapes, which the marker
      # does not have; they are flat buffers, not parameter-shaped trees).
      return jax.tree_util.tree_map(non_params, value)
    skeleton_children, skeleton_def = one_level(skeleton_node)
    children, treedef = one_level(value)
    if skeleton_def != treedef:
      raise ValueError(
          f"tree_map_params: `state` does not have the structure `initable.init` gives at "
          f"{key_path_str(path)}: expected {skeleton_def}, got {treedef}.")
    return treedef.unflatten([visit(sk, child, (*path, key))
                              for (_, sk), (key, child) in zip(skeleton_children, children)])

  return visit(skeleton, state, ())
