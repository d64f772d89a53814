"""Shared helpers of the schedules: the evaluation dtype, the step count, argument checks."""

import math
from typing import Any

import jax
import jax.core  # jax.core.Tracer: jax does not re-export the submodule for type checkers
import jax.numpy as jnp
import numpy as np

from .._core._policy import COUNTER_DTYPE, compute_dtype, hyperparam_dtype

__all__ = ["cast", "declared_dtype", "value_dtype", "as_count", "concrete_number", "static_steps"]


def cast(value: Any, dtype: Any) -> jax.Array:
  """``value`` (number, array or tracer) as a jax array of ``dtype``; complex to real keeps the real part.

  The schedules' one cast: a complex value for a real dtype keeps its real part, as with
  ``_policy.hyper``, but the result is always a jax array (a schedule's value is one; ``hyper``
  folds Python numbers to numpy constants).
  """
  value = jnp.asarray(value)
  if jnp.issubdtype(value.dtype, jnp.complexfloating) and not jnp.issubdtype(dtype, jnp.complexfloating):
    value = jnp.real(value)
  return value.astype(dtype)


def declared_dtype(value: Any) -> np.dtype:
  """The dtype a value keeps: Python numbers 32-bit, arrays their own, canonical for the x64 mode."""
  return np.dtype(jax.dtypes.canonicalize_dtype(hyperparam_dtype(value)))


def value_dtype(*values: Any) -> np.dtype:
  """The dtype a schedule evaluates in: float32, or wider when a declared (strong) argument is.

  Python floats count as float32 and weakly typed values too, so the output dtype does not depend on
  ``jax_enable_x64`` unless the user passed a float64 array.
  """
  dtypes = [hyperparam_dtype(v) for v in values if v is not None]
  return np.dtype(jax.dtypes.canonicalize_dtype(compute_dtype(*dtypes)))


def as_count(count: Any, *steps: Any) -> jax.Array:
  """The step count as an array to combine with the (static) ``steps`` values.

  Integer counts stay integers so offsets and clips are exact; they become float32 only when one of
  ``steps`` is fractional (strict promotion forbids mixing an int32 array with a Python float).
  """
  if isinstance(count, int) and not isinstance(count, bool) and abs(count) > np.iinfo(COUNTER_DTYPE).max:
    count = float(count)  # a Python step count past the int32 range (as static_steps does)
  count = jnp.asarray(count)
  if count.dtype == jnp.bool_:
    count = cast(count, COUNTER_DTYPE)
  if jnp.issubdtype(count.dtype, jnp.integer) and any(isinstance(s, float) for s in steps):
    # Schedules evaluate in float32 (value_dtype) unless an argument is declared wider; a
    # fractional step count joins that dtype (exact up to 2**24 steps).
    count = cast(count, compute_dtype())
  return count


def concrete_number(value: Any) -> float | None:
  """``value`` as a Python float when it is a concrete real scalar (not a tracer), else None."""
  if value is None or isinstance(value, jax.core.Tracer) or callable(value):
    return None
  try:
    arr = np.asarray(value)
  except Exception:
    return None
  if arr.shape != () or not np.issubdtype(arr.dtype, np.number) or np.iscomplexobj(arr):
    return None
  return float(arr)


def static_steps(owner: str, name: str, value: Any) -> int | float:
  """A step-count argument as a Python number (it is static: it shapes the computation).

  Raises a TypeError naming ``owner`` and ``name`` for tracers, non-numbers and non-finite values.
  """
  if isinstance(value, jax.core.Tracer):
    raise TypeError(
        f"{owner}: {name} decides the schedule's structure and must be a concrete number of "
        "steps, not a traced value."
    )
  v = concrete_number(value)
  if v is None or isinstance(value, bool) or not math.isfinite(v):
    raise TypeError(f"{owner}: {name} must be a finite number of steps, got {value!r}.")
  if v != int(v) or abs(v) > np.iinfo(COUNTER_DTYPE).max:
    # Beyond the counter's range an integer would overflow where it meets the int32 count; as a
    # float it makes the count a float too (as_count), as Optax computes (`cosine_decay_schedule(
    # 1.0, int(1e10))`).
    return float(v)
  return int(v)
