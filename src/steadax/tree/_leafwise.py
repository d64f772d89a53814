"""Leafwise mapping with path-naming errors, and the explicit dtype rules of ``steadax.tree``.

Every function of ``steadax.tree`` casts explicitly, so it runs the same under
``jax_numpy_dtype_promotion="strict"`` as under the standard mode: the result dtype of an elementwise
op is JAX's *standard* promotion of its inputs (Python scalars and scalar arguments count as weak, so
they never widen a leaf), computed once per dtype combination at trace time.
"""

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .._core._policy import cast as cast_to
from .._core._policy import compute_dtype, key_path_str, result_dtype, with_weak
from .._core._tree import is_none

__all__ = [
    "map_leaves",
    "flatten_like",
    "result_dtype",
    "with_weak",
    "arith_dtype",
    "cast_to",
    "as_array",
    "reduction_dtype",
    "structure_mismatch",
]


def arith_dtype(dtype: Any) -> np.dtype:
  """Where arithmetic on ``dtype`` runs: at least float32 for floating dtypes, else ``dtype``."""
  dtype = np.dtype(dtype)
  if jnp.issubdtype(dtype, jnp.inexact):
    return compute_dtype(dtype)
  return dtype


def as_array(x: Any) -> jax.Array | np.ndarray:
  return x if isinstance(x, (jax.Array, np.ndarray)) else jnp.asarray(x)


def reduction_dtype(dtypes: Any) -> np.dtype:
  """Accumulator of a reduction: widest floating dtype present (at least float32), else the ints'.

  Integer and boolean trees reduce exactly in their (promoted) integer dtype; a tree with any
  floating or complex leaf reduces in ``compute_dtype`` of its inexact leaves.
  """
  dtypes = [np.dtype(d) for d in dtypes]
  inexact = [d for d in dtypes if jnp.issubdtype(d, jnp.inexact)]
  if inexact or not dtypes:
    return compute_dtype(*inexact)
  dtype = result_dtype(*dtypes)
  if dtype == np.dtype(bool):
    dtype = np.dtype(jax.dtypes.canonicalize_dtype(jnp.int_))
  return dtype


def _paths(tree: Any) -> list[str]:
  return [key_path_str(p) for p, _ in jax.tree_util.tree_flatten_with_path(tree, is_leaf=is_none)[0]]


def structure_mismatch(fname: str, argname: str, reference: Any, other: Any) -> ValueError:
  """A ValueError naming the paths present in one tree and not in the other."""
  ref_paths, other_paths = _paths(reference), _paths(other)
  missing = [p for p in ref_paths if p not in set(other_paths)]
  extra = [p for p in other_paths if p not in set(ref_paths)]
  detail = []
  if missing:
    detail.append(f"missing {missing[:5]}")
  if extra:
    detail.append(f"unexpected {extra[:5]}")
  if not detail:
    detail.append(
        f"expected structure {jax.tree_util.tree_structure(reference)}, "
        f"got {jax.tree_util.tree_structure(other)}"
    )
  return ValueError(
      f"{fname}: `{argname}` does not have the structure of the first tree: " + "; ".join(detail)
  )


def flatten_like(fname: str, tree: Any, rest: Any, names: Any) -> tuple[list[Any], Any, list[list[Any]]]:
  """Leaves of ``tree`` (None leaves kept) and of each tree in ``rest`` flattened up to it."""
  leaves, treedef = jax.tree_util.tree_flatten(tree, is_leaf=is_none)
  others = []
  for name, other in zip(names, rest):
    try:
      others.append(treedef.flatten_up_to(other))
    except (ValueError, TypeError):
      raise structure_mismatch(fname, name, tree, other) from None
  return leaves, treedef, others


def _leaf_path(tree: Any, index: int) -> str:
  return key_path_str(jax.tree_util.tree_flatten_with_path(tree, is_leaf=is_none)[0][index][0])


def map_leaves(
    fname: str, fn: Callable[..., Any], tree: Any, *rest: Any, names: Any = None
) -> Any:
  """``fn`` over the leaves of ``tree`` and the matching leaves of ``rest``; None leaves stay None.

  A structure mismatch raises a ValueError naming the missing and unexpected paths; an error raised
  by ``fn`` is re-raised with the function's name and the leaf's path. The paths are only computed
  on error, so large trees pay nothing for them.
  """
  names = names or [f"tree #{i + 2}" for i in range(len(rest))]
  leaves, treedef, others = flatten_like(fname, tree, rest, names)
  out = []
  for i, args in enumerate(zip(leaves, *others)):
    if args[0] is None:
      out.append(None)
      continue
    try:
      out.append(fn(*args))
    except (TypeError, ValueError) as err:
      raise type(err)(f"{fname}: at {_leaf_path(tree, i)}: {err}") from err
  return treedef.unflatten(out)
