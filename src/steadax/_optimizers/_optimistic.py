"""Optimistic methods for min-max problems: optimistic gradient descent and optimistic Adam.

The extrapolation ``(alpha + beta) g_t - beta g_{t-1}`` (``scale_by_optimistic_gradient``) is applied
to the raw gradient (OGD) or to Adam's preconditioned direction (optimistic Adam).
"""

from typing import Any
from jax.typing import ArrayLike, DTypeLike

from .._core._checks import check_nonnegative, check_range, check_schedule_or_scalar
from .._core._combine import Chain, chain
from .._core._deprecations import warn_deprecated_call
from .._core._types import ScalarOrSchedule
from .._core._docs import shared_args
from ..transforms._adam import scale_by_adam
from ..transforms._optimistic import _check_not_schedule, scale_by_optimistic_gradient
from ..transforms._scaling import scale_by_learning_rate

__all__ = ["optimistic_gradient_descent", "optimistic_adam", "optimistic_adam_v2"]


@shared_args
def optimistic_gradient_descent(
    learning_rate: ScalarOrSchedule,
    alpha: ArrayLike = 1.0,
    beta: ArrayLike = 1.0,
) -> Chain:
  """Optimistic gradient descent: steps along ``(alpha + beta) g_t - beta g_{t-1}``.

  ``chain(scale_by_optimistic_gradient(alpha, beta), scale_by_learning_rate(learning_rate))``.
  On bilinear games such as ``min_x max_y xy`` it converges where gradient descent-ascent spirals
  out.

  Args:
    learning_rate: <shared>
    alpha: coefficient of the current gradient (a scalar).
    beta: coefficient of the extrapolation from the previous gradient (a scalar).

  Returns:
    The optimizer; its state is ``(ScaleByOptimisticGradientState, EmptyState |
    ScaleByScheduleState)``.

  References:
    Mokhtari et al., "A Unified Analysis of Extra-gradient and Optimistic Gradient Methods for
    Saddle Point Problems", AISTATS 2020.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> opt = steadax.optimistic_gradient_descent(0.1)
    >>> p = jnp.array([1.0])
    >>> steadax.apply_updates(p, opt.update(jnp.array([2.0]), opt.init(p), p)[0])
    Array([0.8], dtype=float32)
  """
  owner = "optimistic_gradient_descent"
  check_schedule_or_scalar(owner, "learning_rate", learning_rate)
  _check_not_schedule(owner, "alpha", alpha)
  _check_not_schedule(owner, "beta", beta)
  return chain(scale_by_optimistic_gradient(alpha, beta), scale_by_learning_rate(learning_rate))


def _check_adam(owner: str, b1: Any, b2: Any, eps: Any) -> None:
  check_range(owner, "b1", b1, 0.0, 1.0, high_open=True)
  check_range(owner, "b2", b2, 0.0, 1.0, high_open=True)
  check_nonnegative(owner, "eps", eps)


@shared_args
def optimistic_adam(
    learning_rate: ArrayLike,
    optimism: ArrayLike | None = None,
    b1: ArrayLike = 0.9,
    b2: ArrayLike = 0.999,
    eps: ArrayLike = 1e-8,
    eps_root: ArrayLike = 0.0,
    mu_dtype: DTypeLike | None = None,
    *,
    nesterov: bool = True,
) -> Chain:
  """Optimistic Adam, Optax's first parameterisation (deprecated, as in Optax 0.2.8, and warns so
  when called: use ``optimistic_adam_v2``).

  ``chain(scale_by_adam(...), scale_by_optimistic_gradient(alpha=learning_rate, beta=optimism),
  scale_by_learning_rate(1.0))``: the learning rate enters the extrapolation, so it must be a
  scalar.

  Args:
    learning_rate: a scalar step size (schedules raise a TypeError; use ``optimistic_adam_v2``).
    optimism: weight of the extrapolation; None uses ``learning_rate``.
    b1: <shared>
    b2: <shared>
    eps: added to Adam's denominator.
    eps_root: added inside Adam's square root.
    mu_dtype: <shared>
    nesterov: Nesterov momentum in Adam (on by default, as in Optax).

  Returns:
    The optimizer; its state is ``(ScaleByAdamState, ScaleByOptimisticGradientState, EmptyState)``.

  References:
    Daskalakis et al., "Training GANs with Optimism", ICLR 2018 (Optimistic Adam, Algorithm 1).

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> import warnings
    >>> with warnings.catch_warnings():
    ...   warnings.simplefilter("ignore", DeprecationWarning)  # deprecated, as in Optax 0.2.8
    ...   opt = steadax.optimistic_adam(0.1)
    >>> [type(s).__name__ for s in opt.init(jnp.zeros(1))]
    ['ScaleByAdamState', 'ScaleByOptimisticGradientState', 'EmptyState']
  """
  owner = "optimistic_adam"
  warn_deprecated_call("`optimistic_adam` is deprecated, please use `optimistic_adam_v2` instead.")
  if callable(learning_rate):
    raise TypeError(f"{owner}: learning_rate must be a scalar (it weights the extrapolation); "
                    "use optimistic_adam_v2 for a schedule.")
  check_schedule_or_scalar(owner, "learning_rate", learning_rate)
  _check_not_schedule(owner, "optimism", optimism)
  _check_adam(owner, b1, b2, eps)
  if optimism is None:
    optimism = learning_rate
  return chain(
      scale_by_adam(b1, b2, eps, eps_root, mu_dtype, nesterov=nesterov),
      scale_by_optimistic_gradient(alpha=learning_rate, beta=optimism),
      scale_by_learning_rate(1.0),
  )


@shared_args
def optimistic_adam_v2(
    learning_rate: ScalarOrSchedule,
    *,
    alpha: ArrayLike = 1.0,
    beta: ArrayLike = 1.0,
    b1: ArrayLike = 0.9,
    b2: ArrayLike = 0.999,
    eps: ArrayLike = 1e-8,
    eps_root: ArrayLike = 0.0,
    mu_dtype: DTypeLike | None = None,
    nesterov: bool = True,
) -> Chain:
  """Optimistic Adam: the optimistic extrapolation of Adam's direction, then the learning rate.

  ``chain(scale_by_adam(...), scale_by_optimistic_gradient(alpha, beta),
  scale_by_learning_rate(learning_rate))``.

  Args:
    learning_rate: <shared>
    alpha: coefficient of the current direction.
    beta: coefficient of the extrapolation from the previous direction.
    b1: <shared>
    b2: <shared>
    eps: added to Adam's denominator.
    eps_root: added inside Adam's square root.
    mu_dtype: <shared>
    nesterov: Nesterov momentum in Adam.

  Returns:
    The optimizer; its state is ``(ScaleByAdamState, ScaleByOptimisticGradientState, EmptyState |
    ScaleByScheduleState)``.

  References:
    Daskalakis et al., "Training GANs with Optimism", ICLR 2018.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> opt = steadax.optimistic_adam_v2(0.1)
    >>> p = jnp.array([1.0])
    >>> steadax.apply_updates(p, opt.update(jnp.array([2.0]), opt.init(p), p)[0])  # Nesterov's first step
    Array([0.8526326], dtype=float32)
  """
  owner = "optimistic_adam_v2"
  check_schedule_or_scalar(owner, "learning_rate", learning_rate)
  _check_not_schedule(owner, "alpha", alpha)
  _check_not_schedule(owner, "beta", beta)
  _check_adam(owner, b1, b2, eps)
  return chain(
      scale_by_adam(b1, b2, eps, eps_root, mu_dtype, nesterov=nesterov),
      scale_by_optimistic_gradient(alpha=alpha, beta=beta),
      scale_by_learning_rate(learning_rate),
  )
