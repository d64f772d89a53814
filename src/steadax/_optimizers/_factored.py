"""Adafactor: factored second moments, update clipping and relative step sizes."""

from typing import Any

import jax.numpy as jnp
from jax.typing import ArrayLike, DTypeLike

from .._core._checks import check_nonnegative, check_positive, check_range, check_schedule_or_scalar
from .._core._combine import Chain, chain
from .._core._docs import shared_args
from .._core._types import MaskOrFn, ScalarOrSchedule
from ..transforms._clipping import clip_by_block_rms
from ..transforms._decay import add_decayed_weights
from ..transforms._factored import scale_by_factored_rms
from ..transforms._scaling import ema, scale, scale_by_learning_rate
from ..transforms._trust_ratio import scale_by_param_block_rms

__all__ = ["adafactor"]


@shared_args
def adafactor(
    learning_rate: ScalarOrSchedule | None = None,
    min_dim_size_to_factor: int = 128,
    decay_rate: ArrayLike = 0.8,
    decay_offset: ArrayLike = 0,
    multiply_by_parameter_scale: bool = True,
    clipping_threshold: ArrayLike | None = 1.0,
    momentum: ArrayLike | None = None,
    dtype_momentum: DTypeLike = jnp.float32,
    weight_decay_rate: ScalarOrSchedule | None = None,
    eps: ArrayLike = 1e-30,
    factored: bool = True,
    weight_decay_mask: MaskOrFn = None,
) -> Chain:
  """Adafactor (Shazeer & Stern 2018): Adam-like steps with a factored, memory-light second moment.

  The chain, as in Optax: ``scale_by_factored_rms``, then ``clip_by_block_rms(clipping_threshold)``
  (unless None), ``scale_by_learning_rate(learning_rate, flip_sign=False)`` (unless None),
  ``scale_by_param_block_rms()`` (with ``multiply_by_parameter_scale``), ``ema(momentum,
  debias=False)`` (unless None), ``add_decayed_weights(weight_decay_rate, weight_decay_mask)``
  (unless None) and ``scale(-1)``.

  Args:
    learning_rate: a scalar, a schedule, or None (no learning-rate scaling).
    min_dim_size_to_factor: factor a parameter's statistics only when its second largest axis has
      at least this many entries.
    decay_rate: the exponent of the second-moment decay schedule ``1 - (t + 1)**(-decay_rate)``.
    decay_offset: subtracted from the step count in that schedule (for fine-tuning).
    multiply_by_parameter_scale: scale each update by its parameter's root mean square.
    clipping_threshold: the largest root mean square of a block's update, or None.
    momentum: the momentum's decay, or None for no momentum buffer.
    dtype_momentum: dtype of the momentum buffer (complex parameters keep a complex buffer).
    weight_decay_rate: decoupled weight decay (scalar or schedule), or None.
    eps: added to the squared gradients.
    factored: use factored second moments at all.
    weight_decay_mask: where to apply weight decay.

  Returns:
    The optimizer; its state starts with ``FactoredState`` followed by one state per block above.

  References:
    Shazeer & Stern, "Adafactor: Adaptive Learning Rates with Sublinear Memory Cost", ICML 2018.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> opt = steadax.adafactor(0.1, multiply_by_parameter_scale=False)
    >>> p = jnp.array([1.0, 1.0])
    >>> steadax.apply_updates(p, opt.update(jnp.array([3.0, -0.5]), opt.init(p), p)[0])
    Array([0.9, 1.1], dtype=float32)
  """
  if learning_rate is not None:
    check_schedule_or_scalar("adafactor", "learning_rate", learning_rate)
  check_nonnegative("adafactor", "decay_rate", decay_rate)
  if clipping_threshold is not None:
    check_positive("adafactor", "clipping_threshold", clipping_threshold)
  if momentum is not None:
    check_range("adafactor", "momentum", momentum, 0.0, 1.0)
  if weight_decay_rate is not None and not callable(weight_decay_rate):
    check_nonnegative("adafactor", "weight_decay_rate", weight_decay_rate)
  check_nonnegative("adafactor", "eps", eps)
  txs = [scale_by_factored_rms(factored, decay_rate, decay_offset, min_dim_size_to_factor, eps)]
  if clipping_threshold is not None:
    txs.append(clip_by_block_rms(clipping_threshold))
  if learning_rate is not None:
    txs.append(scale_by_learning_rate(learning_rate, flip_sign=False))
  if multiply_by_parameter_scale:
    txs.append(scale_by_param_block_rms())
  if momentum is not None:
    txs.append(ema(momentum, debias=False, accumulator_dtype=dtype_momentum))
  if weight_decay_rate is not None:
    txs.append(add_decayed_weights(weight_decay_rate, mask=weight_decay_mask))
  txs.append(scale(-1))
  return chain(*txs)
