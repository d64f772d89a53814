"""L-BFGS-B: limited-memory BFGS on a box ``lower <= x <= upper``.

Byrd, Lu, Nocedal & Zhu (1995), "A limited memory algorithm for bound constrained optimization"
(BLNZ below), with the projected subspace step of L-BFGS-B 3.0 (Morales & Nocedal 2011, the
version scipy ships). Each update:

1. The compact representation ``B = theta I - W M W^T``, ``W = [Y, theta S]`` (BLNZ Eq. 3.2-3.4)
   of the L-BFGS Hessian approximation from the last ``memory_size`` pairs.
2. The generalized Cauchy point: the first local minimiser of the quadratic model
   ``m(x) = g^T (x - x_k) + (x - x_k)^T B (x - x_k) / 2`` along the projected steepest-descent
   path ``x(t) = P(x_k - t g)`` (BLNZ Sec. 4). BLNZ scan the breakpoints one by one; here the
   derivatives ``f'_j``, ``f''_j`` of every segment come at once from prefix sums over the sorted
   breakpoints (for a segment starting at ``tau``, the free variables are those whose breakpoint
   lies beyond ``tau``, and ``z = x(tau) - x_k = -g * min(tau, t_i)``), and the first segment that
   holds a minimiser is picked by ``argmax``: the same point, with a sort and cumulative sums
   instead of a sequential loop.
3. Subspace minimisation of the model over the variables free at the Cauchy point (BLNZ Sec. 5.1,
   the direct primal method with the Sherman-Morrison-Woodbury formula); the minimiser is
   projected onto the box and kept if it gives a descent direction, else the step from the Cauchy
   point is truncated at the box (Morales & Nocedal 2011, Sec. 2).
4. A line search for the strong Wolfe conditions along ``d = x_bar - x_k`` with steps up to the
   largest feasible one (1 on the first step of a constrained problem, whose first trial is
   ``1 / |d|`` as in L-BFGS-B); the pair ``s, y`` is stored when ``s^T y > eps |y|^2``.

The iterates stay feasible, the model decreases along the projected path at every step, and the
Wolfe search keeps ``B`` positive definite: the conditions of BLNZ's convergence analysis.

All vectors are the parameters raveled and concatenated in the scalar statistics dtype (the widest
floating dtype among the parameters, at least float32): the algorithm couples every coordinate
through sorting and the compact matrices. The line search and the state's ``value``/``grad`` are
the zoom search's, so ``value_and_grad_from_state`` and ``minimize`` reuse them.
"""

import dataclasses
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from .._core._docs import shared_args
from .._core._transformation import Transformation
from .._core._checks import check_positive
from .._core._module import child_field, hyper_field, static_field
from .._core._policy import safe_increment, scalar_stat_dtype, zero_count
from .._core._roles import COUNTER, INNER, OTHER, state_roles
from .._linesearch._zoom import ScaleByZoomLinesearchState, scale_by_zoom_linesearch
from . import _bounds
from .._core._types import Params

__all__ = ["ScaleByLBFGSBState", "lbfgsb"]

_HIGHEST = jax.lax.Precision.HIGHEST
_MAX_STEP = 1e10  # L-BFGS-B's cap on the step of an unconstrained direction


@state_roles(count=COUNTER, diff_params_memory=OTHER, diff_updates_memory=OTHER, num_pairs=OTHER,
             linesearch=INNER)
class ScaleByLBFGSBState(NamedTuple):
  """State of ``lbfgsb``.

  Attributes:
    count: int32 number of updates so far.
    diff_params_memory: ``[memory_size, n]`` parameter differences ``s`` (all leaves raveled and
      concatenated, statistics dtype), oldest first; the first ``memory_size - num_pairs`` rows are
      empty (zero).
    diff_updates_memory: the matching gradient differences ``y``.
    num_pairs: int32 number of stored pairs (at most ``memory_size``).
    linesearch: the zoom search's state (``value``, ``grad`` at the current point, step size).
  """

  count: jax.Array
  diff_params_memory: jax.Array
  diff_updates_memory: jax.Array
  num_pairs: jax.Array
  linesearch: ScaleByZoomLinesearchState


def _dot(a, b):
  return jnp.matmul(a, b, precision=_HIGHEST)


def compact_form(s_mem: jax.Array, y_mem: jax.Array, num_pairs: jax.Array):
  """``theta``, ``W^T`` (``[2m, n]``) and ``M`` (``[2m, 2m]``) with ``B = theta I - W M W^T``
  (BLNZ Eq. 3.2-3.4). Empty slots get identity blocks in ``M^{-1}`` and zero columns in ``W``, so
  they drop out of every product."""
  m = s_mem.shape[0]
  dtype = s_mem.dtype
  used = jnp.arange(m, dtype=jnp.int32) >= m - num_pairs
  sy = _dot(s_mem, y_mem.T)  # sy[i, j] = s_i^T y_j
  ss = _dot(s_mem, s_mem.T)
  newest_sy = sy[-1, -1]
  newest_yy = jnp.sum(y_mem[-1] * y_mem[-1])
  one = jnp.ones([], dtype)
  has_pair = num_pairs > 0
  theta = jnp.where(has_pair, newest_yy / jnp.where(has_pair, newest_sy, one), one)
  diag = jnp.where(used, jnp.diagonal(sy), one)
  lower_sy = jnp.tril(sy, -1)
  eye = jnp.eye(m, dtype=dtype)
  middle_inv = jnp.block([
      [-diag[:, None] * eye, lower_sy.T],
      [lower_sy, theta * ss + jnp.where(used, 0, 1).astype(dtype)[:, None] * eye],
  ])
  middle = jnp.linalg.inv(middle_inv)
  w_t = jnp.concatenate([y_mem, theta * s_mem], axis=0)
  return theta, w_t, middle


def cauchy_point(x, g, lower, upper, theta, w_t, middle):
  """The generalized Cauchy point (BLNZ Algorithm CP, computed segment-parallel: see the module
  docstring) and the mask of the variables not at a bound there."""
  dtype = x.dtype
  n = x.shape[0]
  inf = jnp.asarray(np.inf, dtype)
  safe_g = jnp.where(g == 0, jnp.ones_like(g), g)
  # Breakpoints (BLNZ Eq. 4.1): the path step at which each variable reaches its bound.
  t = jnp.where(g < 0, (x - upper) / safe_g, jnp.where(g > 0, (x - lower) / safe_g, inf))
  t = jnp.maximum(t, jnp.zeros_like(t))
  order = jnp.argsort(t)
  ts, gs = t[order], g[order]
  gw = gs[:, None] * w_t[:, order].T  # [n, 2m]: g_i w_i
  zero_row = jnp.zeros((1, w_t.shape[0]), dtype)
  # Segment j (j = 0..n) starts at tau_j (0, then the sorted breakpoints); its free variables are
  # the sorted positions >= j.
  tau = jnp.concatenate([jnp.zeros([1], dtype), ts])
  end = jnp.concatenate([ts, inf[None]])
  finite = jnp.isfinite(tau)
  tau_safe = jnp.where(finite, tau, jnp.zeros_like(tau))
  g2 = gs * gs
  free_sq = jnp.concatenate([jnp.cumsum(g2[::-1])[::-1], jnp.zeros([1], dtype)])  # d^T d
  free_gw = jnp.concatenate([jnp.cumsum(gw[::-1], axis=0)[::-1], zero_row])  # -W^T d
  ts_safe = jnp.where(jnp.isfinite(ts), ts, jnp.zeros_like(ts))
  bound_gw = jnp.concatenate([zero_row, jnp.cumsum(gw * ts_safe[:, None], axis=0)])
  wz = bound_gw + tau_safe[:, None] * free_gw  # -W^T z
  m_free = _dot(free_gw, middle)  # rows (W^T d)^T M up to sign
  # f'_j = g^T d + theta d^T z - d^T W M W^T z;  f''_j = theta d^T d - d^T W M W^T d (BLNZ 4.4-4.5)
  slope = -free_sq + theta * tau_safe * free_sq - jnp.sum(m_free * wz, axis=1)
  curvature = theta * free_sq - jnp.sum(m_free * free_gw, axis=1)
  positive = curvature > 0
  step = -slope / jnp.where(positive, curvature, jnp.ones_like(curvature))
  inside = (slope >= 0) | (positive & (step < end - tau_safe)) | (free_sq == 0)
  j = jnp.argmax(inside & finite)
  t_cp = tau_safe[j] + jnp.where(slope[j] >= 0, 0, jnp.clip(step[j], 0, end[j] - tau_safe[j]))
  at_bound = t <= t_cp
  bound_hit = jnp.where(g < 0, upper, lower)
  x_cp = jnp.where(at_bound, bound_hit, x - t_cp * g)
  del n
  return x_cp, ~at_bound


def subspace_step(x, g, x_cp, free, lower, upper, theta, w_t, middle):
  """The minimiser of the model over the free variables from the Cauchy point (BLNZ Eq. 5.11),
  projected onto the box if that gives descent, else truncated at it (Morales & Nocedal 2011)."""
  dtype = x.dtype
  two_m = w_t.shape[0]
  z = x_cp - x
  c = _dot(w_t, z)
  reduced = g + theta * z - _dot(w_t.T, _dot(middle, c))  # the model's gradient at x_cp
  reduced = jnp.where(free, reduced, jnp.zeros_like(reduced))
  w_free = w_t * free.astype(dtype)[None, :]
  v = _dot(middle, _dot(w_t, reduced))
  n_mat = jnp.eye(two_m, dtype=dtype) - _dot(middle, _dot(w_free, w_t.T)) / theta
  v = jnp.linalg.solve(n_mat, v)
  du = -reduced / theta - _dot(w_t.T, v) / theta**2
  du = jnp.where(free, du, jnp.zeros_like(du))
  projected = jnp.clip(x_cp + du, lower, upper)
  descent = jnp.sum((projected - x) * g) < 0
  big = jnp.asarray(np.inf, dtype)
  safe_du = jnp.where(du == 0, jnp.ones_like(du), du)
  ratio = jnp.where(du > 0, (upper - x_cp) / safe_du, jnp.where(du < 0, (lower - x_cp) / safe_du, big))
  alpha = jnp.clip(jnp.min(ratio, initial=np.inf), 0, 1)
  return jnp.where(descent, projected, x_cp + alpha * du)


@jax.jit
def _direction(x, g, lower, upper, s_mem, y_mem, num_pairs, count):
  """The search direction ``x_bar - x``, the largest step and the first trial of the line search
  (one compiled program, also when ``update`` runs eagerly)."""
  stat = x.dtype
  theta, w_t, middle = compact_form(s_mem, y_mem, num_pairs)
  x_cp, free = cauchy_point(x, g, lower, upper, theta, w_t, middle)
  x_bar = subspace_step(x, g, x_cp, free, lower, upper, theta, w_t, middle)
  d = x_bar - x
  # With B positive definite, d is a descent direction (the model decreases from x to x_bar); in
  # finite precision an ill-conditioned B can break that. Then the Cauchy step, always a descent
  # direction, is taken and the memory is cleared (L-BFGS-B restarts the same way, Zhu et al.
  # 1997, Sec. 3: "the BFGS matrix is reset to the identity").
  restart = ~(jnp.sum(d * g) < 0) | ~jnp.all(jnp.isfinite(d))
  d = jnp.where(restart, x_cp - x, d)

  # The step range and first trial of L-BFGS-B's lnsrlb: up to the box along d (1 on the first
  # step of a constrained problem); the first trial is 1 / |d| when no pair scales d yet.
  constrained = jnp.any(jnp.isfinite(lower)) | jnp.any(jnp.isfinite(upper))
  boxed = jnp.all(jnp.isfinite(lower)) & jnp.all(jnp.isfinite(upper))
  safe_d = jnp.where(d == 0, jnp.ones_like(d), d)
  room = jnp.where(d > 0, (upper - x) / safe_d, jnp.where(d < 0, (lower - x) / safe_d, _MAX_STEP))
  feasible = jnp.minimum(jnp.min(room, initial=_MAX_STEP), _MAX_STEP)
  first = count == 0
  cap = jnp.where(constrained, jnp.where(first, 1.0, feasible), _MAX_STEP).astype(stat)
  cap = jnp.maximum(cap, jnp.asarray(np.finfo(stat).tiny, stat))
  d_norm = jnp.sqrt(jnp.sum(d * d))
  unit = jnp.ones([], stat)
  inverse_norm = unit / jnp.where(d_norm > 0, d_norm, unit)
  guess = jnp.where(first & ~boxed & (d_norm > 0), jnp.minimum(inverse_norm, cap), jnp.minimum(unit, cap))
  return d, cap, guess, restart


class LBFGSB(Transformation):
  name = "lbfgsb"
  requires_float = True
  State = ScaleByLBFGSBState
  lower: Any = hyper_field(None)
  upper: Any = hyper_field(None)
  linesearch: Any = child_field(default=None)
  memory_size: int = static_field(default=10)

  def _check(self, params):
    for path, leaf in jax.tree_util.tree_flatten_with_path(params)[0]:
      if jnp.iscomplexobj(leaf):
        raise TypeError(f"{self.owner}: parameter at {jax.tree_util.keystr(path)} is complex; "
                        "box bounds need real parameters.")
    _bounds.check_bounds(self.owner, self.lower, self.upper, params)

  def init_fn(self, params):
    self._check(params)
    stat = scalar_stat_dtype(params)
    n = int(sum(np.prod(jnp.shape(p), dtype=np.int64) for p in jax.tree_util.tree_leaves(params)))
    memory = jnp.zeros((self.memory_size, n), stat)
    return ScaleByLBFGSBState(
        count=zero_count(), diff_params_memory=memory, diff_updates_memory=jnp.zeros_like(memory),
        num_pairs=zero_count(), linesearch=self.linesearch.init(params))

  def update_fn(self, updates, state, params=None, *, value=None, grad=None, value_fn=None,
                **extra_args):
    if params is None:
      raise TypeError(f"{self.owner}: update() needs `params`.")
    self._check(params)
    if value is None or value_fn is None:
      raise TypeError(f"{self.owner}: update() needs the keyword arguments `value` and `value_fn` "
                      "(update(grad, state, params, value=value, grad=grad, value_fn=f)).")
    grad = updates if grad is None else grad
    stat = state.diff_params_memory.dtype
    lower, upper = _bounds.flat_bounds(self.owner, self.lower, self.upper, params, stat)
    x = jnp.clip(_bounds.flatten(params, stat), lower, upper)
    g = _bounds.flatten(updates, stat)

    d, cap, guess, restart = _direction(x, g, lower, upper, state.diff_params_memory,
                               state.diff_updates_memory, state.num_pairs, state.count)

    search = dataclasses.replace(self.linesearch, max_learning_rate=cap)
    direction = _bounds.unflatten(d, params)
    ls_state = state.linesearch._replace(learning_rate=guess.astype(stat))
    _, ls_state = search.update(direction, ls_state, params, value=value, grad=grad,
                                value_fn=value_fn, **extra_args)
    x_new = jnp.clip(x + ls_state.learning_rate * d, lower, upper)
    g_new = _bounds.flatten(ls_state.grad, stat)

    s, y = x_new - x, g_new - g
    sy, yy = jnp.sum(s * y), jnp.sum(y * y)
    # BLNZ Sec. 6: the pair is kept only with enough positive curvature, so B stays positive definite.
    valid = (sy > jnp.finfo(stat).eps * yy) & jnp.isfinite(sy) & jnp.isfinite(yy)
    # After a restart or a failed search the memory is cleared (and the next update starts from
    # the gradient, as L-BFGS-B retries a failed search); minimize stops on a second failure.
    clear = restart | (ls_state.info.decrease_error > 0)
    valid = valid & ~clear

    def push(memory, row):
      shifted = jnp.concatenate([memory[1:], row[None]], axis=0)
      return jnp.where(valid, shifted, jnp.where(clear, jnp.zeros_like(memory), memory))

    new_state = ScaleByLBFGSBState(
        count=safe_increment(state.count),
        diff_params_memory=push(state.diff_params_memory, s),
        diff_updates_memory=push(state.diff_updates_memory, y),
        num_pairs=jnp.where(valid, jnp.minimum(state.num_pairs + 1, self.memory_size),
                            jnp.where(clear, 0, state.num_pairs)).astype(state.num_pairs.dtype),
        linesearch=ls_state)
    return _bounds.unflatten(x_new - _bounds.flatten(params, stat), params), new_state


@shared_args
def lbfgsb(
    lower: ArrayLike | Params | None = None,
    upper: ArrayLike | Params | None = None,
    memory_size: int = 10,
    max_linesearch_steps: int = 20,
) -> Transformation:
  """L-BFGS-B: L-BFGS on the box ``lower <= params <= upper`` (a complete optimizer).

  Each update computes the generalized Cauchy point of the L-BFGS quadratic model along the
  projected gradient path, minimises the model over the variables still free there, and runs a
  strong-Wolfe line search (``scale_by_zoom_linesearch`` with ``slope_rtol=1e-3``, L-BFGS-B's
  constants) along the resulting feasible direction; the returned updates keep the parameters in
  the box. An infeasible ``params`` is treated as its projection. ``steadax.minimize`` uses it for
  ``bounds=(lower, upper)``.

  ``update(grad, state, params, value=f(params), grad=grad, value_fn=f)`` needs the value and the
  objective, as ``lbfgs`` does; ``value_and_grad_from_state`` reuses the value and gradient the
  search computed at the new point. The algorithm runs on all parameters raveled into one vector
  in the statistics dtype (the widest floating dtype among them, at least float32).

  Args:
    lower: lower bounds: None (none), a scalar for every leaf, or a tree with the parameters'
      structure whose leaves are scalars or arrays broadcastable to their parameter (``-inf``
      allowed).
    upper: upper bounds, likewise (``+inf`` allowed).
    memory_size: the number of curvature pairs kept.
    max_linesearch_steps: the most objective evaluations per line search.

  Returns:
    A transformation with ``ScaleByLBFGSBState``.

  Raises:
    ValueError: (at ``init``) a bound whose structure or shape does not match the parameters, or
      ``lower > upper`` somewhere, naming the path.

  References:
    Byrd, Lu, Nocedal & Zhu, "A limited memory algorithm for bound constrained optimization",
    SIAM J. Sci. Comput. 16(5), 1995; Zhu, Byrd, Lu & Nocedal, "Algorithm 778: L-BFGS-B", ACM TOMS
    23(4), 1997; Morales & Nocedal, "Remark on Algorithm 778", ACM TOMS 38(1), 2011.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> def f(w): return jnp.sum((w - jnp.array([2.0, -3.0])) ** 2)
    >>> opt = steadax.lbfgsb(lower=-1.0, upper=1.0)
    >>> w = jnp.zeros(2); state = opt.init(w)
    >>> value_and_grad = steadax.value_and_grad_from_state(f)
    >>> for _ in range(3):
    ...   value, grad = value_and_grad(w, state=state)
    ...   updates, state = opt.update(grad, state, w, value=value, grad=grad, value_fn=f)
    ...   w = steadax.apply_updates(w, updates)
    >>> w
    Array([ 1., -1.], dtype=float32)
  """
  owner = "lbfgsb"
  if not isinstance(memory_size, int) or isinstance(memory_size, bool) or memory_size < 1:
    raise ValueError(f"{owner}: memory_size must be an int >= 1, got {memory_size!r}.")
  check_positive(owner, "max_linesearch_steps", max_linesearch_steps)
  for which, bound in (("lower", lower), ("upper", upper)):
    for path, leaf in jax.tree_util.tree_flatten_with_path(bound)[0]:
      if not isinstance(leaf, (int, float, np.number, np.ndarray, jax.Array)) or isinstance(leaf, bool):
        raise TypeError(f"{owner}: `{which}` at {jax.tree_util.keystr(path) or '<root>'} must be a "
                        f"number or an array, got {type(leaf).__name__}.")
  linesearch = scale_by_zoom_linesearch(max_linesearch_steps, slope_rtol=1e-3, curv_rtol=0.9,
                                        initial_guess_strategy="keep")
  return LBFGSB(lower=lower, upper=upper, linesearch=linesearch, memory_size=memory_size)
