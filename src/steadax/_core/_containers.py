"""States that came back in other containers: read them in init's, give them back in the caller's.

Frameworks that hold an optimizer state keep its leaves and their order but may rebuild its
containers. Flax NNX is the common case: ``nnx.Optimizer`` wraps each per-parameter entry of the
state in a Variable and writes the new state back through ``nnx.state``, which turns any tuple,
list or dict *below* a parameter's position (SOAP's per-axis matrices, SM3's covers, a blockwise
quantised moment's codes and scales) into an ``nnx.State`` mapping with integer or string keys.
Optax's own transformations only ``tree_map`` over such nodes and never notice; steadax's read
per-parameter nodes by position and kind (``matrices[axis].size``, ``moment["codes"]``), which
a mapping of integer keys does not answer.

The fix is at the one entrance every steadax transformation shares, ``Transformation.update``:

1. A state whose containers are all ones steadax builds (tuples, NamedTuples, lists, dicts, None,
   steadax's own classes) goes through untouched: this costs one pass over its nodes.
2. Otherwise (foreign containers: an ``nnx.State``, a ``FrozenDict``, an Equinox Module mirroring
   the parameters) the structure ``init`` makes for these parameters is derived abstractly
   (``jax.eval_shape``, once per transformation, parameter layout and state structure: a cache,
   not a retrace per step). When the given state has other containers but the same leaves (the
   same number, each of the shape init gives), ``update_fn`` reads it in init's containers, and
   the new state is handed back in the containers it came in, so the caller (NNX writing
   ``nnx.state(new_state)`` back into its Variables) sees the structure it gave.

Only the outermost transformation does this: a chain's or a wrapper's children are given a state
that is already in init's containers.
"""


import contextlib
import contextvars
from collections.abc import Callable, Iterator
from typing import Any

import jax
import numpy as np

from ._contract import InputMismatchError
from ._policy import key_path_str

__all__ = ["in_init_containers"]

# True while an enclosing transformation's update_fn runs on a state already in init's containers.
_INSIDE = contextvars.ContextVar("steadax_init_containers", default=False)

# type -> whether it is a container steadax's init never builds (computed once per type).
_FOREIGN: dict[type, bool] = {}

# (transformation structure, parameter layout, given state structure) -> init's structure, or None
# where the given state is already in it. Bounded: cleared when it grows past _CACHE_SIZE.
_INIT_STRUCTURE: dict[Any, Any] = {}
_CACHE_SIZE = 512


def _foreign(node: Any) -> bool:
  kind = type(node)
  known = _FOREIGN.get(kind)
  if known is None:
    if node is None or isinstance(node, (tuple, list, dict)) or kind.__module__.startswith("steadax"):
      known = False
    else:
      # Arrays, numbers and other leaves are not containers; a registered pytree node that
      # steadax does not build is.
      known = not jax.tree_util.treedef_is_leaf(
          jax.tree_util.tree_structure(node, is_leaf=lambda x: x is not node))
    _FOREIGN[kind] = known
  return known


def _has_foreign_container(state: Any) -> bool:
  found = False

  def visit(node: Any) -> bool:
    nonlocal found
    if not found and _foreign(node):
      found = True
    return found  # stop descending once one is found

  jax.tree_util.tree_flatten(state, is_leaf=visit)
  return found


def _abstract(tree: Any) -> Any:
  return jax.tree_util.tree_map(
      lambda x: jax.ShapeDtypeStruct(np.shape(x), jax.numpy.result_type(x)), tree)


def _layout(tree: Any) -> Any:
  leaves, treedef = jax.tree_util.tree_flatten(tree)
  return treedef, tuple((np.shape(x), jax.numpy.result_type(x)) for x in leaves)


def _init_structure(tx: Any, state_def: Any, reference: Any) -> Any:
  """Init's state structure for parameters like ``reference``, or None when it is ``state_def``."""
  key = (jax.tree_util.tree_structure(tx), _layout(reference), state_def)
  try:
    return _INIT_STRUCTURE[key]
  except KeyError:
    pass
  except TypeError:  # a static field that cannot be hashed: derive it every time
    key = None
  try:
    made = jax.eval_shape(tx.init, _abstract(reference))
  except Exception:  # noqa: BLE001 - init's own errors belong to init; here there is nothing to read
    made = None
  result = None
  if made is not None:
    made_leaves, made_def = jax.tree_util.tree_flatten(made)
    if made_def != state_def and made_def.num_leaves == state_def.num_leaves:
      result = (made_def, tuple(np.shape(x) for x in made_leaves))
  if key is not None:
    if len(_INIT_STRUCTURE) >= _CACHE_SIZE:
      _INIT_STRUCTURE.clear()
    _INIT_STRUCTURE[key] = result
  return result


@contextlib.contextmanager
def _inside() -> Iterator[None]:
  token = _INSIDE.set(True)
  try:
    yield
  finally:
    _INSIDE.reset(token)


def in_init_containers(tx: Any, state: Any, reference: Any) -> tuple[Any, Callable[[Any], Any], Any]:
  """``state`` in the containers ``tx.init`` makes, the way back, and a context for ``update_fn``.

  Args:
    tx: the transformation whose ``update`` was called.
    state: the state it was given.
    reference: the parameters (the updates where there are none): init's structure follows them.

  Returns:
    ``(state, back, context)``: the state to give ``update_fn`` (the given one when nothing needs
    to change), ``back(new_state)`` putting a new state in the given state's containers, and a
    context manager to run ``update_fn`` in (its children skip this check).
  """
  if _INSIDE.get() or reference is None or not _has_foreign_container(state):
    return state, _same, contextlib.nullcontext()
  with_paths, state_def = jax.tree_util.tree_flatten_with_path(state)
  leaves = [leaf for _, leaf in with_paths]
  made = _init_structure(tx, state_def, reference)
  if made is None:
    return state, _same, _inside()
  made_def, shapes = made
  for (path, leaf), shape in zip(with_paths, shapes):
    if np.shape(leaf) != shape:
      raise InputMismatchError(
          f"{tx.owner}: the state leaf at state{key_path_str(path)} has shape {np.shape(leaf)}, "
          f"where init makes {shape} for these parameters. The state was made by init for other "
          "parameters: call init with these parameters.")
  return made_def.unflatten(leaves), lambda new: state_def.unflatten(jax.tree_util.tree_leaves(new)), _inside()


def _same(new_state: Any) -> Any:
  return new_state
