"""Layer-wise adaptive optimizers: LAMB and LARS scale each layer's step by a trust ratio."""

from typing import Any
from jax.typing import ArrayLike

from .._core._checks import check_nonnegative, check_range
from .._core._combine import Chain, chain
from .._core._types import MaskOrFn, ScalarOrSchedule
from .._core._docs import shared_args
from ..transforms._adam import scale_by_adam
from ..transforms._decay import add_decayed_weights
from ..transforms._scaling import scale_by_learning_rate, trace
from ..transforms._trust_ratio import scale_by_trust_ratio
from ..transforms._masked import masked

__all__ = ["lamb", "lars"]


@shared_args
def lamb(
    learning_rate: ScalarOrSchedule,
    b1: ArrayLike = 0.9,
    b2: ArrayLike = 0.999,
    eps: ArrayLike = 1e-6,
    eps_root: ArrayLike = 0.0,
    weight_decay: ScalarOrSchedule = 0.0,
    mask: MaskOrFn = None,
) -> Chain:
  """LAMB (You et al. 2020): Adam's direction plus weight decay, rescaled per layer by the trust
  ratio ``||p|| / ||u||``.

  ``chain(scale_by_adam(b1, b2, eps, eps_root), add_decayed_weights(weight_decay, mask),
  scale_by_trust_ratio(), scale_by_learning_rate(lr))``.

  Args:
    learning_rate: <shared>
    b1: <shared>
    b2: <shared>
    eps: added to Adam's denominator.
    eps_root: added inside Adam's square root.
    weight_decay: the decoupled weight decay (scalar or schedule).
    mask: where to apply weight decay.

  Returns:
    The optimizer; its state is ``(ScaleByAdamState, EmptyState | MaskedState, EmptyState,
    EmptyState | ScaleByScheduleState)``.

  References:
    You et al., "Large Batch Optimization for Deep Learning: Training BERT in 76 minutes",
    ICLR 2020, Algorithm 2.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> opt = steadax.lamb(0.1)
    >>> p = jnp.array([3.0, 4.0])
    >>> steadax.apply_updates(p, opt.update(jnp.array([1.0, 1.0]), opt.init(p), p)[0])
    Array([2.6464467, 3.6464467], dtype=float32)
  """
  if not callable(weight_decay):
    check_nonnegative("lamb", "weight_decay", weight_decay)
  return chain(
      scale_by_adam(b1=b1, b2=b2, eps=eps, eps_root=eps_root),
      add_decayed_weights(weight_decay=weight_decay, mask=mask),
      scale_by_trust_ratio(),
      scale_by_learning_rate(learning_rate),
  )


@shared_args
def lars(
    learning_rate: ScalarOrSchedule,
    weight_decay: ScalarOrSchedule = 0.0,
    weight_decay_mask: MaskOrFn = True,
    trust_coefficient: ArrayLike = 0.001,
    eps: ArrayLike = 0.0,
    trust_ratio_mask: MaskOrFn = True,
    momentum: ArrayLike = 0.9,
    nesterov: bool = False,
) -> Chain:
  """LARS (You et al. 2017): SGD with momentum whose step is rescaled per layer by the trust ratio
  ``trust_coefficient * ||p|| / (||g + wd p|| + eps)``.

  ``chain(add_decayed_weights(weight_decay, weight_decay_mask), masked(scale_by_trust_ratio(
  trust_coefficient=..., eps=...), trust_ratio_mask), scale_by_learning_rate(lr),
  trace(momentum, nesterov))``; the masks are usually False for biases and normalisation scales.

  Args:
    learning_rate: <shared>
    weight_decay: the weight decay, added before the trust ratio (scalar or schedule).
    weight_decay_mask: where to apply weight decay (True: everywhere).
    trust_coefficient: multiplies the trust ratio (``eta`` in the paper).
    eps: added to the update's norm.
    trust_ratio_mask: where to apply the trust ratio (True: everywhere).
    momentum: the momentum coefficient, in [0, 1].
    nesterov: <shared>

  Returns:
    The optimizer; its state is ``(MaskedState, MaskedState, EmptyState | ScaleByScheduleState,
    TraceState)``.

  References:
    You, Gitman & Ginsburg, "Large Batch Training of Convolutional Networks", arXiv:1708.03888,
    2017, Algorithm 1.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> opt = steadax.lars(1.0, trust_coefficient=0.1)
    >>> p = jnp.array([3.0, 4.0])
    >>> steadax.apply_updates(p, opt.update(jnp.array([0.0, 2.0]), opt.init(p), p)[0])
    Array([3. , 3.5], dtype=float32)
  """
  if not callable(weight_decay):
    check_nonnegative("lars", "weight_decay", weight_decay)
  check_nonnegative("lars", "trust_coefficient", trust_coefficient)
  check_range("lars", "momentum", momentum, 0.0, 1.0)
  return chain(
      add_decayed_weights(weight_decay, mask=weight_decay_mask),
      masked(scale_by_trust_ratio(trust_coefficient=trust_coefficient, eps=eps), trust_ratio_mask),
      scale_by_learning_rate(learning_rate),
      trace(decay=momentum, nesterov=nesterov),
  )
