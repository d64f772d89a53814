"""RMSProp and AdaGrad: step sizes from running (or summed) squared gradients."""

from typing import Any
from jax.typing import ArrayLike

from .._core._stateless import identity
from .._core._checks import check_range
from .._core._combine import Chain, chain
from .._core._types import ScalarOrSchedule
from .._core._docs import shared_args
from ..transforms._rms import scale_by_rms, scale_by_rss, scale_by_stddev
from ..transforms._scaling import scale_by_learning_rate, trace

__all__ = ["rmsprop", "adagrad"]


@shared_args
def rmsprop(
    learning_rate: ScalarOrSchedule,
    decay: ArrayLike = 0.9,
    eps: ArrayLike = 1e-8,
    initial_scale: ArrayLike = 0.0,
    eps_in_sqrt: bool = True,
    centered: bool = False,
    momentum: ArrayLike | None = None,
    nesterov: bool = False,
    bias_correction: bool = False,
) -> Chain:
  """RMSProp: gradient descent with each coordinate divided by its running root mean square.

  ``chain(scale_by_rms(...) or scale_by_stddev(...) if centered, scale_by_learning_rate(lr),
  trace(momentum, nesterov) or identity())``; the momentum is applied after the learning rate,
  as in Optax.

  Args:
    learning_rate: <shared>
    decay: the weight of the old squared-gradient average, in [0, 1].
    eps: added to the denominator (inside the square root with ``eps_in_sqrt``).
    initial_scale: the initial value of the squared-gradient average.
    eps_in_sqrt: add ``eps`` inside the square root.
    centered: divide by the running standard deviation instead (Graves 2013).
    momentum: the momentum coefficient, or None for no momentum buffer.
    nesterov: <shared>
    bias_correction: bias-correct the moving averages (adds a count to the state).

  Returns:
    The optimizer; its state is ``(ScaleByRmsState | ScaleByRStdDevState (WithCount when
    bias-corrected), EmptyState | ScaleByScheduleState, EmptyState | TraceState)``.

  References:
    Tieleman & Hinton, "Lecture 6.5 - RMSProp", COURSERA 2012.
    Graves, "Generating Sequences With Recurrent Neural Networks", arXiv:1308.0850, 2013.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> opt = steadax.rmsprop(0.1, decay=0.75, eps=0.0)
    >>> p = jnp.array([1.0])
    >>> steadax.apply_updates(p, opt.update(jnp.array([3.0]), opt.init(p), p)[0])
    Array([0.8], dtype=float32)
  """
  if momentum is not None:
    check_range("rmsprop", "momentum", momentum, 0.0, 1.0)
  block = scale_by_stddev if centered else scale_by_rms
  return chain(
      block(decay=decay, eps=eps, initial_scale=initial_scale, eps_in_sqrt=eps_in_sqrt,
            bias_correction=bias_correction),
      scale_by_learning_rate(learning_rate),
      trace(decay=momentum, nesterov=nesterov) if momentum is not None else identity(),
  )


@shared_args
def adagrad(
    learning_rate: ScalarOrSchedule,
    initial_accumulator_value: ArrayLike = 0.1,
    eps: ArrayLike = 1e-7,
) -> Chain:
  """AdaGrad: gradient descent with each coordinate divided by the root of its summed squares.

  ``chain(scale_by_rss(initial_accumulator_value, eps), scale_by_learning_rate(lr))``.

  Args:
    learning_rate: <shared>
    initial_accumulator_value: the initial value of the sum of squares (non-negative).
    eps: added inside the square root.

  Returns:
    The optimizer; its state is ``(ScaleByRssState, EmptyState | ScaleByScheduleState)``.

  References:
    Duchi, Hazan & Singer, "Adaptive Subgradient Methods for Online Learning and Stochastic
    Optimization", JMLR 2011.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> opt = steadax.adagrad(0.1, initial_accumulator_value=0.0, eps=0.0)
    >>> p = jnp.array([1.0])
    >>> steadax.apply_updates(p, opt.update(jnp.array([3.0]), opt.init(p), p)[0])
    Array([0.9], dtype=float32)
  """
  return chain(
      scale_by_rss(initial_accumulator_value=initial_accumulator_value, eps=eps),
      scale_by_learning_rate(learning_rate),
  )
