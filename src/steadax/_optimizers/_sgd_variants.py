"""SGD variants: noisy_sgd (annealed gradient noise) and polyak_sgd (Polyak step sizes)."""

from typing import Any
from jax.typing import ArrayLike

from .._core._checks import check_schedule_or_scalar
from .._core._combine import Chain, chain
from .._core._types import ScalarOrSchedule
from .._core._docs import shared_args
from ..transforms._noise import add_noise
from ..transforms._scaling import scale_by_learning_rate
from ..transforms._step_size import scale_by_polyak
from ._sgd import sgd

__all__ = ["noisy_sgd", "polyak_sgd"]


@shared_args
def noisy_sgd(
    learning_rate: ScalarOrSchedule,
    eta: ArrayLike = 0.01,
    gamma: ArrayLike = 0.55,
    key: ArrayLike | None = None,
    *,
    seed: int | None = None,
) -> Chain:
  """SGD on gradients plus annealed Gaussian noise of variance ``eta / t^gamma``.

  ``chain(add_noise(eta, gamma, key), scale_by_learning_rate(learning_rate))``. The same key gives
  the same noise as Optax for float32 parameters.

  Args:
    learning_rate: <shared>
    eta: the base variance of the noise.
    gamma: the annealing exponent.
    key: a ``jax.random.key`` or an integer seed (None warns and uses 0, as Optax).
    seed: deprecated spelling of an integer ``key``.

  Returns:
    The optimizer; its state is ``(AddNoiseState, EmptyState | ScaleByScheduleState)``.

  References:
    Neelakantan et al., "Adding Gradient Noise Improves Learning for Very Deep Networks", 2015
    (arXiv:1511.06807).

  Example:
    >>> import jax, jax.numpy as jnp, steadax
    >>> opt = steadax.noisy_sgd(0.1, eta=0.0, key=jax.random.key(0))
    >>> p = jnp.array([1.0])
    >>> steadax.apply_updates(p, opt.update(jnp.array([2.0]), opt.init(p), p)[0])
    Array([0.8], dtype=float32)
  """
  return chain(add_noise(eta, gamma, key, seed=seed), scale_by_learning_rate(learning_rate))


@shared_args
def polyak_sgd(
    max_learning_rate: ArrayLike = 1.0,
    scaling: ScalarOrSchedule = 1.0,
    f_min: ArrayLike = 0.0,
    eps: ArrayLike = 0.0,
    variant: str = "sps",
) -> Chain:
  """SGD with the Polyak step size ``min((f(x) - f_min) / ||g||^2, max_learning_rate)``.

  ``chain(sgd(learning_rate=scaling), scale_by_polyak(f_min, max_learning_rate, eps, variant))``.
  ``update`` needs the keyword argument ``value`` (the objective at ``params``). The step is a
  scalar statistic computed in the widest floating dtype of the tree (at least float32), so a
  float32 + bfloat16 tree keeps each update's dtype and the result does not depend on the dtype
  of ``value``.

  Args:
    max_learning_rate: the largest step.
    scaling: a scalar or schedule multiplying the step (SGD's learning rate).
    f_min: a lower bound on the objective.
    eps: added to the squared gradient norm.
    variant: ``"sps"`` or ``"sps+"`` (negative gaps clipped to zero).

  Returns:
    The optimizer; its state is ``((EmptyState, EmptyState | ScaleByScheduleState), EmptyState)``.

  References:
    Loizou et al., "Stochastic Polyak Step-size for SGD: An Adaptive Learning Rate for Fast
    Convergence", AISTATS 2021.

  Example:
    >>> import jax, jax.numpy as jnp, steadax
    >>> f = lambda x: jnp.sum(x ** 2)
    >>> opt = steadax.polyak_sgd()
    >>> p = jnp.array([1.0, -2.0])
    >>> value, grad = jax.value_and_grad(f)(p)
    >>> steadax.apply_updates(p, opt.update(grad, opt.init(p), p, value=value)[0])
    Array([ 0.5, -1. ], dtype=float32)
  """
  check_schedule_or_scalar("polyak_sgd", "scaling", scaling)
  return chain(sgd(learning_rate=scaling), scale_by_polyak(f_min, max_learning_rate, eps, variant))
