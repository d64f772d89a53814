"""PSGD-Kron: SGD with momentum preconditioned by a Kronecker-factored whitening preconditioner.

See ``steadax.transforms.scale_by_psgd_kron`` for the maths and references.
"""

from collections.abc import Callable
from typing import Any
from jax.typing import ArrayLike, DTypeLike
import jax

from .._core._checks import check_nonnegative, check_schedule_or_scalar
from .._core._combine import Chain, chain
from .._core._types import MaskOrFn, Params, ScalarOrSchedule
from .._core._docs import shared_args
from ..transforms._decay import add_decayed_weights
from ..transforms._psgd_kron import scale_by_psgd_kron
from ..transforms._axes import WeightDimensionNumbers
from ..transforms._runner import MatrixExecution
from ..transforms._scaling import scale_by_learning_rate

__all__ = ["psgd_kron"]


@shared_args
def psgd_kron(
    learning_rate: ScalarOrSchedule,
    b1: ArrayLike = 0.9,
    weight_decay: ScalarOrSchedule = 0.0,
    mask: MaskOrFn = None,
    *,
    preconditioner_update_probability: ScalarOrSchedule | None = None,
    max_size_triangular: int = 8192,
    min_ndim_triangular: int = 2,
    preconditioner_lr: ArrayLike = 0.1,
    preconditioner_init_scale: ArrayLike = 1.0,
    mu_dtype: DTypeLike | None = None,
    preconditioner_dtype: DTypeLike | None = None,
    key: jax.Array | int | None = 0,
    weight_dimension_numbers: WeightDimensionNumbers | Params | Callable[[Params], Params | None] | None = None,
    execution: MatrixExecution = MatrixExecution(),
) -> Chain:
  """PSGD-Kron (Li 2018; the ``kron`` variant): momentum whitened by a Kronecker preconditioner.

  ``chain(scale_by_psgd_kron(...), add_decayed_weights(weight_decay, mask),
  scale_by_learning_rate(lr))``. The preconditioned update has RMS at most 1, so learning rates are
  on Adam's scale (the reference suggests 1e-3 to 3e-3) and weight decay lower than Adam's.

  Args:
    learning_rate: <shared>
    b1: momentum decay.
    weight_decay: <shared>
    mask: <shared>
    preconditioner_update_probability: a probability or a schedule; None anneals from 1 to 0.03
      (``psgd_update_probability()``).
    max_size_triangular: largest dimension with a dense triangular factor (diagonal above).
    min_ndim_triangular: tensors with fewer dimensions get diagonal factors only.
    preconditioner_lr: step size of the preconditioner fit.
    preconditioner_init_scale: scale of the initial (identity) preconditioner.
    mu_dtype: dtype of the momentum.
    preconditioner_dtype: dtype of the factors (default: at least float32).
    key: a ``jax.random.key``, raw key data or an integer seed.
    weight_dimension_numbers: <shared>
    execution: <shared>

  Returns:
    The optimizer; its first state is ``ScaleByPsgdKronState(count, rng_key, mu, preconditioner)``.

  References:
    Li, "Preconditioned Stochastic Gradient Descent", IEEE TNNLS 2018;
    Li, "Preconditioner on Matrix Lie Group for SGD", ICLR 2019.

  Example:
    >>> import jax, jax.numpy as jnp, steadax
    >>> opt = steadax.psgd_kron(0.1)
    >>> params = jnp.array([[1.0, -2.0], [0.5, 3.0]])
    >>> loss = lambda p: jnp.sum(p ** 2)
    >>> state = opt.init(params)
    >>> for _ in range(100):
    ...   updates, state = opt.update(jax.grad(loss)(params), state, params)
    ...   params = steadax.apply_updates(params, updates)
    >>> bool(loss(params) < 0.05)
    True
  """
  owner = "psgd_kron"
  check_schedule_or_scalar(owner, "learning_rate", learning_rate)
  if not callable(weight_decay):
    check_nonnegative(owner, "weight_decay", weight_decay)
  return chain(
      scale_by_psgd_kron(
          b1, preconditioner_update_probability, max_size_triangular, min_ndim_triangular,
          preconditioner_lr, preconditioner_init_scale, mu_dtype, preconditioner_dtype, key=key,
          weight_dimension_numbers=weight_dimension_numbers, execution=execution),
      add_decayed_weights(weight_decay, mask),
      scale_by_learning_rate(learning_rate),
  )
