"""L-BFGS: a limited-memory quasi-Newton direction, scaled by a line search.

The inverse Hessian approximation is never formed: the two-loop recursion (Nocedal & Wright,
"Numerical Optimization", 2nd ed., Alg. 7.4) applies it to the gradient from the last
``memory_size`` curvature pairs ``s = w_{k+1} - w_k``, ``y = g_{k+1} - g_k``. Inner products are
real (``Re<x, y>``), so complex parameters are optimised as pairs of reals; they accumulate in the
scalar statistics dtype (the widest floating dtype among the params, at least float32), which is
also the dtype of the curvature weights ``rho = 1 / Re<y, s>``.
"""

from typing import Any, NamedTuple

import jax
import jax.core  # jax.core.Tracer: jax does not re-export the submodule for type checkers
import jax.numpy as jnp
from jax.sharding import NamedSharding, PartitionSpec

from .._core._docs import shared_args
from .._core._interface import GradientTransformation
from .._core._stateless import identity
from .._core._transformation import Transformation
from .._core._checks import check_schedule_or_scalar
from .._core._combine import Chain, chain
from .._core._leafwise import Scalars, leafwise
from .._core._module import static_field
from .._core._policy import accumulator_dtype, compute_dtype, safe_increment, scalar_stat_dtype, zero_count
from .._core._roles import COUNTER, OTHER, accumulator, state_roles
from .._core._tree import tree_map, zeros_like
from .._core._types import Params, ScalarOrSchedule, Updates
from .._linesearch._common import real_vdot
from .._linesearch._zoom import scale_by_zoom_linesearch
from ..transforms._scaling import scale, scale_by_learning_rate

__all__ = ["ScaleByLBFGSState", "scale_by_lbfgs", "lbfgs"]


# The memories are stacked on a leading [memory_size] axis and the weights are a [memory_size]
# vector: none of them mirrors the parameters' shapes.
@state_roles(count=COUNTER, params=accumulator(), updates=accumulator(), diff_params_memory=OTHER,
             diff_updates_memory=OTHER, weights_memory=OTHER)
class ScaleByLBFGSState(NamedTuple):
  """State of ``scale_by_lbfgs`` (Optax's field names).

  Attributes:
    count: int32 number of updates so far.
    params: the parameters at the last update.
    updates: the incoming updates (gradients) at the last update.
    diff_params_memory: the last ``memory_size`` parameter differences ``s``, stacked on a leading
      axis of each leaf (a ring buffer), in each parameter's dtype.
    diff_updates_memory: the matching update differences ``y``.
    weights_memory: the matching ``rho = 1 / Re<y, s>``, in the scalar statistics dtype; 0 marks
      an empty slot (or a pair with ``Re<y, s> = 0``), which the recursion ignores.
  """

  count: jax.Array
  params: Params
  updates: Updates
  diff_params_memory: Params
  diff_updates_memory: Params
  weights_memory: jax.Array


def _stacked_sharding(p: Any) -> NamedSharding | None:
  """The sharding of a ``[memory_size, *p.shape]`` memory of a sharded parameter: the memory axis
  replicated, the parameter's axes split as the parameter's are (so each device holds the
  curvature pairs of its own shard and the two-loop recursion needs no gathering). None where the
  parameter has no named sharding (a tracer, one device): the compiler places it."""
  if isinstance(p, jax.core.Tracer):
    # Under explicit mesh axes the sharding is part of the traced type; otherwise there is none
    # (the compiler places the value).
    sharding = getattr(jax.typeof(p), "sharding", None)
    if not isinstance(sharding, NamedSharding) or all(axis is None for axis in sharding.spec):
      return None
  else:
    sharding = getattr(p, "sharding", None)
  if not isinstance(sharding, NamedSharding):
    return None
  return NamedSharding(sharding.mesh, PartitionSpec(None, *sharding.spec))


def _slot(memory: Any, index: jax.Array) -> Any:
  return tree_map(lambda x: x[index], memory)


def _axpy(owner: str, x: Any, a: jax.Array, y: Any) -> Any:
  """``x + a y`` leaf by leaf, in ``x``'s dtype (the recursion's compute dtype)."""
  (out,) = leafwise(owner, lambda k, xi, yi: xi + k.a * yi, x, reads=(y,),
                    scalars=Scalars(a=a))
  return out


def _two_loop(updates, diff_params, diff_updates, rho, gamma, oldest, stat, owner="scale_by_lbfgs"):
  """``H_k u`` by Nocedal & Wright's Alg. 7.4; slot ``oldest`` holds the oldest pair."""
  memory_size = rho.shape[0]
  order = (oldest + jnp.arange(memory_size, dtype=jnp.int32)) % memory_size

  def start(u, s):
    # The recursion is a lax.scan carry across whole-tree inner products, so it stays in the
    # compute dtype (at least float32) from here to the end, not in a 16-bit update dtype.
    return u.astype(compute_dtype(u.dtype, s.dtype))

  def newest_to_oldest(q, i):
    alpha = rho[i] * real_vdot(_slot(diff_params, i), q, stat)
    return _axpy(owner, q, -alpha, _slot(diff_updates, i)), alpha

  def oldest_to_newest(r, i_alpha):
    i, alpha = i_alpha
    beta = rho[i] * real_vdot(_slot(diff_updates, i), r, stat)
    return _axpy(owner, r, alpha - beta, _slot(diff_params, i)), None

  q = tree_map(start, updates, diff_params)
  q, alphas = jax.lax.scan(newest_to_oldest, q, order, reverse=True)
  (r,) = leafwise(owner, lambda k, x: k.gamma * x, q, scalars=Scalars(gamma=gamma))
  # H_k^0 = gamma I (N&W Eq. 7.20)
  r, _ = jax.lax.scan(oldest_to_newest, r, (order, alphas))
  # Returned in the incoming updates' dtypes, as before the recursion (one rounding).
  return tree_map(lambda x, u: x.astype(u.dtype), r, updates)


class ScaleByLBFGS(Transformation):
  name = "scale_by_lbfgs"
  elementwise = True
  State = ScaleByLBFGSState
  memory_size: int = static_field(default=10)
  scale_init_precond: bool = static_field(default=True)

  def init_fn(self, params):
    def stacked(p):
      shape, dtype = (self.memory_size, *jnp.shape(p)), accumulator_dtype(p.dtype)
      sharding = _stacked_sharding(p)
      return jnp.zeros(shape, dtype) if sharding is None else jnp.zeros(shape, dtype, device=sharding)

    memory = tree_map(stacked, params)
    return ScaleByLBFGSState(
        count=zero_count(),
        params=zeros_like(params),
        updates=zeros_like(params),
        diff_params_memory=memory,
        diff_updates_memory=tree_map(stacked, params),
        weights_memory=jnp.zeros([self.memory_size], scalar_stat_dtype(params)),
    )

  def update_fn(self, updates, state, params=None, **extra_args):
    if params is None:
      raise TypeError(f"{self.owner}: update() needs `params` (L-BFGS stores parameter differences).")
    stat = state.weights_memory.dtype
    first = state.count == 0
    newest = (state.count - 1) % self.memory_size  # the slot the new pair goes to
    oldest = state.count % self.memory_size

    # The curvature pair s = w_{k+1} - w_k, y = g_{k+1} - g_k (N&W Eq. 7.18), each written in the
    # stored copy's dtype (the memories have it), and the copies of w_{k+1} and g_{k+1}.
    # No pair at the first update: its slot is written with zeros (as Optax does; weight 0 drops it).
    difference = lambda k, new, old: (jnp.where(first, jnp.zeros_like(new), new - old), new)
    s, new_params = self.leafwise(difference, params, state.params, params=state.params)
    y, new_updates = self.leafwise(difference, updates, state.updates, params=state.updates)
    sy, yy = real_vdot(y, s, stat), real_vdot(y, y, stat)
    # Every pair is kept, whatever the sign of its curvature Re<s, y> (the plain two-loop
    # recursion, N&W Alg. 7.4, and Optax): with the default zoom search the curvature condition
    # makes it positive. Without a line search or with backtracking a pair can have Re<s, y> <= 0
    # and H_k is then indefinite; skipping such pairs (N&W Sec. 6.1) is no safer there: the pairs
    # kept after a skip are taken at other points and with gamma = 1 their mix can step far off
    # (Himmelblau from (1, 1), learning rate 1e-3, no line search: (234, 179) with skipping,
    # (1.03, 0.99) with every pair, as Optax). Only an exactly zero Re<s, y> gets weight 0 (it
    # drops out of the recursion: alpha = beta = 0), and so does the first update, with no pair.
    one = jnp.ones([], stat)
    usable = ~first & (sy != 0)
    rho = jnp.where(usable, 1 / jnp.where(usable, sy, one), jnp.zeros_like(sy))
    diff_params = tree_map(lambda m, v: m.at[newest].set(v), state.diff_params_memory, s)
    diff_updates = tree_map(lambda m, v: m.at[newest].set(v), state.diff_updates_memory, y)
    weights = state.weights_memory.at[newest].set(rho)

    if self.scale_init_precond:
      # gamma_k = Re<s, y> / |y|^2 (N&W Eq. 7.20), 1 when y = 0. At the first update, with no pair,
      # scale by min(1, 1/|u|) so the step stays within a unit ball (Optax's choice).
      norm = jnp.sqrt(real_vdot(updates, updates, stat))
      has_y = yy > 0
      gamma = jnp.where(first, jnp.minimum(one, 1 / norm),
                        jnp.where(has_y, sy / jnp.where(has_y, yy, one), one))
    else:
      gamma = one
    direction = _two_loop(updates, diff_params, diff_updates, weights, gamma, oldest, stat, self.owner)
    new_state = ScaleByLBFGSState(
        count=safe_increment(state.count),
        params=new_params,
        updates=new_updates,
        diff_params_memory=diff_params,
        diff_updates_memory=diff_updates,
        weights_memory=weights,
    )
    return direction, new_state


@shared_args
def scale_by_lbfgs(memory_size: int = 10, scale_init_precond: bool = True) -> Transformation:
  """Multiplies the updates by the L-BFGS approximation of the inverse Hessian.

  Keeps the last ``memory_size`` pairs of parameter and update differences and applies
  ``H_k`` by the two-loop recursion, starting from ``H_k^0 = gamma_k I`` with
  ``gamma_k = Re<s, y> / |y|^2`` (or 1 when ``scale_init_precond`` is False; at the first step
  ``min(1, 1/|u|)``). The pair is recorded before preconditioning, so when chained before a line
  search the memory is updated once per accepted step. Returns ``+H_k u``: follow it with a
  negative scaling (``lbfgs`` does).

  Args:
    memory_size: the number of curvature pairs kept (static: it sets the state's shapes).
    scale_init_precond: scale the initial approximation by ``gamma_k``.

  Returns:
    A transformation with ``ScaleByLBFGSState``; it needs ``params`` in ``update``.

  References:
    Nocedal & Wright, "Numerical Optimization" (2nd ed.), 2006, Alg. 7.4 and Eq. 7.20;
    Liu & Nocedal, "On the limited memory BFGS method for large scale optimization", 1989.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> tx = steadax.scale_by_lbfgs(memory_size=3)
    >>> params = jnp.array([1.0, 2.0])
    >>> tx.init(params).diff_params_memory.shape
    (3, 2)
    >>> tx.update(jnp.array([3.0, 4.0]), tx.init(params), params)[0]  # first step: u / |u|
    Array([0.6, 0.8], dtype=float32)
  """
  if not isinstance(memory_size, int) or isinstance(memory_size, bool) or memory_size < 1:
    raise ValueError(f"scale_by_lbfgs: memory_size must be an int >= 1, got {memory_size!r}.")
  return ScaleByLBFGS(memory_size=memory_size, scale_init_precond=bool(scale_init_precond))


@shared_args
def lbfgs(
    learning_rate: ScalarOrSchedule | None = None,
    memory_size: int = 10,
    scale_init_precond: bool = True,
    linesearch: GradientTransformation | None = scale_by_zoom_linesearch(
        max_linesearch_steps=20, initial_guess_strategy="one"),
) -> Chain:
  """L-BFGS with a line search: ``chain(scale_by_lbfgs, scale(-1) or the learning rate, linesearch)``.

  The direction ``-H_k g`` (see ``scale_by_lbfgs``) is scaled by a step size from the line search
  (by default a zoom search for the strong Wolfe conditions starting from 1, which keeps
  ``Re<s, y> > 0`` and so ``H_k`` positive definite). ``update`` needs ``value``, ``grad`` and
  ``value_fn`` (see ``scale_by_zoom_linesearch``); for a deterministic objective,
  ``value_and_grad_from_state`` reuses the value and gradient the search computed. For complex
  parameters pass ``conj(grad)`` as the updates and ``grad``, as for any optimizer.

  Args:
    learning_rate: an optional extra factor (scalar or schedule); None scales by -1 only.
    memory_size: the number of curvature pairs kept.
    scale_init_precond: scale the initial inverse Hessian by ``Re<s, y> / |y|^2``.
    linesearch: the line search (any transformation, or None for none).

  Returns:
    The optimizer; its state is ``(ScaleByLBFGSState, scaling state, line search state)``.

  References:
    Nocedal & Wright, "Numerical Optimization" (2nd ed.), 2006, Alg. 7.4 and 7.5;
    Liu & Nocedal, "On the limited memory BFGS method for large scale optimization", 1989.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> def f(w): return jnp.sum((w - jnp.array([1.0, -2.0])) ** 2 * jnp.array([1.0, 10.0]))
    >>> opt = steadax.lbfgs()
    >>> w = jnp.zeros(2); state = opt.init(w)
    >>> value_and_grad = steadax.value_and_grad_from_state(f)
    >>> for _ in range(6):
    ...   value, grad = value_and_grad(w, state=state)
    ...   updates, state = opt.update(grad, state, w, value=value, grad=grad, value_fn=f)
    ...   w = steadax.apply_updates(w, updates)
    >>> bool(f(w) < 1e-8)
    True
  """
  if learning_rate is None:
    scaling = scale(-1.0)
  else:
    check_schedule_or_scalar("lbfgs", "learning_rate", learning_rate)
    scaling = scale_by_learning_rate(learning_rate)
  return chain(
      scale_by_lbfgs(memory_size=memory_size, scale_init_precond=scale_init_precond),
      scaling,
      identity() if linesearch is None else linesearch,
  )
