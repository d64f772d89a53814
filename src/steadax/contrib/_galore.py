"""GaLore: gradient low-rank projection (Zhao et al., ICML 2024).

The gradient ``G`` (``m x n``) of a weight matrix is projected onto the ``r`` leading singular
vectors of a recent gradient, ``R = P^H G`` (``P`` is ``m x r``; ``G P`` with an ``n x r`` projector
when ``m < n``), a base optimizer (Adam by default) runs on the small ``R`` and its update is projected
back, ``P N``. The optimizer state of the matrix shrinks from ``m x n`` to ``r x n`` plus the
projector. ``P`` is recomputed from the current gradient's SVD every ``update_proj_gap`` steps
(Algorithm 2 of the paper).

The SVD and the projections run in the compute dtype (at least float32); projectors are stored in the
parameter's dtype, as in Optax. Complex matrices use conjugate transposes (Optax drops the imaginary
part before its SVD).
"""

import functools
from collections.abc import Callable
from typing import Any, ClassVar, NamedTuple

import jax
import jax.numpy as jnp

from .._core._interface import GradientTransformation
from .._core._transformation import Transformation
from .._core._checks import check_nonnegative, check_positive_int
from .._core._combine import chain
from .._core._docs import shared_args
from .._core._leafwise import Scalars, place_like
from .._core._module import child_field, hyper_field, static_field
from .._core._policy import hyper, safe_increment, zero_count
from .._core._roles import COUNTER, INNER, OTHER, state_roles
from .._core._tree import is_none
from .._core._types import MaskOrFn, Params, ScalarOrSchedule
from ..transforms._adam import scale_by_adam
from ..transforms._axes import WeightDimensionNumbers, leaf_views
from ..transforms._decay import add_decayed_weights
from ..transforms._kron import conj_t, thin_svd
from ..transforms._matrix import place_statistic
from ..transforms._runner import MatrixExecution, refresh_cond, run_matrices
from ..transforms._scaling import scale_by_learning_rate

__all__ = ["GaLoreDimensionNumbers", "GaLoreState", "scale_by_galore", "galore"]


# GaLore's name for the one dimension-numbers type (``steadax.WeightDimensionNumbers``).
GaLoreDimensionNumbers = WeightDimensionNumbers


@state_roles(count=COUNTER, base_optimizer_state=INNER, projector=OTHER)
class GaLoreState(NamedTuple):
  """State of ``scale_by_galore``.

  Attributes:
    count: int32 number of updates.
    base_optimizer_state: the base optimizer's state over the projected (low-rank) gradients, and
      over the full gradients of parameters that are not projected.
    projector: per parameter, the ``(m, r)`` or ``(n, r)`` projector (batch axes leading with
      dimension numbers), shape ``(0, 0)`` when not projected.
  """

  count: jax.Array
  base_optimizer_state: Params
  projector: Params


def _plan(view, rank: int) -> tuple[int, int, bool, int]:
  m, n = view.fan_in, view.fan_out
  return m, n, m >= n, min(rank, m, n)


def _check_rank(owner: str, name: str, rank: Any) -> None:
  if not isinstance(rank, int) or isinstance(rank, bool):
    raise TypeError(f"{owner}: {name} must be a Python int, got {type(rank).__name__}.")
  check_positive_int(owner, name, rank)


class ScaleByGalore(Transformation):
  name = "scale_by_galore"
  State = GaLoreState
  cpu_chunks: ClassVar[tuple] = ("cores", 4)
  two_d: ClassVar[bool] = True  # a matrix per slice, even where a field of its dimension numbers is empty
  rank: int = static_field(default=128, check=_check_rank)
  update_proj_gap: int = static_field(default=200, check=check_positive_int)
  scale: Any = hyper_field(default=1.0)
  base_optimizer: Any = child_field(default=None)
  weight_dimension_numbers: Any = static_field(default=None)
  execution: MatrixExecution = static_field(default=MatrixExecution())

  def _views(self, tree: Any) -> list[Any]:
    return leaf_views(self.owner, self.weight_dimension_numbers, tree, default=GaLoreDimensionNumbers())

  def _state_like(self, tree: Any, views: list, projector: bool) -> Any:
    """Per parameter: its projector (``projector``) or its low-rank stand-in, zeros; for a
    parameter that is not projected a ``(0, 0)`` placeholder or the parameter itself."""
    treedef = jax.tree_util.tree_structure(tree, is_leaf=is_none)

    def one(x, view):
      if x is None or view is None:
        return x if x is None or not projector else jnp.zeros((0, 0), x.dtype)
      m, n, left, r = _plan(view, self.rank)
      shape = (m if left else n, r) if projector else ((r, n) if left else (m, r))
      # On a mesh stored divided like the parameter (``place_statistic``; docs/sharding.md).
      return place_statistic(x, jnp.zeros((*view.batch_shape, *shape), x.dtype), view.batch_axes)

    return treedef.unflatten([one(x, v) for x, v in zip(treedef.flatten_up_to(tree), views)])

  def init_fn(self, params):
    views = self._views(params)
    return GaLoreState(count=zero_count(),
                       base_optimizer_state=self.base_optimizer.init(self._state_like(params, views, False)),
                       projector=self._state_like(params, views, True))

  @staticmethod
  def _project(plan, k, shared, g, p, low):
    # Zhao et al. 2024, Algorithm 2: the projector refreshed from the gradient's SVD every
    # update_proj_gap steps, and the low-rank gradient (``low`` only gives its dtype).
    left, r = plan

    def fresh():
      u, _, vh = thin_svd(g)
      return u[:, :r] if left else conj_t(vh[:r, :])

    p = refresh_cond(shared[0], fresh, p)
    return g, p, conj_t(p) @ g if left else g @ p

  @staticmethod
  def _back(plan, k, shared, g, p, low):  # g only gives the update's shape
    return (p @ low if plan[0] else low @ conj_t(p)) * k.scale, p, low

  def update_fn(self, updates, state, params=None, **extra_args):
    views = self._views(updates)
    treedef = jax.tree_util.tree_structure(updates, is_leaf=is_none)
    grads = treedef.flatten_up_to(updates)
    projected = treedef.unflatten([g if v is not None else None for g, v in zip(grads, views)])
    one_each = lambda tree: treedef.unflatten([(x,) for x in treedef.flatten_up_to(tree)])  # noqa: E731
    taken = lambda tree: [x[0] for x in treedef.flatten_up_to(tree)]  # noqa: E731

    def run(step, matrices, shared=(), scalars=None):
      return run_matrices(self, step, projected, params, views=views, scalars=scalars, shared=shared,
                          plans=[v and _plan(v, self.rank)[2:] for v in views],
                          matrices=tuple(one_each(tree) for tree in matrices))

    # Low-rank gradients, written in the gradient's dtype (as leafwise writes state: saturating).
    _, projectors, lows = run(self._project, (state.projector, self._state_like(updates, views, False)),
                              (state.count % self.update_proj_gap == 0,))
    lows = treedef.unflatten([g if v is None else low for g, v, low in zip(grads, views, taken(lows))])
    low_updates, base_state = self.base_optimizer.update(lows, state.base_optimizer_state, None)
    # The base optimizer's state (moments of the low-rank projections) keeps its layout.
    base_state = jax.tree.map(place_like, state.base_optimizer_state, base_state)
    projectors = treedef.unflatten(taken(projectors))
    scalars = functools.cache(lambda dt: Scalars(scale=hyper(self.scale, dt)))
    out, _, _ = run(self._back, (projectors, low_updates), scalars=scalars)
    out = treedef.unflatten([low if v is None else u for u, v, low in zip(
        treedef.flatten_up_to(out), views, treedef.flatten_up_to(low_updates))])
    return out, GaLoreState(count=safe_increment(state.count), base_optimizer_state=base_state,
                            projector=projectors)


@shared_args
def scale_by_galore(
    rank: int = 128,
    update_proj_gap: int = 200,
    scale: float = 1.0,
    base_optimizer: GradientTransformation | None = None,
    weight_dimension_numbers: GaLoreDimensionNumbers | Params | Callable[[Params], Params | None] | None = None,
    *,
    execution: MatrixExecution = MatrixExecution(),
) -> Transformation:
  """Runs ``base_optimizer`` on low-rank projections of the matrix gradients (GaLore).

  Matrix gradients are projected onto ``rank`` leading singular vectors (refreshed every
  ``update_proj_gap`` steps, from the first step on), the base optimizer updates the projection and
  the result is projected back and multiplied by ``scale``. Other parameters go through the base
  optimizer unchanged. The base optimizer must not need ``params`` (it sees low-rank shapes):
  ``scale_by_adam`` and the like, not ``adamw``; use ``galore``'s ``weight_decay`` instead. By
  default the 2-D parameters are projected.

  Args:
    rank: the projection rank (a Python int; capped at ``min(m, n)`` per matrix).
    update_proj_gap: steps between projector refreshes.
    scale: multiplier of the projected-back updates.
    base_optimizer: the transformation run in the low-rank space (default ``scale_by_adam()``).
    weight_dimension_numbers: <shared>
    execution: <shared>

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
  return ScaleByGalore(rank, update_proj_gap, scale, base_optimizer, weight_dimension_numbers, execution)


@shared_args
def galore(
    learning_rate: ScalarOrSchedule,
    rank: int = 128,
    update_proj_gap: int = 200,
    scale: float = 1.0,
    base_optimizer: GradientTransformation | None = None,
    weight_decay: ScalarOrSchedule = 0.0,
    mask: MaskOrFn = None,
    weight_dimension_numbers: GaLoreDimensionNumbers | Params | Callable[[Params], Params | None] | None = None,
    *,
    execution: MatrixExecution = MatrixExecution(),
) -> Transformation:
  """GaLore: memory-efficient training by gradient low-rank projection (Zhao et al. 2024).

  ``chain(scale_by_galore(...), add_decayed_weights(weight_decay, mask),
  scale_by_learning_rate(learning_rate))``: weight decay acts in the full parameter space. By
  default the 2-D parameters are projected.

  Args:
    learning_rate: a scalar or a schedule (use 1.0 if ``base_optimizer`` carries its own).
    rank: the projection rank (a Python int; capped at ``min(m, n)`` per matrix).
    update_proj_gap: steps between projector refreshes.
    scale: multiplier of the projected-back updates.
    base_optimizer: the low-rank transformation (default ``scale_by_adam()``).
    weight_decay: <shared>
    mask: <shared>
    weight_dimension_numbers: <shared>
    execution: <shared>

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
  if not callable(weight_decay):
    check_nonnegative("galore", "weight_decay", weight_decay)
  return chain(
      scale_by_galore(rank, update_proj_gap, scale, base_optimizer, weight_dimension_numbers, execution=execution),
      add_decayed_weights(weight_decay, mask),
      scale_by_learning_rate(learning_rate),
  )
