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

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .._core._base import GradientTransformation, Transformation, with_extra_args_support
from .._core._checks import check_nonnegative, check_positive, check_range, check_schedule_or_scalar
from .._core._combine import chain
from .._core._module import hyper_field, static_field
from .._core._policy import (
    COUNTER_DTYPE,
    as_compute,
    compute_dtype,
    hyper,
    per_dtype,
    real_dtype,
    safe_increment,
    zero_count,
)
from .._core._tree import tree_map, tree_map_n, zeros_like
from .._core._types import ScalarOrSchedule
from ..transforms._decay import add_decayed_weights
from ..transforms._noise import _typed_key
from ..transforms._scaling import scale_by_learning_rate
from ._adopt import clip_modulus

__all__ = ["HutchinsonState", "SophiaState", "hutchinson_estimator_diag_hessian", "sophia"]


class HutchinsonState(NamedTuple):
  """State of ``hutchinson_estimator_diag_hessian``: the typed PRNG key."""

  key: jax.Array


class SophiaState(NamedTuple):
  """State of ``sophia``'s scaling block (Optax's field names).

  Attributes:
    count: int32 number of updates so far.
    mu: the momentum.
    nu: the EMA of the Hessian diagonal estimates (real for complex parameters).
    hessian_fn_state: the state of ``hessian_diagonal_fn``.
  """

  count: jax.Array
  mu: Any
  nu: Any
  hessian_fn_state: Any


class HutchinsonEstimator(Transformation):
  name = "hutchinson_estimator_diag_hessian"
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
    tangents, weights = [], []
    for p, k in zip(leaves, keys):
      signs = jax.random.rademacher(k, np.shape(p), jnp.float32)
      if jnp.iscomplexobj(p):
        imag = jax.random.rademacher(jax.random.fold_in(k, 1), np.shape(p), jnp.float32)
        signs = jax.lax.complex(signs, imag)
      tangents.append(signs.astype(p.dtype))
      weights.append(2 if jnp.iscomplexobj(p) else 1)
    tangents = treedef.unflatten(tangents)
    # jax.grad of a real function of z = x + iy is d/dx - i d/dy: the product with v (no conjugate)
    # is the real pairing <v, H v>.
    hvp = jax.jvp(jax.grad(obj_fn), (params,), (tangents,))[1]

    def leaf(h, v, w):
      cdt = compute_dtype(h.dtype, v.dtype)
      prod = as_compute(h, cdt) * as_compute(v, cdt)
      est = jnp.real(prod) / w if jnp.iscomplexobj(prod) else prod
      return est.astype(v.dtype)

    out = treedef.unflatten([leaf(h, v, w) for h, v, w in
                             zip(treedef.flatten_up_to(hvp), treedef.flatten_up_to(tangents), weights)])
    return out, HutchinsonState(key=key)


def hutchinson_estimator_diag_hessian(random_seed: Any = None) -> Transformation:
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


class ScaleBySophia(Transformation):
  name = "sophia"
  hessian_diagonal_fn: Any = static_field()
  b1: Any = hyper_field(0.965)
  b2: Any = hyper_field(0.99)
  eps: Any = hyper_field(1e-08)
  gamma: Any = hyper_field(0.01)
  clip_threshold: Any = hyper_field(1.0)
  update_interval: Any = hyper_field(10)
  print_win_rate_every_n_steps: Any = hyper_field(0)
  mu_dtype: Any = static_field(default=None)
  verbose: bool = static_field(default=False)

  def init_fn(self, params):
    return SophiaState(count=zero_count(), mu=zeros_like(params, self.mu_dtype), nu=zeros_like(params, real=True),
                       hessian_fn_state=self.hessian_diagonal_fn.init(params))

  def update_fn(self, updates, state, params=None, **extra_args):
    if params is None:
      raise ValueError("sophia: `params` must be passed to update() (the Hessian estimate needs them).")
    count = safe_increment(state.count)

    @per_dtype
    def scalars(cdt):
      rdt = real_dtype(cdt)
      b1 = hyper(self.b1, cdt)
      c1 = np.asarray(1, rdt) - hyper(self.b1, rdt) ** count.astype(rdt)
      clip = None if self.clip_threshold is None else hyper(self.clip_threshold, rdt)
      return dict(b1=b1, one_minus_b1=hyper(1 - self.b1, cdt), c1=c1.astype(cdt), gamma=hyper(self.gamma, rdt),
                  eps=hyper(self.eps, rdt), clip=clip)

    def step(g, m, h):
      cdt = compute_dtype(g.dtype, m.dtype)
      rdt = real_dtype(cdt)
      k = scalars(cdt)
      m_new = k["b1"] * as_compute(m, cdt) + k["one_minus_b1"] * as_compute(g, cdt)
      u = (m_new / k["c1"]) / jnp.maximum(k["gamma"] * as_compute(h, rdt), k["eps"]).astype(cdt)
      unclipped = jnp.zeros([], COUNTER_DTYPE)
      if k["clip"] is not None:
        unclipped = jnp.sum(jnp.abs(u) < k["clip"], dtype=COUNTER_DTYPE)
        u = clip_modulus(u, k["clip"])
      return u.astype(g.dtype), m_new.astype(m.dtype), unclipped

    out, mu, unclipped = tree_map_n(step, 3, updates, state.mu, state.nu)
    if self.verbose and self.clip_threshold is not None:
      self._report_win_rate(out, unclipped, count)

    def refresh(hess_state, nu):
      diag, hess_state = self.hessian_diagonal_fn.update(updates, hess_state, params, **extra_args)
      b2s = per_dtype(lambda rdt: (hyper(self.b2, rdt), hyper(1 - self.b2, rdt)))

      def ema(d, v):
        rdt = real_dtype(compute_dtype(d.dtype, v.dtype))
        b2, one_minus_b2 = b2s(rdt)
        dr = jnp.real(as_compute(d, compute_dtype(d.dtype))).astype(rdt)
        return (b2 * as_compute(v, rdt) + one_minus_b2 * dr).astype(v.dtype)

      return hess_state, tree_map(ema, diag, nu)

    due = state.count % hyper(self.update_interval, COUNTER_DTYPE) == 0
    hess_state, nu = jax.lax.cond(due, refresh, lambda h, n: (h, n), state.hessian_fn_state, state.nu)
    return out, SophiaState(count=count, mu=mu, nu=nu, hessian_fn_state=hess_state)

  def _report_win_rate(self, out, unclipped, count):
    size = sum(int(np.size(x)) for x in jax.tree_util.tree_leaves(out))
    total = sum(jax.tree_util.tree_leaves(unclipped), jnp.zeros([], COUNTER_DTYPE))
    win_rate = total.astype(jnp.float32) / max(size, 1)
    every = hyper(self.print_win_rate_every_n_steps, COUNTER_DTYPE)
    jax.lax.cond(count % every == 0, lambda: jax.debug.print("Sophia optimizer win rate: {}", win_rate),
                 lambda: None)


def sophia(
    learning_rate: ScalarOrSchedule,
    b1: Any = 0.965,
    b2: Any = 0.99,
    eps: Any = 1e-8,
    weight_decay: Any = 1e-4,
    weight_decay_mask: Any | Callable[[Any], Any] | None = None,
    gamma: Any = 0.01,
    clip_threshold: Any = 1.0,
    update_interval: Any = 10,
    hessian_diagonal_fn: GradientTransformation | None = None,
    mu_dtype: Any = None,
    verbose: bool = False,
    print_win_rate_every_n_steps: Any = 0,
) -> Transformation:
  """Sophia: momentum over a clipped, EMA-smoothed diagonal Hessian estimate, with weight decay.

  With the default Hutchinson estimator, pass the objective at every step:
  ``opt.update(grads, state, params, obj_fn=loss_fn)`` (every extra argument is forwarded to
  ``hessian_diagonal_fn``, which runs every ``update_interval`` steps, the first time at step 0).

  Args:
    learning_rate: a scalar or a schedule.
    b1: decay of the momentum.
    b2: decay of the Hessian EMA.
    eps: lower bound of the denominator ``gamma h``.
    weight_decay: decoupled weight decay (multiplied by the learning rate).
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
  owner = "sophia"
  check_schedule_or_scalar(owner, "learning_rate", learning_rate)
  check_range(owner, "b1", b1, 0.0, 1.0, high_open=True)
  check_range(owner, "b2", b2, 0.0, 1.0, high_open=True)
  check_positive(owner, "eps", eps)
  check_nonnegative(owner, "weight_decay", weight_decay)
  check_positive(owner, "gamma", gamma)
  if clip_threshold is not None:
    check_positive(owner, "clip_threshold", clip_threshold)
  check_range(owner, "update_interval", update_interval, 1.0, np.inf)
  if verbose:
    if clip_threshold is None:
      raise ValueError(f"{owner}: verbose reports the clipping win rate; it needs a clip_threshold.")
    check_positive(owner, "print_win_rate_every_n_steps (with verbose=True)", print_win_rate_every_n_steps)
  if hessian_diagonal_fn is None:
    hessian_diagonal_fn = hutchinson_estimator_diag_hessian()
  block = ScaleBySophia(with_extra_args_support(hessian_diagonal_fn), b1, b2, eps, gamma, clip_threshold,
                        update_interval, print_win_rate_every_n_steps, mu_dtype=mu_dtype, verbose=verbose)
  return chain(block, add_decayed_weights(weight_decay, weight_decay_mask), scale_by_learning_rate(learning_rate))
