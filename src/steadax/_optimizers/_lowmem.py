"""Low-memory Adam: bfloat16 moments with stochastic rounding, and 8-bit block-quantized moments.

See ``steadax.transforms.scale_by_adam_lowmem`` and ``scale_by_adam_8bit`` for the details and
references, and docs/optimizers.md ("Low-memory states") for measured bytes per parameter.
"""

from typing import Any

import jax.numpy as jnp
from jax.typing import ArrayLike, DTypeLike

from .._core._checks import check_nonnegative, check_schedule_or_scalar
from .._core._combine import Chain, chain
from .._core._types import MaskOrFn, ScalarOrSchedule
from .._core._docs import shared_args
from ..transforms._adam_8bit import scale_by_adam_8bit
from ..transforms._decay import add_decayed_weights
from ..transforms._lowmem import scale_by_adam_lowmem
from ..transforms._scaling import scale_by_learning_rate

__all__ = ["adam_lowmem", "adam8bit", "adamw8bit"]


def _check(owner: str, learning_rate: Any, weight_decay: Any) -> None:
  check_schedule_or_scalar(owner, "learning_rate", learning_rate)
  if not callable(weight_decay):
    check_nonnegative(owner, "weight_decay", weight_decay)


@shared_args
def adam_lowmem(
    learning_rate: ScalarOrSchedule,
    b1: ArrayLike = 0.9,
    b2: ArrayLike = 0.999,
    eps: ArrayLike = 1e-8,
    eps_root: ArrayLike = 0.0,
    weight_decay: ScalarOrSchedule = 0.0,
    mask: MaskOrFn = None,
    *,
    mu_dtype: DTypeLike | None = jnp.bfloat16,
    nu_dtype: DTypeLike = jnp.bfloat16,
    rounding: str = "stochastic",
    seed: int = 0,
) -> Chain:
  """Adam(W) whose moments are stored in bfloat16 with stochastic rounding (4 bytes per parameter).

  ``chain(scale_by_adam_lowmem(...), add_decayed_weights(weight_decay, mask),
  scale_by_learning_rate(lr))``; with ``weight_decay=0`` it is Adam, otherwise AdamW.

  Args:
    learning_rate: <shared>
    b1: <shared>
    b2: <shared>
    eps: <shared>
    eps_root: <shared>
    weight_decay: <shared>
    mask: <shared>
    mu_dtype: <shared>
    nu_dtype: dtype of the second moment.
    rounding: ``"stochastic"`` (unbiased) or ``"nearest"`` (as ``adam(mu_dtype=...)``).
    seed: salt of the rounding dither.

  Returns:
    The optimizer; its first state is ``ScaleByAdamState(count, mu, nu)``.

  References:
    Gupta et al., "Deep Learning with Limited Numerical Precision", ICML 2015;
    Zamirai et al., "Revisiting BFloat16 Training", arXiv:2010.06192, 2020.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> opt = steadax.adam_lowmem(0.1)
    >>> p = jnp.array([1.0])
    >>> steadax.apply_updates(p, opt.update(jnp.array([3.0]), opt.init(p), p)[0])
    Array([0.9], dtype=float32)
  """
  _check("adam_lowmem", learning_rate, weight_decay)
  return chain(
      scale_by_adam_lowmem(b1, b2, eps, eps_root, mu_dtype=mu_dtype, nu_dtype=nu_dtype,
                           rounding=rounding, seed=seed),
      add_decayed_weights(weight_decay, mask),
      scale_by_learning_rate(learning_rate),
  )


def _adam_8bit_chain(owner: str, learning_rate: Any, b1: Any, b2: Any, eps: Any, eps_root: Any,
                     weight_decay: Any, mask: Any, block_size: int, min_8bit_size: int) -> Chain:
  """``adam8bit``'s and ``adamw8bit``'s chain (they differ in the default weight decay only)."""
  _check(owner, learning_rate, weight_decay)
  return chain(
      scale_by_adam_8bit(b1, b2, eps, eps_root, block_size=block_size, min_8bit_size=min_8bit_size),
      add_decayed_weights(weight_decay, mask),
      scale_by_learning_rate(learning_rate),
  )


@shared_args
def adam8bit(
    learning_rate: ScalarOrSchedule,
    b1: ArrayLike = 0.9,
    b2: ArrayLike = 0.999,
    eps: ArrayLike = 1e-8,
    eps_root: ArrayLike = 0.0,
    weight_decay: ScalarOrSchedule = 0.0,
    mask: MaskOrFn = None,
    *,
    block_size: int = 256,
    min_8bit_size: int = 4096,
) -> Chain:
  """Adam(W) with 8-bit block-quantized moments (about 2 bytes per parameter; Dettmers et al. 2022).

  ``chain(scale_by_adam_8bit(...), add_decayed_weights(weight_decay, mask),
  scale_by_learning_rate(lr))``.

  Args:
    learning_rate: <shared>
    b1: <shared>
    b2: <shared>
    eps: <shared>
    eps_root: <shared>
    weight_decay: <shared>
    mask: <shared>
    block_size: elements per quantization block.
    min_8bit_size: tensors with fewer elements keep full-precision moments.

  Returns:
    The optimizer; its first state is ``ScaleByAdam8bitState(count, mu, nu)``.

  References:
    Dettmers et al., "8-bit Optimizers via Block-wise Quantization", ICLR 2022.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> opt = steadax.adam8bit(0.1, min_8bit_size=1)
    >>> p = jnp.ones(4)
    >>> steadax.apply_updates(p, opt.update(jnp.full(4, 3.0), opt.init(p), p)[0])
    Array([0.9, 0.9, 0.9, 0.9], dtype=float32)
  """
  return _adam_8bit_chain("adam8bit", learning_rate, b1, b2, eps, eps_root, weight_decay, mask,
                          block_size, min_8bit_size)


@shared_args
def adamw8bit(
    learning_rate: ScalarOrSchedule,
    b1: ArrayLike = 0.9,
    b2: ArrayLike = 0.999,
    eps: ArrayLike = 1e-8,
    eps_root: ArrayLike = 0.0,
    weight_decay: ScalarOrSchedule = 1e-4,
    mask: MaskOrFn = None,
    *,
    block_size: int = 256,
    min_8bit_size: int = 4096,
) -> Chain:
  """AdamW with 8-bit block-quantized moments: ``adam8bit`` with decoupled weight decay on.

  bitsandbytes' and torchao's name (``AdamW8bit``) for the same optimizer: ``chain(
  scale_by_adam_8bit(...), add_decayed_weights(weight_decay, mask), scale_by_learning_rate(lr))``,
  so the update is ``-lr * (adam_direction + weight_decay * params)`` as ``adamw``'s (Loshchilov &
  Hutter's decoupled decay, scaled by the learning rate), with the moments held as ``adam8bit``
  holds them (the same ``ScaleByAdam8bitState``). The default ``weight_decay`` is ``adamw``'s
  (1e-4, Optax's); bitsandbytes and torchao default to 1e-2.

  Args:
    learning_rate: <shared>
    b1: <shared>
    b2: <shared>
    eps: <shared>
    eps_root: <shared>
    weight_decay: <shared>
    mask: <shared>
    block_size: elements per quantization block.
    min_8bit_size: tensors with fewer elements keep full-precision moments.

  Returns:
    The optimizer; its first state is ``ScaleByAdam8bitState(count, mu, nu)``.

  References:
    Dettmers et al., "8-bit Optimizers via Block-wise Quantization", ICLR 2022; Loshchilov &
    Hutter, "Decoupled Weight Decay Regularization", ICLR 2019.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> opt = steadax.adamw8bit(0.1, weight_decay=0.5, mask={"w": True, "b": False})
    >>> p = {"w": jnp.ones(2), "b": jnp.ones(2)}
    >>> g = {"w": jnp.full(2, 3.0), "b": jnp.full(2, 3.0)}
    >>> updates, _ = opt.update(g, opt.init(p), p)
    >>> updates["w"], updates["b"]
    (Array([-0.15, -0.15], dtype=float32), Array([-0.1, -0.1], dtype=float32))
  """
  return _adam_8bit_chain("adamw8bit", learning_rate, b1, b2, eps, eps_root, weight_decay, mask,
                          block_size, min_8bit_size)
