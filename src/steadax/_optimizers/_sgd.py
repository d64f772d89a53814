"""Stochastic gradient descent with optional (Nesterov) momentum."""

from typing import Any
from jax.typing import ArrayLike, DTypeLike

from .._core._stateless import identity
from .._core._checks import check_range
from .._core._combine import Chain, chain
from .._core._types import ScalarOrSchedule
from .._core._docs import shared_args
from ..transforms._scaling import scale_by_learning_rate, trace

__all__ = ["sgd"]


@shared_args
def sgd(
    learning_rate: ScalarOrSchedule,
    momentum: ArrayLike | None = None,
    nesterov: bool = False,
    accumulator_dtype: DTypeLike | None = None,
) -> Chain:
  """Stochastic gradient descent, with heavy-ball or Nesterov momentum.

  ``chain(trace(momentum, nesterov) or identity(), scale_by_learning_rate(learning_rate))``.

  Args:
    learning_rate: <shared>
    momentum: the momentum coefficient, or None for plain SGD (no momentum buffer).
    nesterov: <shared>
    accumulator_dtype: dtype of the momentum buffer (default: each parameter's dtype).

  Returns:
    The optimizer.

  References:
    Sutskever et al., "On the importance of initialization and momentum in deep learning", ICML 2013.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> opt = steadax.sgd(0.1, momentum=0.9)
    >>> params = jnp.array([1.0])
    >>> updates, state = opt.update(jnp.array([1.0]), opt.init(params), params)
    >>> steadax.apply_updates(params, updates)
    Array([0.9], dtype=float32)
  """
  if momentum is not None:
    check_range("sgd", "momentum", momentum, 0.0, 1.0)
  first = identity() if momentum is None else trace(momentum, nesterov, accumulator_dtype)
  return chain(first, scale_by_learning_rate(learning_rate))
