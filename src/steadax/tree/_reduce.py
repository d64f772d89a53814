"""Reductions over whole trees: sum, max, min, norms, inner products, size, allclose.

One rule for every floating reduction: it accumulates, and returns, the widest floating dtype present
among the leaves, at least float32 (a bfloat16 tree sums exactly in float32; a mixed float32 +
float64 tree in float64), so nothing is silently rounded to a narrow leaf's precision. Integer and
boolean trees reduce exactly in their integer dtype.
"""

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from .._core._policy import compute_dtype, real_dtype
from .._core._tree import tree_sum_of_squares
from ._leafwise import (
    as_array,
    cast_to,
    flatten_like,
    map_leaves,
    reduction_dtype,
    result_dtype,
    with_weak,
)
from .._core._types import Params

__all__ = [
    "tree_sum",
    "tree_max",
    "tree_min",
    "tree_norm",
    "tree_vdot",
    "tree_size",
    "tree_allclose",
]


def _leaves(tree: Any) -> list[jax.Array | np.ndarray]:
  return [as_array(x) for x in jax.tree_util.tree_leaves(tree)]


def _pairwise(values: list[jax.Array], op: Any) -> jax.Array:
  while len(values) > 1:
    values = [op(values[i], values[i + 1]) if i + 1 < len(values) else values[i]
              for i in range(0, len(values), 2)]
  return values[0]


def _accumulate(values: list[jax.Array], dtype: Any, associative: bool = False) -> jax.Array:
  if not values:
    return jnp.zeros([], dtype)
  if associative:
    return _pairwise(values, jnp.add)
  total = values[0]
  for v in values[1:]:
    total = total + v
  return total


def tree_sum(tree: Params, associative_reduction: bool = False) -> jax.Array:
  """Sum of all the elements of all the leaves.

  Args:
    tree: a tree of arrays.
    associative_reduction: add the per-leaf sums pairwise (a balanced reduction: a shallower
      graph for trees with many leaves, and a different rounding order) instead of left to right.

  Returns:
    A scalar in the widest floating dtype present (at least float32), or the integer dtype of an
    integer tree; an empty tree sums to a float32 zero.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> steadax.tree.sum({"a": jnp.array([1.0, 2.0]), "b": jnp.array([3.0], jnp.bfloat16)})
    Array(6., dtype=float32)
  """
  leaves = _leaves(tree)
  dtype = reduction_dtype([x.dtype for x in leaves])
  sums = [jnp.sum(cast_to(x, dtype)) for x in leaves]
  return _accumulate(sums, dtype, associative_reduction)


def _extreme(fname: str, tree: Any, reduce_leaf: Any, combine: Any, empty: float) -> jax.Array:
  all_leaves = _leaves(tree)
  leaves = [x for x in all_leaves if x.size > 0]
  if any(jnp.issubdtype(x.dtype, jnp.complexfloating) for x in leaves):
    raise TypeError(f"{fname}: complex leaves have no order; reduce `tree.real(...)` or `abs` instead")
  # The dtype comes from every leaf, zero-size ones included: a float64 tree without elements gives
  # a float64 -inf, as a non-empty one gives a float64 maximum.
  dtype = reduction_dtype([real_dtype(x.dtype) for x in all_leaves])
  if not leaves:
    # No element: +-inf, in the floating reduction dtype (an integer tree has no infinity).
    return cast_to(empty, dtype if jnp.issubdtype(dtype, jnp.inexact) else compute_dtype())
  # Max and min are exact in any dtype; the cast only gives the result the common reduction dtype.
  return _pairwise([cast_to(reduce_leaf(x), dtype) for x in leaves], combine)


def tree_max(tree: Params) -> jax.Array:
  """The largest element over all the leaves (zero-size leaves are skipped).

  Args:
    tree: a tree of real arrays.

  Returns:
    A scalar in the reduction dtype (at least float32 for floating trees); ``-inf`` for a tree
    without elements.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> steadax.tree.max({"a": jnp.array([1.0, 5.0]), "b": jnp.array([3.0])})
    Array(5., dtype=float32)
  """
  return _extreme("max", tree, jnp.max, jnp.maximum, -np.inf)


def tree_min(tree: Params) -> jax.Array:
  """The smallest element over all the leaves (zero-size leaves are skipped).

  Args:
    tree: a tree of real arrays.

  Returns:
    A scalar in the reduction dtype (at least float32 for floating trees); ``inf`` for a tree
    without elements.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> steadax.tree.min({"a": jnp.array([1.0, 5.0]), "b": jnp.array([-3.0])})
    Array(-3., dtype=float32)
  """
  return _extreme("min", tree, jnp.min, jnp.minimum, np.inf)


def tree_norm(tree: Params, ord: int | str | float | None = None, squared: bool = False) -> jax.Array:  # noqa: A002
  """The vector norm of all the leaves taken together (complex leaves by modulus).

  Args:
    tree: a tree of arrays.
    ord: ``None`` or ``2`` (Euclidean), ``1`` (sum of moduli), or ``inf`` / ``"inf"`` /
      ``"infinity"`` (largest modulus).
    squared: return the norm squared (for ``ord=2`` this skips the square root).

  Returns:
    A real scalar in the widest floating dtype present, at least float32; an empty tree has norm 0.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> steadax.tree.norm({"a": jnp.array([3.0]), "b": jnp.array([4.0], jnp.bfloat16)})
    Array(5., dtype=float32)
    >>> steadax.tree.norm({"a": jnp.array([3.0, -4.0])}, ord=1)
    Array(7., dtype=float32)
  """
  leaves = _leaves(tree)
  if ord is None or (not isinstance(ord, str) and ord == 2):
    sum_sq = tree_sum_of_squares(leaves)
    return sum_sq if squared else jnp.sqrt(sum_sq)
  dtype = real_dtype(compute_dtype(*[x.dtype for x in leaves]))
  moduli = [cast_to(jnp.abs(cast_to(x, compute_dtype(x.dtype))), dtype) for x in leaves]
  if not isinstance(ord, str) and ord == 1:
    result = _accumulate([jnp.sum(m) for m in moduli], dtype)
  elif ord in ("inf", "infinity") or (not isinstance(ord, str) and ord == np.inf):
    moduli = [m for m in moduli if m.size > 0]
    result = _pairwise([jnp.max(m) for m in moduli], jnp.maximum) if moduli else jnp.zeros([], dtype)
  else:
    raise ValueError(f"norm: unsupported `ord`={ord!r}; use None, 1, 2 or inf.")
  return result * result if squared else result


def tree_vdot(tree_x: Any, tree_y: Any) -> jax.Array:
  """Inner product ``sum(conj(x) * y)`` over all the leaves (conjugate-linear in ``tree_x``).

  Args:
    tree_x: the first tree (conjugated when complex).
    tree_y: the second tree (same structure).

  Returns:
    A scalar accumulated in the widest dtype present (at least float32, complex when any leaf is
    complex), or the integer dtype of integer trees.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> steadax.tree.vdot({"a": jnp.array([1.0, 2.0])}, {"a": jnp.array([3.0, 4.0])})
    Array(11., dtype=float32)
  """
  xs, _, (ys,) = flatten_like("vdot", tree_x, [tree_y], ["tree_y"])
  dtype = reduction_dtype(
      [as_array(v).dtype for x, y in zip(xs, ys) if x is not None for v in (x, y)]
  )

  def term(x, y):
    x, y = cast_to(x, dtype), cast_to(y, dtype)
    if x.shape != y.shape:
      raise ValueError(f"leaf shapes differ: {x.shape} and {y.shape}")
    if jnp.issubdtype(dtype, jnp.complexfloating):
      x = jnp.conj(x)
    # HIGHEST keeps a float32 dot in float32 on accelerators (no tf32/bf16 passes).
    return jnp.tensordot(x, y, axes=x.ndim, precision=jax.lax.Precision.HIGHEST)

  terms = jax.tree_util.tree_leaves(map_leaves("vdot", term, tree_x, tree_y, names=["tree_y"]))
  return _accumulate(terms, dtype)


def tree_size(tree: Params) -> int:
  """Total number of elements over all the leaves.

  Args:
    tree: a tree of arrays (or scalars).

  Returns:
    A Python int.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> steadax.tree.size({"a": jnp.ones((2, 3)), "b": jnp.ones(4)})
    10
  """
  return int(sum(int(np.size(x)) for x in jax.tree_util.tree_leaves(tree)))


def tree_allclose(a: Any, b: ArrayLike, rtol: ArrayLike = 1e-05, atol: ArrayLike = 1e-08,
                  equal_nan: bool = False) -> jax.Array:
  """Whether two trees are equal leaf by leaf within ``atol + rtol * |b|`` (as ``jnp.allclose``).

  Args:
    a: a tree.
    b: a tree with the structure of ``a``.
    rtol: the relative tolerance.
    atol: the absolute tolerance.
    equal_nan: whether NaNs compare equal.

  Returns:
    A boolean scalar array (jittable). Leaves of different dtypes are compared in their promoted
    dtype, in at least float32.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> bool(steadax.tree.allclose({"a": jnp.array([1.0])}, {"a": jnp.array([1.0 + 1e-7])}))
    True
  """
  def leaf(x, y):
    # Integers compare as floats, as jnp.allclose does under standard promotion.
    dtype = compute_dtype(with_weak(result_dtype(x, y), 0.0))
    x, y = cast_to(x, dtype), cast_to(y, dtype)
    tol_dtype = real_dtype(dtype)
    return jnp.allclose(x, y, rtol=cast_to(rtol, tol_dtype), atol=cast_to(atol, tol_dtype),
                        equal_nan=equal_nan)

  flags = jax.tree_util.tree_leaves(map_leaves("allclose", leaf, a, b, names=["b"]))
  result = jnp.asarray(True)
  for flag in flags:
    result = jnp.logical_and(result, flag)
  return result
