"""Shampoo: one preconditioner per tensor axis (Gupta et al. 2018), blocked and grafted (Anil et al. 2020).

For a matrix gradient ``G`` Shampoo accumulates ``L = sum G G^H`` and ``R = sum G^H G`` and steps
along ``L^{-1/4} G R^{-1/4}`` (Gupta et al. 2018, Algorithm 1); an order-``k`` tensor has one
statistic per axis and the root ``1/(2k)`` (Algorithm 2). Anil et al. 2020 make it practical:

* statistics are an exponential moving average (``shampoo_beta``; ``1.0`` gives the original sum);
* inverse roots are recomputed every ``precondition_frequency`` steps, here by ``eigh`` in the
  compute dtype (at least float32) with a regulariser relative to the largest eigenvalue;
* axes longer than ``block_size`` are cut into blocks, each preconditioned on its own (§3.3);
* grafting: per block, the Shampoo direction takes the norm of Adam's (or SGD's) step (§3.2).

Momentum here is applied to the gradient before preconditioning (Adam's bias-corrected first
moment), so with Adam grafting the step of every block has exactly Adam's norm. Vectors, scalars
and empty parameters get Adam's diagonal step.
"""

import functools
from collections.abc import Callable
from typing import Any, ClassVar, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike, DTypeLike

from .._core._transformation import Transformation
from .._core._checks import (check_decay_below_one, check_nonnegative, check_one_of, check_positive, check_positive_int,
                             check_range)
from .._core._module import hyper_field, static_field
from .._core._policy import hyper, safe_increment
from .._core._roles import COUNTER, OTHER, accumulator, state_roles
from .._core._docs import shared_args
from .._core._types import ArrayTree, Params, Updates
from ._axes import WeightDimensionNumbers
from ._kron import axis_statistic, block_sizes, from_blocks, inverse_root, mode_product, num_blocks, to_blocks
from ._moments import abs_sq
from ._runner import MatrixExecution, refresh_cond
from ._soap import adam_scalars, init_adam_kron, update_adam_kron

__all__ = ["ScaleByShampooState", "scale_by_shampoo"]

_GRAFTS = ("adam", "sgd", "none")


@state_roles(count=COUNTER, mu=accumulator("mu_dtype"), nu=accumulator("nu_dtype", real=True),
             statistics=OTHER, preconditioners=OTHER)
class ScaleByShampooState(NamedTuple):
  """State of ``scale_by_shampoo``.

  Attributes:
    count: int32 number of updates.
    mu: first moment of the gradient (param-shaped).
    nu: Adam's diagonal second moment (param-shaped, real): the grafting norm and the step of
      vectors and scalars.
    statistics: per parameter, a tuple with one ``(num_blocks, b, b)`` array per axis (shape
      ``(0, 0)`` for axes that are not preconditioned); with dimension numbers one per matrix
      axis, batch axes leading (``(L, num_blocks, b, b)`` for ``(L, m, n)`` layers).
    preconditioners: per parameter, the matching inverse roots.
  """

  count: jax.Array
  mu: Updates
  nu: Updates
  statistics: ArrayTree
  preconditioners: ArrayTree


def _block_norms(x: jax.Array) -> jax.Array:
  """The Frobenius norm of each block of ``(num_blocks, ...)`` (real, kept broadcastable)."""
  return jnp.sqrt(jnp.sum(abs_sq(x), axis=tuple(range(1, x.ndim)), keepdims=True))


class ScaleByShampoo(Transformation):
  name = "scale_by_shampoo"
  State = ScaleByShampooState
  cpu_chunks: ClassVar[tuple] = ("bytes", 512 * 1024)
  b1: Any = hyper_field(0.9, check=check_decay_below_one)
  b2: Any = hyper_field(0.999, check=check_decay_below_one)
  eps: Any = hyper_field(1e-08, check=check_nonnegative)
  matrix_eps: Any = hyper_field(1e-06, check=check_nonnegative)
  block_size: int = static_field(default=128, check=check_positive_int)
  precondition_frequency: int = static_field(default=10, check=check_positive_int)
  # 1.0 is allowed: the summed statistics of Gupta et al.
  shampoo_beta: Any = hyper_field(default=None, check=lambda owner, name, v: check_range(owner, name, v, 0.0, 1.0))
  mu_dtype: Any = static_field(default=None)
  graft_type: str = static_field(default="adam", check=check_one_of(*_GRAFTS))
  exponent_override: Any = hyper_field(default=None, check=check_positive)
  nu_dtype: Any = static_field(default=None)
  statistics_dtype: Any = static_field(default=None)
  preconditioner_dtype: Any = static_field(default=None)
  weight_dimension_numbers: Any = static_field(default=None)
  execution: MatrixExecution = static_field(default=MatrixExecution())

  def plan(self, shape):
    """``(block sizes, preconditioned axes)`` of one matrix or tensor (no length-1 axes), or ``()``
    for a vector, scalar or empty tensor, which gets Adam's diagonal step."""
    if len(shape) < 2 or int(np.prod(shape)) == 0:
      return ()
    sizes = block_sizes(shape, self.block_size)
    axes = tuple(a for a, b in enumerate(sizes) if b > 1)
    return (sizes, axes) if axes else ()

  def stat_shapes(self, shape):
    plan = self.plan(shape)
    if not plan:
      return (None,) * len(shape)
    n = num_blocks(shape, plan[0])
    return tuple((n, b, b) if a in plan[1] else None for a, b in enumerate(plan[0]))

  def init_fn(self, params):
    return init_adam_kron(self, params, "preconditioner_dtype")

  def matrix_step(self, plan, k, shared, g, m, v, *matrices):
    m = k.b1 * m + (1 - k.b1) * g
    v = k.b2 * v + (1 - k.b2) * abs_sq(g)
    m_hat = m / k.c1
    adam = m_hat / (jnp.sqrt(v / k.c2) + k.eps)
    if not plan:  # vectors, scalars, empty parameters: Adam's diagonal step
      return adam, m, v
    # Gupta et al. 2018, Algorithm 2, per block (Anil et al. 2020, §3.3).
    (sizes, axes), blocks = plan, jax.vmap
    stats, precs = matrices[:len(axes)], matrices[len(axes):]
    g_blocks = to_blocks(g, sizes)
    stats = tuple(k.beta * s + k.weight * blocks(lambda b, a=a: axis_statistic(b, a))(g_blocks)
                  for a, s in zip(axes, stats))
    exponent = 2 * len(axes) if k.exponent is None else k.exponent
    precs = refresh_cond(shared[0], lambda: tuple(inverse_root(s, exponent, k.matrix_eps) for s in stats), precs)
    direction = to_blocks(m_hat, sizes)
    for a, q in zip(axes, precs):
      direction = blocks(lambda x, q, a=a: mode_product(x, q, a))(direction, q)
    if self.graft_type != "none":
      # Grafting (Anil et al. 2020, §3.2): each block takes the norm of Adam's (SGD's) step.
      have, want = _block_norms(direction), _block_norms(to_blocks(adam if self.graft_type == "adam" else m_hat,
                                                                   sizes))
      direction = direction * jnp.where(have > 0, want / jnp.where(have > 0, have, jnp.ones_like(have)),
                                        jnp.zeros_like(have))
    return (from_blocks(direction, tuple(g.shape), sizes), m, v, *stats, *precs)

  def update_fn(self, updates, state, params=None, **extra_args):
    count = safe_increment(state.count)

    @functools.cache  # once per real compute dtype
    def scalars(dt):
      beta = hyper(self.b2 if self.shampoo_beta is None else self.shampoo_beta, dt)
      # beta == 1 is the original (summed) statistics of Gupta et al.
      return adam_scalars(self, dt, count, weight=jnp.where(beta < 1, 1 - beta, jnp.ones_like(beta)),
                          matrix_eps=hyper(self.matrix_eps, dt), exponent=None if self.exponent_override is None
                          else hyper(self.exponent_override, dt))

    return update_adam_kron(self, updates, state, params, count, scalars,
                            ((count - 1) % self.precondition_frequency == 0,))


@shared_args
def scale_by_shampoo(
    b1: ArrayLike = 0.9,
    b2: ArrayLike = 0.999,
    eps: ArrayLike = 1e-8,
    matrix_eps: ArrayLike = 1e-6,
    block_size: int = 128,
    precondition_frequency: int = 10,
    shampoo_beta: ArrayLike | None = None,
    mu_dtype: DTypeLike | None = None,
    *,
    graft_type: str = "adam",
    exponent_override: int | None = None,
    nu_dtype: DTypeLike | None = None,
    statistics_dtype: DTypeLike | None = None,
    preconditioner_dtype: DTypeLike | None = None,
    weight_dimension_numbers: WeightDimensionNumbers | Params | Callable[[Params], Params | None] | None = None,
    execution: MatrixExecution = MatrixExecution(),
) -> Transformation:
  """Shampoo's Kronecker-factored preconditioning with blocking and grafting.

  Per block and axis ``k``: ``S_k = beta S_k + (1 - beta) G_(k) G_(k)^H``, and ``P_k = (S_k +
  matrix_eps * lambda_max I)^{-1/e}`` recomputed (``lax.cond``) every ``precondition_frequency`` updates
  from the first; the update is ``m_hat x_k P_k`` (``m_hat``: Adam's bias-corrected first moment) grafted
  per block. By default a parameter is one tensor (a stacked weight's layer axis gets a preconditioner).

  Args:
    b1: <shared>
    b2: decay of Adam's second moment, in [0, 1) (grafting, and the diagonal step of vectors).
    eps: <shared>
    matrix_eps: regulariser of the inverse roots, relative to the largest eigenvalue.
    block_size: axes longer than this are split into blocks of this length (a Python int).
    precondition_frequency: updates between inverse-root recomputations (a Python int).
    shampoo_beta: decay of the statistics (default ``b2``; ``1.0`` sums them as in Gupta et al.).
    mu_dtype: <shared>
    graft_type: the norm each block's step takes: Adam's (``"adam"``), ``m_hat``'s (``"sgd"``) or its own (``"none"``).
    exponent_override: the root ``e`` (default: twice the number of preconditioned axes).
    nu_dtype: <shared>
    statistics_dtype: dtype of the statistics (default: the parameter's dtype, at least float32).
    preconditioner_dtype: dtype of the inverse roots (same default).
    weight_dimension_numbers: <shared>
    execution: <shared>

  Returns:
    A transformation with ``ScaleByShampooState(count, mu, nu, statistics, preconditioners)``.

  References:
    Gupta, Koren & Singer, "Shampoo: Preconditioned Stochastic Tensor Optimization", ICML 2018
    (Algorithms 1-2); Anil et al., "Scalable Second Order Optimization for Deep Learning",
    arXiv:2002.09018, 2020 (§3.2 grafting, §3.3 blocking).

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> state = steadax.scale_by_shampoo(block_size=2).init(jnp.zeros((3, 2)))
    >>> [s.shape for s in state.statistics]  # two row blocks (the second zero-padded)
    [(2, 2, 2), (2, 2, 2)]
  """
  return ScaleByShampoo(b1, b2, eps, matrix_eps, block_size, precondition_frequency, shampoo_beta, mu_dtype,
                        graft_type, exponent_override, nu_dtype, statistics_dtype, preconditioner_dtype,
                        weight_dimension_numbers, execution)
