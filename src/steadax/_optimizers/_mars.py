"""MARS (MARS-AdamW with the approximate, previous-gradient correction).

See ``steadax.transforms.scale_by_mars`` for the maths and the reference.
"""

from typing import Any
from jax.typing import ArrayLike, DTypeLike

from .._core._checks import check_nonnegative, check_schedule_or_scalar
from .._core._combine import Chain, chain
from .._core._types import MaskOrFn, ScalarOrSchedule
from .._core._docs import shared_args
from ..transforms._decay import add_decayed_weights
from ..transforms._mars import scale_by_mars
from ..transforms._scaling import scale_by_learning_rate

__all__ = ["mars"]


@shared_args
def mars(
    learning_rate: ScalarOrSchedule,
    b1: ArrayLike = 0.95,
    b2: ArrayLike = 0.99,
    gamma: ArrayLike = 0.025,
    eps: ArrayLike = 1e-8,
    weight_decay: ScalarOrSchedule = 0.0,
    mask: MaskOrFn = None,
    *,
    eps_root: ArrayLike = 0.0,
    max_norm: ArrayLike = 1.0,
    mu_dtype: DTypeLike | None = None,
    nu_dtype: DTypeLike | None = None,
) -> Chain:
  """MARS-AdamW (Yuan et al. 2024): AdamW on a variance-reduced, clipped gradient estimate.

  ``chain(scale_by_mars(...), add_decayed_weights(weight_decay, mask), scale_by_learning_rate(lr))``.
  The authors' code applies MARS to matrices and plain AdamW (other betas) to vectors by default;
  here every leaf gets MARS. For the split, ``partition`` the tree between ``mars`` and ``adamw``.

  Args:
    learning_rate: a scalar or a schedule (the paper uses 3e-3 for GPT-2 small with a cosine decay).
    b1: decay of the first moment and weight of the correction ``b1 / (1 - b1)``.
    b2: <shared>
    gamma: strength of the gradient correction.
    eps: <shared>
    weight_decay: <shared>
    mask: <shared>
    eps_root: <shared>
    max_norm: clipping threshold of the corrected gradient (None disables it).
    mu_dtype: <shared>
    nu_dtype: dtype of the second moment.

  Returns:
    The optimizer; its state is ``(ScaleByMarsState, ..., ...)`` as ``adamw``'s.

  References:
    Yuan et al., "MARS: Unleashing the Power of Variance Reduction for Training Large Models",
    arXiv:2411.10438, 2024 (Algorithm 2, MARS-AdamW; MARS-approx).

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> opt = steadax.mars(0.1)
    >>> p = jnp.array([1.0])
    >>> steadax.apply_updates(p, opt.update(jnp.array([0.5]), opt.init(p), p)[0])
    Array([0.9], dtype=float32)
  """
  owner = "mars"
  check_schedule_or_scalar(owner, "learning_rate", learning_rate)
  if not callable(weight_decay):
    check_nonnegative(owner, "weight_decay", weight_decay)
  return chain(
      scale_by_mars(b1, b2, gamma, eps, eps_root, max_norm=max_norm, mu_dtype=mu_dtype, nu_dtype=nu_dtype),
      add_decayed_weights(weight_decay, mask),
      scale_by_learning_rate(learning_rate),
  )
