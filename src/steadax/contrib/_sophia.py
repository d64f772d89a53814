"""Sophia (Liu et al., "Sophia: A Scalable Stochastic Second-order Optimizer for Language Model
Pre-training", ICLR 2024) with Hutchinson's estimator of the Hessian's diagonal.

Sophia divides the momentum by an EMA of a diagonal Hessian estimate ``h`` (refreshed every
``update_interval`` steps) and clips the result elementwise (Algorithm 3 of the paper):

    m = b1 m + (1 - b1) g,     u = clip(m_hat / max(gamma h, eps), clip_threshold),
    h = b2 h + (1 - b2) ĥ      (every ``update_interval`` steps, ĥ from ``hessian_diagonal_fn``).

The default estimator is Hutchinson's, ``ĥ = v ⊙ (H v)`` with Rademacher ``v`` (Bekas, Kokiopoulou &
Saad, 2007); it needs the objective: ``update(grads, state, params, obj_fn=loss_fn)``. For a complex
parameter ``z = x + iy`` it draws ``v = a + ib`` and returns ``Re(conj(v) (H v)) / 2``, an estimate
of the mean curvature of ``x`` and ``y``, so ``nu`` is real; for real parameters it is Optax's
estimate. The random signs are drawn in float32 (as Optax) and cast to each parameter's own dtype,
so mixed-precision trees work (Optax casts them to the lowest dtype and ``jax.jvp`` rejects the
tangents of the other leaves). The key is stored typed.
"""

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike, DTypeLike

from .._core._adapters import with_extra_args_support
from .._core._interface import GradientTransformation
from .._core._transformation import Transformation
from .._core._checks import check_nonnegative, check_positive, check_range
from .._core._combine import chain
from .._core._leafwise import Scalars, tree_reduce
from .._core._module import derived, derived_field, hyper_field, static_field
from .._core._policy import COUNTER_DTYPE, hyper, safe_increment, zero_count
from .._core._roles import COUNTER, INNER, OTHER, accumulator, state_roles
from .._core._tree import zeros_like
from .._core._types import OptState, ScalarOrSchedule, Updates
from .._core._docs import shared_args
from ..transforms._decay import add_decayed_weights
from ..transforms._noise import _typed_key
from ..transforms._scaling import scale_by_learning_rate
from ..transforms._moments import moving_average, one_minus_pow
from ._adopt import clip_modulus


__all__ = ["HutchinsonState", "SophiaState", "hutchinson_estimator_diag_hessian", "sophia"]


@state_roles(key=OTHER)
class HutchinsonState(NamedTuple):
  """State of ``hutchinson_estimator_diag_hessian``: the typed PRNG key.

  Attributes:
    key: the typed PRNG key of the next probe vector.
  """

  key: jax.Array


@state_roles(count=COUNTER, mu=accumulator("mu_dtype"), nu=accumulator(real=True), hessian_fn_state=INNER)
class SophiaState(NamedTuple):
  """State of ``sophia``'s scaling block (Optax's field names).

  Attributes:
    count: int32 number of updates so far.
    mu: the momentum.
    nu: the EMA of the Hessian diagonal estimates (real for complex parameters).
    hessian_fn_state: the state of ``hessian_diagonal_fn``.
  """

  count: jax.Array
  mu: Updates
  nu: Updates
  hessian_fn_state: OptState


class HutchinsonEstimator(Transformation):
  # Hessian-vector products (jax.jvp) need floating primals: an integer leaf is refused at init.
  requires_float = True
  name = "hutchinson_estimator_diag_hessian"
  State = HutchinsonState
  key: Any = hyper_field(0)

  def init_fn(self, params):
    return HutchinsonState(key=_typed_key(self.name, self.key))

  def update_fn(self, updates, state, params=None, **extra_args):
    obj_fn = extra_args.get("obj_fn")
    if params is None:
      raise ValueError(f"{self.name}: `params` must be passed to update() (the Hessian is taken there).")
    if obj_fn is None:
      raise ValueError(
          f"{self.name}: update() needs the objective: pass `obj_fn=loss_fn` (a function of the params "
          "returning a scalar), as in update(grads, state, params, obj_fn=loss_fn).")
    key, subkey = jax.random.split(state.key)
    leaves, treedef = jax.tree_util.tree_flatten(params)
    keys = jax.random.split(subkey, len(leaves))
    tangents = []
    for p, k in zip(leaves, keys):
      signs = jax.random.rademacher(k, np.shape(p), jnp.float32)
      if jnp.iscomplexobj(p):
        imag = jax.random.rademacher(jax.random.fold_in(k, 1), np.shape(p), jnp.float32)
        signs = jax.lax.complex(signs, imag)
      # jax.jvp needs tangents in the primal's dtype: the signs (exact in every dtype) are cast.
      tangents.append(signs.astype(p.dtype))
    tangents = treedef.unflatten(tangents)
    # jax.grad of a real function of z = x + iy is d/dx - i d/dy: the product with v (no conjugate)
    # is the real pairing <v, H v>.
    hvp = jax.jvp(jax.grad(obj_fn), (params,), (tangents,))[1]

    def leaf(k, h, v):
      # ĥ = v ⊙ (H v); for z = x + iy, Re(v (H v)) / 2 averages the curvatures of x and y. The
      # estimate is real; a complex parameter keeps it in its dtype with a zero imaginary part.
      if jnp.iscomplexobj(h):
        return jnp.real(h * v) / 2 + 0j
      return h * v

    out, = self.leafwise(leaf, hvp, params=params, reads=(tangents,))
    return out, HutchinsonState(key=key)


@shared_args
def hutchinson_estimator_diag_hessian(random_seed: jax.Array | None = None) -> Transformation:
  """Hutchinson's estimator of the Hessian's diagonal, ``v ⊙ (H v)`` with Rademacher ``v``.

  ``update`` ignores the incoming updates and returns the estimate (a tree like ``params``); it needs
  ``params`` and ``obj_fn`` (the scalar objective as a function of the params).

  Args:
    random_seed: a ``jax.random.key``, raw ``uint32[2]`` key data (``jax.random.PRNGKey``) or an
      integer seed; None uses key 0, as Optax.

  Returns:
    A transformation with ``HutchinsonState(key)`` (a typed key).

  References:
    Hutchinson, "A Stochastic Estimator of the Trace of the Influence Matrix for Laplacian Smoothing
    Splines", 1990; Bekas, Kokiopoulou & Saad, "An Estimator for the Diagonal of a Matrix", 2007.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> est = steadax.contrib.hutchinson_estimator_diag_hessian()
    >>> p = jnp.ones(3)
    >>> loss = lambda x: jnp.sum(jnp.array([1.0, 2.0, 3.0]) * x**2)  # Hessian diag(2, 4, 6)
    >>> est.update(p, est.init(p), p, obj_fn=loss)[0]  # exact for a diagonal Hessian
    Array([2., 4., 6.], dtype=float32)
  """
  key = 0 if random_seed is None else random_seed
  _typed_key("hutchinson_estimator_diag_hessian", key)
  return HutchinsonEstimator(key)


def _check_decay_open(owner: str, name: str, value: Any) -> None:
  check_range(owner, name, value, 0.0, 1.0, high_open=True)


def _check_interval(owner: str, name: str, value: Any) -> None:
  check_range(owner, name, value, 1.0, np.inf)


def _preconditioned(k: Scalars, g: jax.Array, m: jax.Array, h: jax.Array) -> tuple[jax.Array, jax.Array]:
  """Algorithm 3: ``m = b1 m + (1 - b1) g`` and the unclipped step ``m_hat / max(gamma h, eps)``."""
  m = moving_average(k.b1, m, g, k.one_minus_b1)
  return (m / k.c1) / jnp.maximum(k.gamma * h, k.eps), m


class ScaleBySophia(Transformation):
  requires_float = True  # its Hessian estimate needs floating parameters (jax.jvp)
  name = "sophia"
  State = SophiaState
  hessian_diagonal_fn: Any = static_field()
  b1: Any = hyper_field(0.965, check=_check_decay_open)
  b2: Any = hyper_field(0.99, check=_check_decay_open)
  eps: Any = hyper_field(1e-08, check=check_positive)
  gamma: Any = hyper_field(0.01, check=check_positive)
  clip_threshold: Any = hyper_field(1.0, check=check_positive)
  update_interval: Any = hyper_field(10, check=_check_interval)
  print_win_rate_every_n_steps: Any = hyper_field(0)
  mu_dtype: Any = static_field(default=None)
  verbose: bool = static_field(default=False)
  one_minus_b1: Any = derived_field(lambda t: 1 - t.b1)
  one_minus_b2: Any = derived_field(lambda t: 1 - t.b2)

  def __post_init__(self):
    if self.verbose:
      if self.clip_threshold is None:
        raise ValueError(f"{self.name}: verbose reports the clipping win rate; it needs a clip_threshold.")
      check_positive(self.name, "print_win_rate_every_n_steps (with verbose=True)",
                     self.print_win_rate_every_n_steps)

  def init_fn(self, params):
    # The inner estimator's state is not built from roles: written here, checked against them.
    return SophiaState(count=zero_count(), mu=zeros_like(params, self.mu_dtype), nu=zeros_like(params, real=True),
                       hessian_fn_state=self.hessian_diagonal_fn.init(params))

  def update_fn(self, updates, state, params=None, **extra_args):
    if params is None:
      raise ValueError("sophia: `params` must be passed to update() (the Hessian estimate needs them).")
    count = safe_increment(state.count)

    scalars = Scalars(b1=self.b1, one_minus_b1=derived(self, "one_minus_b1"), c1=one_minus_pow(self.b1, count),
                      gamma=self.gamma, eps=self.eps, clip=self.clip_threshold)

    def leaf(k, g, m, h):
      u, m = _preconditioned(k, g, m, h)
      if self.clip_threshold is not None:
        u = clip_modulus(u, k.clip)
      return u, m

    out, mu = self.leafwise(leaf, updates, state.mu, reads=(state.nu,), scalars=scalars)
    if self.verbose and self.clip_threshold is not None:
      # The win rate: the fraction of coordinates whose step was not clipped.
      unclipped = tree_reduce(
          lambda k, g, m, h: jnp.sum(jnp.abs(_preconditioned(k, g, m, h)[0]) < k.clip, dtype=COUNTER_DTYPE),
          COUNTER_DTYPE, updates, state.mu, state.nu, scalars=scalars)
      self._report_win_rate(out, unclipped, count)

    def refresh(hess_state, nu):
      diag, hess_state = self.hessian_diagonal_fn.update(updates, hess_state, params, **extra_args)

      def ema(k, d, v):
        # h = b2 h + (1 - b2) ĥ; the leaf's first output (ĥ itself) is not used.
        return d, moving_average(k.b2, v, jnp.real(d), k.one_minus_b2)

      _, nu = self.leafwise(ema, diag, nu,
                            scalars=Scalars(b2=self.b2, one_minus_b2=derived(self, "one_minus_b2")))
      return hess_state, nu

    due = state.count % hyper(self.update_interval, COUNTER_DTYPE) == 0
    hess_state, nu = jax.lax.cond(due, refresh, lambda h, n: (h, n), state.hessian_fn_state, state.nu)
    return out, SophiaState(count=count, mu=mu, nu=nu, hessian_fn_state=hess_state)

  def _report_win_rate(self, out, unclipped, count):
    size = sum(int(np.size(x)) for x in jax.tree_util.tree_leaves(out))
    win_rate = unclipped.astype(jnp.float32) / max(size, 1)  # a printed ratio: float32 is enough
    every = hyper(self.print_win_rate_every_n_steps, COUNTER_DTYPE)
    jax.lax.cond(count % every == 0, lambda: jax.debug.print("Sophia optimizer win rate: {}", win_rate),
                 lambda: None)


@shared_args
def sophia(
    learning_rate: ScalarOrSchedule,
    b1: ArrayLike = 0.965,
    b2: ArrayLike = 0.99,
    eps: ArrayLike = 1e-8,
    weight_decay: ArrayLike = 1e-4,
    weight_decay_mask: Any | Callable[[Any], Any] | None = None,
    gamma: ArrayLike = 0.01,
    clip_threshold: ArrayLike | None = 1.0,
    update_interval: ArrayLike = 10,
    hessian_diagonal_fn: GradientTransformation | None = None,
    mu_dtype: DTypeLike | None = None,
    verbose: bool = False,
    print_win_rate_every_n_steps: ArrayLike = 0,
) -> Transformation:
  """Sophia: momentum over a clipped, EMA-smoothed diagonal Hessian estimate, with weight decay.

  With the default Hutchinson estimator, pass the objective at every step:
  ``opt.update(grads, state, params, obj_fn=loss_fn)`` (every extra argument is forwarded to
  ``hessian_diagonal_fn``, which runs every ``update_interval`` steps, the first time at step 0).

  Args:
    learning_rate: <shared>
    b1: decay of the momentum.
    b2: decay of the Hessian EMA.
    eps: lower bound of the denominator ``gamma h``.
    weight_decay: <shared>
    weight_decay_mask: where the weight decay applies.
    gamma: scale of the Hessian estimate in the denominator.
    clip_threshold: elementwise bound of the preconditioned step (None: no clipping). Complex
      steps have their modulus bounded.
    update_interval: steps between Hessian estimates.
    hessian_diagonal_fn: a transformation returning a diagonal Hessian estimate (default:
      ``hutchinson_estimator_diag_hessian()``).
    mu_dtype: dtype of the momentum.
    verbose: print the fraction of unclipped coordinates (the "win rate").
    print_win_rate_every_n_steps: how often to print it (positive when ``verbose``).

  Returns:
    ``chain(sophia block, add_decayed_weights, scale_by_learning_rate)``, as in Optax; the first
    state is ``SophiaState``.

  References:
    Liu et al., "Sophia: A Scalable Stochastic Second-order Optimizer for Language Model
    Pre-training", ICLR 2024 (arXiv:2305.14342, Algorithm 3).

  Example:
    >>> import jax, jax.numpy as jnp, steadax
    >>> loss = lambda p: jnp.sum(p["w"].astype(jnp.float32) ** 2) + jnp.sum(p["b"] ** 2)
    >>> params = {"w": jnp.ones(2, jnp.bfloat16), "b": jnp.ones(1)}
    >>> opt = steadax.contrib.sophia(0.1)
    >>> u, s = opt.update(jax.grad(loss)(params), opt.init(params), params, obj_fn=loss)
    >>> u["w"].dtype, s[0].nu["b"]  # (1 - b2) * 2
    (dtype(bfloat16), Array([0.02], dtype=float32))
  """
  # The block (named "sophia" too) checks its own hyperparameters; these two belong to the chain.
  check_nonnegative("sophia", "weight_decay", weight_decay)
  if hessian_diagonal_fn is None:
    hessian_diagonal_fn = hutchinson_estimator_diag_hessian()
  block = ScaleBySophia(with_extra_args_support(hessian_diagonal_fn), b1, b2, eps, gamma, clip_threshold,
                        update_interval, print_win_rate_every_n_steps, mu_dtype=mu_dtype, verbose=verbose)
  return chain(block, add_decayed_weights(weight_decay, weight_decay_mask), scale_by_learning_rate(learning_rate))
