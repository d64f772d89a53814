"""Shared helpers of the schedules: Optax's arithmetic, the step count, argument checks.

A schedule's value has the type Optax's schedule gives: Optax computes with the arguments as the
user passed them (Python numbers are weakly typed, arrays keep their dtype) under JAX's standard
promotion. steadax keeps the arguments as given (``hyper_field(as_given=True)``: ``0.5``,
``np.float32(0.5)`` and ``jnp.float32(0.5)`` give Optax's different value types, a weak float and
a strong float32) and runs the same arithmetic under ``standard_promotion``, so the value's type and
bits are Optax's, also when the user's code runs under ``jax_numpy_dtype_promotion="strict"``.
"""

import math
from typing import Any

import jax
import jax.core  # jax.core.Tracer: jax does not re-export the submodule for type checkers
import jax.numpy as jnp
import numpy as np

from .._core._policy import COUNTER_DTYPE, hyperparam_dtype

__all__ = ["cast", "declared_dtype", "standard_promotion", "as_count", "concrete_number",
           "static_steps", "divide"]


def standard_promotion() -> Any:
  """JAX's standard dtype promotion, the one Optax's schedules compute under (a context manager).

  Under ``strict`` promotion Optax's own schedules fail for an int32 count (``cosine_decay_schedule``
  meets it with a Python float); steadax's compute what they compute under ``standard``.
  """
  return jax.numpy_dtype_promotion("standard")


def cast(value: Any, dtype: Any) -> jax.Array:
  """``value`` (number, array or tracer) as a jax array of ``dtype``; complex to real keeps the real part.

  The cast of ``inject_hyperparams``: a complex value for a real dtype keeps its real part, as with
  ``_policy.hyper``, but the result is always a jax array.
  """
  value = jnp.asarray(value)
  if jnp.issubdtype(value.dtype, jnp.complexfloating) and not jnp.issubdtype(dtype, jnp.complexfloating):
    value = jnp.real(value)
  return value.astype(dtype)


def declared_dtype(value: Any) -> np.dtype:
  """The dtype a value keeps: Python numbers 32-bit, arrays their own, canonical for the x64 mode."""
  return np.dtype(jax.dtypes.canonicalize_dtype(hyperparam_dtype(value)))


def as_count(count: Any) -> Any:
  """The step count as Optax's schedules take it, with two fixes of what would fail there.

  A Python int past the int32 range becomes a float (JAX cannot hold it in the int32 count); a
  boolean becomes an int32 array. Everything else is returned as given: a Python int stays a
  Python int, as in Optax, so the value's type follows from the count's exactly as there.
  """
  if isinstance(count, bool):
    return jnp.asarray(count, COUNTER_DTYPE)
  if isinstance(count, int) and abs(count) > np.iinfo(COUNTER_DTYPE).max:
    return float(count)
  if getattr(count, "dtype", None) == jnp.bool_:
    return jnp.asarray(count).astype(COUNTER_DTYPE)
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

  An integer (Python or numpy) comes back a Python int and a float a Python float, as Optax uses
  them (``transition_steps=10`` and ``10.0`` give values of different types there); an integer past
  the int32 range comes back a float, so it does not overflow where it meets the int32 count.
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
  integral = isinstance(value, (int, np.integer)) or (
      isinstance(value, (np.ndarray, jax.Array)) and jnp.issubdtype(value.dtype, jnp.integer))
  if not integral or abs(v) > np.iinfo(COUNTER_DTYPE).max:
    # Beyond the counter's range an integer would overflow where it meets the int32 count; as a
    # float it makes the count a float too, as Optax computes (`cosine_decay_schedule(1.0,
    # int(1e10))`).
    return float(v)
  return int(v)


def divide(numerator: Any, denominator: Any) -> Any:
  """``numerator / denominator``, correctly rounded in every program that computes it.

  XLA's algebraic simplifier rewrites a division by a constant as a multiplication by the
  constant's rounded reciprocal (one ulp off the quotient for most divisors), in some programs and
  not in others: whether it does depends on what else the program computes. A schedule's step
  counts are constants (static fields, or leaves closed over), so its value at a step would depend
  on the program around it: ``linear_schedule(0.1, 0.01, 6)`` at step 5 gave 0.024999997 in a step
  that also reported the learning rate and 0.025000002 (the quotient rounded once, as eager
  Optax computes it) in one that did not. An optimization barrier hides a concrete denominator
  from the simplifier, so the division is IEEE's wherever it runs; a traced denominator (a leaf of
  a schedule passed to ``jit``, a swept value) is never rewritten and is left as it is.
  """
  if not isinstance(denominator, jax.core.Tracer):
    denominator = jax.lax.optimization_barrier(jnp.asarray(denominator))
  return numerator / denominator
