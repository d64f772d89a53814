"""PSGD with a Kronecker-factored preconditioner fitted on the Lie group of triangular matrices.

For a tensor ``G`` with dimensions ``d_1 ... d_k``, the preconditioner is ``P = P_1 (x) ... (x) P_k``
with ``P_i = Q_i^H Q_i``; ``Q_i`` is upper triangular (dense) for moderate dimensions and diagonal
otherwise. PSGD fits ``P`` to the criterion ``E[h^H P h + v^H P^{-1} v]`` with ``v`` a standard normal
probe and ``h`` the (momentum) gradient, whose minimiser ``P = E[h h^H]^{-1/2}`` whitens the
gradients: ``P E[h h^H] P = I``. Each update moves ``Q_i`` along the group,
``Q_i <- Q_i - lr / ||grad_i|| * triu(A_i A_i^H - B_i B_i^H) Q_i`` with ``A = Q G`` and
``B = Q^{-H} V`` contracted over the other dimensions, so ``Q_i`` stays triangular and invertible.

This is the ``kron`` variant of psgd_jax / kron_torch: the preconditioner is fitted on the momentum,
updated with a probability that anneals from 1 to 0.03, balanced between factors now and then, and
the preconditioned update passes a trust region (global RMS at most 1, then each entry in [-1, 1]).

References:
  Li, "Preconditioned Stochastic Gradient Descent", IEEE TNNLS 29(5), 2018 (criterion eq. 9-10,
  Kronecker-product preconditioners §IV.B).
  Li, "Preconditioner on Matrix Lie Group for SGD", ICLR 2019 (the triangular-group update, eq. 7).
"""

import functools
import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike, DTypeLike

from .._core._transformation import Transformation
from .._core._checks import check_nonnegative, check_positive, check_range
from .._core._module import Module, hyper_field, static_field
from .._core._leafwise import Scalars, place_kept_axes, place_like, split_record
from .._core._policy import accumulator_dtype, compute_dtype, hyper, real_dtype, safe_increment, zero_count
from .._core._roles import COUNTER, OTHER, accumulator, role_zeros, state_roles
from .._core._tree import is_none, l2_norm
from ._adam import one_minus_pow
from ._matrix import (constrain, distribution, from_owners, layout_key, on_owners, place_statistic, refresh_cond,
                      replicate_whole, shape_groups, sharding_of, stack, to_owners, unstack,
                      upper_solve_h)
from ._moments import abs_sq
from ._noise import _typed_key
from ._scaling import value_at
from .._core._types import ArrayTree, ScalarOrSchedule, Schedule, Updates

__all__ = ["ScaleByPsgdKronState", "scale_by_psgd_kron", "psgd_update_probability"]


@state_roles(count=COUNTER, rng_key=OTHER, mu=accumulator("mu_dtype"), preconditioner=OTHER)
class ScaleByPsgdKronState(NamedTuple):
  """State of ``scale_by_psgd_kron``.

  Attributes:
    count: int32 step count.
    rng_key: typed PRNG key (probes, update and balancing draws).
    mu: momentum of the gradients.
    preconditioner: per parameter, a tuple with one factor per dimension: an upper-triangular
      ``(d, d)`` matrix or a ``(d,)`` diagonal (scalars get one ``(1,)`` diagonal).
  """

  count: jax.Array
  rng_key: jax.Array
  mu: Updates
  preconditioner: ArrayTree


class _AnnealedProbability(Module):
  """``clip(max_prob * exp(-decay * (count - flat_start)), min_prob, max_prob)`` in float32."""

  max_prob: Any = hyper_field(1.0)
  min_prob: Any = hyper_field(0.03)
  decay: Any = hyper_field(0.001)
  flat_start: Any = hyper_field(500)

  def __call__(self, count: ArrayLike) -> jax.Array:
    f32 = np.dtype(jnp.float32)
    steps = jnp.asarray(count).astype(f32) - hyper(self.flat_start, f32)  # the int32 count as a float exponent
    value = hyper(self.max_prob, f32) * jnp.exp(-hyper(self.decay, f32) * steps)
    return jnp.clip(value, hyper(self.min_prob, f32), hyper(self.max_prob, f32))


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
  owner = "psgd_update_probability"
  check_range(owner, "max_prob", max_prob, 0.0, 1.0)
  check_range(owner, "min_prob", min_prob, 0.0, 1.0)
  check_nonnegative(owner, "decay", decay)
  return _AnnealedProbability(max_prob, min_prob, decay, flat_start)


def _dense_dims(shape: tuple[int, ...], max_size: int, min_ndim: int) -> tuple[bool, ...]:
  if not shape:
    return (False,)
  return tuple(len(shape) >= min_ndim and 1 < d <= max_size for d in shape)


def _mode_product(m: jax.Array, x: jax.Array, axis: int) -> jax.Array:
  """``m`` applied to dimension ``axis`` of ``x``: ``y[.., i, ..] = sum_j m[i, j] x[.., j, ..]``."""
  return jnp.moveaxis(jnp.tensordot(m, x, axes=([1], [axis])), 0, axis)


def _diag_product(d: jax.Array, x: jax.Array, axis: int) -> jax.Array:
  shape = [1] * x.ndim
  shape[axis] = -1
  return x * d.reshape(shape)


def _unfold(x: jax.Array, axis: int) -> jax.Array:
  return jnp.moveaxis(x, axis, 0).reshape(x.shape[axis], -1)


def _mode_solve_h(q: jax.Array, x: jax.Array, axis: int) -> jax.Array:
  """``Q^{-H}`` applied to dimension ``axis`` of ``x`` (a triangular solve, as cheap as a matmul)."""
  moved = jnp.moveaxis(x, axis, 0)
  solved = upper_solve_h(q, moved.reshape(x.shape[axis], -1))
  return jnp.moveaxis(solved.reshape(moved.shape), 0, axis)


def _norm_lower_bound(h: jax.Array, tiny: Any) -> jax.Array:
  """A cheap lower bound of the spectral norm of a Hermitian matrix: ``||H c|| / ||c||`` for its
  column ``c`` of largest norm (one power-iteration step from the best coordinate vector)."""
  scale = jnp.max(jnp.abs(h))
  hn = h / jnp.where(scale > 0, scale, jnp.ones_like(scale))
  column = jnp.take(hn, jnp.argmax(jnp.sum(abs_sq(hn), axis=0)), axis=1)
  column = column / jnp.maximum(jnp.linalg.norm(column), tiny)
  return scale * jnp.linalg.norm(hn @ column)


def _fit_factors(factors, dense, g, v, lr, tiny):
  """One Lie-group step of every factor towards whitening ``g`` (probe ``v``).

  Li 2019, eq. 7 on the group of triangular matrices. All inputs are in one compute dtype (dense
  factors complex for complex parameters, diagonal ones real) and this runs under standard
  promotion, so real step sizes and diagonals scale complex tensors as the maths says.
  """
  a, b = g, v
  for axis, (q, is_dense) in enumerate(zip(factors, dense)):
    if is_dense:
      a = _mode_product(q, a, axis)
      b = _mode_solve_h(q, b, axis)
    else:
      a = _diag_product(q, a, axis)
      b = _diag_product(1 / q, b, axis)
  new = []
  for axis, (q, is_dense) in enumerate(zip(factors, dense)):
    if is_dense:
      a_mat, b_mat = _unfold(a, axis), _unfold(b, axis)
      t1 = a_mat @ jnp.conj(a_mat).T
      t2 = b_mat @ jnp.conj(b_mat).T
      step = lr / jnp.maximum(_norm_lower_bound(t1 + t2, tiny), tiny)
      new.append(q - step * (jnp.triu(t1 - t2) @ q))
    else:
      others = tuple(i for i in range(a.ndim) if i != axis)
      t1 = jnp.sum(abs_sq(a), axis=others)
      t2 = jnp.sum(abs_sq(b), axis=others)
      step = lr / jnp.maximum(jnp.max(t1 + t2), tiny)
      new.append(q - step * (t1 - t2) * q)
  return tuple(new)


def _balance(factors, do_balance):
  """Rescale the factors to equal largest entries (their product is unchanged): keeps them away
  from under- and overflow in low precision."""
  if len(factors) < 2:
    return factors
  # On the stored factors: the norms in the factors' real compute dtype (float32 for 16- and 32-bit
  # factors, float64 for float64 ones, whose product drifted by ~1e-7 per balance when this was
  # float32); the rescaling is cast to the factor's stored dtype.
  rdt = real_dtype(compute_dtype(*[q.dtype for q in factors]))
  norms = [jnp.max(jnp.abs(q)).astype(rdt) for q in factors]
  norms = [jnp.where(n > 0, n, jnp.ones_like(n)) for n in norms]
  log_mean = sum(jnp.log(n) for n in norms) / len(norms)
  return tuple(q * jnp.where(do_balance, jnp.exp(log_mean) / n, jnp.ones_like(n)).astype(q.dtype)
               for q, n in zip(factors, norms))


def _precondition(factors, dense, g):
  for axis, (q, is_dense) in enumerate(zip(factors, dense)):
    if is_dense:
      g = _mode_product(jnp.conj(q).T @ q, g, axis)
    else:
      g = _diag_product(q * q, g, axis)
  return g


def _place_diagonal(param: Any, factor: jax.Array, axis: int) -> jax.Array:
  """A diagonal factor of axis ``axis`` laid out as that axis of the parameter (a scalar's ``(1,)``
  factor is not placed)."""
  return place_kept_axes(param, factor, (axis,)) if np.ndim(param) else factor


def _to(x: jax.Array, dtype: Any) -> jax.Array:
  """``x`` in ``dtype``: the cast in to, and out of, PSGD's per-parameter matrix part (see
  ``ScaleByPsgdKron.update_fn`` for why leafwise cannot do it there)."""
  return x if x.dtype == dtype else x.astype(dtype)


def _check_key(owner: str, name: str, key: Any) -> None:
  try:
    _typed_key(owner, key)
  except TypeError as error:
    if str(error).startswith(owner):
      raise
    raise TypeError(f"{owner}: {name} must be a jax.random.key, raw uint32[2] key data or an integer "
                    f"seed, got {key!r}.") from error


def _check_non_negative_int(owner: str, name: str, value: Any) -> None:
  if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < 0:
    raise ValueError(f"{owner}: {name} must be a non-negative int, got {value!r}.")


# At b1 = 1 the bias correction divides by zero.
_check_b1 = lambda owner, name, value: check_range(owner, name, value, 0.0, 1.0, high_open=True)
_check_probability = lambda owner, name, value: check_range(owner, name, value, 0.0, 1.0)


class ScaleByPsgdKron(Transformation):
  name = "scale_by_psgd_kron"
  State = ScaleByPsgdKronState
  b1: Any = hyper_field(0.9, check=_check_b1)
  # None is the annealed psgd_update_probability() (the factory fills it in); schedules pass.
  preconditioner_update_probability: Any = hyper_field(None, check=_check_probability)
  preconditioner_lr: Any = hyper_field(0.1, check=check_positive)
  preconditioner_init_scale: Any = hyper_field(1.0, check=check_positive)
  key: Any = hyper_field(0, check=_check_key)
  max_size_triangular: int = static_field(default=8192)
  min_ndim_triangular: int = static_field(default=2)
  mu_dtype: Any = static_field(default=None)
  preconditioner_dtype: Any = static_field(default=None)

  def __post_init__(self):
    # Static fields have no hyper_field check: validated here, so the class, the factory and
    # .replace all raise.
    _check_non_negative_int(self.owner, "max_size_triangular", self.max_size_triangular)
    _check_non_negative_int(self.owner, "min_ndim_triangular", self.min_ndim_triangular)

  def _dense(self, shape):
    return _dense_dims(tuple(shape), self.max_size_triangular, self.min_ndim_triangular)

  def _factor_dtype(self, param_dtype):
    return accumulator_dtype(compute_dtype(param_dtype), self.preconditioner_dtype)

  def init_fn(self, params):
    def make(x):
      shape = tuple(np.shape(x)) or (1,)
      fdt = self._factor_dtype(x.dtype)
      rdt = real_dtype(fdt)
      # The scale is spread evenly over the factors (computed in float32 at least, then cast to
      # the factors' declared dtype: preconditioner_dtype may be 16-bit).
      wide = compute_dtype(rdt)
      scale = hyper(self.preconditioner_init_scale, wide) ** (1.0 / len(shape))
      # Dense factors are divided across devices like their parameter under explicit mesh axes
      # (``place_statistic``; replicated otherwise, fitted on the gathered momentum); a diagonal
      # factor lives on its axis and takes that axis' sharding (a vector's is the parameter's own).
      return tuple(
          place_statistic(x, (scale * jnp.eye(d, dtype=wide)).astype(fdt)) if is_dense
          else _place_diagonal(x, (scale * jnp.ones([d], wide)).astype(rdt), axis)
          for axis, (d, is_dense) in enumerate(zip(shape, self._dense(np.shape(x)))))

    return ScaleByPsgdKronState(
        count=zero_count(), rng_key=_typed_key(self.name, self.key),
        mu=role_zeros(params, accumulator("mu_dtype"), self),
        preconditioner=jax.tree_util.tree_map(make, params))

  def update_fn(self, updates, state, params=None, **extra_args):
    count = safe_increment(state.count)
    # Every random draw of a step comes from three calls (a split, two uniforms, the probes): on a
    # CPU each call is a kernel that takes about half a second to compile.
    rng_key, k_draws, k_probe = jax.random.split(state.rng_key, 3)
    f32 = np.dtype(jnp.float32)
    probability = value_at(self.preconditioner_update_probability, state.count)
    draws = jax.random.uniform(k_draws, (2,), f32)
    do_update = draws[0] < hyper(probability, f32)
    do_balance = draws[1] < np.float32(0.01)

    @functools.cache  # once per real compute dtype
    def scalars(rdt):
      return Scalars(b1=hyper(self.b1, rdt), c1=one_minus_pow(self.b1, count, rdt),
                     lr=hyper(self.preconditioner_lr, rdt), tiny=np.asarray(jnp.finfo(rdt).tiny, rdt),
                     damping=np.asarray(np.sqrt(np.finfo(np.float32).eps), rdt))

    treedef = jax.tree_util.tree_structure(updates, is_leaf=is_none)
    grads = treedef.flatten_up_to(updates)
    mus = treedef.flatten_up_to(state.mu)
    factors = treedef.flatten_up_to(state.preconditioner)
    live = [i for i, g in enumerate(grads) if g is not None]

    # The per-parameter matrix part. leafwise cannot carry it: the factors do not mirror the
    # parameters, and the preconditioned momentum must stay in the compute dtype until the
    # whole-tree trust region below. So it casts in once (``_to``) to the compute dtype the
    # policy gives (the promotion of gradient, momentum and factors, at least float32) and runs
    # under standard promotion (real diagonals and step sizes on complex tensors), as leafwise does.
    new_mus, momenta, gathered = list(mus), {}, set()
    with jax.numpy_dtype_promotion("standard"):
      for i in live:
        g, m = grads[i], mus[i]
        cdt = compute_dtype(g.dtype, m.dtype, factors[i][0].dtype)
        k = scalars(real_dtype(cdt))
        m_new = k.b1 * _to(m, cdt) + (1 - k.b1) * _to(g, cdt)
        new_mus[i] = place_like(m, _to(m_new, m.dtype))
        h = m_new / k.c1
        momenta[i] = h.reshape(np.shape(g) or (1,))

      def traced_scalars(h):
        """The traced values of the scalars of ``h``'s compute dtype: an argument of the fit, which
        may run in a manual region (``batched``); ``scalars`` is cached, so the record is built here."""
        return split_record(scalars(real_dtype(h.dtype)))[0]

      def in_compute(fs, h):
        return tuple(_to(q, h.dtype if q.ndim == 2 else real_dtype(h.dtype)) for q in fs)

      # Shape groups (issue 22): parameters whose momenta and factors agree in shape, dtype and
      # layout are fitted and preconditioned as one batch (vmapped over the stacked group), so the
      # program grows with the number of distinct shapes, not with depth.
      keys = [None if i not in momenta or momenta[i].size == 0 else
              (tuple(np.shape(grads[i])), np.dtype(momenta[i].dtype), layout_key(momenta[i]),
               tuple((tuple(q.shape), np.dtype(q.dtype), layout_key(q)) for q in factors[i]))
              for i in range(len(grads))]
      groups = shape_groups(keys)
      for members in groups:
        i = members[0]
        if any(self._dense(np.shape(grads[i]))) and (len(members) == 1 or distribution(momenta[i]) is None):
          # A dense factor contracts its axis with the momentum in every product: the momentum is
          # gathered once (one all-gather when sharded) and the preconditioned update put back in
          # the parameter's layout afterwards (a local slice). A group of several parameters
          # sharded over explicit mesh axes runs in the owner layout instead (``batched``).
          for j in members:
            (momenta[j],), _ = replicate_whole(momenta[j])
            gathered.add(j)
      # The probes of a step are one normal draw per real compute dtype, laid out group after group
      # (the groups of ``shape_groups(keys, grouping=True)``, whether or not grouping is on): a
      # group's probes are one contiguous block, so the per-parameter path draws the same numbers.
      # A complex probe takes two real entries (real and imaginary parts, each of variance 1/2).
      probe_at, probe_sizes = {}, {}
      for i in (i for members in shape_groups(keys, grouping=True) for i in members):
        rdt = np.dtype(real_dtype(momenta[i].dtype))
        size = momenta[i].size * (2 if jnp.iscomplexobj(momenta[i]) else 1)
        probe_at[i] = (rdt, probe_sizes.get(rdt, 0))
        probe_sizes[rdt] = probe_sizes.get(rdt, 0) + size

      def owners(members):
        """The group's Distribution when it runs in the owner layout (see ``batched``), else None."""
        i = members[0]
        if i in gathered or not any(self._dense(np.shape(grads[i]))):
          return None
        return distribution(momenta[i])

      # Under explicit mesh axes the probe draws are generated divided across the devices (threefry
      # is partitionable: the numbers do not depend on the layout), each group's block then taking
      # its owner layout: every device draws an eighth, not all of it.
      divided = {owners(members) for members in groups} - {None}
      draw_dist = divided.pop() if len(divided) == 1 else None

      def placed(x, dist, axis_sharded):
        """``x`` replicated, or sharded over ``dist`` along its first axis (when it divides)."""
        spec = (dist.spec_entry(),) if axis_sharded and x.shape[0] % dist.size == 0 else ()
        return constrain(x, dist.sharding(*spec), dist.auto)

      def probes(draws, members):
        """The members' probes, stacked: one slice of their dtype's draw."""
        h = momenta[members[0]]
        rdt, start = probe_at[members[0]]
        n, width = len(members), 2 if jnp.iscomplexobj(h) else 1
        block = jax.lax.slice_in_dim(draws[rdt], start, start + n * h.size * width)
        shape = (n, *h.shape, 2) if width == 2 else (n, *h.shape)
        if draw_dist is not None:
          mine = owners(members) == draw_dist
          block = placed(block, draw_dist, mine)
          target = draw_dist.sharding(draw_dist.spec_entry()) if mine and n % draw_dist.size == 0 else (
              draw_dist.sharding())
          block = constrain(block.reshape(shape), target, True) if draw_dist.auto else (
              block.reshape(shape, out_sharding=target))
        else:
          block = block.reshape(shape)
        if width == 2:
          pairs = block * np.asarray(np.sqrt(0.5), rdt)
          block = jax.lax.complex(pairs[..., 0], pairs[..., 1])
        return block

      def batched(fn, members, *columns, stacked=(), shared=(), out_like=None):
        """``fn(shared, *inputs)`` on each member's inputs (``columns``: one list per argument,
        indexed by member; then ``stacked``: arguments already stacked over the group), as one
        vmapped call over the stacked group; the per-member results, in order. ``shared``: the
        traced values ``fn`` reads, passed rather than closed over. A group with dense factors
        whose momenta are sharded over explicit mesh axes runs in the owner layout: each device
        fits and applies the factors of its own share of the members (``_matrix.on_owners``), and
        each result takes the layout of the matching leaf of ``out_like`` (a member's)."""
        i = members[0]
        dist = None if i in gathered or not any(self._dense(np.shape(grads[i]))) else distribution(momenta[i])
        if dist is None and i in gathered:
          # Dense factors divided across devices (``place_statistic``) are gathered with their
          # momentum; the fitted ones go back to their layout (``place_like`` in ``fit``).
          columns = [{j: tuple(replicate_whole(q)[0][0] if q.ndim == 2 else q for q in column[j])
                      if isinstance(column[j], tuple) else column[j] for j in members} for column in columns]
        if len(members) == 1 and dist is None:
          return [fn(shared, *(column[i] for column in columns), *(x[0] for x in stacked))]
        inputs = [jax.tree_util.tree_map(lambda *xs: stack(xs), *[column[j] for j in members])
                  for column in columns]
        if dist is None:
          result = jax.vmap(lambda *xs: fn(shared, *xs))(*inputs, *stacked)
          leaves, tree = jax.tree_util.tree_flatten(result)
        else:
          flat, in_tree = jax.tree_util.tree_flatten([*inputs, *stacked])
          layouts, tree = jax.tree_util.tree_flatten(jax.tree_util.tree_map(sharding_of, out_like))
          blocks = on_owners(lambda sh, *xs: jax.tree_util.tree_leaves(jax.vmap(lambda *ys: fn(sh, *ys))(
              *jax.tree_util.tree_unflatten(in_tree, list(xs)))), dist, shared, *[to_owners(x, dist) for x in flat])
          leaves = [from_owners(x, len(members), layout) for x, layout in zip(blocks, layouts)]
        split = [unstack(x, len(members)) for x in leaves]
        return [tree.unflatten([s[t] for s in split]) for t in range(len(members))]

      def fit_one(shared, fs, h, probe, dense):
        balance, values = shared
        k = split_record(scalars(real_dtype(h.dtype)))[1](values)
        fs = in_compute(_balance(fs, balance), h)
        # A little noise keeps A A^H invertible when the momentum is (nearly) rank deficient.
        damped = h + k.damping * jnp.mean(jnp.abs(h)) * probe
        return _fit_factors(fs, dense, damped, probe, k.lr, k.tiny)

      def draw(key, size, rdt):
        """One normal draw, generated divided across ``draw_dist``'s devices when it is set."""
        if draw_dist is None or size % draw_dist.size:
          return jax.random.normal(key, (size,), rdt)
        target = draw_dist.sharding(draw_dist.spec_entry())
        if draw_dist.auto:  # a constraint: the partitioner divides the draw itself
          return constrain(jax.random.normal(key, (size,), rdt), target, True)
        return jax.random.normal(key, (size,), rdt, out_sharding=target)

      def fit(all_factors):
        probe_keys = jax.random.split(k_probe, len(probe_sizes)) if len(probe_sizes) > 1 else [k_probe]
        draws = {rdt: draw(key, size, rdt) for key, (rdt, size) in zip(probe_keys, probe_sizes.items())}
        out = list(all_factors)
        for members in groups:
          dense = self._dense(np.shape(grads[members[0]]))
          fitted = batched(lambda sh, fs, h, probe: fit_one(sh, fs, h, probe, dense), members, all_factors,
                           momenta, stacked=(probes(draws, members),), out_like=all_factors[members[0]],
                           shared=(do_balance, traced_scalars(momenta[members[0]])))
          for i, new in zip(members, fitted):
            # Each factor keeps its layout (both branches of the cond must agree on it).
            out[i] = tuple(place_like(old, _to(q, old.dtype)) for q, old in zip(new, all_factors[i]))
        return out

      fitted = refresh_cond(do_update, lambda: fit(list(factors)), list(factors))
      # The factors keep their layout from step to step (under automatic mesh axes the compiler
      # would otherwise choose one for the cond's result).
      factors = [fs if i not in momenta else tuple(place_like(o, n) for o, n in zip(fs, new))
                 for i, (fs, new) in enumerate(zip(factors, fitted))]

      preconditioned = {}
      for i in live:
        if momenta[i].size == 0:
          pre = momenta[i].reshape(np.shape(grads[i]))
          preconditioned[i] = place_like(grads[i], pre) if i in gathered else pre
      for members in groups:
        dense = self._dense(np.shape(grads[members[0]]))
        pres = batched(lambda sh, fs, h: _precondition(in_compute(fs, h), dense, h), members, factors,
                       momenta, out_like=momenta[members[0]])
        # Back in the layout of the gradient (a step input; the gathered momentum is not, and under
        # automatic axes the owner layout's result is the compiler's to place). Decided per group.
        back = members[0] in gathered or owners(members) is not None
        for i, pre in zip(members, pres):
          pre = pre.reshape(np.shape(grads[i]))
          preconditioned[i] = place_like(grads[i], pre) if back else pre

    # Trust region of the reference implementation: global RMS at most 1, then entries in [-1, 1].
    # The global norm is a whole-tree reduction (statistics dtype); the clip is elementwise and,
    # with the cast to the gradient's dtype, goes through leafwise.
    total = sum(h.size for h in momenta.values())
    norm = l2_norm(list(preconditioned.values()))
    limit = np.asarray(math.sqrt(max(total, 1)), norm.dtype)
    shrink = limit / jnp.maximum(norm, limit)

    def clip(k, g, pre):  # g only gives the update's dtype
      u = pre * k.shrink
      return u / jnp.maximum(jnp.abs(u), 1)

    pre_tree = treedef.unflatten([preconditioned.get(i) for i in range(len(grads))])
    (out,) = self.leafwise(clip, updates, reads=(pre_tree,), scalars=lambda dt: Scalars(shrink=shrink))
    return out, ScaleByPsgdKronState(
        count=count, rng_key=rng_key, mu=treedef.unflatten(new_mus),
        preconditioner=treedef.unflatten(factors))


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
) -> Transformation:
  """Preconditions updates with PSGD's Kronecker-factored whitening preconditioner (``kron``).

  Keeps a momentum ``m`` (bias-corrected) and, per parameter, factors ``Q_i`` with
  ``P = (x)_i Q_i^H Q_i``; with probability ``preconditioner_update_probability`` a step fits the
  factors to whiten ``m`` (one Lie-group step, see the module notes), then returns ``P m`` through
  the trust region (global RMS <= 1, entries in [-1, 1]). Dimensions of size 1 or above
  ``max_size_triangular``, and all dimensions of tensors with fewer than ``min_ndim_triangular``
  dimensions, get diagonal factors.

  Args:
    b1: momentum decay (0 disables momentum).
    preconditioner_update_probability: a probability or a schedule of the count; None is
      ``psgd_update_probability()`` (1 for 500 steps, then decaying to 0.03).
    max_size_triangular: largest dimension with a dense triangular factor.
    min_ndim_triangular: tensors with fewer dimensions get only diagonal factors (vectors by default).
    preconditioner_lr: step size of the factors' Lie-group update.
    preconditioner_init_scale: the initial preconditioner is this times the identity.
    mu_dtype: dtype of the momentum (default: each parameter's dtype).
    preconditioner_dtype: dtype of the factors (default: the computation dtype, at least float32).
    key: a ``jax.random.key``, raw key data or an integer seed for the probes and the draws.

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
  return ScaleByPsgdKron(
      b1, preconditioner_update_probability, preconditioner_lr, preconditioner_init_scale, key,
      max_size_triangular=max_size_triangular, min_ndim_triangular=min_ndim_triangular,
      mu_dtype=mu_dtype, preconditioner_dtype=preconditioner_dtype)
