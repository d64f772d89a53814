"""Shampoo (Gupta et al. 2018; Anil et al. 2020): ``scale_by_shampoo``, weight decay, learning rate."""

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
from ..transforms._shampoo import scale_by_shampoo

__all__ = ["shampoo"]


@shared_args
def shampoo(
    learning_rate: ScalarOrSchedule,
    b1: ArrayLike = 0.9,
    b2: ArrayLike = 0.999,
    eps: ArrayLike = 1e-8,
    matrix_eps: ArrayLike = 1e-6,
    block_size: int = 128,
    precondition_frequency: int = 10,
    weight_decay: ScalarOrSchedule = 0.0,
    mask: MaskOrFn = None,
    mu_dtype: DTypeLike | None = None,
    *,
    shampoo_beta: ArrayLike | None = None,
    graft_type: str = "adam",
    exponent_override: int | None = None,
    nu_dtype: DTypeLike | None = None,
    statistics_dtype: DTypeLike | None = None,
    preconditioner_dtype: DTypeLike | None = None,
    weight_dimension_numbers: WeightDimensionNumbers | Params | Callable[[Params], Params | None] | None = None,
    execution: MatrixExecution = MatrixExecution(),
) -> Chain:
  """Shampoo with blocking and Adam/SGD grafting (Gupta et al. 2018; Anil et al. 2020).

  ``chain(scale_by_shampoo(...), add_decayed_weights(weight_decay, mask),
  scale_by_learning_rate(learning_rate))``. With the default Adam grafting every block steps with
  Adam's step length along Shampoo's direction, so Adam's learning rates carry over.

  Args:
    learning_rate: <shared>
    b1: first-moment decay.
    b2: Adam's second-moment decay (grafting, vectors).
    eps: Adam's epsilon.
    matrix_eps: regulariser of the inverse roots, relative to the largest eigenvalue.
    block_size: axes longer than this are split into blocks.
    precondition_frequency: updates between inverse-root recomputations.
    weight_decay: <shared>
    mask: where weight decay applies (tree of booleans or a callable).
    mu_dtype: <shared>
    shampoo_beta: decay of the statistics (default ``b2``; ``1.0`` sums them).
    graft_type: ``"adam"``, ``"sgd"`` or ``"none"``.
    exponent_override: the inverse root's exponent (default twice the number of preconditioned axes).
    nu_dtype: dtype of the second moment.
    statistics_dtype: dtype of the statistics (default: at least float32).
    preconditioner_dtype: dtype of the inverse roots (default: at least float32).
    weight_dimension_numbers: <shared>
    execution: <shared>

  Returns:
    The optimizer; its state is ``(ScaleByShampooState, ..., ...)``.

  References:
    Gupta, Koren & Singer, "Shampoo: Preconditioned Stochastic Tensor Optimization", ICML 2018.
    Anil et al., "Scalable Second Order Optimization for Deep Learning", arXiv:2002.09018, 2020.

  Example:
    >>> import jax, jax.numpy as jnp, steadax
    >>> opt = steadax.shampoo(0.1)
    >>> params = {"w": jnp.array([[1.0, -2.0], [0.5, 1.5]]), "b": jnp.array([1.0])}
    >>> loss = lambda p: jnp.sum(p["w"] ** 2) + jnp.sum(p["b"] ** 2)
    >>> state = opt.init(params)
    >>> for _ in range(20):
    ...   updates, state = opt.update(jax.grad(loss)(params), state, params)
    ...   params = steadax.apply_updates(params, updates)
    >>> bool(loss(params) < 1.0)
    True
  """
  if not callable(weight_decay):
    check_nonnegative("shampoo", "weight_decay", weight_decay)
  return chain(
      scale_by_shampoo(b1, b2, eps, matrix_eps, block_size, precondition_frequency, shampoo_beta,
                       mu_dtype, graft_type=graft_type, exponent_override=exponent_override,
                       nu_dtype=nu_dtype, statistics_dtype=statistics_dtype,
                       preconditioner_dtype=preconditioner_dtype,
                       weight_dimension_numbers=weight_dimension_numbers, execution=execution),
      add_decayed_weights(weight_decay, mask),
      scale_by_learning_rate(learning_rate),
  )
