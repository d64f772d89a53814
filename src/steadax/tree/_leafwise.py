"""Leafwise mapping with path-naming errors, and the explicit dtype rules of ``steadax.tree``.

Every function of ``steadax.tree`` casts explicitly, so it runs the same under
``jax_numpy_dtype_promotion="strict"`` as under the standard mode: the result dtype of an elementwise
op is JAX's *standard* promotion of its inputs (Python scalars and scalar arguments count as weak, so
they never widen a leaf), computed once per dtype combination at trace time.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .._core._policy import compute_dtype, key_path_str
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


def _dtype_token(x: Any) -> Any:
  """A hashable stand-in for ``x`` in promotion: a numpy dtype, or a Python type when weak."""
  if isinstance(x, (bool, int, float, complex)):
    return type(x)
  dtype = getattr(x, "dtype", None)
  if dtype is None:
    return np.asarray(x).dtype
  aval = getattr(x, "aval", None)
  if aval is not None and getattr(aval, "weak_type", False):
    kind = np.dtype(dtype).kind
    return {"b": bool, "i": int, "u": int, "f": float, "V": float, "c": complex}.get(kind, float)
  return np.dtype(dtype)


_REPRESENTATIVE = {bool: False, int: 0, float: 0.0, complex: 0j}


@functools.lru_cache(maxsize=None)
def _promote_tokens(tokens: tuple[Any, ...]) -> np.dtype:
  args = [_REPRESENTATIVE[t] if isinstance(t, type) else t for t in tokens]
  with jax.numpy_dtype_promotion("standard"):
    return np.dtype(jnp.result_type(*args))


def result_dtype(*values: Any) -> np.dtype:
  """JAX's standard promotion of ``values`` (arrays, tracers or Python scalars), strict-safe."""
  return _promote_tokens(tuple(_dtype_token(v) for v in values if v is not None))


def with_weak(dtype: Any, *scalars: Any) -> np.dtype:
  """The dtype of ``leaf op scalar`` when the scalars are weak: they change the kind, not the width.

  A float32 scalar scales a bfloat16 leaf in bfloat16; a complex scalar makes a float32 leaf complex64.
  """
  tokens = [np.dtype(dtype)]
  for s in scalars:
    if s is None:
      continue
    token = _dtype_token(s)
    if isinstance(token, np.dtype):
      kind = token.kind
      token = {"b": bool, "i": int, "u": int, "c": complex}.get(kind, float)
    tokens.append(token)
  return _promote_tokens(tuple(tokens))


def arith_dtype(dtype: Any) -> np.dtype:
  """Where arithmetic on ``dtype`` runs: at least float32 for floating dtypes, else ``dtype``."""
  dtype = np.dtype(dtype)
  if jnp.issubdtype(dtype, jnp.inexact):
    return compute_dtype(dtype)
  return dtype


def as_array(x: Any) -> jax.Array:
  return x if isinstance(x, (jax.Array, np.ndarray)) else jnp.asarray(x)


def cast_to(x: Any, dtype: Any) -> jax.Array:
  """``x`` as a strong array of ``dtype`` (a no-op when it already is one)."""
  dtype = np.dtype(dtype)
  if isinstance(x, jax.Array) and x.dtype == dtype and not getattr(x.aval, "weak_type", False):
    return x
  x = jnp.asarray(x)
  if jnp.issubdtype(x.dtype, jnp.complexfloating) and not jnp.issubdtype(dtype, jnp.complexfloating):
    raise TypeError(f"cannot cast a complex value to {dtype.name} without dropping its imaginary part")
  return x.astype(dtype)


def reduction_dtype(dtypes: Any) -> np.dtype:
  """Accumulator of a reduction: widest floating dtype present (at least float32), else the ints'.

  Integer and boolean trees reduce exactly in their (promoted) integer dtype; a tree with any
  floating or complex leaf reduces in ``compute_dtype`` of its inexact leaves.
  """
  dtypes = [np.dtype(d) for d in dtypes]
  inexact = [d for d in dtypes if jnp.issubdtype(d, jnp.inexact)]
  if inexact or not dtypes:
    return compute_dtype(*inexact)
  dtype = _promote_tokens(tuple(dtypes))
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
