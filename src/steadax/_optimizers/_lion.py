"""Lion: the sign of an interpolated momentum, with decoupled weight decay."""

from typing import Any
from jax.typing import ArrayLike, DTypeLike

from .._core._checks import check_nonnegative
from .._core._combine import Chain, chain
from .._core._types import MaskOrFn, ScalarOrSchedule
from .._core._docs import shared_args
from ..transforms._decay import add_decayed_weights
from ..transforms._lion import scale_by_lion
from ..transforms._scaling import scale_by_learning_rate

__all__ = ["lion"]


@shared_args
def lion(
    learning_rate: ScalarOrSchedule,
    b1: ArrayLike = 0.9,
    b2: ArrayLike = 0.99,
    mu_dtype: DTypeLike | None = None,
    weight_decay: ScalarOrSchedule = 1e-3,
    mask: MaskOrFn = None,
) -> Chain:
  """Lion (Chen et al. 2023): ``chain(scale_by_lion(b1, b2, mu_dtype),
  add_decayed_weights(weight_decay, mask), scale_by_learning_rate(lr))``.

  Every coordinate moves by exactly the learning rate (plus weight decay), so Lion's learning rate
  is usually 3-10x smaller than AdamW's and its weight decay 3-10x larger.

  Args:
    learning_rate: <shared>
    b1: the weight of the momentum in the update's interpolation.
    b2: the decay of the momentum.
    mu_dtype: dtype of the momentum (default: each parameter's dtype).
    weight_decay: the decoupled weight decay (scalar or schedule).
    mask: where to apply weight decay (a tree of booleans or a callable returning one).

  Returns:
    The optimizer; its state is ``(ScaleByLionState, EmptyState | MaskedState,
    EmptyState | ScaleByScheduleState)``.

  References:
    Chen et al., "Symbolic Discovery of Optimization Algorithms", NeurIPS 2023.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> opt = steadax.lion(0.1, weight_decay=0.0)
    >>> p = jnp.array([1.0, 1.0])
    >>> steadax.apply_updates(p, opt.update(jnp.array([3.0, -0.01]), opt.init(p), p)[0])
    Array([0.9, 1.1], dtype=float32)
  """
  if not callable(weight_decay):
    check_nonnegative("lion", "weight_decay", weight_decay)
  return chain(
      scale_by_lion(b1=b1, b2=b2, mu_dtype=mu_dtype),
      add_decayed_weights(weight_decay, mask),
      scale_by_learning_rate(learning_rate),
  )
