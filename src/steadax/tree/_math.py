"""Elementwise tree algebra: Optax's ``tree`` arithmetic with explicit, dtype-preserving casts.

The result of every op has JAX's standard promotion of its inputs (bfloat16 in, bfloat16 out;
float32 + bfloat16 gives float32), with scalar arguments treated as weak (a float32 scalar scales a
bfloat16 tree in bfloat16); floating arithmetic runs in at least float32 and is rounded once on write.
"""

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike, DTypeLike

from ._leafwise import arith_dtype, as_array, cast_to, map_leaves, result_dtype, with_weak
from .._core._types import ArrayTree, Params

__all__ = [
    "tree_add",
    "tree_sub",
    "tree_mul",
    "tree_div",
    "tree_scale",
    "tree_add_scale",
    "tree_where",
    "tree_clip",
    "tree_conj",
    "tree_real",
    "tree_batch_shape",
    "tree_zeros_like",
    "tree_ones_like",
    "tree_full_like",
]


def _binary(fname: str, op: Any, tree_x: Any, tree_y: Any, *, true_divide: bool = False) -> Any:
  def leaf(x, y):
    out_dtype = result_dtype(x, y)
    if true_divide:
      out_dtype = with_weak(out_dtype, 0.0)
    cdt = arith_dtype(out_dtype)
    return cast_to(op(cast_to(x, cdt), cast_to(y, cdt)), out_dtype)

  return map_leaves(fname, leaf, tree_x, tree_y, names=["tree_y"])


def tree_add(tree_x: Any, tree_y: Any, *other_trees: Any) -> Any:
  """Leafwise sum of two or more trees.

  Args:
    tree_x: the first tree.
    tree_y: the second tree (same structure).
    *other_trees: more trees to add.

  Returns:
    A tree like ``tree_x``; each leaf has the promoted dtype of its summands, and the sum is
    accumulated in at least float32 and rounded once.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> steadax.tree.add({"a": jnp.array([1.0])}, {"a": jnp.array([2.0])}, {"a": jnp.array([3.0])})
    {'a': Array([6.], dtype=float32)}
  """
  def leaf(x, *ys):
    out_dtype = result_dtype(x, *ys)
    cdt = arith_dtype(out_dtype)
    total = cast_to(x, cdt)
    for y in ys:
      total = total + cast_to(y, cdt)
    return cast_to(total, out_dtype)

  names = ["tree_y"] + [f"other_trees[{i}]" for i in range(len(other_trees))]
  return map_leaves("add", leaf, tree_x, tree_y, *other_trees, names=names)


def tree_sub(tree_x: Any, tree_y: Any) -> Any:
  """Leafwise difference ``tree_x - tree_y``.

  Args:
    tree_x: the first tree.
    tree_y: the tree to subtract (same structure).

  Returns:
    A tree like ``tree_x`` with the promoted dtypes.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> steadax.tree.sub({"a": jnp.array([3.0])}, {"a": jnp.array([1.0])})
    {'a': Array([2.], dtype=float32)}
  """
  return _binary("sub", jnp.subtract, tree_x, tree_y)


def tree_mul(tree_x: Any, tree_y: Any) -> Any:
  """Leafwise product ``tree_x * tree_y``.

  Args:
    tree_x: the first tree.
    tree_y: the second tree (same structure).

  Returns:
    A tree like ``tree_x`` with the promoted dtypes.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> steadax.tree.mul({"a": jnp.array([3.0])}, {"a": jnp.array([2.0])})
    {'a': Array([6.], dtype=float32)}
  """
  return _binary("mul", jnp.multiply, tree_x, tree_y)


def tree_div(tree_x: Any, tree_y: Any) -> Any:
  """Leafwise true division ``tree_x / tree_y`` (integer trees give floating results).

  Args:
    tree_x: the numerator tree.
    tree_y: the denominator tree (same structure).

  Returns:
    A tree like ``tree_x`` with the promoted (floating) dtypes.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> steadax.tree.div({"a": jnp.array([3.0])}, {"a": jnp.array([2.0])})
    {'a': Array([1.5], dtype=float32)}
  """
  return _binary("div", jnp.true_divide, tree_x, tree_y, true_divide=True)


def _check_scalar(fname: str, argname: str, value: Any) -> None:
  if value is None:
    return
  if not isinstance(value, (bool, int, float, complex, np.generic)) and not hasattr(value, "dtype"):
    raise TypeError(f"{fname}: `{argname}` must be a scalar or an array, got {type(value).__name__}")


def _scaled(x: Any, scalar: Any) -> tuple[jax.Array, np.dtype]:
  x = as_array(x)
  out_dtype = with_weak(x.dtype, scalar)
  cdt = arith_dtype(out_dtype)
  return cast_to(scalar, cdt) * cast_to(x, cdt), out_dtype


def tree_scale(scalar: ArrayLike, tree: Params) -> Any:
  """``scalar * tree``, leaf by leaf; the scalar never widens a leaf's dtype.

  Args:
    scalar: a scalar (or an array broadcastable to every leaf).
    tree: the tree to scale.

  Returns:
    A tree like ``tree``; each leaf keeps its dtype (a complex scalar makes real leaves complex).

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> steadax.tree.scale(2.0, {"a": jnp.array([1.5], jnp.bfloat16)})
    {'a': Array([3], dtype=bfloat16)}
  """
  _check_scalar("scale", "scalar", scalar)

  def leaf(x):
    out, out_dtype = _scaled(x, scalar)
    return cast_to(out, out_dtype)

  return map_leaves("scale", leaf, tree)


def tree_add_scale(tree_x: Any, scalar: ArrayLike, tree_y: Any) -> Any:
  """``tree_x + scalar * tree_y``, computed in at least float32 and rounded once.

  Args:
    tree_x: the first tree (its None leaves stay None).
    scalar: the scale of the second tree.
    tree_y: the second tree (same structure).

  Returns:
    A tree like ``tree_x`` with the promoted dtypes of ``tree_x`` and ``tree_y``.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> steadax.tree.add_scale({"a": jnp.array([1.0])}, 0.5, {"a": jnp.array([4.0])})
    {'a': Array([3.], dtype=float32)}
  """
  _check_scalar("add_scale", "scalar", scalar)

  def leaf(x, y):
    out_dtype = with_weak(result_dtype(x, y), scalar)
    cdt = arith_dtype(out_dtype)
    return cast_to(cast_to(x, cdt) + cast_to(scalar, cdt) * cast_to(y, cdt), out_dtype)

  return map_leaves("add_scale", leaf, tree_x, tree_y, names=["tree_y"])


def tree_where(condition: ArrayTree, tree_x: ArrayTree, tree_y: ArrayTree) -> Any:
  """Leafwise ``jnp.where(condition, x, y)``.

  Args:
    condition: a boolean scalar or array (broadcast against every leaf); not a tree.
    tree_x: values where the condition holds.
    tree_y: values elsewhere (same structure).

  Returns:
    A tree like ``tree_x`` with the promoted dtypes of the two trees.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> steadax.tree.where(jnp.array(True), {"a": jnp.array([1.0])}, {"a": jnp.array([2.0])})
    {'a': Array([1.], dtype=float32)}
  """
  if isinstance(condition, (dict, list, tuple)) or not (
      isinstance(condition, (bool, int, np.generic)) or hasattr(condition, "dtype")
  ):
    raise TypeError(
        f"where: `condition` must be a boolean scalar or array, got {type(condition).__name__}"
    )
  cond = jnp.asarray(condition)
  if jnp.issubdtype(cond.dtype, jnp.inexact):
    raise TypeError(f"where: `condition` must be boolean, got dtype {cond.dtype.name}")
  if cond.dtype != jnp.bool_:
    cond = cond != 0

  def leaf(x, y):
    out_dtype = result_dtype(x, y)
    return jnp.where(cond, cast_to(x, out_dtype), cast_to(y, out_dtype))

  return map_leaves("where", leaf, tree_x, tree_y, names=["tree_y"])


def tree_clip(tree: Params, min_value: ArrayLike | None = None, max_value: ArrayLike | None = None) -> Any:
  """Clips every leaf to ``[min_value, max_value]`` (either bound may be None).

  Args:
    tree: the tree to clip.
    min_value: the lower bound, or None.
    max_value: the upper bound, or None.

  Returns:
    A tree like ``tree``; the bounds are weak (they never widen a leaf).

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> steadax.tree.clip({"a": jnp.array([-2.0, 0.5, 3.0])}, -1.0, 1.0)
    {'a': Array([-1. ,  0.5,  1. ], dtype=float32)}
  """
  _check_scalar("clip", "min_value", min_value)
  _check_scalar("clip", "max_value", max_value)

  def leaf(x):
    x = as_array(x)
    out_dtype = with_weak(x.dtype, min_value, max_value)
    lo = None if min_value is None else cast_to(min_value, out_dtype)
    hi = None if max_value is None else cast_to(max_value, out_dtype)
    return jnp.clip(cast_to(x, out_dtype), lo, hi)

  return map_leaves("clip", leaf, tree)


def tree_conj(tree: Params) -> Any:
  """Complex conjugate of every leaf (real leaves are returned unchanged in value and dtype).

  Args:
    tree: a tree.

  Returns:
    A tree like ``tree``.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> steadax.tree.conj({"a": jnp.array([1 + 2j], jnp.complex64)})
    {'a': Array([1.-2.j], dtype=complex64)}
  """
  return map_leaves("conj", jnp.conj, tree)


def tree_real(tree: Params) -> Any:
  """Real part of every leaf (complex64 gives float32; real leaves keep their dtype).

  Args:
    tree: a tree.

  Returns:
    A tree like ``tree``.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> steadax.tree.real({"a": jnp.array([1 + 2j], jnp.complex64)})
    {'a': Array([1.], dtype=float32)}
  """
  return map_leaves("real", jnp.real, tree)


def tree_batch_shape(tree: Params, shape: tuple[int, ...] = ()) -> Any:
  """Broadcasts every leaf to ``(*shape, *leaf.shape)`` (leading batch dimensions).

  Args:
    tree: a tree.
    shape: the leading dimensions to add.

  Returns:
    A tree like ``tree`` with batched leaves.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> steadax.tree.batch_shape({"a": jnp.ones(3)}, (2,))["a"].shape
    (2, 3)
  """
  shape = tuple(shape)
  return map_leaves("batch_shape", lambda x: jnp.broadcast_to(x, (*shape, *jnp.shape(x))), tree)


def tree_full_like(tree: Params, fill_value: ArrayLike, dtype: DTypeLike | None = None) -> Any:
  """A tree like ``tree`` whose leaves are filled with ``fill_value``.

  Args:
    tree: the reference tree (leaves keep their shapes and, for arrays, their shardings).
    fill_value: the value of every element.
    dtype: the leaves' dtype, or None for each leaf's own.

  Returns:
    A tree like ``tree``.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> steadax.tree.full_like({"a": jnp.zeros(2, jnp.bfloat16)}, 3)
    {'a': Array([3, 3], dtype=bfloat16)}
  """
  _check_scalar("full_like", "fill_value", fill_value)
  return map_leaves("full_like", lambda x: jnp.full_like(x, fill_value, dtype=dtype), tree)


def tree_zeros_like(tree: Params, dtype: DTypeLike | None = None) -> Any:
  """A tree of zeros like ``tree``.

  Args:
    tree: the reference tree.
    dtype: the leaves' dtype, or None for each leaf's own.

  Returns:
    A tree like ``tree``.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> steadax.tree.zeros_like({"a": jnp.ones(2)}, jnp.bfloat16)
    {'a': Array([0, 0], dtype=bfloat16)}
  """
  return map_leaves("zeros_like", lambda x: jnp.zeros_like(x, dtype=dtype), tree)


def tree_ones_like(tree: Params, dtype: DTypeLike | None = None) -> Any:
  """A tree of ones like ``tree``.

  Args:
    tree: the reference tree.
    dtype: the leaves' dtype, or None for each leaf's own.

  Returns:
    A tree like ``tree``.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> steadax.tree.ones_like({"a": jnp.zeros(2)})
    {'a': Array([1., 1.], dtype=float32)}
  """
  return map_leaves("ones_like", lambda x: jnp.ones_like(x, dtype=dtype), tree)
