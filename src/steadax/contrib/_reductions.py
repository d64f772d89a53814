"""Reductions shared by the learning-rate-free optimizers (DoG, DoWG, D-Adaptation, Mechanic, MoMo).

Their step sizes come from global scalars (norms, inner products) of the whole parameter tree. Each
per-leaf contribution is computed in the leaf's compute dtype (at least float32) and summed in the
scalar-statistics dtype fixed at init (``scalar_stat_dtype``), so a bfloat16 leaf neither lowers nor
a float64 input widens the statistics. Complex leaves use the real inner product ``Re<a, b>``, which
is the directional derivative of a real loss along ``b`` when ``a`` is its gradient.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .._core._leafwise import Scalars, weak
from .._core._policy import compute_dtype, real_dtype

__all__ = ["real_inner", "sq_norm", "sum_scalars", "scalar_value", "tree_reduce"]


def real_inner(a: jax.Array, b: jax.Array) -> jax.Array:
  """``Re<a, b>`` summed over all elements; ``a`` and ``b`` share one compute dtype."""
  if jnp.iscomplexobj(a):
    return jnp.sum(jnp.real(a) * jnp.real(b) + jnp.imag(a) * jnp.imag(b))
  return jnp.sum(a * b)


def sq_norm(a: jax.Array) -> jax.Array:
  """``sum |a|^2`` as a real scalar of ``a``'s real dtype."""
  return real_inner(a, a)


def sum_scalars(tree: Any, dtype: Any) -> jax.Array:
  """The sum of a tree of scalars (one per parameter leaf, already in ``dtype``); 0 for no leaves."""
  total = jnp.zeros([], dtype)
  for x in jax.tree_util.tree_leaves(tree):
    total = total + x
  return total


def _cast_in(x: jax.Array, cdt: np.dtype) -> jax.Array:
  """``x`` in the compute dtype ``cdt`` (its real part for a real input), as leafwise casts."""
  target = cdt if jnp.issubdtype(x.dtype, jnp.complexfloating) else real_dtype(cdt)
  # The one cast in of a whole-tree reduction (leafwise does the same for per-leaf maths).
  return x if x.dtype == target else x.astype(target)


def tree_reduce(fn: Callable[..., jax.Array], dtype: Any, tree: Any, *rest: Any,
                scalars: Callable[[np.dtype], Scalars] | None = None) -> jax.Array:
  """``Σ_leaves fn(k, *leaves)``: a whole-tree reduction summed in the statistics dtype.

  Each leaf's term is computed in the compute dtype of its inputs (their promotion, at least
  float32; real inputs get its real part), under standard promotion as in ``leafwise``, and added
  in ``dtype`` (the scalar-statistics dtype fixed at init), so a bfloat16 leaf neither lowers nor a
  float64 input widens the statistic.

  Args:
    fn: ``fn(k, *leaves) -> real scalar`` (``k``: the weak scalars of ``scalars``, or None).
    dtype: the dtype of the sum.
    tree: the first tree; None leaves are skipped.
    *rest: trees with the structure of ``tree``.
    scalars: ``scalars(real compute dtype) -> Scalars``, built once per dtype; made weakly typed.

  Returns:
    A scalar of ``dtype`` (0 for a tree without leaves).

  Example:
    >>> import jax.numpy as jnp
    >>> tree_reduce(lambda k, a, b: real_inner(a, b), jnp.float32, [jnp.ones(2, jnp.bfloat16)],
    ...             [jnp.full(2, 3.0)])
    Array(6., dtype=float32)
  """
  dtype = np.dtype(dtype)
  treedef = jax.tree_util.tree_structure(tree, is_leaf=lambda x: x is None)
  columns = [treedef.flatten_up_to(tree)] + [treedef.flatten_up_to(r) for r in rest]
  records: dict = {}
  total = jnp.zeros([], dtype)
  for leaves in zip(*columns):
    if leaves[0] is None:
      continue
    cdt = compute_dtype(*[x.dtype for x in leaves])
    rdt = real_dtype(cdt)
    if scalars is not None and rdt not in records:
      records[rdt] = Scalars(**{n: v if v is None else weak(v, rdt) for n, v in scalars(rdt).items()})
    with jax.numpy_dtype_promotion("standard"):
      term = fn(records.get(rdt), *[_cast_in(x, cdt) for x in leaves])
    # The term is a real scalar in the leaf's real compute dtype; the sum is kept in ``dtype``.
    total = total + jnp.real(term).astype(dtype)
  return total


def scalar_value(owner: str, value: Any, dtype: Any) -> jax.Array:
  """The ``value`` extra argument (a loss) as a real scalar of ``dtype``, with clear errors.

  Args:
    owner: the transformation's name, for error messages.
    value: the loss passed as ``update(..., value=loss)``.
    dtype: the scalar-statistics dtype.

  Raises:
    ValueError: ``value`` is missing or not a scalar.
    TypeError: ``value`` is not a real number.
  """
  if value is None:
    raise ValueError(
        f"{owner}: update() needs the loss: pass `value=loss` (the current loss, e.g. from "
        "jax.value_and_grad), as in update(grads, state, params, value=loss).")
  value = jnp.asarray(value)
  if value.shape != ():
    raise ValueError(f"{owner}: `value` must be a scalar loss, got an array of shape {value.shape}.")
  if not (jnp.issubdtype(value.dtype, jnp.floating) or jnp.issubdtype(value.dtype, jnp.integer)):
    raise TypeError(f"{owner}: `value` must be a real number, got dtype {value.dtype}.")
  return value.astype(dtype)  # the loss enters the statistics in their dtype
