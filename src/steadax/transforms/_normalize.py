"""Normalization of the whole update tree by its global l2 norm."""

from typing import Any

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from .._core._docs import shared_args
from .._core._transformation import Transformation
from .._core._leafwise import Scalars
from .._core._module import hyper_field
from .._core._policy import cast, reciprocal
from .._core._tree import l2_norm
from ._clipping import _check_scalar, _check_scalar_nonnegative

__all__ = ["normalize_by_update_norm"]


class NormalizeByUpdateNorm(Transformation):
  name = "normalize_by_update_norm"
  elementwise = True
  scale_factor: Any = hyper_field(1.0, check=_check_scalar)
  eps: Any = hyper_field(1e-06, check=_check_scalar_nonnegative)

  def update_fn(self, updates, state, params=None, **extra_args):
    # The whole-tree reduction, outside the leaf function: in the widest dtype present (>= float32).
    norm = l2_norm(updates)
    # Optax's arithmetic, g / ((||u|| + eps) / scale_factor); a zero update with eps = 0 is divided
    # by 1 and stays zero instead of becoming 0 / 0 (Optax's NaN).
    with jax.numpy_dtype_promotion("standard"):
      # The division by the constant scale_factor as XLA compiles it: times its reciprocal.
      denominator = cast((norm + self.eps) * reciprocal(self.scale_factor, norm.dtype), norm.dtype)
    safe = jnp.where(denominator != 0, denominator, jnp.ones_like(denominator))
    out, = self.leafwise(lambda k, g: g / k.denominator, updates, params=params,
                         scalars=Scalars(denominator=safe))
    return out, state


@shared_args
def normalize_by_update_norm(scale_factor: ArrayLike = 1.0, eps: ArrayLike = 1e-6) -> Transformation:
  """Divides the updates by their global l2 norm: ``u * scale_factor / (||u|| + eps)``.

  The norm is taken over all leaves together in the widest floating dtype present (at least
  float32); each leaf is scaled in at least float32 and takes its parameter's dtype. A zero update stays zero,
  also with ``eps=0`` (where Optax returns NaN).

  Args:
    scale_factor: the norm of the normalized updates (up to ``eps``); a negative value turns
      gradients into descent directions.
    eps: added to the norm so that small updates are not blown up (non-negative).

  Returns:
    A stateless transformation.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> tx = steadax.normalize_by_update_norm(scale_factor=-1.0, eps=0.0)
    >>> tx.update({"a": jnp.array([3.0]), "b": jnp.array([4.0])}, tx.init(None))[0]
    {'a': Array([-0.6], dtype=float32), 'b': Array([-0.8], dtype=float32)}
  """
  return NormalizeByUpdateNorm(scale_factor, eps)

