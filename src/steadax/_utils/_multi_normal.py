"""A Gaussian with diagonal covariance, parameterised by its mean and the log of its scale."""

import math
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from .._core._docs import shared_args
from .._core._module import Module, hyper_field
from .._core._policy import cast, compute_dtype, result_dtype, with_weak

__all__ = ["multi_normal", "MultiNormalDiagFromLogScale"]

_HALF_LOG_TWO_PI = 0.5 * math.log(2 * math.pi)


def _check_shape(owner: str, shape: Any) -> tuple[int, ...]:
  try:
    dims = tuple(shape)
  except TypeError:
    raise TypeError(f"{owner}: `shape` must be a sequence of ints, got {shape!r}.") from None
  if not all(isinstance(d, (int, np.integer)) and not isinstance(d, bool) and d >= 0 for d in dims):
    raise ValueError(f"{owner}: `shape` must be a sequence of non-negative ints, got {shape!r}.")
  return tuple(int(d) for d in dims)


class MultiNormalDiagFromLogScale(Module):
  """A Gaussian with mean ``loc`` and standard deviation ``exp(log_scale)`` (elementwise).

  A pytree: ``loc`` and ``log_scale`` are its leaves, so it passes through ``jax.jit``. Build it
  with ``multi_normal``. Samples have the promoted floating dtype of ``loc`` and ``log_scale``;
  log-densities that of the point and the parameters; both are computed in at least float32.
  """

  loc: Any = hyper_field()
  log_scale: Any = hyper_field()

  @property
  def param_shape(self) -> tuple[int, ...]:
    """The broadcast shape of ``loc`` and ``log_scale``: the event shape."""
    return jax.lax.broadcast_shapes(np.shape(self.loc), np.shape(self.log_scale))

  @property
  def params(self) -> Sequence[jax.Array]:
    """``[loc, log_scale]``, the parameters a score-function estimator differentiates."""
    return [self.loc, self.log_scale]

  def _dtype(self) -> np.dtype:
    return with_weak(result_dtype(self.loc, self.log_scale), 0.0)

  def _event_params(self, batch_ndim: int, cdt: Any) -> tuple[jax.Array, jax.Array]:
    # Explicit broadcasting: the library runs under rank promotion "raise" in its tests.
    shape = (1,) * batch_ndim + self.param_shape
    loc = jnp.broadcast_to(cast(self.loc, cdt), self.param_shape).reshape(shape)
    log_scale = jnp.broadcast_to(cast(self.log_scale, cdt), self.param_shape).reshape(shape)
    return loc, log_scale

  def sample(self, shape: Sequence[int], key: Any) -> jax.Array:
    """Draws samples of shape ``(*shape, *param_shape)``.

    Args:
      shape: the sample shape.
      key: a JAX random key.

    Returns:
      The samples, in the parameters' dtype.
    """
    out_dtype = self._dtype()
    cdt = compute_dtype(out_dtype)
    shape = _check_shape("sample", shape)
    noise = jax.random.normal(key, shape + self.param_shape, cdt)
    loc, log_scale = self._event_params(len(shape), cdt)
    return cast(noise * jnp.exp(log_scale) + loc, out_dtype)

  def log_prob(self, x: Any) -> jax.Array:
    """The log-density at ``x``, summed over the event axes (the last ``len(param_shape)``).

    Args:
      x: points of shape ``(*batch, *param_shape)``.

    Returns:
      An array of shape ``batch``, in the promoted dtype of ``x`` and the parameters.
    """
    x = jnp.asarray(x)
    event = self.param_shape
    if x.ndim < len(event) or x.shape[x.ndim - len(event):] != event:
      raise ValueError(f"log_prob: `x` must end with the event shape {event}, got shape {x.shape}.")
    out_dtype = with_weak(result_dtype(x, self.loc, self.log_scale), 0.0)
    cdt = compute_dtype(out_dtype)
    loc, log_scale = self._event_params(x.ndim - len(event), cdt)
    z = (cast(x, cdt) - loc) * jnp.exp(-log_scale)
    # log N(x; mu, s) = -z^2 / 2 - log s - log(2 pi) / 2, with log s given directly (no log(exp)).
    log_density = -0.5 * z * z - log_scale - _HALF_LOG_TWO_PI
    axes = tuple(range(x.ndim - len(event), x.ndim))
    return cast(jnp.sum(log_density, axis=axes), out_dtype)


@shared_args
def multi_normal(loc: ArrayLike, log_scale: ArrayLike) -> MultiNormalDiagFromLogScale:
  """A diagonal Gaussian with mean ``loc`` and standard deviation ``exp(log_scale)``.

  Args:
    loc: the mean (an array).
    log_scale: the log of the standard deviation (an array broadcastable with ``loc``).

  Returns:
    A ``MultiNormalDiagFromLogScale`` with ``sample(shape, key)``, ``log_prob(x)``, ``log_scale``
    and ``params``.

  Example:
    >>> import jax, jax.numpy as jnp, steadax
    >>> dist = steadax.multi_normal(jnp.zeros(2), jnp.zeros(2))
    >>> dist.sample((3,), jax.random.PRNGKey(0)).shape
    (3, 2)
    >>> print(f"{dist.log_prob(jnp.zeros(2)):.4f}")
    -1.8379
  """
  owner = "multi_normal"
  for name, value in (("loc", loc), ("log_scale", log_scale)):
    if callable(value) or isinstance(value, (str, bytes)) or value is None:
      raise TypeError(f"{owner}: `{name}` must be an array, got {type(value).__name__}.")
  loc, log_scale = jnp.asarray(loc), jnp.asarray(log_scale)
  for name, value in (("loc", loc), ("log_scale", log_scale)):
    if jnp.issubdtype(value.dtype, jnp.complexfloating):
      raise TypeError(f"{owner}: `{name}` must be real, got dtype {value.dtype}.")
  try:
    jax.lax.broadcast_shapes(loc.shape, log_scale.shape)
  except ValueError:
    raise ValueError(
        f"{owner}: Incompatible shapes for broadcasting: `loc` {loc.shape} and `log_scale` "
        f"{log_scale.shape}."
    ) from None
  return MultiNormalDiagFromLogScale(loc, log_scale)
