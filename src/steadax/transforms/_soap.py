"""SOAP: Adam in the eigenbasis of Shampoo's preconditioner (Vyas et al. 2024, Algorithm 3).

``scale_by_soap`` gives the algorithm. Differences from the reference implementation, all deliberate:

* eigenbases are recomputed with an exact ``eigh`` (in the compute dtype: at least float32) every
  ``precondition_frequency`` steps, rather than one power-iteration step with a QR decomposition;
  ``eigh``'s eigenvalues are sorted, so the second moment stays aligned with the eigenvalue order;
* Adam's ``eps`` is added to the bias-corrected ``sqrt(v_hat)`` (Optax's form), so that with a
  fixed basis SOAP is exactly ``scale_by_adam`` on rotated gradients;
* as in the reference, the first update only initialises the statistics and eigenbases and
  returns zeros (the gradient is never projected onto a basis computed from itself), and Adam's
  bias correction counts from the second update.
"""

import functools
from collections.abc import Callable
from typing import Any, ClassVar, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike, DTypeLike

from .._core._transformation import Transformation
from .._core._checks import check_decay_below_one, check_nonnegative, check_positive_int
from .._core._docs import shared_args
from .._core._leafwise import Scalars
from .._core._module import hyper_field, static_field
from .._core._policy import accumulator_dtype, compute_dtype, hyper, safe_increment, zero_count
from .._core._roles import COUNTER, OTHER, accumulator, declared_roles, role_zeros, state_roles
from .._core._types import ArrayTree, Params, Updates
from ._adam import one_minus_pow
from ._axes import WeightDimensionNumbers
from ._kron import axis_statistic, conj_t, eigenbasis, mode_product
from ._moments import abs_sq
from ._runner import MatrixExecution, init_matrices, plans_of, refresh_cond, run_matrices

__all__ = ["ScaleBySoapState", "scale_by_soap"]


@state_roles(count=COUNTER, mu=accumulator("mu_dtype"), nu=accumulator("nu_dtype", real=True),
             statistics=OTHER, eigenbases=OTHER)
class ScaleBySoapState(NamedTuple):
  """State of ``scale_by_soap``.

  Attributes:
    count: int32 number of updates (the first one only initialises the eigenbases).
    mu: Adam's first moment, in the parameters' own basis.
    nu: Adam's second moment, in the eigenbasis (real).
    statistics: per parameter, a tuple with one ``(d, d)`` matrix ``EMA(G_(k) G_(k)^H)`` per axis
      (shape ``(0, 0)`` for axes that are not preconditioned); with dimension numbers one per
      matrix axis, batch axes leading (``(L, m, m)`` and ``(L, n, n)`` for ``(L, m, n)`` layers).
    eigenbases: per parameter, the matching tuple of eigenvector matrices (columns by decreasing
      eigenvalue). For a matrix, ``eigenbases[0]`` is ``Q_L`` and ``eigenbases[1]`` is
      ``conj(Q_R)`` (the eigenvectors of ``G^T conj(G)``; the same as ``Q_R`` for real parameters).
  """

  count: jax.Array
  mu: Updates
  nu: Updates
  statistics: ArrayTree
  eigenbases: ArrayTree


def rotate(x: jax.Array, axes: tuple[int, ...], bases: tuple, adjoint: bool) -> jax.Array:
  """``x`` with each axis of ``axes`` multiplied by its basis (``Q^H`` if ``adjoint``)."""
  for axis, q in zip(axes, bases):
    x = mode_product(x, conj_t(q) if adjoint else q, axis)
  return x


class ScaleBySoap(Transformation):
  name = "scale_by_soap"
  State = ScaleBySoapState
  cpu_chunks: ClassVar[tuple] = ("bytes", 512 * 1024)
  b1: Any = hyper_field(0.95, check=check_decay_below_one)
  b2: Any = hyper_field(0.95, check=check_decay_below_one)
  shampoo_beta: Any = hyper_field(None, check=check_decay_below_one)
  eps: Any = hyper_field(1e-08, check=check_nonnegative)
  precondition_frequency: int = static_field(default=10, check=check_positive_int)
  max_precond_dim: int = static_field(default=10000, check=check_positive_int)
  mu_dtype: Any = static_field(default=None)
  nu_dtype: Any = static_field(default=None)
  statistics_dtype: Any = static_field(default=None)
  eigenbasis_dtype: Any = static_field(default=None)
  precondition_1d: bool = static_field(default=False)
  weight_dimension_numbers: Any = static_field(default=None)
  execution: MatrixExecution = static_field(default=MatrixExecution())

  def stat_shapes(self, shape):
    axes = self.plan(shape)
    return tuple((d, d) if a in axes else None for a, d in enumerate(shape))

  def plan(self, shape):
    """The axes of one matrix or tensor of ``shape`` that get an eigenbasis."""
    if len(shape) == 0 or int(np.prod(shape)) == 0 or (len(shape) == 1 and not self.precondition_1d):
      return ()
    return tuple(a for a, d in enumerate(shape) if 1 < d <= self.max_precond_dim)

  def init_fn(self, params):
    return init_adam_kron(self, params, "eigenbasis_dtype")

  def matrix_step(self, axes, k, shared, g, m, v, *matrices):
    # Vyas et al. 2024, Algorithm 3, with S_k the statistics and Q_k their eigenbases.
    first, refresh = shared
    stats, bases = matrices[:len(axes)], matrices[len(axes):]
    m_new = k.b1 * m + (1 - k.b1) * g
    v_new = k.b2 * v + (1 - k.b2) * abs_sq(rotate(g, axes, bases, adjoint=True))
    m_hat = rotate(m_new, axes, bases, adjoint=True) / k.c1
    direction = rotate(m_hat / (jnp.sqrt(v_new / k.c2) + k.eps), axes, bases, adjoint=False)
    # The first update only sets up the statistics and eigenbases.
    out = jnp.where(first, jnp.zeros_like(direction), direction)
    m_new, v_new = jnp.where(first, m, m_new), jnp.where(first, v, v_new)
    stats = tuple(k.beta * s + (1 - k.beta) * axis_statistic(g, axis) for axis, s in zip(axes, stats))
    if axes:
      bases = refresh_cond(refresh, lambda: tuple(eigenbasis(s) for s in stats), bases)
    return (out, m_new, v_new, *stats, *bases)

  def update_fn(self, updates, state, params=None, **extra_args):
    count = safe_increment(state.count)
    adam_count = jnp.maximum(count - 1, 1)

    @functools.cache  # once per real compute dtype
    def scalars(dt):
      return adam_scalars(self, dt, adam_count)

    # A new basis after the update that first sees the statistics, then every f updates after it.
    return update_adam_kron(self, updates, state, params, count, scalars,
                            (count == 1, (count - 1) % self.precondition_frequency == 0))


def adam_scalars(tx: Any, dt: Any, count: jax.Array, **more: Any) -> Scalars:
  """Adam's scalars of SOAP and Shampoo in the real compute dtype ``dt`` (``beta``: the statistics'
  decay, ``b2`` by default), bias corrections at ``count``."""
  b2 = hyper(tx.b2, dt)
  return Scalars(b1=hyper(tx.b1, dt), b2=b2, c1=one_minus_pow(tx.b1, count, dt),
                 c2=one_minus_pow(tx.b2, count, dt), eps=hyper(tx.eps, dt),
                 beta=b2 if tx.shampoo_beta is None else hyper(tx.shampoo_beta, dt), **more)


def init_adam_kron(tx: Any, params: Any, second: str) -> Any:
  """The state of SOAP or Shampoo: count, Adam's moments, zero statistics and identity matrices
  (eigenbases, inverse roots; dtype field ``second``) of the shapes ``tx.stat_shapes`` gives per
  axis of one matrix (None: a ``(0, 0)`` placeholder)."""
  roles = declared_roles(tx.State)

  def matrices(dtype_field, fill):
    def make(x, shape):
      dt = accumulator_dtype(compute_dtype(x.dtype), getattr(tx, dtype_field))  # at least float32
      return tuple(jnp.zeros((0, 0), dt) if s is None else fill(s, dt) for s in tx.stat_shapes(shape))
    return init_matrices(tx, params, make)

  return tx.State(zero_count(), role_zeros(params, roles["mu"], tx), role_zeros(params, roles["nu"], tx),
                  matrices("statistics_dtype", jnp.zeros),
                  matrices(second, lambda s, dt: jnp.broadcast_to(jnp.eye(s[-1], dtype=dt), s)))


def update_adam_kron(tx: Any, updates: Any, state: Any, params: Any, count: jax.Array, scalars: Any,
                     shared: tuple) -> tuple:
  """SOAP's or Shampoo's update: ``tx.matrix_step`` on every matrix through the runner."""
  views, plans = plans_of(tx, updates, tx.plan)
  out, mu, nu, first, second = run_matrices(tx, tx.matrix_step, updates, params, views=views, plans=plans,
                                            mirrored=state[1:3], matrices=state[3:5], scalars=scalars,
                                            shared=shared)
  return out, tx.State(count, mu, nu, first, second)


@shared_args
def scale_by_soap(
    b1: ArrayLike = 0.95,
    b2: ArrayLike = 0.95,
    shampoo_beta: ArrayLike | None = None,
    eps: ArrayLike = 1e-8,
    precondition_frequency: int = 10,
    max_precond_dim: int = 10000,
    mu_dtype: DTypeLike | None = None,
    *,
    nu_dtype: DTypeLike | None = None,
    statistics_dtype: DTypeLike | None = None,
    eigenbasis_dtype: DTypeLike | None = None,
    precondition_1d: bool = False,
    weight_dimension_numbers: WeightDimensionNumbers | Params | Callable[[Params], Params | None] | None = None,
    execution: MatrixExecution = MatrixExecution(),
) -> Transformation:
  """Adam run in the eigenbasis of Shampoo's preconditioner (SOAP).

  Per parameter and axis ``k``: ``S_k = beta S_k + (1 - beta) G_(k) G_(k)^H`` and its eigenvectors ``Q_k``,
  recomputed (``eigh``, under ``lax.cond``) after the first update and every ``precondition_frequency``
  updates after that. The update is Adam's on ``G' = G x_k Q_k^H`` (second moment in the rotated space,
  first in the parameter's), rotated back with ``x_k Q_k``; the first update returns zeros. Axes longer
  than ``max_precond_dim`` and, unless ``precondition_1d``, vectors keep the identity (plain Adam). By
  default a parameter is one tensor, a statistic per axis (a stacked ``(L, m, n)`` weight gets ``(L, L)``).

  Args:
    b1: <shared>
    b2: <shared>
    shampoo_beta: decay of the statistics ``S_k`` (default: ``b2``).
    eps: <shared>
    precondition_frequency: updates between eigenbasis refreshes (a Python int).
    max_precond_dim: axes longer than this keep the identity basis.
    mu_dtype: <shared>
    nu_dtype: <shared>
    statistics_dtype: dtype of ``S_k`` (default: the parameter's dtype promoted to at least float32).
    eigenbasis_dtype: dtype of ``Q_k`` (same default).
    precondition_1d: also rotate vectors (one ``d x d`` statistic each).
    weight_dimension_numbers: <shared>
    execution: <shared>

  Returns:
    A transformation with ``ScaleBySoapState(count, mu, nu, statistics, eigenbases)``.

  References:
    Vyas et al., "SOAP: Improving and Stabilizing Shampoo using Adam", ICLR 2025 (arXiv:2409.11321), Algorithm 3.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> tx = steadax.scale_by_soap()
    >>> g = jnp.array([[1.0, 2.0], [3.0, 4.0]])
    >>> u, state = tx.update(g, tx.init(g))  # the first update only sets up the eigenbases
    >>> u
    Array([[0., 0.],
           [0., 0.]], dtype=float32)
    >>> [q.shape for q in state.eigenbases]
    [(2, 2), (2, 2)]
  """
  return ScaleBySoap(b1, b2, shampoo_beta, eps, precondition_frequency, max_precond_dim, mu_dtype, nu_dtype,
                     statistics_dtype, eigenbasis_dtype, precondition_1d, weight_dimension_numbers, execution)
