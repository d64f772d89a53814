"""Reductions shared by the learning-rate-free optimizers (DoG, DoWG, D-Adaptation, Mechanic, MoMo).

Their step sizes come from global scalars (norms, inner products) of the whole parameter tree. Each
per-leaf contribution is computed in the leaf's compute dtype (at least float32) and summed in the
scalar-statistics dtype fixed at init (``scalar_stat_dtype``), so a bfloat16 leaf neither lowers nor
a float64 input widens the statistics. Complex leaves use the real inner product ``Re<a, b>``, which
is the directional derivative of a real loss along ``b`` when ``a`` is its gradient. The sums run
through ``tree_reduce`` (``_core/_leafwise.py``), the reduction beside the per-leaf primitive.
"""

from typing import Any

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

__all__ = ["real_inner", "sq_norm", "scalar_value"]


def real_inner(a: jax.Array, b: jax.Array) -> jax.Array:
  """``Re<a, b>`` summed over all elements; ``a`` and ``b`` share one compute dtype.

  Computed as Optax's ``tree.vdot`` computes each leaf's term (a ``tensordot`` over every axis at
  the highest precision), so the sums round as Optax's do.
  """
  # Under explicit sharding a contraction over sharded axes must name its result's sharding: the
  # scalar is replicated (an all-reduce). Otherwise (no mesh, automatic axes) nothing is named.
  spec = getattr(jax.typeof(a).sharding, "spec", None)
  out = P() if spec is not None and any(axis is not None for axis in spec) else None
  if jnp.iscomplexobj(a):
    return jnp.real(jnp.tensordot(jnp.conj(a), b, a.ndim, precision=jax.lax.Precision.HIGHEST,
                                  out_sharding=out))
  return jnp.tensordot(a, b, a.ndim, precision=jax.lax.Precision.HIGHEST, out_sharding=out)


def sq_norm(a: jax.Array) -> jax.Array:
  """``sum |a|^2`` as a real scalar of ``a``'s real dtype, as Optax's ``tree.norm`` sums a leaf."""
  return jnp.sum(jnp.square(jnp.real(a)) + jnp.square(jnp.imag(a)))


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
