"""Gradient scaling: the identity on the forward pass, a scaled cotangent on the backward pass."""

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from .._core._policy import cast, compute_dtype, real_dtype
from .._linalg._common import concrete_number
from .._core._types import Params

__all__ = ["scale_gradient"]


@jax.custom_vjp
def _scaled_identity(inputs: Any, scale: jax.Array) -> Any:
  del scale
  return inputs


def _scaled_identity_fwd(inputs: Any, scale: jax.Array) -> tuple[Any, jax.Array]:
  return inputs, scale


def _scale_cotangent(g: Any, scale: jax.Array) -> Any:
  if g is None or getattr(g, "dtype", None) == jax.dtypes.float0:
    return g  # integer inputs have no gradient to scale
  cdt = compute_dtype(g.dtype)
  return cast(cast(g, cdt) * cast(cast(scale, real_dtype(cdt)), cdt), g.dtype)


def _scaled_identity_bwd(scale: jax.Array, g: Any) -> tuple[Any, jax.Array]:
  scaled = jax.tree_util.tree_map(lambda x: _scale_cotangent(x, scale), g, is_leaf=lambda x: x is None)
  return scaled, jnp.zeros_like(scale)


_scaled_identity.defvjp(_scaled_identity_fwd, _scaled_identity_bwd)


def scale_gradient(inputs: Params, scale: ArrayLike) -> Any:
  """Returns ``inputs`` unchanged, with the gradient flowing back through it multiplied by ``scale``.

  The scaled cotangent keeps each leaf's dtype (the product is taken in at least float32). No
  gradient flows to ``scale``. A concrete ``scale`` of 1 returns ``inputs`` itself, and of 0 stops
  the gradient.

  Args:
    inputs: a tree of arrays.
    scale: a real scalar (it may be traced).

  Returns:
    ``inputs``, with the backward pass scaled.

  Example:
    >>> import jax, jax.numpy as jnp, steadax
    >>> jax.grad(lambda x: jnp.sum(steadax.scale_gradient(x, 0.5) ** 2))(jnp.array([1.0, 2.0]))
    Array([1., 2.], dtype=float32)
  """
  owner = "scale_gradient"
  if callable(scale) or isinstance(scale, (str, bytes, bool)) or scale is None:
    raise TypeError(f"{owner}: `scale` must be a real scalar, got {scale!r}.")
  if np.shape(scale) != ():
    raise ValueError(f"{owner}: `scale` must be a scalar, got an array of shape {np.shape(scale)}.")
  value = concrete_number(scale)
  if isinstance(value, complex) or jnp.issubdtype(jnp.result_type(scale), jnp.complexfloating):
    raise TypeError(f"{owner}: `scale` must be real, got {scale!r}.")
  if value is not None and value == 1:
    return inputs
  if value is not None and value == 0:
    return jax.lax.stop_gradient(inputs)
  scale = jnp.asarray(scale)
  if not jnp.issubdtype(scale.dtype, jnp.floating):
    scale = cast(scale, compute_dtype(scale.dtype))
  return _scaled_identity(inputs, scale)
