"""PSGD with a Kronecker-factored preconditioner fitted on the Lie group of triangular matrices.

For a tensor ``G`` with dimensions ``d_1 ... d_k``, the preconditioner is ``P = P_1 (x) ... (x) P_k``
with ``P_i = Q_i^H Q_i``; ``Q_i`` is upper triangular (dense) for moderate dimensions and diagonal
otherwise. PSGD fits ``P`` to the criterion ``E[h^H P h + v^H P^{-1} v]`` with ``v`` a standard normal
probe and ``h`` the (momentum) gradient, whose minimiser ``P = E[h h^H]^{-1/2}`` whitens the
gradients: ``P E[h h^H] P = I``. Each update moves ``Q_i`` along the group,
``Q_i <- Q_i - lr / ||grad_i|| * triu(A_i A_i^H - B_i B_i^H) Q_i`` with ``A = Q G`` and
``B = Q^{-H} V`` contracted over the other dimensions, so ``Q_i`` stays triangular and invertible.

This is the ``kron`` variant of psgd_jax / kron_torch (``scale_by_psgd_kron`` gives its steps); the
factors are also balanced now and then (``_balance``).

References:
  Li, "Preconditioned Stochastic Gradient Descent", IEEE TNNLS 29(5), 2018 (criterion eq. 9-10,
  Kronecker-product preconditioners §IV.B).
  Li, "Preconditioner on Matrix Lie Group for SGD", ICLR 2019 (the triangular-group update, eq. 7).
"""

import functools
import math
from collections.abc import Callable
from typing import Any, ClassVar, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike, DTypeLike

from .._core._transformation import Transformation
from .._core._checks import check_nonnegative, check_nonnegative_int, check_positive, check_range
from .._core._docs import shared_args
from .._core._module import Module, hyper_field, static_field
from .._core._leafwise import Scalars
from .._core._policy import accumulator_dtype, compute_dtype, hyper, real_dtype, safe_increment, zero_count
from .._core._roles import COUNTER, OTHER, accumulator, role_zeros, state_roles
from .._core._tree import is_none, l2_norm
from .._core._types import ArrayTree, Params, ScalarOrSchedule, Schedule, Updates
from ._adam import one_minus_pow
from ._axes import WeightDimensionNumbers
from ._kron import mode_product, upper_solve_h
from ._matrix import constrain, distribution
from ._moments import abs_sq
from ._noise import _typed_key
from ._runner import MatrixExecution, core_shape, init_matrices, plans_of, refresh_cond, run_matrices
from ._scaling import value_at

__all__ = ["ScaleByPsgdKronState", "scale_by_psgd_kron", "psgd_update_probability"]


@state_roles(count=COUNTER, rng_key=OTHER, mu=accumulator("mu_dtype"), preconditioner=OTHER)
class ScaleByPsgdKronState(NamedTuple):
  """State of ``scale_by_psgd_kron``.

  Attributes:
    count: int32 step count.
    rng_key: typed PRNG key (probes, update and balancing draws).
    mu: momentum of the gradients.
    preconditioner: per parameter, a tuple with one factor per dimension: an upper-triangular
      ``(d, d)`` matrix or a ``(d,)`` diagonal (scalars get one ``(1,)`` diagonal); with dimension
      numbers one per matrix axis, batch axes leading (``(L, m, m)`` and ``(L, n, n)``).
  """

  count: jax.Array
  rng_key: jax.Array
  mu: Updates
  preconditioner: ArrayTree


# At b1 = 1 the bias correction divides by zero.
_check_b1 = lambda owner, name, value: check_range(owner, name, value, 0.0, 1.0, high_open=True)
_check_probability = lambda owner, name, value: check_range(owner, name, value, 0.0, 1.0)


class _AnnealedProbability(Module):
  """``clip(max_prob * exp(-decay * (count - flat_start)), min_prob, max_prob)`` in float32."""

  max_prob: Any = hyper_field(1.0, check=_check_probability)
  min_prob: Any = hyper_field(0.03, check=_check_probability)
  decay: Any = hyper_field(0.001, check=check_nonnegative)
  flat_start: Any = hyper_field(500)

  def __call__(self, count: ArrayLike) -> jax.Array:
    f32 = np.dtype(jnp.float32)
    steps = jnp.asarray(count).astype(f32) - hyper(self.flat_start, f32)  # the int32 count as a float exponent
    value = hyper(self.max_prob, f32) * jnp.exp(-hyper(self.decay, f32) * steps)
    return jnp.clip(value, hyper(self.min_prob, f32), hyper(self.max_prob, f32))


@shared_args
def psgd_update_probability(
    max_prob: float = 1.0, min_prob: float = 0.03, decay: float = 0.001, flat_start: int = 500,
) -> Schedule:
  """The preconditioner update probability schedule of PSGD-Kron: flat, then exponential decay.

  PSGD needs frequent preconditioner updates early on and few once the preconditioner has settled:
  the probability is ``max_prob`` for ``flat_start`` steps, then decays as ``exp(-decay * t)`` to
  ``min_prob``. A pytree whose numbers are leaves (new values do not recompile).

  Args:
    max_prob: the initial probability.
    min_prob: the floor.
    decay: the exponential decay rate per step.
    flat_start: steps before the decay starts.

  Returns:
    A schedule: a callable of the int32 count returning a float32 probability.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> sched = steadax.psgd_update_probability()
    >>> float(sched(jnp.asarray(0))), round(float(sched(jnp.asarray(10_000))), 2)
    (1.0, 0.03)
  """
  return _AnnealedProbability(max_prob, min_prob, decay, flat_start)


def _dense_dims(shape: tuple[int, ...], max_size: int, min_ndim: int) -> tuple:
  """Which axes get a dense (triangular) factor; ``()`` when none does (all diagonal)."""
  dense = tuple(len(shape) >= min_ndim and 1 < d <= max_size for d in shape)
  return dense if any(dense) else ()


def _diag_product(d: jax.Array, x: jax.Array, axis: int) -> jax.Array:
  return x * d.reshape([-1 if i == axis else 1 for i in range(x.ndim)])


def _unfold(x: jax.Array, axis: int) -> jax.Array:
  return jnp.moveaxis(x, axis, 0).reshape(x.shape[axis], -1)


def _mode_solve_h(q: jax.Array, x: jax.Array, axis: int) -> jax.Array:
  """``Q^{-H}`` applied to dimension ``axis`` of ``x`` (a triangular solve, as cheap as a matmul)."""
  moved = jnp.moveaxis(x, axis, 0)
  return jnp.moveaxis(upper_solve_h(q, moved.reshape(x.shape[axis], -1)).reshape(moved.shape), 0, axis)


def _norm_lower_bound(h: jax.Array, tiny: Any) -> jax.Array:
  """A cheap lower bound of the spectral norm of a Hermitian matrix: ``||H c|| / ||c||`` for its
  column ``c`` of largest norm (one power-iteration step from the best coordinate vector)."""
  scale = jnp.max(jnp.abs(h))
  hn = h / jnp.where(scale > 0, scale, jnp.ones_like(scale))
  column = jnp.take(hn, jnp.argmax(jnp.sum(abs_sq(hn), axis=0)), axis=1)
  column = column / jnp.maximum(jnp.linalg.norm(column), tiny)
  return scale * jnp.linalg.norm(hn @ column)


def _fit_factors(factors, dense, g, v, lr, tiny):
  """One Lie-group step of every factor towards whitening ``g`` (probe ``v``): Li 2019, eq. 7 on
  the group of triangular matrices (real step sizes and diagonals scale complex tensors)."""
  a, b = g, v
  for axis, (q, is_dense) in enumerate(zip(factors, dense)):
    a = mode_product(a, q, axis) if is_dense else _diag_product(q, a, axis)
    b = _mode_solve_h(q, b, axis) if is_dense else _diag_product(1 / q, b, axis)
  new = []
  for axis, (q, is_dense) in enumerate(zip(factors, dense)):
    if is_dense:
      a_mat, b_mat = _unfold(a, axis), _unfold(b, axis)
      t1, t2 = a_mat @ jnp.conj(a_mat).T, b_mat @ jnp.conj(b_mat).T
      step = lr / jnp.maximum(_norm_lower_bound(t1 + t2, tiny), tiny)
      new.append(q - step * (jnp.triu(t1 - t2) @ q))
    else:
      others = tuple(i for i in range(a.ndim) if i != axis)
      t1, t2 = jnp.sum(abs_sq(a), axis=others), jnp.sum(abs_sq(b), axis=others)
      new.append(q - lr / jnp.maximum(jnp.max(t1 + t2), tiny) * (t1 - t2) * q)
  return tuple(new)


def _balance(factors, do_balance):
  """Rescale the factors to equal largest entries (their product is unchanged): keeps them away
  from under- and overflow in low precision."""
  if len(factors) < 2:
    return factors
  norms = [jnp.max(jnp.abs(q)) for q in factors]
  norms = [jnp.where(n > 0, n, jnp.ones_like(n)) for n in norms]
  log_mean = sum(jnp.log(n) for n in norms) / len(norms)
  return tuple(q * jnp.where(do_balance, jnp.exp(log_mean) / n, jnp.ones_like(n)) for q, n in zip(factors, norms))


def _precondition(factors, dense, g):
  for axis, (q, is_dense) in enumerate(zip(factors, dense)):
    g = mode_product(g, jnp.conj(q).T @ q, axis) if is_dense else _diag_product(q * q, g, axis)
  return g


def _check_key(owner: str, name: str, key: Any) -> None:
  try:
    _typed_key(owner, key)
  except TypeError as error:
    if str(error).startswith(owner):
      raise
    raise TypeError(f"{owner}: {name} must be a jax.random.key, raw uint32[2] key data or an integer "
                    f"seed, got {key!r}.") from error


class ScaleByPsgdKron(Transformation):
  name = "scale_by_psgd_kron"
  State = ScaleByPsgdKronState
  cpu_chunks: ClassVar[tuple | None] = None  # one batch per group: chunks did not pay (docs/performance.md)
  b1: Any = hyper_field(0.9, check=_check_b1)
  # None is the annealed psgd_update_probability() (the factory fills it in); schedules pass.
  preconditioner_update_probability: Any = hyper_field(None, check=_check_probability)
  max_size_triangular: int = static_field(default=8192, check=check_nonnegative_int)
  min_ndim_triangular: int = static_field(default=2, check=check_nonnegative_int)
  preconditioner_lr: Any = hyper_field(default=0.1, check=check_positive)
  preconditioner_init_scale: Any = hyper_field(default=1.0, check=check_positive)
  mu_dtype: Any = static_field(default=None)
  preconditioner_dtype: Any = static_field(default=None)
  key: Any = hyper_field(default=0, check=_check_key)
  weight_dimension_numbers: Any = static_field(default=None)
  execution: MatrixExecution = static_field(default=MatrixExecution())

  def _dense(self, shape):
    return _dense_dims(tuple(shape) or (1,), self.max_size_triangular, self.min_ndim_triangular)

  def init_fn(self, params):
    def make(x, shape):
      shape = shape or (1,)  # a scalar has one (1,) diagonal factor
      fdt = accumulator_dtype(compute_dtype(x.dtype), self.preconditioner_dtype)
      # The scale is spread evenly over the factors (in float32 at least, then cast to the factors'
      # dtype: preconditioner_dtype may be 16-bit); diagonal factors are real.
      wide = compute_dtype(real_dtype(fdt))
      scale = hyper(self.preconditioner_init_scale, wide) ** (1.0 / len(shape))
      dense = self._dense(shape) or (False,) * len(shape)
      return tuple((scale * jnp.eye(d, dtype=wide)).astype(fdt) if is_dense else
                   (scale * jnp.ones([d], wide)).astype(real_dtype(fdt)) for d, is_dense in zip(shape, dense))

    return ScaleByPsgdKronState(
        count=zero_count(), rng_key=_typed_key(self.name, self.key),
        mu=role_zeros(params, accumulator("mu_dtype"), self),
        preconditioner=init_matrices(self, params, make))

  def update_fn(self, updates, state, params=None, **extra_args):
    count = safe_increment(state.count)
    # Every random draw of a step comes from three calls (a split, two uniforms, the probes): on a
    # CPU each call is a kernel that takes about half a second to compile.
    rng_key, k_draws, k_probe = jax.random.split(state.rng_key, 3)
    f32 = np.dtype(jnp.float32)
    draws = jax.random.uniform(k_draws, (2,), f32)
    do_update = draws[0] < hyper(value_at(self.preconditioner_update_probability, state.count), f32)
    views, plans = plans_of(self, updates, self._dense)
    treedef = jax.tree_util.tree_structure(updates, is_leaf=is_none)

    @functools.cache  # once per real compute dtype
    def scalars(rdt):
      return Scalars(b1=hyper(self.b1, rdt), c1=one_minus_pow(self.b1, count, rdt),
                     lr=hyper(self.preconditioner_lr, rdt), tiny=np.asarray(jnp.finfo(rdt).tiny, rdt),
                     damping=np.asarray(np.sqrt(np.finfo(np.float32).eps), rdt))

    def momentum(k, g, m, held):
      m = k.b1 * m + (1 - k.b1) * g
      return g, m, m / k.c1

    # The bias-corrected momentum stays in the compute dtype (``held``'s: of the gradient, momentum
    # and factors) through the fit, the preconditioner and the whole-tree trust region below.
    held = jax.tree.map(lambda g, m, fs: None if g is None else jnp.zeros(g.shape, compute_dtype(
        g.dtype, m.dtype, fs[0].dtype)), updates, state.mu, state.preconditioner, is_leaf=is_none)
    _, mu, h = self.leafwise(momentum, updates, state.mu, held, params=params, scalars=scalars)
    h = jax.tree.map(lambda g, x: x if g is not None and jnp.issubdtype(g.dtype, jnp.inexact) else None, updates, h,
                     is_leaf=is_none)
    run = lambda step, factors, **kw: run_matrices(  # noqa: E731
        self, step, h, None, views=views, plans=plans, matrices=(factors,), scalars=scalars, **kw)
    fit = lambda: run(self._fit, state.preconditioner, shared=(draws[1] < np.float32(0.01),),  # noqa: E731
                      extra=_probes(k_probe, treedef.flatten_up_to(h), views, plans))[1]
    factors = refresh_cond(do_update, fit, state.preconditioner)
    pre = run(self._precondition, factors)[0]
    # Trust region of the reference implementation: global RMS at most 1, then entries in [-1, 1].
    norm = l2_norm(pre)
    limit = np.asarray(math.sqrt(max(sum(x.size for x in jax.tree.leaves(pre)), 1)), norm.dtype)
    shrink = limit / jnp.maximum(norm, limit)

    def clip(k, g, pre):  # g only gives the update's dtype
      u = pre * k.shrink
      return u / jnp.maximum(jnp.abs(u), 1)

    (out,) = self.leafwise(clip, updates, reads=(pre,), scalars=lambda dt: Scalars(shrink=shrink))
    return out, ScaleByPsgdKronState(count=count, rng_key=rng_key, mu=mu, preconditioner=factors)

  @staticmethod
  def _fit(dense, k, shared, h, *factors):
    """One Lie-group step of the factors of one matrix (its probe last): ``h`` is its momentum."""
    *factors, probe = factors
    x, probe = h.reshape(h.shape or (1,)), probe.reshape(h.shape or (1,))
    # A little noise keeps A A^H invertible when the momentum is (nearly) rank deficient.
    damped = x + k.damping * jnp.mean(jnp.abs(x)) * probe
    return (h, *_fit_factors(_balance(tuple(factors), shared[0]), dense or (False,) * x.ndim, damped, probe,
                             k.lr, k.tiny))

  @staticmethod
  def _precondition(dense, k, shared, h, *factors):
    x = h.reshape(h.shape or (1,))
    return (_precondition(factors, dense or (False,) * x.ndim, x).reshape(h.shape), *factors)


def _along(dist: Any, n: int) -> Any:
  """Sharded over ``dist``'s axes along the first axis (of length ``n``), or replicated where
  ``dist`` does not divide ``n``."""
  return dist.sharding(dist.spec_entry()) if n % dist.size == 0 else dist.sharding()


def _probes(key: jax.Array, hs: list, views: list, plans: list) -> Callable:
  """``extra(indices, rows, dist)`` of the fit: the probes of a group, stacked.

  The probes of a step are one normal draw per real compute dtype, laid out class after class
  (matrices of one shape, dtype and dense axes, in the order they first appear), each class in tree
  order and a stacked weight's matrices in order along its batch axes: grouped or not, stacked or
  given as a list of its layers, a matrix draws the same numbers. A complex probe takes two real
  entries (real and imaginary parts, each of variance 1/2).
  """
  classes: dict = {}
  for i, x in enumerate(hs):
    if x is not None and x.size:
      classes.setdefault((core_shape(x, views[i]), np.dtype(x.dtype), plans[i]), []).append(i)
  at, sizes = {}, {}
  for i in (i for members in classes.values() for i in members):
    rdt = real_dtype(hs[i].dtype)
    at[i] = (rdt, sizes.get(rdt, 0))
    sizes[rdt] = sizes.get(rdt, 0) + hs[i].size * (2 if jnp.iscomplexobj(hs[i]) else 1)

  # Under a mesh the draws are generated divided across the devices that divide the dense groups
  # (threefry is partitionable: the numbers do not depend on the layout); each group's block then
  # takes its owner layout, or is gathered for a group computed whole.
  divided = {distribution(hs[i]) for i in at if plans[i]} - {None}
  draw_dist = divided.pop() if len(divided) == 1 else None

  @functools.cache
  def draws():
    keys = jax.random.split(key, len(sizes)) if len(sizes) > 1 else [key]
    out = {}
    for k, (rdt, n) in zip(keys, sizes.items()):
      if draw_dist is None:
        out[rdt] = jax.random.normal(k, (n,), rdt)
      elif draw_dist.auto:  # a constraint: the partitioner divides the draw itself
        out[rdt] = constrain(jax.random.normal(k, (n,), rdt), _along(draw_dist, n), True)
      else:
        out[rdt] = jax.random.normal(k, (n,), rdt, out_sharding=_along(draw_dist, n))
    return out

  def extra(indices, rows, dist):
    x, width = hs[indices[0]], 2 if jnp.iscomplexobj(hs[indices[0]]) else 1
    size, (rdt, start) = x.size * width, at[indices[0]]
    if all(at[j][1] == start + t * size for t, j in enumerate(indices)):
      block = jax.lax.slice_in_dim(draws()[rdt], start, start + len(indices) * size)
    else:
      block = jnp.concatenate([jax.lax.slice_in_dim(draws()[rdt], at[j][1], at[j][1] + size) for j in indices])
    shape = (len(indices) * rows, *core_shape(x, views[indices[0]]), *(2,) * (width - 1))
    if draw_dist is None:
      block = block.reshape(shape)
    else:  # the group's block in its owner layout, or whole
      place = lambda n, d=draw_dist: _along(d, n) if dist == d else d.sharding()  # noqa: E731
      block = constrain(block, place(block.shape[0]), draw_dist.auto)
      block = (constrain(block.reshape(shape), place(shape[0]), True) if draw_dist.auto else
               block.reshape(shape, out_sharding=place(shape[0])))
    if width == 2:
      block = block * np.asarray(np.sqrt(0.5), rdt)
      block = jax.lax.complex(block[..., 0], block[..., 1])
    return [block]

  return extra


@shared_args
def scale_by_psgd_kron(
    b1: ArrayLike = 0.9,
    preconditioner_update_probability: ScalarOrSchedule | None = None,
    max_size_triangular: int = 8192,
    min_ndim_triangular: int = 2,
    preconditioner_lr: ArrayLike = 0.1,
    preconditioner_init_scale: ArrayLike = 1.0,
    mu_dtype: DTypeLike | None = None,
    preconditioner_dtype: DTypeLike | None = None,
    *,
    key: jax.Array | int | None = 0,
    weight_dimension_numbers: WeightDimensionNumbers | Params | Callable[[Params], Params | None] | None = None,
    execution: MatrixExecution = MatrixExecution(),
) -> Transformation:
  """Preconditions updates with PSGD's Kronecker-factored whitening preconditioner (``kron``).

  Keeps a momentum ``m`` (bias-corrected) and, per parameter, factors ``Q_i`` with
  ``P = (x)_i Q_i^H Q_i``; with probability ``preconditioner_update_probability`` a step fits the
  factors to whiten ``m`` (one Lie-group step, see the module notes), then returns ``P m`` through
  the trust region of the reference (global RMS <= 1, then entries in [-1, 1]). Dimensions of size 1 or above
  ``max_size_triangular``, and all dimensions of tensors with fewer than ``min_ndim_triangular``
  dimensions, get diagonal factors. By default a parameter is one tensor with a factor per
  dimension (a stacked ``(L, m, n)`` weight gets an ``(L, L)`` factor).

  Args:
    b1: momentum decay (0 disables momentum).
    preconditioner_update_probability: a probability or a schedule of the count; None is
      ``psgd_update_probability()`` (1 for 500 steps, then decaying to 0.03).
    max_size_triangular: largest dimension with a dense triangular factor.
    min_ndim_triangular: tensors with fewer dimensions get only diagonal factors (vectors by default).
    preconditioner_lr: step size of the factors' Lie-group update.
    preconditioner_init_scale: the initial preconditioner is this times the identity.
    mu_dtype: <shared>
    preconditioner_dtype: dtype of the factors (default: the computation dtype, at least float32).
    key: a ``jax.random.key``, raw key data or an integer seed for the probes and the draws.
    weight_dimension_numbers: <shared>
    execution: <shared>

  Returns:
    A transformation with ``ScaleByPsgdKronState(count, rng_key, mu, preconditioner)``.

  References:
    Li, "Preconditioned Stochastic Gradient Descent", IEEE TNNLS 2018;
    Li, "Preconditioner on Matrix Lie Group for SGD", ICLR 2019.

  Example:
    >>> import jax, jax.numpy as jnp, steadax
    >>> tx = steadax.scale_by_psgd_kron(key=jax.random.key(0))
    >>> state = tx.init({"w": jnp.zeros((3, 2)), "b": jnp.zeros(3)})
    >>> [q.shape for q in state.preconditioner["w"]], [q.shape for q in state.preconditioner["b"]]
    ([(3, 3), (2, 2)], [(3,)])
  """
  if preconditioner_update_probability is None:
    preconditioner_update_probability = psgd_update_probability()
  return ScaleByPsgdKron(b1, preconditioner_update_probability, max_size_triangular, min_ndim_triangular,
                         preconditioner_lr, preconditioner_init_scale, mu_dtype, preconditioner_dtype, key,
                         weight_dimension_numbers, execution)
