"""Adam's relatives: adabelief, adan, radam, yogi.

Each is its ``scale_by_*`` block (see ``steadax.transforms``, where the maths and references live),
optional decoupled weight decay, and the learning rate.
"""

from typing import Any
from jax.typing import ArrayLike

from .._core._checks import check_nonnegative
from .._core._combine import Chain, chain
from .._core._types import MaskOrFn, ScalarOrSchedule
from .._core._docs import shared_args
from ..transforms._adam_variants import scale_by_adan, scale_by_belief, scale_by_radam, scale_by_yogi
from ..transforms._decay import add_decayed_weights
from ..transforms._scaling import scale_by_learning_rate

__all__ = ["adabelief", "adan", "radam", "yogi"]


@shared_args
def adabelief(
    learning_rate: ScalarOrSchedule,
    b1: ArrayLike = 0.9,
    b2: ArrayLike = 0.999,
    eps: ArrayLike = 1e-16,
    eps_root: ArrayLike = 1e-16,
    *,
    nesterov: bool = False,
) -> Chain:
  """AdaBelief: ``chain(scale_by_belief(...), scale_by_learning_rate(learning_rate))``.

  Adam whose denominator tracks the variance of the gradient around its running mean (the
  "belief" in the observed gradient), see ``scale_by_belief``.

  Args:
    learning_rate: <shared>
    b1: <shared>
    b2: decay of the second central moment, in [0, 1).
    eps: added to the denominator (the paper's default is 1e-8 with ``eps_root=0``).
    eps_root: added to the second central moment at every step.
    nesterov: <shared>

  Returns:
    The optimizer; its state is ``(ScaleByBeliefState, EmptyState | ScaleByScheduleState)``.

  References:
    Zhuang et al., "AdaBelief Optimizer: Adapting Stepsizes by the Belief in Observed Gradients",
    NeurIPS 2020.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> opt = steadax.adabelief(0.1)
    >>> p = jnp.array([1.0, -1.0])
    >>> steadax.apply_updates(p, opt.update(2 * p, opt.init(p), p)[0])  # about 1 - 0.1 * 2 / 1.8, as Optax rounds it
    Array([ 0.8888896, -0.8888896], dtype=float32)
  """
  return chain(scale_by_belief(b1, b2, eps, eps_root, nesterov=nesterov), scale_by_learning_rate(learning_rate))


@shared_args
def adan(
    learning_rate: ScalarOrSchedule,
    b1: ArrayLike = 0.98,
    b2: ArrayLike = 0.92,
    b3: ArrayLike = 0.99,
    eps: ArrayLike = 1e-8,
    eps_root: ArrayLike = 1e-8,
    weight_decay: ScalarOrSchedule = 0.0,
    mask: MaskOrFn = None,
) -> Chain:
  """Adan: ``chain(scale_by_adan(...), add_decayed_weights(weight_decay, mask), scale_by_learning_rate)``.

  Nesterov-accelerated adaptive moments estimated from gradients and gradient differences, see
  ``scale_by_adan``.

  Args:
    learning_rate: <shared>
    b1: decay of the gradient average, in [0, 1).
    b2: decay of the average of gradient differences, in [0, 1).
    b3: decay of the second moment, in [0, 1).
    eps: <shared>
    eps_root: <shared>
    weight_decay: <shared>
    mask: <shared>

  Returns:
    The optimizer; its state is ``(ScaleByAdanState, EmptyState | ..., EmptyState | ...)``.

  References:
    Xie et al., "Adan: Adaptive Nesterov Momentum Algorithm for Faster Optimizing Deep Models",
    2022 (arXiv:2208.06677).

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> opt = steadax.adan(0.1)
    >>> p = jnp.array([1.0, -1.0])
    >>> steadax.apply_updates(p, opt.update(2 * p, opt.init(p), p)[0])
    Array([ 0.9, -0.9], dtype=float32)
  """
  if not callable(weight_decay):
    check_nonnegative("adan", "weight_decay", weight_decay)
  return chain(
      scale_by_adan(b1, b2, b3, eps, eps_root),
      add_decayed_weights(weight_decay, mask),
      scale_by_learning_rate(learning_rate),
  )


@shared_args
def radam(
    learning_rate: ScalarOrSchedule,
    b1: ArrayLike = 0.9,
    b2: ArrayLike = 0.999,
    eps: ArrayLike = 1e-8,
    eps_root: ArrayLike = 0.0,
    threshold: ArrayLike = 5.0,
    *,
    nesterov: bool = False,
) -> Chain:
  """Rectified Adam: ``chain(scale_by_radam(...), scale_by_learning_rate(learning_rate))``.

  Momentum SGD for the first steps, then Adam with a rectified adaptive learning rate, see
  ``scale_by_radam``.

  Args:
    learning_rate: <shared>
    b1: <shared>
    b2: <shared>
    eps: <shared>
    eps_root: <shared>
    threshold: the length of the approximated moving average from which the adaptive step is
      used (at least 4).
    nesterov: <shared>

  Returns:
    The optimizer; its state is ``(ScaleByAdamState, EmptyState | ScaleByScheduleState)``.

  References:
    Liu et al., "On the Variance of the Adaptive Learning Rate and Beyond", ICLR 2020.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> opt = steadax.radam(0.1)
    >>> p = jnp.array([1.0, -1.0])
    >>> steadax.apply_updates(p, opt.update(2 * p, opt.init(p), p)[0])  # first steps: SGD momentum
    Array([ 0.8, -0.8], dtype=float32)
  """
  return chain(scale_by_radam(b1, b2, eps, eps_root, threshold, nesterov=nesterov),
               scale_by_learning_rate(learning_rate))


@shared_args
def yogi(learning_rate: ScalarOrSchedule, b1: ArrayLike = 0.9, b2: ArrayLike = 0.999, eps: ArrayLike = 1e-3) -> Chain:
  """Yogi: ``chain(scale_by_yogi(b1, b2, eps), scale_by_learning_rate(learning_rate))``.

  Adam with an additive second-moment update that cannot inflate the effective learning rate
  abruptly, see ``scale_by_yogi``.

  Args:
    learning_rate: <shared>
    b1: <shared>
    b2: rate of the second-moment update, in [0, 1).
    eps: added to the denominator (Yogi's default is large, 1e-3).

  Returns:
    The optimizer; its state is ``(ScaleByAdamState, EmptyState | ScaleByScheduleState)``.

  References:
    Zaheer et al., "Adaptive Methods for Nonconvex Optimization", NeurIPS 2018.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> opt = steadax.yogi(0.1)
    >>> opt.init(jnp.zeros(2))[0].nu
    Array([1.e-06, 1.e-06], dtype=float32)
  """
  return chain(scale_by_yogi(b1, b2, eps), scale_by_learning_rate(learning_rate))
