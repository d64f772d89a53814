"""Argument checks and dtype rules shared by the linear-algebra helpers.

Every helper returns its results in the dtype of the input they derive from (bfloat16 in, bfloat16
out; integer inputs give JAX's default floating dtype) and runs its arithmetic in at least float32.
"""

from typing import Any

import jax
import jax.core  # jax.core.Tracer: jax does not re-export the submodule for type checkers
import jax.numpy as jnp
import numpy as np

from .._core._policy import compute_dtype, with_weak

__all__ = ["float_dtype", "as_matrix", "concrete_number"]


def float_dtype(dtype: Any) -> np.dtype:
  """``dtype`` if it is floating or complex, else JAX's default floating dtype (as ``x / 1.0``)."""
  return with_weak(np.dtype(dtype), 0.0)


def as_matrix(owner: str, name: str, matrix: Any, *, square: bool = True) -> tuple[jax.Array, np.dtype, np.dtype]:
  """``matrix`` as a 2-D array, its output dtype and its computation dtype; raises naming ``name``."""
  if callable(matrix) or isinstance(matrix, (str, bytes)) or matrix is None:
    raise TypeError(f"{owner}: `{name}` must be an array, got {type(matrix).__name__}.")
  matrix = jnp.asarray(matrix)
  if matrix.ndim != 2 or (square and matrix.shape[0] != matrix.shape[1]):
    kind = "a square matrix" if square else "a matrix (2-D)"
    raise ValueError(f"{owner}: `{name}` must be {kind}, got shape {matrix.shape}.")
  out_dtype = float_dtype(matrix.dtype)
  return matrix, out_dtype, compute_dtype(out_dtype)


def concrete_number(value: Any) -> Any:
  """The Python value of a concrete scalar, or None for tracers and non-scalars."""
  if isinstance(value, jax.core.Tracer) or callable(value) or value is None:
    return None
  try:
    arr = np.asarray(value)
  except Exception:
    return None
  if arr.shape != () or not np.issubdtype(arr.dtype, np.number):
    return None
  return arr.item()
