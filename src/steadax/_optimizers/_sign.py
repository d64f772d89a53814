"""Sign-based optimizers: sign_sgd, signum and rprop."""

from typing import Any
from jax.typing import ArrayLike, DTypeLike

from .._core._checks import check_range
from .._core._combine import Chain, chain
from .._core._types import ScalarOrSchedule
from .._core._docs import shared_args
from ..transforms._rprop import scale_by_rprop
from ..transforms._scaling import ema, scale, scale_by_learning_rate, scale_by_sign

__all__ = ["sign_sgd", "signum", "rprop"]


@shared_args
def sign_sgd(learning_rate: ScalarOrSchedule) -> Chain:
  """signSGD: steps of size ``learning_rate`` along the sign of each gradient coordinate.

  ``chain(scale_by_sign(), scale_by_learning_rate(learning_rate))``.

  Args:
    learning_rate: <shared>

  Returns:
    The optimizer; its state is ``(EmptyState, EmptyState | ScaleByScheduleState)``.

  References:
    Bernstein et al., "signSGD: Compressed Optimisation for Non-Convex Problems", ICML 2018
    (Algorithm 1).

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> opt = steadax.sign_sgd(0.1)
    >>> p = jnp.array([1.0, 1.0])
    >>> steadax.apply_updates(p, opt.update(jnp.array([3.0, -1e-3]), opt.init(p), p)[0])
    Array([0.9, 1.1], dtype=float32)
  """
  return chain(scale_by_sign(), scale_by_learning_rate(learning_rate))


@shared_args
def signum(learning_rate: ScalarOrSchedule, beta: ArrayLike = 0.9, accumulator_dtype: DTypeLike | None = None) -> Chain:
  """Signum: signSGD on the momentum ``m = beta m + (1 - beta) g``.

  ``chain(ema(beta, debias=False, accumulator_dtype), scale_by_sign(),
  scale_by_learning_rate(learning_rate))``; debiasing would not change the sign.

  Args:
    learning_rate: <shared>
    beta: the momentum, in [0, 1).
    accumulator_dtype: dtype of the momentum (default: each parameter's dtype).

  Returns:
    The optimizer; its state is ``(EmaState, EmptyState, EmptyState | ScaleByScheduleState)``.

  References:
    Bernstein et al., "signSGD: Compressed Optimisation for Non-Convex Problems", ICML 2018
    (Algorithm 3).

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> opt = steadax.signum(0.1)
    >>> p = jnp.array([1.0])
    >>> steadax.apply_updates(p, opt.update(jnp.array([5.0]), opt.init(p), p)[0])
    Array([0.9], dtype=float32)
  """
  check_range("signum", "beta", beta, 0.0, 1.0, high_open=True)
  return chain(
      ema(beta, debias=False, accumulator_dtype=accumulator_dtype),
      scale_by_sign(),
      scale_by_learning_rate(learning_rate),
  )


@shared_args
def rprop(
    learning_rate: ArrayLike,
    eta_minus: ArrayLike = 0.5,
    eta_plus: ArrayLike = 1.2,
    min_step_size: ArrayLike = 1e-6,
    max_step_size: ArrayLike = 50.0,
) -> Chain:
  """Rprop: per-coordinate step sizes grown while the gradient keeps its sign, shrunk on a flip.

  ``chain(scale_by_rprop(...), scale(-1.0))``. Meant for full-batch gradients; real parameters
  only. Unlike Optax 0.2.8, whose update lags one step behind (it returns the previous step's
  update and zeros at the first step; google-deepmind/optax PR 1725), the update of step ``t`` uses
  the gradient of step ``t``, as in the paper and ``torch.optim.Rprop``.

  Args:
    learning_rate: the initial step size of every coordinate (a scalar).
    eta_minus: factor applied to a step size after a sign flip, in (0, 1].
    eta_plus: factor applied while the sign is kept, at least 1.
    min_step_size: the smallest step size.
    max_step_size: the largest step size.

  Returns:
    The optimizer; its state is ``(ScaleByRpropState, EmptyState)``.

  References:
    Riedmiller & Braun, "A Direct Adaptive Method for Faster Backpropagation Learning: The RPROP
    Algorithm", IEEE ICNN 1993.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> opt = steadax.rprop(0.1)
    >>> p = jnp.array([1.0, 1.0])
    >>> steadax.apply_updates(p, opt.update(jnp.array([3.0, -1e-3]), opt.init(p), p)[0])
    Array([0.9, 1.1], dtype=float32)
  """
  if callable(learning_rate):
    raise TypeError("rprop: learning_rate is the initial step size and must be a scalar, not a schedule.")
  return chain(scale_by_rprop(learning_rate, eta_minus, eta_plus, min_step_size, max_step_size), scale(-1.0))
