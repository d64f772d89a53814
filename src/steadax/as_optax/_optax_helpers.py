"""Optax-private helpers that public code imports from ``optax._src``, with Optax's behaviour.

steadax has no public name for these, but programs written for Optax import them from its private
modules (custom optimizers copied from Optax's source: ``from optax._src.utils import
canonicalize_dtype``; RL training scripts: ``from optax._src.numerics import abs_sq``). Under
``steadax.as_optax`` those names resolve here (``_optax_private.PRIVATE_NAMES``). Each does what
Optax 0.2.8's function of the same name does, on the same inputs (tests/as_optax compares them).
"""

from collections.abc import Iterable, Mapping
from typing import Any, Union

import jax
import numpy as np

__all__ = ["ArrayTree", "abs_sq", "canonicalize_dtype"]

# Optax's ``optax._src.base.ArrayTree``: a nest of array-likes (Python and NumPy scalars included,
# which runtime type checkers such as beartype hold a value to). steadax's own ``ArrayTree``
# (``_core/_types.py``) names a nest of ``jax.Array``s.
ArrayTree = Union[jax.typing.ArrayLike, Iterable["ArrayTree"], Mapping[Any, "ArrayTree"]]


def canonicalize_dtype(dtype: Any) -> Any:
  """``dtype`` as JAX's canonical dtype for the x64 mode (float64 is float32 with x64 off); None
  stays None. Optax's ``optax._src.utils.canonicalize_dtype``."""
  if dtype is None:
    return None
  return jax.dtypes.canonicalize_dtype(dtype)


def abs_sq(x: Any) -> Any:
  """``|x|^2``, real, for a (maybe complex) array: ``(conj(x) x).real``, a NumPy array for a NumPy
  input. Anything but an array raises ``ValueError``. Optax's ``optax._src.numerics.abs_sq``."""
  if not isinstance(x, (np.ndarray, jax.Array)):
    raise ValueError(f"`abs_sq` accepts only NDarrays, got: {x}.")
  square: Any = x.conj() * x  # a NumPy array for a NumPy input, else a jax.Array
  return square.real
