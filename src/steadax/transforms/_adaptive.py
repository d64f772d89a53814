"""Adaptive preconditioners that are not Adam: Adadelta, NovoGrad (layer-wise) and SM3 (low memory).

References:
  Zeiler, "ADADELTA: An Adaptive Learning Rate Method", 2012 (arXiv:1212.5701, Algorithm 1).
  Ginsburg et al., "Stochastic Gradient Methods with Layer-wise Adaptive Moments for Training of Deep
  Networks", 2019 (arXiv:1905.11286, Algorithm 1; NovoGrad).
  Anil et al., "Memory-Efficient Adaptive Optimization", NeurIPS 2019 (arXiv:1901.11150; SM3-II,
  Algorithm 2).
"""

import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike, DTypeLike

from .._core._transformation import Transformation
from .._core._checks import check_decay_below_one, check_nonnegative, check_range
from .._core._leafwise import Scalars, place_kept_axes, place_like
from .._core._module import derived, derived_field, hyper_field, static_field
from .._core._policy import accumulator_dtype, safe_increment, zero_count
from .._core._roles import COUNTER, OTHER, accumulator, role_zeros, state_roles
from .._core._tree import tree_map
from .._core._docs import shared_args
from ._moments import abs_sq, moving_average
from .._core._types import Params, ScalarOrSchedule, Updates

__all__ = [
    "ScaleByAdaDeltaState",
    "ScaleByNovogradState",
    "ScaleBySM3State",
    "scale_by_adadelta",
    "scale_by_novograd",
    "scale_by_sm3",
]


@state_roles(e_g=accumulator(real=True), e_x=accumulator(real=True))
class ScaleByAdaDeltaState(NamedTuple):
  """State of ``scale_by_adadelta``: running averages of squared gradients and squared updates.

  Attributes:
    e_g: running average of the squared gradients.
    e_x: running average of the squared updates.
  """

  e_g: Params
  e_x: Params


# nu holds one real scalar per leaf (not a tree mirroring the parameters' shapes): OTHER.
@state_roles(count=COUNTER, mu=accumulator("mu_dtype"), nu=OTHER)
class ScaleByNovogradState(NamedTuple):
  """State of ``scale_by_novograd``: int32 count, first moment, one second moment per leaf.

  Attributes:
    count: the number of updates so far (int32, saturating at its maximum).
    mu: the first moment.
    nu: the second moment, one scalar per leaf.
  """

  count: jax.Array
  mu: Updates
  nu: Updates


# mu holds, per leaf, a list of cover vectors (not the parameters' shapes): OTHER.
@state_roles(mu=OTHER, nu=accumulator())
class ScaleBySM3State(NamedTuple):
  """State of ``scale_by_sm3``: per leaf, one accumulator vector per axis (``mu``) and momentum.

  Attributes:
    mu: per leaf, one accumulator vector per axis.
    nu: the momentum.
  """

  mu: Updates
  nu: Updates


class ScaleByAdaDelta(Transformation):
  name = "scale_by_adadelta"
  elementwise = True
  State = ScaleByAdaDeltaState
  rho: Any = hyper_field(0.9, check=check_decay_below_one)
  eps: Any = hyper_field(1e-06, check=lambda owner, name, value: check_range(owner, name, value, 0.0, np.inf,
                                                                              low_open=True))
  one_minus_rho: Any = derived_field(lambda t: 1 - t.rho)

  def update_fn(self, updates, state, params=None, **extra_args):
    def leaf(k, g, e_g, e_x):
      e_g = moving_average(k.rho, e_g, abs_sq(g), k.one_minus_rho)
      # The units of the step match the parameters' (eq. 14): RMS of past steps over RMS of gradients.
      step = jnp.sqrt(e_x + k.eps) / jnp.sqrt(e_g + k.eps) * g
      e_x = moving_average(k.rho, e_x, abs_sq(step), k.one_minus_rho)
      return step, e_g, e_x

    scalars = Scalars(rho=self.rho, one_minus_rho=derived(self, "one_minus_rho"), eps=self.eps)
    out, e_g, e_x = self.leafwise(leaf, updates, state.e_g, state.e_x, params=params, scalars=scalars)
    return out, ScaleByAdaDeltaState(e_g=e_g, e_x=e_x)


@shared_args
def scale_by_adadelta(rho: ArrayLike = 0.9, eps: ArrayLike = 1e-6) -> Transformation:
  """Rescales updates by Adadelta's ratio of past step sizes to past gradient sizes.

  ``E[g^2] = rho E[g^2] + (1 - rho) g^2``, ``u = sqrt(E[dx^2] + eps) / sqrt(E[g^2] + eps) * g``,
  ``E[dx^2] = rho E[dx^2] + (1 - rho) u^2``.

  Args:
    rho: decay of both running averages.
    eps: added inside both square roots (it also sets the size of the first steps).

  Returns:
    A transformation with ``ScaleByAdaDeltaState(e_g, e_x)``.

  References:
    Zeiler, "ADADELTA: An Adaptive Learning Rate Method", 2012 (arXiv:1212.5701), Algorithm 1.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> tx = steadax.scale_by_adadelta(rho=0.0, eps=1.0)
    >>> tx.update(jnp.array([0.0]), tx.init(jnp.zeros(1)))[0]
    Array([0.], dtype=float32)
  """
  return ScaleByAdaDelta(rho, eps)


class ScaleByNovograd(Transformation):
  name = "scale_by_novograd"
  State = ScaleByNovogradState
  b1: Any = hyper_field(0.9, check=check_decay_below_one)
  b2: Any = hyper_field(0.25, check=check_decay_below_one)
  eps: Any = hyper_field(1e-08, check=check_nonnegative)
  eps_root: Any = hyper_field(0.0, check=check_nonnegative)
  weight_decay: Any = hyper_field(0.0, check=check_nonnegative)
  mu_dtype: Any = static_field(default=None)
  one_minus_b2: Any = derived_field(lambda t: 1 - t.b2)

  def init_fn(self, params):  # nu is one scalar per leaf: by hand (the roles check count and mu)
    nu = tree_map(lambda p: jnp.zeros([], accumulator_dtype(p.dtype, real=True)), params)
    return ScaleByNovogradState(count=zero_count(), mu=role_zeros(params, accumulator("mu_dtype"), self),
                                nu=nu)

  def update_fn(self, updates, state, params=None, **extra_args):
    if params is None:
      raise ValueError("scale_by_novograd: `params` must be passed to update() (for weight_decay).")
    count = safe_increment(state.count)
    scalars = Scalars(b1=self.b1, b2=self.b2, one_minus_b2=derived(self, "one_minus_b2"), eps=self.eps,
                      eps_root=self.eps_root, weight_decay=self.weight_decay)

    # Optax's structure: the first step and the others are the two branches of a lax.cond, for the
    # second moment and then for the first (XLA compiles each branch on its own).
    def nu_branch(first):
      def leaf(k, g, v):
        # One second moment per layer (leaf): the squared norm of its gradient (Algorithm 1).
        sq_norm = jnp.linalg.norm(g) ** 2
        return g, sq_norm if first else moving_average(k.b2, v, sq_norm, k.one_minus_b2)
      return lambda g, nu: self.leafwise(leaf, g, nu, scalars=scalars)[1]

    def mu_branch(first):
      def leaf(k, g, m, v, p):
        u = g / (jnp.sqrt(v + k.eps_root) + k.eps) + k.weight_decay * p
        m = u if first else k.b1 * m + u  # m starts from the normalised gradient
        return m, m
      return lambda g, p, mu, nu: self.leafwise(leaf, g, mu, params=p, reads=(nu, p), scalars=scalars)

    nu = jax.lax.cond(count == 1, nu_branch(True), nu_branch(False), updates, state.nu)
    out, mu = jax.lax.cond(count == 1, mu_branch(True), mu_branch(False), updates, params, state.mu, nu)
    return out, ScaleByNovogradState(count=count, mu=mu, nu=nu)


@shared_args
def scale_by_novograd(
    b1: ArrayLike = 0.9,
    b2: ArrayLike = 0.25,
    eps: ArrayLike = 1e-8,
    eps_root: ArrayLike = 0.0,
    weight_decay: ScalarOrSchedule | ArrayLike = 0.0,
    mu_dtype: DTypeLike | None = None,
) -> Transformation:
  """NovoGrad's layer-wise normalised momentum.

  Per leaf (layer): ``v = ||g||^2`` at the first step, then ``v = b2 v + (1 - b2) ||g||^2``;
  ``m = b1 m + g / (sqrt(v + eps_root) + eps) + weight_decay * params`` (``m`` starts from the
  normalised gradient). The update is ``m``. ``params`` must be passed to ``update``.

  Args:
    b1: momentum of the normalised gradients.
    b2: decay of the per-layer second moment.
    eps: <shared>
    eps_root: <shared>
    weight_decay: weight decay added inside the momentum (as in the paper).
    mu_dtype: dtype of the momentum (default: each parameter's dtype).

  Returns:
    A transformation with ``ScaleByNovogradState(count, mu, nu)``; ``nu`` holds one real scalar per
    leaf.

  References:
    Ginsburg et al., "Stochastic Gradient Methods with Layer-wise Adaptive Moments for Training of
    Deep Networks", 2019 (arXiv:1905.11286), Algorithm 1.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> tx = steadax.scale_by_novograd()
    >>> p = jnp.zeros(2)
    >>> tx.update(jnp.array([3.0, 4.0]), tx.init(p), p)[0]
    Array([0.6, 0.8], dtype=float32)
  """
  return ScaleByNovograd(b1, b2, eps, eps_root, weight_decay, mu_dtype=mu_dtype)


def _axis_view(vector: jax.Array, ndim: int, axis: int) -> jax.Array:
  """``vector`` reshaped to broadcast along ``axis`` of an ``ndim``-dimensional array."""
  shape = [1] * ndim
  shape[axis] = vector.shape[0]
  return jnp.reshape(vector, shape)


class ScaleBySM3(Transformation):
  name = "scale_by_sm3"
  State = ScaleBySM3State
  b1: Any = hyper_field(0.9, check=check_decay_below_one)
  b2: Any = hyper_field(1.0, check=lambda owner, name, value: check_range(owner, name, value, 0.0, 1.0))
  eps: Any = hyper_field(1e-08, check=check_nonnegative)
  one_minus_b1: Any = derived_field(lambda t: 1 - t.b1)
  # Optax's weight of the new squares: 1 - b2, or 1 for the sum of squares (b2 = 1).
  new_weight: Any = derived_field(
      lambda t: (1.0 if t.b2 == 1.0 else 1.0 - t.b2) if isinstance(t.b2, (float, np.floating))
      else jnp.where(t.b2 == 1.0, 1.0, 1.0 - t.b2))

  def init_fn(self, params):  # one vector per axis: by hand (the roles check nu)
    def covers(p):
      dtype = accumulator_dtype(p.dtype, real=True)
      # A scalar is its own (single) cover set; Optax keeps no accumulator for it and fails.
      if np.ndim(p) == 0:
        return [jnp.zeros([], dtype)]
      # Cover i lives on axis i: it takes that axis' sharding (a vector's single cover is the
      # parameter's own layout), which its update (a maximum over the other axes) has.
      return [place_kept_axes(p, jnp.zeros((n,), dtype), (i,)) for i, n in enumerate(np.shape(p))]

    return ScaleBySM3State(mu=tree_map(covers, params), nu=role_zeros(params, accumulator(), self))

  def update_fn(self, updates, state, params=None, **extra_args):
    def estimate(g, covers):
      """Each entry's old second moment: the minimum over the covers holding it (SM3-II, line 5)."""
      if g.ndim < 2:  # one cover set per entry: the accumulator is exact
        return covers[0]
      return functools.reduce(jnp.minimum, [_axis_view(c, g.ndim, i) for i, c in enumerate(covers)])

    def leaf(k, g, m, nu):
      # b2 = 1 is SM3's sum of squares (Adagrad-like), b2 < 1 an exponential average (line 6).
      nu = k.new_weight * abs_sq(g) + k.b2 * nu
      preconditioned = jnp.where(nu > 0, jax.lax.rsqrt(nu + k.eps), 0)
      m = moving_average(k.b1, m, g * preconditioned, k.one_minus_b1)
      return m, m, nu

    def new_covers(nu, covers):
      """Each cover keeps the maximum of the entries it holds (SM3-II, line 7)."""
      if nu.ndim < 2:
        return [nu]
      return [jnp.max(nu, axis=tuple(a for a in range(nu.ndim) if a != i), initial=0.0)
              for i in range(len(covers))]

    scalars = Scalars(b1=self.b1, one_minus_b1=derived(self, "one_minus_b1"), b2=self.b2, eps=self.eps,
                      new_weight=derived(self, "new_weight"))

    # The cover estimate goes through the primitive as a state tree in the covers' dtype (real):
    # it comes back as the new full estimate, already in the covers' dtype; rounding commutes
    # with the maximum, so the covers equal those reduced in the compute dtype.
    nu_hat = tree_map(estimate, updates, state.mu)
    out, nu, nu_new = self.leafwise(leaf, updates, state.nu, nu_hat, params=params, scalars=scalars)
    # The full estimates lead: each of their leaves meets its parameter's list of covers. (Leading
    # with the covers and `is_leaf=list` took a parameter tree that is itself a list for a leaf.)
    mu = jax.tree_util.tree_map(
        lambda v, covers: [place_like(c, n) for c, n in zip(covers, new_covers(v, covers))],
        nu_new, state.mu)
    return out, ScaleBySM3State(mu=mu, nu=nu)


@shared_args
def scale_by_sm3(b1: ArrayLike = 0.9, b2: ArrayLike = 1.0, eps: ArrayLike = 1e-8) -> Transformation:
  """Rescales updates by SM3's cover-set accumulators (Adagrad with sublinear memory).

  For an ``n x m`` leaf SM3 keeps ``n + m`` accumulators instead of ``n m``: each entry's
  second-moment estimate is the minimum over the accumulators of the rows and columns covering it,
  and each accumulator keeps the maximum of the estimates it covers. Vectors and scalars are their
  own covers (exact Adagrad). The preconditioned gradient is then averaged with momentum ``b1``.

  Args:
    b1: momentum of the preconditioned gradients (the update is the momentum).
    b2: 1 (the default) sums squared gradients as in the paper; below 1 the accumulators become
      exponential averages ``b2 acc + (1 - b2) g^2``.
    eps: added to the accumulator inside the inverse square root.

  Returns:
    A transformation with ``ScaleBySM3State(mu, nu)``: ``mu`` holds, per leaf, a list with one real
    vector per axis (one scalar for a scalar leaf), ``nu`` the momentum.

  References:
    Anil et al., "Memory-Efficient Adaptive Optimization", NeurIPS 2019 (arXiv:1901.11150), SM3-II.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> tx = steadax.scale_by_sm3()
    >>> [c.shape for c in tx.init(jnp.zeros((2, 3))).mu]
    [(2,), (3,)]
  """
  return ScaleBySM3(b1, b2, eps)
