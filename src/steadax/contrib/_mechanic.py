"""Mechanic (Cutkosky, Defazio & Mehta, "Mechanic: A Learning Rate Tuner", NeurIPS 2023).

Wraps a base optimizer and learns a scalar scale ``S = Σ_i s_i`` of its accumulated updates ``Δ``
with coin-betting (one bettor per ``β_i = 1 - 0.1^i``), so that ``x_t = x_0 + S_t Δ_t``
(Algorithm 1, the memory-efficient form that recomputes ``Δ_{t-1} = (x_0 - x_t) / (S_{t-1} + eps)``
from the parameters, with the reward clipping of the reference implementation).

The bettors' statistics ``r, m, v, s`` (each of shape ``[num_betas]``) take one dtype fixed at init:
the widest floating dtype among the parameters, at least float32. In Optax 0.2.8 a mixed
float32/bfloat16 tree makes the first update fail (``lax.clamp`` on bfloat16 state and a float32
inner product). Complex parameters use the real inner product ``Re<g, Δ>``. The bettors' signal
``h`` grows like the square of the gradients; each bettor clamps it where its discounted sum of
squares ``v`` would leave the statistics dtype's range (``|h|`` above 1.3e16 to 4e18 in float32),
so huge gradients (1e15) leave the statistics finite where Optax's ``v`` turns infinite.
"""

import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from .._core._adapters import as_inner
from .._core._docs import shared_args
from .._core._interface import GradientTransformation
from .._core._transformation import Transformation
from .._core._checks import check_nonnegative, check_positive
from .._core._module import child_field, hyper_field, static_field
from .._core._leafwise import Scalars, tree_reduce
from .._core._policy import cast, hyper, safe_increment, scalar_stat_dtype, zero_count
from .._core._roles import COUNTER, INNER, OTHER, state_roles
from .._core._tree import copy_like
from ._reductions import real_inner, sq_norm
from .._core._types import Params

__all__ = ["MechanicState", "mechanize"]


# Roles (the dtype policy, _core/_roles.py): x0 is a copy of the parameters (in their dtype: nothing
# in it is scaled by the learned S), so OTHER; r, m, v, s are [num_betas] vectors in the statistics
# dtype, which no role describes yet (SCALAR is shape []): OTHER, checked for drift only. The
# bettors' statistics live in at least float32, so the float16 underflow of d-scaled accumulators
# does not arise here.
@state_roles(base_optimizer_state=INNER, count=COUNTER, r=OTHER, m=OTHER, v=OTHER, s=OTHER, x0=OTHER)
class MechanicState(NamedTuple):
  """State of ``mechanize`` (Optax's field names).

  Attributes:
    base_optimizer_state: the wrapped optimizer's state.
    count: int32 number of updates so far.
    r: the bettors' clipped rewards, shape ``[num_betas]``.
    m: the bettors' maximal ``|h|``, shape ``[num_betas]``.
    v: the bettors' discounted sums of ``h^2``, shape ``[num_betas]``.
    s: the bettors' scales, shape ``[num_betas]`` (their sum scales the base updates).
    x0: the reference point (the parameters seen at the first update).
  """

  base_optimizer_state: Params
  count: jax.Array
  r: jax.Array
  m: jax.Array
  v: jax.Array
  s: jax.Array
  x0: Params


class Mechanize(Transformation):
  name = "mechanize"
  elementwise = "children"
  State = MechanicState
  base_optimizer: Any = child_field()
  weight_decay: Any = hyper_field(0.01, check=check_nonnegative)
  eps: Any = hyper_field(1e-08, check=check_nonnegative)
  s_init: Any = hyper_field(1e-06, check=check_positive)
  num_betas: int = static_field(default=6)

  def __post_init__(self):
    n = self.num_betas
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
      raise ValueError(f"mechanize: num_betas must be a positive integer, got {n!r}.")

  def init_fn(self, params):
    stat = scalar_stat_dtype(params)
    n = self.num_betas
    return MechanicState(
        base_optimizer_state=self.base_optimizer.init(params),
        count=zero_count(),
        r=jnp.zeros([n], stat),
        m=jnp.zeros([n], stat),
        v=jnp.zeros([n], stat),
        s=jnp.full([n], hyper(self.s_init, stat), stat),
        x0=copy_like(params),
    )

  def update_fn(self, updates, state, params=None, **extra_args):
    if params is None:
      raise ValueError("mechanize: `params` must be passed to update().")
    stat = state.s.dtype
    base_updates, base_state = self.base_optimizer.update(
        updates, state.base_optimizer_state, params, **extra_args)
    # Training loops often load pre-trained weights after init: the reference point is the
    # parameters of the first update, not those given to init.
    x0 = jax.lax.cond(state.count == 0, lambda: params, lambda: state.x0)
    eps = hyper(self.eps, stat)
    s_sum = jnp.sum(state.s)

    # The four whole-tree reductions, in the statistics dtype; h = Re<g + c p, x0 - p> / (S + eps)
    # with c the decay factor.
    trees = (updates, params, x0)
    g_norm = _norm(updates, params, x0, which=0, stat=stat)
    p_norm = _norm(updates, params, x0, which=1, stat=stat)
    # Optax's arithmetic: the gradient with weight decay g + c p, c = wd S |g| / (|p| + eps), and
    # its inner product with Δ = (x0 - p) / (S + eps).
    with jax.numpy_dtype_promotion("standard"):
      decay = cast(self.weight_decay * s_sum * g_norm / (p_norm + self.eps), stat)
    old_scale = s_sum + eps
    h_scalars = Scalars(c=decay, old_scale=old_scale)
    raw_h = tree_reduce(lambda k, g, p, x: real_inner(g + k.c * p, (x - p) / k.old_scale), stat, *trees,
                        scalars=h_scalars)
    betas64 = np.asarray([1.0 - 0.1**i for i in range(1, self.num_betas + 1)])
    betas = betas64.astype(stat)
    # h grows like |g|^2 (Δ is made of base updates) and v sums h^2 / (1 - β^2): in float32 it
    # overflows once |h| passes ~1e16 (1e15 gradients, in bfloat16 or float32, give |h| ~ 1e30),
    # and an infinite v sets s to 0 for good. h is clamped to the largest magnitude whose
    # discounted sum of squares stays below a quarter of the dtype's largest value for every
    # bettor, so their m, v and r follow one consistent signal (s is invariant to the scale of h).
    # Below the bound (1.3e16 in float32) nothing changes.
    # One bound for all the bettors (the smallest), so h stays the scalar Optax's arithmetic uses.
    bound = (np.sqrt(np.finfo(stat).max * (1.0 - betas64**2)) / 2).astype(stat).min()
    h = jnp.clip(raw_h, -bound, bound)

    clipped_h = jnp.clip(h, -state.m, state.m)
    m = jnp.maximum(betas * state.m, jnp.abs(h) + eps)
    v = betas**2 * state.v + h**2
    r = betas * state.r + clipped_h * state.s
    with jax.numpy_dtype_promotion("standard"):
      wealth = cast((self.s_init / self.num_betas) * m + jnp.maximum(0.0, r), stat)
      s = cast(wealth / (jnp.sqrt(v) + self.eps), stat)
    scale = jnp.sum(s)
    scalars = Scalars(new_scale=scale, old_scale=old_scale)

    def leaf(k, u, p, x):
      delta = (x - p) / k.old_scale - u
      return x - k.new_scale * delta - p

    out, = self.leafwise(leaf, base_updates, params=params, reads=(params, x0), scalars=scalars)
    return out, MechanicState(base_optimizer_state=base_state, count=safe_increment(state.count),
                              r=r, m=m, v=v, s=s, x0=x0)


def _norm(updates: Any, params: Any, x0: Any, *, which: int, stat: Any) -> jax.Array:
  """The Euclidean norm of the updates (``which=0``) or the parameters (1), in ``stat``.

  The sum of squares overflows once an element passes ~1e19 in float32 (then ``decay`` was inf
  and, times a zero weight decay, NaN for good). Only then, behind a ``lax.cond`` (nothing extra
  runs on finite sums), is it summed again with every element divided by the largest magnitude.
  """
  trees = (updates, params, x0)
  sq = tree_reduce(lambda k, g, p, x: sq_norm((g, p)[which]), stat, *trees)

  def rescaled():
    leaves = [leaf for leaf in jax.tree_util.tree_leaves(trees[which])
              if jnp.issubdtype(jnp.result_type(leaf), jnp.inexact)]
    peaks = [jnp.max(jnp.abs(leaf), initial=0).astype(stat) for leaf in leaves]  # 0-size leaves
    big = functools.reduce(jnp.maximum, peaks, jnp.zeros([], stat))
    scale = jnp.where(big > 0, big, jnp.ones([], stat))

    def term(k, g, p, x):
      leaf = (g, p)[which]
      return sq_norm(leaf * (1 / scale).astype(leaf.dtype))

    return scale * jnp.sqrt(tree_reduce(term, stat, *trees))

  return jax.lax.cond(jnp.isfinite(sq), lambda: jnp.sqrt(sq), rescaled)


@shared_args
def mechanize(
    base_optimizer: GradientTransformation,
    weight_decay: ArrayLike = 1e-2,
    eps: ArrayLike = 1e-8,
    s_init: ArrayLike = 1e-6,
    num_betas: int = 6,
) -> Transformation:
  """Learns the scale of ``base_optimizer``'s updates (Mechanic's learning-rate tuner).

  Give the base optimizer a learning rate (or schedule peak) of 1; Mechanic learns the multiplier.

  Args:
    base_optimizer: the optimizer whose updates are scaled (any transformation).
    weight_decay: Mechanic's own weight decay, added to the gradients it bets with (independent of
      any weight decay inside ``base_optimizer``).
    eps: numerical stability term.
    s_init: initial total scale (split over the bettors), positive.
    num_betas: number of bettors, with ``β_i = 1 - 0.1^i`` for ``i = 1 .. num_betas`` (static).

  Returns:
    A transformation with ``MechanicState``; ``r, m, v, s`` have the widest floating dtype among
    the parameters (at least float32) in both x64 modes.

  References:
    Cutkosky, Defazio & Mehta, "Mechanic: A Learning Rate Tuner", NeurIPS 2023 (Algorithm 1).

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> opt = steadax.contrib.mechanize(steadax.sgd(1.0), num_betas=3)
    >>> params = {"w": jnp.ones(2, jnp.bfloat16), "b": jnp.ones(1)}
    >>> state = opt.init(params)
    >>> updates, state = opt.update(params, state, params)
    >>> updates["w"].dtype, state.s.dtype, state.s.shape
    (dtype(bfloat16), dtype('float32'), (3,))
  """
  if base_optimizer is None:
    raise ValueError("mechanize: base_optimizer is required.")
  if isinstance(num_betas, bool) or not isinstance(num_betas, (int, np.integer)) or num_betas < 1:
    raise ValueError(f"mechanize: num_betas must be a positive integer, got {num_betas!r}.")
  return Mechanize(as_inner(base_optimizer, "mechanize", "base_optimizer"), weight_decay, eps,
                   s_init, num_betas=int(num_betas))
