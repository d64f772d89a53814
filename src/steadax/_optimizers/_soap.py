"""SOAP (Vyas et al. 2024): ``scale_by_soap``, decoupled weight decay and the learning rate."""

from collections.abc import Callable
from typing import Any
from jax.typing import ArrayLike, DTypeLike

from .._core._checks import check_nonnegative
from .._core._combine import Chain, chain
from .._core._types import MaskOrFn, Params, ScalarOrSchedule
from .._core._docs import shared_args
from ..transforms._decay import add_decayed_weights
from ..transforms._axes import WeightDimensionNumbers
from ..transforms._runner import MatrixExecution
from ..transforms._scaling import scale_by_learning_rate
from ..transforms._soap import scale_by_soap

__all__ = ["soap"]


@shared_args
def soap(
    learning_rate: ScalarOrSchedule,
    b1: ArrayLike = 0.95,
    b2: ArrayLike = 0.95,
    shampoo_beta: ArrayLike | None = None,
    eps: ArrayLike = 1e-8,
    precondition_frequency: int = 10,
    max_precond_dim: int = 10000,
    weight_decay: ScalarOrSchedule = 0.01,
    mask: MaskOrFn = None,
    mu_dtype: DTypeLike | None = None,
    *,
    nu_dtype: DTypeLike | None = None,
    statistics_dtype: DTypeLike | None = None,
    eigenbasis_dtype: DTypeLike | None = None,
    precondition_1d: bool = False,
    weight_dimension_numbers: WeightDimensionNumbers | Params | Callable[[Params], Params | None] | None = None,
    execution: MatrixExecution = MatrixExecution(),
) -> Chain:
  """SOAP: AdamW in the eigenbasis of Shampoo's preconditioner (Vyas et al. 2024).

  ``chain(scale_by_soap(...), add_decayed_weights(weight_decay, mask),
  scale_by_learning_rate(learning_rate))``; the defaults are the paper's (its reference
  implementation's ``lr=3e-3`` is a good start). See ``scale_by_soap`` for the algorithm and
  the deliberate differences from the reference implementation.

  Args:
    learning_rate: <shared>
    b1: Adam's first-moment decay.
    b2: Adam's second-moment decay.
    shampoo_beta: decay of the Shampoo statistics (default ``b2``).
    eps: Adam's epsilon.
    precondition_frequency: updates between eigenbasis refreshes.
    max_precond_dim: axes longer than this are not rotated.
    weight_decay: <shared>
    mask: where weight decay applies (tree of booleans or a callable).
    mu_dtype: <shared>
    nu_dtype: dtype of the second moment.
    statistics_dtype: dtype of the Shampoo statistics (default: at least float32).
    eigenbasis_dtype: dtype of the eigenbases (default: at least float32).
    precondition_1d: also rotate vectors.
    weight_dimension_numbers: <shared>
    execution: <shared>

  Returns:
    The optimizer; its state is ``(ScaleBySoapState, ..., ...)``.

  References:
    Vyas et al., "SOAP: Improving and Stabilizing Shampoo using Adam", ICLR 2025
    (arXiv:2409.11321).

  Example:
    >>> import jax, jax.numpy as jnp, steadax
    >>> opt = steadax.soap(0.1, weight_decay=0.0)
    >>> params = {"w": jnp.array([[1.0, -2.0], [0.5, 1.5]])}
    >>> loss = lambda p: jnp.sum(p["w"] ** 2)
    >>> state = opt.init(params)
    >>> for _ in range(20):
    ...   updates, state = opt.update(jax.grad(loss)(params), state, params)
    ...   params = steadax.apply_updates(params, updates)
    >>> bool(loss(params) < 1.0)
    True
  """
  if not callable(weight_decay):
    check_nonnegative("soap", "weight_decay", weight_decay)
  return chain(
      scale_by_soap(b1, b2, shampoo_beta, eps, precondition_frequency, max_precond_dim, mu_dtype,
                    nu_dtype=nu_dtype, statistics_dtype=statistics_dtype,
                    eigenbasis_dtype=eigenbasis_dtype, precondition_1d=precondition_1d,
                    weight_dimension_numbers=weight_dimension_numbers, execution=execution),
      add_decayed_weights(weight_decay, mask),
      scale_by_learning_rate(learning_rate),
  )
