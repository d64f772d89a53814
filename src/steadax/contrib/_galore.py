"""GaLore: gradient low-rank projection (Zhao et al., ICML 2024).

The gradient ``G`` (``m x n``) of a weight matrix is projected onto the ``r`` leading singular
vectors of a recent gradient, ``R = P^H G`` (``P`` is ``m x r``; ``G P`` with an ``n x r`` projector
when ``m < n``), a base optimizer (Adam by default) runs on the small ``R`` and its update is projected
back, ``P N``. The optimizer state of the matrix shrinks from ``m x n`` to ``r x n`` plus the
projector. ``P`` is recomputed from the current gradient's SVD every ``update_proj_gap`` steps
(Algorithm 2 of the paper).

The SVD and the projections run in at least float32 (float64 for float64 parameters); projectors
are stored in the parameter's dtype, as in Optax. The projection back, the scale and the cast to
the parameter's dtype go through ``leafwise``. Complex matrices use conjugate transposes (Optax
drops the imaginary part before its SVD).
"""

import functools
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from .._core._interface import GradientTransformation
from .._core._transformation import Transformation
from .._core._checks import check_nonnegative
from .._core._combine import chain
from .._core._leafwise import Scalars, _record, place_like, saturating_cast, split_record
from .._core._module import child_field, hyper_field, static_field
from .._core._policy import compute_dtype, hyper, real_dtype, safe_increment, zero_count
from .._core._roles import COUNTER, INNER, OTHER, state_roles
from .._core._tree import cond, is_none
from .._core._types import MaskOrFn, Params, ScalarOrSchedule
from ..transforms._adam import scale_by_adam
from ..transforms._decay import add_decayed_weights
from ..transforms._matrix import (BALANCED_CHUNKS_PER_CORE, conj_t, distribution, from_owners, group_label,
                                  layout_key, on_owners, place_statistic, replicate_whole, shape_groups, sharding_of,
                                  stack, stacked_struct, statistic_sharding, thin_svd, to_owners, unstack)
from ..transforms._scaling import scale_by_learning_rate
from ..transforms._axes import WeightDimensionNumbers, leaf_dims, leaf_paths, matrix_view

__all__ = ["GaLoreDimensionNumbers", "GaLoreState", "scale_by_galore", "galore"]


# GaLore's name for the one dimension-numbers type (``steadax.WeightDimensionNumbers``). GaLore
# names every axis: a batch axis is not supported yet.
GaLoreDimensionNumbers = WeightDimensionNumbers


@state_roles(count=COUNTER, base_optimizer_state=INNER, projector=OTHER)
class GaLoreState(NamedTuple):
  """State of ``scale_by_galore``.

  Attributes:
    count: int32 number of updates.
    base_optimizer_state: the base optimizer's state over the projected (low-rank) gradients, and
      over the full gradients of parameters that are not projected.
    projector: per parameter, the ``(m, r)`` or ``(n, r)`` projector, shape ``(0, 0)`` when not
      projected.
  """

  count: jax.Array
  base_optimizer_state: Params
  projector: Params


def _plan(view, rank: int) -> tuple[int, int, bool, int]:
  m, n = view.fan_in, view.fan_out
  return m, n, m >= n, min(rank, m, n)


def _whole(x: jax.Array) -> jax.Array:
  """A projector or low-rank array stored divided across devices (explicit mesh axes), gathered whole
  for a matrix computed on every device (a divided factor would make its products collectives);
  anything else as it is."""
  return x if distribution(x) is None else replicate_whole(x)[0][0]


def _projection(view, left: bool, r: int, dtype, cdt, low_dtype) -> Callable:
  """``project(refresh, g, p) -> (low, p)`` for a stack of gradients ``g`` (each in its parameter's
  shape) and their stored projectors ``p``: the projectors recomputed from the gradients' SVD where
  ``refresh`` holds (one batched SVD under one cond), and the low-rank gradients ``P^H G`` (or
  ``G P``) in ``low_dtype``, written saturating as ``leafwise`` writes (a projection of 6e4 float16
  gradients can exceed float16's range)."""

  def project(refresh, g, p):
    # Cast in once: the SVD has no 16-bit kernels and the projection accumulates in cdt.
    g2 = jax.vmap(view.to_matrices)(g).astype(cdt)
    if r > 0:
      def fresh():
        u, _, vh = thin_svd(g2)
        # Projectors are stored in the parameter's dtype, as in Optax.
        return (u[..., :r] if left else conj_t(vh[..., :r, :])).astype(dtype)

      p = cond(refresh, fresh, lambda: p)
    pc = p.astype(cdt)  # the stored (possibly 16-bit) projector, read in the compute dtype
    return saturating_cast(conj_t(pc) @ g2 if left else g2 @ pc, low_dtype), p

  return project


def _check_galore(owner: str, rank: Any, update_proj_gap: Any) -> None:
  if not isinstance(rank, int) or isinstance(rank, bool):
    raise TypeError(f"{owner}: rank must be a Python int, got {type(rank).__name__}.")
  if rank <= 0:
    raise ValueError(f"{owner}: rank must be positive, got {rank}.")
  if not isinstance(update_proj_gap, int) or isinstance(update_proj_gap, bool) or update_proj_gap <= 0:
    raise ValueError(f"{owner}: update_proj_gap must be a positive Python int, got {update_proj_gap!r}.")


class ScaleByGalore(Transformation):
  name = "scale_by_galore"
  State = GaLoreState
  base_optimizer: Any = child_field(None)
  scale: Any = hyper_field(1.0)
  rank: int = static_field(default=128)
  update_proj_gap: int = static_field(default=200)
  weight_dimension_numbers: Any = static_field(default=None)

  def __post_init__(self):
    # Static fields have no hyper_field check: validated here, so the class, the factory and
    # .replace all raise.
    _check_galore(self.owner, self.rank, self.update_proj_gap)

  def _dims(self, tree: Any) -> list[Any]:
    spec = self.weight_dimension_numbers
    if spec is None:
      default = lambda x: GaLoreDimensionNumbers() if len(x.shape) == 2 else None
      return leaf_dims(self.owner, "weight_dimension_numbers", None, tree, GaLoreDimensionNumbers, default)
    if isinstance(spec, GaLoreDimensionNumbers):
      return leaf_dims(self.owner, "weight_dimension_numbers", None, tree, GaLoreDimensionNumbers,
                       lambda x: spec if len(x.shape) >= 2 else None)
    return leaf_dims(self.owner, "weight_dimension_numbers", spec, tree, GaLoreDimensionNumbers,
                     lambda x: None)  # unused: spec is given

  def _views(self, tree: Any) -> list[Any]:
    leaves = jax.tree_util.tree_leaves(tree, is_leaf=is_none)
    views = []
    for x, dn, where in zip(leaves, self._dims(tree), leaf_paths(tree)):
      if x is None or dn is None:
        views.append(None)
      else:
        views.append(matrix_view(self.owner, where, tuple(x.shape), dn, allow_batch=False))
    return views

  def init_fn(self, params):
    treedef = jax.tree_util.tree_structure(params, is_leaf=is_none)
    leaves = treedef.flatten_up_to(params)
    projectors, proxies = [], []
    for x, view in zip(leaves, self._views(params)):
      if x is None:
        projectors.append(None)
        proxies.append(None)
      elif view is None:
        projectors.append(jnp.zeros((0, 0), x.dtype))
        proxies.append(x)
      else:
        m, n, left, r = _plan(view, self.rank)
        # On a mesh with explicit axes the projector and the low-rank proxy (so the base optimizer's
        # moments) are stored divided like the parameter (``place_statistic``; docs/sharding.md).
        projectors.append(place_statistic(x, jnp.zeros((m if left else n, r), x.dtype)))
        proxies.append(place_statistic(x, jnp.zeros((r, n) if left else (m, r), x.dtype)))
    proxies = treedef.unflatten(proxies)
    return GaLoreState(count=zero_count(), base_optimizer_state=self.base_optimizer.init(proxies),
                       projector=treedef.unflatten(projectors))

  def update_fn(self, updates, state, params=None, **extra_args):
    treedef = jax.tree_util.tree_structure(updates, is_leaf=is_none)
    grads = treedef.flatten_up_to(updates)
    projectors = treedef.flatten_up_to(state.projector)
    ps = treedef.flatten_up_to(params) if params is not None else [None] * len(grads)
    views = self._views(updates)
    refresh = (state.count % self.update_proj_gap) == 0

    # The projection (Zhao et al. 2024, Algorithm 2) is a matrix part, in the compute dtype of the
    # gradient and its projector (at least float32; float64 for float64 parameters).
    # Shape groups (issue 22): matrices of one shape, view, dtypes and layout are projected as one
    # batch (one batched SVD under one cond), so the program grows with the number of distinct
    # shapes, not with depth; a group of one is the per-parameter path. On a mesh with explicit
    # axes a group of sharded matrices runs in the owner layout (``_matrix.on_owners``): each
    # device computes the SVDs and projections of its own share of the members.
    lows, new_projectors = list(grads), list(projectors)
    wholes: list[Any] = [None] * len(grads)
    keys = [None if g is None or view is None else
            (tuple(g.shape), view.reduction_axes, view.output_axes,
             *((tuple(x.shape), x.dtype, layout_key(x)) for x in (g, p)),
             None if param is None else (param.dtype, layout_key(param)))
            for g, p, param, view in zip(grads, projectors, ps, views)]
    groups = shape_groups(keys, per_core=BALANCED_CHUNKS_PER_CORE)
    owners: dict[int, Any] = {}  # group index -> (its Distribution, its gradients in the owner layout)
    for index, members in enumerate(groups):
      i, count = members[0], len(members)
      view, dtype = views[i], projectors[i].dtype
      _, _, left, r = _plan(view, self.rank)
      project = _projection(view, left, r, dtype, compute_dtype(grads[i].dtype, dtype), grads[i].dtype)
      dist = distribution(grads[i]) if count > 1 and r > 0 else None
      if dist is not None:
        g = to_owners(stack([grads[j] for j in members]), dist)
        owners[index] = (dist, g)
        low, p = on_owners(lambda sh, g, p, project=project: project(sh, g, p), dist, refresh, g,
                           to_owners(stack([projectors[j] for j in members]), dist))
        # Back in the layouts the state has: the low-rank gradient in its statistic layout (that of
        # the proxy the base optimizer's moments were made from), the projector in its own.
        low = from_owners(low, count, statistic_sharding(dist, low.shape[1:]))
        p = from_owners(p, count, sharding_of(projectors[i]))
      else:
        for j in members:
          # The SVD and the products need the whole matrix (sharded axes are gathered once).
          (whole,), (restore,) = replicate_whole(grads[j])
          wholes[j] = (whole, restore)
        low, p = project(refresh, stack([wholes[j][0] for j in members]),
                         stack([_whole(projectors[j]) for j in members]))
      for j, low_j, p_j in zip(members, unstack(low, count), unstack(p, count)):
        # The projector keeps its layout (under automatic mesh axes the compiler would choose one
        # for the cond's result), the low-rank gradient the layout of the base optimizer's state.
        lows[j], new_projectors[j] = place_statistic(grads[j], low_j), place_like(projectors[j], p_j)

    low_updates, base_state = self.base_optimizer.update(
        treedef.unflatten(lows), state.base_optimizer_state, None)
    # The base optimizer's state (moments of the low-rank projections) keeps the layout it was
    # created with.
    base_state = jax.tree_util.tree_map(place_like, state.base_optimizer_state, base_state)
    low_updates = treedef.flatten_up_to(low_updates)

    @functools.cache  # once per real compute dtype, shared by the per-parameter calls below
    def scalars(dt):
      return Scalars(scale=hyper(self.scale, dt))

    def back_fn(view, left):
      def back(k, g, p, low):  # g only gives the update's shape and dtype
        return view.from_matrices(p @ low if left else low @ conj_t(p)) * k.scale
      return back

    out = list(low_updates)
    paths = leaf_paths(updates)
    for index, members in enumerate(groups):
      i, n = members[0], len(members)
      view = views[i]
      back = back_fn(view, _plan(view, self.rank)[2])
      label = group_label([paths[j] for j in members])

      def run(record, g, p, low, rows, back=back, label=label, i=i):
        # Back to the full space, scaled, cast once to the parameter's dtype (a stack of ``rows``).
        (u,) = self.leafwise(
            lambda k, *xs: jax.vmap(lambda *ys: back(k, *ys))(*xs), {label: g},
            params=None if ps[i] is None else {label: stacked_struct(ps[i], rows)},
            reads=({label: p}, {label: low}), scalars=record)
        return u[label]

      if index in owners:
        dist, g = owners[index]
        p, low = (to_owners(stack(xs), dist) for xs in ([new_projectors[j] for j in members],
                                                        [low_updates[j] for j in members]))
        param = ps[i]
        rdt = real_dtype(compute_dtype(*[x.dtype for x in (g, p, low)], *(() if param is None else (param.dtype,))))
        # The scalars enter the manual region as arguments (see _matrix.on_owners).
        traced, rebuild = split_record(_record(scalars, rdt))
        (u,) = on_owners(lambda sh, g, p, low, run=run, rows=g.shape[0] // dist.size: [
            run(lambda dt: rebuild(sh), g, p, low, rows)], dist, traced, g, p, low)
        # Each update in its parameter's layout (tied to it under automatic axes).
        us = unstack(from_owners(u, n, sharding_of(ps[i] if ps[i] is not None else grads[i])), n)
        us = [place_like(grads[j], u) for j, u in zip(members, us)]
      else:
        # Where the gradient was gathered, so are the factors stored divided (``_whole``).
        reads = [(_whole(new_projectors[j]), _whole(low_updates[j])) for j in members]
        if n == 1:
          (u,) = self.leafwise(back, wholes[i][0], params=ps[i], reads=reads[0], scalars=scalars)
          us = [u]
        else:
          us = unstack(run(scalars, stack([wholes[j][0] for j in members]), stack([x[0] for x in reads]),
                           stack([x[1] for x in reads]), n), n)
        us = [wholes[j][1](u) for j, u in zip(members, us)]  # each in its parameter's layout
      for j, u in zip(members, us):
        out[j] = u

    return treedef.unflatten(out), GaLoreState(
        count=safe_increment(state.count), base_optimizer_state=base_state,
        projector=treedef.unflatten(new_projectors))


def scale_by_galore(
    rank: int = 128,
    update_proj_gap: int = 200,
    scale: float = 1.0,
    base_optimizer: GradientTransformation | None = None,
    weight_dimension_numbers: GaLoreDimensionNumbers | Params | Callable[[Params], Params | None] | None = None,
) -> Transformation:
  """Runs ``base_optimizer`` on low-rank projections of the matrix gradients (GaLore).

  Matrix gradients are projected onto ``rank`` leading singular vectors (refreshed every
  ``update_proj_gap`` steps, from the first step on), the base optimizer updates the projection and
  the result is projected back and multiplied by ``scale``. Other parameters go through the base
  optimizer unchanged. The base optimizer must not need ``params`` (it sees low-rank shapes):
  ``scale_by_adam`` and the like, not ``adamw``; use ``galore``'s ``weight_decay`` instead.

  Args:
    rank: the projection rank (a Python int; capped at ``min(m, n)`` per matrix).
    update_proj_gap: steps between projector refreshes.
    scale: multiplier of the projected-back updates.
    base_optimizer: the transformation run in the low-rank space (default ``scale_by_adam()``).
    weight_dimension_numbers: None (2-D parameters are projected), one ``GaLoreDimensionNumbers``
      (for every parameter of rank >= 2), a prefix tree of them and None, or a callable returning
      one from the params.

  Returns:
    A transformation with ``GaLoreState(count, base_optimizer_state, projector)``.

  References:
    Zhao et al., "GaLore: Memory-Efficient LLM Training by Gradient Low-Rank Projection",
    ICML 2024 (arXiv:2403.03507), Algorithm 2.

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> tx = steadax.contrib.scale_by_galore(rank=1)
    >>> state = tx.init({"w": jnp.zeros((4, 3))})
    >>> state.projector["w"].shape, state.base_optimizer_state.mu["w"].shape
    ((4, 1), (1, 3))
  """
  if base_optimizer is None:
    base_optimizer = scale_by_adam()
  return ScaleByGalore(base_optimizer, scale, rank=rank, update_proj_gap=update_proj_gap,
                       weight_dimension_numbers=weight_dimension_numbers)


def galore(
    learning_rate: ScalarOrSchedule,
    rank: int = 128,
    update_proj_gap: int = 200,
    scale: float = 1.0,
    base_optimizer: GradientTransformation | None = None,
    weight_decay: ScalarOrSchedule = 0.0,
    mask: MaskOrFn = None,
    weight_dimension_numbers: GaLoreDimensionNumbers | Params | Callable[[Params], Params | None] | None = None,
) -> Transformation:
  """GaLore: memory-efficient training by gradient low-rank projection (Zhao et al. 2024).

  ``chain(scale_by_galore(...), add_decayed_weights(weight_decay, mask),
  scale_by_learning_rate(learning_rate))``: weight decay acts in the full parameter space.

  Args:
    learning_rate: a scalar or a schedule (use 1.0 if ``base_optimizer`` carries its own).
    rank: the projection rank.
    update_proj_gap: steps between projector refreshes.
    scale: multiplier of the projected-back updates.
    base_optimizer: the low-rank transformation (default ``scale_by_adam()``).
    weight_decay: decoupled weight decay.
    mask: where weight decay applies (tree of booleans or a callable).
    weight_dimension_numbers: which parameters are projected and how (see ``scale_by_galore``).

  Returns:
    The optimizer.

  References:
    Zhao et al., "GaLore: Memory-Efficient LLM Training by Gradient Low-Rank Projection",
    ICML 2024 (arXiv:2403.03507).

  Example:
    >>> import jax.numpy as jnp, steadax
    >>> opt = steadax.contrib.galore(0.1, rank=2)
    >>> params = {"w": jnp.ones((4, 3)), "b": jnp.ones(3)}
    >>> updates, _ = opt.update(params, opt.init(params), params)
    >>> updates["w"].shape
    (4, 3)
  """
  _check_galore("galore", rank, update_proj_gap)
  if not callable(weight_decay):
    check_nonnegative("galore", "weight_decay", weight_decay)
  return chain(
      scale_by_galore(rank, update_proj_gap, scale, base_optimizer, weight_dimension_numbers),
      add_decayed_weights(weight_decay, mask),
      scale_by_learning_rate(learning_rate),
  )
